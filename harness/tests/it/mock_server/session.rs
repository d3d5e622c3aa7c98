//! A full session over a real port, log-prob jobs, the standalone server's script check,
//! the worker sleep routes and the real server's error shapes.

use super::*;

/// The done-when session of the issue, over a real port with an HTTP client.
#[tokio::test]
async fn full_session_over_a_real_port() {
    let engine = MockEngine::new(MockScript::default(), 3).unwrap();
    let (router, handle) = recorded(engine, ServerOptions::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(server::serve(listener, router, async {
        let _ = stop_rx.await;
    }));
    let base = format!("http://{addr}");
    let http = reqwest::Client::new();
    let dir = tempfile::tempdir().unwrap();

    let get = |route: String| {
        let http = http.clone();
        let url = format!("{base}{route}");
        async move {
            http.get(url)
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        }
    };
    let post = |route: String, body: Value| {
        let http = http.clone();
        let url = format!("{base}{route}");
        async move {
            let r = http.post(url).json(&body).send().await.unwrap();
            let status = r.status();
            let v: Value = r.json().await.unwrap();
            assert!(status.is_success(), "{status}: {v}");
            v
        }
    };
    let post_frame = |route: String, root: Node| {
        let http = http.clone();
        let url = format!("{base}{route}");
        async move {
            let r = http
                .post(url)
                .header("content-type", "application/octet-stream")
                .body(encode(&root).unwrap())
                .send()
                .await
                .unwrap();
            assert!(r.status().is_success(), "{}", r.status());
            assert!(r.headers()["content-type"]
                .to_str()
                .unwrap()
                .contains("application/octet-stream"));
            assert!(r.headers().contains_key(SIM_DURATION_HEADER));
            decode(r.bytes().await.unwrap()).unwrap()
        }
    };

    let health = get("/health".into()).await;
    assert_eq!(health, json!({"status": "OK"}));
    let sid = post("/initialize".into(), sampling_config()).await["job_id"]
        .as_u64()
        .unwrap();
    let tid = post(
        "/initialize".into(),
        training_config(&dir.path().display().to_string()),
    )
    .await["job_id"]
        .as_u64()
        .unwrap();
    let info = get(format!("/job/{tid}")).await;
    assert_eq!(info["status"], json!("RUNNING"));

    // generate: one prompt a request, n rollouts.
    let gen = post_frame(
        format!("/generate?job_id={sid}"),
        generate_call(&["Q:3+4=?\nA:"], 4),
    )
    .await;
    let gen = node_to_json(&gen).unwrap();
    assert_eq!(gen["job_id"], json!(sid));
    let results = gen["results"].as_array().unwrap();
    assert_eq!(results.len(), 4);
    for r in results {
        assert_eq!(r["prompt_len"], json!(10));
        assert_eq!(
            r["generation_len"],
            json!(r["token_ids"].as_array().unwrap().len())
        );
        assert!(["stop", "length"].contains(&r["finish_reason"].as_str().unwrap()));
        assert!(r["prefix_cache_len"].is_number() && r["text"].is_string());
    }

    // forward (old log-probs), DSSST1 in and out.
    let fwd = post_frame(
        format!("/forward?job_id={tid}"),
        model_call(
            batch_node(4, false),
            json!({"post": ["compute_entropy_and_logprobs"], "loss_fn": null}),
        ),
    )
    .await;
    let Node::Dict(entries) = fwd else {
        panic!("forward answer is not a dict")
    };
    let batch = &entries.iter().find(|(k, _)| k == "batch").unwrap().1;
    let Node::Dict(batch) = batch else {
        panic!("batch is not a dict")
    };
    let Node::Tensor { tensor: lp, .. } = &batch[0].1 else {
        panic!("logprobs is not a tensor")
    };
    assert_eq!(lp.shape, vec![4, 20]);
    let lp = tensor_f64(lp, "logprobs").unwrap();
    assert!(lp[11..17].iter().all(|&v| v < 0.0), "{lp:?}");
    assert!(lp[17..20].iter().all(|&v| v == 0.0));

    // forward-backward and step.
    let fb = post_frame(
        format!("/forward-backward?job_id={tid}"),
        model_call(batch_node(4, true), json!({"post": ["apply_temperature", "compute_entropy_and_logprobs"], "loss_fn": "verl_grpo"})),
    )
    .await;
    let fb = node_to_json(&fb).unwrap();
    assert!(fb["metrics"]["actor/pg_loss"].is_number(), "{fb}");
    let step = post(
        format!("/step?job_id={tid}"),
        json!({"learning_rate": null}),
    )
    .await;
    assert_eq!(step["metrics"]["last_lr"], json!(1e-6));
    assert!(step["metrics"]["grad_norm"].as_f64().unwrap() > 0.0);
    assert_eq!(step["batch"], json!({}));

    // Weight sync as verl does it.
    let norms = |body: Value| post("/weight-norm".into(), body);
    let before = norms(json!({"training_job_id": tid, "sampling_job_id": sid})).await;
    assert_ne!(before["training_norm"], before["sampling_norm"]);
    post(
        format!("/sleep-inference?job_id={sid}"),
        json!({"level": 1}),
    )
    .await;
    let w = post(format!("/wake-inference?job_id={sid}"), json!(["weights"])).await;
    assert_eq!(w["sampling"]["status"], json!("weights_ready"));
    let ws = post(
        format!("/operation?job_id={tid}"),
        json!({"operation_type": "weight-sync", "sub_job_id": tid, "sub_job_type": "training",
               "payload": {"source_sub_job_id": tid, "target_sub_job_ids": [sid], "cuda_ipc": false}}),
    )
    .await;
    assert_eq!(ws, json!({"job_id": tid, "status": "ok"}));
    let k = post(format!("/wake-inference?job_id={sid}"), json!(["kv_cache"])).await;
    assert_eq!(k["sampling"]["status"], json!("ready"));
    post(
        format!("/operation?job_id={sid}"),
        json!({"operation_type": "reset-prefix-cache", "sub_job_id": sid, "sub_job_type": "sampling", "payload": {}}),
    )
    .await;
    let after = norms(json!({"training_job_id": tid, "sampling_job_id": sid})).await;
    assert_eq!(after["training_norm"], after["sampling_norm"]);
    assert!(after["training_num_params"].as_u64().unwrap() > 500_000_000);

    // save, then destroy both jobs.
    let saved = post(
        format!("/save?job_id={tid}"),
        json!({"checkpoint_type": "full", "export_hf": false}),
    )
    .await;
    assert_eq!(saved["job_id"], json!(tid));
    assert_eq!(saved["global_step"], json!(1));
    assert!(std::path::Path::new(saved["path"].as_str().unwrap())
        .join("mock_checkpoint.json")
        .exists());
    let loaded = post(format!("/load-checkpoint?job_id={tid}"), json!({"step": 1})).await;
    assert_eq!(loaded["global_step"], json!(1));
    post(
        format!("/destroy?job_id={sid}"),
        json!({"job_type": "sampling"}),
    )
    .await;
    post(
        format!("/destroy?job_id={tid}"),
        json!({"job_type": "training"}),
    )
    .await;
    let status = get("/status".into()).await;
    assert_eq!(status["jobs"], json!({}));

    let routes: Vec<String> = handle.requests().into_iter().map(|r| r.route).collect();
    for want in [
        "/generate",
        "/forward",
        "/forward-backward",
        "/step",
        "/operation",
        "/save",
        "/destroy",
    ] {
        assert!(
            routes.iter().any(|r| r == want),
            "{want} not recorded: {routes:?}"
        );
    }
    stop_tx.send(()).unwrap();
    server.await.unwrap().unwrap();
}

#[tokio::test]
async fn log_prob_jobs_forward_and_score() {
    let (router, _) = app();
    let lp = init_bare(&router, "log_prob").await;
    let id = lp.json()["job_id"].as_u64().unwrap();
    // Without ds_config the log_prob job runs no DeepSpeed engine to forward.
    let f = post_frame(
        &router,
        &format!("/forward?job_id={id}"),
        &model_call(batch_node(1, false), json!({"loss_fn": null})),
    )
    .await;
    f.assert_refused(StatusCode::BAD_REQUEST, "ds_config");
    let r = post_json(
        &router,
        &format!("/log-probs?job_id={id}"),
        json!({"prompts": ["Q:1+1=?\nA:"], "completions": ["#### 2"], "top_k": 1}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let v = r.frame();
    assert_eq!(v["results"][0]["logprobs"], json!({"shape": [6]}));
    assert_eq!(v["results"][0]["token_ids"].as_array().unwrap().len(), 6);
}

#[tokio::test]
async fn standalone_server_refuses_an_invalid_script() {
    let script = MockScript {
        device: "abacus".into(),
        ..MockScript::default()
    };
    let err = rlharness_arctic::mock::serve_mock_standalone("127.0.0.1", 0, script, 1)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    assert!(err.to_string().contains("abacus"), "{err}");
}

/// The five routes the client exposes beyond the adapter's, and the `workers` lists of the
/// sleep/wake answers.
#[tokio::test]
async fn training_and_log_prob_sleep_routes_answer_with_workers() {
    let (router, _) = app();
    let (sid, tid, _dir) = two_jobs(&router).await;
    let post = |uri: String, body: Value| {
        let router = router.clone();
        async move { post_json(&router, &uri, body).await.json() }
    };
    let r = post(
        format!("/sleep-training?job_id={tid}&mode=non_lp"),
        json!({}),
    )
    .await;
    assert_eq!(
        r,
        json!({"job_id": tid, "workers": [{"status": "offloaded_non_lp"}]})
    );
    let r = post(
        format!("/sleep-training?job_id={tid}"),
        json!({"mode": "non_lp"}),
    )
    .await;
    assert_eq!(r["workers"][0]["status"], "already_offloaded");
    let r = post(format!("/wake-training?job_id={tid}"), Value::Null).await;
    assert_eq!(r["workers"][0]["status"], "on_gpu");
    let r = post(format!("/wake-training?job_id={tid}"), Value::Null).await;
    assert_eq!(r["workers"][0]["status"], "already_on_gpu");
    let r = post(format!("/empty-training-cache?job_id={tid}"), Value::Null).await;
    assert!(r["workers"].is_array(), "{r}");
    let wrong = post_json(&router, &format!("/sleep-log-prob?job_id={tid}"), json!({})).await;
    assert_eq!(wrong.status, StatusCode::BAD_REQUEST);

    let r = post(
        format!("/sleep-inference?job_id={sid}&level=1"),
        Value::Null,
    )
    .await;
    assert_eq!(r["sampling"], json!({"status": "sleeping", "level": 1}));
    assert!(r["workers"].is_array(), "{r}");
    let r = post(format!("/wake-inference?job_id={sid}"), Value::Null).await;
    assert_eq!(r["sampling"]["status"], "ready");
    let r = post(format!("/wake-inference?job_id={sid}"), Value::Null).await;
    assert_eq!(r["sampling"], json!({"status": "already_ready"}), "no tags");
    assert!(r["workers"].is_array(), "{r}");
}

/// `/forward` looks its job up before checking it exists: an unknown id is the real server's
/// plain-text 500, while other routes answer a JSON 404.
#[tokio::test]
async fn an_unknown_job_on_forward_is_a_500_elsewhere_a_404() {
    let (router, _) = app();
    let (_sid, _tid, _dir) = two_jobs(&router).await;
    let r = post_frame(
        &router,
        "/forward?job_id=99",
        &model_call(batch_node(2, false), json!({"loss_fn": null})),
    )
    .await;
    assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(r.body, "Internal Server Error");
    let r = post_json(&router, "/step?job_id=99", json!({})).await;
    r.assert_refused(StatusCode::NOT_FOUND, "job 99");
}

/// An assertion inside `/save` or `/load-checkpoint` (here: no checkpoint to load, a
/// checkpoint folder that does not exist) is the real server's plain-text 500, not a JSON 4xx;
/// a value of the wrong type is the framework's 422 with a list in `detail`.
#[tokio::test]
async fn save_and_load_assertions_are_plain_500s() {
    let (router, _) = app();
    let (_sid, tid, dir) = two_jobs(&router).await;
    let q = |route: &str| format!("{route}?job_id={tid}");
    let missing = dir.path().join("nowhere").display().to_string();
    for load in [
        json!({"path": null, "step": null}),
        json!({"path": missing, "step": null}),
    ] {
        let r = post_json(&router, &q("/load-checkpoint"), load).await;
        assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(r.body, "Internal Server Error");
    }
    let r = post_json(&router, &q("/save"), json!({"step": "one"})).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(r.json()["detail"].is_array());
}
