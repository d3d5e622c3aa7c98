//! Group testing: several knobs perturbed in one run where their wire locations cannot
//! overlap, and a group split in halves when its result cannot be attributed.
//!
//! Which knobs may share a run (everything else runs alone, one trial per run):
//! - the same condition assignment, counted after dropping conditions whose value is the
//!   scenario's own (those runs are the same run);
//! - not a condition of any knob (a `conditions` key or a config-path `when` key, or a path
//!   above or below one): changing it would change which consumers of another knob are active;
//! - not the transport knob (`remote_backend.comms.protocol`: a run over Ray shows nothing);
//! - no `effects`, no consumer and no `to`/`sent_to` at `route.*`, `routes`, `batch.*` or
//!   `http_errors` (call counts, the call sequence and the data move with many knobs at once);
//! - no `derived` consumer (a value computed from several inputs: a change there could come from
//!   another knob of the group, and a derived read has no value to check it against);
//! - locations (to, sent_to, consumers' `at`, effects, the wire-location `when` keys of its
//!   consumers) pairwise disjoint from every other knob of the group, where a pattern covers
//!   its subtree and `*` matches any segment, so overlap is judged conservatively.
//!
//! Attribution of a grouped run: every changed location must be declared by exactly one knob of
//! the group; each knob is then judged on a view of the run that shows the group's values at its
//! own locations and the baseline's everywhere else, which is the solo trial's wire under the
//! assumption below. A change no knob of the group declares, a failed run, or a run that shows
//! nothing (over Ray) makes the group ambiguous: it is split in halves and run again, down to
//! single knobs, whose verdicts are those of one knob per trial.
//!
//! The assumption: a knob's perturbation changes only the wire locations its manifest entry
//! declares, as a function of its own value and the condition; so with disjoint locations, one
//! knob's perturbation can neither change nor un-change another's location. A derived value
//! computed from several knobs would break it; such knobs run alone.

use std::collections::BTreeMap;

use serde_json::Value;

use super::knob_manifest::{is_wire_location, Knob, KnobManifest};
use super::observed::{diff, pattern_matches, WireSnapshot};
use super::verdict::{condition_overrides, Condition, MatrixPlan, Trial};

/// The most trials one grouped run carries (a bigger group costs more runs to split).
pub(crate) const MAX_GROUP: usize = 16;

/// The knob that picks the client's transport: a trial over Ray shows no wire at all, so it
/// would make any group it joined ambiguous.
pub(crate) const TRANSPORT: &str = "remote_backend.comms.protocol";

/// Location families that count calls or carry data rather than a knob's value.
const CALL_FAMILIES: &[&str] = &["route", "routes", "batch", "http_errors"];

/// Every location pattern a knob declares: where it is sent, read, has effects, and the wire
/// locations its consumers' conditions look at.
pub(crate) fn locations(k: &Knob) -> Vec<String> {
    let mut out: Vec<String> = k.sent_locations().chain(&k.effects).cloned().collect();
    for c in &k.consumers {
        out.push(c.at.clone());
        out.extend(c.when.keys().filter(|w| is_wire_location(w)).cloned());
    }
    out.sort();
    out.dedup();
    out
}

/// Whether two location patterns can name a common location: segment by segment over the
/// shorter one (a pattern names its subtree), `*` matching anything.
pub(crate) fn overlap(p: &str, q: &str) -> bool {
    p.split('.')
        .zip(q.split('.'))
        .all(|(a, b)| a == "*" || b == "*" || a == b)
}

/// Whether two dotted config paths are the same, or one lies under the other.
fn nested(a: &str, b: &str) -> bool {
    a == b || a.starts_with(&format!("{b}.")) || b.starts_with(&format!("{a}."))
}

/// Why a knob must run alone, or `None` when it may share a run.
pub(crate) fn alone_because(m: &KnobManifest, k: &Knob) -> Option<String> {
    if k.path == TRANSPORT {
        return Some("it picks the transport (a run over Ray shows nothing)".into());
    }
    let conditions = m.knobs.iter().flat_map(|o| {
        o.conditions
            .keys()
            .chain(o.consumers.iter().flat_map(|c| c.when.keys()))
            .filter(|key| !is_wire_location(key))
    });
    if let Some(c) = conditions.into_iter().find(|c| nested(c, &k.path)) {
        return Some(format!("it is a condition of another knob ({c})"));
    }
    if let Some(c) = k.consumers.iter().find(|c| c.derived) {
        return Some(format!("its consumer {} is derived", c.at));
    }
    let family = |l: &String| l.split('.').next().unwrap_or("").to_string();
    if let Some(l) = locations(k)
        .iter()
        .find(|l| CALL_FAMILIES.contains(&family(l).as_str()))
    {
        return Some(format!("it changes call counts or data ({l})"));
    }
    None
}

/// How many trials run alone, by the first word of the reason (`condition`, `derived`, ...).
pub(crate) fn alone_counts(m: &KnobManifest, plan: &MatrixPlan) -> BTreeMap<&'static str, usize> {
    let mut out = BTreeMap::new();
    for t in &plan.trials {
        if let Some(why) = alone_because(m, &m.knobs[t.knob]) {
            let kind = ["transport", "condition", "derived", "call counts"]
                .into_iter()
                .find(|w| why.contains(w))
                .unwrap_or("other");
            *out.entry(kind).or_insert(0) += 1;
        }
    }
    out
}

/// The assignment without the conditions whose value is the scenario's own: runs that differ
/// only there are the same run.
pub(crate) fn effective(cond: &Condition, config: &Value) -> Condition {
    cond.iter()
        .filter(|(k, v)| crate::run::knobs::lookup(config, k) != Some(*v))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// A unit of the plan: the trials (indices into [`MatrixPlan::trials`]) one run perturbs.
pub(crate) type Unit = Vec<usize>;

/// An open group being packed.
struct Bin {
    unit: Unit,
    knobs: Vec<usize>,
    locations: Vec<String>,
}

/// Pack the trials into units: with `group`, trials of knobs that may share a run go into the
/// first group of their effective condition that holds no trial of the same knob and no
/// overlapping location (and has room); every other trial is a unit of its own.
pub(crate) fn plan_units(
    m: &KnobManifest,
    plan: &MatrixPlan,
    config: &Value,
    group: bool,
) -> Vec<Unit> {
    let mut units: Vec<Unit> = Vec::new();
    let mut bins: BTreeMap<String, Vec<Bin>> = BTreeMap::new();
    for (i, t) in plan.trials.iter().enumerate() {
        let k = &m.knobs[t.knob];
        if !group || alone_because(m, k).is_some() {
            units.push(vec![i]);
            continue;
        }
        let locs = locations(k);
        let key = super::verdict::condition_label(&effective(&t.condition, config));
        let open = bins.entry(key).or_default();
        let fits = |b: &Bin| {
            b.unit.len() < MAX_GROUP
                && !b.knobs.contains(&t.knob)
                && !b
                    .locations
                    .iter()
                    .any(|p| locs.iter().any(|q| overlap(p, q)))
        };
        match open.iter_mut().find(|b| fits(b)) {
            Some(b) => {
                b.unit.push(i);
                b.knobs.push(t.knob);
                b.locations.extend(locs);
            }
            None => open.push(Bin {
                unit: vec![i],
                knobs: vec![t.knob],
                locations: locs,
            }),
        }
    }
    units.extend(bins.into_values().flatten().map(|b| b.unit));
    units
}

/// The overrides of a unit's run: the union of its trials' conditions and every knob's value,
/// sorted (a single trial's are exactly [`Trial::overrides`]).
pub(crate) fn unit_overrides(m: &KnobManifest, plan: &MatrixPlan, unit: &[usize]) -> Vec<String> {
    if let [i] = unit {
        return plan.trials[*i].overrides(m);
    }
    let mut cond = Condition::new();
    for &i in unit {
        cond.extend(plan.trials[i].condition.clone());
    }
    let mut o = condition_overrides(&cond);
    for &i in unit {
        let t = &plan.trials[i];
        o.push(super::verdict::knob_override(
            &m.knobs[t.knob].path,
            &t.value,
        ));
    }
    o.sort();
    o.dedup();
    o
}

/// The baseline with the run's values at `patterns` (absent where the run has none).
fn view(baseline: &WireSnapshot, wire: &WireSnapshot, patterns: &[String]) -> WireSnapshot {
    let mut out = baseline.clone();
    let mine = |loc: &str| patterns.iter().any(|p| pattern_matches(p, loc));
    for loc in baseline.locations.keys().filter(|l| mine(l)) {
        if !wire.locations.contains_key(loc) {
            out.locations.remove(loc);
        }
    }
    for (loc, v) in wire.locations.iter().filter(|(l, _)| mine(l)) {
        out.locations.insert(loc.clone(), v.clone());
    }
    out
}

/// Why a grouped run's changes cannot be told apart by trial (the group is split).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Unattributable(pub(crate) String);

/// Attribute a grouped run's changes: one view per trial (its own locations from the run, the
/// rest from the baseline), or why the run cannot be attributed.
pub(crate) fn attribute(
    m: &KnobManifest,
    trials: &[&Trial],
    baseline: &WireSnapshot,
    wire: &WireSnapshot,
) -> Result<Vec<WireSnapshot>, Unattributable> {
    attribute_views(m, trials, baseline, wire).map_err(Unattributable)
}

fn attribute_views(
    m: &KnobManifest,
    trials: &[&Trial],
    baseline: &WireSnapshot,
    wire: &WireSnapshot,
) -> Result<Vec<WireSnapshot>, String> {
    let locs: Vec<Vec<String>> = trials.iter().map(|t| locations(&m.knobs[t.knob])).collect();
    // A watched variable is evidence for its own knob only (judge_cell says why).
    let own_env = |loc: &str| {
        trials
            .iter()
            .any(|t| pattern_matches(&m.knobs[t.knob].path, loc))
    };
    for ch in diff(baseline, wire, &m.volatile) {
        if ch.location.starts_with(super::verdict::ENV_PREFIX) && !own_env(&ch.location) {
            continue;
        }
        let owners = locs
            .iter()
            .filter(|ls| ls.iter().any(|p| pattern_matches(p, &ch.location)))
            .count();
        if owners != 1 {
            return Err(format!(
                "{} changed, and {} of the group declares it",
                ch.describe(),
                if owners == 0 {
                    "no knob"
                } else {
                    "more than one knob"
                }
            ));
        }
    }
    Ok(locs.iter().map(|ls| view(baseline, wire, ls)).collect())
}

/// Halves of a unit, for a second try.
pub(crate) fn split(unit: &[usize]) -> (Unit, Unit) {
    let mid = unit.len() / 2;
    (unit[..mid].to_vec(), unit[mid..].to_vec())
}

#[cfg(test)]
mod tests {
    use super::super::knob_manifest;
    use super::super::verdict::plan_matrix;
    use super::*;
    use serde_json::json;
    use std::path::Path;

    const M: &str = r#"
backend: arctic
backend_yaml: b.yaml
backend_prefix: rb
knobs:
  - {path: rb.a, default: 1, try: [2], consumers: [{at: meta.a}]}
  - {path: rb.b, default: 1, try: [2, 3], consumers: [{at: job.training.b}]}
  - {path: rb.sub, default: 1, try: [2], sent_to: [job.training], note: a whole subtree}
  - {path: rb.c, default: 1, try: [2], consumers: [{at: meta.c, when: {rb.z: true}}]}
  - {path: rb.z, default: false, try: [true], consumers: [{at: meta.z}]}
  - {path: rb.d, default: 1, try: [2], consumers: [{at: meta.d, derived: true}]}
  - {path: rb.e, default: 1, try: [2], consumers: [{at: meta.e}], effects: [route./step]}
  - {path: rb.f, default: 1, try: [2], consumers: [{at: meta.f}], conditions: {rb.z: [true, false]}}
"#;

    fn m() -> KnobManifest {
        let m = knob_manifest::parse(M, Path::new("k.yaml")).unwrap();
        assert!(
            knob_manifest::validate(&m).is_empty(),
            "{:?}",
            knob_manifest::validate(&m)
        );
        m
    }

    #[test]
    fn overlap_is_conservative_for_subtrees_and_wildcards() {
        assert!(overlap("job.training", "job.training.b"));
        assert!(overlap("job.*.seed", "job.training.seed"));
        assert!(overlap("job.*", "job.sampling.x"));
        assert!(!overlap("job.training.b", "job.training.c"));
        assert!(!overlap("meta.a", "meta.ab"));
    }

    #[test]
    fn only_disjoint_unconditional_knobs_share_a_run() {
        let m = m();
        let why = |i: usize| alone_because(&m, &m.knobs[i]);
        assert!(why(0).is_none() && why(1).is_none() && why(2).is_none());
        assert!(why(4).unwrap().contains("condition"), "{:?}", why(4));
        assert!(why(5).unwrap().contains("derived"));
        assert!(why(6).unwrap().contains("call counts"));
        let config = json!({"rb": {"z": false}});
        let plan = plan_matrix(&m, &config);
        let units = plan_units(&m, &plan, &config, true);
        let knobs = |u: &Unit| u.iter().map(|&i| plan.trials[i].knob).collect::<Vec<_>>();
        let all: Vec<Vec<usize>> = units.iter().map(knobs).collect();
        // Every trial exactly once.
        let mut seen: Vec<usize> = units.iter().flatten().copied().collect();
        seen.sort();
        assert_eq!(seen, (0..plan.trials.len()).collect::<Vec<_>>());
        // b's two values never share a run, b and the subtree above it never do.
        for u in &all {
            assert!(u.iter().filter(|k| **k == 1).count() <= 1, "{all:?}");
            assert!(!(u.contains(&1) && u.contains(&2)), "{all:?}");
        }
        assert!(all.iter().any(|u| u.len() > 1 && u.contains(&0)), "{all:?}");
        // f under z=true (not the scenario's) and under z=false (the scenario's) are grouped
        // with different runs: the latter with the unconditional knobs.
        let f: Vec<&Vec<usize>> = all.iter().filter(|u| u.contains(&7)).collect();
        assert_eq!(f.len(), 2);
        assert!(f.iter().any(|u| u.contains(&0)), "{all:?}");
        // Without grouping: one trial a unit.
        assert!(plan_units(&m, &plan, &config, false)
            .iter()
            .all(|u| u.len() == 1));
    }

    fn snap(pairs: &[(&str, Value)]) -> WireSnapshot {
        let mut w = WireSnapshot::default();
        for (k, v) in pairs {
            w.locations.insert(k.to_string(), vec![v.clone()]);
        }
        w
    }

    #[test]
    fn attribution_needs_every_change_declared_by_one_knob() {
        let m = m();
        let t = |knob: usize| Trial {
            knob,
            value: json!(2),
            condition: Condition::new(),
        };
        let (a, b) = (t(0), t(1));
        let base = snap(&[("meta.a", json!(1)), ("job.training.b", json!(1))]);
        // b dropped: only a's location changed; b's view shows no change.
        let run = snap(&[("meta.a", json!(2)), ("job.training.b", json!(1))]);
        let views = attribute(&m, &[&a, &b], &base, &run).unwrap();
        assert_eq!(diff(&base, &views[0], &[]).len(), 1);
        assert!(diff(&base, &views[1], &[]).is_empty());
        // A change nobody in the group declares: ambiguous.
        let odd = snap(&[
            ("meta.a", json!(2)),
            ("job.training.b", json!(2)),
            ("meta.x", json!(1)),
        ]);
        let e = attribute(&m, &[&a, &b], &base, &odd).unwrap_err();
        assert!(e.0.contains("meta.x") && e.0.contains("no knob"), "{e}");
        assert_eq!(split(&[1, 2, 3]), (vec![1], vec![2, 3]));
    }
}
