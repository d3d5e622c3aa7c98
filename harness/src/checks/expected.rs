//! A scenario's `expected_verdict`: the outcome it declares (a strict expected failure, like a
//! strict xfail), and the rules, reason and step that outcome names.

use serde::{Deserialize, Serialize};

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
    /// Rules that may fail besides `rules` without a mismatch, by full id: e.g. a multi-seed
    /// self-test's `seed:1` ... `seed:5`, where some seeds' own bands catch the plant too, but
    /// how many depends on the host. Never a pattern: a wildcard would absorb any failure.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) may_also_fail: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawExpectedVerdict {
    outcome: ExpectedOutcome,
    #[serde(default)]
    rules: Vec<String>,
    #[serde(default)]
    may_also_fail: Vec<String>,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    step: Option<u64>,
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
        for (key, ids) in [("rules", &r.rules), ("may_also_fail", &r.may_also_fail)] {
            for id in ids {
                check_rule_id(key, id)?;
            }
        }
        if !r.may_also_fail.is_empty() && r.rules.is_empty() {
            return Err(
                "`may_also_fail` relaxes a list of expected failing `rules`: give `rules` too"
                    .into(),
            );
        }
        Ok(ExpectedVerdict {
            outcome: r.outcome,
            rules: r.rules,
            reason: r.reason,
            step: r.step,
            may_also_fail: r.may_also_fail,
        })
    }
}

/// The kinds of rule a verdict holds, by the prefix of their ids.
pub(crate) const RULE_KINDS: &[&str] = &[
    "golden",
    "expect",
    "presence",
    "stability",
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
