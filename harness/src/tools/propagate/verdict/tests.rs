//! The verdict rules on a small manifest: plans, cells and knobs.

use std::path::Path;

use serde_json::{json, Value};

use super::*;
use crate::tools::propagate::knob_manifest::tests::MANIFEST;
use crate::tools::propagate::knob_manifest::{self, KnobManifest, ProblemKind};
use crate::tools::propagate::observed::WireSnapshot;

pub(super) fn manifest() -> KnobManifest {
    let m = knob_manifest::parse(MANIFEST, Path::new("t.yaml")).unwrap();
    assert!(
        knob_manifest::validate(&m).is_empty(),
        "{:?}",
        knob_manifest::validate(&m)
    );
    m
}

pub(super) fn snap(pairs: &[(&str, Value)]) -> WireSnapshot {
    let mut w = WireSnapshot::default();
    for (k, v) in pairs {
        w.locations.insert(k.to_string(), vec![v.clone()]);
    }
    w
}

pub(super) fn trial(knob: usize, value: Value, cond: &[(&str, Value)]) -> Trial {
    Trial {
        knob,
        value,
        condition: cond
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
    }
}

fn cfg(zorro: bool) -> Value {
    json!({"remote_backend": {"train": {"zorro_train": {"enable": zorro}}}})
}

/// [`judge_cell`] of `trial` against `base` on a run that sent `wire`, with ZoRRo training
/// `zorro`.
pub(super) fn judge_ran(
    m: &KnobManifest,
    trial: &Trial,
    base: &WireSnapshot,
    wire: &WireSnapshot,
    zorro: bool,
) -> Cell {
    judge_cell(
        m,
        trial,
        base,
        Observed::Ran {
            wire,
            config: &cfg(zorro),
        },
    )
}

#[test]
fn a_run_stops_at_initialization_only_when_every_possible_reader_is_in_a_jobconfig() {
    let m = manifest();
    let config = json!({"remote_backend": {"train": {"zorro_train": {"enable": true}}}});
    let only = |ts: &[Trial]| read_only_in_jobs(&m, &ts.iter().collect::<Vec<_>>(), &config);
    let zorro = |on: bool| [("remote_backend.train.zorro_train.enable", json!(on))];
    // ZoRRo on: the logits knob is read in ds_worker_config only.
    assert!(only(&[trial(0, json!(true), &zorro(true))]));
    // ZoRRo off: in the update's meta.
    assert!(!only(&[trial(0, json!(true), &zorro(false))]));
    // No condition: the scenario's value (on) decides.
    assert!(only(&[trial(0, json!(true), &[])]));
    // A reader without a condition in the JobConfig.
    assert!(only(&[trial(1, json!(8), &[])]));
    // One knob of the run with a reader outside a JobConfig sends the whole run further.
    assert!(!only(&[
        trial(0, json!(true), &zorro(true)),
        trial(5, json!(false), &[])
    ]));
    // No reader at all: where it goes is the question.
    assert!(!only(&[trial(2, json!(0.3), &[])]));
    // A wire condition may hold: the seed's reader counts.
    assert!(only(&[trial(4, json!(7), &[])]));
    // The run's own knob is the condition's key: it may hold whatever the config says.
    let cfg_off = json!({"remote_backend": {"train": {"zorro_train": {"enable": false}}}});
    let mut m2 = m.clone();
    m2.knobs[0].consumers[0].when = [(
        "remote_backend.train.logits.optimization_peak_mem_size_in_gib".to_string(),
        json!(8),
    )]
    .into();
    m2.knobs[0].consumers.truncate(1);
    let t = [trial(0, json!(true), &[]), trial(1, json!(8), &[])];
    assert!(read_only_in_jobs(
        &m2,
        &t.iter().collect::<Vec<_>>(),
        &cfg_off
    ));
    // Without it, the knob's default (4) rules the reader out: no reader left.
    assert!(!read_only_in_jobs(&m2, &[&t[0]], &cfg_off));
}

#[test]
fn plans_conditions_and_skips_values_equal_to_the_scenario() {
    let m = manifest();
    let config = json!({"remote_backend": {"train": {"load_balancer": false}}});
    let plan = plan_matrix(&m, &config);
    let fp32: Vec<_> = plan.trials.iter().filter(|t| t.knob == 0).collect();
    assert_eq!(fp32.len(), 2);
    assert_eq!(
        fp32[1].overrides(&m),
        vec![
            "++config.remote_backend.train.logits.compute_in_fp32=true".to_string(),
            "++config.remote_backend.train.zorro_train.enable=false".to_string()
        ]
    );
    assert_eq!(
        fp32[0].condition["remote_backend.train.zorro_train.enable"],
        json!(true)
    );
    assert_eq!(
        fp32[1].baseline_overrides(),
        vec!["++config.remote_backend.train.zorro_train.enable=false".to_string()]
    );
    assert_eq!(plan.trials.iter().filter(|t| t.knob == 1).count(), 2);
    assert_eq!(plan.not_exercised.len(), 1);
    assert_eq!(plan.not_exercised[0].0, 5);
}

#[test]
fn a_condition_given_keeps_only_its_trials_and_knobs_without_it() {
    let m = manifest();
    let config = json!({"remote_backend": {"train": {"load_balancer": false}}});
    let full = plan_matrix(&m, &config);
    let zorro = "remote_backend.train.zorro_train.enable";
    let mut plan = full.clone();
    let only = vec![parse_condition(&format!("{zorro}=true")).unwrap()];
    keep_conditions(&mut plan, &m, &only).unwrap();
    // Every trial left runs with ZoRRo on, or has no ZoRRo condition at all ...
    assert!(plan
        .trials
        .iter()
        .all(|t| t.condition.get(zorro).is_none_or(|v| *v == json!(true))));
    // ... and every ZoRRo-on trial and unconditioned trial of the full plan is still there.
    let kept = |t: &&Trial| t.condition.get(zorro).is_none_or(|v| *v == json!(true));
    assert_eq!(plan.trials.len(), full.trials.iter().filter(kept).count());
    assert!(plan.trials.len() < full.trials.len());
    // A knob tried only with ZoRRo off is not exercised, saying why.
    let mut off_only = full.clone();
    off_only
        .trials
        .retain(|t| t.knob != 0 || t.condition[zorro] == json!(false));
    keep_conditions(&mut off_only, &m, &only).unwrap();
    let why = off_only
        .not_exercised
        .iter()
        .find(|(k, _)| *k == 0)
        .unwrap();
    assert!(why
        .1
        .contains("--condition remote_backend.train.zorro_train.enable=true"));
    // A key that is no knob's condition, and a malformed one, are errors naming it.
    let e = keep_conditions(&mut plan, &m, &[("no.such".into(), json!(1))])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("--condition no.such") && e.contains(zorro),
        "{e}"
    );
    assert!(parse_condition("=1")
        .unwrap_err()
        .to_string()
        .contains("--condition"));
    assert!(parse_condition("novalue").is_err());
}

#[test]
fn consumed_under_a_condition_only_is_not_flagged() {
    let m = manifest();
    let base_on = snap(&[
        (
            "job.training.ds_worker_config.logits_compute_in_fp32",
            json!(false),
        ),
        ("meta.logits_compute_in_fp32", json!(false)),
    ]);
    let pert_on = snap(&[
        (
            "job.training.ds_worker_config.logits_compute_in_fp32",
            json!(true),
        ),
        ("meta.logits_compute_in_fp32", json!(true)),
    ]);
    let base_off = snap(&[("meta.logits_compute_in_fp32", json!(false))]);
    let pert_off = snap(&[("meta.logits_compute_in_fp32", json!(true))]);
    let key = "remote_backend.train.zorro_train.enable";
    let c_on = judge_ran(
        &m,
        &trial(0, json!(true), &[(key, json!(true))]),
        &base_on,
        &pert_on,
        true,
    );
    let c_off = judge_ran(
        &m,
        &trial(0, json!(true), &[(key, json!(false))]),
        &base_off,
        &pert_off,
        false,
    );
    assert_eq!(c_on.verdict, CellVerdict::Consumed);
    assert_eq!(
        c_on.consumed_at,
        vec!["job.training.ds_worker_config.logits_compute_in_fp32"]
    );
    assert_eq!(c_off.verdict, CellVerdict::Consumed);
    let r = judge_knob(&m.knobs[0], vec![c_on, c_off], None);
    assert_eq!(r.verdict, KnobVerdict::Consumed);
    assert!(!r.flagged, "{:?}", r.problems);
}

#[test]
fn a_condition_not_observable_at_this_reach_does_not_narrow_consumed() {
    // `--until initialize`: under zorro the JobConfig shows the knob; without zorro only a
    // later call's meta could, which the cut run never reaches.
    let m = manifest();
    let key = "remote_backend.train.zorro_train.enable";
    let at = "job.training.ds_worker_config.logits_compute_in_fp32";
    let on = judge_ran(
        &m,
        &trial(0, json!(true), &[(key, json!(true))]),
        &snap(&[(at, json!(false))]),
        &snap(&[(at, json!(true))]),
        true,
    );
    let off = not_observable(
        &trial(0, json!(true), &[(key, json!(false))]),
        "past initialization".into(),
    );
    let r = judge_knob(&m.knobs[0], vec![on.clone(), off.clone()], None);
    assert_eq!(r.verdict, KnobVerdict::Consumed);
    assert!(r.consumed_when.is_empty());
    // Observed and not consumed under the other condition, it is narrowed as before.
    let sent_not_read = judge_ran(
        &m,
        &trial(0, json!(true), &[(key, json!(false))]),
        &snap(&[("meta.logits_compute_in_fp32", json!(false))]),
        &snap(&[("meta.logits_compute_in_fp32", json!(false))]),
        false,
    );
    let r = judge_knob(&m.knobs[0], vec![on, off, sent_not_read], None);
    assert_eq!(r.verdict, KnobVerdict::ConsumedUnderCondition);
}

#[test]
fn the_planted_bug_is_sent_but_not_consumed_under_zorro() {
    let m = manifest();
    let key = "remote_backend.train.zorro_train.enable";
    // The DWC copy is missing: only meta changes.
    let base = snap(&[("meta.logits_compute_in_fp32", json!(false))]);
    let pert = snap(&[("meta.logits_compute_in_fp32", json!(true))]);
    let on = judge_ran(
        &m,
        &trial(0, json!(true), &[(key, json!(true))]),
        &base,
        &pert,
        true,
    );
    assert_eq!(on.verdict, CellVerdict::SentNotConsumed);
    assert!(
        on.problems[0].text.contains("did not change"),
        "{:?}",
        on.problems
    );
    let off = judge_ran(
        &m,
        &trial(0, json!(true), &[(key, json!(false))]),
        &base,
        &pert,
        false,
    );
    assert_eq!(off.verdict, CellVerdict::Consumed);
    let r = judge_knob(&m.knobs[0], vec![on, off], None);
    assert_eq!(r.verdict, KnobVerdict::ConsumedUnderCondition);
    assert_eq!(
        r.verdict_text(),
        format!("consumed under a condition only ({key}=false)")
    );
    assert!(r.flagged);
}

#[test]
fn type_and_value_mismatches_are_flagged() {
    let m = manifest();
    let at = "job.training.ds_worker_config.logits_optimization_peak_mem_size_in_gib";
    let base = snap(&[(at, json!(4))]);
    let ok = judge_ran(
        &m,
        &trial(1, json!(8), &[]),
        &base,
        &snap(&[(at, json!(8))]),
        true,
    );
    assert!(ok.problems.is_empty(), "{:?}", ok.problems);
    let float = judge_ran(
        &m,
        &trial(1, json!(2.5), &[]),
        &base,
        &snap(&[(at, json!(2.5))]),
        true,
    );
    assert_eq!(float.verdict, CellVerdict::Consumed);
    assert!(
        float
            .problems
            .iter()
            .any(|p| p.text.contains("type mismatch")
                && p.text.contains("declares int")
                && p.text.contains("float 2.5")),
        "{:?}",
        float.problems
    );
    let wrong = judge_ran(
        &m,
        &trial(1, json!(8), &[]),
        &base,
        &snap(&[(at, json!(9))]),
        true,
    );
    assert!(
        wrong
            .problems
            .iter()
            .any(|p| p.text.contains("not the value tried")),
        "{:?}",
        wrong.problems
    );
    let r = judge_knob(&m.knobs[1], vec![ok, float], None);
    assert_eq!(r.verdict, KnobVerdict::Consumed);
    assert!(r.flagged);
}

#[test]
fn sent_but_not_consumed_not_sent_and_unexpected() {
    let m = manifest();
    let base = snap(&[
        ("meta.actor_config.clip_ratio", json!(0.2)),
        ("meta.batch_num_tokens", json!(10)),
    ]);
    let pert = snap(&[
        ("meta.actor_config.clip_ratio", json!(0.3)),
        ("meta.batch_num_tokens", json!(11)),
    ]);
    let c = judge_ran(&m, &trial(2, json!(0.3), &[]), &base, &pert, true);
    assert_eq!(c.verdict, CellVerdict::SentNotConsumed);
    assert_eq!(c.changes.len(), 1, "volatile batch_num_tokens is ignored");
    let r = judge_knob(&m.knobs[2], vec![c], None);
    assert_eq!(r.verdict, KnobVerdict::SentNotConsumed);
    assert!(
        r.flagged && r.problems[0].contains("fixed 0.2"),
        "{:?}",
        r.problems
    );

    let c = judge_ran(&m, &trial(3, json!(4096), &[]), &base, &base, true);
    assert_eq!(c.verdict, CellVerdict::NotSent);
    let r = judge_knob(&m.knobs[3], vec![c], None);
    assert_eq!((r.verdict, r.flagged), (KnobVerdict::NotSent, true));

    let odd = snap(&[
        ("meta.actor_config.clip_ratio", json!(0.2)),
        ("route./step", json!(2)),
    ]);
    let c = judge_ran(&m, &trial(3, json!(4096), &[]), &base, &odd, true);
    assert_eq!(c.verdict, CellVerdict::UnexpectedEffect);
    assert!(
        c.problems
            .iter()
            .any(|p| p.text.contains("route./step: absent -> 2")),
        "{:?}",
        c.problems
    );
}

#[test]
fn a_wire_condition_gates_the_seed() {
    let m = manifest();
    let key = "remote_backend.train.determinism.full";
    let base_on = snap(&[
        ("job.training.seed", json!(42)),
        ("job.training.full_determinism", json!(true)),
    ]);
    let pert_on = snap(&[
        ("job.training.seed", json!(7)),
        ("job.training.full_determinism", json!(true)),
    ]);
    let base_off = snap(&[
        ("job.training.seed", json!(42)),
        ("job.sampling.seed", json!(42)),
        ("job.training.full_determinism", json!(false)),
    ]);
    let pert_off = snap(&[
        ("job.training.seed", json!(7)),
        ("job.sampling.seed", json!(7)),
        ("job.training.full_determinism", json!(false)),
    ]);
    let on = judge_ran(
        &m,
        &trial(4, json!(7), &[(key, json!(true))]),
        &base_on,
        &pert_on,
        true,
    );
    let off = judge_ran(
        &m,
        &trial(4, json!(7), &[(key, json!(false))]),
        &base_off,
        &pert_off,
        true,
    );
    assert_eq!(on.verdict, CellVerdict::Consumed);
    assert_eq!(off.verdict, CellVerdict::SentNotConsumed);
    assert!(off.problems.is_empty(), "{:?}", off.problems);
    let r = judge_knob(&m.knobs[4], vec![on, off], None);
    assert_eq!(r.verdict, KnobVerdict::ConsumedUnderCondition);
    assert!(!r.flagged, "{:?}", r.problems);
    assert_eq!(r.consumed_when.len(), 1);
}

#[test]
fn default_mismatch_allowed_noop_failures_and_not_exercised() {
    let m = manifest();
    let base = snap(&[("meta.load_balancer", json!(true))]);
    let pert = snap(&[("meta.load_balancer", json!(false))]);
    let c = judge_ran(&m, &trial(5, json!(false), &[]), &base, &pert, true);
    let r = judge_knob(&m.knobs[5], vec![c], None);
    assert_eq!(r.verdict, KnobVerdict::Consumed);
    // The defaults are two hand-written manifest fields: shown as a claim, never a flag.
    assert!(!r.flagged, "{:?}", r.problems);
    assert!(
        r.claims.len() == 1 && r.claims[0].starts_with("manifest only, not observed"),
        "{:?}",
        r.claims
    );

    let c = judge_ran(&m, &trial(6, json!("draft"), &[]), &base, &base, true);
    let r = judge_knob(&m.knobs[6], vec![c], None);
    assert_eq!(r.verdict_text(), "not sent (allowed no-op)");
    assert!(!r.flagged, "{:?}", r.problems);

    let c = judge_cell(
        &m,
        &trial(2, json!(0.3), &[]),
        &base,
        Observed::Failed("step 1: /step 500".into()),
    );
    let r = judge_knob(&m.knobs[2], vec![c], None);
    assert_eq!(r.verdict, KnobVerdict::RunFailed);
    assert!(r.flagged && r.problems.iter().any(|p| p.contains("/step 500")));

    let r = judge_knob(
        &m.knobs[6],
        vec![],
        Some("every `try` value equals the scenario's value"),
    );
    assert_eq!((r.verdict, r.flagged), (KnobVerdict::NotExercised, true));
}

#[test]
fn a_reader_seen_only_as_a_start_up_flag_is_not_observable_without_the_flags() {
    let m = knob_manifest::parse(
        "backend: arctic\nbackend_yaml: b.yaml\nbackend_prefix: remote_backend\nknobs:\n  - {path: remote_backend.sampling_gpus, default: 1, try: [2], consumers: [{at: srv.sampling_gpus}]}\n",
        Path::new("k.yaml"),
    )
    .unwrap();
    let t = Trial {
        knob: 0,
        value: json!(2),
        condition: Condition::new(),
    };
    // Runs with no configuration recorded.
    let ran = |base: &WireSnapshot, wire: &WireSnapshot| {
        judge_cell(
            &m,
            &t,
            base,
            Observed::Ran {
                wire,
                config: &json!({}),
            },
        )
    };
    let empty = snap(&[("meta.x", json!(1))]);
    let c = ran(&empty, &empty);
    assert_eq!(c.verdict, CellVerdict::NotObservable);
    assert!(c.unobservable.as_deref().unwrap().contains("start-up flag"));
    let r = judge_knob(&m.knobs[0], vec![c], None);
    assert_eq!((r.verdict, r.flagged), (KnobVerdict::NotObservable, false));

    // With the flags recorded (the harness started the server with them), it is judged.
    let base = snap(&[("srv.sampling_gpus", json!(1))]);
    let pert = snap(&[("srv.sampling_gpus", json!(2))]);
    let c = ran(&base, &pert);
    assert_eq!(c.verdict, CellVerdict::Consumed);
    let c = judge_cell(&m, &t, &base, Observed::NotObservable("over Ray".into()));
    assert_eq!(c.verdict, CellVerdict::NotObservable);
}

/// Two active readers, one of which changed: the one that did not is a flag (the seed's
/// bug shape: a dropped ds_worker_config key while the sampling params still change).
#[test]
fn an_active_reader_that_did_not_change_is_flagged_beside_one_that_did() {
    let m = manifest();
    let dwc = "job.training.ds_worker_config.temperature";
    let sp = "generate.sampling_params.temperature";
    let base = snap(&[(sp, json!(1.0)), (dwc, json!(1.0))]);
    let pert = snap(&[(sp, json!(0.7)), (dwc, json!(1.0))]);
    let c = judge_ran(&m, &trial(7, json!(0.7), &[]), &base, &pert, true);
    assert_eq!(c.verdict, CellVerdict::Consumed);
    assert_eq!(c.consumed_at, vec![sp]);
    assert_eq!(c.problems.len(), 1, "{:?}", c.problems);
    assert_eq!(c.problems[0].kind, ProblemKind::UnchangedConsumer);
    assert_eq!(c.problems[0].at.as_deref(), Some(dwc));
    assert!(
        c.problems[0].text.contains("did not change")
            && c.problems[0]
                .text
                .contains("when remote_backend.train.zorro_train.enable=true")
    );
    let r = judge_knob(&m.knobs[7], vec![c], None);
    assert_eq!(r.verdict, KnobVerdict::Consumed);
    assert!(r.flagged);
    // Without ZoRRo only the sampling params read it: not flagged.
    let c = judge_ran(&m, &trial(7, json!(0.7), &[]), &base, &pert, false);
    assert!(c.problems.is_empty(), "{:?}", c.problems);
    // Both changed: not flagged.
    let both = snap(&[(sp, json!(0.7)), (dwc, json!(0.7))]);
    let c = judge_ran(&m, &trial(7, json!(0.7), &[]), &base, &both, true);
    assert!(c.problems.is_empty(), "{:?}", c.problems);
}
