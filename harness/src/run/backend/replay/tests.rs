use super::*;
use axum::body::Body;
use axum::http::Request;
use tower::ServiceExt;

fn ex(
    seq: u64,
    group: u64,
    path: &str,
    job: Option<u64>,
    req: &str,
    resp: &str,
) -> RecordedExchange {
    RecordedExchange {
        seq,
        group,
        method: "POST".into(),
        path: path.into(),
        query: job.map(|j| format!("job_id={j}")),
        job_id: job,
        status: 200,
        request_content_type: Some("application/json".into()),
        request: req.as_bytes().to_vec(),
        response_headers: [("content-type".to_string(), "application/json".to_string())].into(),
        response: resp.as_bytes().to_vec(),
        error: None,
    }
}

/// Job 1 (sampling) is created, then two generates in flight together (group 2), a sleep,
/// and one more generate.
fn cassette(dir: &Path) -> Cassette {
    let w = CassetteWriter::create(dir).unwrap();
    for (seq, group, path, job, req, resp) in [
        (
            1,
            1,
            "/initialize",
            None,
            r#"{"model_name":"/home/me/m","job_type":"sampling"}"#,
            r#"{"job_id":1}"#,
        ),
        (2, 2, "/generate", Some(1), r#"{"p":"a"}"#, r#"{"r":"A"}"#),
        (3, 2, "/generate", Some(1), r#"{"p":"b"}"#, r#"{"r":"B"}"#),
        (
            4,
            4,
            "/sleep-inference",
            Some(1),
            r#"{"level":1}"#,
            r#"{"status":"sleeping"}"#,
        ),
        (5, 5, "/generate", Some(1), r#"{"p":"c"}"#, r#"{"r":"C"}"#),
    ] {
        w.push(ex(seq, group, path, job, req, resp));
    }
    w.finish().unwrap();
    Cassette::load(dir).unwrap()
}

async fn call(r: &Router, path: &str, body: &str) -> (u16, String) {
    let req = Request::post(path)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    let resp = r.clone().oneshot(req).await.unwrap();
    let status = resp.status().as_u16();
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
        .await
        .unwrap();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

#[tokio::test]
async fn concurrent_calls_match_in_any_order_but_groups_keep_their_order() {
    let dir = tempfile::tempdir().unwrap();
    let (r, h) = router(cassette(dir.path())).unwrap();
    // A model path elsewhere on another machine: redacted, still a match.
    let init = call(
        &r,
        "/initialize",
        r#"{"model_name":"/other/m","job_type":"sampling"}"#,
    )
    .await;
    assert_eq!(init, (200, r#"{"job_id":1}"#.to_string()));
    assert_eq!(
        call(&r, "/generate?job_id=1", r#"{"p":"b"}"#).await.1,
        r#"{"r":"B"}"#
    );
    assert_eq!(
        call(&r, "/generate?job_id=1", r#"{"p":"a"}"#).await.1,
        r#"{"r":"A"}"#
    );
    // `c` comes after the sleep: asked early it would be a mismatch; here it is next.
    call(&r, "/sleep-inference?job_id=1", r#"{"level":1}"#).await;
    assert_eq!(
        call(&r, "/generate?job_id=1", r#"{"p":"c"}"#).await.1,
        r#"{"r":"C"}"#
    );
    assert!(h.outcome().passed(), "{}", h.outcome().summary());
    let (status, body) = call(&r, "/generate?job_id=1", r#"{"p":"d"}"#).await;
    assert_eq!(status, 409);
    assert!(body.contains("replay mismatch at POST /generate call 4 (job 1): not in the recording (it holds 3 such calls)"), "{body}");
    assert_eq!(h.outcome().mismatches.len(), 1);
}

#[tokio::test]
async fn a_call_out_of_its_group_is_a_mismatch_and_leftovers_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let (r, h) = router(cassette(dir.path())).unwrap();
    call(
        &r,
        "/initialize",
        r#"{"model_name":"m","job_type":"sampling"}"#,
    )
    .await;
    // `c` before `a` and `b`: compared with the open group {a, b}, served `a`'s answer.
    let (status, body) = call(&r, "/generate?job_id=1", r#"{"p":"c"}"#).await;
    assert_eq!((status, body.as_str()), (200, r#"{"r":"A"}"#));
    let o = h.outcome();
    let texts: Vec<String> = o.mismatches.iter().map(|m| m.to_string()).collect();
    assert_eq!(
        texts,
        [
            "replay mismatch at POST /initialize call 1: model_name: recorded \"<path>\", got \"m\"",
            "replay mismatch at POST /generate call 1 (job 1): p: recorded \"a\", got \"c\"",
            "replay mismatch at POST /generate call 2 (job 1): recorded but never requested",
            "replay mismatch at POST /sleep-inference call 1 (job 1): recorded but never requested",
            "replay mismatch at POST /generate call 3 (job 1): recorded but never requested",
        ]
    );
    assert!(
        o.summary().ends_with("; 5 mismatches in all"),
        "{}",
        o.summary()
    );
    // What `run.json` keeps, and the judge's replay rule reads.
    let record = o.record();
    assert!(!record.passed());
    assert_eq!(record.mismatches.len(), 5);
}

#[test]
fn a_relative_cassette_is_found_beside_the_scenario() {
    assert_eq!(
        resolve_cassette(
            Path::new("scenarios/replay/x.yaml"),
            "../../golden/s/cpu/cassette"
        ),
        Path::new("scenarios/replay/../../golden/s/cpu/cassette")
    );
    assert_eq!(
        resolve_cassette(Path::new("x.yaml"), "/abs/c"),
        Path::new("/abs/c")
    );
}

#[test]
fn install_replaces_the_old_cassette() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    cassette(&a);
    let target = tmp.path().join("golden/s/cpu/cassette");
    std::fs::create_dir_all(&target).unwrap();
    std::fs::write(target.join("stale.gz"), b"x").unwrap();
    install_cassette(&a, &target).unwrap();
    assert!(!target.join("stale.gz").exists());
    assert_eq!(Cassette::load(&target).unwrap().exchanges.len(), 5);
    let e = install_cassette(&b, &target).unwrap_err();
    assert!(e.to_string().contains("cannot list"), "{e}");
    assert!(
        Cassette::load(&target).is_ok(),
        "a failed install keeps the old cassette"
    );
}
