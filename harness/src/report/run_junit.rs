//! A run's `junit.xml`: one test suite per scenario, one test case per rule. Failures carry
//! the evidence; skipped scenarios are skipped test cases. Written by the one JUnit writer
//! (`junit.rs`).

use super::junit::{to_xml, Case, CaseStatus, Junit, Problem, Suite};
use super::{band_text, opt_num, status_text, Headline, Report};
use crate::judge::{RuleStatus, RuleVerdict};

fn evidence_text(x: &RuleVerdict) -> String {
    let e = &x.evidence;
    let mut parts = vec![format!("{}: {}", status_text(x.status), e.message)];
    if let Some(at) = &e.step_or_window {
        parts.push(format!("at {at}"));
    }
    if e.value.is_some() {
        parts.push(format!("value {}", opt_num(e.value)));
    }
    if e.golden.is_some() {
        parts.push(format!("golden {}", opt_num(e.golden)));
    }
    if let Some(b) = &e.band {
        parts.push(format!("band {}", band_text(b)));
    }
    if e.margin.is_some() {
        parts.push(format!("margin {}", opt_num(e.margin)));
    }
    parts.join("; ")
}

/// One scenario's suite.
fn suite(r: &Report) -> Suite {
    let case = |name: &str, status: CaseStatus| Case::new(name, r.scenario.as_str(), status);
    let mut cases = Vec::new();
    if let Some(reason) = &r.skipped {
        let skip = CaseStatus::Skip {
            message: Some(reason.clone()),
        };
        cases.push(case("scenario", skip));
        return Suite {
            name: r.scenario.clone(),
            cases,
        };
    }
    let expected = r.expected_match();
    let expected_ok = matches!(expected, Some(Ok(())));
    let headline = r.headline();

    // The run itself.
    let run_status = match headline {
        Headline::RunFailed => CaseStatus::Error(Problem::said(r.summary())),
        _ => CaseStatus::Pass,
    };
    let mut run_case = case("run", run_status);
    let mut out = String::new();
    for n in &r.notes {
        out.push_str(&format!("note: {n}\n"));
    }
    if let Some(tail) = &r.trainer_tail {
        out.push_str(tail);
    }
    run_case.out = (!out.is_empty()).then_some(out);
    cases.push(run_case);

    if let Some(v) = &r.verdict {
        for x in &v.rules {
            // A declared, matched failure is the scenario working as intended.
            let status = if x.status == RuleStatus::Pass || expected_ok {
                CaseStatus::Pass
            } else {
                CaseStatus::Fail(Problem::said(evidence_text(x)))
            };
            let mut c = case(&x.rule, status);
            if expected_ok && x.status != RuleStatus::Pass {
                c.out = Some(format!("expected failure: {}", evidence_text(x)));
            }
            cases.push(c);
        }
        if let Some(g) = &v.grid_mismatch {
            let status = if expected_ok {
                CaseStatus::Pass
            } else {
                CaseStatus::Fail(Problem::said(g.as_str()))
            };
            cases.push(case("step grid", status));
        }
    }
    if headline == Headline::NoGolden {
        cases.push(case("golden", CaseStatus::Fail(Problem::said(r.summary()))));
    }
    if let Some(m) = expected {
        let status = match m {
            Ok(()) => CaseStatus::Pass,
            Err(why) => CaseStatus::Fail(Problem::said(why.0)),
        };
        cases.push(case("expected verdict", status));
    }
    Suite {
        name: r.scenario.clone(),
        cases,
    }
}

/// All scenarios of one invocation in one JUnit document.
pub(crate) fn render_junit(reports: &[Report]) -> String {
    to_xml(&Junit {
        name: "rlharness".into(),
        time: None,
        suites: reports.iter().map(suite).collect(),
    })
}
