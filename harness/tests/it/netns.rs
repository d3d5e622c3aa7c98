//! Trials whose trainer dials a fixed address (as the Arctic adapter dials `localhost:7000`)
//! side by side, each in a network namespace of its own; and one at a time, saying why, where
//! the host gives none. Checked on the stand-in trainer with the seed's logits bug planted, on
//! a fixed port the test picks (the host's copy of it held by the test during the side-by-side
//! matrix, so a trial that reached the host's port would fail).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::{free_port, repo, says, text};

const STANDIN: &str = "scenarios/propagate/verl-arctic-standin.yaml";

/// `rlharness propagate` of the stand-in with the seed's bug, on the logits knobs, its proxy at
/// `127.0.0.1:port`, `jobs` trials side by side.
fn propagate(out: &Path, port: u16, jobs: &str, no_netns: bool) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rlharness"));
    c.current_dir(repo())
        .args(["propagate", STANDIN, "--no-progress", "--jobs", jobs])
        .args(["--knobs", "remote_backend.train.logits", "--out"])
        .arg(out)
        .args([
            "--set",
            "driver.env.ARCTIC_STANDIN_BUGS=zorro-logits-dropped",
        ])
        .args(["--set", &format!("driver.proxy_listen=127.0.0.1:{port}")])
        .env("CI", "true")
        .env("RUST_LOG", "error");
    if no_netns {
        c.env("RLHARNESS_NO_NETNS", "1");
    } else {
        c.env_remove("RLHARNESS_NO_NETNS");
    }
    c.output().unwrap()
}

/// The matrix folder's `propagation.json`.
fn matrix(out: &Path) -> (PathBuf, serde_json::Value) {
    let dir = std::fs::read_dir(out.join("verl-arctic-standin"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.join("propagation.json").is_file())
        .expect("no propagation.json");
    let json = std::fs::read_to_string(dir.join("propagation.json")).unwrap();
    (dir, serde_json::from_str(&json).unwrap())
}

/// Each knob's path, flag and verdict.
fn flags(m: &serde_json::Value) -> Vec<(String, bool, String)> {
    let mut v: Vec<_> = m["knobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            (
                k["path"].as_str().unwrap().to_string(),
                k["flagged"] == true,
                k["verdict"].to_string(),
            )
        })
        .collect();
    v.sort();
    v
}

/// Whether this host lets the harness make a network namespace (as the harness asks for one).
fn host_has_netns() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let mut c = Command::new("unshare");
    c.arg("--net");
    if !root {
        c.arg("--map-root-user");
    }
    c.arg("true").output().is_ok_and(|o| o.status.success())
}

/// The live processes of runs whose folders are under `dir` (a trainer and what it starts
/// carry `RLHARNESS_RUN_DIR`): their command lines.
fn processes_of_runs_under(dir: &Path) -> Vec<String> {
    let marker = format!("RLHARNESS_RUN_DIR={}/", dir.display());
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            std::fs::read(e.path().join("environ")).is_ok_and(|env| {
                env.split(|&b| b == 0)
                    .any(|v| v.starts_with(marker.as_bytes()))
            })
        })
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .filter(|c| !c.is_empty())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .collect()
}

#[test]
fn trials_on_a_fixed_address_go_side_by_side_in_namespaces_with_the_flags_of_one_at_a_time() {
    let tmp = tempfile::tempdir().unwrap();
    let port = free_port();
    let serial = propagate(&tmp.path().join("serial"), port, "1", false);
    assert_eq!(serial.status.code(), Some(1), "{}", text(&serial));
    // The host's copy of the port, held: only a trial in a namespace of its own can run now.
    let _held = TcpListener::bind(("127.0.0.1", port)).unwrap();
    let side = propagate(&tmp.path().join("side"), port, "2", false);
    let (_, m1) = matrix(&tmp.path().join("serial"));
    if !host_has_netns() {
        // No namespace here: the runs go one at a time, say why, and meet the held port.
        says(
            &text(&side),
            &[
                "gives a run no network namespace of its own",
                "one run at a time",
            ],
        );
        return;
    }
    assert_eq!(side.status.code(), Some(1), "{}", text(&side));
    says(
        &text(&side),
        &[
            &format!("the fixed address 127.0.0.1:{port}"),
            "each run gets a network namespace of its own",
            "2 side by side",
        ],
    );
    let (dir, m2) = matrix(&tmp.path().join("side"));
    assert_eq!(flags(&m1), flags(&m2));
    // The seed's bug is flagged (so the comparison could fail), both ways.
    let flagged: Vec<String> = flags(&m2)
        .into_iter()
        .filter(|f| f.1)
        .map(|f| f.0)
        .collect();
    assert!(
        flagged.contains(&"remote_backend.train.logits.optimization".to_string()),
        "{flagged:?}"
    );
    // Each trial's run.json says where its trainer ran.
    let notes: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("run.json")).ok())
        .collect();
    assert!(
        !notes.is_empty(),
        "no trial's run.json under {}",
        dir.display()
    );
    for n in &notes {
        says(n, &["network namespace of its own"]);
    }
    // Nothing a trial started outlives the matrix: its namespace's `netns-exec`, the trainer
    // (this test's own: other tests and lanes may run namespaced trials at the same time).
    assert_eq!(processes_of_runs_under(tmp.path()), Vec::<String>::new());
}

#[test]
fn without_a_namespace_trials_on_a_fixed_address_go_one_at_a_time_and_say_why() {
    let tmp = tempfile::tempdir().unwrap();
    let o = propagate(tmp.path(), free_port(), "2", true);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    says(
        &text(&o),
        &[
            "gives a run no network namespace of its own (RLHARNESS_NO_NETNS is set)",
            "one run at a time",
        ],
    );
    let (_, m) = matrix(tmp.path());
    assert!(flags(&m)
        .iter()
        .any(|f| f.0 == "remote_backend.train.logits.optimization" && f.1));
}
