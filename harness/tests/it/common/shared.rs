//! Runs that several tests read, made once per test binary. The first test to ask for a run
//! makes it; a test asking for the same run meanwhile waits for that one instead of training it
//! again. A test reads a shared run and never writes into it, but for the one test that
//! re-judges it (`compare RUN` writes `RUN/compare/` only, which no other test reads).
//!
//! A run is known by its key: what the run is, the library's `plan_hash` of its resolved
//! scenario (`rlharness::run::plan::RunPlan`, the hash `run.json` records); how it is run, the
//! run options but where it goes; and what runs it, the path, size and modification time of
//! the test binary (the library runs in it), of `rlharness` and of the `rlharness-torch` the
//! runs start. A changed scenario, option or rebuilt binary is another key, so another run:
//! no test is given a run that the code and inputs it tests would not make now. The runs live
//! under `target/tmp/shared-runs/<pid>/` for the life of the process (removed when it exits, or
//! by the next binary once that process is gone); a second invocation makes them again, as
//! the golden store and the files a scenario reads are not in the key.
//!
//! A self-test's reference (the scenario as written, which `run_one` makes before the planted
//! run) is shared among the self-tests of one scenario, which differ only in their plant and in
//! what names and judges them (`selftests.rs` checks it): `shared_reference` makes it from the
//! scenario with its name, description, tags and expected verdict set alike (`NEUTRAL`), and
//! the self-test is handed it (`RunOptions::reference_run`). Its rules stay the scenario's own:
//! they are what the watchdog stops a run on. The key is that neutral plan's hash, so two
//! self-tests share a reference exactly when everything their runs use is equal.

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use rlharness::app::run_one;
use rlharness::report::Report;
use rlharness::run::plan::RunPlan;
use rlharness::run::runner::{RunEnd, RunOptions};
use rlharness::scenario::load_scenario;
use sha2::{Digest, Sha256};
use tokio::sync::OnceCell;

/// A run made once: its directory (read it, do not write into it) and, for a judged run,
/// what `run_one` returned.
#[derive(Debug)]
pub struct SharedRun {
    pub dir: PathBuf,
    report: Option<Report>,
}

impl SharedRun {
    /// The judged run's report (a reference has none: nothing judges it).
    pub fn report(&self) -> Report {
        self.report.clone().expect("a judged run")
    }
}

/// `scenario` run and judged as `run_one(scenario, opts)` would, once per test binary (its
/// `out` and `run_dir` are the cache's).
pub async fn shared_run(scenario: &Path, opts: &RunOptions) -> Arc<SharedRun> {
    let plan = plan_of(scenario, &opts.set, opts);
    let what = format!("{} ({})", scenario.display(), opts.set.join(" "));
    made(&key("run", &plan, opts), &what, |dir| async move {
        let mut o = opts.clone();
        o.run_dir = Some(dir.join("run"));
        o.out = dir;
        let report = run_one(scenario, &o).await.map_err(|e| e.to_string())?;
        Ok(SharedRun {
            dir: o.run_dir.unwrap(),
            report: Some(report),
        })
    })
    .await
}

/// What a self-test's reference is made with besides the caller's overrides: the values that
/// only name and describe a run, or say what verdict a self-test expects, alike for all.
#[cfg_attr(not(feature = "torch"), allow(dead_code))] // the torch self-tests' (`flagship`)
const NEUTRAL: [&str; 4] = [
    "name=selftest-reference",
    "description=The reference run of the self-tests of one scenario, made once per test binary",
    "tags=[]",
    "expected_verdict={outcome: passed}",
];

/// The reference of the single-run self-test `scenario` (its scenario as written, on this
/// host; unjudged), once per test binary for every self-test whose runs use the same values:
/// what `RunOptions::reference_run` takes.
#[cfg_attr(not(feature = "torch"), allow(dead_code))] // the torch self-tests' (`flagship`)
pub async fn shared_reference(scenario: &Path, opts: &RunOptions) -> Arc<SharedRun> {
    let mut set = opts.set.clone();
    set.extend(NEUTRAL.iter().map(|s| s.to_string()));
    let plan = plan_of(scenario, &set, opts);
    let key = key("reference", &plan, opts);
    let what = format!("the reference of {}", scenario.display());
    made(&key, &what, |dir| async move {
        let mut o = opts.clone();
        o.run_dir = Some(dir.join("reference"));
        o.out = dir;
        // The judge's fail-fast rules, as `run_one` hands them to the runner.
        o.live_judge = Some(rlharness::judge::FailFast::handed());
        let executed = rlharness::run::runner::execute(plan, &o)
            .await
            .map_err(|e| e.to_string())?;
        if executed.end != RunEnd::Completed {
            return Err(format!("it did not complete: {:?}", executed.end));
        }
        Ok(SharedRun {
            dir: o.run_dir.unwrap(),
            report: None,
        })
    })
    .await
}

fn plan_of(scenario: &Path, set: &[String], opts: &RunOptions) -> RunPlan {
    let s = load_scenario(scenario, set).unwrap_or_else(|e| panic!("{}: {e}", scenario.display()));
    RunPlan::new(s, opts.seed, opts.steps).unwrap_or_else(|e| panic!("{e}"))
}

/// The key of a run of `plan` with `opts`: the plan's hash, the options but where the run goes,
/// the binaries that make it (a `kind` apart: a judged run is not a reference).
fn key(kind: &str, plan: &RunPlan, opts: &RunOptions) -> String {
    let mut o = opts.clone();
    o.out = PathBuf::new();
    o.run_dir = None;
    let text = format!("{kind}\n{}\n{o:?}\n{}", plan.plan_hash, binaries());
    let hash = Sha256::digest(text.as_bytes());
    let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
    format!("{kind}-{}", &hex[..16])
}

/// The executables a run is made by, each by path, size and modification time: this test
/// binary, `rlharness`, and `rlharness-torch` where the torch backend finds it
/// (`RLHARNESS_TORCH_BIN`, else beside the test binary, else in `target/<profile>/`).
fn binaries() -> String {
    let exe = std::env::current_exe().unwrap();
    let torch = match std::env::var_os("RLHARNESS_TORCH_BIN").filter(|p| !p.is_empty()) {
        Some(p) => PathBuf::from(p),
        None => {
            let beside = exe.with_file_name("rlharness-torch");
            match (beside.is_file(), exe.parent().and_then(Path::parent)) {
                (false, Some(profile)) => profile.join("rlharness-torch"),
                _ => beside,
            }
        }
    };
    [exe, PathBuf::from(env!("CARGO_BIN_EXE_rlharness")), torch]
        .iter()
        .map(|p| match std::fs::metadata(p) {
            Ok(m) => format!("{} {} {:?}", p.display(), m.len(), m.modified().ok()),
            Err(_) => format!("{} absent", p.display()),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

type Made = Result<Arc<SharedRun>, String>;

/// The run of `key`: made by `make` into a fresh folder of the cache by the first test to
/// ask, waited for by the others. A run that could not be made fails every test that asks.
async fn made<F, Fut>(key: &str, what: &str, make: F) -> Arc<SharedRun>
where
    F: FnOnce(PathBuf) -> Fut,
    Fut: Future<Output = Result<SharedRun, String>>,
{
    static CELLS: OnceLock<Mutex<HashMap<String, Arc<OnceCell<Made>>>>> = OnceLock::new();
    let cell = CELLS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(key.to_string())
        .or_default()
        .clone();
    let made = cell
        .get_or_init(|| async {
            // A folder left by a maker that panicked is made again from nothing.
            let dir = root().join(key);
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            let started = Instant::now();
            let made = make(dir).await.map(Arc::new);
            eprintln!(
                "shared run {key}: {what} made in {:.1} s",
                started.elapsed().as_secs_f64()
            );
            made
        })
        .await;
    match made {
        Ok(run) => run.clone(),
        Err(e) => panic!("the shared run {what} could not be made: {e}"),
    }
}

/// This process's folder of shared runs, `target/tmp/shared-runs/<pid>/`: made on first use,
/// removed when the process exits; the folders of processes gone are removed then too.
fn root() -> &'static Path {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        let all = Path::new(env!("CARGO_TARGET_TMPDIR")).join("shared-runs");
        let gone = |pid: &str| cfg!(target_os = "linux") && !Path::new("/proc").join(pid).exists();
        for e in std::fs::read_dir(&all).into_iter().flatten().flatten() {
            let pid = e.file_name().to_string_lossy().into_owned();
            if gone(&pid) {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
        let dir = all.join(std::process::id().to_string());
        std::fs::create_dir_all(&dir).unwrap();
        extern "C" fn remove_at_exit() {
            if let Some(dir) = ROOT.get() {
                let _ = std::fs::remove_dir_all(dir);
            }
        }
        // SAFETY: registers a plain function to run at exit (atexit(3)).
        unsafe { libc::atexit(remove_at_exit) };
        dir
    })
}
