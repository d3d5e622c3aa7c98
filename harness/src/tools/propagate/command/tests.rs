use super::trial::over_ray;
use super::*;

#[test]
fn knob_patterns_name_paths_subtrees_and_single_segments() {
    let k = "remote_backend.train.logits.optimization";
    assert!(knob_matches(k, k));
    assert!(knob_matches("remote_backend.train.logits", k));
    assert!(knob_matches("remote_backend.*.logits", k));
    assert!(!knob_matches("remote_backend.train.logit", k));
    assert!(!knob_matches(
        "remote_backend.train.logits.optimization.x",
        k
    ));
    assert!(!knob_matches("*.zorro_train", k));
}

/// The real-verl scenario's `propagate.skip`: its knobs leave the plan, not exercised with
/// the scenario's reason; a name that is no knob is refused with a did-you-mean.
#[test]
fn a_scenario_skips_knobs_it_cannot_perturb() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let file = root.join("scenarios/verl/real-verl-arctic-grpo.yaml");
    let mut scenario = crate::scenario::load_scenario(&file, &[]).unwrap();
    let config = scenario.config.to_json();
    let (m, _) = manifest_for(&file, &config).unwrap();
    let index = |p: &str| m.knobs.iter().position(|k| k.path == p).unwrap();
    let model = index("actor_rollout_ref.model.path");
    let mut plan = verdict::plan_matrix(&m, &config);
    assert!(plan.trials.iter().any(|t| t.knob == model));
    skip_knobs(&mut plan, &m, &m, &scenario).unwrap();
    assert!(!plan.trials.iter().any(|t| t.knob == model));
    let (_, why) = plan.skipped.iter().find(|(k, _)| *k == model).unwrap();
    assert!(why.starts_with("verl loads only"), "{why}");
    // Judged not observable, not flagged.
    let judged = judge_all(&m, &plan, vec![None; plan.trials.len()]);
    let k = &judged.knobs[model];
    assert_eq!(
        (k.verdict, k.flagged),
        (verdict::KnobVerdict::NotObservable, false)
    );
    assert!(k.cells[0]
        .unobservable
        .as_deref()
        .is_some_and(|w| w.starts_with("the scenario skips it: verl loads only")));
    scenario
        .propagate
        .skip
        .insert("actor_rollout_ref.model.pth".into(), "typo".into());
    let e = skip_knobs(&mut plan, &m, &m, &scenario)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("key `propagate.skip.actor_rollout_ref.model.pth`: not a knob")
            && e.contains("did you mean `actor_rollout_ref.model.path`?"),
        "{e}"
    );
}

#[test]
fn until_parses_its_three_forms_and_names_the_bad_one() {
    assert_eq!("initialize".parse::<Until>(), Ok(Until::Initialize));
    assert_eq!("first-update".parse::<Until>(), Ok(Until::FirstUpdate));
    assert_eq!("step:3".parse::<Until>(), Ok(Until::Step(3)));
    for bad in ["step:0", "step:x", "forever", ""] {
        let e = bad.parse::<Until>().unwrap_err().to_string();
        assert!(e.contains("initialize, first-update or step:N"), "{e}");
    }
    assert_eq!(Until::Step(3).steps(), 3);
    assert_eq!(Until::Initialize.steps(), 1);
}

#[test]
fn ray_transport_is_named_as_unobservable() {
    let ray = serde_json::json!({"remote_backend": {"comms": {"protocol": "ray"}}});
    assert!(over_ray(&ray).unwrap().contains("comms.protocol=http"));
    let http = serde_json::json!({"remote_backend": {"comms": {"protocol": "http"}}});
    assert!(over_ray(&http).is_none());
}
