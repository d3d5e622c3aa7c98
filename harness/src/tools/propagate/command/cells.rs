//! The runs' wires judged: a unit's cells (or why its group is split), and every knob's
//! verdict from its cells.

use std::collections::BTreeMap;
use std::path::Path;

use super::runs::{baseline_wire, RunSet};
use super::RunResult;
use crate::tools::propagate::group::{self, Unattributable};
use crate::tools::propagate::knob_manifest::KnobManifest;
use crate::tools::propagate::observed::WireSnapshot;
use crate::tools::propagate::verdict::{self, judge_cell, judge_knob, Observed};
use crate::tools::propagate::PropagateError;

/// The knobs' verdicts from the runs' wires.
pub(super) struct Judged {
    pub(super) knobs: Vec<verdict::KnobResult>,
    pub(super) closed_gaps: Vec<String>,
    pub(super) any_failed: bool,
}

/// A unit's cells, or why its grouped run cannot be attributed (then it is split). A single
/// trial is judged on its run as it is.
pub(super) fn judge_unit(
    scenario: &Path,
    m: &KnobManifest,
    plan: &verdict::MatrixPlan,
    unit: &[usize],
    rs: &RunSet,
    run: usize,
) -> Result<Result<Vec<verdict::Cell>, Unattributable>, PropagateError> {
    let trials: Vec<&verdict::Trial> = unit.iter().map(|&i| &plan.trials[i]).collect();
    let result = rs.result(run);
    // A baseline that ran further than the trial is compared over the trial's stretch.
    let reach = match result {
        Some(RunResult::Ran { reach, .. }) => Some(*reach),
        _ => None,
    };
    // The trials of a unit share their baseline run (conditions equal to the scenario's own
    // value alias to it): each distinct one is loaded (and cut) once.
    let mut loaded: Vec<(usize, std::borrow::Cow<'_, WireSnapshot>)> = Vec::new();
    let mut baselines = Vec::new();
    for t in &trials {
        let b = rs.index[&t.baseline_overrides()];
        let run_of = rs.alias[b];
        if let Some(k) = loaded.iter().position(|(i, _)| *i == run_of) {
            baselines.push(k);
            continue;
        }
        let Some(r) = rs.result(b) else {
            return Err(PropagateError::Baseline(
                "internal: a baseline run has no result".into(),
            ));
        };
        let wire = baseline_wire(scenario, &rs.runs[b], r)?;
        let wire = match (r, reach) {
            (RunResult::Ran { dir, reach: rb, .. }, Some(rt)) if rt < *rb => {
                let cut = WireSnapshot::load_run_until(dir, Some(rt))
                    .map_err(|e| PropagateError::Baseline(format!("the baseline's wire: {e}")))?;
                std::borrow::Cow::Owned(cut)
            }
            _ => std::borrow::Cow::Borrowed(wire),
        };
        loaded.push((run_of, wire));
        baselines.push(loaded.len() - 1);
    }
    let baselines: Vec<&WireSnapshot> = baselines.iter().map(|&k| &*loaded[k].1).collect();
    if let [t] = trials[..] {
        let observed = match result {
            Some(RunResult::Ran { wire, config, .. }) => Observed::Ran { wire, config },
            Some(RunResult::NotObservable(why)) => Observed::NotObservable(why.clone()),
            Some(RunResult::Failed(why)) => Observed::Failed(why.clone()),
            None => Observed::Failed("internal: the run has no result".into()),
        };
        return Ok(Ok(vec![judge_cell(m, t, baselines[0], observed)]));
    }
    let (wire, config) = match result {
        Some(RunResult::Ran { wire, config, .. }) => (wire, config),
        Some(RunResult::NotObservable(why)) => {
            return Ok(Err(Unattributable(format!("not observable: {why}"))))
        }
        Some(RunResult::Failed(why)) => {
            return Ok(Err(Unattributable(format!("the run failed: {why}"))))
        }
        None => return Ok(Err(Unattributable("the run has no result".into()))),
    };
    let views = match group::attribute(m, &trials, baselines[0], wire) {
        Ok(v) => v,
        Err(why) => return Ok(Err(why)),
    };
    Ok(Ok(trials
        .iter()
        .zip(&views)
        .zip(&baselines)
        .map(|((t, v), b)| judge_cell(m, t, b, Observed::Ran { wire: v, config }))
        .collect()))
}

/// Every knob's verdict from its trials' cells, matched against the known gaps.
pub(super) fn judge_all(
    m: &KnobManifest,
    plan: &verdict::MatrixPlan,
    cells: Vec<Option<verdict::Cell>>,
) -> Judged {
    let mut by_knob: Vec<Vec<verdict::Cell>> = vec![Vec::new(); m.knobs.len()];
    let mut any_failed = false;
    for (t, c) in plan.trials.iter().zip(cells) {
        let c = c.unwrap_or_else(|| {
            let f = Observed::Failed("internal: the trial has no result".into());
            judge_cell(m, t, &WireSnapshot::default(), f)
        });
        any_failed |= c.verdict == verdict::CellVerdict::RunFailed;
        by_knob[t.knob].push(c);
    }
    for (i, why) in &plan.skipped {
        by_knob[*i].push(verdict::skipped_cell(why));
    }
    let not_exercised: BTreeMap<usize, &str> = plan
        .not_exercised
        .iter()
        .map(|(i, why)| (*i, why.as_str()))
        .collect();
    let mut knobs: Vec<_> = m
        .knobs
        .iter()
        .zip(by_knob)
        .enumerate()
        .map(|(i, (k, c))| judge_knob(k, c, not_exercised.get(&i).copied()))
        .collect();
    let closed_gaps = verdict::apply_known_gaps(m, &mut knobs);
    Judged {
        knobs,
        closed_gaps,
        any_failed,
    }
}
