//! The scenario's `checks` block and `expected_verdict`: serde types that validate while they
//! deserialize, so the spec loader's file:line errors cover bad rules and bad expressions.

use std::fmt;

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::expr::{parse_expr, Expr};
pub(crate) use crate::model::metrics::StepRange;

/// Which way a metric is allowed to move.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Direction {
    /// Any move outside the band fails (losses, rewards of a deterministic backend).
    #[default]
    TwoSided,
    /// Only a drop fails (MFU, throughput).
    HigherIsBetter,
    /// Only a rise fails (step time, memory).
    LowerIsBetter,
}

/// How far past the band a one-sided rule's good side may go before the change is reported
/// `improved` (and fails until blessed): a fraction of |golden|, or `unlimited` (the good side
/// never fails, e.g. a validation score). Absent, the limit is the band's own tolerance.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum ImprovementLimit {
    Fraction(f64),
    Unlimited,
}

impl Serialize for ImprovementLimit {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            ImprovementLimit::Fraction(f) => s.serialize_f64(*f),
            ImprovementLimit::Unlimited => s.serialize_str("unlimited"),
        }
    }
}

impl<'de> Deserialize<'de> for ImprovementLimit {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = ImprovementLimit;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a fraction of |golden| such as 0.2, or `unlimited`")
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<ImprovementLimit, E> {
                if !v.is_finite() || v < 0.0 {
                    return Err(E::custom(format!(
                        "`improvement_limit` must be a finite number >= 0 or `unlimited`, got {v}"
                    )));
                }
                Ok(ImprovementLimit::Fraction(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ImprovementLimit, E> {
                self.visit_f64(v as f64)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ImprovementLimit, E> {
                self.visit_f64(v as f64)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ImprovementLimit, E> {
                match v {
                    "unlimited" => Ok(ImprovementLimit::Unlimited),
                    other => Err(E::custom(format!(
                        "`improvement_limit` must be a number or `unlimited`, got `{other}`"
                    ))),
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// One metric's rule against the golden series.
///
/// The band at a point is `golden ± max(abs, rel·|golden|)` (a rule with neither compares
/// exactly, which suits deterministic backends). `direction` says which side is bad: absent,
/// the metric's default direction applies (`judge::direction`: rewards, scores, MFU and
/// throughput higher is better; step time and memory lower; the rest two-sided). Beyond the
/// band on the bad side a point is `regressed`; beyond it on the good side by more than
/// `improvement_limit` (a fraction of |golden|; absent, the band's own tolerance) it is
/// `improved` and fails until blessed, so a change too good to be true is never silent. A point is one step, or with `window`
/// the mean of `window` consecutive compared steps (a trailing shorter window counts too).
/// `budget` points may fall outside the band (per kind: regressed, improved) before the rule
/// fails. `fail_fast` lets the runner stop as soon as the rule can no longer pass.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, try_from = "RawGoldenRule")]
pub struct GoldenRule {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) abs: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) rel: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) window: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) steps: Option<StepRange>,
    #[serde(skip_serializing_if = "is_zero")]
    pub(crate) budget: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) direction: Option<Direction>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) improvement_limit: Option<ImprovementLimit>,
    #[serde(skip_serializing_if = "is_false")]
    pub(crate) fail_fast: bool,
    /// The band from measured noise (`rlharness golden calibrate`) instead of `abs`/`rel`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) calibrated: Option<Calibrated>,
    /// A window's point is the median of its steps instead of their mean: one spike (a
    /// gradient-norm outlier, a slow step of a noisy machine) does not move it.
    #[serde(skip_serializing_if = "is_false")]
    pub(crate) median: bool,
    /// The band's lower edge is never below this fraction of the golden's |value|: a default
    /// stability rule of a metric that is positive in a healthy run (a gradient norm, an
    /// entropy) always fails at 0, however noisy its calibration (`judge::stability`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) keep_above: Option<f64>,
    /// A `calibrated` rule's bands, set by the judge from the golden's calibration (never
    /// written by a user): per window, its centre (the calibration's mean) and half-width.
    #[serde(skip)]
    pub(crate) window_bands: Option<Vec<WindowBand>>,
}

/// One window's calibrated band: `centre ± half`, for the window `first..=last` of the
/// golden's steps; with `log`, both on the log scale (the band is `exp(centre ± half)`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct WindowBand {
    pub(crate) first: u64,
    pub(crate) last: u64,
    pub(crate) centre: f64,
    pub(crate) half: f64,
    pub(crate) log: bool,
}

impl GoldenRule {
    /// The point of a window: its mean, or with `median` its median (a NaN poisons either).
    pub(crate) fn window_value(&self, values: &[f64]) -> f64 {
        window_value(values, self.median)
    }
}

/// The mean of `values`, or their median; NaN when any is NaN or there are none.
pub(crate) fn window_value(values: &[f64], median: bool) -> f64 {
    if values.is_empty() || values.iter().any(|v| v.is_nan()) {
        return f64::NAN;
    }
    if !median {
        return values.iter().sum::<f64>() / values.len() as f64;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// `calibrated: {floor: 0.02}`: each window's band is the calibration's mean of that window ±
/// max(k × σ × √(1 + 1/n), floor), with that window's σ and n, and k the two-sided Student's
/// t quantile of the window's share of the run's false-alarm budget (`checks.alpha`) at n − 1
/// degrees of freedom (`judge::budget`). A `k` written by hand replaces that quantile and
/// takes the rule out of the budget (`check` says so). `log: true` judges the window on the
/// log scale (a positive, skewed metric: a gradient norm, a step time): the band is then
/// `exp(mean(ln x) ± k × sd(ln x) × √(1 + 1/n))`, a factor either way.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Calibrated {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) k: Option<f64>,
    #[serde(default)]
    pub(crate) floor: f64,
    #[serde(default, skip_serializing_if = "is_false")]
    pub(crate) log: bool,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}
fn is_false(v: &bool) -> bool {
    !*v
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGoldenRule {
    #[serde(default)]
    abs: Option<f64>,
    #[serde(default)]
    rel: Option<f64>,
    #[serde(default)]
    window: Option<u64>,
    #[serde(default)]
    steps: Option<StepRange>,
    #[serde(default)]
    budget: u64,
    #[serde(default)]
    direction: Option<Direction>,
    #[serde(default)]
    improvement_limit: Option<ImprovementLimit>,
    #[serde(default)]
    fail_fast: bool,
    #[serde(default)]
    calibrated: Option<Calibrated>,
    #[serde(default)]
    median: bool,
    #[serde(default)]
    keep_above: Option<f64>,
}

impl TryFrom<RawGoldenRule> for GoldenRule {
    type Error = String;
    fn try_from(r: RawGoldenRule) -> Result<Self, String> {
        for (name, v) in [("abs", r.abs), ("rel", r.rel)] {
            if let Some(v) = v {
                if !v.is_finite() || v < 0.0 {
                    return Err(format!("`{name}` must be a finite number >= 0, got {v}"));
                }
            }
        }
        if r.window == Some(0) {
            return Err("`window` must be at least 1 step".into());
        }
        if let Some(f) = r.keep_above {
            if !(f.is_finite() && f > 0.0 && f < 1.0) {
                return Err(format!(
                    "`keep_above` is a fraction of the golden's value, in (0, 1), got {f}"
                ));
            }
        }
        if let Some(c) = r.calibrated {
            let k_ok = c.k.is_none_or(|k| k.is_finite() && k > 0.0);
            if !(k_ok && c.floor.is_finite() && c.floor >= 0.0) {
                return Err(format!(
                    "`calibrated` needs k > 0 (or no k: the run's budget sizes it) and floor >= 0, \
                     got k {} and floor {}",
                    c.k.map_or("-".into(), |k| k.to_string()),
                    c.floor
                ));
            }
            if r.abs.is_some() || r.rel.is_some() {
                return Err("`calibrated` replaces `abs` and `rel`: give one or the other".into());
            }
        }
        if r.improvement_limit.is_some() && r.direction == Some(Direction::TwoSided) {
            return Err(
                "`improvement_limit` needs `direction: higher_is_better` or \
                        `lower_is_better` (a two-sided rule already fails on any move)"
                    .into(),
            );
        }
        Ok(GoldenRule {
            abs: r.abs,
            rel: r.rel,
            window: r.window,
            steps: r.steps,
            budget: r.budget,
            direction: r.direction,
            improvement_limit: r.improvement_limit,
            fail_fast: r.fail_fast,
            calibrated: r.calibrated,
            median: r.median,
            keep_above: r.keep_above,
            window_bands: None,
        })
    }
}

/// The golden rules in the order the scenario lists them (a report reads in that order).
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct GoldenRules(pub(crate) Vec<(String, GoldenRule)>);

impl GoldenRules {
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&str, &GoldenRule)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }
    pub(crate) fn get(&self, metric: &str) -> Option<&GoldenRule> {
        self.0.iter().find(|(k, _)| k == metric).map(|(_, r)| r)
    }
}

impl Serialize for GoldenRules {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(k, v)| (k, v)))
    }
}

impl<'de> Deserialize<'de> for GoldenRules {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = GoldenRules;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map from metric name to rule")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<GoldenRules, A::Error> {
                let mut out: Vec<(String, GoldenRule)> = Vec::new();
                while let Some(k) = m.next_key::<String>()? {
                    if out.iter().any(|(x, _)| *x == k) {
                        return Err(de::Error::custom(format!(
                            "metric `{k}` has two golden rules"
                        )));
                    }
                    let v = m.next_value::<GoldenRule>()?;
                    if v.improvement_limit.is_some()
                        && v.resolved(&k).direction == Some(Direction::TwoSided)
                    {
                        return Err(de::Error::custom(format!(
                            "`{k}`: `improvement_limit` needs `direction: higher_is_better` or \
                             `lower_is_better` (`{k}` is two-sided by default, and a two-sided \
                             rule already fails on any move)"
                        )));
                    }
                    out.push((k, v));
                }
                Ok(GoldenRules(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// A convergence expression over the run alone. Written as a plain string, or as a map
/// `{expr: "...", name: short-name, fail_fast: true}`.
#[derive(Debug, Clone, PartialEq)]
pub struct Expectation {
    pub(crate) src: String,
    pub(crate) expr: Expr,
    pub(crate) name: Option<String>,
    pub(crate) fail_fast: bool,
}

impl Expectation {
    pub(crate) fn parse(src: &str) -> Result<Expectation, String> {
        let expr = parse_expr(src).map_err(|e| format!("invalid expression `{src}`: {e}"))?;
        Ok(Expectation {
            src: src.to_string(),
            expr,
            name: None,
            fail_fast: false,
        })
    }

    /// The rule id in verdicts: `expect:<name>` or `expect:<source>`.
    pub(crate) fn id(&self) -> String {
        format!("expect:{}", self.name.as_deref().unwrap_or(&self.src))
    }
}

impl Serialize for Expectation {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        if self.name.is_none() && !self.fail_fast {
            return s.serialize_str(&self.src);
        }
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("expr", &self.src)?;
        if let Some(n) = &self.name {
            m.serialize_entry("name", n)?;
        }
        if self.fail_fast {
            m.serialize_entry("fail_fast", &true)?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for Expectation {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Expectation;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an expression string, or a map with `expr`, `name`, `fail_fast`")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Expectation, E> {
                Expectation::parse(v).map_err(E::custom)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Expectation, A::Error> {
                let mut src: Option<String> = None;
                let mut name = None;
                let mut fail_fast = false;
                while let Some(k) = m.next_key::<String>()? {
                    match k.as_str() {
                        "expr" => src = Some(m.next_value()?),
                        "name" => name = Some(m.next_value()?),
                        "fail_fast" => fail_fast = m.next_value()?,
                        other => {
                            return Err(de::Error::unknown_field(
                                other,
                                &["expr", "name", "fail_fast"],
                            ))
                        }
                    }
                }
                let src = src.ok_or_else(|| de::Error::missing_field("expr"))?;
                let mut e = Expectation::parse(&src).map_err(de::Error::custom)?;
                e.name = name;
                e.fail_fast = fail_fast;
                Ok(e)
            }
        }
        d.deserialize_any(V)
    }
}

/// The scenario's `checks` block: rules against the golden, expressions over the run, and
/// `allow_missing`: golden metrics the run need not have at every golden step (every other
/// metric of the golden must be present at each golden step the run reached).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChecksSpec {
    #[serde(default, skip_serializing_if = "GoldenRules::is_empty")]
    pub(crate) golden: GoldenRules,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) expect: Vec<Expectation>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) allow_missing: Vec<String>,
    /// Default stability rules (`judge::stability`): on for a scenario tagged `convergence`
    /// unless it says `stability: false`; resolved when the scenario loads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) stability: Option<bool>,
    /// The run's false-alarm budget: the probability that a healthy run fails its verdict
    /// (exit 1), shared by every calibrated test (`judge::budget`); 0.01 when absent.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "alpha_in_range"
    )]
    pub(crate) alpha: Option<f64>,
}

/// The run's default false-alarm budget.
pub(crate) const DEFAULT_ALPHA: f64 = 0.01;

fn alpha_in_range<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    let a = f64::deserialize(d)?;
    if !(a > 0.0 && a < 0.5) {
        return Err(serde::de::Error::custom(format!(
            "`alpha` is the run's false-alarm rate, in (0, 0.5), got {a}"
        )));
    }
    Ok(Some(a))
}

/// One rule of a `ChecksSpec`, for code that walks all of them (fail fast, reports).
#[derive(Debug, Clone, Copy)]
pub enum RuleRef<'a> {
    Golden(&'a str, &'a GoldenRule),
    Expect(&'a Expectation),
}

impl RuleRef<'_> {
    pub(crate) fn id(&self) -> String {
        match self {
            RuleRef::Golden(m, _) => format!("golden:{m}"),
            RuleRef::Expect(e) => e.id(),
        }
    }
    pub(crate) fn fail_fast(&self) -> bool {
        match self {
            RuleRef::Golden(_, r) => r.fail_fast,
            RuleRef::Expect(e) => e.fail_fast,
        }
    }
}

impl ChecksSpec {
    /// The run's false-alarm budget (`alpha`, or [`DEFAULT_ALPHA`]).
    pub(crate) fn alpha(&self) -> f64 {
        self.alpha.unwrap_or(DEFAULT_ALPHA)
    }

    pub(crate) fn rules(&self) -> Vec<RuleRef<'_>> {
        let mut v: Vec<RuleRef<'_>> = self
            .golden
            .iter()
            .map(|(m, r)| RuleRef::Golden(m, r))
            .collect();
        v.extend(self.expect.iter().map(RuleRef::Expect));
        v
    }

    /// Every metric a rule or an expression reads, golden rules first, without repeats.
    pub(crate) fn metrics(&self) -> Vec<String> {
        let mut out: Vec<String> = self.golden.iter().map(|(m, _)| m.to_string()).collect();
        for e in &self.expect {
            for m in e.expr.metrics() {
                if !out.contains(&m) {
                    out.push(m);
                }
            }
        }
        out
    }
}

/// Whether a scenario gets the default stability rules: `checks.stability` when it says, else
/// whether it is tagged `convergence` (resolved when the scenario loads).
pub(crate) fn stability_enabled_for(explicit: Option<bool>, tags: &[String]) -> bool {
    explicit.unwrap_or_else(|| tags.iter().any(|t| t == "convergence"))
}
