use serde_json::{json, Value};

use super::exchange::job_id;
use super::*;

#[test]
fn job_id_comes_from_query_or_path() {
    let id = |s: &str| job_id(&s.parse::<Uri>().unwrap());
    assert_eq!(id("/forward?job_id=3"), json!(3));
    assert_eq!(id("/forward?x=1&job_id=abc"), json!("abc"));
    assert_eq!(id("/job/12"), json!(12));
    assert_eq!(id("/status"), Value::Null);
    assert_eq!(id("/job/12/extra"), Value::Null);
}

#[test]
fn upstream_must_be_http_with_host() {
    assert!(parse_upstream("http://127.0.0.1:7000").is_ok());
    for bad in ["https://x:1", "127.0.0.1:7000", "http://", "not a url"] {
        let e = parse_upstream(bad).unwrap_err().to_string();
        assert!(e.contains("invalid upstream URL"), "{bad}: {e}");
    }
}
