//! `/weight-digest`, the rlharness extension beside `/weight-norm`: its body's rules (each
//! refusal a clear 4xx), and the mock's simulated manifests, equal after a sync and apart after
//! an update the sampler never received.

use super::*;

async fn digest(router: &Router, body: Value) -> Answer {
    post_json(router, "/weight-digest", body).await
}

#[tokio::test]
async fn malformed_bodies_are_refused_with_a_clear_4xx() {
    let (router, _) = app();
    let (sid, tid, _dir) = two_jobs(&router).await;
    let both = |t: Value, s: Value| json!({"training_job_id": t, "sampling_job_id": s});
    for (body, status, needles) in [
        (
            json!({}),
            422,
            vec!["/weight-digest: missing training_job_id"],
        ),
        (
            json!({"training_job_id": tid}),
            422,
            vec!["missing sampling_job_id"],
        ),
        (
            both(json!("2"), json!(sid)),
            422,
            vec!["training_job_id must be a job id, got \"2\""],
        ),
        (
            both(json!(tid), json!(-1)),
            422,
            vec!["sampling_job_id must be a job id, got -1"],
        ),
        (
            both(json!(tid), json!(1.5)),
            422,
            vec!["sampling_job_id must be a job id"],
        ),
        (
            json!([tid, sid]),
            422,
            vec!["request body must be a JSON object"],
        ),
        (both(json!(99), json!(sid)), 404, vec!["job 99 not found"]),
        (
            both(json!(sid), json!(tid)),
            400,
            vec!["/weight-digest needs a training job", "is a sampling job"],
        ),
        (
            both(json!(tid), json!(tid)),
            400,
            vec!["needs a sampling job", "is a training job"],
        ),
    ] {
        let r = digest(&router, body.clone()).await;
        r.assert_refused_naming(StatusCode::from_u16(status).unwrap(), &needles);
        assert!(
            r.json()["detail"].is_string() || status == 422,
            "{body}: {:?}",
            r.body
        );
    }
    // Not JSON at all, and no body: FastAPI's 422 shapes.
    let r = call(
        &router,
        "POST",
        "/weight-digest",
        Body::from("{training_job_id: 2"),
    )
    .await;
    r.assert_refused(
        StatusCode::UNPROCESSABLE_ENTITY,
        "request body is not valid JSON",
    );
    let r = call(&router, "POST", "/weight-digest", Body::empty()).await;
    r.assert_refused(StatusCode::UNPROCESSABLE_ENTITY, "Field required");
    let r = call(&router, "GET", "/weight-digest", Body::empty()).await;
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
}

#[tokio::test]
async fn the_mock_reports_the_version_each_job_holds() {
    let (router, _) = app();
    let (sid, tid, _dir) = two_jobs(&router).await;
    let pair = json!({"training_job_id": tid, "sampling_job_id": sid});
    let start = digest(&router, pair.clone()).await;
    assert_eq!(start.status, StatusCode::OK, "{:?}", start.body);
    let start = start.json();
    assert_eq!(
        start["training"], start["sampling"],
        "both start from the same weights"
    );
    let first = &start["training"][0];
    assert_eq!(
        (
            first["name"].as_str(),
            first["dtype"].as_str(),
            first["numel"].as_u64()
        ),
        (
            Some("model.embed_tokens.weight"),
            Some("BF16"),
            Some(151_936 * 1024)
        )
    );
    // An optimizer step the sampler did not receive: every tensor differs.
    let step = post_json(
        &router,
        &format!("/step?job_id={tid}"),
        json!({"learning_rate": null}),
    )
    .await;
    assert_eq!(step.status, StatusCode::OK);
    let after = digest(&router, pair.clone()).await.json();
    let (t, s) = (
        after["training"].as_array().unwrap(),
        after["sampling"].as_array().unwrap(),
    );
    assert_eq!(t.len(), s.len());
    assert!(t
        .iter()
        .zip(s)
        .all(|(a, b)| a["name"] == b["name"] && a["sha256"] != b["sha256"]));
    assert_eq!(after["sampling"], start["sampling"]);
    // The sync brings them together again.
    let ws = post_json(
        &router,
        &format!("/weight-sync?job_id={tid}"),
        json!({"source_sub_job_id": tid, "target_sub_job_ids": [sid]}),
    )
    .await;
    assert_eq!(ws.status, StatusCode::OK, "{:?}", ws.body);
    let synced = digest(&router, pair).await.json();
    assert_eq!(synced["training"], synced["sampling"]);
    assert_eq!(synced["training"], after["training"]);
}
