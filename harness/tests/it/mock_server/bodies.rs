//! Bodies the server must take or refuse: tensors in `meta`, NaN losses, ill-shaped and
//! legacy-pickle payloads, garbage, empty bodies, the load balancer's plain 500.

use super::*;

/// The adapter sends `meta.batch_num_tokens` as a 0-d I64 tensor and may send per-sample
/// values (`rollout_is_weights`) as tensors: the server reads a 0-d tensor as a number.
#[tokio::test]
async fn tensors_in_meta_are_accepted_and_a_0d_tensor_reads_as_a_number() {
    let (router, handle) = app();
    let (_sid, tid, _dir) = two_jobs(&router).await;
    let meta = Node::dict([
        ("pad_token_id", Node::json(0)),
        ("temperature", Node::json(1.0)),
        ("global_batch_size", Node::json(4)),
        ("batch_num_tokens", Node::scalar(i64_tensor(vec![], &[37]))),
        (
            "rollout_is_weights",
            tensor(rlharness_arctic::wire::Tensor::from_f32([4], &[1.0; 4]).unwrap()),
        ),
    ]);
    for route in ["/forward", "/forward-backward"] {
        let root = Node::Dict(vec![
            ("batch".into(), batch_node(4, true)),
            ("meta".into(), meta.clone()),
            (
                "processing".into(),
                Node::Json(
                    json!({"post": ["compute_entropy_and_logprobs"], "loss_fn": "verl_grpo"}),
                ),
            ),
        ]);
        let r = post_frame(&router, &format!("{route}?job_id={tid}"), &root).await;
        assert_eq!(r.status, StatusCode::OK, "{route}: {:?}", r.body);
        let rec = handle.requests();
        let m = rec.last().unwrap().meta.clone().unwrap();
        assert_eq!(m["batch_num_tokens"], json!(37), "{route}");
        assert_eq!(
            m["rollout_is_weights"],
            json!([1.0, 1.0, 1.0, 1.0]),
            "{route}"
        );
    }
}

/// A NaN loss comes back as the `NaN` literal inside the frame (the adapter averages the
/// losses with numpy; a `null` there crashes it).
#[tokio::test]
async fn a_nan_loss_comes_back_as_nan_not_null() {
    let (router, _) = app();
    let (_sid, tid, _dir) = two_jobs(&router).await;
    let Node::Dict(mut e) = batch_node(2, true) else {
        unreachable!()
    };
    for (k, v) in &mut e {
        if k == "advantages" {
            let shape = v.as_tensor().unwrap().shape.clone();
            let n = shape.iter().product::<usize>();
            *v = tensor(
                rlharness_arctic::wire::Tensor::from_f32(shape, &vec![f32::NAN; n]).unwrap(),
            );
        }
    }
    let r = post_frame(
        &router,
        &format!("/forward-backward?job_id={tid}"),
        &model_call(Node::Dict(e), json!({"post": [], "loss_fn": "verl_grpo"})),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let text = String::from_utf8_lossy(&r.body).into_owned();
    assert!(text.contains(r#"\"avg_loss\": NaN"#), "{text}");
    let root = rlharness_arctic::wire::decode(r.body.clone()).unwrap();
    let v = root.to_json().unwrap();
    assert!(rlharness_arctic::wire::pyjson::as_f64(&v["avg_loss"])
        .unwrap()
        .is_nan());
    assert!(
        rlharness_arctic::wire::pyjson::as_f64(&v["metrics"]["loss"])
            .unwrap()
            .is_nan()
    );
}

#[tokio::test]
async fn ill_shaped_tensors_are_unprocessable() {
    let (router, _) = app();
    let (_sid, tid, _dir) = two_jobs(&router).await;
    let uri = format!("/forward?job_id={tid}");
    let processing = json!({"loss_fn": null});
    let with = |f: &dyn Fn(&mut Entries)| {
        let Node::Dict(mut e) = batch_node(2, false) else {
            unreachable!()
        };
        f(&mut e);
        model_call(Node::Dict(e), processing.clone())
    };
    let one_d = with(&|e| e[0].1 = tensor(i64_tensor(vec![40], &[0; 40])));
    let r = post_frame(&router, &uri, &one_d).await;
    r.assert_refused_naming(StatusCode::UNPROCESSABLE_ENTITY, &["input_ids", "[40]"]);
    let mask = with(&|e| e[1].1 = tensor(i64_tensor(vec![2, 19], &[1; 38])));
    let r = post_frame(&router, &uri, &mask).await;
    r.assert_refused(
        StatusCode::UNPROCESSABLE_ENTITY,
        "attention_mask has shape [2, 19]",
    );
    let wide = with(&|e| e[2].1 = tensor(i64_tensor(vec![2, 21], &[1; 42])));
    let r = post_frame(&router, &uri, &wide).await;
    r.assert_refused_naming(StatusCode::UNPROCESSABLE_ENTITY, &["prompts", "[2, 21]"]);
    let missing = with(&|e| e.retain(|(k, _)| k != "prompts"));
    let r = post_frame(&router, &uri, &missing).await;
    assert_eq!(r.detail(), "/forward: missing tensor batch.prompts");
    let gen = post_frame(
        &router,
        "/generate?job_id=1",
        &Node::Json(json!({"prompts": [1, 2]})),
    )
    .await;
    assert_eq!(gen.status, StatusCode::UNPROCESSABLE_ENTITY);
    let unknown_loss = post_frame(
        &router,
        &uri,
        &model_call(batch_node(1, true), json!({"loss_fn": "dpo"})),
    )
    .await;
    assert_eq!(unknown_loss.status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn legacy_pickle_payloads_are_refused() {
    let (router, _) = app();
    let (sid, tid, _dir) = two_jobs(&router).await;
    let pickle = Bytes::from_static(b"\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00}\x94.");
    let zip = Bytes::from_static(b"PK\x03\x04torch.save archive");
    for (route, id) in [
        ("/forward", tid),
        ("/forward-backward", tid),
        ("/generate", sid),
    ] {
        for body in [pickle.clone(), zip.clone()] {
            let r = call(
                &router,
                "POST",
                &format!("{route}?job_id={id}"),
                Body::from(body),
            )
            .await;
            // A frame that does not decode raises inside the real server's handler: a
            // plain-text 500 (the mock's log names the legacy payload).
            r.assert_plain_500(route);
        }
        let r = call(
            &router,
            "POST",
            &format!("{route}?job_id={id}"),
            Body::from(&b"\x03\x00\x00\x00\x00\x00\x00\x00abc"[..]),
        )
        .await;
        r.assert_refused(StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error");
    }
}

#[tokio::test]
async fn garbage_bodies_never_crash_the_server() {
    let (router, _) = app();
    let (_sid, _tid, _dir) = two_jobs(&router).await;
    let routes = [
        "/initialize",
        "/forward-backward",
        "/forward",
        "/step",
        "/save",
        "/load-checkpoint",
        "/generate",
        "/log-probs",
        "/sleep-inference",
        "/wake-inference",
        "/reset-prefix-cache",
        "/operation",
        "/weight-sync",
        "/weight-norm",
        "/weight-digest",
        "/destroy",
    ];
    let bodies: Vec<Bytes> = vec![
        Bytes::new(),
        Bytes::from_static(b"null"),
        Bytes::from_static(b"[]"),
        Bytes::from_static(b"{}"),
        Bytes::from_static(b"\"text\""),
        Bytes::from_static(b"1e999999"),
        Bytes::from_static(b"{\"job_type\": 5, \"payload\": [1], \"operation_type\": {}}"),
        Bytes::from_static(b"\x80\x02garbage"),
        Bytes::from_static(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 1, 2]),
        Bytes::from_static(&[
            8, 0, 0, 0, 0, 0, 0, 0, b'{', b'}', b' ', b' ', b' ', b' ', b' ', b' ',
        ]),
        Bytes::from(vec![0u8; 1000]),
    ];
    for route in routes {
        for q in ["", "?job_id=1", "?job_id=2", "?job_id=99", "?job_id=-1"] {
            for body in &bodies {
                let r = call(
                    &router,
                    "POST",
                    &format!("{route}{q}"),
                    Body::from(body.clone()),
                )
                .await;
                // Garbage is refused: a 4xx, or the real server's plain-text 500 for a
                // failure inside a handler; never a crash or another 5xx.
                assert!(
                    r.status.as_u16() < 500
                        || (r.status == StatusCode::INTERNAL_SERVER_ERROR
                            && r.body == "Internal Server Error"),
                    "{route}{q} {body:?}: {} {:?}",
                    r.status,
                    r.body
                );
                if !r.status.is_success() {
                    assert!(!r.detail().is_empty(), "{route}{q}: {:?}", r.body);
                }
            }
        }
    }
    let health = call(&router, "GET", "/health", Body::empty()).await;
    assert_eq!(health.status, StatusCode::OK);
}

/// A `meta` with `load_balancer` but no `max_token_len_per_gpu` fails inside the real server's
/// handler: a plain-text 500 that says nothing. The `x-rlharness-error` header (which the
/// recording proxy writes to the wire) names the missing key.
#[tokio::test]
async fn a_load_balancer_without_max_token_len_is_a_plain_500() {
    let (router, _) = app();
    let (_sid, tid, _dir) = two_jobs(&router).await;
    let call_with = |meta: Value, update: bool| {
        let processing = if update {
            json!({"loss_fn": "grpo"})
        } else {
            json!({"loss_fn": null})
        };
        Node::Dict(vec![
            ("batch".into(), batch_node(2, update)),
            ("meta".into(), Node::Json(meta)),
            ("processing".into(), Node::Json(processing)),
        ])
    };
    for (route, update) in [("/forward", false), ("/forward-backward", true)] {
        let uri = format!("{route}?job_id={tid}");
        let bad = json!({"load_balancer": true, "pad_token_id": 0, "temperature": 1.0});
        let r = post_frame(&router, &uri, &call_with(bad, update)).await;
        r.assert_plain_500(route);
        let why = r.headers["x-rlharness-error"].to_str().unwrap();
        assert!(
            why.contains("load_balancer") && why.contains("max_token_len_per_gpu"),
            "{why}"
        );
        let good = json!({"load_balancer": true, "max_token_len_per_gpu": 4096,
                          "pad_token_id": 0, "temperature": 1.0});
        let r = post_frame(&router, &uri, &call_with(good, update)).await;
        assert_eq!(r.status, StatusCode::OK, "{route}: {:?}", r.body);
        assert!(!r.headers.contains_key("x-rlharness-error"));
    }
}

/// An empty body (zero bytes) on a route that requires one is FastAPI's 422, before the
/// handler runs: exactly `{"detail": [{"type": "missing", "loc": ["body"], ...}]}`, whatever
/// the route. Routes whose body is optional still take an empty one.
#[tokio::test]
async fn an_empty_body_is_fastapis_field_required() {
    let (router, _) = app();
    let (sid, tid, _dir) = two_jobs(&router).await;
    let want = json!({"detail": [{"type": "missing", "loc": ["body"], "msg": "Field required", "input": null}]});
    for (route, id) in [
        ("/initialize", None),
        ("/destroy", Some(tid)),
        ("/forward-backward", Some(tid)),
        ("/forward", Some(tid)),
        ("/step", Some(tid)),
        ("/save", Some(tid)),
        ("/load-checkpoint", Some(tid)),
        ("/generate", Some(sid)),
        ("/log-probs", Some(sid)),
        ("/operation", Some(sid)),
        ("/weight-sync", Some(tid)),
        ("/weight-norm", None),
        ("/weight-digest", None),
    ] {
        let uri = id.map_or(route.to_string(), |id| format!("{route}?job_id={id}"));
        let r = call(&router, "POST", &uri, Body::empty()).await;
        assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{route}");
        assert_eq!(r.json(), want, "{route}");
        assert!(r.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/json"));
        let why = r.headers["x-rlharness-error"].to_str().unwrap();
        assert!(why.contains(route) && why.contains("empty"), "{why}");
    }
    // Nothing was destroyed or created on the way.
    let status = call(&router, "GET", "/status", Body::empty()).await.json();
    assert_eq!(status["jobs"].as_object().unwrap().len(), 2, "{status}");
    for route in ["/wake-inference", "/reset-prefix-cache", "/sleep-inference"] {
        let r = call(
            &router,
            "POST",
            &format!("{route}?job_id={sid}"),
            Body::empty(),
        )
        .await;
        assert_eq!(r.status, StatusCode::OK, "{route}: {:?}", r.body);
    }
}
