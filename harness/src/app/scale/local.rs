//! `rlharness run A B C --jobs N`: independent scenarios side by side on this host.
//!
//! Placement, no scheduler beyond it: a scenario that needs no GPU takes one of `N` CPU slots;
//! one that `requires: {gpus: G}` takes G of the visible GPUs (not a CPU slot) and its child
//! processes (the torch backend, an external trainer) get `CUDA_VISIBLE_DEVICES` naming them,
//! set on those children alone ([`super::Slot`]). Every port the harness binds itself is port 0
//! (a free one); a command driver whose recording proxy listens on a fixed address holds that
//! address for its whole run, so two such scenarios run one after the other. Each scenario
//! keeps its own watchdog and Ctrl-C handling; after a Ctrl-C no waiting scenario starts.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::index::{read_seeds, Entry};
use super::{Slot, SLOT};
use crate::app::errors::Failure;
use crate::model::error::{CommandError, ExitStatus};
use crate::run::runner::RunOptions;

/// How a local matrix runs.
#[derive(Debug, Clone)]
pub(crate) struct LocalMatrix {
    /// CPU scenarios side by side.
    pub(crate) jobs: usize,
    /// `--seeds A..B`: every scenario once per seed (then `seed_jobs` seeds side by side and the
    /// scenarios one after the other).
    pub(crate) seeds: Option<Vec<u64>>,
    pub(crate) seed_jobs: usize,
}

/// What one scenario needs before it may start.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Needs {
    pub(crate) gpus: u32,
    /// A fixed address the run binds (a command driver's proxy), not port 0.
    pub(crate) fixed_addr: Option<String>,
}

/// Read a scenario's needs; a scenario that does not load needs nothing (running it reports
/// the error).
pub(crate) fn needs(file: &Path, set: &[String]) -> Needs {
    let Ok(s) = crate::scenario::load_scenario(file, set) else {
        return Needs::default();
    };
    let fixed_addr = crate::run::netns::fixed_address(&s);
    Needs {
        gpus: s.requires.gpus,
        fixed_addr,
    }
}

/// The GPUs this host lets the harness use: `CUDA_VISIBLE_DEVICES` when set (its entries as
/// written, indices or UUIDs), else every GPU `nvidia-smi` lists, by index.
pub(crate) fn visible_gpus() -> Vec<String> {
    if let Some(v) = std::env::var_os("CUDA_VISIBLE_DEVICES") {
        return v
            .to_string_lossy()
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
    }
    crate::scenario::detect_gpus()
        .map(|names| (0..names.len()).map(|i| i.to_string()).collect())
        .unwrap_or_default()
}

/// The free GPUs, handed out whole.
struct GpuPool {
    total: usize,
    free: Mutex<Vec<String>>,
    permits: tokio::sync::Semaphore,
}

impl GpuPool {
    fn new(ids: Vec<String>) -> Self {
        let n = ids.len();
        GpuPool {
            total: n,
            free: Mutex::new(ids.into_iter().rev().collect()),
            permits: tokio::sync::Semaphore::new(n),
        }
    }
    async fn take(&self, n: u32) -> Option<Vec<String>> {
        let permit = self.permits.acquire_many(n).await.ok()?;
        permit.forget();
        let mut free = crate::model::util::lock(&self.free);
        let at = free.len().saturating_sub(n as usize);
        Some(free.split_off(at))
    }
    fn give_back(&self, ids: Vec<String>) {
        let n = ids.len();
        crate::model::util::lock(&self.free).extend(ids);
        self.permits.add_permits(n);
    }
}

/// An entry for a scenario that ended before it was judged.
pub(crate) fn error_entry(file: &Path, e: &CommandError, placement: &str, seconds: f64) -> Entry {
    Entry {
        file: file.display().to_string(),
        scenario: file
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default(),
        status: e.status,
        summary: e.message.clone(),
        run_dir: None,
        placement: placement.into(),
        seconds,
        seeds: Vec::new(),
        skipped: false,
        failing: Vec::new(),
        expected_failure: false,
    }
}

/// The entry of a judged (or skipped) scenario.
pub(crate) fn report_entry(
    file: &Path,
    r: &crate::report::Report,
    placement: &str,
    seconds: f64,
) -> Entry {
    let run_dir = (!r.run.dir.is_empty()).then(|| PathBuf::from(&r.run.dir));
    Entry {
        file: file.display().to_string(),
        scenario: r.scenario.clone(),
        status: r.exit_status(),
        summary: r.summary(),
        seeds: run_dir.as_deref().map(read_seeds).unwrap_or_default(),
        run_dir,
        placement: placement.into(),
        seconds,
        skipped: r.skipped.is_some(),
        failing: crate::report::terminal::failing_rules_named(r),
        expected_failure: r.headline() == crate::judge::Headline::ExpectedFailure,
    }
}

/// Print a finished scenario's lines (kept the same as one after the other).
pub(crate) fn print_entry(e: &Entry, progress: Option<&indicatif::MultiProgress>) {
    annotate_entry(e);
    let print = || {
        if e.run_dir.is_none() && !e.skipped && e.status != ExitStatus::Passed {
            // A spec error already starts with the file (and line): it is not said twice.
            if e.summary.starts_with(&e.file) {
                errln!("error: {}", e.summary);
            } else {
                errln!("error: {}: {}", e.file, e.summary);
            }
        } else {
            // `-q`: a passing scenario's lines are left out; what failed is always printed.
            if crate::model::util::quiet() && e.status == ExitStatus::Passed {
                return;
            }
            let line = crate::model::util::result_line;
            line(&format!("{}: {}", e.scenario, e.summary));
            let failing = crate::report::terminal::print_failing(
                &e.failing.iter().map(|(_, l)| l.clone()).collect::<Vec<_>>(),
                e.expected_failure,
                crate::report::terminal::stdout_color(),
            );
            for l in failing.lines() {
                line(l);
            }
            match &e.run_dir {
                Some(d) if !d.join("report.md").exists() && d.join("job.log").exists() => {
                    line(&format!("  job log: {}/job.log", d.display()));
                }
                Some(d) => line(&format!("  report: {}/report.md", d.display())),
                None => {}
            }
        }
    };
    match progress {
        Some(p) => p.suspend(print),
        None => print(),
    }
}

/// Under GitHub Actions, a scenario that did not pass as `::error` annotations: one per failing
/// rule, at the line of the scenario file that declares it where there is one; an error
/// without a run (invalid input) at the file and line it names.
fn annotate_entry(e: &Entry) {
    if e.status == ExitStatus::Passed {
        return;
    }
    if e.run_dir.is_none() && !e.skipped {
        crate::model::util::annotate_message(&format!("rlharness: {}", e.scenario), &e.summary);
        return;
    }
    let file = Path::new(&e.file);
    if e.failing.is_empty() {
        let title = format!("rlharness: {}", e.scenario);
        crate::model::util::annotate_error(Some(file), None, &title, &e.summary);
    }
    for (rule, line) in &e.failing {
        let title = format!("rlharness: {}: {rule}", e.scenario);
        let at = crate::scenario::located::rule_line(file, rule);
        crate::model::util::annotate_error(Some(file), at, &title, line);
    }
}

/// Run every scenario file, side by side as placed, and return one entry per file in the
/// order given.
pub(crate) async fn run_matrix(
    files: &[PathBuf],
    opts: &RunOptions,
    m: &LocalMatrix,
) -> Vec<Entry> {
    let jobs = if m.seeds.is_some() { 1 } else { m.jobs.max(1) };
    let needs: Vec<Needs> = files.iter().map(|f| needs(f, &opts.set)).collect();
    let gpus = if jobs > 1 && needs.iter().any(|n| n.gpus > 0) {
        visible_gpus()
    } else {
        Vec::new()
    };
    // Scenarios on a fixed address: side by side, each trainer in a network namespace of its
    // own, where the host gives one; else one after the other (a lock per address).
    let mut opts = opts.clone();
    let fixed: Vec<&str> = needs
        .iter()
        .filter_map(|n| n.fixed_addr.as_deref())
        .collect();
    if jobs > 1 && fixed.len() > 1 {
        opts.netns = crate::run::netns::side_by_side(Some(fixed[0]), jobs, "run").1;
    }
    let addr_locks: HashMap<String, Arc<tokio::sync::Mutex<()>>> = needs
        .iter()
        .filter(|_| opts.netns.is_none())
        .filter_map(|n| n.fixed_addr.clone())
        .map(|a| (a, Arc::new(tokio::sync::Mutex::new(()))))
        .collect();
    let interrupted = Arc::new(AtomicBool::new(false));
    let watcher = {
        let interrupted = interrupted.clone();
        tokio::spawn(async move {
            crate::model::util::stop_signal().await;
            interrupted.store(true, Ordering::SeqCst);
        })
    };
    let task = ScenarioTask {
        opts: opts.clone(),
        m: m.clone(),
        jobs,
        cpu: Arc::new(tokio::sync::Semaphore::new(jobs)),
        gpu_pool: Arc::new(GpuPool::new(gpus)),
        interrupted,
        // Bars side by side on a terminal; plain lines (each prefixed with its scenario)
        // otherwise.
        group: (jobs > 1 && opts.progress).then(indicatif::MultiProgress::new),
    };
    let mut tasks = Vec::new();
    for (file, need) in files.iter().cloned().zip(needs) {
        let addr_lock = need
            .fixed_addr
            .as_ref()
            .and_then(|a| addr_locks.get(a))
            .cloned();
        tasks.push(tokio::spawn(task.clone().run(file, need, addr_lock)));
    }
    let mut entries = Vec::with_capacity(tasks.len());
    for (file, t) in files.iter().zip(tasks) {
        entries.push(match t.await {
            Ok(e) => e,
            Err(e) => error_entry(file, &Failure::TaskCrashed(e).into(), "local", 0.0),
        });
    }
    watcher.abort();
    entries
}

/// What every scenario's task of one matrix shares: the options, the CPU slots and GPUs it
/// takes its place from, the Ctrl-C flag and the progress bars.
#[derive(Clone)]
struct ScenarioTask {
    opts: RunOptions,
    m: LocalMatrix,
    /// How many scenarios run side by side.
    jobs: usize,
    cpu: Arc<tokio::sync::Semaphore>,
    gpu_pool: Arc<GpuPool>,
    interrupted: Arc<AtomicBool>,
    group: Option<indicatif::MultiProgress>,
}

impl ScenarioTask {
    /// Run one scenario once its place is free (its GPUs or a CPU slot, and its fixed address
    /// through `addr_lock`), print its entry and return it.
    async fn run(
        self,
        file: PathBuf,
        need: Needs,
        addr_lock: Option<Arc<tokio::sync::Mutex<()>>>,
    ) -> Entry {
        // A GPU scenario takes its GPUs (all of them if it asks for more than there are;
        // its requirements check then says so); any other scenario takes a CPU slot.
        let pinned = if need.gpus > 0 && self.gpu_pool.total > 0 {
            let n = need
                .gpus
                .min(u32::try_from(self.gpu_pool.total).unwrap_or(u32::MAX));
            self.gpu_pool.take(n).await
        } else {
            None
        };
        let _cpu = match pinned {
            Some(_) => None,
            None => self.cpu.clone().acquire_owned().await.ok(),
        };
        let _addr = match &addr_lock {
            Some(l) => Some(l.lock().await),
            None => None,
        };
        let started = Instant::now();
        let (slot, placement) = self.slot(&file, pinned.as_deref());
        let entry = if self.interrupted.load(Ordering::SeqCst) {
            let e = CommandError::run_failed("interrupted (Ctrl-C) before it started");
            error_entry(&file, &e, &placement, 0.0)
        } else {
            let result = SLOT
                .scope(slot, async {
                    match &self.m.seeds {
                        Some(list) => {
                            crate::app::pipeline::run_seeds(
                                &file,
                                list,
                                self.m.seed_jobs,
                                &self.opts,
                            )
                            .await
                        }
                        None => crate::app::pipeline::run_one(&file, &self.opts).await,
                    }
                })
                .await;
            let secs = started.elapsed().as_secs_f64();
            match result {
                Ok(r) => report_entry(&file, &r, &placement, secs),
                Err(e) => error_entry(&file, &e, &placement, secs),
            }
        };
        if let Some(ids) = pinned {
            self.gpu_pool.give_back(ids);
        }
        print_entry(&entry, self.group.as_ref());
        entry
    }

    /// The scenario's slot (its progress bar or line label, its GPUs through
    /// `CUDA_VISIBLE_DEVICES`) and its placement as the entry words it.
    fn slot(&self, file: &Path, pinned: Option<&[String]>) -> (Slot, String) {
        let mut slot = Slot {
            progress: self.group.clone(),
            label: (self.jobs > 1).then(|| {
                file.file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default()
            }),
            ..Slot::default()
        };
        let placement = match pinned {
            Some(ids) => {
                let v = ids.join(",");
                slot.env.push(("CUDA_VISIBLE_DEVICES".into(), v.clone()));
                format!("local (CUDA_VISIBLE_DEVICES={v})")
            }
            None => "local".into(),
        };
        (slot, placement)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_gpu_pool_hands_out_distinct_gpus_and_takes_them_back() {
        let pool = GpuPool::new(vec!["0".into(), "1".into(), "2".into()]);
        let a = pool.take(1).await.unwrap();
        let b = pool.take(2).await.unwrap();
        let mut all: Vec<String> = a.iter().chain(b.iter()).cloned().collect();
        all.sort();
        assert_eq!(all, ["0", "1", "2"]);
        // None left: a third taker waits until one comes back.
        let waiting = tokio::time::timeout(std::time::Duration::from_millis(50), pool.take(1));
        assert!(waiting.await.is_err());
        pool.give_back(a.clone());
        assert_eq!(pool.take(1).await.unwrap(), a);
    }

    #[test]
    fn only_a_fixed_proxy_address_is_held() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        // The builtin driver binds port 0 only.
        let smoke = needs(&root.join("scenarios/smoke/mock-gsm8k-grpo.yaml"), &[]);
        assert_eq!(smoke, Needs::default());
        // A command driver whose proxy listens on `127.0.0.1:0` holds nothing...
        let free = root.join("scenarios/propagate/verl-arctic-standin.yaml");
        assert_eq!(needs(&free, &[]).fixed_addr, None);
        // ...one on a fixed address holds it.
        let fixed = needs(&free, &["driver.proxy_listen=127.0.0.1:7123".to_string()]);
        assert_eq!(fixed.fixed_addr.as_deref(), Some("127.0.0.1:7123"));
        // A GPU scenario asks for its GPUs.
        let gpu = needs(
            &root.join("scenarios/gpu/qwen3-0.6b-gsm8k-grpo-zorro.yaml"),
            &[],
        );
        assert!(gpu.gpus > 0, "{gpu:?}");
    }
}
