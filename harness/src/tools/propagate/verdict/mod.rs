//! From wire diffs to verdicts. A trial is one perturbed run: one knob set to one value under
//! one assignment of its conditions, compared with the baseline run under the same assignment.
//!
//! Rules, per trial (a "cell"):
//! - the changed locations are those whose values differ from the baseline, minus the
//!   manifest's volatile ones;
//! - a consumer is active when every `when` holds in the perturbed run (config paths in its
//!   resolved config, wire locations in its wire);
//! - **consumed**: an active consumer's location changed; **sent but not consumed**: locations
//!   changed, all of them named by the manifest, none read by an active consumer; **unexpected
//!   effect**: something changed that the manifest does not name; **not sent**: nothing changed.
//!
//! Per knob, over its cells: **consumed** when every condition consumed it, **consumed under a
//! condition only** when some did, else the strongest of unexpected effect, sent but not
//! consumed, not sent. A knob is flagged when it is not consumed (unless the manifest allows a
//! no-op, with a reason), or when any cell shows a problem: an active consumer that did not get
//! the value, an unexpected effect, a type the consumer does not declare, a consumer reading a
//! value other than the one tried, a failed run; or when the YAML default differs from the
//! server's default for an absent key.

//!
//! `plan` lays out the trials, `cell` judges one trial against its baseline, `knob` combines a
//! knob's cells into its verdict and matches the manifest's known gaps.

mod cell;
mod knob;
mod perturbations;

use serde_json::Value;

pub(crate) use cell::{
    judge_cell, not_observable, read_only_in_jobs, read_past_initialization, skipped_cell, Observed,
};
pub use cell::{Cell, CellVerdict, Problem};
pub(crate) use knob::{apply_known_gaps, judge_knob};
pub use knob::{KnobResult, KnobVerdict};
pub(crate) use perturbations::{
    condition_label, condition_overrides, keep_conditions, knob_override, parse_condition,
    plan_matrix, set_value, Condition, ConditionError, MatrixPlan, Trial, ENV_PREFIX,
};

fn lookup<'a>(tree: &'a Value, path: &str) -> Option<&'a Value> {
    crate::run::knobs::lookup(tree, path)
}

#[cfg(test)]
mod known_gaps_tests;
#[cfg(test)]
mod tests;
