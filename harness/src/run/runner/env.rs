//! Facts about where a run ran (`RunEnv`), the run's manifest (`run.json`), and what the report
//! must say about the wire.

use std::collections::BTreeMap;
use std::path::Path;

use super::RunEnd;
use crate::model::rundir::{DroppedValue, KnobDiff, ManifestError, RunManifest, RunStatus};
use crate::run::driver::DriverSpec;
use crate::run::plan::RunPlan;

/// The device an external trainer computes on: the first GPU `nvidia-smi` lists when the
/// scenario requires one (its golden then lives under that GPU's key), else none.
pub(super) fn trainer_device(plan: &RunPlan) -> Option<rlharness_arctic::engine::Runtime> {
    let DriverSpec::Command(_) = plan.scenario.driver else {
        return None;
    };
    let r = &plan.scenario.requires;
    if r.gpus == 0 && r.gpu_name.is_none() {
        return None;
    }
    let names = crate::scenario::detect_gpus().ok()?;
    names
        .into_iter()
        .next()
        .map(|device| rlharness_arctic::engine::Runtime {
            device,
            threads: None,
            torch_version: None,
            numerics: None,
        })
}

/// What the report must say about the wire when the proxy cannot see the trainer's traffic.
pub(super) fn wire_notes(plan: &RunPlan, proxied: bool) -> Vec<String> {
    let DriverSpec::Command(_) = plan.scenario.driver else {
        return Vec::new();
    };
    if !proxied {
        return vec![
            "no wire observed: the trainer brings its own backend (`backend: none`), so no \
             request passed through the recording proxy"
                .into(),
        ];
    }
    let protocol = plan
        .scenario
        .config
        .get("remote_backend.comms.protocol")
        .and_then(|r| r.value.as_str().map(str::to_string));
    match protocol.as_deref() {
        Some("http") | None => Vec::new(),
        Some(other) => vec![format!(
            "no wire observed: remote_backend.comms.protocol is `{other}`, so the trainer \
             reaches its Arctic backend over {other} transport, not through the recording proxy"
        )],
    }
}

/// Facts about where a run ran, for `run.json` and the golden provenance.
#[derive(Debug, Clone)]
pub(crate) struct RunEnv {
    pub(crate) device: String,
    pub(crate) hardware: String,
    pub(crate) threads: Option<u64>,
    pub(crate) torch_version: Option<String>,
    /// A deterministic backend's numeric identity (the exact lane's key).
    pub(crate) numerics: Option<rlharness_arctic::wire::runtime::Numerics>,
}

impl RunEnv {
    /// The device a run computes on: what an in-process backend reports (torch), else this
    /// machine's CPU (the mock's simulated device only shapes the numbers it reports).
    pub(crate) fn new(
        runtime: Option<rlharness_arctic::engine::Runtime>,
        hardware_override: Option<&str>,
    ) -> RunEnv {
        let rlharness_arctic::engine::Runtime {
            device,
            threads,
            torch_version,
            numerics,
        } = runtime.unwrap_or_else(|| rlharness_arctic::engine::Runtime {
            device: "cpu".into(),
            threads: None,
            torch_version: None,
            numerics: None,
        });
        // The torch backend knows its GPU only as `cuda:N`; the golden key comes from its name.
        let device = crate::model::host::name_cuda_device(&device);
        RunEnv {
            hardware: crate::model::host::hardware_key(&device, hardware_override),
            device,
            threads,
            torch_version,
            numerics,
        }
    }
}

/// Build `run.json` for a plan; the runner writes it at start (status `running` is not a
/// `RunStatus`, so a run in progress reads as `interrupted` until it ends: exactly what a
/// killed run should say).
pub(crate) fn manifest_for(
    plan: &RunPlan,
    env: &RunEnv,
    started: chrono::DateTime<chrono::Utc>,
    opts: &super::RunOptions,
) -> RunManifest {
    RunManifest {
        label: opts.label.clone(),
        trainer_sources: trainer_sources(plan),
        trainer_command: None,
        calibration: opts.calibration,
        judged_against: None,
        scenario: plan.scenario.name.clone(),
        scenario_path: plan.scenario.path.display().to_string(),
        hardware: env.hardware.clone(),
        status: RunStatus::Interrupted,
        reason: Some("the run did not finish (the harness was stopped or killed)".into()),
        failed_step: None,
        seed: plan.scenario.seed,
        steps: plan.scenario.steps,
        checks: plan.scenario.checks.clone(),
        expected_verdict: plan.scenario.expected_verdict.clone(),
        harness_version: env!("CARGO_PKG_VERSION").to_string(),
        git_commit: git_commit(),
        build_commit: option_env!("RLHARNESS_BUILD_COMMIT").map(str::to_string),
        host: hostname(),
        device: env.device.clone(),
        threads: env.threads,
        torch_version: env.torch_version.clone(),
        numerics: env.numerics.clone(),
        started: started.to_rfc3339(),
        ended: None,
        plan_hash: plan.plan_hash.clone(),
        scenario_hash: plan.scenario_hash.clone(),
        knobs: plan
            .knobs_differing_from_defaults()
            .into_iter()
            .map(|(key, default, value, origin)| KnobDiff {
                key,
                default: (!default.is_null()).then(|| default.to_string()),
                value: value.to_string(),
                origin: origin.to_string(),
            })
            .collect(),
        pending_golden: None,
        reference_run: None,
        notes: Vec::new(),
        dropped: Vec::new(),
        replay: None,
        strays: Vec::new(),
        weight_sync: None,
    }
}

pub(super) fn write_manifest(dir: &Path, m: &RunManifest) -> Result<(), ManifestError> {
    m.write(dir)
}

/// The environment variable that carries `git describe` of the sources `var` names, where
/// they were copied without their repository (a Ray job's shipped worktree).
pub(crate) fn described_var(var: &str) -> String {
    format!("RLHARNESS_DESCRIBED_{var}")
}

/// `git describe --always --dirty --tags` of the checkout at `dir`, or `None` when it is none.
/// A folder that the enclosing repository ignores (sources extracted or installed into a
/// project's cache) is no checkout of that repository: `None`.
pub(crate) fn describe_checkout(dir: &Path) -> Option<String> {
    let ignored = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["check-ignore", "-q", "."])
        .status()
        .is_ok_and(|s| s.success());
    if ignored {
        return None;
    }
    git_in(dir, &["describe", "--always", "--dirty", "--tags"])
}

/// `git describe --always --dirty` of each source checkout a command driver names (by the
/// environment variable that holds its path: the driver's `env`, else the harness's own), or
/// why there is none. A folder of installed packages (`pip install --target`: the released
/// adapter) is described by their names and versions ([`describe_installed`]); a copy without
/// its repository by what travelled with it ([`described_var`]).
fn trainer_sources(plan: &RunPlan) -> BTreeMap<String, String> {
    let DriverSpec::Command(c) = &plan.scenario.driver else {
        return BTreeMap::new();
    };
    c.sources
        .iter()
        .map(|var| {
            let path = c.env.get(var).cloned().or_else(|| std::env::var(var).ok());
            let described = match path {
                None => "(not set)".to_string(),
                Some(p) => describe_checkout(Path::new(&p))
                    .or_else(|| describe_installed(Path::new(&p)))
                    .or_else(|| {
                        std::env::var(described_var(var))
                            .ok()
                            .filter(|d| !d.is_empty())
                    })
                    .unwrap_or_else(|| format!("(not a git checkout: {p})")),
            };
            (var.clone(), described)
        })
        .collect()
}

/// The packages installed in `dir` (each `*.dist-info/METADATA` directly under it), as
/// `arctic-platform 0.1.4, liger-kernel 0.8.5` in name order (names normalised as pip does);
/// `None` when there is none.
pub(crate) fn describe_installed(dir: &Path) -> Option<String> {
    let mut found: Vec<String> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".dist-info"))
        .filter_map(|e| std::fs::read_to_string(e.path().join("METADATA")).ok())
        .filter_map(|meta| {
            let field = |k: &str| {
                meta.lines()
                    .take_while(|l| !l.is_empty())
                    .find_map(|l| l.strip_prefix(k).map(|v| v.trim().to_string()))
            };
            // The name as pip spells it (`arctic_platform` is `arctic-platform`).
            let name = field("Name:")?.to_lowercase().replace(['_', '.'], "-");
            Some(format!("{name} {}", field("Version:")?))
        })
        .collect();
    found.sort();
    (!found.is_empty()).then(|| found.join(", "))
}

/// `git ARGS` in `dir`: its trimmed output, or `None` when it fails.
fn git_in(dir: &Path, args: &[&str]) -> Option<String> {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

pub(crate) fn git_commit() -> Option<String> {
    let git = |args: &[&str]| -> Option<String> {
        let out = std::process::Command::new("git").args(args).output().ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let commit = git(&["rev-parse", "--short=12", "HEAD"])?;
    // `-dirty`: tracked files (scenarios, goldens, code) differ from the commit.
    let dirty =
        git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    Some(if dirty {
        format!("{commit}-dirty")
    } else {
        commit
    })
}

pub(crate) fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// How the run ended, for `run.json`, with what the judge needs besides the series (values
/// dropped as insane, a replay's mismatches), so `compare` judges the run as `run` does.
pub(super) fn finalize_manifest(
    manifest: &mut RunManifest,
    end: &RunEnd,
    dropped: &[(u64, String, f64)],
    replay: Option<&crate::run::backend::replay::ReplayOutcome>,
    ended: chrono::DateTime<chrono::Utc>,
) {
    manifest.status = end.run_status();
    manifest.reason = end.reason();
    manifest.failed_step = end.step();
    manifest.dropped = dropped
        .iter()
        .map(|(step, metric, value)| DroppedValue::new(*step, metric.clone(), *value))
        .collect();
    manifest.replay = replay.map(|r| r.record());
    manifest.ended = Some(ended.to_rfc3339());
}

#[cfg(test)]
mod tests {
    use super::{describe_checkout, describe_installed};

    #[test]
    fn a_folder_the_enclosing_repository_ignores_is_no_checkout_of_it() {
        let tmp = tempfile::tempdir().unwrap();
        let git = |args: &[&str]| {
            let s = std::process::Command::new("git")
                .arg("-C")
                .arg(tmp.path())
                .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
                .args(args)
                .status()
                .unwrap();
            assert!(s.success(), "git {args:?}");
        };
        git(&["init", "--quiet"]);
        std::fs::write(tmp.path().join(".gitignore"), ".cache/\n").unwrap();
        let extracted = tmp.path().join(".cache/upstream/adapter");
        std::fs::create_dir_all(&extracted).unwrap();
        std::fs::create_dir_all(tmp.path().join("src")).unwrap();
        git(&["add", ".gitignore"]);
        git(&["commit", "--quiet", "-m", "one"]);
        assert!(describe_checkout(tmp.path()).is_some());
        assert!(describe_checkout(&tmp.path().join("src")).is_some());
        assert_eq!(describe_checkout(&extracted), None);
    }

    #[test]
    fn a_folder_of_installed_packages_is_described_by_their_versions() {
        let tmp = tempfile::tempdir().unwrap();
        assert_eq!(describe_installed(tmp.path()), None, "an empty folder");
        let meta = |dist: &str, text: &str| {
            let d = tmp.path().join(dist);
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("METADATA"), text).unwrap();
        };
        meta(
            "liger_kernel-0.8.5.dist-info",
            "Metadata-Version: 2.4\nName: liger_kernel\nVersion: 0.8.5\n\nVersion: 9 (the body)\n",
        );
        meta(
            "arctic_platform-0.1.4.dist-info",
            "Metadata-Version: 2.4\nName: arctic_platform\nVersion: 0.1.4\nRequires-Python: >=3.12\n",
        );
        // A package without a version, and a folder that is no dist-info, are not named.
        meta("broken-1.dist-info", "Name: broken\n");
        meta("arctic_platform", "Name: not-metadata\nVersion: 1\n");
        assert_eq!(
            describe_installed(tmp.path()).as_deref(),
            Some("arctic-platform 0.1.4, liger-kernel 0.8.5")
        );
    }
}
