//! Submission: a job's entrypoint, resources and environment, its Jobs API body, and the
//! package's upload.

use serde_json::{json, Value};

use super::client::RayClient;
use super::job_plan::{Package, Planned};
use super::{GOLDEN_DIR, OUT_DIR};
use crate::app::cli::RunArgs;
use crate::app::errors::Failure;
use crate::app::scale::bundle::{self, Files};
use crate::model::error::CommandError;

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

/// The job's entrypoint: `job-entry` with the run's own options, for one planned run (its
/// seed, `--set` values, steps, stop point and experiment name on top of the invocation's);
/// the package's executables marked so first, and each shipped source checkout named by its
/// place in the job's working directory.
pub(super) fn entrypoint(args: &RunArgs, p: &Planned, package: &Package) -> String {
    let run = &p.run;
    let bin = match &args.ray.remote_bin {
        Some(b) => sh_quote(b),
        None => "./rlharness".to_string(),
    };
    let mut words = vec![
        "job-entry".to_string(),
        sh_quote(&p.in_package),
        format!("--out {OUT_DIR}"),
        format!("--golden {GOLDEN_DIR}"),
    ];
    if let Some(s) = run.seed.or(args.common.seed) {
        words.push(format!("--seed {s}"));
    }
    if let Some(s) = &args.seeds {
        words.push(format!("--seeds {}", sh_quote(s)));
        words.push(format!("--jobs {}", args.jobs));
    }
    if let Some(s) = run.steps.or(args.common.steps) {
        words.push(format!("--steps {s}"));
    }
    for s in args.common.set.iter().chain(&run.set) {
        words.push(format!("--set {}", sh_quote(s)));
    }
    for (var, place, _) in &package.sources {
        // `$PWD`: the job's working directory, known only on the worker. Both names are
        // checked to be plain (a variable name, `sources/<it>`).
        words.push(format!("--set \"driver.env.{var}=$PWD/{place}\""));
    }
    if let Some(s) = run.stop_at.or(args.stop_at) {
        words.push(format!("--stop-at {s}"));
    }
    if let Some(n) = run
        .experiment_name
        .as_ref()
        .or(args.experiment_name.as_ref())
    {
        words.push(format!("--experiment-name {}", sh_quote(n)));
    }
    if args.update_golden {
        words.push("--update-golden".into());
    }
    if let Some(h) = &args.common.hardware {
        words.push(format!("--hardware {}", sh_quote(h)));
    }
    let mut line = String::new();
    if !package.executables.is_empty() {
        // Ray's unpacking does not keep the executable bit.
        let names: Vec<String> = package.executables.iter().map(|n| sh_quote(n)).collect();
        line.push_str(&format!("chmod +x {} 2>/dev/null; ", names.join(" ")));
    }
    for (var, _, described) in &package.sources {
        // The copy has no repository: `run.json` records the commit it was copied from.
        if let Some(d) = described {
            let name = crate::run::runner::env::described_var(var);
            line.push_str(&format!("export {name}={}; ", sh_quote(d)));
        }
    }
    line.push_str(&format!("exec {bin} {}", words.join(" ")));
    line
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

/// The packages this process made, by what went into them (each file's name, path, size and
/// modification time): a command that submits several calls' jobs (a propagation matrix's
/// rounds, a bisect's commits) packs the same files once.
type Packed = std::collections::HashMap<String, (String, std::sync::Arc<Vec<u8>>)>;
static PACKED: std::sync::Mutex<Option<Packed>> = std::sync::Mutex::new(None);

/// What identifies a package's contents without reading them.
fn package_key(files: &Files) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for (name, path) in files {
        let meta = std::fs::metadata(path).ok();
        let modified = meta
            .as_ref()
            .and_then(|m| m.modified().ok())
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos());
        h.update(format!(
            "{name}\0{}\0{}\0{modified}\n",
            path.display(),
            meta.map_or(0, |m| m.len())
        ));
    }
    crate::model::util::hex(&h.finalize())
}

/// Pack the jobs' package (unless this process packed the same files already) and put it on
/// the cluster (unless it is there already): its URI.
pub(super) async fn upload_package(
    client: &RayClient,
    package_files: Files,
) -> Result<String, CommandError> {
    let key = package_key(&package_files);
    let known = crate::model::util::lock(&PACKED)
        .as_ref()
        .and_then(|m| m.get(&key).cloned());
    let fresh = known.is_none();
    let (name, zip) = match known {
        Some(k) => k,
        None => {
            let zip = tokio::task::spawn_blocking(move || bundle::zip_files(&package_files))
                .await
                .map_err(Failure::PackCrashed)?
                .map_err(Failure::Package)?;
            let name = format!("_ray_pkg_{}.zip", &bundle::sha256_hex(&zip)[..32]);
            let packed = (name, std::sync::Arc::new(zip));
            crate::model::util::lock(&PACKED)
                .get_or_insert_with(Default::default)
                .insert(key, packed.clone());
            packed
        }
    };
    let mib = zip.len() as f64 / (1024.0 * 1024.0);
    let uri = client.ensure_package(&name, zip.as_ref().clone()).await?;
    if fresh {
        errln!("ray: the jobs' package {uri} ({mib:.1} MiB) is on the cluster");
    }
    Ok(uri)
}

/// The Jobs API's submission of one planned run: its entrypoint, the package as its working
/// directory, its environment, metadata and resources.
pub(super) fn job_body(
    p: &Planned,
    args: &RunArgs,
    package: &Package,
    uri: Option<&str>,
    env_vars: &serde_json::Map<String, Value>,
) -> Value {
    let mut body = json!({
        "entrypoint": entrypoint(args, p, package),
        "runtime_env": {
            "working_dir": uri.unwrap_or_default(),
            "env_vars": Value::Object(env_vars.clone()),
        },
        "metadata": {
            "rlharness_scenario": p.name.clone(),
            "rlharness_file": p.file().display().to_string(),
            "submitted_by": "rlharness run --executor ray",
        },
    });
    if let Value::Object(m) = &mut body {
        m.extend(resources(p, args));
    }
    body
}
