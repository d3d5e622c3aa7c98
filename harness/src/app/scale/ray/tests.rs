//! The Ray executor's unit tests: entrypoints, resources, package paths, progress lines.

use std::path::Path;
use std::time::Duration;

use clap::Parser;
use serde_json::json;

use super::client::RayClient;
use super::job_plan::{package_root, JobRun, Package, Planned};
use super::submit::{entrypoint, job_env_vars, resources};
use super::watch::{last_step, StepLine};
use crate::app::cli::RunArgs;
use crate::app::errors::Status;
use crate::app::scale::ray_auth::RayToken;
use crate::model::error::ExitStatus;

fn run_args(extra: &[&str]) -> RunArgs {
    let mut argv = vec!["rlharness", "run", "scenarios/smoke/x.yaml"];
    argv.extend(extra);
    match crate::app::cli::Cli::parse_from(argv).command {
        crate::app::cli::Command::Run(a) => a,
        _ => unreachable!(),
    }
}

fn planned(in_package: &str, run: JobRun) -> Planned {
    Planned {
        index: 0,
        run,
        in_package: in_package.into(),
        name: "x".into(),
        gpus: 0,
        gpu_name: None,
        queue: Duration::from_secs(1),
    }
}

#[test]
fn the_entrypoint_quotes_what_it_passes_on() {
    let args = run_args(&[
        "--executor",
        "ray",
        "--address",
        "http://127.0.0.1:8265",
        "--set",
        "config.a=it's",
        "--steps",
        "3",
    ]);
    let shipped = Package {
        executables: vec!["rlharness".into(), "my scripts/run.sh".into()],
        ..Package::default()
    };
    let p = planned("scenarios/smoke/x.yaml", JobRun::default());
    let e = entrypoint(&args, &p, &shipped);
    assert_eq!(
        e,
        "chmod +x rlharness 'my scripts/run.sh' 2>/dev/null; exec ./rlharness job-entry \
         scenarios/smoke/x.yaml --out out --golden golden --steps 3 --set 'config.a=it'\\''s'"
    );
    let remote = run_args(&["--remote-bin", "/opt/rl harness"]);
    let p = planned("s.yaml", JobRun::default());
    assert_eq!(
        entrypoint(&remote, &p, &Package::default()),
        "exec '/opt/rl harness' job-entry s.yaml --out out --golden golden"
    );
    // A calibration's job runs its own seed, in place of the run's.
    let seeded = run_args(&["--remote-bin", "rlh", "--seed", "3"]);
    let seven = planned("s.yaml", JobRun::of(Path::new("s.yaml"), Some(7)));
    assert_eq!(
        entrypoint(&seeded, &seven, &Package::default()),
        "exec rlh job-entry s.yaml --out out --golden golden --seed 7"
    );
    assert_eq!(
        entrypoint(&seeded, &p, &Package::default()),
        "exec rlh job-entry s.yaml --out out --golden golden --seed 3"
    );
}

/// A propagation trial's job: its overrides after the invocation's, its steps, its stop point
/// and its matrix's experiment name; a bisect's shipped sources named by their place in the
/// job's working directory (expanded there), last.
#[test]
fn a_trial_job_runs_what_a_local_trial_runs() {
    let args = run_args(&["--remote-bin", "rlh", "--set", "driver.plant=[x]"]);
    let trial = JobRun {
        set: vec!["++config.a.b=2".into()],
        steps: Some(20),
        stop_at: Some("steps:1".parse().unwrap()),
        experiment_name: Some("smoke-propagate".into()),
        ..JobRun::of(Path::new("s.yaml"), None)
    };
    let shipped = Package {
        sources: vec![(
            "ARCTIC_SRC".into(),
            "sources/ARCTIC_SRC".into(),
            Some("v1.2-3-gabc".into()),
        )],
        ..Package::default()
    };
    assert_eq!(
        entrypoint(&args, &planned("s.yaml", trial), &shipped),
        "export RLHARNESS_DESCRIBED_ARCTIC_SRC=v1.2-3-gabc; exec rlh job-entry s.yaml --out out --golden golden --steps 20 --set \
         'driver.plant=[x]' --set ++config.a.b=2 --set \
         \"driver.env.ARCTIC_SRC=$PWD/sources/ARCTIC_SRC\" --stop-at steps:1 \
         --experiment-name smoke-propagate"
    );
}

/// `run --stop-at` reads what it writes, and nothing else.
#[test]
fn the_stop_point_round_trips() {
    use crate::run::runner::StopAt;
    for s in [StopAt::Initialized, StopAt::Steps(3)] {
        assert_eq!(s.to_string().parse::<StopAt>(), Ok(s));
    }
    for bad in ["steps:0", "step:1", "first-update", ""] {
        let e = bad.parse::<StopAt>().unwrap_err().to_string();
        assert!(e.contains("expected initialize or steps:N"), "{e}");
    }
    let args = run_args(&["--stop-at", "initialize", "--experiment-name", "e"]);
    assert_eq!(args.stop_at, Some(StopAt::Initialized));
    assert_eq!(args.experiment_name.as_deref(), Some("e"));
}

#[test]
fn resources_come_from_requires() {
    let p = Planned {
        gpus: 2,
        gpu_name: Some("h200".into()),
        ..planned("x.yaml", JobRun::default())
    };
    let r = resources(&p, &run_args(&[]));
    assert_eq!(r["entrypoint_num_gpus"], json!(2));
    assert_eq!(r["entrypoint_num_cpus"], json!(1));
    assert_eq!(
        r["entrypoint_resources"],
        json!({"accelerator_type:H200": 0.001})
    );
}

#[test]
fn progress_is_read_from_the_runs_lines() {
    let log = "x: step 1/4 reward 0.100\nnoise\nx: step 2/4 reward 0.250 mfu 0.1\n";
    assert_eq!(
        last_step(log),
        Some(StepLine {
            step: 2,
            total: 4,
            reward: Some(0.25)
        })
    );
    assert_eq!(last_step("nothing yet\n"), None);
}

/// A one-request HTTP server answering `status` with `body`; returns its address and the
/// request it got.
async fn answer_once(
    status: &'static str,
    body: &'static str,
) -> (String, tokio::task::JoinHandle<String>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = format!("http://{}", listener.local_addr().unwrap());
    let served = tokio::spawn(async move {
        let (mut conn, _) = listener.accept().await.unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = conn.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        let reply = format!(
            "HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        conn.write_all(reply.as_bytes()).await.unwrap();
        String::from_utf8_lossy(&got).into_owned()
    });
    (addr, served)
}

#[tokio::test]
async fn the_token_goes_in_the_authorization_header_and_nowhere_else() {
    const SECRET: &str = "s3cret-0123456789abcdef";
    let token = RayToken::new(SECRET, "RAY_AUTH_TOKEN").unwrap();
    // A server that echoes what it got in its answer: the harness must not repeat it.
    let (addr, served) = answer_once("403 Forbidden", "Forbidden: s3cret-0123456789abcdef").await;
    let client = RayClient::new(&addr).unwrap().with_token(token);
    let req = client
        .request(reqwest::Method::GET, &format!("{addr}/api/version"))
        .build()
        .unwrap();
    let header = &req.headers()[reqwest::header::AUTHORIZATION];
    assert_eq!(header.to_str().unwrap(), format!("Bearer {SECRET}"));
    assert!(header.is_sensitive());
    let e = client
        .submit(&json!({"entrypoint": "true"}))
        .await
        .unwrap_err();
    let got = served.await.unwrap();
    assert!(
        got.to_ascii_lowercase()
            .contains(&format!("authorization: bearer {SECRET}")),
        "{got}"
    );
    assert_eq!(e.status(), ExitStatus::InvalidInput);
    let shown = format!("{e} {e:?} {client:?} {req:?}");
    assert!(!shown.contains(SECRET), "{shown}");
    assert!(
        shown.contains("refused the token from RAY_AUTH_TOKEN"),
        "{shown}"
    );
    assert!(shown.contains("<redacted>"), "{shown}");
    assert!(client
        .stop_command("raysubmit_1")
        .contains("RAY_AUTH_MODE=token"));
}

#[tokio::test]
async fn a_cluster_that_wants_a_token_says_how_to_give_it() {
    let (addr, served) = answer_once("401 Unauthorized", "Unauthorized").await;
    let client = RayClient::new(&addr).unwrap();
    let e = client.status("raysubmit_1").await.unwrap_err();
    let got = served.await.unwrap();
    assert!(
        !got.to_ascii_lowercase().contains("authorization:"),
        "{got}"
    );
    assert_eq!(e.status(), ExitStatus::InvalidInput);
    let shown = e.to_string();
    assert!(
        shown.contains("401 Unauthorized") && shown.contains("--ray-token-file"),
        "{shown}"
    );
}

#[test]
fn the_token_is_not_passed_to_the_jobs() {
    let args = run_args(&["--ray-env", "RAY_AUTH_TOKEN=abc123"]);
    let e = job_env_vars(&args).unwrap_err();
    assert_eq!(e.status, ExitStatus::InvalidInput);
    assert!(!e.message.contains("abc123"), "{}", e.message);
}

#[test]
fn a_package_root_outside_the_current_folder_gets_a_neutral_name() {
    assert_eq!(package_root(Path::new("scenarios"), 0), "scenarios");
    assert_eq!(
        package_root(Path::new("../elsewhere/scenarios"), 3),
        "roots/3"
    );
}
