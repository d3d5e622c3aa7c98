//! The golden store: accepted baselines as plain files in plain folders.
//!
//! Layout: `<root>/<scenario>/<hardware>/metrics.csv` (the accepted series) and `golden.yaml`
//! (a provenance header and a snapshot of the rules). A run never overwrites them: it writes a
//! pending pair beside them, `metrics.csv.new` and `golden.yaml.new`, which `accept` renames
//! over the accepted files and `reject` deletes (the bless flow of insta). With `CI=true` the
//! store refuses to write anything.
//!
//! Two renames are not one atomic step, so the header carries `metrics_sha256`, the digest of
//! the series it was written with. `accept` renames the series first and the header last: a
//! crash in between leaves `golden.yaml.new` whose digest matches the new `metrics.csv`, which
//! `load` refuses (the pair disagrees) and `accept` finishes. Headers without the digest (from
//! before it existed) are read as before.

pub(crate) mod calibration;
pub use calibration::CalibrationError;

use std::path::{Path, PathBuf};

use crate::checks::ChecksSpec;
use crate::fsx;
use crate::metrics::{MetricTable, MetricsError};

pub(crate) const METRICS_FILE: &str = "metrics.csv";
pub(crate) const HEADER_FILE: &str = "golden.yaml";
pub(crate) const PENDING_SUFFIX: &str = ".new";

/// Where an accepted series came from.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct Provenance {
    /// RFC 3339.
    pub date: String,
    pub harness_version: String,
    pub git_commit: Option<String>,
    pub device: String,
    pub seed: Option<u64>,
    pub threads: Option<u64>,
    pub torch_version: Option<String>,
    /// Where the numbers come from when they are not a run of this harness (a published
    /// reference such as a README's table). `None` for a blessed run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// The numeric fingerprint of the host and backend that made the series (a deterministic
    /// backend only): a run with the same fingerprint must reproduce it bit for bit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numeric_fingerprint: Option<String>,
    /// The level the CPU kernels were pinned to (torch on the CPU).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_isa: Option<String>,
}

/// The calibrated bands in force when a golden was blessed: per calibrated rule, each window's
/// (first step, last step, half-width), as `golden.yaml`'s `bands:` line records them. The
/// loosening guard compares the bands a run is judged with against these, so a wider band (a
/// larger `k`, `abs` turned into a wide calibrated rule, a noisier re-calibration) fails until
/// it is blessed again.
pub type BlessedBands = std::collections::BTreeMap<String, Vec<(u64, u64, f64)>>;

/// An accepted (or pending) baseline.
#[derive(Debug, Clone, PartialEq)]
pub struct Golden {
    pub(crate) scenario: String,
    pub(crate) hardware: String,
    pub table: MetricTable,
    pub provenance: Provenance,
    /// The rules in force when it was blessed.
    pub(crate) rules: Option<ChecksSpec>,
    /// The calibrated bands in force when it was blessed (none recorded: no calibrated rule
    /// had a calibration then, or a golden older than the record).
    pub(crate) bands: Option<BlessedBands>,
    pub(crate) dir: PathBuf,
    /// The measured noise beside it (`calibration.json`), when calibrated.
    pub(crate) calibration: Option<calibration::Calibration>,
    /// Its files by digest: what a run's `run.json` records it was judged against.
    pub(crate) digest: GoldenDigest,
}

/// What a verdict was judged against, by SHA-256 (carriage returns dropped, as
/// `metrics_digest`): the golden's `metrics.csv` and `golden.yaml` together (a self-test's
/// reference run: its `metrics.csv`), and its `calibration.json`. `run.json` records it;
/// `compare RUN` says when the files changed since.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GoldenDigest {
    pub golden: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration: Option<String>,
}

/// What a run's verdict was judged against (`run.json`'s `judged_against`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct JudgedAgainst {
    #[serde(flatten)]
    pub digest: GoldenDigest,
    /// Per calibrated golden rule (`golden:<metric>`), its band as resolved.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub bands: std::collections::BTreeMap<String, String>,
}

impl GoldenDigest {
    /// What differs from `now`, in words ("the golden (sha a → b)"); `None` when nothing does.
    pub(crate) fn changes(&self, now: &GoldenDigest) -> Option<String> {
        let short = |s: &str| s[..s.len().min(12)].to_string();
        let mut parts = Vec::new();
        if self.golden != now.golden {
            parts.push(format!(
                "the golden's series or header (sha {} → {})",
                short(&self.golden),
                short(&now.golden)
            ));
        }
        if self.calibration != now.calibration {
            let opt = |c: &Option<String>| c.as_deref().map_or("none".to_string(), short);
            parts.push(format!(
                "its calibration (sha {} → {})",
                opt(&self.calibration),
                opt(&now.calibration)
            ));
        }
        (!parts.is_empty()).then(|| parts.join(" and "))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum GoldenError {
    #[error(transparent)]
    Fs(#[from] fsx::FsError),
    #[error("invalid golden series: {0}")]
    Metrics(#[from] MetricsError),
    #[error("invalid golden header {path}: {message}")]
    Header { path: PathBuf, message: String },
    #[error(transparent)]
    Calibration(#[from] calibration::CalibrationError),
    #[error(
        "refusing to write a golden for {scenario} on {hardware}: CI=true, and CI never writes \
         goldens; run it locally and commit the accepted golden"
    )]
    CiRefused { scenario: String, hardware: String },
    #[error("invalid {what} `{name}`: use letters, digits, `-`, `_`, `.`, and `/` between parts")]
    BadName { what: &'static str, name: String },
    #[error("no pending golden matches {0}")]
    NoPending(String),
    #[error("{path} has a pending series but no {missing}")]
    TornPending {
        path: PathBuf,
        missing: &'static str,
    },
    #[error(
        "{dir}: metrics.csv does not match golden.yaml (metrics_sha256 {want}, the file has \
         {got}){hint}"
    )]
    Mismatch {
        dir: PathBuf,
        want: String,
        got: String,
        hint: &'static str,
    },
}

/// A pending golden waiting for review.
#[derive(Debug, Clone, PartialEq)]
pub struct Pending {
    pub(crate) scenario: String,
    pub(crate) hardware: String,
    pub(crate) dir: PathBuf,
    pub(crate) diff_summary: String,
}

/// The golden key of a device: an override wins; a known accelerator name maps to its model
/// (`NVIDIA H200` -> `h200`, `NVIDIA A100-SXM4-80GB` -> `a100`, `NVIDIA GeForce RTX 4090` ->
/// `rtx4090`), whatever else the string holds (`NVIDIA H200 (cuda:3)` is `h200`); a CUDA
/// device known only by its ordinal (`cuda:0`, no name) is `cuda`, never `cuda-0`; CPUs map to
/// `cpu`. A pure function of the text, so every mapping is tested without a GPU.
pub(crate) fn hardware_key(device: &str, override_key: Option<&str>) -> String {
    if let Some(k) = override_key.map(str::trim).filter(|k| !k.is_empty()) {
        return slug(k);
    }
    let d = device.to_lowercase();
    let tokens: Vec<&str> = d
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|t| !t.is_empty())
        .collect();
    const KNOWN: &[&str] = &[
        "gb200", "b200", "b100", "h200", "h100", "h800", "h20", "gh200", "a100", "a800", "a10g",
        "a10", "a6000", "a5000", "a4000", "l40s", "l40", "l4", "v100", "t4", "p100", "mi300x",
        "mi325x", "mi250x", "mi250", "mi210",
    ];
    for t in &tokens {
        if KNOWN.contains(t) {
            return (*t).to_string();
        }
    }
    if tokens.is_empty() || tokens[0] == "cpu" || d.starts_with("cpu") {
        return "cpu".into();
    }
    // A consumer or workstation card: `rtx 4090` -> `rtx4090`, `gtx 1080 ti` -> `gtx1080ti`.
    if let Some(i) = tokens.iter().position(|t| matches!(*t, "rtx" | "gtx")) {
        let rest: String = tokens[i + 1..]
            .iter()
            .take_while(|t| **t != "cuda")
            .copied()
            .collect();
        if rest.starts_with(|c: char| c.is_ascii_digit()) {
            return format!("{}{rest}", tokens[i]);
        }
    }
    // Only an ordinal (`cuda:0`): the model is unknown, and the ordinal is no part of a key.
    if tokens[0] == "cuda"
        && tokens[1..]
            .iter()
            .all(|t| t.chars().all(|c| c.is_ascii_digit()))
    {
        return "cuda".into();
    }
    const BRANDS: &[&str] = &[
        "nvidia", "geforce", "tesla", "quadro", "amd", "instinct", "radeon",
    ];
    let model: Vec<&str> = tokens
        .iter()
        .copied()
        .filter(|t| !BRANDS.contains(t))
        .collect();
    if model.is_empty() {
        return slug(&d);
    }
    slug(&model.join("-"))
}

/// The `-i` argument `nvidia-smi` needs for the process's CUDA device `ordinal`: CUDA numbers
/// the devices listed in `CUDA_VISIBLE_DEVICES` (indices or UUIDs) from 0, so ordinal N is
/// the N-th entry there; without it, the ordinal is the index (with `CUDA_DEVICE_ORDER=
/// PCI_BUS_ID`, or on a host of one GPU model, where the order cannot change the key).
pub(crate) fn nvidia_smi_index(
    ordinal: usize,
    cuda_visible_devices: Option<&str>,
) -> Option<String> {
    match cuda_visible_devices.map(str::trim) {
        None | Some("") => Some(ordinal.to_string()),
        Some(list) => list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .nth(ordinal)
            .map(str::to_string),
    }
}

/// The CUDA ordinal of a device string such as `cuda:2` (`cuda` alone is ordinal 0).
pub(crate) fn cuda_ordinal(device: &str) -> Option<usize> {
    let rest = device.trim().strip_prefix("cuda")?;
    if rest.is_empty() {
        return Some(0);
    }
    rest.strip_prefix(':')?.parse().ok()
}

/// A device string with the GPU's name when it is known only by its CUDA ordinal:
/// `cuda:0` -> `NVIDIA H200 (cuda:0)`, the name read with
/// `nvidia-smi --query-gpu=name --format=csv,noheader -i N` (tch 0.24 has no device-name
/// call). Anything else, or a name that cannot be read, comes back unchanged.
pub(crate) fn name_cuda_device(device: &str) -> String {
    let Some(ordinal) = cuda_ordinal(device) else {
        return device.to_string();
    };
    let visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    let Some(index) = nvidia_smi_index(ordinal, visible.as_deref()) else {
        return device.to_string();
    };
    let out = std::process::Command::new("nvidia-smi")
        .args(["--query-gpu=name", "--format=csv,noheader", "-i", &index])
        .output();
    match out {
        Ok(o) if o.status.success() => {
            let text = String::from_utf8_lossy(&o.stdout);
            match text.lines().map(str::trim).find(|l| !l.is_empty()) {
                Some(name) => format!("{name} ({device})"),
                None => device.to_string(),
            }
        }
        _ => {
            tracing::warn!(
                "cannot read the name of {device} with nvidia-smi; its golden key is `cuda`"
            );
            device.to_string()
        }
    }
}

fn slug(s: &str) -> String {
    let mut out = String::new();
    for c in s.to_lowercase().chars() {
        if c.is_ascii_alphanumeric() || c == '.' || c == '_' {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    let t = out.trim_matches('-').to_string();
    if t.is_empty() {
        "unknown".into()
    } else {
        t
    }
}

fn check_name(what: &'static str, name: &str, allow_slash: bool) -> Result<(), GoldenError> {
    let ok = !name.is_empty()
        && name.split('/').all(|part| {
            !part.is_empty()
                && part != "."
                && part != ".."
                && part
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        })
        && (allow_slash || !name.contains('/'))
        && !name.starts_with('_');
    if ok {
        Ok(())
    } else {
        Err(GoldenError::BadName {
            what,
            name: name.to_string(),
        })
    }
}

fn pending_path(dir: &Path, file: &str) -> PathBuf {
    dir.join(format!("{file}{PENDING_SUFFIX}"))
}

#[derive(Debug, Clone)]
pub struct GoldenStore {
    root: PathBuf,
    ci: bool,
}

impl GoldenStore {
    /// A store at `root`; writes are refused when the environment says `CI=true`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        let ci = std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1");
        Self::with_ci(root, ci)
    }

    /// Tests pass the CI flag directly instead of racing on the process environment.
    pub fn with_ci(root: impl Into<PathBuf>, ci: bool) -> Self {
        Self {
            root: root.into(),
            ci,
        }
    }

    pub(crate) fn dir(&self, scenario: &str, hardware: &str) -> Result<PathBuf, GoldenError> {
        check_name("scenario name", scenario, true)?;
        check_name("hardware key", hardware, false)?;
        Ok(self.root.join(scenario).join(hardware))
    }

    /// The accepted golden, or `None` when there is none yet.
    pub fn load(&self, scenario: &str, hardware: &str) -> Result<Option<Golden>, GoldenError> {
        let dir = self.dir(scenario, hardware)?;
        let csv = dir.join(METRICS_FILE);
        if !csv.exists() {
            return Ok(None);
        }
        read_golden(scenario, hardware, &dir, &csv, &dir.join(HEADER_FILE)).map(Some)
    }

    /// Write the run's series as a pending golden for review. Returns the pending series path.
    pub fn write_pending(
        &self,
        scenario: &str,
        hardware: &str,
        table: &MetricTable,
        provenance: &Provenance,
        rules: Option<&ChecksSpec>,
        bands: Option<&BlessedBands>,
    ) -> Result<PathBuf, GoldenError> {
        let dir = self.dir(scenario, hardware)?;
        if self.ci {
            return Err(GoldenError::CiRefused {
                scenario: scenario.into(),
                hardware: hardware.into(),
            });
        }
        let header = render_header(scenario, hardware, table, provenance, rules, bands);
        // The header goes first: a pending series is only ever seen with its header.
        fsx::write_atomic(&pending_path(&dir, HEADER_FILE), header.as_bytes())?;
        let csv = pending_path(&dir, METRICS_FILE);
        fsx::write_atomic(&csv, table.to_csv().as_bytes())?;
        Ok(csv)
    }

    /// Every pending golden under the root, sorted, with a summary of what it changes.
    pub(crate) fn pending(&self) -> Result<Vec<Pending>, GoldenError> {
        let mut dirs = Vec::new();
        find_pending(&self.root, &mut dirs)?;
        dirs.sort();
        let mut out = Vec::new();
        for dir in dirs {
            let rel = dir.strip_prefix(&self.root).unwrap_or(&dir);
            let parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            let Some((hw, scen)) = parts.split_last() else {
                continue;
            };
            if scen.is_empty() {
                continue;
            }
            let scenario = scen.join("/");
            let diff_summary = diff_summary(&dir)?;
            out.push(Pending {
                scenario,
                hardware: hw.clone(),
                dir,
                diff_summary,
            });
        }
        Ok(out)
    }

    pub(crate) fn select(&self, filter: &[String]) -> Result<Vec<Pending>, GoldenError> {
        let all = self.pending()?;
        if filter.is_empty() {
            return Ok(all);
        }
        let chosen: Vec<Pending> = all
            .into_iter()
            .filter(|p| {
                filter.iter().any(|f| {
                    let f = f.trim_end_matches('/');
                    *f == p.scenario || *f == format!("{}/{}", p.scenario, p.hardware)
                })
            })
            .collect();
        if chosen.is_empty() {
            return Err(GoldenError::NoPending(filter.join(", ")));
        }
        Ok(chosen)
    }

    /// Make pending goldens the accepted ones (all, or those whose scenario or
    /// `scenario/hardware` is named).
    pub fn accept(&self, filter: &[String]) -> Result<Vec<Pending>, GoldenError> {
        let chosen = self.select(filter)?;
        if self.ci {
            if let Some(p) = chosen.first() {
                return Err(GoldenError::CiRefused {
                    scenario: p.scenario.clone(),
                    hardware: p.hardware.clone(),
                });
            }
        }
        for p in &chosen {
            let header = pending_path(&p.dir, HEADER_FILE);
            let csv = pending_path(&p.dir, METRICS_FILE);
            if !header.exists() {
                return Err(GoldenError::TornPending {
                    path: p.dir.clone(),
                    missing: "golden.yaml.new",
                });
            }
            if csv.exists() {
                // Validate before replacing anything: a broken pending file must not win.
                read_golden(&p.scenario, &p.hardware, &p.dir, &csv, &header)?;
                // The series first, the header last (see the module's note).
                fsx::rename(&csv, &p.dir.join(METRICS_FILE))?;
            } else if !finishes_an_accept(&p.dir)? {
                return Err(GoldenError::TornPending {
                    path: p.dir.clone(),
                    missing: "metrics.csv.new",
                });
            }
            fsx::rename(&header, &p.dir.join(HEADER_FILE))?;
        }
        Ok(chosen)
    }

    /// Delete pending goldens (all, or the named ones); the accepted ones stay.
    pub(crate) fn reject(&self, filter: &[String]) -> Result<Vec<Pending>, GoldenError> {
        let chosen = self.select(filter)?;
        for p in &chosen {
            for f in [METRICS_FILE, HEADER_FILE] {
                let path = pending_path(&p.dir, f);
                if path.exists() {
                    fsx::remove_file(&path)?;
                }
            }
        }
        Ok(chosen)
    }
}

/// Whether `dir` is an accept cut short: no pending series, and a pending header whose digest
/// is that of the series already in place.
fn finishes_an_accept(dir: &Path) -> Result<bool, GoldenError> {
    let header = pending_path(dir, HEADER_FILE);
    let accepted = dir.join(METRICS_FILE);
    if pending_path(dir, METRICS_FILE).exists() || !header.exists() || !accepted.exists() {
        return Ok(false);
    }
    let text = fsx::read_to_string(&header)?;
    parse_header(&text, &header)?;
    Ok(header_digest(&text)
        .is_some_and(|want| fsx::read(&accepted).is_ok_and(|bytes| metrics_digest(&bytes) == want)))
}

fn find_pending(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), GoldenError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(fsx::FsError {
                action: "list",
                path: dir.to_path_buf(),
                source,
            }
            .into())
        }
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            // `_` and `.` folders are never goldens.
            if !name.starts_with('_') && !name.starts_with('.') {
                find_pending(&path, out)?;
            }
        } else if (name == format!("{METRICS_FILE}{PENDING_SUFFIX}")
            || name == format!("{HEADER_FILE}{PENDING_SUFFIX}"))
            && !out.iter().any(|d| d == dir)
        {
            // Either file marks a pending golden: a header alone is an accept cut short, or
            // a run that died before writing its series (`accept` tells them apart).
            out.push(dir.to_path_buf());
        }
    }
    Ok(())
}

fn read_golden(
    scenario: &str,
    hardware: &str,
    dir: &Path,
    csv: &Path,
    header: &Path,
) -> Result<Golden, GoldenError> {
    let table = MetricTable::read_csv(csv)?;
    let mut digest = GoldenDigest::default();
    let (provenance, rules, bands) = if header.exists() {
        let text = fsx::read_to_string(header)?;
        digest.golden =
            metrics_digest(&[fsx::read(csv)?.as_slice(), b"\n", text.as_bytes()].concat());
        let parsed = parse_header(&text, header)?;
        if let Some(want) = header_digest(&text) {
            let got = metrics_digest(&fsx::read(csv)?);
            if got != want {
                let accepted = header == dir.join(HEADER_FILE);
                let hint = if accepted && pending_path(dir, HEADER_FILE).exists() {
                    "; an interrupted `rlharness golden accept`: run it again to finish"
                } else {
                    "; the files were changed by hand or come from different runs"
                };
                return Err(GoldenError::Mismatch {
                    dir: dir.to_path_buf(),
                    want,
                    got,
                    hint,
                });
            }
        }
        parsed
    } else {
        return Err(GoldenError::Header {
            path: header.to_path_buf(),
            message: "the file is missing (every golden needs its provenance header)".into(),
        });
    };
    let calibration = calibration::Calibration::read(dir)?;
    if calibration.is_some() {
        digest.calibration = Some(metrics_digest(&fsx::read(
            &dir.join(calibration::CALIBRATION_FILE),
        )?));
    }
    Ok(Golden {
        scenario: scenario.into(),
        hardware: hardware.into(),
        table,
        provenance,
        rules,
        bands,
        dir: dir.to_path_buf(),
        calibration,
        digest,
    })
}

// ---------------------------------------------------------------------------------------------
// golden.yaml: written by a small emitter (every scalar is a JSON string or number, which YAML
// reads as the same value; the rules snapshot is one line of JSON, a YAML flow mapping), read
// back with yaml-rust2.

fn yaml_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

fn yaml_opt_str(s: Option<&str>) -> String {
    s.map(yaml_str).unwrap_or_else(|| "null".into())
}

fn yaml_opt_u64(v: Option<u64>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "null".into())
}

pub(crate) fn render_header(
    scenario: &str,
    hardware: &str,
    table: &MetricTable,
    p: &Provenance,
    rules: Option<&ChecksSpec>,
    bands: Option<&BlessedBands>,
) -> String {
    let digest = metrics_digest(table.to_csv().as_bytes());
    let rules_json = rules
        .and_then(|r| serde_json::to_string(r).ok())
        .unwrap_or_else(|| "null".into());
    let bands_line = bands
        .filter(|b| !b.is_empty())
        .and_then(|b| serde_json::to_string(b).ok())
        .map(|b| format!("bands: {b}\n"))
        .unwrap_or_default();
    format!(
        "# rlharness golden: the accepted series of {scenario} on {hardware} lies in metrics.csv.\n\
         # Review changes with `rlharness golden status|accept|reject`; do not edit by hand.\n\
         scenario: {}\n\
         hardware: {}\n\
         steps: {}\n\
         metrics: {}\n\
         metrics_sha256: {}\n\
         provenance:\n  \
           date: {}\n  \
           harness_version: {}\n  \
           git_commit: {}\n  \
           device: {}\n  \
           seed: {}\n  \
           threads: {}\n  \
           torch_version: {}\n\
         {}{}{}\
         rules: {rules_json}\n{bands_line}",
        yaml_str(scenario),
        yaml_str(hardware),
        table.len(),
        table.columns().len(),
        yaml_str(&digest),
        yaml_str(&p.date),
        yaml_str(&p.harness_version),
        yaml_opt_str(p.git_commit.as_deref()),
        yaml_str(&p.device),
        yaml_opt_u64(p.seed),
        yaml_opt_u64(p.threads),
        yaml_opt_str(p.torch_version.as_deref()),
        p.source
            .as_deref()
            .map(|s| format!("  source: {}\n", yaml_str(s)))
            .unwrap_or_default(),
        p.numeric_fingerprint
            .as_deref()
            .map(|s| format!("  numeric_fingerprint: {}\n", yaml_str(s)))
            .unwrap_or_default(),
        p.cpu_isa
            .as_deref()
            .map(|s| format!("  cpu_isa: {}\n", yaml_str(s)))
            .unwrap_or_default(),
    )
}

fn yaml_to_json(y: &yaml_rust2::Yaml) -> serde_json::Value {
    use serde_json::Value;
    use yaml_rust2::Yaml;
    match y {
        Yaml::Real(s) => s
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map(Value::Number)
            .unwrap_or_else(|| Value::String(s.clone())),
        Yaml::Integer(i) => Value::from(*i),
        Yaml::String(s) => Value::String(s.clone()),
        Yaml::Boolean(b) => Value::Bool(*b),
        Yaml::Array(a) => Value::Array(a.iter().map(yaml_to_json).collect()),
        Yaml::Hash(h) => Value::Object(
            h.iter()
                .map(|(k, v)| {
                    let key = match k {
                        Yaml::String(s) => s.clone(),
                        Yaml::Integer(i) => i.to_string(),
                        Yaml::Real(r) => r.clone(),
                        Yaml::Boolean(b) => b.to_string(),
                        _ => String::new(),
                    };
                    (key, yaml_to_json(v))
                })
                .collect(),
        ),
        _ => Value::Null,
    }
}

pub(crate) fn parse_header(
    text: &str,
    path: &Path,
) -> Result<(Provenance, Option<ChecksSpec>, Option<BlessedBands>), GoldenError> {
    let herr = |message: String| GoldenError::Header {
        path: path.to_path_buf(),
        message,
    };
    let docs = yaml_rust2::YamlLoader::load_from_str(text).map_err(|e| herr(e.to_string()))?;
    let doc = docs
        .first()
        .ok_or_else(|| herr("the file is empty".into()))?;
    let v = yaml_to_json(doc);
    let prov = v
        .get("provenance")
        .ok_or_else(|| herr("no `provenance` section".into()))?;
    let provenance: Provenance =
        serde_json::from_value(prov.clone()).map_err(|e| herr(format!("provenance: {e}")))?;
    let rules = match v.get("rules") {
        None | Some(serde_json::Value::Null) => None,
        Some(r) => Some(
            serde_json::from_value::<ChecksSpec>(r.clone())
                .map_err(|e| herr(format!("rules: {e}")))?,
        ),
    };
    let bands = match v.get("bands") {
        None | Some(serde_json::Value::Null) => None,
        Some(b) => Some(
            serde_json::from_value::<BlessedBands>(b.clone())
                .map_err(|e| herr(format!("bands: {e}")))?,
        ),
    };
    Ok((provenance, rules, bands))
}

/// The digest a header records for its series: SHA-256 of the CSV bytes, carriage returns
/// dropped (a checkout with `core.autocrlf` must not break the pair).
pub(crate) fn metrics_digest(csv: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for chunk in csv.split(|&b| b == b'\r') {
        h.update(chunk);
    }
    format!("{:x}", h.finalize())
}

/// The `metrics_sha256` a header records, if any.
fn header_digest(text: &str) -> Option<String> {
    let docs = yaml_rust2::YamlLoader::load_from_str(text).ok()?;
    docs.first()?["metrics_sha256"].as_str().map(str::to_string)
}

/// What a pending golden changes relative to the accepted one.
fn diff_summary(dir: &Path) -> Result<String, GoldenError> {
    let pending_csv = pending_path(dir, METRICS_FILE);
    if !pending_csv.exists() {
        return Ok(if finishes_an_accept(dir)? {
            "an accept cut short: the new series is in place, `golden accept` installs its header"
                .into()
        } else {
            "torn: golden.yaml.new without metrics.csv.new (a run died while writing it); \
             `golden reject` removes it"
                .into()
        });
    }
    let new = MetricTable::read_csv(&pending_csv)?;
    let old_path = dir.join(METRICS_FILE);
    if !old_path.exists() {
        return Ok(format!(
            "new golden: {} steps, {} metrics",
            new.len(),
            new.columns().len()
        ));
    }
    let old = MetricTable::read_csv(&old_path)?;
    Ok(summarize_change(&old, &new))
}

/// `20 -> 15 steps; 3 of 34 metrics changed (largest: critic/rewards/mean |Δ| 0.012 at step 7);
/// added: x; removed: y`.
pub(crate) fn summarize_change(old: &MetricTable, new: &MetricTable) -> String {
    let (oc, nc) = (old.columns(), new.columns());
    let added: Vec<&String> = nc.iter().filter(|c| !oc.contains(c)).collect();
    let removed: Vec<&String> = oc.iter().filter(|c| !nc.contains(c)).collect();
    let mut changed: Vec<(String, f64, u64)> = Vec::new();
    for c in nc.iter().filter(|c| oc.contains(c)) {
        let o = old.series(c);
        let mut worst: Option<(f64, u64)> = None;
        let mut differs = false;
        for (s, v) in new.series(c) {
            let Ok(i) = o.binary_search_by_key(&s, |(os, _)| *os) else {
                continue;
            };
            let ov = o[i].1;
            let same = ov == v || (ov.is_nan() && v.is_nan());
            if !same {
                differs = true;
                let d = (v - ov).abs();
                let d = if d.is_nan() { f64::INFINITY } else { d };
                if worst.is_none_or(|(w, _)| d > w) {
                    worst = Some((d, s));
                }
            }
        }
        if differs {
            if let Some((d, s)) = worst {
                changed.push((c.clone(), d, s));
            }
        }
    }
    let mut parts = Vec::new();
    if old.steps() != new.steps() {
        parts.push(format!("{} -> {} steps", old.len(), new.len()));
    } else {
        parts.push(format!("{} steps", new.len()));
    }
    if changed.is_empty() {
        parts.push("no value changed".into());
    } else {
        changed.sort_by(|a, b| b.1.total_cmp(&a.1));
        let (m, d, s) = &changed[0];
        parts.push(format!(
            "{} of {} metrics changed (largest: {m} |Δ| {} at step {s})",
            changed.len(),
            nc.len(),
            crate::metrics::format_value(*d)
        ));
    }
    if !added.is_empty() {
        parts.push(format!(
            "added: {}",
            added
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if !removed.is_empty() {
        parts.push(format!(
            "removed: {}",
            removed
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(values: &[f64]) -> MetricTable {
        let mfu = vec![0.25; values.len()];
        MetricTable::from_columns(&[("critic/rewards/mean", values), ("perf/mfu/actor", &mfu)])
    }

    fn prov() -> Provenance {
        Provenance {
            date: "2026-01-02T03:04:05Z".into(),
            harness_version: "0.1.0".into(),
            git_commit: Some("abc123".into()),
            device: "NVIDIA H200".into(),
            seed: Some(7),
            threads: Some(2),
            torch_version: None,
            source: None,
            ..Provenance::default()
        }
    }

    fn rules() -> ChecksSpec {
        serde_json::from_str(
            r#"{"golden": {"critic/rewards/mean": {"window": 5, "abs": 0.05, "direction": "higher_is_better"}}, "expect": ["max(perf/mfu/actor) <= 1"]}"#,
        )
        .unwrap()
    }

    #[test]
    fn hardware_keys() {
        assert_eq!(hardware_key("cpu", None), "cpu");
        assert_eq!(hardware_key("CPU (x86_64, 16 threads)", None), "cpu");
        assert_eq!(hardware_key("NVIDIA H200", None), "h200");
        assert_eq!(hardware_key("NVIDIA H100 80GB HBM3", None), "h100");
        assert_eq!(hardware_key("NVIDIA A100-SXM4-80GB", None), "a100");
        assert_eq!(hardware_key("NVIDIA GeForce RTX 4090", None), "rtx4090");
        assert_eq!(hardware_key("NVIDIA H200", Some("h200-nvl")), "h200-nvl");
        assert_eq!(hardware_key("cpu", Some("  My Box ")), "my-box");
        assert_eq!(hardware_key("", None), "cpu");
    }

    #[test]
    fn cuda_names_key_by_model_whatever_the_ordinal() {
        for (name, key) in [
            ("NVIDIA H200", "h200"),
            ("NVIDIA H200 (cuda:0)", "h200"),
            ("NVIDIA H200 (cuda:7)", "h200"),
            ("NVIDIA H100 80GB HBM3", "h100"),
            ("NVIDIA H100 PCIe", "h100"),
            ("NVIDIA H100 NVL (cuda:1)", "h100"),
            ("NVIDIA A100-SXM4-80GB", "a100"),
            ("NVIDIA A100-PCIE-40GB (cuda:3)", "a100"),
            ("NVIDIA GeForce RTX 4090", "rtx4090"),
            ("NVIDIA GeForce RTX 4090 (cuda:1)", "rtx4090"),
            ("NVIDIA GeForce GTX 1080 Ti", "gtx1080ti"),
            ("NVIDIA RTX A6000", "a6000"),
            ("NVIDIA L40S", "l40s"),
            ("NVIDIA L4", "l4"),
            ("Tesla V100-SXM2-16GB", "v100"),
            ("Tesla T4", "t4"),
            ("NVIDIA GH200 480GB", "gh200"),
            ("NVIDIA B200", "b200"),
            ("AMD Instinct MI300X", "mi300x"),
            ("NVIDIA Graphics Device", "graphics-device"),
            // Known only by its ordinal: never `cuda-0`, whatever the ordinal.
            ("cuda:0", "cuda"),
            ("cuda:5", "cuda"),
            ("cuda", "cuda"),
        ] {
            assert_eq!(hardware_key(name, None), key, "{name}");
        }
    }

    /// On a host with an NVIDIA GPU (`cargo test -- --ignored`): ordinal 0 is named through
    /// nvidia-smi and keyed by its model, never by its ordinal.
    #[test]
    #[ignore = "needs an NVIDIA GPU and nvidia-smi: the GPU lane, bash ci/gpu-tests.sh"]
    fn a_real_cuda_device_is_named_and_keyed_by_its_model() {
        let named = name_cuda_device("cuda:0");
        assert!(named.ends_with(" (cuda:0)"), "{named}");
        let key = hardware_key(&named, None);
        assert!(!key.contains("cuda"), "{named} -> {key}");
        println!("{named} -> {key}");
    }

    #[test]
    fn cuda_ordinals_and_visible_devices() {
        assert_eq!(cuda_ordinal("cuda:0"), Some(0));
        assert_eq!(cuda_ordinal("cuda:3"), Some(3));
        assert_eq!(cuda_ordinal("cuda"), Some(0));
        assert_eq!(cuda_ordinal("cpu"), None);
        assert_eq!(cuda_ordinal("cudax"), None);
        assert_eq!(nvidia_smi_index(0, None).as_deref(), Some("0"));
        assert_eq!(nvidia_smi_index(2, Some("")).as_deref(), Some("2"));
        assert_eq!(nvidia_smi_index(0, Some("3,5")).as_deref(), Some("3"));
        assert_eq!(nvidia_smi_index(1, Some("3, 5")).as_deref(), Some("5"));
        assert_eq!(
            nvidia_smi_index(0, Some("GPU-8f3e,GPU-1a2b")).as_deref(),
            Some("GPU-8f3e")
        );
        assert_eq!(nvidia_smi_index(2, Some("3,5")), None);
        // Not a CUDA device: no query, unchanged.
        assert_eq!(name_cuda_device("cpu"), "cpu");
    }

    #[test]
    fn missing_golden_then_pending_then_accept() {
        let dir = tempfile::tempdir().unwrap();
        let store = GoldenStore::with_ci(dir.path(), false);
        assert!(store.load("smoke/mock", "cpu").unwrap().is_none());
        let path = store
            .write_pending(
                "smoke/mock",
                "cpu",
                &table(&[0.1, 0.2]),
                &prov(),
                Some(&rules()),
                None,
            )
            .unwrap();
        assert!(path.ends_with("smoke/mock/cpu/metrics.csv.new"));
        // Pending is not accepted: a run still sees no golden.
        assert!(store.load("smoke/mock", "cpu").unwrap().is_none());
        let pending = store.pending().unwrap();
        assert_eq!(pending.len(), 1);
        assert_eq!(pending[0].scenario, "smoke/mock");
        assert_eq!(pending[0].hardware, "cpu");
        assert_eq!(pending[0].diff_summary, "new golden: 2 steps, 2 metrics");

        let accepted = store.accept(&[]).unwrap();
        assert_eq!(accepted.len(), 1);
        let g = store.load("smoke/mock", "cpu").unwrap().unwrap();
        assert_eq!(g.table, table(&[0.1, 0.2]));
        assert_eq!(g.provenance, prov());
        assert_eq!(g.rules, Some(rules()));
        assert!(store.pending().unwrap().is_empty());
        let header = fsx::read_to_string(&g.dir.join(HEADER_FILE)).unwrap();
        assert!(header.starts_with("# rlharness golden"), "{header}");
        assert!(header.contains("device: \"NVIDIA H200\""), "{header}");

        // A second run writes a pending change beside the accepted golden; reject drops it.
        store
            .write_pending(
                "smoke/mock",
                "cpu",
                &table(&[0.1, 0.5, 0.6]),
                &prov(),
                None,
                None,
            )
            .unwrap();
        let p = store.pending().unwrap();
        assert!(
            p[0].diff_summary.contains("2 -> 3 steps")
                && p[0]
                    .diff_summary
                    .contains("largest: critic/rewards/mean |Δ| 0.3 at step 2"),
            "{}",
            p[0].diff_summary
        );
        assert!(matches!(
            store.reject(&["other".to_string()]),
            Err(GoldenError::NoPending(_))
        ));
        let rejected = store.reject(&["smoke/mock/cpu".to_string()]).unwrap();
        assert_eq!(rejected.len(), 1);
        assert!(store.pending().unwrap().is_empty());
        let g = store.load("smoke/mock", "cpu").unwrap().unwrap();
        assert_eq!(g.table.len(), 2, "reject keeps the accepted golden");
    }

    #[test]
    fn ci_never_writes_a_golden() {
        let dir = tempfile::tempdir().unwrap();
        let ci = GoldenStore::with_ci(dir.path(), true);
        let e = ci
            .write_pending("s", "cpu", &table(&[0.1]), &prov(), None, None)
            .unwrap_err();
        assert!(matches!(e, GoldenError::CiRefused { .. }));
        assert!(e.to_string().contains("CI=true"), "{e}");
        assert!(!dir.path().join("s").exists());
        // Accepting under CI is refused too.
        GoldenStore::with_ci(dir.path(), false)
            .write_pending("s", "cpu", &table(&[0.1]), &prov(), None, None)
            .unwrap();
        assert!(matches!(ci.accept(&[]), Err(GoldenError::CiRefused { .. })));
        assert!(!dir.path().join("s/cpu/metrics.csv").exists());
    }

    #[test]
    fn bad_names_and_bad_files_are_clear_errors() {
        let dir = tempfile::tempdir().unwrap();
        let store = GoldenStore::with_ci(dir.path(), false);
        for (s, h) in [
            ("../x", "cpu"),
            ("a", "c/d"),
            ("", "cpu"),
            ("_snapshots", "cpu"),
        ] {
            assert!(
                matches!(store.load(s, h), Err(GoldenError::BadName { .. })),
                "{s} {h}"
            );
        }
        let gdir = dir.path().join("s/cpu");
        fsx::write_atomic(&gdir.join(METRICS_FILE), b"step,x\n1,abc\n").unwrap();
        let e = store.load("s", "cpu").unwrap_err().to_string();
        assert!(e.contains("metrics.csv") && e.contains("line 2"), "{e}");
        fsx::write_atomic(&gdir.join(METRICS_FILE), b"step,x\n1,2\n").unwrap();
        let e = store.load("s", "cpu").unwrap_err().to_string();
        assert!(e.contains("golden.yaml") && e.contains("missing"), "{e}");
        fsx::write_atomic(&gdir.join(HEADER_FILE), b"provenance: [1, 2\n").unwrap();
        let e = store.load("s", "cpu").unwrap_err();
        assert!(matches!(e, GoldenError::Header { .. }), "{e:?}");
        assert!(e.to_string().contains("golden.yaml"), "{e}");
        fsx::write_atomic(
            &gdir.join(HEADER_FILE),
            b"provenance: {date: x, harness_version: y, device: z}\nrules: {expect: [\"max(x) <\"]}\n",
        )
        .unwrap();
        let e = store.load("s", "cpu").unwrap_err().to_string();
        assert!(e.contains("rules") && e.contains("column"), "{e}");
        // A torn pending (series without header) is refused on accept, not half-applied.
        fsx::write_atomic(&gdir.join("metrics.csv.new"), b"step,x\n1,3\n").unwrap();
        assert!(matches!(
            store.accept(&[]),
            Err(GoldenError::TornPending { .. })
        ));
    }

    #[test]
    fn an_accept_cut_between_its_two_renames_is_refused_on_load_and_finished_by_accept() {
        let dir = tempfile::tempdir().unwrap();
        let store = GoldenStore::with_ci(dir.path(), false);
        store
            .write_pending("s", "cpu", &table(&[0.1, 0.2]), &prov(), None, None)
            .unwrap();
        store.accept(&[]).unwrap();
        store
            .write_pending("s", "cpu", &table(&[0.5, 0.6]), &prov(), None, None)
            .unwrap();
        // The crash: the series was renamed, the header was not.
        let gdir = dir.path().join("s/cpu");
        fsx::rename(&gdir.join("metrics.csv.new"), &gdir.join(METRICS_FILE)).unwrap();
        let e = store.load("s", "cpu").unwrap_err();
        assert!(matches!(e, GoldenError::Mismatch { .. }), "{e}");
        assert!(e.to_string().contains("run it again"), "{e}");
        let pending = store.pending().unwrap();
        assert_eq!(pending.len(), 1);
        assert!(pending[0].diff_summary.contains("cut short"), "{pending:?}");
        store.accept(&["s".into()]).unwrap();
        let g = store.load("s", "cpu").unwrap().unwrap();
        assert_eq!(g.table, table(&[0.5, 0.6]));
        assert!(store.pending().unwrap().is_empty());
        // A series edited by hand no longer matches its header.
        fsx::write_atomic(
            &gdir.join(METRICS_FILE),
            table(&[0.5, 0.7]).to_csv().as_bytes(),
        )
        .unwrap();
        let e = store.load("s", "cpu").unwrap_err().to_string();
        assert!(e.contains("by hand") && e.contains("metrics_sha256"), "{e}");
        // Carriage returns (a checkout with autocrlf) do not break the pair.
        let crlf = table(&[0.5, 0.6]).to_csv().replace('\n', "\r\n");
        fsx::write_atomic(&gdir.join(METRICS_FILE), crlf.as_bytes()).unwrap();
        store.load("s", "cpu").unwrap().unwrap();
    }

    #[test]
    fn a_header_left_without_its_series_is_listed_torn_and_never_accepted() {
        let dir = tempfile::tempdir().unwrap();
        let store = GoldenStore::with_ci(dir.path(), false);
        store
            .write_pending("s", "cpu", &table(&[0.1]), &prov(), None, None)
            .unwrap();
        store.accept(&[]).unwrap();
        store
            .write_pending("s", "cpu", &table(&[0.9]), &prov(), None, None)
            .unwrap();
        // The run died between the header and the series.
        let gdir = dir.path().join("s/cpu");
        fsx::remove_file(&gdir.join("metrics.csv.new")).unwrap();
        let pending = store.pending().unwrap();
        assert!(pending[0].diff_summary.starts_with("torn"), "{pending:?}");
        assert!(matches!(
            store.accept(&[]),
            Err(GoldenError::TornPending {
                missing: "metrics.csv.new",
                ..
            })
        ));
        assert_eq!(
            store.load("s", "cpu").unwrap().unwrap().table,
            table(&[0.1])
        );
        store.reject(&[]).unwrap();
        assert!(store.pending().unwrap().is_empty());
    }

    #[test]
    fn header_round_trips_odd_strings() {
        let mut p = prov();
        p.device = "weird: \"quoted\" # not a comment\n".into();
        p.git_commit = None;
        let text = render_header("s", "cpu", &table(&[1.0]), &p, None, None);
        let (back, rules, bands) = parse_header(&text, Path::new("golden.yaml")).unwrap();
        assert_eq!(back, p);
        assert_eq!(rules, None);
        assert_eq!(bands, None);
        // The blessed bands round-trip too.
        let b: BlessedBands = [("m".to_string(), vec![(1, 10, 0.125), (11, 20, 0.5)])].into();
        let text = render_header("s", "cpu", &table(&[1.0]), &p, None, Some(&b));
        let (_, _, back) = parse_header(&text, Path::new("golden.yaml")).unwrap();
        assert_eq!(back, Some(b));
    }
}
