//! A scenario's `expected_verdict`: the outcome it declares (a strict expected failure, like a
//! strict xfail), and the rules, reason and step that outcome names.

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

/// What a scenario expects to happen (a strict expected failure, like a strict xfail).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ExpectedOutcome {
    Passed,
    Regressed,
    Improved,
    Missing,
    GridMismatch,
    /// The run itself fails (driver or backend fault, watchdog abort, time-out).
    Failed,
}

/// `expected_verdict: {outcome: regressed, rules: [critic/rewards/mean]}`. `rules` (when
/// given) must be exactly the rules that do not pass; `reason` is a case-insensitive substring
/// of the run's failure reason (or of a failing rule's evidence); `step` is the step the run
/// failed at (or the first failing step of the failing rules).
///
/// `outcome: passed` holds only for a run that completed every step; `outcome: failed` must
/// say which failure it expects (`reason`, a non-empty substring of the run's failure
/// reason), so a crash of another kind never passes for the expected one.
///
/// `margin: {rule: <full rule id>, within: X}` pins how near its threshold a near-threshold
/// self-test lands: the rule (one of `rules`) fails, and none of its failing steps or windows
/// lies further past its band's edge than `X` times the band's tolerance there (the distance
/// from the band's centre, the calibration's mean where the band is calibrated and else the
/// golden, to that edge). For a `seeds:` rule the band is the limit the test put on the seeds'
/// mean: `X` is how far past that limit the mean lies, in units of the distance from the
/// calibrated mean to the limit. Only a band (`golden:`, `stability:`) or a multi-seed test
/// (`seeds:`) has a tolerance to measure; a twin caught by the exact lane or a presence rule
/// needs none, since their threshold is already the smallest change there is (one bit, one
/// missing value) and the twin plants it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, try_from = "RawExpectedVerdict")]
pub struct ExpectedVerdict {
    pub(crate) outcome: ExpectedOutcome,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) rules: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<u64>,
    /// Rules that may fail besides `rules` without a mismatch, each by its full id and with
    /// the reason it may: e.g. a multi-seed self-test's `seed:105/expect:reward-converges`,
    /// one rule of one seed's own verdict. Never a pattern, nor a whole seed (`seed:105`):
    /// either would absorb failures nobody declared.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) may_also_fail: Vec<MayAlsoFail>,
    /// How far past its threshold a near-threshold self-test's rule may fail (see above).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) margin: Option<Margin>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawExpectedVerdict {
    outcome: ExpectedOutcome,
    #[serde(default)]
    rules: Vec<String>,
    #[serde(default)]
    may_also_fail: Vec<MayAlsoFail>,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    step: Option<u64>,
    #[serde(default)]
    margin: Option<Margin>,
}

impl TryFrom<RawExpectedVerdict> for ExpectedVerdict {
    type Error = String;
    fn try_from(r: RawExpectedVerdict) -> Result<Self, String> {
        if r.outcome == ExpectedOutcome::Failed
            && r.reason.as_deref().is_none_or(|s| s.trim().is_empty())
        {
            return Err(
                "`outcome: failed` needs a `reason`: a substring of the run's failure \
                        reason (e.g. `reason: \"HTTP 503\"`), so that only the expected failure \
                        matches"
                    .into(),
            );
        }
        if r.outcome == ExpectedOutcome::Failed && !r.rules.is_empty() {
            return Err(
                "`rules` names failing rules of a judged run; with `outcome: failed` \
                        the run itself fails: use `reason` (and `step`)"
                    .into(),
            );
        }
        if r.reason.as_deref().is_some_and(|s| s.trim().is_empty()) {
            return Err("`reason` must not be empty".into());
        }
        for id in &r.rules {
            check_rule_id("rules", id)?;
        }
        if !r.may_also_fail.is_empty() && r.rules.is_empty() {
            return Err(
                "`may_also_fail` relaxes a list of expected failing `rules`: give `rules` too"
                    .into(),
            );
        }
        if let Some(m) = &r.margin {
            let norm = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
            if !r.rules.iter().any(|id| norm(id) == norm(&m.rule)) {
                return Err(format!(
                    "`margin.rule`: `{}` is not one of `rules`: a margin says how far past its \
                     threshold a rule the scenario expects to fail may lie",
                    m.rule
                ));
            }
        }
        Ok(ExpectedVerdict {
            outcome: r.outcome,
            rules: r.rules,
            reason: r.reason,
            step: r.step,
            may_also_fail: r.may_also_fail,
            margin: r.margin,
        })
    }
}

/// One `may_also_fail` entry: `{rule: <full rule id>, reason: <why it may fail>}`. The rule is
/// a rule of the verdict (`expect:grad-finite`) or a rule inside one seed's own verdict of a
/// multi-seed run (`seed:105/expect:reward-converges`): that seed's `seed:105` rule may then
/// fail, but only when every rule that fails inside it is named so.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct MayAlsoFail {
    pub(crate) rule: String,
    pub(crate) reason: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMayAlsoFail {
    rule: String,
    reason: String,
}

impl MayAlsoFail {
    /// `seed:<S>/<rule id>`: the seed's rule id (`seed:<S>`) and the rule inside it.
    pub(crate) fn in_seed(&self) -> Option<(&str, &str)> {
        let (seed, inner) = self.rule.split_once('/')?;
        seed.starts_with("seed:")
            .then_some((seed.trim(), inner.trim()))
    }
}

impl TryFrom<RawMayAlsoFail> for MayAlsoFail {
    type Error = String;
    fn try_from(r: RawMayAlsoFail) -> Result<Self, String> {
        let key = "may_also_fail";
        if r.reason.trim().is_empty() {
            return Err(format!(
                "`{key}`: `{}` needs a `reason`: why that rule may fail as well",
                r.rule
            ));
        }
        check_rule_id(key, &r.rule)?;
        let entry = MayAlsoFail {
            rule: r.rule,
            reason: r.reason,
        };
        match (entry.rule.split_once(':'), entry.in_seed()) {
            (_, Some((seed, inner))) => {
                let s = seed.trim_start_matches("seed:");
                if s.parse::<u64>().is_err() {
                    return Err(format!(
                        "`{key}`: `{}`: `{seed}` is not a seed (`seed:<S>/<rule id>`, S a number)",
                        entry.rule
                    ));
                }
                check_rule_id(key, inner)?;
                if inner.starts_with("seed:") || inner.starts_with("seeds:") {
                    return Err(format!(
                        "`{key}`: `{}`: a seed's own verdict has no `{}` rule; name a rule of \
                         that seed's run (`expect:...`, `golden:...`, `presence:...`)",
                        entry.rule,
                        inner.split(':').next().unwrap_or_default()
                    ));
                }
            }
            (Some(("seed", _)), None) => {
                return Err(format!(
                    "`{key}`: `{}` names a whole seed, which would absorb any failure inside it: \
                     name the rule inside that seed which may fail (`{}/expect:<name>`)",
                    entry.rule, entry.rule
                ))
            }
            _ => {}
        }
        Ok(entry)
    }
}

impl<'de> Deserialize<'de> for MayAlsoFail {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Entry;
        impl<'de> Visitor<'de> for Entry {
            type Value = MayAlsoFail;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("`{rule: <full rule id>, reason: <why it may fail>}`")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<MayAlsoFail, E> {
                let whole_seed = s.strip_prefix("seed:").is_some_and(|n| !n.contains('/'));
                Err(E::custom(if whole_seed {
                    format!(
                        "`may_also_fail`: `{s}` names a whole seed, which would absorb any \
                         failure inside it: name the rule inside that seed which may fail, with \
                         the reason it may (`{{rule: \"{s}/expect:<name>\", reason: \"...\"}}`)"
                    )
                } else {
                    format!(
                        "`may_also_fail`: `{s}` gives no reason: write `{{rule: \"{s}\", \
                         reason: \"...\"}}`, the reason it may fail as well"
                    )
                }))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<MayAlsoFail, A::Error> {
                let raw = RawMayAlsoFail::deserialize(de::value::MapAccessDeserializer::new(map))?;
                MayAlsoFail::try_from(raw).map_err(de::Error::custom)
            }
        }
        d.deserialize_any(Entry)
    }
}

/// `margin: {rule: <full rule id>, within: X}` (see [`ExpectedVerdict`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RawMargin")]
pub(crate) struct Margin {
    pub(crate) rule: String,
    pub(crate) within: f64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMargin {
    rule: String,
    within: f64,
}

/// The kinds of rule whose evidence has a band and so a tolerance to measure a margin in.
const MARGIN_KINDS: &[&str] = &["golden", "stability", "seeds"];

impl TryFrom<RawMargin> for Margin {
    type Error = String;
    fn try_from(r: RawMargin) -> Result<Self, String> {
        check_rule_id("margin.rule", &r.rule)?;
        let kind = r.rule.split(':').next().unwrap_or_default();
        if !MARGIN_KINDS.contains(&kind) {
            return Err(format!(
                "`margin.rule`: `{}` has no tolerance to measure a margin in: only a band \
                 (`golden:`, `stability:`) or a multi-seed test (`seeds:`) has one (the exact \
                 lane's and a presence rule's threshold is one bit, one missing value)",
                r.rule
            ));
        }
        if !(r.within.is_finite() && r.within > 0.0) {
            return Err(format!(
                "`margin.within`: {} is not a positive number (how far past the threshold the \
                 rule may fail, in units of its tolerance: e.g. 0.5)",
                r.within
            ));
        }
        Ok(Margin {
            rule: r.rule,
            within: r.within,
        })
    }
}

/// The kinds of rule a verdict holds, by the prefix of their ids.
pub(crate) const RULE_KINDS: &[&str] = &[
    "golden",
    "expect",
    "presence",
    "stability",
    "weight_sync",
    "seeds",
    "seed",
    "exact",
    "sanity",
    "replay",
    "loosened",
    "watchdog",
];

/// An `expected_verdict` entry must be one rule's full id (`golden:critic/rewards/mean`,
/// `expect:grad-finite`, `stability:actor/entropy`, `seed:3`): a bare metric name would also
/// stand for its `presence:`, `stability:` and `seeds:` rules, and a wildcard for any rule.
fn check_rule_id(key: &str, id: &str) -> Result<(), String> {
    if id.contains('*') {
        return Err(format!(
            "`{key}`: `{id}` is a pattern; name each rule by its full id (a wildcard would \
             absorb failures nobody declared)"
        ));
    }
    match id.split_once(':') {
        Some((kind, rest)) if RULE_KINDS.contains(&kind) && !rest.trim().is_empty() => Ok(()),
        _ => Err(format!(
            "`{key}`: `{id}` is not a full rule id: write `<kind>:<name>` with kind one of {} \
             (e.g. `golden:{id}` or `expect:{id}`)",
            RULE_KINDS.join(", ")
        )),
    }
}
