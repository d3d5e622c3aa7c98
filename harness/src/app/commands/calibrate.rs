//! `rlharness golden calibrate`: a scenario's noise measured over runs.

use std::path::{Path, PathBuf};

use crate::app::ci_env;
use crate::app::errors::Failure;
use crate::app::pipeline::run_one;
use crate::app::scale::ray::{run_jobs, JobBatch, JobRun};
use crate::checks::ChecksSpec;
use crate::cli::{self, CalibrateArgs, Executor, RayArgs, RunArgs};
use crate::compare::seeds::{self, parse_seed_range};
use crate::compare::{budget, stability};
use crate::error::{CommandError, ExitStatus};
use crate::golden::calibration::Calibration;
use crate::metrics::MetricTable;
use crate::report::Report;
use crate::rundir::RunStatus;
use crate::runner::{env, RunOptions};
use crate::{spec, util};

/// `rlharness golden calibrate`: run the scenario `runs` times with its own seed (or once per
/// seed), side by side up to `jobs`, and write the measured statistics beside its golden.
pub(crate) async fn calibrate(
    args: CalibrateArgs,
    golden: Option<&Path>,
) -> Result<ExitStatus, CommandError> {
    use futures_util::StreamExt;
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
    let file = file.as_path();
    let set = set.as_slice();
    let detect = detect.map(|d| parse_fraction(&d)).transpose()?;
    if let Some(fraction) = detect {
        let scenario = spec::load_scenario(file, set)?;
        let dir = calibration_dir(golden_root, &scenario.name, hardware.as_deref(), "--detect")?;
        if let Some(cal) = Calibration::read(&dir)? {
            print_seeds_needed(&scenario.checks, &cal, fraction);
            return Ok(ExitStatus::Passed);
        }
        util::note!(
            "calibrate: no calibration in {} yet: calibrating first",
            dir.display()
        );
    }
    let seeds = match seeds {
        Some(r) => Some(parse_seed_range(&r)?),
        None => None,
    };
    if ci_env() {
        return Err(CommandError::invalid(
            "refusing to calibrate under CI=true: CI never writes goldens; calibrate locally and \
             commit calibration.json",
        ));
    }
    if let Some(dir) = &from_runs {
        let scenario = spec::load_scenario(file, set)?;
        let runs = stored_runs(dir, &scenario.name, golden_root, allow_dirty)?;
        let total = runs.len();
        let mut done = Vec::new();
        for (seed, report) in runs {
            accept_run(seed, report, &scenario.checks, total, &mut done)?;
        }
        return write_calibration(&scenario, done, golden_root, detect);
    }
    let commit = env::git_commit();
    if let Some(c) = commit.as_deref().filter(|c| c.ends_with("-dirty")) {
        if !allow_dirty {
            return Err(CommandError::invalid(format!(
                "refusing to calibrate from a tree with uncommitted changes ({c}): a calibration \
                 names the commit it measured; commit first, or pass --allow-dirty to try bands \
                 out (never to commit that calibration)"
            )));
        }
    }
    let scenario = spec::load_scenario(file, set)?;
    let seeds = match (seeds, runs) {
        (Some(seeds), _) => seeds,
        (None, Some(n)) => vec![scenario.seed; n.max(1)],
        (None, None) => {
            let m = planned_tests(&scenario).max(1);
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
    };
    let total = seeds.len();
    let mut done = Vec::new();
    match ray.executor {
        Executor::Local => {
            // The calibration runs never write a golden of their own (`ci` stays on). Each
            // shows its steps as plain lines (runs side by side interleave them, each line
            // naming its seed).
            let (jobs, netns) = crate::netns::for_scenario(&scenario, jobs, "calibrate");
            let opts = RunOptions {
                set: set.to_vec(),
                hardware,
                step_lines: true,
                netns,
                calibration: true,
                ..RunOptions::new(out, golden_root.to_path_buf())
            };
            let mut results = futures_util::stream::iter(seeds.iter().map(|seed| {
                let mut o = opts.clone();
                o.seed = Some(*seed);
                o.progress_label = Some(format!("calibrate {} seed {seed}", scenario.name));
                async move { (*seed, run_one(file, &o).await) }
            }))
            .buffer_unordered(jobs.max(1));
            while let Some((seed, report)) = results.next().await {
                accept_run(seed, report?, &scenario.checks, total, &mut done)?;
            }
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

/// The calibration of the accepted runs, written beside the golden and printed.
fn write_calibration(
    scenario: &spec::Scenario,
    mut done: Vec<(u64, Report)>,
    golden_root: &Path,
    detect: Option<f64>,
) -> Result<ExitStatus, CommandError> {
    if done.is_empty() {
        return Err(CommandError::invalid("no completed run to calibrate from"));
    }
    done.sort_by_key(|(s, _)| *s);
    let first = &done[0].1;
    let tables: Vec<MetricTable> = done.iter().map(|(_, r)| r.metrics.clone()).collect();
    // The default stability rules' windows are measured too, so their bands are calibrated.
    let mut checks = scenario.checks.clone();
    let columns = tables.first().map(|t| t.columns()).unwrap_or_default();
    checks
        .golden
        .0
        .extend(stability::rules(&scenario.checks, &columns, |_| true).0);
    // A golden rule's series must be finite in every run: a calibration never drops a value.
    for ((seed, r), t) in done.iter().zip(&tables) {
        for (metric, _) in checks.golden.iter() {
            if let Some((step, v)) = t.series(metric).into_iter().find(|(_, v)| !v.is_finite()) {
                return Err(CommandError::run_failed(format!(
                    "calibration run with seed {seed} ({}) has `{metric}` = {v} at step {step}: \
                     a calibration measures finite series only",
                    r.run.dir
                )));
            }
        }
    }
    let (steps, windows) = Calibration::measure(&tables, &checks);
    let cal = Calibration {
        scenario: scenario.name.clone(),
        hardware: first.run.hardware.clone(),
        date: chrono::Utc::now().to_rfc3339(),
        host: first.run.host.clone(),
        git_commit: first.run.git_commit.clone(),
        numeric_fingerprint: first.run.numerics.as_ref().map(|n| n.fingerprint.clone()),
        runs: done.len(),
        seeds: done.iter().map(|(s, _)| *s).collect(),
        steps,
        windows,
    };
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
            use crate::compare::expr::fmt_num;
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
    for warning in calibration_warnings(&scenario.checks, &cal) {
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

/// About how many calibrated windows of `scenario` will share its budget, before any run: the
/// windows of its calibrated golden rules without a hand-set `k`, and, where the default
/// stability rules are on, those of the entropy and the gradient norm (the stability metrics
/// that move in a healthy run; an on-policy KL measures no spread and costs no share).
fn planned_tests(scenario: &spec::Scenario) -> usize {
    let steps: Vec<u64> = (1..=scenario.steps).collect();
    let windows = |range: Option<crate::metrics::StepRange>, w: u64| {
        let range = range.unwrap_or_default();
        let n = steps.iter().filter(|s| range.contains(**s)).count() as u64;
        n.div_ceil(w.max(1)) as usize
    };
    let golden: usize = scenario
        .checks
        .golden
        .iter()
        .filter(|(_, r)| budget::in_budget(r))
        .map(|(_, r)| windows(r.steps, r.window.unwrap_or(1)))
        .sum();
    let stable = if scenario.checks.stability == Some(true) {
        ["actor/entropy", "actor/grad_norm"]
            .iter()
            .filter(|m| scenario.checks.golden.get(m).is_none())
            .count()
            * windows(None, stability::WINDOW)
    } else {
        0
    };
    golden + stable
}

/// What a new calibration should say about itself: a calibration too small for its windows at
/// the run's budget, and windows of a calibrated rule that measured no spread (runs that
/// repeated themselves: one seed of a deterministic backend).
pub(crate) fn calibration_warnings(checks: &ChecksSpec, cal: &Calibration) -> Vec<String> {
    let mut out = Vec::new();
    out.extend(budget::too_small(
        budget::Budget::of_calibration(checks, cal),
        cal.runs,
    ));
    for (metric, rule) in checks.golden.iter() {
        if rule.calibrated.is_none() {
            continue;
        }
        let flat: Vec<String> = cal
            .windows
            .get(metric)
            .into_iter()
            .flatten()
            .filter(|w| w.std == 0.0 && w.n > 1)
            .map(|w| format!("{}..{}", w.first, w.last))
            .collect();
        if !flat.is_empty() {
            out.push(format!(
                "`{metric}` measured σ = 0 over {} runs at steps {}: its runs repeated \
                 themselves ({}); its band there is the floor alone. Calibrate over seeds \
                 (no count, or --seeds A..B) for the noise a run of another seed has",
                cal.runs,
                flat.join(", "),
                if cal.seeds.iter().all(|s| Some(s) == cal.seeds.first()) {
                    "one seed of a deterministic backend"
                } else {
                    "a metric that does not move"
                }
            ));
        }
    }
    // Runs of one seed that all gave the same values measured no noise at all, whatever the
    // rules (a deterministic backend repeats itself).
    let one_seed = cal.seeds.iter().all(|s| Some(s) == cal.seeds.first());
    // (A mean of equal values may differ from them in its last bit.)
    let all_flat = cal
        .windows
        .values()
        .flatten()
        .all(|w| w.std <= 1e-12 * w.mean.abs().max(1.0));
    if cal.runs > 1 && one_seed && all_flat && !out.iter().any(|w| w.contains("σ = 0")) {
        out.push(format!(
            "every window measured σ = 0 over {} runs of one seed: the backend repeats itself, \
             so this calibration measures no noise. Calibrate over seeds (no count, or --seeds \
             A..B) for the noise a run of another seed has",
            cal.runs
        ));
    }
    out
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
    use crate::compare::expr::fmt_num;
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

/// The rules a calibration run failed that do not depend on a calibration or a golden's draw:
/// expectations, sanity and presence rules, and golden rules with fixed (`abs`/`rel`) bands.
/// Calibrated golden rules, stability rules (their bands come from the calibration) and the
/// exact lane (another seed is another run) are not asked to pass.
fn failed_uncalibrated_rules(report: &Report, checks: &ChecksSpec) -> Vec<String> {
    let Some(v) = &report.verdict else {
        return Vec::new();
    };
    v.rules
        .iter()
        .filter(|r| {
            use crate::compare::RuleStatus::{Missing, Regressed};
            // A golden rule with a fixed band, when there is a golden to fail against.
            let fixed_golden = r
                .rule
                .strip_prefix("golden:")
                .and_then(|m| checks.golden.get(m))
                .is_some_and(|g| g.calibrated.is_none());
            let own = ["expect:", "sanity:", "presence:"]
                .iter()
                .any(|p| r.rule.starts_with(p));
            (fixed_golden && r.status == Regressed)
                || (own && matches!(r.status, Regressed | Missing))
        })
        .map(|r| format!("{} ({})", r.rule, r.evidence.message))
        .collect()
}

/// One calibration run that came back: it must have completed and passed every rule that does
/// not depend on the calibration (a calibration measures healthy runs only).
fn accept_run(
    seed: u64,
    report: Report,
    checks: &ChecksSpec,
    total: usize,
    done: &mut Vec<(u64, Report)>,
) -> Result<(), CommandError> {
    if report.run.status != Some(RunStatus::Completed) {
        return Err(CommandError::run_failed(format!(
            "calibration run with seed {seed} did not complete ({}): {}",
            report.run.dir,
            report.run.reason.as_deref().unwrap_or("no reason recorded")
        )));
    }
    let failed = failed_uncalibrated_rules(&report, checks);
    if !failed.is_empty() {
        return Err(CommandError::run_failed(format!(
            "calibration run with seed {seed} failed rules that do not depend on the \
             calibration ({}): {}; a calibration measures healthy runs only",
            report.run.dir,
            failed.join("; ")
        )));
    }
    done.push((seed, report));
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
