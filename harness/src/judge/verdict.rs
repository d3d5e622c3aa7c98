//! What the judge says: a rule's status and evidence, a run's verdict and outcome. The types
//! every judge in `judge` returns and every report reads; nothing here judges.

use serde::{Deserialize, Serialize};

#[cfg(test)]
use crate::model::error::ExitStatus;
use crate::model::metrics::json_f64;
use crate::model::rundir::RunStatus;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RuleStatus {
    Pass,
    Regressed,
    Improved,
    Missing,
}

/// The whole scenario's verdict. `Improved` fails until blessed, like `Regressed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Passed,
    Regressed,
    Improved,
    /// A checked metric is absent from the run or the golden.
    Missing,
    /// The run's steps and the golden's differ (e.g. 15 steps against a 20-step golden).
    GridMismatch,
    /// Golden rules exist but there is no golden to judge them against.
    NoGolden,
}

/// A verdict's outcome from its rules, in this precedence: a regression first, then a
/// missing golden (golden rules with no golden, unless an expectation is missing too),
/// missing metrics, a grid mismatch, an improvement.
pub(crate) fn outcome_of(v: &Verdict, no_golden: bool) -> Outcome {
    let has = |s: RuleStatus| v.rules.iter().any(|r| r.status == s);
    let expect_missing = v
        .rules
        .iter()
        .any(|r| r.status == RuleStatus::Missing && r.rule.starts_with("expect:"));
    if has(RuleStatus::Regressed) {
        Outcome::Regressed
    } else if no_golden && !expect_missing {
        Outcome::NoGolden
    } else if has(RuleStatus::Missing) {
        Outcome::Missing
    } else if v.grid_mismatch.is_some() {
        Outcome::GridMismatch
    } else if has(RuleStatus::Improved) {
        Outcome::Improved
    } else {
        Outcome::Passed
    }
}

impl Outcome {
    #[cfg(test)]
    pub(crate) fn exit_status(self) -> ExitStatus {
        match self {
            Outcome::Passed => ExitStatus::Passed,
            Outcome::NoGolden => ExitStatus::NoGolden,
            _ => ExitStatus::CheckFailed,
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Outcome::Passed => "passed",
            Outcome::Regressed => "regressed",
            Outcome::Improved => "improved",
            Outcome::Missing => "missing",
            Outcome::GridMismatch => "grid mismatch",
            Outcome::NoGolden => "no golden",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Band {
    #[serde(with = "json_f64")]
    pub(crate) lo: Option<f64>,
    #[serde(with = "json_f64")]
    pub(crate) hi: Option<f64>,
}

impl Band {
    pub(crate) fn new(lo: f64, hi: f64) -> Band {
        Band {
            lo: Some(lo),
            hi: Some(hi),
        }
    }
    pub(crate) fn lo(&self) -> f64 {
        self.lo.unwrap_or(f64::NEG_INFINITY)
    }
    pub(crate) fn hi(&self) -> f64 {
        self.hi.unwrap_or(f64::INFINITY)
    }
}

/// The numbers behind a rule's status: always the step or window, the value, the golden, the
/// band and the margin (distance to the nearest band edge: positive inside, negative outside).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Evidence {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) step_or_window: Option<String>,
    #[serde(default, with = "json_f64", skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
    #[serde(default, with = "json_f64", skip_serializing_if = "Option::is_none")]
    pub(crate) golden: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) band: Option<Band>,
    #[serde(default, with = "json_f64", skip_serializing_if = "Option::is_none")]
    pub(crate) margin: Option<f64>,
    pub message: String,
    /// A failing `seed:<S>` rule of a multi-seed verdict: the rules of that seed's own verdict
    /// that decide it (they fail, and gate in a multi-seed verdict), by full id.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) failing_rules: Vec<String>,
}

/// One compared point of a golden rule: a step, or a window of steps `first..=last`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PointCheck {
    pub(crate) first: u64,
    pub(crate) last: u64,
    #[serde(with = "json_f64")]
    pub(crate) value: Option<f64>,
    #[serde(with = "json_f64")]
    pub(crate) golden: Option<f64>,
    pub(crate) band: Band,
    pub(crate) status: RuleStatus,
    /// A calibrated band's centre: the calibration's mean of this window (the band is around
    /// it, not around the golden, which is one seed's draw).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) centre: Option<f64>,
}

impl PointCheck {
    pub(crate) fn at(&self) -> String {
        if self.first == self.last {
            format!("step {}", self.first)
        } else {
            format!("steps {}..{}", self.first, self.last)
        }
    }
    pub(crate) fn margin(&self) -> f64 {
        let v = self.value.unwrap_or(f64::NAN);
        (v - self.band.lo()).min(self.band.hi() - v)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RuleVerdict {
    /// `golden:<metric>` or `expect:<name or expression>`.
    pub rule: String,
    pub status: RuleStatus,
    pub evidence: Evidence,
    /// The metrics the rule reads (for plots).
    #[serde(default)]
    pub(crate) metrics: Vec<String>,
    /// Steps that fall outside the band (every step of a failing window).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failing_steps: Vec<u64>,
    /// Golden rules: every compared point, for tables and plots.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) points: Vec<PointCheck>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) fail_fast: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    pub outcome: Outcome,
    pub rules: Vec<RuleVerdict>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) grid_mismatch: Option<String>,
    /// Whether the exact lane judged the run bit for bit, and why (not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exact_lane: Option<ExactLane>,
    /// A run that did not finish (interrupted, crashed, timed out): the rules left unjudged,
    /// which read steps past its last one, and that last step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_judged: Option<NotJudged>,
}

/// The rules of a run that stopped early that the judge did not decide: they read steps it
/// never reached (a convergence window, the golden's later steps), so any verdict would be
/// about the stop, which the run's own status already says.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NotJudged {
    pub last_step: Option<u64>,
    pub rules: Vec<String>,
}

impl Verdict {
    pub fn rule(&self, id: &str) -> Option<&RuleVerdict> {
        self.rules.iter().find(|r| r.rule == id)
    }
    pub fn failing(&self) -> impl Iterator<Item = &RuleVerdict> {
        self.rules.iter().filter(|r| r.status != RuleStatus::Pass)
    }

    /// The golden rule of `metric` (`golden:<metric>`); in a multi-seed verdict, the
    /// distribution test of the metric (`seeds:<metric>`) stands in for it.
    pub(crate) fn golden_rule(&self, metric: &str) -> Option<&RuleVerdict> {
        self.rule(&format!("golden:{metric}"))
            .or_else(|| self.seeds_rule(metric))
    }

    /// A multi-seed verdict's distribution test of `metric` (`seeds:<metric>`).
    pub(crate) fn seeds_rule(&self, metric: &str) -> Option<&RuleVerdict> {
        self.rule(&seeds_rule_id(metric))
    }

    /// The default stability rule of `metric` (`stability:<metric>`).
    pub(crate) fn stability_rule(&self, metric: &str) -> Option<&RuleVerdict> {
        self.rule(&super::stability::rule_id(metric))
    }

    /// A multi-seed verdict's rules of each seed's own verdict (`seed:<S>`), in order; none in
    /// a single run's verdict.
    pub(crate) fn seed_rules(&self) -> impl Iterator<Item = &RuleVerdict> {
        self.rules.iter().filter(|r| r.rule.starts_with("seed:"))
    }
}

/// The rule id of one seed's own verdict in a multi-seed verdict.
pub(crate) fn seed_rule_id(seed: u64) -> String {
    format!("seed:{seed}")
}

/// The rule id of a metric's distribution test in a multi-seed verdict (see `seeds`).
pub(crate) fn seeds_rule_id(metric: &str) -> String {
    format!("seeds:{metric}")
}

/// Whether the exact lane (`exact.rs`) judged the run, and why (not).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExactLane {
    pub applied: bool,
    pub message: String,
}

/// The run's end, for `match_expected`.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOutcome {
    pub(crate) status: RunStatus,
    pub(crate) reason: Option<String>,
    /// The step the run failed or stopped at.
    pub(crate) step: Option<u64>,
}
