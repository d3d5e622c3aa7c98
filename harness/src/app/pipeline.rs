//! One scenario planned, executed, judged and reported: what `run`, `calibrate` and the
//! executors of many scenarios share.

use std::path::{Path, PathBuf};

use super::judged::{run_report, skipped_report};
use crate::judge::budget::BudgetStatement;
use crate::judge::{self, RunRecord};
use crate::model::error::{CommandError, ExitStatus};
use crate::model::golden::{Golden, GoldenStore};
use crate::model::rundir::SeedsManifest;
use crate::model::slot::{self, SLOT};
use crate::report::{self, Report};
use crate::run::plan::RunPlan;
use crate::run::runner::{self, Executed, RunEnd, RunOptions};
use crate::{model::util, scenario};
use rlharness_arctic::fsx;

/// Plan, execute, judge and report one scenario.
pub async fn run_one(file: &Path, opts: &RunOptions) -> Result<Report, CommandError> {
    let scenario = scenario::load_scenario(file, &opts.set)?;
    // The plan's errors (a config value the translation cannot use) are the scenario's, first.
    let plan = RunPlan::new(scenario.clone(), opts.seed, opts.steps)?;
    // What `check` refuses, `run` refuses, with the same messages, before anything starts.
    let found = super::preflight::problems(file, &scenario, &opts.golden);
    if !found.errors.is_empty() {
        return Err(scenario::SpecErrors(found.errors).into());
    }
    tracing::info!(
        "plan {}: {} (plan {}), seed {}, {} steps, driver {}, backend {}, golden store {}",
        plan.scenario.name,
        file.display(),
        &plan.plan_hash[..plan.plan_hash.len().min(12)],
        plan.scenario.seed,
        plan.scenario.steps,
        plan.scenario.driver.kind(),
        plan.scenario.backend.kind(),
        opts.golden.display()
    );
    let unmet = plan.scenario.requires.unmet();
    if !unmet.is_empty() {
        return Ok(skipped_report(&plan.scenario.name, &unmet.join("; ")));
    }
    // A self-test runs the scenario as written first, on this host: that run is the golden of
    // the planted one. A multi-seed self-test runs the planted scenario once per seed and is
    // judged against the golden's calibration instead.
    let (plan, reference) = match plan.scenario.selftest.clone() {
        None => (plan, None),
        Some(st) if st.seeds.is_some() => {
            let seeds = st.seed_list().unwrap_or_default();
            return run_seeds(file, &seeds, 1, opts).await;
        }
        Some(st) => {
            let reference = match &opts.reference_run {
                Some(dir) => made_reference(dir, &plan)?,
                None => reference_run(plan, opts).await?,
            };
            let mut set = opts.set.clone();
            set.extend(st.plant);
            let planted = scenario::load_scenario(file, &set)?;
            let plan = RunPlan::new(planted, opts.seed, opts.steps)?;
            (plan, Some(reference))
        }
    };
    judge_plan(plan, reference, opts).await
}

/// `opts` with the judge's fail-fast rules handed to the runner (`RunOptions::live_judge`),
/// unless the caller handed in a judge of its own.
fn judged_live(opts: &RunOptions) -> RunOptions {
    let mut o = opts.clone();
    o.live_judge.get_or_insert_with(judge::FailFast::handed);
    o
}

/// Execute one planned run and judge it (against `reference`, a self-test's reference run, or
/// the store's golden), writing its reports.
async fn judge_plan(
    plan: RunPlan,
    reference: Option<(PathBuf, Golden)>,
    opts: &RunOptions,
) -> Result<Report, CommandError> {
    use crate::report::Reference;
    let executed = runner::execute(plan, &judged_live(opts)).await?;
    let Executed {
        mut manifest,
        env,
        plan,
        run_dir,
        end,
        metrics,
        trainer_tail,
        mut tensorboard,
        ..
    } = executed;
    let store = GoldenStore::with_ci(&opts.golden, opts.ci);
    let golden = match &reference {
        Some((dir, golden)) => {
            manifest.reference_run = Some(dir.display().to_string());
            manifest.write(&run_dir)?;
            Some(golden.clone())
        }
        None => store.load(&plan.scenario.name, &env.hardware)?,
    };
    // The one judge, on what the run directory stores (run.json, metrics.csv): `rlharness
    // compare RUN` calls it on the same facts and writes the same verdict.
    let verdict = judge::judge_run(&RunRecord::of(&manifest, &metrics), golden.as_ref());
    // What it was judged against, so that `compare RUN` can tell a re-blessed golden.
    if let Some(g) = &golden {
        manifest.judged_against = Some(judge::judged_against(&manifest.checks, g));
        manifest.write(&run_dir)?;
    }
    // The bless flow: a completed run without a golden (or under --update-golden) writes a
    // pending one for review; CI never writes.
    let completed = end == RunEnd::Completed;
    // A calibration run measures noise; it never offers itself as a golden.
    if completed
        && !opts.calibration
        && reference.is_none()
        && (golden.is_none() || opts.update_golden)
        && !plan.scenario.checks.golden.is_empty()
    {
        let provenance = judge::provenance_of_run(&manifest, chrono::Utc::now().to_rfc3339());
        match store.write_pending(
            &plan.scenario.name,
            &env.hardware,
            &metrics,
            &provenance,
            Some(&plan.scenario.checks),
            Some(&judge::band_widths(&plan.scenario.checks, golden.as_ref())),
        ) {
            Ok(path) => manifest.pending_golden = Some(path.display().to_string()),
            Err(e) if opts.ci => util::note!("note: {e}"),
            Err(e) => return Err(e.into()),
        }
        manifest.write(&run_dir)?;
    }
    // The budget the verdict was judged at, against the golden it was judged against.
    let budget = match (&verdict, &reference) {
        (None, _) => None,
        (Some(_), Some((_, g))) => Some(BudgetStatement::of(&manifest.checks, g, 1)),
        (Some(_), None) => golden
            .as_ref()
            .map(|g| BudgetStatement::of(&manifest.checks, g, 1)),
    };
    let reference = match reference {
        Some((_, g)) => Some(Reference::from_reference_run(&g)),
        None => golden.as_ref().map(Reference::from_golden),
    };
    // The judge decides the report's headline from the manifest as it now stands (with the
    // pending golden it wrote).
    let mut report = run_report(&run_dir, &manifest, metrics, reference, verdict);
    report.trainer_tail = trainer_tail;
    report.budget = budget;
    // The golden and the bands beside the run's series in its TensorBoard event files; a
    // failed write is a note, never the run's failure.
    for (step, tags) in report::judged_scalars(&report) {
        let scalars: Vec<(&str, f64)> = tags.iter().map(|(t, v)| (t.as_str(), *v)).collect();
        tensorboard.write(step, &scalars);
    }
    if !tensorboard.notes.is_empty() {
        manifest.notes.append(&mut tensorboard.notes);
        report.notes.clone_from(&manifest.notes);
        manifest.write(&run_dir)?;
    }
    report::write_reports(&run_dir, &report)?;
    Ok(report)
}

/// `rlharness run SCENARIO --seeds A..B`, and a multi-seed self-test: the scenario (with a
/// self-test's plant, run under the name of the scenario whose golden it is judged against)
/// once per seed into `DIR/seed-<S>/`, `jobs` side by side, each judged against the golden alone
/// and never writing one; then the combined verdict, made from what the directories store
/// (`judge::judge_combined`, as `compare DIR` makes it).
pub(crate) async fn run_seeds(
    file: &Path,
    seeds: &[u64],
    jobs: usize,
    opts: &RunOptions,
) -> Result<Report, CommandError> {
    use crate::model::rundir::SeedsManifest;
    use futures_util::StreamExt;
    let mut set = opts.set.clone();
    let selftest = scenario::load_scenario(file, &set)?.selftest;
    if let Some(st) = &selftest {
        set.extend(st.plant.iter().cloned());
    }
    let mut scenario = scenario::load_scenario(file, &set)?;
    // A multi-seed self-test declares the combined verdict; its seeds are plain runs of the
    // scenario whose golden it names.
    let name = scenario.name.clone();
    let (expected, golden) = match scenario.selftest.take() {
        Some(st) => {
            let expected = scenario.expected_verdict.take();
            if let Some(g) = &st.golden {
                scenario.name = g.clone();
            }
            (expected, st.golden)
        }
        None => (None, None),
    };
    // The plan's errors (a config value the translation cannot use) are the scenario's, before
    // its requirements are asked.
    let plan = RunPlan::new(scenario.clone(), None, opts.steps)?;
    let unmet = scenario.requires.unmet();
    if !unmet.is_empty() {
        return Ok(skipped_report(&name, &unmet.join("; ")));
    }
    let mut manifest = SeedsManifest {
        format: "rlharness-seeds/1".into(),
        scenario: name,
        golden,
        scenario_path: file.display().to_string(),
        seeds: seeds.to_vec(),
        overrides: set,
        expected_verdict: expected,
        started: chrono::Utc::now().to_rfc3339(),
        ended: None,
        errors: Default::default(),
        judged_against: None,
    };
    let dir = match &opts.run_dir {
        Some(d) => {
            fsx::create_dir_all(d)?;
            write_seeds(&manifest, d)?;
            d.clone()
        }
        None => runner::create_run_dir(&opts.out, &manifest.scenario, &plan.plan_hash, |d| {
            write_seeds(&manifest, d)
        })?,
    };
    let (jobs, netns) =
        crate::run::netns::for_scenario(&scenario, jobs, &format!("{} seeds", manifest.scenario));
    let total = seeds.len();
    // Seeds side by side: one bar each, drawn together (in the scenario's slot, whose child
    // environment they keep); one after the other: the scenario's own bar or lines. Step lines
    // name their seed either way.
    let slot = {
        let mut slot = slot::current_slot();
        if jobs > 1 && opts.progress {
            slot.progress = Some(indicatif::MultiProgress::new());
        }
        slot
    };
    // Owned seeds: the stream's future stays `Send` for any caller (a `--jobs` task).
    let mut runs = futures_util::stream::iter(seeds.iter().copied().map(|seed| {
        let mut o = opts.clone();
        o.seed = Some(seed);
        o.netns.clone_from(&netns);
        o.run_dir = Some(SeedsManifest::seed_dir(&dir, seed));
        // Seed runs never write a golden: a multi-seed run judges, it does not bless.
        o.ci = true;
        o.update_golden = false;
        o.progress_label = Some(format!("{} seed {seed}", manifest.scenario));
        let plan =
            RunPlan::new(scenario.clone(), Some(seed), opts.steps).map_err(CommandError::from);
        SLOT.scope(slot.clone(), async move {
            let report = match plan {
                Ok(plan) => judge_plan(plan, None, &o).await,
                Err(e) => Err(e),
            };
            (seed, report)
        })
    }))
    .buffer_unordered(jobs);
    let mut done = 0;
    let say = |line: String| match &slot.progress {
        Some(group) => group.suspend(|| errln!("{line}")),
        None => errln!("{line}"),
    };
    while let Some((seed, report)) = runs.next().await {
        done += 1;
        match report {
            Ok(r) if !util::quiet() => say(format!(
                "{}: seed {seed} ({done}/{total}): {}",
                r.scenario,
                r.summary()
            )),
            Ok(_) => {}
            // A seed that could not even start (invalid input) stops the whole run.
            Err(e) if e.status == ExitStatus::InvalidInput => return Err(e),
            Err(e) => {
                say(format!(
                    "{}: seed {seed} ({done}/{total}): {e}",
                    scenario.name
                ));
                manifest.errors.insert(seed, e.to_string());
                write_seeds(&manifest, &dir)?;
            }
        }
    }
    manifest.ended = Some(chrono::Utc::now().to_rfc3339());
    write_seeds(&manifest, &dir)?;
    let report = super::judged::final_combined_report(&dir, &opts.golden)?;
    report::write_reports(&dir, &report)?;
    Ok(report)
}

/// Write `seeds.json`; a failure to is the run's.
fn write_seeds(m: &SeedsManifest, dir: &Path) -> Result<(), CommandError> {
    m.write(dir).map_err(CommandError::from)
}

/// A self-test's reference: the scenario as written, run on this host into a run directory of
/// its own (`RUN_DIR/reference` when the planted run's directory is fixed). It must complete.
async fn reference_run(
    plan: RunPlan,
    opts: &RunOptions,
) -> Result<(PathBuf, Golden), CommandError> {
    let name = plan.scenario.name.clone();
    let mut ref_opts = judged_live(opts);
    ref_opts.run_dir = opts.run_dir.as_ref().map(|d| d.join("reference"));
    let executed = runner::execute(plan, &ref_opts).await?;
    if executed.end != RunEnd::Completed {
        return Err(CommandError::run_failed(format!(
            "{name}: the self-test's reference run did not complete ({}): {}",
            executed.run_dir.display(),
            executed
                .manifest
                .reason
                .as_deref()
                .unwrap_or("no reason recorded")
        )));
    }
    let golden = judge::reference_golden(&executed.run_dir, &executed.manifest, executed.metrics);
    Ok((executed.run_dir, golden))
}

/// A self-test's reference made already (`RunOptions::reference_run`): a completed run of the
/// scenario's seed and steps.
fn made_reference(dir: &Path, plan: &RunPlan) -> Result<(PathBuf, Golden), CommandError> {
    let (manifest, table) = crate::model::rundir::load(dir)?;
    let s = &plan.scenario;
    if manifest.status != crate::model::rundir::RunStatus::Completed
        || (manifest.seed, manifest.steps) != (s.seed, s.steps)
    {
        return Err(CommandError::invalid(format!(
            "{}: the self-test's reference {} is not a completed run of seed {} and {} steps",
            s.name,
            dir.display(),
            s.seed,
            s.steps
        )));
    }
    Ok((
        dir.to_path_buf(),
        judge::reference_golden(dir, &manifest, table),
    ))
}
