//! The manifest's `known_gaps` against the flags they accept.

use serde_json::{json, Value};

use super::tests::{judge_ran, manifest, snap, trial};
use super::{apply_known_gaps, judge_knob};
use crate::tools::propagate::knob_manifest::{self, KnobManifest, ProblemKind};
use crate::tools::propagate::observed::WireSnapshot;

#[test]
fn known_gaps_pass_their_flags_and_fail_when_they_close_or_change() {
    let mut m = manifest();
    let base = snap(&[("meta.load_balancer", json!(true))]);
    let judge = |m: &KnobManifest, knob: usize, value: Value, wire: &WireSnapshot| {
        let c = judge_ran(m, &trial(knob, value, &[]), &base, wire, true);
        judge_knob(&m.knobs[knob], vec![c], None)
    };
    let path = m.knobs[2].path.clone();
    m.known_gaps = vec![knob_manifest::KnownGap {
        knob: path.clone(),
        verdict: "not_sent".into(),
        problem: ProblemKind::NotConsumed,
        at: None,
        reason: "known".into(),
        link: Some("#1".into()),
    }];
    // Still not sent: a known gap, not a new flag.
    let mut knobs = vec![judge(&m, 2, json!(0.3), &base)];
    assert!(knobs[0].flagged);
    let closed = apply_known_gaps(&m, &mut knobs);
    assert!(closed.is_empty(), "{closed:?}");
    assert_eq!(knobs[0].known_gap.as_deref(), Some("known (#1)"));
    // Flagged with another verdict: the entry no longer holds.
    m.known_gaps[0].verdict = "sent_not_consumed".into();
    let mut knobs = vec![judge(&m, 2, json!(0.3), &base)];
    let closed = apply_known_gaps(&m, &mut knobs);
    assert!(knobs[0].known_gap.is_none());
    assert!(closed[0].contains("no longer holds"), "{closed:?}");
    // Not flagged any more: closed, remove it.
    let path5 = m.knobs[5].path.clone();
    m.known_gaps[0].knob = path5;
    let pert = snap(&[("meta.load_balancer", json!(false))]);
    let mut knobs = vec![judge(&m, 5, json!(false), &pert)];
    assert!(!knobs[0].flagged);
    let closed = apply_known_gaps(&m, &mut knobs);
    assert!(
        closed[0].contains("remove it from known_gaps"),
        "{closed:?}"
    );
    // A gap naming no knob, or an unknown verdict, is a manifest error.
    m.known_gaps[0].knob = "no.such.knob".into();
    m.known_gaps[0].verdict = "broken".into();
    let problems = knob_manifest::validate(&m);
    assert!(
        problems
            .iter()
            .any(|p| p.contains("no knob of this manifest"))
            && problems
                .iter()
                .any(|p| p.contains("`broken` is not one of")),
        "{problems:?}"
    );
}

/// A known gap accepts its kind of problem (at its location), not every flag of its knob.
#[test]
fn a_known_gap_excuses_only_its_kind_of_problem() {
    let mut m = manifest();
    let dwc = "job.training.ds_worker_config.temperature";
    let sp = "generate.sampling_params.temperature";
    let base = snap(&[(sp, json!(1.0)), (dwc, json!(1.0))]);
    let pert = snap(&[(sp, json!(0.7)), (dwc, json!(1.0)), ("meta.odd", json!(1))]);
    let judge = |m: &KnobManifest| {
        let c = judge_ran(m, &trial(7, json!(0.7), &[]), &base, &pert, true);
        vec![judge_knob(&m.knobs[7], vec![c], None)]
    };
    let gap = |problem: ProblemKind, at: Option<&str>| knob_manifest::KnownGap {
        knob: "actor_rollout_ref.rollout.temperature".into(),
        verdict: "consumed".into(),
        problem,
        at: at.map(str::to_string),
        reason: "known".into(),
        link: None,
    };
    // Only the unexpected effect is known: the unchanged reader is a new flag, and the
    // entry still holds (it accepted a problem).
    m.known_gaps = vec![gap(ProblemKind::UnexpectedEffect, Some("meta.odd"))];
    let mut knobs = judge(&m);
    assert!(apply_known_gaps(&m, &mut knobs).is_empty());
    assert!(knobs[0].flagged && knobs[0].known_gap.is_none());
    // Both known: a known gap.
    m.known_gaps
        .push(gap(ProblemKind::UnchangedConsumer, Some(dwc)));
    let mut knobs = judge(&m);
    assert!(apply_known_gaps(&m, &mut knobs).is_empty());
    assert!(knobs[0].known_gap.is_some());
    // The right kind at another location accepts nothing: a new flag, and that entry no
    // longer holds.
    m.known_gaps[1].at = Some("job.training.ds_worker_config.other".into());
    let mut knobs = judge(&m);
    let closed = apply_known_gaps(&m, &mut knobs);
    assert!(knobs[0].known_gap.is_none());
    assert!(
        closed.len() == 1
            && closed[0].contains("no longer holds")
            && closed[0].contains("unchanged_consumer"),
        "{closed:?}"
    );
    // `at` must be a wire location.
    m.known_gaps[1].at = Some("nowhere.x".into());
    assert!(knob_manifest::validate(&m)
        .iter()
        .any(|p| p.contains("`at: nowhere.x`")));
}

/// A gap at a reader whose condition no trial ran (a `--condition` subset) was not looked at:
/// it neither excuses nor closes; once a trial runs that condition, it is judged again.
#[test]
fn a_gap_under_a_condition_no_trial_ran_is_neither_confirmed_nor_closed() {
    let mut m = manifest();
    let dwc = "job.training.ds_worker_config.logits_compute_in_fp32";
    let meta = "meta.logits_compute_in_fp32";
    m.known_gaps = vec![knob_manifest::KnownGap {
        knob: m.knobs[0].path.clone(),
        verdict: "consumed_under_condition".into(),
        problem: ProblemKind::UnchangedConsumer,
        at: Some(dwc.into()),
        reason: "known".into(),
        link: None,
    }];
    let zorro = |on: bool| [("remote_backend.train.zorro_train.enable", json!(on))];
    // ZoRRo off only: the meta reader changes as it should; ds_worker_config was not looked at.
    let base = snap(&[(meta, json!(false))]);
    let pert = snap(&[(meta, json!(true))]);
    let off = judge_ran(
        &m,
        &trial(0, json!(true), &zorro(false)),
        &base,
        &pert,
        false,
    );
    let mut knobs = vec![judge_knob(&m.knobs[0], vec![off.clone()], None)];
    assert!(!knobs[0].flagged, "{:?}", knobs[0].problems);
    let closed = apply_known_gaps(&m, &mut knobs);
    assert!(closed.is_empty(), "{closed:?}");
    // With a ZoRRo-on trial whose ds_worker_config reader now changes: the gap has closed.
    let base_on = snap(&[(dwc, json!(false))]);
    let pert_on = snap(&[(dwc, json!(true))]);
    let on = judge_ran(
        &m,
        &trial(0, json!(true), &zorro(true)),
        &base_on,
        &pert_on,
        true,
    );
    let mut knobs = vec![judge_knob(&m.knobs[0], vec![off, on], None)];
    assert!(!knobs[0].flagged, "{:?}", knobs[0].problems);
    let closed = apply_known_gaps(&m, &mut knobs);
    assert!(
        closed.len() == 1 && closed[0].contains("remove it from known_gaps"),
        "{closed:?}"
    );
}

/// An environment knob is read by every process of the trainer: one process started with
/// another value (a launcher's copy) is a wrong value naming that process; all of them with
/// the value tried is consumed, unflagged.
#[test]
fn an_environment_knob_must_reach_every_process() {
    let m = knob_manifest::parse(
        r#"
backend: arctic
backend_yaml: backends/arctic.yaml
backend_prefix: remote_backend
knobs:
  - path: env.CUDA_VISIBLE_DEVICES
    default: null
    try: ["3"]
    consumers:
      - at: env.CUDA_VISIBLE_DEVICES
"#,
        std::path::Path::new("env.yaml"),
    )
    .unwrap();
    assert!(
        knob_manifest::validate(&m).is_empty(),
        "{:?}",
        knob_manifest::validate(&m)
    );
    let loc = "env.CUDA_VISIBLE_DEVICES";
    let by = "env.CUDA_VISIBLE_DEVICES.processes";
    let base = snap(&[(loc, Value::Null), (by, json!("main_ppo"))]);
    let mut copied = snap(&[(loc, json!("3")), (by, json!("main_ppo=3"))]);
    copied.locations.get_mut(loc).unwrap().push(json!("0,1"));
    copied
        .locations
        .get_mut(by)
        .unwrap()
        .push(json!("http_server=0,1"));
    let c = judge_ran(&m, &trial(0, json!("3"), &[]), &base, &copied, true);
    let k = judge_knob(&m.knobs[0], vec![c], None);
    assert_eq!(k.verdict.name(), "consumed");
    assert!(k.flagged);
    assert!(
        k.problems.len() == 1
            && k.problems[0].contains("http_server=0,1")
            && k.problems[0].contains("it reached 1 other kinds of process"),
        "{:?}",
        k.problems
    );
    let everywhere = snap(&[(loc, json!("3")), (by, json!("main_ppo=3"))]);
    let c = judge_ran(&m, &trial(0, json!("3"), &[]), &base, &everywhere, true);
    let k = judge_knob(&m.knobs[0], vec![c], None);
    assert!(!k.flagged, "{:?}", k.problems);
}
