//! The job table: initialization rules, GPU kinds, the sampler's sleep/wake state machine,
//! the default loss.

use super::*;

#[tokio::test]
async fn job_table_rules() {
    let (router, handle) = app();
    assert_eq!(
        call(&router, "GET", "/health", Body::empty()).await.json(),
        json!({"status": "OK"})
    );
    let s = post_json(&router, "/initialize", sampling_config()).await;
    assert_eq!(
        s.json(),
        json!({"job_id": 1, "job_type": "sampling", "running": true})
    );

    let no_ckpt = init_bare(&router, "training").await;
    no_ckpt.assert_refused(StatusCode::BAD_REQUEST, "checkpoint_path");

    let dir = tempfile::tempdir().unwrap();
    let cfg = training_config(&dir.path().display().to_string());
    let t = post_json(&router, "/initialize", cfg.clone()).await;
    assert_eq!(t.json()["job_id"], json!(2));
    let again = post_json(&router, "/initialize", cfg.clone()).await;
    again.assert_refused(StatusCode::CONFLICT, "training job is already running");

    let unknown = call(&router, "GET", "/job/99", Body::empty()).await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
    assert_eq!(unknown.detail(), "job 99 not found");
    assert_eq!(
        call(&router, "GET", "/job/abc", Body::empty()).await.status,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    let info = call(&router, "GET", "/job/2", Body::empty()).await.json();
    assert_eq!(info["status"], json!("RUNNING"));
    assert_eq!(info["checkpoint_path"], cfg["checkpoint_path"]);
    assert!(info["sync_path"].is_string());

    let wrong = post_json(&router, "/step?job_id=1", json!({"learning_rate": null})).await;
    wrong.assert_refused(StatusCode::BAD_REQUEST, "needs a training job");
    let missing = post_json(&router, "/step", json!({})).await;
    assert_eq!(missing.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(missing.detail().contains("job_id"));
    let bad_id = post_json(&router, "/step?job_id=x", json!({})).await;
    assert_eq!(bad_id.status, StatusCode::UNPROCESSABLE_ENTITY);
    let bad_json = call(&router, "POST", "/initialize", Body::from("{not json")).await;
    bad_json.assert_refused(StatusCode::UNPROCESSABLE_ENTITY, "not valid JSON");
    let no_model = post_json(&router, "/initialize", json!({"job_type": "sampling"})).await;
    no_model.assert_refused(StatusCode::UNPROCESSABLE_ENTITY, "model_name");

    let status = call(&router, "GET", "/status", Body::empty()).await.json();
    assert_eq!(status["training_gpus"], json!(1));
    assert_eq!(status["jobs"]["1"]["job_type"], json!("sampling"));
    assert_eq!(status["jobs"]["2"]["job_type"], json!("training"));

    let not_found = call(&router, "GET", "/nope", Body::empty()).await;
    assert_eq!(not_found.status, StatusCode::NOT_FOUND);
    assert_eq!(not_found.detail(), "Not Found");
    assert_eq!(
        call(&router, "GET", "/initialize", Body::empty())
            .await
            .status,
        StatusCode::METHOD_NOT_ALLOWED
    );

    let mismatch = post_json(
        &router,
        "/destroy?job_id=2",
        json!({"job_type": "sampling"}),
    )
    .await;
    assert_eq!(mismatch.status, StatusCode::BAD_REQUEST);
    let d = post_json(
        &router,
        "/destroy?job_id=2",
        json!({"job_type": "training"}),
    )
    .await;
    assert_eq!(d.json(), json!({"job_id": 2}));
    let t3 = post_json(&router, "/initialize", cfg).await;
    assert_eq!(t3.json()["job_id"], json!(3));

    // Every accepted JobConfig is recorded raw, unknown keys included.
    let configs = handle.recorded_job_configs();
    assert_eq!(
        configs.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    assert_eq!(configs[1].1["not_a_jobconfig_key"], json!(1));
    let reqs = handle.requests();
    assert!(reqs
        .iter()
        .any(|r| r.route == "/job/{job_id}" && r.job_id == Some(99) && r.status == 404));

    handle.restart();
    assert!(handle.jobs().is_empty());
    assert_eq!(
        call(&router, "GET", "/job/1", Body::empty()).await.status,
        StatusCode::NOT_FOUND
    );
    let after = post_json(&router, "/initialize", sampling_config()).await;
    assert_eq!(after.json()["job_id"], json!(1));
}

#[tokio::test]
async fn job_types_without_gpus_are_refused() {
    let (router, _) = app_with(ServerOptions {
        log_prob_gpus: 0,
        ..ServerOptions::default()
    });
    let r = init_bare(&router, "log_prob").await;
    r.assert_refused(StatusCode::BAD_REQUEST, "no GPUs of that kind");
    let status = call(&router, "GET", "/status", Body::empty()).await.json();
    assert_eq!(status["log_prob_gpus"], json!(0));
}

#[tokio::test]
async fn sleep_wake_state_machine() {
    let (router, _) = app();
    let (sid, _tid, _dir) = two_jobs(&router).await;
    let q = |route: &str| format!("{route}?job_id={sid}");
    let gen = generate_call(&["Q:1+2=?\nA:"], 1);
    assert_eq!(
        post_frame(&router, &q("/generate"), &gen).await.status,
        StatusCode::OK
    );

    let s = post_json(&router, &q("/sleep-inference"), json!({"level": 2}))
        .await
        .json();
    assert_eq!(s["sampling"], json!({"status": "sleeping", "level": 2}));
    let s = post_json(&router, &q("/sleep-inference"), json!({"level": 1}))
        .await
        .json();
    assert_eq!(s["sampling"]["status"], json!("already_sleeping"));
    // Generating while asleep raises inside the real server's handler: a plain-text 500.
    let g = post_frame(&router, &q("/generate"), &gen).await;
    g.assert_plain_500("/generate");

    let kv = post_json(&router, &q("/wake-inference"), json!(["kv_cache"])).await;
    kv.assert_refused(StatusCode::BAD_REQUEST, "wake [\"weights\"] first");
    let w = post_json(&router, &q("/wake-inference"), json!(["weights"]))
        .await
        .json();
    assert_eq!(
        w["sampling"],
        json!({"status": "weights_ready", "tags": ["weights"]})
    );
    let info = call(&router, "GET", &format!("/job/{sid}"), Body::empty())
        .await
        .json();
    assert_eq!(info["sampling_state"], json!("WEIGHTS_READY"));
    let g = post_frame(&router, &q("/generate"), &gen).await;
    g.assert_refused(StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error");
    let r = post_json(&router, &q("/wake-inference"), json!(["kv_cache"]))
        .await
        .json();
    assert_eq!(r["sampling"]["status"], json!("ready"));
    let r = call(&router, "POST", &q("/wake-inference"), Body::empty())
        .await
        .json();
    assert_eq!(r["sampling"]["status"], json!("already_ready"));
    let bogus = post_json(&router, &q("/wake-inference"), json!(["gpu"])).await;
    assert_eq!(bogus.status, StatusCode::UNPROCESSABLE_ENTITY);

    // The same machine through /operation; a wake with no tags goes straight to READY.
    let op = |t: &str, payload: Value| json!({"operation_type": t, "sub_job_id": sid, "sub_job_type": "sampling", "payload": payload});
    let s = post_json(
        &router,
        &q("/operation"),
        op("sleep-inference", json!({"level": 1})),
    )
    .await
    .json();
    assert_eq!(s["sampling"]["status"], json!("sleeping"));
    let w = post_json(&router, &q("/operation"), op("wake-inference", Value::Null))
        .await
        .json();
    assert_eq!(w["sampling"]["status"], json!("ready"));
    let r = post_json(
        &router,
        &q("/operation"),
        op("reset-prefix-cache", Value::Null),
    )
    .await
    .json();
    assert_eq!(r["sampling"]["status"], json!("prefix_cache_reset"));
    let unknown = post_json(&router, &q("/operation"), op("defragment", Value::Null)).await;
    assert_eq!(unknown.status, StatusCode::BAD_REQUEST);
    assert!(unknown.detail().contains("defragment"));
}

#[tokio::test]
async fn loss_fn_absent_means_grpo() {
    let (router, handle) = app();
    let (_sid, tid, _dir) = two_jobs(&router).await;
    let uri = format!("/forward?job_id={tid}");
    // Absent: the server's default loss, which needs advantages the forward-only batch lacks.
    let absent = post_frame(
        &router,
        &uri,
        &model_call(batch_node(2, false), json!({"post": []})),
    )
    .await;
    // The real server looks up `grpo`, whose signature does not match the call: a 500.
    assert_eq!(absent.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(absent.detail(), "Internal Server Error");
    // Explicit null: forward only.
    let null = post_frame(
        &router,
        &uri,
        &model_call(
            batch_node(2, false),
            json!({"post": ["compute_entropy_and_logprobs"], "loss_fn": null}),
        ),
    )
    .await;
    assert_eq!(null.status, StatusCode::OK, "{:?}", null.body);
    let f = null.frame();
    assert_eq!(f["job_id"], json!(tid));
    assert_eq!(f["batch"]["logprobs"], json!({"shape": [2, 20]}));
    assert_eq!(f["batch"]["entropy"], json!({"shape": [2, 20]}));
    // A forward-only call answers `avg_loss: 0.0`, as the real server does.
    assert_eq!(f["avg_loss"], json!(0.0));
    assert!(null.headers.contains_key(SIM_DURATION_HEADER));

    // forward-backward with loss_fn absent fails as the real server does (a 500).
    let absent = post_frame(
        &router,
        &format!("/forward-backward?job_id={tid}"),
        &model_call(
            batch_node(4, true),
            json!({"post": ["compute_entropy_and_logprobs"]}),
        ),
    )
    .await;
    assert_eq!(absent.status, StatusCode::INTERNAL_SERVER_ERROR);
    // With the adapter's loss.
    let fb = post_frame(
        &router,
        &format!("/forward-backward?job_id={tid}"),
        &model_call(
            batch_node(4, true),
            json!({"post": ["compute_entropy_and_logprobs"], "loss_fn": "verl_grpo"}),
        ),
    )
    .await;
    assert_eq!(fb.status, StatusCode::OK, "{:?}", fb.body);
    let m = fb.frame();
    for k in [
        "actor/pg_loss",
        "actor/ppo_kl",
        "actor/pg_clipfrac",
        "actor/pg_clipfrac_lower",
        "loss",
        "actor/entropy_loss",
    ] {
        assert!(m["metrics"][k].is_number(), "{k}: {m}");
    }
    assert!(m["avg_loss"].is_number());
    let sim: f64 = fb.headers[SIM_DURATION_HEADER]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(sim > 0.0);
    let rec = handle.requests();
    let last = rec.last().unwrap();
    assert_eq!(last.route, "/forward-backward");
    assert_eq!(last.meta.as_ref().unwrap()["global_batch_size"], json!(4));
}
