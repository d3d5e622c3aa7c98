use super::*;
use serde_json::json;

pub(crate) fn records() -> Vec<Value> {
    vec![
        json!({"route": "/health", "status": 200}),
        json!({"route": "/initialize", "status": 200, "request": {"model_name": "m", "job_type": "sampling", "vllm_config": {"max_model_len": 32}}}),
        json!({"route": "/initialize", "status": 200, "request": {"model_name": "m", "job_type": "training", "ds_worker_config": {"use_liger": false}, "seed": 42}}),
        json!({"route": "/generate?job_id=1", "job_id": 1, "status": 200, "request": {"body": {"prompts": ["1+1="], "sampling_params": {"n": 5, "temperature": 1.0}}}}),
        json!({"route": "/generate?job_id=1", "job_id": 1, "status": 200, "request": {"body": {"prompts": ["2+2="], "sampling_params": {"n": 5, "temperature": 1.0}}}}),
        json!({"route": "/forward?job_id=2", "job_id": 2, "status": 200, "request": {"batch": {"input_ids": {"dtype": "I64", "shape": [5, 32]}}, "meta": {"rollout_n": 5, "actor_config": {"clip_ratio": 0.2}}, "processing": {"post": ["compute_entropy_and_logprobs"], "loss_fn": null}}}),
        json!({"route": "/forward-backward?job_id=2", "job_id": 2, "status": 200, "request": {"batch": {"input_ids": {"dtype": "I64", "shape": [5, 32]}, "advantages": {"dtype": "F32", "shape": [5, 32]}}, "meta": {"rollout_n": 5, "batch_num_tokens": 77, "actor_config": {"clip_ratio": 0.2}}, "processing": {"post": ["apply_temperature", "compute_entropy_and_logprobs"], "loss_fn": "verl_grpo"}}}),
        json!({"route": "/step?job_id=2", "job_id": 2, "status": 200}),
        json!({"route": "/job/2", "job_id": 2, "status": 404}),
    ]
}

#[test]
fn reads_every_family() {
    let w = WireSnapshot::from_records(&records(), None, Some(&json!({"colocate": true})));
    assert_eq!(
        w.single("job.training.ds_worker_config.use_liger"),
        Some(&json!(false))
    );
    assert_eq!(
        w.single("job.sampling.vllm_config.max_model_len"),
        Some(&json!(32))
    );
    assert_eq!(w.single("meta.actor_config.clip_ratio"), Some(&json!(0.2)));
    assert_eq!(w.single("meta.batch_num_tokens"), Some(&json!(77)));
    assert_eq!(w.single("batch.advantages"), Some(&json!("F32")));
    assert_eq!(
        w.locations["processing.loss_fn"],
        vec![Value::Null, json!("verl_grpo")]
    );
    assert_eq!(w.single("generate.sampling_params.n"), Some(&json!(5)));
    assert_eq!(w.single("route./generate"), Some(&json!(2)));
    assert_eq!(w.single("route./job/{job_id}"), Some(&json!(1)));
    assert_eq!(w.single("srv.colocate"), Some(&json!(true)));
    assert_eq!(w.single("http_errors"), Some(&json!(1)));
    assert_eq!(
        w.single("routes"),
        Some(&json!("/health, /initialize x2, /generate x2, /forward, /forward-backward, /step, /job/{job_id}"))
    );
}

#[test]
fn server_config_wins_over_initialize_requests() {
    let sc = json!({"training": {"model_name": "m", "seed": 7}, "sampling": [{"model_name": "m"}]});
    let w = WireSnapshot::from_records(&records(), Some(&sc), None);
    assert_eq!(w.single("job.training.seed"), Some(&json!(7)));
    assert!(!w
        .locations
        .contains_key("job.training.ds_worker_config.use_liger"));
    assert_eq!(w.single("job.sampling.model_name"), Some(&json!("m")));
}

#[test]
fn diff_skips_volatile_and_sees_type_changes() {
    let a = WireSnapshot::from_records(&records(), None, None);
    let mut recs = records();
    recs[6]["request"]["meta"]["batch_num_tokens"] = json!(80);
    recs[2]["request"]["seed"] = json!(42.0);
    let b = WireSnapshot::from_records(&recs, None, None);
    let d = diff(&a, &b, &["meta.batch_num_tokens".to_string()]);
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0].location, "job.training.seed");
    assert_eq!(d[0].describe(), "job.training.seed: 42 -> 42.0");
}

#[test]
fn load_run_names_the_bad_line() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("wire.jsonl"),
        "{\"route\": \"/health\"}\nnot json\n",
    )
    .unwrap();
    let e = WireSnapshot::load_run(dir.path()).unwrap_err().to_string();
    assert!(e.contains("wire.jsonl:2"), "{e}");
    let e = WireSnapshot::load_run(&dir.path().join("nope"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("nope"), "{e}");
    // A torn last line (no newline: the writer was killed) is dropped; a whole bad last
    // line is still an error.
    std::fs::write(
        dir.path().join("wire.jsonl"),
        "{\"route\": \"/health\"}\n{\"route\": \"/gen",
    )
    .unwrap();
    let w = WireSnapshot::load_run(dir.path()).unwrap();
    assert_eq!(w.single("route./health"), Some(&Value::from(1u64)));
    assert_eq!(w.single("routes"), Some(&Value::from("/health")));
    std::fs::write(
        dir.path().join("wire.jsonl"),
        "{\"route\": \"/health\"}\n{\"route\": \"/gen\n",
    )
    .unwrap();
    let e = WireSnapshot::load_run(dir.path()).unwrap_err().to_string();
    assert!(e.contains("wire.jsonl:2"), "{e}");
    std::fs::write(dir.path().join("wire.jsonl"), "{\"route\": \"/health\"}\n").unwrap();
    std::fs::write(dir.path().join("server_config.json"), "{").unwrap();
    let e = WireSnapshot::load_run(dir.path()).unwrap_err().to_string();
    assert!(e.contains("server_config.json"), "{e}");
}

#[test]
fn patterns() {
    assert!(pattern_matches("job.*.seed", "job.training.seed"));
    assert!(pattern_matches(
        "job.training.ds_config",
        "job.training.ds_config.scheduler.type"
    ));
    assert!(!pattern_matches(
        "job.training.ds_config.x",
        "job.training.ds_config"
    ));
    assert!(!pattern_matches("meta.rollout_n", "meta.rollout_nn"));
    assert_eq!(normalize_route("/forward?job_id=2"), "/forward");
    assert_eq!(normalize_route("POST /job/3"), "/job/{job_id}");
}

#[test]
fn a_stopped_run_is_cut_where_its_trial_stopped() {
    let recs: Vec<Value> = [
        "/health",
        "/initialize",
        "/initialize",
        "/operation",
        "/generate",
        "/forward",
        "/forward-backward",
        "/step",
        "/operation",
        "/generate",
        "/generate",
        "/step",
        "/generate",
    ]
    .iter()
    .map(|r| json!({ "route": r }))
    .collect();
    assert_eq!(WireCut::Initialized.end(&recs), 3);
    // Step 1 ends where step 2's first /generate begins; step 2 where step 3's does.
    assert_eq!(WireCut::Steps(1).end(&recs), 9);
    assert_eq!(WireCut::Steps(2).end(&recs), 12);
    // A run that never began its next step is kept whole.
    assert_eq!(WireCut::Steps(3).end(&recs), recs.len());
}

/// The scoring route's settings are read, its prompts are not.
#[test]
fn log_probs_settings_are_read_without_their_data() {
    let mut r = records();
    r.push(json!({"route": "/log-probs?job_id=3", "job_id": 3, "status": 200, "request": {"body": {"prompts": ["1+1="], "completions": null, "top_k": 1}}}));
    r.push(json!({"route": "/log-probs?job_id=3", "job_id": 3, "status": 200, "request": {"body": {"prompts": ["2+2="], "completions": ["4"], "top_k": 1}}}));
    let w = WireSnapshot::from_records(&r, None, None);
    assert_eq!(w.single("log_probs.top_k"), Some(&json!(1)));
    assert_eq!(
        w.locations["log_probs.completions"],
        vec![json!(false), json!(true)]
    );
    assert!(!w
        .locations
        .keys()
        .any(|k| k.starts_with("log_probs.prompts")));
    assert_eq!(w.single("route./log-probs"), Some(&json!(2)));
}
