//! What Arctic-Platform 0.1.4 added on the wire, over HTTP against the mock, beside what
//! 5864380 sends (still accepted): `sp_size` resolved from a JobConfig's nested paths (and a
//! conflict refused), `meta.return_fwd_batch` on `/forward-backward`, a frame in a forced
//! single-chunk envelope, and the renamed GRPO losses.

use super::*;
use rlharness_arctic::wire::chunk::request_envelope;

fn training_with(dir: &str, extra: Value) -> Value {
    let mut cfg = training_config(dir);
    cfg.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    cfg
}

/// A 422 is the real server's validation list; the joined messages.
fn msgs(a: &Answer) -> String {
    assert_eq!(a.status, StatusCode::UNPROCESSABLE_ENTITY, "{:?}", a.body);
    a.detail()
}

#[tokio::test]
async fn sp_size_is_resolved_from_the_nested_paths_and_a_conflict_is_refused() {
    let (router, _) = app();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display().to_string();
    // Two paths that disagree: 0.1.4's 422, naming both paths and both degrees.
    let clash = training_with(
        &d,
        json!({"ds_config": {"sequence_parallel_size": 2}, "training_config": {"sp_size": 4}}),
    );
    let m = msgs(&post_json(&router, "/initialize", clash).await);
    for needle in [
        "conflicting sequence-parallel degrees",
        "'training_config.sp_size': 4",
        "'ds_config.sequence_parallel_size': 2",
    ] {
        assert!(m.contains(needle), "{needle} not in {m}");
    }
    // A degree that is not an integer >= 1, named with its path.
    for bad in [json!(0), json!(1.5), json!("2")] {
        let cfg = training_with(
            &d,
            json!({"ds_worker_config": {"parallelism": {"sequence_parallel": bad}}}),
        );
        let m = msgs(&post_json(&router, "/initialize", cfg).await);
        assert!(
            m.contains("ds_worker_config.parallelism.sequence_parallel must be an integer >= 1")
                && m.contains(&bad.to_string()),
            "{m}"
        );
    }
    // Nothing was created by the refusals; agreeing paths give the job its degree.
    let ok = training_with(
        &d,
        json!({"ds_config": {"sequence_parallel_size": 2}, "ds_worker_config": {"sequence_parallel_size": 2}}),
    );
    let t = post_json(&router, "/initialize", ok).await;
    assert_eq!(t.status, StatusCode::OK, "{:?}", t.body);
    let tid = t.json()["job_id"].as_u64().unwrap();
    assert_eq!(tid, 1, "a refused config took a job id");
    let info = call(&router, "GET", &format!("/job/{tid}"), Body::empty()).await;
    assert_eq!(info.json()["sp_size"], json!(2));
    // A sampling job counts only the worker-shaped paths, so its ds_config does not clash.
    let s = post_json(
        &router,
        "/initialize",
        json!({"model_name": "m", "job_type": "sampling",
               "ds_config": {"sequence_parallel_size": 2},
               "ds_worker_config": {"sequence_parallel": 3}}),
    )
    .await;
    assert_eq!(s.status, StatusCode::OK, "{:?}", s.body);
    let status = call(&router, "GET", "/status", Body::empty()).await.json();
    assert_eq!(status["jobs"]["2"]["sp_size"], json!(3), "{status}");
    // 5864380's configs carry no degree: 1.
    let (router, _) = app();
    let (sid, _, _dir) = two_jobs(&router).await;
    let info = call(&router, "GET", &format!("/job/{sid}"), Body::empty()).await;
    assert_eq!(info.json()["sp_size"], json!(1));
}

fn update_call(meta: Value, loss_fn: &str, config: Option<Value>) -> Node {
    let mut processing = json!({"post": ["compute_entropy_and_logprobs"], "loss_fn": loss_fn});
    if let Some(c) = config {
        processing["config"] = c;
    }
    Node::Dict(vec![
        ("batch".into(), batch_node(4, true)),
        ("meta".into(), Node::Json(meta)),
        ("processing".into(), Node::Json(processing)),
    ])
}

fn meta_with(extra: Value) -> Value {
    let mut m = json!({"pad_token_id": 0, "temperature": 1.0, "global_batch_size": 4});
    m.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    m
}

/// The f32 values of the tensor at `batch.<name>` of a frame answer.
fn batch_values(a: &Answer, name: &str) -> Option<(Vec<usize>, Vec<f64>)> {
    let Node::Dict(root) = decode(a.body.clone()).unwrap() else {
        panic!("the answer is not a dict frame")
    };
    let (_, Node::Dict(batch)) = root.into_iter().find(|(k, _)| k == "batch")? else {
        panic!("batch is not a dict")
    };
    let (_, t) = batch.into_iter().find(|(k, _)| k == name)?;
    let t = t.as_tensor().unwrap().clone();
    Some((t.shape.clone(), tensor_f64(&t, name).unwrap()))
}

#[tokio::test]
async fn return_fwd_batch_adds_the_forward_pass_batch_to_forward_backward() {
    let (router, _) = app();
    let (_sid, tid, _dir) = two_jobs(&router).await;
    let fb = format!("/forward-backward?job_id={tid}");
    // Without it (5864380's answer, and 0.1.4's default): no `batch`.
    for meta in [
        meta_with(json!({})),
        meta_with(json!({"return_fwd_batch": false})),
    ] {
        let plain = post_frame(&router, &fb, &update_call(meta, "verl_grpo", None)).await;
        assert_eq!(plain.status, StatusCode::OK, "{:?}", plain.body);
        let keys: Vec<String> = plain.frame().as_object().unwrap().keys().cloned().collect();
        assert_eq!(keys, ["job_id", "metrics", "avg_loss"]);
    }
    let asked = update_call(
        meta_with(json!({"return_fwd_batch": true})),
        "verl_grpo",
        None,
    );
    let with = post_frame(&router, &fb, &asked).await;
    assert_eq!(with.status, StatusCode::OK, "{:?}", with.body);
    let keys: Vec<String> = with.frame().as_object().unwrap().keys().cloned().collect();
    assert_eq!(keys, ["job_id", "metrics", "avg_loss", "batch"]);
    // The same log-probs and entropy `/forward` answers under the same weights.
    let fwd = post_frame(&router, &format!("/forward?job_id={tid}"), &asked).await;
    for name in ["logprobs", "entropy"] {
        let got = batch_values(&with, name).unwrap_or_else(|| panic!("no batch.{name}"));
        let want = batch_values(&fwd, name).unwrap();
        assert_eq!(got.0, vec![4, 20], "{name}");
        assert_eq!(got, want, "{name}");
        assert!(got.1.iter().any(|&v| v != 0.0), "{name} all zero");
    }
    // A value that is not a flag is refused, naming the key (the real server would read the
    // string "false" as true).
    let text = update_call(
        meta_with(json!({"return_fwd_batch": "false"})),
        "verl_grpo",
        None,
    );
    let r = post_frame(&router, &fb, &text).await;
    let m = msgs(&r);
    assert!(
        m.contains("meta.return_fwd_batch must be a boolean") && m.contains("\"false\""),
        "{m}"
    );
}

#[tokio::test]
async fn a_frame_in_a_forced_single_chunk_envelope_is_served_as_the_bare_frame() {
    let (router, _) = app();
    let (sid, tid, _dir) = two_jobs(&router).await;
    let fb = format!("/forward-backward?job_id={tid}");
    let frame = encode(&update_call(meta_with(json!({})), "verl_grpo", None)).unwrap();
    let bare = call(&router, "POST", &fb, Body::from(frame.clone())).await;
    let env = request_envelope(&frame, Some("fwd-bwd"), "group-1").unwrap();
    let wrapped = call(&router, "POST", &fb, Body::from(env)).await;
    assert_eq!(wrapped.status, StatusCode::OK, "{:?}", wrapped.body);
    assert_eq!(wrapped.frame(), bare.frame());
    // /generate takes one too.
    let gen = encode(&generate_call(&["Q:1+1=?\nA:"], 1)).unwrap();
    let env = request_envelope(&gen, Some("generate"), "group-2").unwrap();
    let r = call(
        &router,
        "POST",
        &format!("/generate?job_id={sid}"),
        Body::from(env),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.frame()["results"].as_array().unwrap().len(), 1);
    // An envelope whose payload was altered fails its sha256 check: the plain 500 of a frame
    // that does not decode, the reason in the header.
    let mut env = request_envelope(&frame, None, "group-3").unwrap();
    let last = env.len() - 1;
    env[last] ^= 0xff;
    let r = call(&router, "POST", &fb, Body::from(env)).await;
    r.assert_plain_500(&fb);
    let why = r.headers["x-rlharness-error"].to_str().unwrap();
    assert!(
        why.contains("byte chunk envelope") && why.contains("mismatch"),
        "{why}"
    );
}

#[tokio::test]
async fn the_renamed_grpo_losses_are_the_policy_loss_and_echo_checks_its_config() {
    let (router, _) = app();
    let (_sid, tid, _dir) = two_jobs(&router).await;
    let fb = format!("/forward-backward?job_id={tid}");
    let echo = json!({"aux_ce_weight": 0.0, "echo_global_num_sequences": 4});
    let want = post_frame(
        &router,
        &fb,
        &update_call(meta_with(json!({})), "verl_grpo", None),
    )
    .await
    .frame();
    for (name, config) in [
        ("grpo", None),
        ("ap_grpo", Some(json!({"eps_clip": 0.2}))),
        ("grpo_echo_v1", Some(echo.clone())),
        ("ap_grpo_echo_v1", Some(echo.clone())),
    ] {
        let r = post_frame(
            &router,
            &fb,
            &update_call(meta_with(json!({})), name, config),
        )
        .await;
        assert_eq!(r.status, StatusCode::OK, "{name}: {:?}", r.body);
        assert_eq!(r.frame(), want, "{name}");
    }
    // An _echo_v1 loss without its required keys fails inside the real handler: a plain 500.
    let missing = json!({"aux_ce_weight": 0.0});
    let r = post_frame(
        &router,
        &fb,
        &update_call(meta_with(json!({})), "grpo_echo_v1", Some(missing)),
    )
    .await;
    r.assert_plain_500(&fb);
    let why = r.headers["x-rlharness-error"].to_str().unwrap();
    assert!(why.contains("echo_global_num_sequences"), "{why}");
    // A real ECHO weight is not computed here: refused, saying so.
    let weighted = json!({"aux_ce_weight": 0.5, "echo_global_num_sequences": 4});
    let r = post_frame(
        &router,
        &fb,
        &update_call(meta_with(json!({})), "ap_grpo_echo_v1", Some(weighted)),
    )
    .await;
    r.assert_refused_naming(StatusCode::BAD_REQUEST, &["aux_ce_weight", "control run"]);
    // A name neither release registers is refused, listing both releases' names.
    let r = post_frame(
        &router,
        &fb,
        &update_call(meta_with(json!({})), "cortex_grpo", None),
    )
    .await;
    r.assert_refused_naming(
        StatusCode::BAD_REQUEST,
        &["unknown loss_fn", "ap_grpo_echo_v1", "verl_grpo"],
    );
}
