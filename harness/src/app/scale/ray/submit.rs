//! Submission: a job's entrypoint, resources and environment, its Jobs API body, and the
//! package's upload.

use serde_json::{json, Value};

use super::client::RayClient;
use super::plan::Planned;
use super::{GOLDEN_DIR, OUT_DIR};
use crate::app::scale::bundle::{self, Files};
use crate::cli::RunArgs;
use crate::error::CommandError;

/// Quote for `sh`.
fn sh_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@+%".contains(c))
    {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// The job's entrypoint: `job-entry` with the run's own options, for one scenario (with `seed`
/// in place of `--seed` when given: one seed of a calibration).
pub(super) fn entrypoint(args: &RunArgs, scenario: &str, seed: Option<u64>) -> String {
    let bin = match &args.ray.remote_bin {
        Some(b) => sh_quote(b),
        None => "./rlharness".to_string(),
    };
    let mut words = vec![
        "job-entry".to_string(),
        sh_quote(scenario),
        format!("--out {OUT_DIR}"),
        format!("--golden {GOLDEN_DIR}"),
    ];
    if let Some(s) = seed.or(args.common.seed) {
        words.push(format!("--seed {s}"));
    }
    if let Some(s) = &args.seeds {
        words.push(format!("--seeds {}", sh_quote(s)));
        words.push(format!("--jobs {}", args.jobs));
    }
    if let Some(s) = args.common.steps {
        words.push(format!("--steps {s}"));
    }
    for s in &args.common.set {
        words.push(format!("--set {}", sh_quote(s)));
    }
    if args.update_golden {
        words.push("--update-golden".into());
    }
    if let Some(h) = &args.common.hardware {
        words.push(format!("--hardware {}", sh_quote(h)));
    }
    let run = format!("{bin} {}", words.join(" "));
    if args.ray.remote_bin.is_some() {
        format!("exec {run}")
    } else {
        // Ray's unpacking does not keep the executable bit.
        format!("chmod +x rlharness rlharness-torch 2>/dev/null; exec {run}")
    }
}

/// The job's resources from the scenario's `requires`.
pub(super) fn resources(p: &Planned, args: &RunArgs) -> serde_json::Map<String, Value> {
    let mut m = serde_json::Map::new();
    let cpus = if args.seeds.is_some() { args.jobs } else { 1 };
    m.insert("entrypoint_num_cpus".into(), json!(cpus));
    if p.gpus > 0 {
        m.insert("entrypoint_num_gpus".into(), json!(p.gpus));
    }
    if let Some(kind) = &p.gpu_name {
        // Ray labels a GPU node with `accelerator_type:<TYPE>` (e.g. H100); a node started with
        // `--resources` may declare it too.
        let mut r = serde_json::Map::new();
        r.insert(
            format!("accelerator_type:{}", kind.to_uppercase()),
            json!(0.001),
        );
        m.insert("entrypoint_resources".into(), Value::Object(r));
    }
    m
}

/// The jobs' environment: `--ray-env KEY=VALUE`, and the submitter's `CI`.
pub(super) fn job_env_vars(args: &RunArgs) -> Result<serde_json::Map<String, Value>, CommandError> {
    let mut env_vars = serde_json::Map::new();
    for kv in &args.ray.ray_env {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| CommandError::invalid(format!("--ray-env {kv}: expected KEY=VALUE")))?;
        if k.starts_with("RAY_AUTH_TOKEN") {
            // A job's env_vars show in the dashboard; the jobs need no token to run.
            return Err(CommandError::invalid(format!(
                "--ray-env {k}=...: the cluster's token is not passed to the jobs (their \
                 environment shows in the Ray dashboard); the submitter reads it from \
                 --ray-token-file or RAY_AUTH_TOKEN"
            )));
        }
        env_vars.insert(k.into(), json!(v));
    }
    // A CI submitter's jobs do not write goldens either.
    if let Ok(ci) = std::env::var("CI") {
        env_vars.entry("CI").or_insert(json!(ci));
    }
    Ok(env_vars)
}

/// Pack the jobs' package and put it on the cluster (unless it is there already): its URI.
pub(super) async fn upload_package(
    client: &RayClient,
    package_files: Files,
) -> Result<String, CommandError> {
    let zip = tokio::task::spawn_blocking(move || bundle::zip_files(&package_files))
        .await
        .map_err(|e| CommandError::run_failed(format!("packing crashed: {e}")))?
        .map_err(|e| CommandError::run_failed(format!("the job package: {e}")))?;
    let name = format!("_ray_pkg_{}.zip", &bundle::sha256_hex(&zip)[..32]);
    let mib = zip.len() as f64 / (1024.0 * 1024.0);
    let uri = client
        .ensure_package(&name, zip)
        .await
        .map_err(|e| CommandError::new(e.exit_status(), e.to_string()))?;
    eprintln!("ray: the jobs' package {uri} ({mib:.1} MiB) is on the cluster");
    Ok(uri)
}

/// The Jobs API's submission of one planned scenario: its entrypoint, the package as its
/// working directory, its environment, metadata and resources.
pub(super) fn job_body(
    p: &Planned,
    args: &RunArgs,
    uri: Option<&str>,
    env_vars: &serde_json::Map<String, Value>,
) -> Value {
    let mut body = json!({
        "entrypoint": entrypoint(args, &p.in_package, p.seed),
        "runtime_env": {
            "working_dir": uri.unwrap_or_default(),
            "env_vars": Value::Object(env_vars.clone()),
        },
        "metadata": {
            "rlharness_scenario": p.name.clone(),
            "rlharness_file": p.file.display().to_string(),
            "submitted_by": "rlharness run --executor ray",
        },
    });
    if let Value::Object(m) = &mut body {
        m.extend(resources(p, args));
    }
    body
}
