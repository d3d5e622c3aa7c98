//! `rlharness golden calibrate`: a scenario's noise measured over runs.

use std::path::{Path, PathBuf};

use crate::app::ci_env;
use crate::app::cli::{self, CalibrateArgs, Executor, RayArgs, RunArgs};
use crate::app::errors::Failure;
use crate::app::pipeline::run_one;
use crate::app::scale::ray::{run_jobs, JobBatch, JobRun};
use crate::judge::budget;
use crate::judge::calibrating::{self, CalibrationRun};
use crate::judge::seeds::{self, parse_seed_range};
use crate::model::checks::ChecksSpec;
use crate::model::error::{CommandError, ExitStatus};
use crate::model::golden::calibration::Calibration;
use crate::model::rundir::RunStatus;
use crate::report::Report;
use crate::run::runner::{env, RunOptions};
use crate::{model::util, scenario};

/// `rlharness golden calibrate`: run the scenario `runs` times with its own seed (or once per
/// seed), side by side up to `jobs`, and write the measured statistics beside its golden.
pub(crate) async fn calibrate(
    args: CalibrateArgs,
    golden: Option<&Path>,
) -> Result<ExitStatus, CommandError> {
    let golden_root = &cli::golden_store(golden, Some(&args.scenario));
    let CalibrateArgs {
        scenario: file,
        runs,
        seeds,
        jobs,
        out,
        hardware,
        set,
        allow_dirty,
        detect,
        ray,
        from_runs,
    } = args;
    let (file, set) = (file.as_path(), set.as_slice());
    let detect = detect.map(|d| parse_fraction(&d)).transpose()?;
    if let Some(fraction) = detect {
        if detect_only(file, set, golden_root, hardware.as_deref(), fraction)? {
            return Ok(ExitStatus::Passed);
        }
    }
    let seeds = seeds.map(|r| parse_seed_range(&r)).transpose()?;
    if ci_env() {
        return Err(CommandError::invalid(
            "refusing to calibrate under CI=true: CI never writes goldens; calibrate locally and \
             commit calibration.json",
        ));
    }
    if let Some(dir) = &from_runs {
        let scenario = crate::run::plan::load_checked(file, set)?;
        let runs = stored_runs(dir, &scenario.name, golden_root, allow_dirty)?;
        let total = runs.len();
        let mut done = Vec::new();
        for (seed, report) in runs {
            accept_run(seed, report, &scenario.checks, total, &mut done)?;
        }
        return write_calibration(&scenario, done, golden_root, detect);
    }
    refuse_dirty(allow_dirty)?;
    let scenario = scenario::load_scenario(file, set)?;
    let seeds = seeds_to_run(&scenario, seeds, runs);
    let total = seeds.len();
    let mut done = Vec::new();
    match ray.executor {
        Executor::Local => {
            let here = LocalRuns {
                file,
                set,
                jobs,
                out,
                golden_root,
                hardware,
            };
            here.run(&scenario, &seeds, &mut done).await?;
        }
        Executor::Ray => {
            let runs = ray_runs(file, &seeds, ray, out, golden_root, hardware, set).await?;
            for (seed, report) in runs {
                accept_run(seed, report, &scenario.checks, total, &mut done)?;
            }
        }
    }
    write_calibration(&scenario, done, golden_root, detect)
}

/// `--detect` with a calibration already there: its table printed (`true`); else a note that
/// it calibrates first (`false`).
fn detect_only(
    file: &Path,
    set: &[String],
    golden_root: &Path,
    hardware: Option<&str>,
    fraction: f64,
) -> Result<bool, CommandError> {
    let scenario = crate::run::plan::load_checked(file, set)?;
    let dir = calibration_dir(golden_root, &scenario.name, hardware, "--detect")?;
    if let Some(cal) = Calibration::read(&dir)? {
        print_seeds_needed(&scenario.checks, &cal, fraction);
        return Ok(true);
    }
    util::note!(
        "calibrate: no calibration in {} yet: calibrating first",
        dir.display()
    );
    Ok(false)
}

/// A calibration names the commit it measured: none from a tree with uncommitted changes,
/// unless `allow_dirty` (to try bands out).
fn refuse_dirty(allow_dirty: bool) -> Result<(), CommandError> {
    let commit = env::git_commit();
    match commit.as_deref().filter(|c| c.ends_with("-dirty")) {
        Some(c) if !allow_dirty => Err(CommandError::invalid(format!(
            "refusing to calibrate from a tree with uncommitted changes ({c}): a calibration \
             names the commit it measured; commit first, or pass --allow-dirty to try bands \
             out (never to commit that calibration)"
        ))),
        _ => Ok(()),
    }
}

/// The seeds to run: `--seeds`, else `--runs` runs of the scenario's seed, else as many seeds
/// from the scenario's as the run's false-alarm budget asks for (said in a note).
fn seeds_to_run(
    scenario: &scenario::Scenario,
    seeds: Option<Vec<u64>>,
    runs: Option<usize>,
) -> Vec<u64> {
    match (seeds, runs) {
        (Some(seeds), _) => seeds,
        (None, Some(n)) => vec![scenario.seed; n.max(1)],
        (None, None) => {
            let m = calibrating::planned_tests(scenario).max(1);
            let n = budget::runs_for(
                scenario.checks.alpha() / m as f64,
                budget::MIN_RUNS,
                budget::MAX_RUNS,
            );
            util::note!(
                "calibrate: {n} runs, seeds {}..{} (no --runs or --seeds: about {m} calibrated \
                 window(s) share the run's false-alarm budget {}; with {n} runs their bands are \
                 within 10% of an endless calibration's)",
                scenario.seed,
                scenario.seed + n as u64 - 1,
                scenario.checks.alpha()
            );
            (scenario.seed..scenario.seed + n as u64).collect()
        }
    }
}

/// The calibration runs of this host: what they run with and where they go.
struct LocalRuns<'a> {
    file: &'a Path,
    set: &'a [String],
    jobs: usize,
    out: PathBuf,
    golden_root: &'a Path,
    hardware: Option<String>,
}

impl LocalRuns<'_> {
    /// One run per seed, side by side up to `jobs`, each accepted as it ends. They never write
    /// a golden of their own (`ci` stays on); each shows its steps as plain lines (runs side
    /// by side interleave them, each line naming its seed).
    async fn run(
        self,
        scenario: &scenario::Scenario,
        seeds: &[u64],
        done: &mut Vec<CalibrationRun>,
    ) -> Result<(), CommandError> {
        use futures_util::StreamExt;
        let (jobs, netns) = crate::run::netns::for_scenario(scenario, self.jobs, "calibrate");
        let opts = RunOptions {
            set: self.set.to_vec(),
            hardware: self.hardware,
            step_lines: true,
            netns,
            calibration: true,
            ..RunOptions::new(self.out, self.golden_root.to_path_buf())
        };
        let file = self.file;
        let mut results = futures_util::stream::iter(seeds.iter().map(|seed| {
            let mut o = opts.clone();
            o.seed = Some(*seed);
            o.progress_label = Some(format!("calibrate {} seed {seed}", scenario.name));
            async move { (*seed, run_one(file, &o).await) }
        }))
        .buffer_unordered(jobs.max(1));
        while let Some((seed, report)) = results.next().await {
            accept_run(seed, report?, &scenario.checks, seeds.len(), done)?;
        }
        Ok(())
    }
}

/// The calibration of the accepted runs, written beside the golden and printed.
fn write_calibration(
    scenario: &scenario::Scenario,
    done: Vec<CalibrationRun>,
    golden_root: &Path,
    detect: Option<f64>,
) -> Result<ExitStatus, CommandError> {
    let (cal, checks) = calibrating::measure(&scenario.name, &scenario.checks, done)?;
    let dir = golden_root.join(&cal.scenario).join(&cal.hardware);
    let path = cal.write(&dir)?;
    outln!("{}: calibrated from {}", cal.scenario, cal.source());
    // One line a rule (its windows' first and last mean, the spread of their σ); every
    // window's statistics are in calibration.json.
    let rows: Vec<Vec<String>> = cal
        .windows
        .iter()
        .filter(|(_, points)| !points.is_empty())
        .map(|(metric, points)| {
            use crate::judge::expr::fmt_num;
            let (first, last) = (&points[0], &points[points.len() - 1]);
            let sd = |f: fn(f64, f64) -> f64| points.iter().map(|p| p.std).fold(points[0].std, f);
            vec![
                metric.clone(),
                points.len().to_string(),
                format!("{}..{}", first.first, last.last),
                fmt_num(first.mean),
                fmt_num(last.mean),
                format!("{} .. {}", fmt_num(sd(f64::min)), fmt_num(sd(f64::max))),
            ]
        })
        .collect();
    outln!(
        "{}",
        util::plain_table(
            &[
                "rule",
                "windows",
                "steps",
                "first mean",
                "last mean",
                "σ min .. max"
            ],
            &rows,
            &[false, true, false, true, true, true],
        )
    );
    outln!(
        "written to {} (every run's value and every window's mean, σ, min and max)",
        path.display()
    );
    for warning in calibrating::calibration_warnings(&scenario.checks, &cal) {
        util::note!("calibrate: warning: {warning}");
    }
    if let Some(fraction) = detect {
        print_seeds_needed(&checks, &cal, fraction);
    }
    Ok(ExitStatus::Passed)
}

/// The golden folder of `scenario` whose calibration a command reads: `hardware`'s, or, since
/// the hardware key a run would get is known only once its backend runs (a torch engine names
/// its GPU), the one folder holding a calibration (its `cpu` folder when none does).
pub(crate) fn calibration_dir(
    golden_root: &Path,
    scenario: &str,
    hardware: Option<&str>,
    what: &str,
) -> Result<PathBuf, CommandError> {
    let base = golden_root.join(scenario);
    if let Some(hw) = hardware {
        return Ok(base.join(hw));
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir(&base)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|d| d.join("calibration.json").is_file())
        .collect();
    found.sort();
    if found.len() > 1 {
        return Err(CommandError::invalid(format!(
            "{what}: {} has calibrations for several hardware keys ({}): name one with \
             --hardware",
            base.display(),
            found
                .iter()
                .filter_map(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    Ok(found.pop().unwrap_or_else(|| base.join("cpu")))
}

/// `5%` or `0.05`, in (0, 1).
fn parse_fraction(text: &str) -> Result<f64, CommandError> {
    let t = text.trim();
    let v = match t.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|p| p / 100.0),
        None => t.parse::<f64>(),
    };
    match v {
        Ok(f) if f > 0.0 && f < 1.0 => Ok(f),
        _ => Err(CommandError::invalid(format!(
            "--detect: `{text}` is not a fraction in (0, 1) (`5%` or `0.05`)"
        ))),
    }
}

/// The table of `golden calibrate --detect`.
fn print_seeds_needed(checks: &ChecksSpec, cal: &Calibration, fraction: f64) {
    use crate::judge::expr::fmt_num;
    let rows = seeds::seeds_needed(checks, cal, fraction);
    outln!(
        "seeds a multi-seed verdict needs to catch a shift of {}% of a window's mean 80% of the \
         time ({}):",
        fmt_num(fraction * 100.0),
        cal.source()
    );
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.metric.clone(),
                format!("{}..{}", r.window.0, r.window.1),
                fmt_num(r.mean),
                fmt_num(r.sigma),
                fmt_num(r.shift),
                r.seeds.map_or_else(
                    || {
                        format!(
                            "more than 1000 (the calibration's {} runs bound it)",
                            cal.runs
                        )
                    },
                    |n| n.to_string(),
                ),
            ]
        })
        .collect();
    if !table.is_empty() {
        outln!(
            "{}",
            util::plain_table(
                &["rule", "window", "mean", "σ", "shift", "seeds"],
                &table,
                &[false, false, true, true, true, true],
            )
        );
    }
    if rows.is_empty() {
        outln!("(no windowed golden rule with a calibration: nothing to test over seeds)");
    }
}

/// One calibration run that came back: it must have completed and passed every rule that does
/// not depend on the calibration (a calibration measures healthy runs only).
fn accept_run(
    seed: u64,
    report: Report,
    checks: &ChecksSpec,
    total: usize,
    done: &mut Vec<CalibrationRun>,
) -> Result<(), CommandError> {
    let run = CalibrationRun {
        seed,
        dir: report.run.dir,
        status: report.run.status,
        reason: report.run.reason,
        verdict: report.verdict,
        metrics: report.metrics,
        hardware: report.run.hardware,
        host: report.run.host,
        git_commit: report.run.git_commit,
        fingerprint: report.run.numerics.map(|n| n.fingerprint),
    };
    calibrating::accept(&run, checks)?;
    done.push(run);
    util::note!("calibrate: {}/{total} runs done (seed {seed})", done.len());
    Ok(())
}

/// `--executor ray`: each seed one Ray job (as `run --executor ray` runs a scenario), its run
/// directory brought back under `out` and judged here, as a local calibration run is.
async fn ray_runs(
    file: &Path,
    seeds: &[u64],
    ray: RayArgs,
    out: PathBuf,
    golden_root: &Path,
    hardware: Option<String>,
    set: &[String],
) -> Result<Vec<(u64, Report)>, CommandError> {
    let args = RunArgs::for_jobs(file, ray, out, golden_root, hardware, set);
    let runs: Vec<JobRun> = seeds.iter().map(|s| JobRun::of(file, Some(*s))).collect();
    let entries = run_jobs(&runs, &args, &JobBatch::default()).await?;
    let mut reports = Vec::new();
    for (seed, e) in seeds.iter().zip(entries) {
        let dir = e
            .run_dir
            .filter(|d| d.join("run.json").is_file())
            .ok_or_else(|| {
                CommandError::new(
                    e.status,
                    format!(
                        "calibration run with seed {seed} brought no run directory back ({}): {}",
                        e.placement, e.summary
                    ),
                )
            })?;
        let report = crate::app::judged::judge_stored(&dir, golden_root).map_err(|source| {
            Failure::BroughtBack {
                dir: dir.clone(),
                source,
            }
        })?;
        reports.push((*seed, report));
    }
    Ok(reports)
}

/// `--from-runs DIR`: the completed runs of `scenario` under DIR (or DIR/<scenario>/), each
/// judged here as a calibration run is; a run that did not complete is left out and named. The
/// runs must come from one commit (a calibration names the code it measured), clean unless
/// `allow_dirty`.
fn stored_runs(
    dir: &Path,
    scenario: &str,
    golden_root: &Path,
    allow_dirty: bool,
) -> Result<Vec<(u64, Report)>, CommandError> {
    let mut dirs = Vec::new();
    // A calibration's own `--out` keeps its runs in `<scenario>/calibrations/`.
    let ours = dir.join(scenario).join("calibrations");
    for base in [dir.to_path_buf(), dir.join(scenario), ours.clone()] {
        let Ok(entries) = std::fs::read_dir(&base) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if !p.is_symlink() && p.join("run.json").is_file() {
                dirs.push(p);
            }
        }
    }
    dirs.sort();
    dirs.dedup();
    if dirs.is_empty() {
        return Err(CommandError::invalid(format!(
            "--from-runs {}: no run directory (a folder with run.json) there, in {}/ or in {}/",
            dir.display(),
            dir.join(scenario).display(),
            ours.display()
        )));
    }
    let mut runs = Vec::new();
    let mut commits = std::collections::BTreeSet::new();
    for d in dirs {
        let report = crate::app::judged::judge_stored(&d, golden_root).map_err(|source| {
            Failure::FromRuns {
                dir: d.clone(),
                source,
            }
        })?;
        if report.scenario != scenario {
            return Err(CommandError::invalid(format!(
                "{}: a run of `{}`, not of `{scenario}`",
                d.display(),
                report.scenario
            )));
        }
        if report.run.status != Some(RunStatus::Completed) {
            util::note!(
                "calibrate: left out {} ({}: it did not complete)",
                d.display(),
                report.run.status.map_or("unknown", |s| s.as_str())
            );
            continue;
        }
        let seed = report.run.seed.ok_or_else(|| {
            CommandError::invalid(format!("{}: run.json records no seed", d.display()))
        })?;
        commits.insert(report.run.git_commit.clone().unwrap_or_default());
        runs.push((seed, report));
    }
    if commits.len() > 1 {
        return Err(CommandError::invalid(format!(
            "--from-runs {}: the runs come from several commits ({}); a calibration measures \
             one",
            dir.display(),
            commits.into_iter().collect::<Vec<_>>().join(", ")
        )));
    }
    if let Some(c) = commits.iter().find(|c| c.ends_with("-dirty")) {
        if !allow_dirty {
            return Err(CommandError::invalid(format!(
                "--from-runs {}: the runs were made from a tree with uncommitted changes ({c}); \
                 pass --allow-dirty to try bands out (never to commit that calibration)",
                dir.display()
            )));
        }
    }
    Ok(runs)
}
