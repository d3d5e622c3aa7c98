//! `rlharness bisect SCENARIO --repo R --good G --bad B`: the first commit of the trainer's
//! repository where the scenario regressed. Each commit is checked out into a worktree of the
//! bisect's own, the scenario's source setting (`--source`) is pointed at it (as the driver's
//! `env`), and the commit is judged: by Wald's sequential test on the scenario's seeds against
//! the calibration, or (`--propagate`) by the propagation matrix. The search, the test, the
//! cache and the report are `crate::tools::bisect`'s; this file runs the commits.

use std::path::{Path, PathBuf};
use std::time::Instant;

use std::sync::Arc;

use crate::app::cli::{self, BisectArgs, Executor};
use crate::app::errors::Failure;
use crate::app::pipeline::run_one;
use crate::app::scale::ray::{run_jobs, JobRun, OnDone, RayJobs};
use crate::judge::expr::fmt_num;
use crate::model::error::{CommandError, ExitStatus};
use crate::model::rundir::RunStatus;
use crate::model::util;
use crate::report::Report;
use crate::run::runner::RunOptions;
use crate::scenario::Scenario;
use crate::tools::bisect::cache::Cache;
use crate::tools::bisect::commit_verdict::{self, Ask, Judge};
use crate::tools::bisect::git::{self, Worktrees};
use crate::tools::bisect::sprt::{Decision, Sprt};
use crate::tools::bisect::walk::Walk;
use crate::tools::bisect::{page, BisectReport, Commit, Tested, Trial};
use crate::tools::history::trend::Window;
use crate::tools::propagate::command::{run_matrix_on, MatrixOptions, TrialExecutor};

/// Everything a commit's test needs.
struct Bench<'a> {
    args: &'a BisectArgs,
    scenario: &'a Scenario,
    var: String,
    out: PathBuf,
    golden: PathBuf,
    hardware: Option<String>,
    judge: Judge,
    cache: Cache,
    worktrees: Worktrees,
    /// `--executor ray`: each run of a commit one Ray job, its worktree shipped with it.
    ray: Option<RayJobs>,
    /// Seeds side by side here in scenario mode, and the namespace each then needs (netns.rs).
    jobs: usize,
    netns: Option<crate::run::netns::Netns>,
}

pub(crate) async fn bisect(args: BisectArgs) -> Result<ExitStatus, CommandError> {
    let started = Instant::now();
    if !(args.alpha > 0.0 && args.alpha < 0.5 && args.beta > 0.0 && args.beta < 0.5) {
        return Err(CommandError::invalid(
            "--alpha and --beta are error rates in (0, 0.5)",
        ));
    }
    if args.jobs == 0 || args.max_seeds == 0 {
        return Err(CommandError::invalid("--jobs and --max-seeds: at least 1"));
    }
    let ray = match args.ray.executor {
        Executor::Local => None,
        Executor::Ray => Some(RayJobs::new(args.ray.clone())?),
    };
    let scenario = crate::run::plan::load_checked(&args.scenario, &args.set)?;
    let var = commit_verdict::source_var(&scenario, args.source.as_deref())?;
    let good = git::resolve(&args.repo, &args.good)?;
    let bad = git::resolve(&args.repo, &args.bad)?;
    let mut line = vec![good.clone()];
    line.extend(git::range(&args.repo, &good, &bad)?);
    let n = line.len() - 1;
    let out = args.out.clone().unwrap_or_else(|| {
        let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%S").to_string();
        Path::new("reports/bisect").join(&scenario.name).join(stamp)
    });
    let cache_dir = args
        .cache
        .clone()
        .unwrap_or_else(|| out.parent().unwrap_or(Path::new(".")).join("cache"));
    let golden = cli::golden_store(args.golden.as_deref(), Some(&args.scenario));
    let (judge, hardware) = judge_of(&args, &scenario, &golden)?;
    let cache = Cache::of_bisect(&cache_dir, &scenario.sources, &args.set, &var, &judge.key());
    outln!(
        "bisect {}: {} commits after {} (good) up to {} (bad) in {}; {} points at each commit's worktree",
        scenario.name,
        n,
        good.short(),
        bad.short(),
        args.repo.display(),
        var
    );
    outln!("mode: {}", judge.mode());
    if let Some(test) = judge.test_line() {
        outln!("{test}");
    }
    outln!(
        "cache: {} (each commit's results, reused by a rerun)",
        cache_dir.display()
    );
    let mut report = BisectReport::new(
        &scenario.name,
        &args.repo,
        &var,
        (&good, &bad),
        &judge,
        n,
        &cache_dir,
    );
    // With `--propagate` the matrix places its own trials; Ray places its jobs.
    let (jobs, netns) = if args.propagate || ray.is_some() {
        (args.jobs, None)
    } else {
        crate::run::netns::for_scenario(&scenario, args.jobs, "bisect")
    };
    let mut bench = Bench {
        jobs,
        netns,
        args: &args,
        scenario: &scenario,
        var,
        out: out.clone(),
        golden,
        hardware,
        worktrees: Worktrees::new(&args.repo, &out.join("worktrees"))?,
        judge,
        cache,
        ray,
    };
    let mut walk = Walk::new(n);
    while let Some((i, announce)) = walk.next(&line, &mut report) {
        outln!("{announce}");
        let t = bench.test(&line[i]).await?;
        walk.record(&line, &mut report, t);
    }
    report.finish(started.elapsed());
    let written = page::write(&out, &report)?;
    for text in report.summary(&written) {
        outln!("{text}");
    }
    Ok(walk.status())
}

/// How each commit is judged (`--propagate`: the matrix; else the sequential test of the
/// scenario's seeds), and the hardware key its runs use.
fn judge_of(
    args: &BisectArgs,
    scenario: &Scenario,
    golden: &Path,
) -> Result<(Judge, Option<String>), CommandError> {
    if args.propagate {
        let options = MatrixOptions {
            until: args.until,
            jobs: args.jobs,
            knobs: args.knobs.clone(),
            conditions: args.conditions.clone(),
            progress: false,
            ..MatrixOptions::default()
        };
        return Ok((Judge::Propagate(options), args.hardware.clone()));
    }
    let ask = Ask {
        scenario: args.scenario.clone(),
        hardware: args.hardware.clone(),
        metric: args.metric.clone(),
        effect: args.effect,
        alpha: args.alpha,
        beta: args.beta,
        max_seeds: args.max_seeds,
    };
    let (test, sprt, hw) = commit_verdict::sequential_test(&ask, scenario, golden)?;
    Ok((Judge::Scenario { test, sprt }, Some(hw)))
}

impl Bench<'_> {
    /// Test one commit in its own worktree (removed afterwards).
    async fn test(&mut self, commit: &Commit) -> Result<Tested, CommandError> {
        let cached = self.cache.load(&commit.sha);
        let cached_runs: usize = cached.iter().map(|t| t.runs).sum();
        let mut set = self.args.set.clone();
        let decided = match &self.judge {
            Judge::Scenario { sprt, .. } => {
                let values: Vec<f64> = cached.iter().filter_map(|t| t.value).collect();
                sprt.decide(&values) != Decision::Continue || cached.len() >= self.args.max_seeds
            }
            Judge::Propagate(_) => !cached.is_empty(),
        };
        let mut trials = cached;
        if !decided {
            let dir = self.worktrees.checkout(commit)?;
            // Here the runs read the worktree where it is; a Ray job gets it in its package
            // and the setting pointed at its place there.
            let sources = vec![(self.var.clone(), dir.clone())];
            if self.ray.is_none() {
                set.push(format!("driver.env.{}={}", self.var, dir.display()));
            }
            let runs_out = self.out.join("runs").join(commit.short());
            let result = match &self.judge {
                Judge::Scenario { sprt, .. } => {
                    self.seeds(sprt, &set, &runs_out, &sources, &mut trials)
                        .await
                }
                Judge::Propagate(o) => {
                    let trials_on = self.ray.as_ref().map(|r| r.trials(&sources));
                    let remote = trials_on.as_ref().map(|t| t as &dyn TrialExecutor);
                    let t = propagate_trial(&self.args.scenario, &set, &runs_out, o, remote).await;
                    trials.push(t);
                    Ok(())
                }
            };
            self.worktrees.remove(&dir);
            result?;
            self.cache.store(&commit.sha, &trials)?;
        }
        let (verdict, evidence, llr) = self.judge.verdict(&trials);
        util::note!("  {} is {}: {evidence}", commit.short(), verdict.word());
        Ok(Tested {
            commit: commit.clone(),
            verdict,
            evidence,
            trials,
            llr,
            cached_runs,
        })
    }

    /// Seeds in batches of `--jobs` until the test decides or `--max-seeds` is reached; a run
    /// that cannot run ends the commit's seeds (it is skipped).
    async fn seeds(
        &self,
        sprt: &Sprt,
        set: &[String],
        out: &Path,
        sources: &[(String, PathBuf)],
        trials: &mut Vec<Trial>,
    ) -> Result<(), CommandError> {
        let Judge::Scenario { test, .. } = &self.judge else {
            return Ok(());
        };
        let window = Window {
            metric: test.metric.clone(),
            first: test.window.0,
            last: test.window.1,
            median: test.median,
            sigma: None,
            golden: None,
            band: None,
        };
        loop {
            let values: Vec<f64> = trials.iter().filter_map(|t| t.value).collect();
            let left = self.args.max_seeds.saturating_sub(trials.len());
            if sprt.decide(&values) != Decision::Continue
                || left == 0
                || trials.iter().any(|t| t.failed)
            {
                return Ok(());
            }
            let used: Vec<u64> = trials.iter().filter_map(|t| t.seed).collect();
            let seeds: Vec<u64> = (self.scenario.seed..)
                .filter(|s| !used.contains(s))
                .take(left.min(self.jobs))
                .collect();
            let mut batch = Vec::new();
            for (seed, result) in self.run_seeds(&seeds, set, out, sources).await? {
                batch.push(seed_trial(seed, result, &window)?);
            }
            batch.sort_by_key(|t| t.seed);
            for t in batch {
                trials.push(t);
                let values: Vec<f64> = trials.iter().filter_map(|t| t.value).collect();
                let last = trials.last().map(|t| t.note.clone()).unwrap_or_default();
                util::note!(
                    "  seed {} → {last} (Λ = {:.2}; bad at ≥ {:.2}, good at ≤ {:.2})",
                    trials.last().and_then(|t| t.seed).unwrap_or_default(),
                    sprt.llr(&values),
                    sprt.upper,
                    sprt.lower
                );
            }
        }
    }
}

impl Bench<'_> {
    /// One run of the scenario per seed, `--jobs` side by side: here, or one Ray job each
    /// (`sources` shipped), its run directory brought back and judged here as `golden
    /// calibrate` judges one.
    async fn run_seeds(
        &self,
        seeds: &[u64],
        set: &[String],
        out: &Path,
        sources: &[(String, PathBuf)],
    ) -> Result<Vec<(u64, Result<Report, CommandError>)>, CommandError> {
        use futures_util::StreamExt;
        let file = &self.args.scenario;
        let Some(ray) = &self.ray else {
            let opts = RunOptions {
                set: set.to_vec(),
                hardware: self.hardware.clone(),
                netns: self.netns.clone(),
                ..RunOptions::new(out.to_path_buf(), self.golden.clone())
            };
            return Ok(futures_util::stream::iter(seeds.iter().map(|&seed| {
                let mut o = opts.clone();
                o.seed = Some(seed);
                async move { (seed, run_one(file, &o).await) }
            }))
            .buffer_unordered(self.jobs)
            .collect()
            .await);
        };
        let args = ray.args(file, out, &self.golden, self.hardware.clone(), set);
        let runs: Vec<JobRun> = seeds.iter().map(|s| JobRun::of(file, Some(*s))).collect();
        // The bisect's own lines say what each seed gave.
        let quiet: OnDone = Arc::new(|_, _| {});
        // A Ray worker may hold several jobs: a trainer on a fixed address goes one at a time.
        let in_flight = match crate::run::netns::fixed_address(self.scenario) {
            Some(_) => 1,
            None => self.args.jobs,
        };
        let batch = ray.batch(in_flight, sources, Some(quiet));
        let entries = run_jobs(&runs, &args, &batch).await?;
        if ray.interrupted() {
            return Err(CommandError::run_failed("interrupted: the bisect stops"));
        }
        Ok(seeds
            .iter()
            .zip(entries)
            .map(|(seed, e)| {
                let report = match e.run_dir.filter(|d| d.join("run.json").is_file()) {
                    Some(dir) => {
                        crate::app::judged::judge_stored(&dir, &self.golden).map_err(|source| {
                            CommandError::from(Failure::BroughtBack {
                                dir: dir.clone(),
                                source,
                            })
                        })
                    }
                    None => Err(CommandError::new(
                        e.status,
                        format!("{} ({})", e.summary, e.placement),
                    )),
                };
                (*seed, report)
            })
            .collect())
    }
}

/// One seed's run as a trial: its window value, or why it gives none. An interrupted run
/// (Ctrl-C) ends the bisect.
fn seed_trial(
    seed: u64,
    result: Result<crate::report::Report, CommandError>,
    window: &Window,
) -> Result<Trial, CommandError> {
    let failed = |note: String| Trial {
        seed: Some(seed),
        value: None,
        runs: 1,
        note,
        failed: true,
    };
    let report = match result {
        Ok(r) => r,
        Err(e) => return Ok(failed(format!("exit {}: {e}", e.status.code()))),
    };
    match report.run.status {
        Some(RunStatus::Completed) => {}
        Some(RunStatus::Interrupted) => {
            return Err(CommandError::run_failed("interrupted: the bisect stops"))
        }
        other => {
            return Ok(failed(format!(
                "the run did not complete ({other:?}): {}",
                report.run.reason.as_deref().unwrap_or("no reason recorded")
            )))
        }
    }
    Ok(match window.value(&report.metrics) {
        Some(v) => Trial {
            seed: Some(seed),
            value: Some(v),
            runs: 1,
            note: format!("{} {}", window.label(), fmt_num(v)),
            failed: false,
        },
        None => failed(format!("no value of {}", window.label())),
    })
}

/// One propagation matrix at a commit: the knobs flagged without a known gap (its value is
/// their count), or why it could not run.
async fn propagate_trial(
    scenario: &Path,
    set: &[String],
    out: &Path,
    options: &MatrixOptions,
    remote: Option<&dyn TrialExecutor>,
) -> Trial {
    match run_matrix_on(scenario, out, set, options, remote).await {
        Ok((report, _, failed)) => {
            let flags: Vec<&str> = report
                .knobs
                .iter()
                .filter(|k| k.flagged && k.known_gap.is_none())
                .map(|k| k.path.as_str())
                .collect();
            let note = if flags.is_empty() {
                format!(
                    "no knob flagged beyond the known gaps ({} runs)",
                    report.runs
                )
            } else {
                format!("flagged: {} ({} runs)", flags.join(", "), report.runs)
            };
            Trial {
                seed: None,
                value: Some(flags.len() as f64),
                runs: report.runs,
                failed: failed && flags.is_empty(),
                note: if failed && flags.is_empty() {
                    format!("a trial failed: {note}")
                } else {
                    note
                },
            }
        }
        Err(e) => Trial {
            seed: None,
            value: None,
            runs: 0,
            note: e.to_string(),
            failed: true,
        },
    }
}
