//! `rlharness run --executor ray --address http://HEAD:8265`: one Ray job per scenario,
//! through the Ray Jobs REST API of the cluster's dashboard. Ray schedules; the harness
//! submits, watches and collects.
//!
//! - What a job needs travels as one `working_dir` package, uploaded the way Ray's own SDK does
//!   (`PUT /api/packages/gcs/_ray_pkg_<sha256>.zip`, skipped when the cluster has it): this
//!   executable (or none with `--remote-bin`), `rlharness-torch` beside it when a scenario has
//!   a torch backend, the scenarios' folders and the goldens they name. No shared filesystem.
//! - The job's entrypoint is the hidden `rlharness job-entry`: `run` for the one scenario, then
//!   the run directory printed on stdout as one framed, checksummed archive ([`super::bundle`]).
//!   The submitter reads the job's log, verifies the frame and unpacks the run directory under
//!   OUT/, so the combined verdict is made from the same files as a local run's.
//! - Progress (step, reward, ETA) comes from the run's own progress lines in the job's log.
//! - A job that Ray stopped, lost or failed without a frame, or that was not scheduled within
//!   `timeouts.queue`, is exit 3 with the reason; its log is kept as `job.log`. A job stopped
//!   through the API gets SIGTERM, which `job-entry` turns into the run's own interrupt, so the
//!   finished steps come back in the frame.
//! - Ctrl-C stops every job this invocation submitted (and says which, and how to stop any
//!   that would not stop).

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::bundle::{self, Files};
use super::index::{read_seeds, read_verdict, Entry};
use super::ray_auth::RayToken;
use crate::cli::RunArgs;
use crate::error::{CommandError, ExitStatus};

/// Where the package puts things (relative to the job's working directory).
const OUT_DIR: &str = "out";
const GOLDEN_DIR: &str = "golden";

#[derive(Debug, thiserror::Error)]
pub enum RayError {
    #[error("the Ray jobs API at {url}: {source}")]
    Http {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("the Ray jobs API at {url} answered {status}: {body}")]
    Status {
        url: String,
        status: u16,
        body: String,
    },
    #[error("the Ray jobs API at {url} answered something unexpected: {what}")]
    Unexpected { url: String, what: String },
    /// 401 or 403: the cluster has token authentication on. Names where the token came from,
    /// never the token (nor the answer's body).
    #[error("the Ray jobs API at {url} {why}")]
    Auth {
        url: String,
        status: u16,
        why: String,
    },
}

impl RayError {
    /// A token missing or refused is the invocation's input (exit 2); the rest, the run's (3).
    pub(crate) fn exit_status(&self) -> ExitStatus {
        match self {
            RayError::Auth { .. } => ExitStatus::InvalidInput,
            _ => ExitStatus::RunFailed,
        }
    }

    fn auth(url: &str, status: u16, token: Option<&RayToken>) -> RayError {
        let why = match (status, token) {
            (401, None) => "answered 401 Unauthorized: the cluster has token authentication on \
                            and no token was sent; give it with --ray-token-file PATH or \
                            RAY_AUTH_TOKEN (docs/scale-out.md)"
                .to_string(),
            (401, Some(t)) => format!(
                "answered 401 Unauthorized to the token from {} (docs/scale-out.md)",
                t.origin()
            ),
            (_, Some(t)) => format!(
                "refused the token from {} ({status} Forbidden): it is not this cluster's token",
                t.origin()
            ),
            (_, None) => format!(
                "answered {status} Forbidden and no token was sent; give it with \
                 --ray-token-file PATH or RAY_AUTH_TOKEN (docs/scale-out.md)"
            ),
        };
        RayError::Auth {
            url: url.into(),
            status,
            why,
        }
    }
}

/// A job's state as the API reports it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct JobInfo {
    /// PENDING, RUNNING, STOPPED, SUCCEEDED or FAILED.
    pub(crate) status: String,
    pub(crate) message: Option<String>,
}

impl JobInfo {
    pub(crate) fn is_terminal(&self) -> bool {
        matches!(self.status.as_str(), "STOPPED" | "SUCCEEDED" | "FAILED")
    }
}

/// The Ray Jobs REST API of one cluster. Its `Debug` shows the token as `<redacted>`.
#[derive(Clone, Debug)]
pub struct RayClient {
    base: String,
    http: reqwest::Client,
    /// Sent as `Authorization: Bearer ...` with every request (token authentication).
    token: Option<RayToken>,
}

impl RayClient {
    pub fn new(address: &str) -> Result<RayClient, CommandError> {
        let base = address.trim_end_matches('/').to_string();
        if !base.starts_with("http://") {
            return Err(CommandError::invalid(format!(
                "--address {address}: the Ray dashboard's address, e.g. http://HEAD:8265 \
                 (plain http; this build speaks no TLS)"
            )));
        }
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(300))
            .build()
            .map_err(|e| CommandError::run_failed(format!("HTTP client: {e}")))?;
        Ok(RayClient {
            base,
            http,
            token: None,
        })
    }

    /// The same client, sending `token` with every request.
    pub fn with_token(mut self, token: Option<RayToken>) -> RayClient {
        self.token = token;
        self
    }

    /// A request to the API, with the token's `Authorization` header when there is one.
    fn request(&self, method: reqwest::Method, url: &str) -> reqwest::RequestBuilder {
        let req = self.http.request(method, url);
        match &self.token {
            Some(t) => req.header(reqwest::header::AUTHORIZATION, t.header()),
            None => req,
        }
    }

    async fn send(&self, req: reqwest::RequestBuilder, url: &str) -> Result<String, RayError> {
        let resp = req.send().await.map_err(|source| RayError::Http {
            url: url.into(),
            source,
        })?;
        let status = resp.status().as_u16();
        if status == 401 || status == 403 {
            return Err(RayError::auth(url, status, self.token.as_ref()));
        }
        let body = resp.text().await.map_err(|source| RayError::Http {
            url: url.into(),
            source,
        })?;
        if !(200..300).contains(&status) {
            let body: String = body.chars().take(2000).collect();
            return Err(RayError::Status {
                url: url.into(),
                status,
                body,
            });
        }
        Ok(body)
    }

    fn json(url: &str, body: &str) -> Result<Value, RayError> {
        serde_json::from_str(body).map_err(|e| RayError::Unexpected {
            url: url.into(),
            what: format!(
                "not JSON ({e}): {}",
                body.chars().take(200).collect::<String>()
            ),
        })
    }

    /// Upload a `working_dir` package unless the cluster has it; returns its `gcs://` URI.
    pub(crate) async fn ensure_package(
        &self,
        name: &str,
        bytes: Vec<u8>,
    ) -> Result<String, RayError> {
        let url = format!("{}/api/packages/gcs/{name}", self.base);
        match self
            .send(self.request(reqwest::Method::GET, &url), &url)
            .await
        {
            Ok(_) => {}
            Err(RayError::Status { status: 404, .. }) => {
                self.send(self.request(reqwest::Method::PUT, &url).body(bytes), &url)
                    .await?;
            }
            Err(e) => return Err(e),
        }
        Ok(format!("gcs://{name}"))
    }

    /// Submit a job (`POST /api/jobs/`); returns its submission id.
    pub(crate) async fn submit(&self, body: &Value) -> Result<String, RayError> {
        let url = format!("{}/api/jobs/", self.base);
        let text = self
            .send(self.request(reqwest::Method::POST, &url).json(body), &url)
            .await?;
        let v = Self::json(&url, &text)?;
        v.get("submission_id")
            .or_else(|| v.get("job_id"))
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| RayError::Unexpected {
                url,
                what: format!("no submission_id in {text}"),
            })
    }

    pub(crate) async fn status(&self, id: &str) -> Result<JobInfo, RayError> {
        let url = format!("{}/api/jobs/{id}", self.base);
        let text = self
            .send(self.request(reqwest::Method::GET, &url), &url)
            .await?;
        let v = Self::json(&url, &text)?;
        let status = v
            .get("status")
            .and_then(Value::as_str)
            .ok_or_else(|| RayError::Unexpected {
                url: url.clone(),
                what: format!(
                    "no status in {}",
                    text.chars().take(300).collect::<String>()
                ),
            })?
            .to_string();
        Ok(JobInfo {
            status,
            message: v.get("message").and_then(Value::as_str).map(str::to_string),
        })
    }

    pub(crate) async fn logs(&self, id: &str) -> Result<String, RayError> {
        let url = format!("{}/api/jobs/{id}/logs", self.base);
        let text = self
            .send(self.request(reqwest::Method::GET, &url), &url)
            .await?;
        let v = Self::json(&url, &text)?;
        Ok(v.get("logs")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string())
    }

    /// The command that stops a job by hand (Ray's CLI sends a token only with
    /// `RAY_AUTH_MODE=token`).
    fn stop_command(&self, id: &str) -> String {
        let mut c = format!("`ray job stop {id} --address {}`", self.base);
        if self.token.is_some() {
            c.push_str(" with RAY_AUTH_MODE=token and the cluster's token in RAY_AUTH_TOKEN");
        }
        c
    }

    /// `POST /api/jobs/{id}/stop`: whether a running job was told to stop.
    pub async fn stop(&self, id: &str) -> Result<bool, RayError> {
        let url = format!("{}/api/jobs/{id}/stop", self.base);
        let text = self
            .send(self.request(reqwest::Method::POST, &url), &url)
            .await?;
        let v = Self::json(&url, &text)?;
        Ok(v.get("stopped").and_then(Value::as_bool).unwrap_or(false))
    }
}

/// One scenario as a job.
#[derive(Debug, Clone)]
struct Planned {
    file: PathBuf,
    /// The scenario file's path inside the package.
    in_package: String,
    name: String,
    gpus: u32,
    gpu_name: Option<String>,
    queue: Duration,
}

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

/// The job's entrypoint: `job-entry` with the run's own options, for one scenario.
fn entrypoint(args: &RunArgs, scenario: &str) -> String {
    let bin = match &args.remote_bin {
        Some(b) => sh_quote(b),
        None => "./rlharness".to_string(),
    };
    let mut words = vec![
        "job-entry".to_string(),
        sh_quote(scenario),
        format!("--out {OUT_DIR}"),
        format!("--golden {GOLDEN_DIR}"),
    ];
    if let Some(s) = args.common.seed {
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
    if args.remote_bin.is_some() {
        format!("exec {run}")
    } else {
        // Ray's unpacking does not keep the executable bit.
        format!("chmod +x rlharness rlharness-torch 2>/dev/null; exec {run}")
    }
}

/// The job's resources from the scenario's `requires`.
fn resources(p: &Planned, args: &RunArgs) -> serde_json::Map<String, Value> {
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

/// The package's path of a scenarios folder (kept as given when it is a relative path inside
/// the current directory, so `run.json` names the same file as a local run).
fn package_root(root: &Path, k: usize) -> String {
    let rel = if root.is_absolute() {
        std::env::current_dir()
            .ok()
            .and_then(|cwd| root.strip_prefix(cwd).ok().map(Path::to_path_buf))
    } else {
        Some(root.to_path_buf())
    };
    match rel.filter(|r| {
        !r.as_os_str().is_empty()
            && r.components()
                .all(|c| matches!(c, std::path::Component::Normal(_)))
    }) {
        Some(r) => r.to_string_lossy().replace('\\', "/"),
        None => format!("roots/{k}"),
    }
}

/// The planned jobs, the entries of scenarios that did not load (by file index), and the
/// package's files.
type Planning = (Vec<Planned>, Vec<(usize, Entry)>, Files);

/// Plan every scenario and build the one package they share. Scenarios that do not load are
/// entries already (exit 2), never submitted.
fn plan(files: &[PathBuf], args: &RunArgs) -> Result<Planning, CommandError> {
    let mut planned = Vec::new();
    let mut invalid = Vec::new();
    let mut files_out: Files = Vec::new();
    let mut roots: BTreeMap<PathBuf, String> = BTreeMap::new();
    let mut goldens = std::collections::BTreeSet::new();
    let mut torch = false;
    for (i, file) in files.iter().enumerate() {
        let scenario = match crate::spec::load_scenario(file, &args.common.set) {
            Ok(s) => s,
            Err(e) => {
                let err = CommandError::invalid(e.to_string());
                invalid.push((
                    i,
                    super::local::error_entry(file, &err, "not submitted", 0.0),
                ));
                continue;
            }
        };
        torch |= matches!(scenario.backend, crate::backend::BackendSpec::Torch(_));
        let root = crate::spec::config::scenarios_root(file);
        let n = roots.len();
        let in_root = roots
            .entry(root.clone())
            .or_insert_with(|| package_root(&root, n))
            .clone();
        let rel = file.strip_prefix(&root).unwrap_or(file);
        goldens.insert(scenario.name.clone());
        if let Some(g) = scenario.selftest.as_ref().and_then(|s| s.golden.clone()) {
            goldens.insert(g);
        }
        planned.push(Planned {
            file: file.clone(),
            in_package: format!("{in_root}/{}", rel.to_string_lossy().replace('\\', "/")),
            name: scenario.name.clone(),
            gpus: scenario.requires.gpus,
            gpu_name: scenario.requires.gpu_name.clone(),
            queue: scenario
                .timeouts
                .queue
                .unwrap_or(crate::spec::DEFAULT_QUEUE_TIMEOUT),
        });
    }
    let pack = |e: bundle::BundleError| CommandError::run_failed(format!("the job package: {e}"));
    if args.remote_bin.is_none() {
        let exe = std::env::current_exe().map_err(|e| {
            CommandError::run_failed(format!("cannot find this executable to ship it: {e}"))
        })?;
        files_out.push(("rlharness".into(), exe));
        if torch {
            files_out.push((
                crate::backend::child::EXE_NAME.into(),
                crate::backend::child::locate()?,
            ));
        }
    }
    for (root, name) in &roots {
        files_out.extend(bundle::files_under(root, name).map_err(pack)?);
    }
    for g in goldens {
        let dir = crate::cli::golden_store(
            args.common.golden.as_deref(),
            args.scenarios.first().map(std::path::PathBuf::as_path),
        )
        .join(&g);
        if dir.is_dir() {
            files_out
                .extend(bundle::files_under(&dir, &format!("{GOLDEN_DIR}/{g}")).map_err(pack)?);
        }
    }
    Ok((planned, invalid, files_out))
}

/// A scenario's live progress, from the `NAME: step K/N reward R` lines its run prints.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StepLine {
    pub(crate) step: u64,
    pub(crate) total: u64,
    pub(crate) reward: Option<f64>,
}

/// The last progress line in a job's log.
pub(crate) fn last_step(log: &str) -> Option<StepLine> {
    log.lines().rev().find_map(|l| {
        let (_, rest) = l.split_once(": step ")?;
        let mut words = rest.split_whitespace();
        let (k, n) = words.next()?.split_once('/')?;
        let reward = match (words.next(), words.next()) {
            (Some("reward"), Some(r)) => r.parse().ok(),
            _ => None,
        };
        Some(StepLine {
            step: k.parse().ok()?,
            total: n.parse().ok()?,
            reward,
        })
    })
}

/// The last `error: ...` line of a log (what `job-entry` said when it could not run).
fn last_error(log: &str) -> Option<String> {
    log.lines()
        .rev()
        .find(|l| l.starts_with("error: "))
        .map(|l| l.trim_start_matches("error: ").to_string())
}

fn tail(log: &str, n: usize) -> String {
    let lines: Vec<&str> = log.lines().filter(|l| !l.starts_with("@@")).collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// How one job ended, as the watcher saw it.
struct Watched {
    id: String,
    info: Option<JobInfo>,
    log: String,
    first_step_s: Option<f64>,
    /// Why the harness gave up on it (queue timeout, Ctrl-C, API failure).
    gave_up: Option<String>,
    /// What became of the stop request, when the job had not ended by the time it was left.
    stop_note: Option<String>,
    seconds: f64,
}

/// Shows a job's progress: a bar on a terminal, a line per new step otherwise.
struct Shown {
    bar: Option<indicatif::ProgressBar>,
    label: String,
    last: u64,
}

impl Shown {
    fn new(group: Option<&indicatif::MultiProgress>, label: String) -> Shown {
        let bar = group.map(|g| {
            let b = g.add(indicatif::ProgressBar::new(1));
            if let Ok(style) = indicatif::ProgressStyle::with_template(
                "{prefix:.bold} [{bar:30}] step {pos}/{len} {msg} (ETA {eta})",
            ) {
                b.set_style(style.progress_chars("=> "));
            }
            b.set_prefix(label.clone());
            b.set_message("queued");
            b
        });
        Shown {
            bar,
            label,
            last: 0,
        }
    }
    fn state(&self, text: &str) {
        match &self.bar {
            Some(b) => b.set_message(text.to_string()),
            None => eprintln!("{}: {text}", self.label),
        }
    }
    fn step(&mut self, s: &StepLine, since_first: Option<Duration>) {
        if s.step == self.last {
            return;
        }
        self.last = s.step;
        let reward = s
            .reward
            .map(|r| format!(" reward {r:.3}"))
            .unwrap_or_default();
        match &self.bar {
            Some(b) => {
                b.set_length(s.total);
                b.set_position(s.step);
                b.set_message(reward.trim().to_string());
            }
            None => {
                let eta = since_first
                    .filter(|_| s.step > 1)
                    .map(|d| {
                        let per = d.as_secs_f64() / (s.step - 1) as f64;
                        format!(
                            " (ETA {:.0} s)",
                            per * s.total.saturating_sub(s.step) as f64
                        )
                    })
                    .unwrap_or_default();
                eprintln!("{}: step {}/{}{reward}{eta}", self.label, s.step, s.total);
            }
        }
    }
    fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

/// Watch one job to its end (or until the harness gives up on it and stops it).
async fn watch(
    client: &RayClient,
    id: String,
    queue: Duration,
    mut shown: Shown,
    mut cancel: tokio::sync::watch::Receiver<bool>,
) -> Watched {
    let submitted = Instant::now();
    let mut first_step: Option<Instant> = None;
    let mut running = false;
    let mut log = String::new();
    let mut gave_up: Option<String> = None;
    let mut errors = 0u32;
    let mut last_logs = Instant::now() - Duration::from_secs(10);
    let info = loop {
        let info = match poll_status(client, &id, &mut errors).await {
            Ok(info) => info,
            Err(why) => {
                gave_up = Some(why);
                break None;
            }
        };
        if let Some(i) = &info {
            if i.status == "RUNNING" && !running {
                running = true;
                shown.state("running");
            }
            // Logs: often until the first step (that is the overhead measured), then every 2 s.
            let every = if first_step.is_none() {
                Duration::from_millis(250)
            } else {
                Duration::from_secs(2)
            };
            // A job may end before it was ever seen RUNNING: its log is read at the end anyway.
            if i.is_terminal() || (running && last_logs.elapsed() >= every) {
                if let Ok(l) = client.logs(&id).await {
                    log = l;
                    last_logs = Instant::now();
                    if let Some(s) = last_step(&log) {
                        let first = *first_step.get_or_insert_with(Instant::now);
                        shown.step(&s, Some(first.elapsed()));
                    }
                }
            }
            if i.is_terminal() {
                break info;
            }
            if i.status == "PENDING" && submitted.elapsed() >= queue {
                gave_up = Some(format!(
                    "unschedulable: not scheduled within timeouts.queue = {queue:?}; the \
                     cluster has no room for what the scenario requires ({})",
                    i.message.as_deref().unwrap_or("PENDING")
                ));
            }
        }
        if gave_up.is_some() {
            break info;
        }
        let pause = if first_step.is_none() {
            Duration::from_millis(200)
        } else {
            Duration::from_millis(1000)
        };
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = cancel.changed() => {
                if *cancel.borrow() {
                    gave_up = Some("interrupted (Ctrl-C): the job was stopped".into());
                    break info;
                }
            }
        }
    };
    // Given up on: stop it, and wait (bounded) for Ray to say it ended, for its last log.
    let mut info = info;
    let mut stop_note = None;
    if gave_up.is_some() && !info.as_ref().is_some_and(JobInfo::is_terminal) {
        shown.state("stopping");
        (info, stop_note) = stop_job(client, &id, info).await;
        if let Ok(l) = client.logs(&id).await {
            log = l;
        }
    }
    shown.finish();
    Watched {
        id,
        info,
        log,
        first_step_s: first_step.map(|f| (f - submitted).as_secs_f64()),
        gave_up,
        stop_note,
        seconds: submitted.elapsed().as_secs_f64(),
    }
}

/// One look at a job's state; `errors` counts the failed looks in a row. `Err` when the head
/// stays unreachable: stop waiting, say which job is left.
async fn poll_status(
    client: &RayClient,
    id: &str,
    errors: &mut u32,
) -> Result<Option<JobInfo>, String> {
    match client.status(id).await {
        Ok(i) => {
            *errors = 0;
            Ok(Some(i))
        }
        Err(e) => {
            *errors += 1;
            if *errors >= 30 {
                return Err(format!("lost contact with the Ray jobs API ({e})"));
            }
            Ok(None)
        }
    }
}

/// Stop a job the harness gave up on (last seen as `info`) and wait (bounded) for Ray to say it
/// ended: its state then, and a note on the stop when it did not end (also printed).
async fn stop_job(
    client: &RayClient,
    id: &str,
    mut info: Option<JobInfo>,
) -> (Option<JobInfo>, Option<String>) {
    let pending = info.as_ref().is_some_and(|i| i.status == "PENDING");
    let stopped = client.stop(id).await;
    // A running job ends within Ray's stop grace (SIGTERM, then SIGKILL after
    // RAY_JOB_STOP_WAIT_TIME_S, 3 s by default).
    let wait = if pending { 3 } else { 20 };
    let deadline = Instant::now() + Duration::from_secs(wait);
    while Instant::now() < deadline {
        if let Ok(i) = client.status(id).await {
            let done = i.is_terminal();
            info = Some(i);
            if done {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    if info.as_ref().is_some_and(JobInfo::is_terminal) {
        return (info, None);
    }
    let note = match (&stopped, pending) {
        // Ray queues the stop on the job's supervisor, which is not placed yet: the
        // job stays PENDING until the cluster could place it and then stops at once
        // (Ray fails a job still pending after RAY_JOB_START_TIMEOUT_SECONDS).
        (Ok(_), true) => format!(
            "Ray took the stop request; the job shows PENDING until the cluster could \
             place it, then stops at once ({})",
            client.stop_command(id)
        ),
        (Ok(_), false) => format!(
            "Ray job {id} did not stop within {wait} s; it may still be running: {}",
            client.stop_command(id)
        ),
        (Err(e), _) => format!(
            "the stop request for Ray job {id} failed ({e}); it may still be running: {}",
            client.stop_command(id)
        ),
    };
    eprintln!("warning: {note}");
    (info, Some(note))
}

/// Put the run directories a frame carried under OUT/<scenario>/ (a name already there gets a
/// suffix) and point OUT/<scenario>/latest at the newest; returns them.
fn collect(frame: &bundle::Frame, out: &Path) -> Result<Vec<PathBuf>, String> {
    let tmp = tempfile::Builder::new()
        .prefix(".ray-collect-")
        .tempdir_in(out)
        .map_err(|e| format!("cannot make a folder in {}: {e}", out.display()))?;
    bundle::unzip(&frame.archive, tmp.path()).map_err(|e| e.to_string())?;
    let mut moved = Vec::new();
    let Ok(scenarios) = std::fs::read_dir(tmp.path()) else {
        return Ok(moved);
    };
    for s in scenarios.filter_map(Result::ok) {
        if !s.path().is_dir() {
            continue; // the job's own index files
        }
        let base = out.join(s.file_name());
        crate::fsx::create_dir_all(&base).map_err(|e| e.to_string())?;
        let mut runs: Vec<_> = std::fs::read_dir(s.path())
            .map_err(|e| e.to_string())?
            .filter_map(Result::ok)
            // A hidden `.tmp-*` folder is a run folder a killed harness never finished making.
            .filter(|r| r.path().is_dir() && !r.file_name().to_string_lossy().starts_with('.'))
            .collect();
        runs.sort_by_key(|r| r.file_name());
        for r in runs {
            let name = r.file_name().to_string_lossy().into_owned();
            let mut dest = base.join(&name);
            let mut k = 1;
            while dest.exists() {
                k += 1;
                dest = base.join(format!("{name}-{k}"));
            }
            std::fs::rename(r.path(), &dest)
                .map_err(|e| format!("cannot move the run into {}: {e}", dest.display()))?;
            let latest = base.join("latest");
            let _ = std::fs::remove_file(&latest);
            #[cfg(unix)]
            if let Some(n) = dest.file_name() {
                let _ = std::os::unix::fs::symlink(n, &latest);
            }
            moved.push(dest);
        }
    }
    Ok(moved)
}

/// A job's log as kept in the run directory: its frame's lines left out (the frame is the
/// run directory itself).
fn log_without_frame(log: &str) -> String {
    log.lines()
        .filter(|l| !l.starts_with("@@"))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// Keep a job's log beside the scenario's runs when nothing else came back.
fn keep_log(out: &Path, p: &Planned, w: &Watched) -> Option<PathBuf> {
    let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%S");
    let dir = out.join(&p.name).join(format!("{stamp}-ray-{}", w.id));
    crate::fsx::create_dir_all(&dir).ok()?;
    crate::fsx::write_atomic(&dir.join("job.log"), log_without_frame(&w.log).as_bytes()).ok()?;
    Some(dir)
}

/// The entry of a job that ended, from what it brought back (or why nothing came).
fn entry_of(p: &Planned, w: &Watched, out: &Path) -> Entry {
    let mut placement = format!("ray job {}", w.id);
    if let Some(s) = w.first_step_s {
        placement.push_str(&format!(" (first step {s:.1} s after submission)"));
    }
    let fail = |summary: String, dir: Option<PathBuf>| Entry {
        file: p.file.display().to_string(),
        scenario: p.name.clone(),
        status: ExitStatus::RunFailed,
        summary,
        run_dir: dir,
        placement: placement.clone(),
        seconds: w.seconds,
        seeds: Vec::new(),
        skipped: false,
        failing: Vec::new(),
        expected_failure: false,
    };
    let state = w
        .info
        .as_ref()
        .map(|i| {
            format!(
                "{}{}",
                i.status,
                i.message
                    .as_deref()
                    .filter(|m| !m.is_empty())
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default()
            )
        })
        .unwrap_or_else(|| "state unknown".into());
    let frame = bundle::decode_frame(&w.log);
    let frame = match frame {
        Ok(f) => f,
        Err(why) => {
            let dir = keep_log(out, p, w);
            let step = last_step(&w.log)
                .map(|s| format!(" at step {}/{}", s.step, s.total))
                .unwrap_or_default();
            let summary = match &w.gave_up {
                Some(g) => {
                    let mut s = format!("ray job {}{step}: {g}", w.id);
                    match &w.stop_note {
                        Some(n) => s.push_str(&format!("; {n}")),
                        None => s.push_str(&format!("; the job ended {state}")),
                    }
                    s
                }
                None => format!(
                    "ray job {} ended {state}{step}, and its run directory did not come back \
                     ({why}); last log lines:\n{}",
                    w.id,
                    tail(&w.log, 8)
                ),
            };
            return fail(summary, dir);
        }
    };
    let runs = match collect(&frame, out) {
        Ok(r) => r,
        Err(why) => return fail(format!("ray job {}: {why}", w.id), keep_log(out, p, w)),
    };
    let Some(dir) = runs.last().cloned() else {
        // It ran but made no run directory: it could not start the scenario.
        let status = ExitStatus::from_code(frame.exit_code).unwrap_or(ExitStatus::RunFailed);
        let summary = last_error(&w.log).unwrap_or_else(|| format!("exit {}", frame.exit_code));
        return Entry {
            status,
            ..fail(summary, keep_log(out, p, w))
        };
    };
    let _ = crate::fsx::write_atomic(&dir.join("job.log"), log_without_frame(&w.log).as_bytes());
    match read_verdict(&dir) {
        Ok((scenario, status, summary)) => {
            let mut status = status;
            let mut summary = summary;
            if let Some(g) = &w.gave_up {
                status = status.worst(ExitStatus::RunFailed);
                summary = format!("{summary}; {g}");
            } else if w.info.as_ref().is_some_and(|i| i.status == "STOPPED") {
                status = status.worst(ExitStatus::RunFailed);
                summary = format!("{summary}; ray job {} was stopped ({state})", w.id);
            }
            let expected_failure =
                status == ExitStatus::Passed && summary.starts_with("expected failure");
            Entry {
                file: p.file.display().to_string(),
                scenario,
                status,
                summary,
                seeds: read_seeds(&dir),
                run_dir: Some(dir),
                placement,
                seconds: w.seconds,
                skipped: false,
                failing: Vec::new(),
                expected_failure,
            }
        }
        Err(why) => fail(format!("ray job {}: {why}", w.id), Some(dir)),
    }
}

/// Submit every scenario as a Ray job, watch them, collect their run directories under OUT/
/// and return one entry per file in the order given.
pub(crate) async fn run_matrix(
    files: &[PathBuf],
    args: &RunArgs,
) -> Result<Vec<Entry>, CommandError> {
    let address = args
        .address
        .as_deref()
        .ok_or_else(|| CommandError::invalid("--executor ray needs --address http://HEAD:8265"))?;
    let token = RayToken::from_environment(args.ray_token_file.as_deref())
        .map_err(|e| CommandError::invalid(e.to_string()))?;
    if let Some(t) = &token {
        tracing::info!("ray: sending the token from {} to {address}", t.origin());
    }
    let client = RayClient::new(address)?.with_token(token);
    let env_vars = job_env_vars(args)?;
    let (planned, invalid, package_files) = plan(files, args)?;
    crate::fsx::create_dir_all(&args.common.out)
        .map_err(|e| CommandError::run_failed(e.to_string()))?;
    let mut entries: Vec<Option<Entry>> = vec![None; files.len()];
    for (i, e) in invalid {
        super::local::print_entry(&e, None);
        entries[i] = Some(e);
    }
    let uri = if planned.is_empty() {
        None
    } else {
        Some(upload_package(&client, package_files).await?)
    };
    let tty = std::io::stderr().is_terminal() && !args.common.no_progress;
    let group = tty.then(indicatif::MultiProgress::new);
    let (cancel_tx, cancel_rx) = tokio::sync::watch::channel(false);
    let cancel_tx = Arc::new(cancel_tx);
    let ctrl_c = cancel_on_ctrl_c(cancel_tx.clone());
    let mut tasks = Vec::new();
    let files_index: BTreeMap<&Path, usize> = files
        .iter()
        .enumerate()
        .map(|(i, f)| (f.as_path(), i))
        .collect();
    for p in planned {
        let index = files_index.get(p.file.as_path()).copied().unwrap_or(0);
        if *cancel_rx.borrow() {
            let e = super::local::error_entry(
                &p.file,
                &CommandError::run_failed("interrupted (Ctrl-C) before it was submitted"),
                "not submitted",
                0.0,
            );
            entries[index] = Some(e);
            continue;
        }
        let body = job_body(&p, args, uri.as_deref(), &env_vars);
        let id = match client.submit(&body).await {
            Ok(id) => id,
            Err(e) => {
                let e = super::local::error_entry(
                    &p.file,
                    &CommandError::new(e.exit_status(), format!("the job was not submitted: {e}")),
                    "not submitted",
                    0.0,
                );
                super::local::print_entry(&e, group.as_ref());
                entries[index] = Some(e);
                continue;
            }
        };
        let label = format!("{} [{id}]", p.name);
        let shown = Shown::new(group.as_ref(), label);
        if group.is_none() {
            eprintln!("{}: submitted as Ray job {id}", p.name);
        }
        let (client, rx, out, group) = (
            client.clone(),
            cancel_rx.clone(),
            args.common.out.clone(),
            group.clone(),
        );
        tasks.push((
            index,
            tokio::spawn(async move {
                let w = watch(&client, id, p.queue, shown, rx).await;
                let e = tokio::task::spawn_blocking(move || entry_of(&p, &w, &out))
                    .await
                    .map_err(|e| CommandError::run_failed(format!("collecting crashed: {e}")));
                if let Ok(e) = &e {
                    super::local::print_entry(e, group.as_ref());
                }
                e
            }),
        ));
    }
    let entries = gather(files, entries, tasks).await;
    ctrl_c.abort();
    Ok(entries)
}

/// Wait for every watcher and fill in its file's entry; a file left with none has "no result".
async fn gather(
    files: &[PathBuf],
    mut entries: Vec<Option<Entry>>,
    tasks: Vec<(usize, tokio::task::JoinHandle<Result<Entry, CommandError>>)>,
) -> Vec<Entry> {
    for (index, t) in tasks {
        let e = match t.await {
            Ok(Ok(e)) => e,
            Ok(Err(e)) => super::local::error_entry(&files[index], &e, "ray", 0.0),
            Err(e) => super::local::error_entry(
                &files[index],
                &CommandError::run_failed(format!("watching the job crashed: {e}")),
                "ray",
                0.0,
            ),
        };
        entries[index] = Some(e);
    }
    entries
        .into_iter()
        .zip(files)
        .map(|(e, f)| {
            e.unwrap_or_else(|| {
                super::local::error_entry(f, &CommandError::run_failed("no result"), "ray", 0.0)
            })
        })
        .collect()
}

/// The jobs' environment: `--ray-env KEY=VALUE`, and the submitter's `CI`.
fn job_env_vars(args: &RunArgs) -> Result<serde_json::Map<String, Value>, CommandError> {
    let mut env_vars = serde_json::Map::new();
    for kv in &args.ray_env {
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
async fn upload_package(client: &RayClient, package_files: Files) -> Result<String, CommandError> {
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

/// On Ctrl-C, tell every watcher (through `cancel_tx`) to stop its job.
fn cancel_on_ctrl_c(
    cancel_tx: Arc<tokio::sync::watch::Sender<bool>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!("interrupted: stopping this invocation's Ray jobs");
            let _ = cancel_tx.send(true);
        }
    })
}

/// The Jobs API's submission of one planned scenario: its entrypoint, the package as its
/// working directory, its environment, metadata and resources.
fn job_body(
    p: &Planned,
    args: &RunArgs,
    uri: Option<&str>,
    env_vars: &serde_json::Map<String, Value>,
) -> Value {
    let mut body = json!({
        "entrypoint": entrypoint(args, &p.in_package),
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

/// `rlharness job-entry`: the entrypoint of a Ray job. `run` for its scenario, then OUT (its run
/// directory) printed on stdout as one frame. Ray stops a job with SIGTERM; that becomes the
/// run's own interrupt, so its finished steps are written and come back.
pub(crate) async fn job_entry(args: RunArgs) -> Result<ExitStatus, CommandError> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        // Installed before the run starts, so a raised SIGINT reaches the run's Ctrl-C watch
        // instead of ending the process.
        let interrupt = signal(SignalKind::interrupt());
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::spawn(async move {
                let _keep = interrupt;
                if term.recv().await.is_some() {
                    eprintln!("job-entry: SIGTERM: interrupting the run");
                    // SAFETY: raising a signal at this process; no memory is touched.
                    unsafe {
                        libc::raise(libc::SIGINT);
                    }
                }
            });
        }
    }
    // Jobs of one invocation share the unpacked package (Ray caches a working_dir by its
    // URI): each run goes to a folder of its own, removed once it is printed.
    let scratch = tempfile::Builder::new()
        .prefix("rlharness-job-")
        .tempdir()
        .map_err(|e| CommandError::run_failed(format!("cannot make the run's folder: {e}")))?;
    let out = scratch.path().join(&args.common.out);
    let mut local = args;
    local.common.out = out.clone();
    local.executor = crate::cli::Executor::Local;
    let status = match crate::app::run(local).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            e.status
        }
    };
    crate::fsx::create_dir_all(&out).map_err(|e| CommandError::run_failed(e.to_string()))?;
    let files = bundle::files_under(&out, "")
        .map_err(|e| CommandError::run_failed(format!("packing the run directory: {e}")))?;
    let zip = bundle::zip_files(&files)
        .map_err(|e| CommandError::run_failed(format!("packing the run directory: {e}")))?;
    let frame = bundle::encode_frame(&zip, status.code());
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(frame.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(|e| CommandError::run_failed(format!("printing the run directory: {e}")))?;
    Ok(status)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn run_args(extra: &[&str]) -> RunArgs {
        let mut argv = vec!["rlharness", "run", "scenarios/smoke/x.yaml"];
        argv.extend(extra);
        match crate::cli::Cli::parse_from(argv).command {
            crate::cli::Command::Run(a) => a,
            _ => unreachable!(),
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
        let e = entrypoint(&args, "scenarios/smoke/x.yaml");
        assert!(e.starts_with("chmod +x rlharness"), "{e}");
        assert!(
            e.ends_with(
                "exec ./rlharness job-entry scenarios/smoke/x.yaml --out out --golden golden \
                 --steps 3 --set 'config.a=it'\\''s'"
            ),
            "{e}"
        );
        let remote = run_args(&["--remote-bin", "/opt/rl harness"]);
        assert_eq!(
            entrypoint(&remote, "s.yaml"),
            "exec '/opt/rl harness' job-entry s.yaml --out out --golden golden"
        );
    }

    #[test]
    fn resources_come_from_requires() {
        let p = Planned {
            file: "x.yaml".into(),
            in_package: "x.yaml".into(),
            name: "x".into(),
            gpus: 2,
            gpu_name: Some("h200".into()),
            queue: Duration::from_secs(1),
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
        let (addr, served) =
            answer_once("403 Forbidden", "Forbidden: s3cret-0123456789abcdef").await;
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
        assert_eq!(e.exit_status(), ExitStatus::InvalidInput);
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
        assert_eq!(e.exit_status(), ExitStatus::InvalidInput);
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
}
