//! `--format json` for scripts: `list`, `check` and `run` each print one document with a
//! `schema` version, whose shape (keys and value types) a snapshot pins; `verdict.json` carries
//! the version too.

use serde_json::{json, Value};

use super::rlharness;
use crate::common::{repo, text};

/// A document's shape: every object's keys with the shape of their values, an array as the
/// shape of its first element, a leaf as its type. What scripts depend on; no values (which
/// differ from host to host).
fn shape(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), shape(v))).collect()),
        Value::Array(a) => Value::Array(a.first().map(shape).into_iter().collect()),
        Value::String(_) => json!("string"),
        Value::Number(_) => json!("number"),
        Value::Bool(_) => json!("bool"),
        Value::Null => json!("null"),
    }
}

/// Run `rlharness ARGS` from the repository root; its exit code and stdout as JSON.
fn json_of(args: &[&str]) -> (Option<i32>, Value) {
    let o = rlharness().args(args).current_dir(repo()).output().unwrap();
    let doc = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "{args:?}: stdout is not one JSON document ({e}): {}",
            text(&o)
        )
    });
    (o.status.code(), doc)
}

/// The shape of `doc` against the snapshot `name` (`harness/tests/snapshots/NAME.snap`).
pub(crate) fn snapshot(name: &str, doc: &Value) {
    insta::with_settings!({
        snapshot_path => repo().join("harness/tests/snapshots"),
        prepend_module_to_snapshot => false,
    }, {
        insta::assert_json_snapshot!(name, shape(doc));
    });
}

#[test]
fn list_check_and_run_print_one_versioned_document_each() {
    let (code, list) = json_of(&["list", "scenarios", "--format", "json"]);
    assert_eq!(code, Some(0));
    assert_eq!(list["schema"], 1);
    let smoke = list["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "mock-gsm8k-grpo")
        .unwrap();
    assert_eq!(smoke["path"], "scenarios/smoke/mock-gsm8k-grpo.yaml");
    assert_eq!(smoke["runnable"], true);
    snapshot("json.list", &list);

    let (code, check) = json_of(&["check", "scenarios/smoke", "--format", "json"]);
    assert_eq!(code, Some(0));
    assert_eq!(
        (check["schema"].clone(), check["ok"].clone()),
        (json!(1), json!(true))
    );
    snapshot("json.check", &check);
    // A bad file: the error's file, line and key, exit 2 as without the flag.
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("bad.yaml");
    std::fs::write(&bad, "name: bad\ndescription: x\nseed: 1\nsteps: two\n").unwrap();
    let (code, check) = json_of(&["check", bad.to_str().unwrap(), "--format", "json"]);
    assert_eq!(code, Some(2));
    assert_eq!(check["ok"], false);
    let e = &check["files"][0]["errors"][0];
    assert_eq!(
        (e["line"].clone(), e["key"].clone()),
        (json!(4), json!("steps")),
        "{check}"
    );

    let out = tmp.path().join("out");
    let (code, run) = json_of(&[
        "run",
        "mock-gsm8k-grpo",
        "--no-progress",
        "--format",
        "json",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0));
    assert_eq!(
        (run["schema"].clone(), run["exit_code"].clone()),
        (json!(1), json!(0))
    );
    assert_eq!(run["scenarios"][0]["scenario"], "mock-gsm8k-grpo");
    snapshot("json.run", &run);
    let verdict: Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("mock-gsm8k-grpo/latest/verdict.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(verdict["schema"], 1);
}

/// `golden status --format json`: the store and each pending golden, exit 4 while one waits
/// (as without the flag), 0 with none.
#[test]
fn golden_status_prints_one_versioned_document() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    std::fs::create_dir_all(&store).unwrap();
    let o = rlharness()
        .args(["run", "mock-gsm8k-grpo", "--no-progress", "--golden"])
        .arg(&store)
        .arg("--out")
        .arg(tmp.path().join("out"))
        .current_dir(repo())
        .env_remove("CI")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
    let status = |store: &std::path::Path| {
        let o = rlharness()
            .args(["golden", "status", "--format", "json", "--golden"])
            .arg(store)
            .output()
            .unwrap();
        let doc: Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("not one JSON document ({e}): {}", text(&o)));
        (o.status.code(), doc)
    };
    let (code, doc) = status(&store);
    assert_eq!(code, Some(4), "{doc}");
    assert_eq!(doc["schema"], 1);
    assert_eq!(doc["pending"][0]["scenario"], "mock-gsm8k-grpo", "{doc}");
    snapshot("json.golden-status", &doc);
    let empty = tmp.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let (code, doc) = status(&empty);
    assert_eq!((code, doc["pending"].clone()), (Some(0), json!([])));
}
