//! The expression language's unit tests: parsing, printing back, evaluation, failing fast.

use super::*;
use crate::model::metrics::{MetricTable, StepRange};

fn table(metric: &str, values: &[f64]) -> MetricTable {
    MetricTable::from_columns(&[(metric, values)])
}

#[test]
fn parses_the_documented_examples() {
    for src in [
        "mean(critic/rewards/mean, last 5) >= mean(critic/rewards/mean, first 5) + 0.2",
        "max(perf/mfu/actor) <= 1",
        "all(actor/grad_norm, finite)",
        "all(perf/mfu/actor, > 0, steps 2..)",
        "any(val-core/openai/gsm8k/acc/mean@1, >= 0.5)",
        "count(actor/grad_norm, > 10) <= 1 and std(x, steps 1..4) < 0.1 or not last(y) == 2",
        "(min(a) > -1e-3) and (sum(b) / 2 - -3 * (first(c)) != 0.5)",
        "mean(\"weird name:with colon\") > .5",
    ] {
        let e = parse_expr(src).unwrap_or_else(|e| panic!("{src}: {e}"));
        // The canonical form parses back to the same tree.
        let again = parse_expr(&e.to_string()).unwrap();
        assert_eq!(e, again, "{src} -> {e}");
    }
}

#[test]
fn precedence_and_associativity() {
    let e = parse_expr("1 - 2 - 3 == 1 - (2 - 3) * 2 / 4").unwrap();
    assert_eq!(e.to_string(), "1 - 2 - 3 == 1 - (2 - 3) * 2 / 4");
    let t = MetricTable::new();
    // -4 == 1.5 is false.
    assert!(!e.evaluate(&t).unwrap().holds);
    let e = parse_expr("1 < 2 or 1 > 2 and 3 > 4").unwrap();
    assert!(matches!(e, Expr::Or(_)));
    assert!(e.evaluate(&t).unwrap().holds);
    let e = parse_expr("not 1 < 2").unwrap();
    assert!(!e.evaluate(&t).unwrap().holds);
}

#[test]
fn bad_expressions_name_the_column() {
    let cases = [
        ("max(perf/mfu/actor) <=", 23, "expected a value"),
        ("mean(x, last 0) > 1", 14, "0 steps"),
        ("mean(x, steps 5..2) > 1", 9, "empty step range"),
        ("median(x) > 1", 1, "expected"),
        ("max(x) <= 1 andd min(x) > 0", 13, "expected"),
        ("all(x) ", 6, "expected"),
        ("mean(x, last 5)", 16, "comparison"),
        ("", 1, "expected"),
    ];
    for (src, column, needle) in cases {
        let e = parse_expr(src).expect_err(src);
        assert_eq!(e.column, column, "{src}: {e}");
        assert!(e.message.contains(needle), "{src}: {e}");
    }
}

#[test]
fn evaluates_windows_and_quantifiers() {
    let t = table("r", &[0.0, 0.1, 0.2, 0.5, 0.6, 0.7]);
    let e = parse_expr("mean(r, last 2) >= mean(r, first 2) + 0.5").unwrap();
    let ev = e.evaluate(&t).unwrap();
    assert!(ev.holds);
    assert!((ev.lhs.unwrap() - 0.65).abs() < 1e-12);
    assert!((ev.rhs.unwrap() - 0.55).abs() < 1e-12);
    assert_eq!(fmt_num(1e-7), "1.0000e-7");
    assert_eq!(fmt_num(-2.5), "-2.5");
    assert!(ev.trace[0].starts_with("mean(r, last 2) = 0.65"));
    assert!(
        parse_expr("sum(r, steps 2..3) > 0.29")
            .unwrap()
            .evaluate(&t)
            .unwrap()
            .holds
    );
    assert!(
        parse_expr("count(r, > 0.4) == 3")
            .unwrap()
            .evaluate(&t)
            .unwrap()
            .holds
    );
    let ev = parse_expr("all(r, < 0.55)").unwrap().evaluate(&t).unwrap();
    assert!(!ev.holds);
    assert_eq!(ev.step, Some(5));
    assert!(
        parse_expr("any(r, > 0.65)")
            .unwrap()
            .evaluate(&t)
            .unwrap()
            .holds
    );
    let std = parse_expr("std(r, first 2) == 0.05")
        .unwrap()
        .evaluate(&t)
        .unwrap();
    assert!(std.holds, "{std:?}");
}

#[test]
fn nan_never_passes() {
    let t = table("g", &[1.0, f64::NAN, 2.0]);
    for src in [
        "max(g) <= 100",
        "max(g) != 5",
        "mean(g) > -1",
        "all(g, finite)",
        "all(g, > 0)",
        "not min(g) < 0 and min(g) >= 0",
    ] {
        let ev = parse_expr(src).unwrap().evaluate(&t).unwrap();
        assert!(!ev.holds, "{src}");
    }
}

#[test]
fn missing_metric_or_empty_selection_is_missing() {
    let t = table("g", &[1.0]);
    let e = parse_expr("max(h) < 1").unwrap();
    assert!(
        matches!(e.evaluate(&t), Err(EvalIssue::Missing(m)) if m.contains("`h`")),
        "missing metric"
    );
    let e = parse_expr("mean(g, steps 5..) < 1").unwrap();
    assert!(matches!(e.evaluate(&t), Err(EvalIssue::Missing(_))));
    assert_eq!(e.metrics(), vec!["g".to_string()]);
}

#[test]
fn fail_fast_decides_only_what_is_settled() {
    let partial = table("x", &[0.5, 1.5]);
    let nan = table("x", &[0.5, f64::NAN]);
    for (src, t, can_hold) in [
        // max can only grow: already above the limit.
        ("max(x) <= 1", &partial, false),
        // min can only shrink: still undecided.
        ("min(x) >= 1", &partial, false),
        ("min(x) <= 0", &partial, true),
        // a mean over the whole run is undecided until the end.
        ("mean(x) > 5", &partial, true),
        // a finished window is final.
        ("mean(x, first 2) > 5", &partial, false),
        // a NaN is final for all(.., finite) and for any aggregate over it.
        ("all(x, finite)", &nan, false),
        ("max(x) <= 1", &nan, false),
        // a NaN outside the final `last 3` window does not decide it.
        ("all(x, finite, last 3)", &nan, true),
        // or: one undecided side keeps it alive.
        ("max(x) <= 1 or mean(x) > 0", &partial, true),
    ] {
        assert_eq!(
            parse_expr(src).unwrap().can_still_hold(t, 10),
            can_hold,
            "{src}"
        );
    }
}
mod props {
    use super::*;
    use proptest::prelude::*;

    fn metric() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("critic/rewards/mean".to_string()),
            Just("val-core/openai/gsm8k/acc/mean@1".to_string()),
            Just("timing_s/step".to_string()),
            Just("odd name:1".to_string()),
        ]
    }

    fn selection() -> impl Strategy<Value = Selection> {
        prop_oneof![
            Just(Selection::All),
            (1u64..50).prop_map(Selection::Last),
            (1u64..50).prop_map(Selection::First),
            (
                proptest::option::of(0u64..20),
                proptest::option::of(20u64..40)
            )
                .prop_map(|(from, to)| Selection::Steps(StepRange { from, to })),
        ]
    }

    fn cmp_op() -> impl Strategy<Value = CmpOp> {
        prop_oneof![
            Just(CmpOp::Lt),
            Just(CmpOp::Le),
            Just(CmpOp::Gt),
            Just(CmpOp::Ge),
            Just(CmpOp::Eq),
            Just(CmpOp::Ne),
        ]
    }

    fn num() -> impl Strategy<Value = Num> {
        let agg = prop_oneof![
            Just(AggFn::Mean),
            Just(AggFn::Min),
            Just(AggFn::Max),
            Just(AggFn::Last),
            Just(AggFn::First),
            Just(AggFn::Sum),
            Just(AggFn::Std),
        ];
        let leaf = prop_oneof![
            (0u32..1000).prop_map(|v| Num::Const(f64::from(v) / 8.0)),
            (agg, metric(), selection()).prop_map(|(func, metric, sel)| Num::Agg {
                func,
                metric,
                sel
            }),
            (metric(), selection()).prop_map(|(metric, sel)| Num::Count {
                metric,
                pred: Some(Pred::Finite),
                sel
            }),
        ];
        leaf.prop_recursive(3, 16, 2, |inner| {
            let op = prop_oneof![
                Just(ArithOp::Add),
                Just(ArithOp::Sub),
                Just(ArithOp::Mul),
                Just(ArithOp::Div),
            ];
            prop_oneof![
                inner.clone().prop_map(|n| Num::Neg(Box::new(n))),
                (op, inner.clone(), inner).prop_map(|(op, a, b)| Num::Bin(
                    op,
                    Box::new(a),
                    Box::new(b)
                )),
            ]
        })
    }

    fn expr() -> impl Strategy<Value = Expr> {
        let leaf = prop_oneof![
            (num(), cmp_op(), num()).prop_map(|(a, op, b)| Expr::Cmp(a, op, b)),
            (any::<bool>(), metric(), selection()).prop_map(|(all, metric, sel)| {
                Expr::Quant {
                    all,
                    metric,
                    pred: Pred::Finite,
                    sel,
                }
            }),
        ];
        leaf.prop_recursive(3, 12, 3, |inner| {
            prop_oneof![
                inner.clone().prop_map(|e| Expr::Not(Box::new(e))),
                proptest::collection::vec(inner.clone(), 2..4).prop_map(Expr::And),
                proptest::collection::vec(inner, 2..4).prop_map(Expr::Or),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// The printer and the grammar agree: what is displayed parses back to the tree.
        #[test]
        fn display_parses_back(e in expr()) {
            let text = e.to_string();
            let back = parse_expr(&text).map_err(|err| TestCaseError::fail(format!("{text}: {err}")))?;
            prop_assert_eq!(back, e, "{}", text);
        }

        /// Arbitrary input never panics, and an error points inside (or just past) it.
        #[test]
        fn garbage_is_an_error_not_a_panic(src in "[ -~]{0,40}") {
            if let Err(e) = parse_expr(&src) {
                prop_assert!(e.column >= 1 && e.column <= src.chars().count() + 1);
            }
        }
    }
}
