use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::Router;

use super::*;

#[test]
fn backoff_doubles_up_to_its_cap() {
    let p = RetryPolicy::standard();
    let waits: Vec<u128> = (1..=6).map(|a| p.backoff(a).as_millis()).collect();
    assert_eq!(waits, vec![200, 400, 800, 1600, 2000, 2000]);
    assert_eq!(p.backoff(u32::MAX), p.max_backoff);
}

#[test]
fn only_routes_safe_to_repeat_are_idempotent() {
    for (m, r) in [
        ("GET", "/job/3"),
        ("GET", "/health"),
        ("POST", "/generate?job_id=1"),
        ("POST", "/forward?job_id=2"),
        ("POST", "/wake-inference?job_id=1"),
        ("POST", "/operation?job_id=2"),
        ("POST", "/weight-norm"),
        ("POST", "/weight-digest"),
    ] {
        assert!(idempotent(m, r), "{m} {r}");
    }
    for r in [
        "/initialize",
        "/destroy?job_id=1",
        "/forward-backward?job_id=2",
        "/step?job_id=2",
        "/save?job_id=2",
        "/load-checkpoint?job_id=2",
    ] {
        assert!(!idempotent("POST", r), "{r}");
    }
}

/// A server answering 503 to the first `fail` calls of every route, then 200.
async fn flaky(fail: u32) -> (String, Arc<AtomicU32>) {
    let calls = Arc::new(AtomicU32::new(0));
    let answer = {
        let calls = calls.clone();
        move || {
            let calls = calls.clone();
            async move {
                if calls.fetch_add(1, Ordering::SeqCst) < fail {
                    (StatusCode::SERVICE_UNAVAILABLE, r#"{"detail": "busy"}"#)
                } else {
                    (
                        StatusCode::OK,
                        r#"{"status": "OK", "job_id": 1, "metrics": {}}"#,
                    )
                }
            }
        }
    };
    let app = Router::new()
        .route("/health", get(answer.clone()))
        .route("/step", post(answer));
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(l, app).await });
    (url, calls)
}

fn quick() -> RetryPolicy {
    RetryPolicy {
        attempts: 4,
        first_backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(4),
    }
}

#[tokio::test]
async fn a_503_on_an_idempotent_route_is_sent_again_within_the_budget() {
    let (url, calls) = flaky(2).await;
    let c = ArcticClient::new(&url, Duration::from_secs(5))
        .unwrap()
        .with_retry(quick());
    c.health().await.unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 3);

    let (url, calls) = flaky(10).await;
    let c = ArcticClient::new(&url, Duration::from_secs(5))
        .unwrap()
        .with_retry(quick());
    let e = c.health().await.unwrap_err();
    assert_eq!(calls.load(Ordering::SeqCst), 4, "bounded: {e}");
    assert!(e.to_string().contains("gave up after 4 attempts"), "{e}");
    assert_eq!(e.status(), Some(503));
}

#[tokio::test]
async fn a_503_on_step_is_never_sent_twice() {
    let (url, calls) = flaky(1).await;
    let c = ArcticClient::new(&url, Duration::from_secs(5))
        .unwrap()
        .with_retry(quick());
    let e = c.step(2).await.unwrap_err();
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(e.route(), "/step?job_id=2");
    assert!(!e.to_string().contains("gave up"), "{e}");
}

#[tokio::test]
async fn a_refused_connection_is_retried_then_reported() {
    // A port that was just free: nothing listens there.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    drop(l);
    let c = ArcticClient::new(&url, Duration::from_secs(5))
        .unwrap()
        .with_retry(quick());
    let e = c.step(2).await.unwrap_err();
    assert!(
        matches!(e, ClientError::Transport { .. }) && e.to_string().contains("gave up after 4"),
        "a request that never left is safe to repeat even on /step: {e}"
    );
}
