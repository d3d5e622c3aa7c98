//! One function per command, chaining the stages. Errors become exit codes here.

mod assets;
mod history;
pub mod scale;

use crate::cli::{Cli, Command};
use crate::error::{CommandError, ExitStatus};

pub fn init_tracing(verbose: u8) {
    // `-v` and `-vv` raise the harness's own logs only; the HTTP and runtime libraries stay at
    // warnings until `-vvv` (at `-vv` they wrote thousands of lines per run). `-q`: errors only.
    let default = match verbose {
        0 if crate::util::quiet() => "error",
        0 => "warn",
        1 => "warn,rlharness=info,rlharness_torch=info",
        2 => "warn,rlharness=debug,rlharness_torch=debug",
        3 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    // `--color`: by default colours only on a terminal, and never with `NO_COLOR` set
    // (no-color.org): a CI log or a file gets plain text.
    let ansi = crate::util::stderr_color();
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr)
        .try_init();
}

/// Run the parsed command line and return the exit status to use.
pub fn main(cli: Cli) -> ExitStatus {
    crate::util::Ui::from_env(cli.quiet, cli.color).install();
    init_tracing(cli.verbose);
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: failed to start the async runtime: {e}");
            return ExitStatus::RunFailed;
        }
    };
    match rt.block_on(dispatch(cli.command)) {
        Ok(status) => status,
        Err(e) => {
            eprintln!("error: {e}");
            crate::util::annotate_message("rlharness", &e.message);
            e.status
        }
    }
}

async fn dispatch(command: Command) -> Result<ExitStatus, CommandError> {
    match command {
        Command::Check { paths } => Ok(check(&paths)),
        Command::List { root } => {
            // Listing nothing is an input error, as checking nothing is: a mistyped path must
            // not pass a CI step.
            if !root.exists() {
                return Err(CommandError::invalid(format!(
                    "{}: no such scenario file or folder",
                    root.display()
                )));
            }
            let entries = crate::spec::check::list(&root);
            if entries.is_empty() {
                return Err(CommandError::invalid(format!(
                    "{}: no scenario files there",
                    root.display()
                )));
            }
            out!("{}", crate::spec::check::render_list(&entries));
            Ok(ExitStatus::Passed)
        }
        Command::Serve(args) => serve(args).await,
        Command::Run(args) => run(args).await,
        Command::JobEntry(args) => crate::app::scale::ray::job_entry(args).await,
        Command::Record(args) => record(args).await,
        Command::Golden {
            action: crate::cli::GoldenAction::Calibrate(args),
            golden,
        } => {
            let root = crate::cli::golden_store(golden.as_deref(), Some(&args.scenario));
            calibrate(args, &root).await
        }
        Command::Golden { action, golden } => {
            let root = crate::cli::golden_store(golden.as_deref(), None);
            if !root.is_dir() && !matches!(action, crate::cli::GoldenAction::Bless { .. }) {
                return Err(CommandError::invalid(format!(
                    "no golden store at {}: run from the project's root or pass --golden DIR",
                    root.display()
                )));
            }
            golden_command(action, &root)
        }
        Command::Compare {
            run,
            run2,
            golden,
            format,
        } => {
            let golden =
                crate::cli::golden_store(golden.as_deref(), scenario_of_run(&run).as_deref());
            let (report, out) = crate::report::compare_command(&run, run2.as_deref(), &golden)?;
            print_compared(&report, &out, format)?;
            Ok(report.exit_status())
        }
        Command::History {
            dirs,
            golden,
            out,
            min_change,
            format,
        } => history::history(&dirs, &golden, &out, min_change / 100.0, format),
        Command::Proxy(args) => {
            let cfg = crate::proxy::ProxyConfig {
                upstream: args.upstream.clone(),
                record_dir: args.record.clone(),
                body_limit: args.body_limit,
                request_timeout: std::time::Duration::from_secs(args.timeout_s),
            };
            crate::proxy::run_standalone(&args.listen, cfg)
                .await
                .map_err(|e| CommandError::run_failed(format!("proxy: {e}")))?;
            Ok(ExitStatus::Passed)
        }
        Command::Assets {
            target: crate::cli::AssetsTarget::Verl(args),
        } => assets::verl(&args),
        Command::Propagate {
            scenario,
            out,
            set,
            until,
            jobs,
            group: _,
            no_group,
            require_observed,
            knobs,
            no_progress,
        } => {
            let options = crate::propagate::command::MatrixOptions {
                until,
                jobs,
                group: !no_group,
                require_observed,
                knobs,
                progress: !no_progress,
            };
            crate::propagate::command::propagate_command(&scenario, &out, &set, &options).await
        }
    }
}

/// The scenario file a stored run (or multi-seed run) was made from, as `run.json` or
/// `seeds.json` records it: `compare` finds the golden store from it as `run` did. The
/// recorded path is relative to where the run was started; from elsewhere it is looked for
/// under the run folder's ancestors (a run under the project's `reports/` finds the project).
fn scenario_of_run(run: &std::path::Path) -> Option<std::path::PathBuf> {
    ["run.json", "seeds.json"].iter().find_map(|f| {
        let text = std::fs::read_to_string(run.join(f)).ok()?;
        let v: serde_json::Value = serde_json::from_str(&text).ok()?;
        let path = std::path::PathBuf::from(v.get("scenario_path")?.as_str()?);
        if path.is_file() || path.is_absolute() {
            return path.is_file().then_some(path);
        }
        let run = std::fs::canonicalize(run).ok()?;
        run.ancestors()
            .skip(1)
            .map(|a| a.join(&path))
            .find(|p| p.is_file())
    })
}

/// `rlharness check`: every scenario validated, every backend file linted; exit 2 on any error.
pub(crate) fn check(paths: &[std::path::PathBuf]) -> ExitStatus {
    // A folder without one scenario file validates nothing: an input error (a mistyped path,
    // or an unquoted glob that matched nothing), not a pass. A missing path is reported below.
    let default_paths = [std::path::PathBuf::from("scenarios")];
    let given = if paths.is_empty() {
        &default_paths[..]
    } else {
        paths
    };
    let empty: Vec<&std::path::PathBuf> = given
        .iter()
        .filter(|p| p.is_dir())
        .filter(|p| crate::spec::discover(std::slice::from_ref(*p)).is_ok_and(|f| f.is_empty()))
        .collect();
    if !empty.is_empty() {
        for p in empty {
            eprintln!("error: {}: no scenario files there", p.display());
        }
        return ExitStatus::InvalidInput;
    }
    let outcome = crate::spec::check::check(paths);
    let rendered = crate::spec::check::render_check(&outcome);
    out!("{rendered}");
    for error in rendered.lines().filter_map(|l| l.strip_prefix("error: ")) {
        crate::util::annotate_message("rlharness check", error);
    }
    // Knob manifests: validated like a scenario, and covered both ways by their backend YAML.
    let mut manifest_errors = 0;
    for manifest in knob_manifests(paths) {
        let problems = crate::propagate::manifest::check_file(&manifest);
        for p in &problems {
            outln!("error: {p}");
        }
        if problems.is_empty() {
            outln!(
                "ok: knob manifest {} covers its backend",
                manifest.display()
            );
        }
        manifest_errors += problems.len();
    }
    if outcome.is_ok() && manifest_errors == 0 {
        ExitStatus::Passed
    } else {
        ExitStatus::InvalidInput
    }
}

/// `backends/*.knobs.yaml` under each scenarios root that `check` looks at.
fn knob_manifests(paths: &[std::path::PathBuf]) -> Vec<std::path::PathBuf> {
    let default_paths = [std::path::PathBuf::from("scenarios")];
    let paths = if paths.is_empty() {
        &default_paths[..]
    } else {
        paths
    };
    let mut roots = std::collections::BTreeSet::new();
    for p in paths {
        let probe = if p.is_dir() {
            p.join("x.yaml")
        } else {
            p.clone()
        };
        roots.insert(crate::spec::config::scenarios_root(&probe));
    }
    let mut out = Vec::new();
    for root in roots {
        if let Ok(entries) = std::fs::read_dir(root.join("backends")) {
            let mut found: Vec<_> = entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.to_string_lossy().ends_with(".knobs.yaml"))
                .collect();
            found.sort();
            out.extend(found);
        }
    }
    out
}

/// The scenario a `serve` or `proxy` command takes its settings from, if one is named.
fn load_optional_scenario(
    path: Option<&std::path::Path>,
    set: &[String],
) -> Result<Option<crate::spec::Scenario>, CommandError> {
    match path {
        None => Ok(None),
        Some(p) => crate::spec::load_scenario(p, set)
            .map(Some)
            .map_err(|e| CommandError::invalid(e.to_string())),
    }
}

async fn serve(args: crate::cli::ServeArgs) -> Result<ExitStatus, CommandError> {
    let scenario = load_optional_scenario(args.scenario.as_deref(), &args.set)?;
    let seed = scenario.as_ref().map_or(1, |s| s.seed);
    match args.kind {
        crate::cli::ServeKind::Mock if args.train_warm_start => Err(CommandError::invalid(
            "--train-warm-start is an option of `serve torch`: the mock has no weights",
        )),
        crate::cli::ServeKind::Mock => {
            let script = match scenario.map(|s| s.backend) {
                None => crate::backend::MockScript::default(),
                Some(crate::backend::BackendSpec::Mock(script)) => script,
                Some(other) => {
                    return Err(CommandError::invalid(format!(
                        "`serve mock` needs a scenario with a mock backend, not {other:?}"
                    )))
                }
            };
            crate::backend::mock::serve_mock_standalone(&args.host, args.port, script, seed)
                .await
                .map_err(|e| CommandError::run_failed(format!("mock server: {e}")))?;
            Ok(ExitStatus::Passed)
        }
        crate::cli::ServeKind::Torch => serve_torch(args),
    }
}

/// `serve torch`: the `rlharness-torch` executable in the foreground (it alone links
/// libtorch), with the same options.
fn serve_torch(args: crate::cli::ServeArgs) -> Result<ExitStatus, CommandError> {
    let exe = crate::backend::child::locate()?;
    let mut cmd = std::process::Command::new(&exe);
    cmd.args(["--host", &args.host, "--port", &args.port.to_string()]);
    if let Some(s) = &args.scenario {
        cmd.arg("--scenario").arg(s);
    }
    for s in &args.set {
        cmd.args(["--set", s]);
    }
    if args.train_warm_start {
        cmd.arg("--train-warm-start");
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        let e = cmd.exec();
        Err(CommandError::run_failed(format!(
            "cannot start {}: {e}",
            exe.display()
        )))
    }
    #[cfg(not(unix))]
    {
        let status = cmd.status().map_err(|e| {
            CommandError::run_failed(format!("cannot start {}: {e}", exe.display()))
        })?;
        Ok(if status.success() {
            ExitStatus::Passed
        } else {
            ExitStatus::RunFailed
        })
    }
}

fn golden_command(
    action: crate::cli::GoldenAction,
    root: &std::path::Path,
) -> Result<ExitStatus, CommandError> {
    use crate::cli::GoldenAction;
    let (text, status) = match action {
        GoldenAction::Status { scenarios } => crate::golden::golden_status(root, &scenarios)?,
        GoldenAction::Accept { scenarios } => crate::golden::golden_accept(root, &scenarios)?,
        GoldenAction::Reject { scenarios } => crate::golden::golden_reject(root, &scenarios)?,
        GoldenAction::Calibrate(_) => unreachable!("dispatched to `calibrate`"),
        GoldenAction::Bless { run } => golden_bless(&run, root)?,
    };
    out!("{text}");
    Ok(status)
}

/// `rlharness golden bless RUN`: the stored run's series as a pending golden, with the run's
/// provenance. Refused for a run that did not complete, a self-test's planted run, and a run
/// whose plan differs from the scenario file's today (a `--set`, another seed or step count, an
/// edited scenario): its series would not stand for the scenario.
pub(crate) fn golden_bless(
    run: &std::path::Path,
    root: &std::path::Path,
) -> Result<(String, ExitStatus), CommandError> {
    if crate::rundir::is_combined(run) {
        return Err(CommandError::invalid(format!(
            "{} is a multi-seed run: bless one seed's directory (`{}/seed-<S>`) of the \
             scenario's own seed",
            run.display(),
            run.display()
        )));
    }
    let (manifest, table) = crate::report::load_run(run)?;
    let refuse = |why: String| {
        Err(CommandError::invalid(format!(
            "{}: cannot bless: {why}",
            run.display()
        )))
    };
    if manifest.status != crate::rundir::RunStatus::Completed {
        return refuse(format!(
            "the run did not complete (status {:?}{})",
            manifest.status,
            manifest
                .reason
                .as_deref()
                .map(|r| format!(": {r}"))
                .unwrap_or_default()
        ));
    }
    if manifest.reference_run.is_some() || manifest.expected_verdict.is_some() {
        return refuse("it is a self-test's run (planted on purpose)".into());
    }
    let file = std::path::Path::new(&manifest.scenario_path);
    let scenario = crate::spec::load_scenario(file, &[]).map_err(|e| {
        CommandError::invalid(format!(
            "{}: cannot bless: its scenario {}: {e}",
            run.display(),
            file.display()
        ))
    })?;
    let plan = crate::plan::RunPlan::new(scenario, None, None)
        .map_err(|e| CommandError::invalid(e.to_string()))?;
    if plan.plan_hash != manifest.plan_hash {
        return refuse(format!(
            "it was made from another plan than {} resolves to today (plan {} against {}: a \
             --set override, another seed or step count, or an edited scenario)",
            file.display(),
            short(&manifest.plan_hash),
            short(&plan.plan_hash)
        ));
    }
    if plan.scenario.checks.golden.is_empty() {
        return refuse(format!("{} has no golden rules", file.display()));
    }
    let store = crate::golden::GoldenStore::new(root);
    let provenance = crate::compare::provenance_of_run(&manifest, manifest.started.clone());
    let path = store
        .write_pending(
            &plan.scenario.name,
            &manifest.hardware,
            &table,
            &provenance,
            Some(&plan.scenario.checks),
            Some(&crate::compare::band_widths(
                &plan.scenario.checks,
                store
                    .load(&plan.scenario.name, &manifest.hardware)
                    .ok()
                    .flatten()
                    .as_ref(),
            )),
        )
        .map_err(|e| CommandError::invalid(e.to_string()))?;
    Ok((
        format!(
            "pending golden written to {} from {} ({} steps); review with `rlharness golden \
             status`, then `rlharness golden accept {}`\n",
            path.display(),
            run.display(),
            table.len(),
            plan.scenario.name
        ),
        ExitStatus::Passed,
    ))
}

fn short(hash: &str) -> &str {
    &hash[..hash.len().min(8)]
}

pub(crate) use crate::compare::seeds::parse_seed_range;

/// `rlharness golden calibrate`: run the scenario `runs` times with its own seed (or once per
/// seed), side by side up to `jobs`, and write the measured statistics beside its golden.
async fn calibrate(
    args: crate::cli::CalibrateArgs,
    golden_root: &std::path::Path,
) -> Result<ExitStatus, CommandError> {
    use futures_util::StreamExt;
    let crate::cli::CalibrateArgs {
        scenario: file,
        runs,
        seeds,
        jobs,
        out,
        hardware,
        set,
        allow_dirty,
        detect,
    } = args;
    let file = file.as_path();
    let set = set.as_slice();
    let detect = detect.map(|d| parse_fraction(&d)).transpose()?;
    if let Some(fraction) = detect {
        let scenario = crate::spec::load_scenario(file, set)
            .map_err(|e| CommandError::invalid(e.to_string()))?;
        // The hardware key a run would get is known only once its backend runs (a torch
        // engine names its GPU): without `--hardware`, the one calibration of the scenario.
        let base = golden_root.join(&scenario.name);
        let dir = match &hardware {
            Some(hw) => base.join(hw),
            None => {
                let mut found: Vec<std::path::PathBuf> = std::fs::read_dir(&base)
                    .into_iter()
                    .flatten()
                    .flatten()
                    .map(|e| e.path())
                    .filter(|d| d.join("calibration.json").is_file())
                    .collect();
                found.sort();
                if found.len() > 1 {
                    return Err(CommandError::invalid(format!(
                        "--detect: {} has calibrations for several hardware keys ({}): name one \
                         with --hardware",
                        base.display(),
                        found
                            .iter()
                            .filter_map(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )));
                }
                found.pop().unwrap_or_else(|| base.join("cpu"))
            }
        };
        if let Some(cal) = crate::golden::calibration::Calibration::read(&dir)? {
            print_seeds_needed(&scenario.checks, &cal, fraction);
            return Ok(ExitStatus::Passed);
        }
        crate::util::note!(
            "calibrate: no calibration in {} yet: calibrating first",
            dir.display()
        );
    }
    let seeds = match seeds {
        Some(r) => Some(parse_seed_range(&r).map_err(CommandError::invalid)?),
        None => None,
    };
    if ci_env() {
        return Err(CommandError::invalid(
            "refusing to calibrate under CI=true: CI never writes goldens; calibrate locally and \
             commit calibration.json",
        ));
    }
    let commit = crate::runner::env::git_commit();
    if let Some(c) = commit.as_deref().filter(|c| c.ends_with("-dirty")) {
        if !allow_dirty {
            return Err(CommandError::invalid(format!(
                "refusing to calibrate from a tree with uncommitted changes ({c}): a calibration \
                 names the commit it measured; commit first, or pass --allow-dirty to try bands \
                 out (never to commit that calibration)"
            )));
        }
    }
    let scenario =
        crate::spec::load_scenario(file, set).map_err(|e| CommandError::invalid(e.to_string()))?;
    let seeds = seeds.unwrap_or_else(|| vec![scenario.seed; runs.max(1)]);
    // The calibration runs never write a golden of their own (`ci` stays on). Each shows its
    // steps as plain lines (runs side by side interleave them, each line naming its seed).
    let opts = crate::runner::RunOptions {
        set: set.to_vec(),
        hardware,
        step_lines: true,
        ..crate::runner::RunOptions::new(out, golden_root.to_path_buf())
    };
    let total = seeds.len();
    let mut done = Vec::new();
    let mut results = futures_util::stream::iter(seeds.iter().map(|seed| {
        let mut o = opts.clone();
        o.seed = Some(*seed);
        o.progress_label = Some(format!("calibrate {} seed {seed}", scenario.name));
        async move { (*seed, run_one(file, &o).await) }
    }))
    .buffer_unordered(jobs.max(1));
    while let Some((seed, report)) = results.next().await {
        let report = report?;
        if report.run.status != Some(crate::rundir::RunStatus::Completed) {
            return Err(CommandError::run_failed(format!(
                "calibration run with seed {seed} did not complete ({}): {}",
                report.run.dir,
                report.run.reason.as_deref().unwrap_or("no reason recorded")
            )));
        }
        let failed = failed_uncalibrated_rules(&report, &scenario.checks);
        if !failed.is_empty() {
            return Err(CommandError::run_failed(format!(
                "calibration run with seed {seed} failed rules that do not depend on the \
                 calibration ({}): {}; a calibration measures healthy runs only",
                report.run.dir,
                failed.join("; ")
            )));
        }
        done.push((seed, report));
        crate::util::note!("calibrate: {}/{total} runs done (seed {seed})", done.len());
    }
    done.sort_by_key(|(s, _)| *s);
    let first = &done[0].1;
    let tables: Vec<crate::metrics::MetricTable> =
        done.iter().map(|(_, r)| r.metrics.clone()).collect();
    // The default stability rules' windows are measured too, so their bands are calibrated.
    let mut checks = scenario.checks.clone();
    let columns = tables.first().map(|t| t.columns()).unwrap_or_default();
    checks
        .golden
        .0
        .extend(crate::compare::stability::rules(&scenario.checks, &columns, |_| true).0);
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
    let (steps, windows) = crate::golden::calibration::Calibration::measure(&tables, &checks);
    let cal = crate::golden::calibration::Calibration {
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
        crate::util::plain_table(
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
        "written to {} (every window's mean, σ, min and max)",
        path.display()
    );
    if let Some(fraction) = detect {
        print_seeds_needed(&checks, &cal, fraction);
    }
    Ok(ExitStatus::Passed)
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
fn print_seeds_needed(
    checks: &crate::checks::ChecksSpec,
    cal: &crate::golden::calibration::Calibration,
    fraction: f64,
) {
    use crate::compare::expr::fmt_num;
    let rows = crate::compare::seeds::seeds_needed(checks, cal, fraction);
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
            crate::util::plain_table(
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
fn failed_uncalibrated_rules(
    report: &crate::report::Report,
    checks: &crate::checks::ChecksSpec,
) -> Vec<String> {
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

/// `CI=true` (or `1`): the harness never writes the golden store.
fn ci_env() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// The options of `rlharness run` that apply to every scenario.
pub(crate) fn run_options(args: &crate::cli::RunArgs) -> crate::runner::RunOptions {
    crate::runner::RunOptions {
        update_golden: args.update_golden,
        ci: ci_env(),
        direct: args.direct,
        label: args.label.clone(),
        ..args.common.options(
            args.scenarios
                .first()
                .map(std::path::PathBuf::as_path)
                .unwrap_or(std::path::Path::new("")),
        )
    }
}

/// `rlharness run`: every scenario, side by side up to `--jobs` here or as Ray jobs
/// (`--executor ray`); one combined verdict in OUT/index.md, index.html and junit.xml; the
/// worst exit status wins.
pub(crate) async fn run(args: crate::cli::RunArgs) -> Result<ExitStatus, CommandError> {
    let opts = run_options(&args);
    let files =
        crate::spec::discover(&args.scenarios).map_err(|e| CommandError::invalid(e.to_string()))?;
    if files.is_empty() {
        return Err(CommandError::invalid("no scenario files given"));
    }
    let seeds = match &args.seeds {
        Some(r) => {
            let list = parse_seed_range(r).map_err(CommandError::invalid)?;
            if list.len() < 2 {
                return Err(CommandError::invalid(format!(
                    "--seeds {r}: a multi-seed verdict needs at least 2 seeds (use --seed for one)"
                )));
            }
            Some(list)
        }
        None => None,
    };
    if args.jobs == 0 {
        return Err(CommandError::invalid("--jobs 0: at least one job"));
    }
    if !opts.golden.is_dir() {
        crate::util::note!(
            "note: no golden store at {} yet{}: every scenario with golden rules will have no \
             golden (exit 4)",
            opts.golden.display(),
            if args.common.golden.is_some() {
                " (check --golden)"
            } else {
                ""
            }
        );
    }
    let mut entries = match args.executor {
        crate::cli::Executor::Local => {
            let matrix = crate::app::scale::local::LocalMatrix {
                jobs: args.jobs,
                seeds,
                seed_jobs: args.jobs,
            };
            crate::app::scale::local::run_matrix(&files, &opts, &matrix).await
        }
        crate::cli::Executor::Ray => crate::app::scale::ray::run_matrix(&files, &args).await?,
    };
    if args.fail_on_skip {
        // The index and JUnit say what the exit status says: a skip is a failed check here.
        for e in entries.iter_mut().filter(|e| e.skipped) {
            e.status = e.status.worst(ExitStatus::CheckFailed);
            e.summary = format!("skipped, a failure under --fail-on-skip: {}", e.summary);
        }
    }
    crate::fsx::create_dir_all(&args.common.out)
        .map_err(|e| CommandError::run_failed(e.to_string()))?;
    crate::app::scale::index::write_index(&args.common.out, &entries)
        .map_err(|e| CommandError::run_failed(format!("the combined verdict: {e}")))?;
    outln!(
        "{}",
        crate::app::scale::index::tally(&args.common.out, &entries)
    );
    let skipped: Vec<String> = entries
        .iter()
        .filter(|e| e.skipped)
        .map(|e| e.scenario.clone())
        .collect();
    Ok(fail_on_skip(
        crate::app::scale::index::worst(&entries),
        &skipped,
        args.fail_on_skip,
    ))
}

/// `--fail-on-skip`: a skipped scenario is a failed check (exit 1), so a run where nothing ran
/// cannot be green. Worse statuses (2, 3, 4) keep winning.
pub(crate) fn fail_on_skip(worst: ExitStatus, skipped: &[String], enabled: bool) -> ExitStatus {
    if !enabled || skipped.is_empty() {
        return worst;
    }
    eprintln!(
        "error: --fail-on-skip: {} scenario(s) skipped: {}",
        skipped.len(),
        skipped.join(", ")
    );
    worst.worst(ExitStatus::CheckFailed)
}

/// Plan, execute, judge and report one scenario.
pub async fn run_one(
    file: &std::path::Path,
    opts: &crate::runner::RunOptions,
) -> Result<crate::report::Report, CommandError> {
    use crate::report::Report;
    let scenario = crate::spec::load_scenario(file, &opts.set)
        .map_err(|e| CommandError::invalid(e.to_string()))?;
    let plan = crate::plan::RunPlan::new(scenario, opts.seed, opts.steps)
        .map_err(|e| CommandError::invalid(e.to_string()))?;
    let unmet = plan.scenario.requires.unmet();
    if !unmet.is_empty() {
        return Ok(Report::skipped(&plan.scenario.name, &unmet.join("; ")));
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
            let reference = reference_run(plan, opts).await?;
            let mut set = opts.set.clone();
            set.extend(st.plant);
            let planted = crate::spec::load_scenario(file, &set)
                .map_err(|e| CommandError::invalid(e.to_string()))?;
            let plan = crate::plan::RunPlan::new(planted, opts.seed, opts.steps)
                .map_err(|e| CommandError::invalid(e.to_string()))?;
            (plan, Some(reference))
        }
    };
    judge_plan(plan, reference, opts).await
}

/// Execute one planned run and judge it (against `reference`, a self-test's reference run, or
/// the store's golden), writing its reports.
async fn judge_plan(
    plan: crate::plan::RunPlan,
    reference: Option<(std::path::PathBuf, crate::golden::Golden)>,
    opts: &crate::runner::RunOptions,
) -> Result<crate::report::Report, CommandError> {
    use crate::report::{Reference, Report};
    let executed = crate::runner::execute(plan, opts).await?;
    let crate::runner::Executed {
        mut manifest,
        env,
        plan,
        run_dir,
        end,
        metrics,
        trainer_tail,
        ..
    } = executed;
    let store = crate::golden::GoldenStore::with_ci(&opts.golden, opts.ci);
    let golden = match &reference {
        Some((dir, golden)) => {
            manifest.reference_run = Some(dir.display().to_string());
            manifest
                .write(&run_dir)
                .map_err(|e| CommandError::run_failed(e.to_string()))?;
            Some(golden.clone())
        }
        None => store
            .load(&plan.scenario.name, &env.hardware)
            .map_err(|e| CommandError::invalid(e.to_string()))?,
    };
    // The one judge, on what the run directory stores (run.json, metrics.csv): `rlharness
    // compare RUN` calls it on the same facts and writes the same verdict.
    let verdict = crate::compare::judge_run(
        &crate::compare::RunRecord::of(&manifest, &metrics),
        golden.as_ref(),
    );
    // What it was judged against, so that `compare RUN` can tell a re-blessed golden.
    if let Some(g) = &golden {
        manifest.judged_against = Some(crate::compare::judged_against(&manifest.checks, g));
        manifest
            .write(&run_dir)
            .map_err(|e| CommandError::run_failed(e.to_string()))?;
    }
    // The bless flow: a completed run without a golden (or under --update-golden) writes a
    // pending one for review; CI never writes.
    let completed = end == crate::runner::RunEnd::Completed;
    if completed
        && reference.is_none()
        && (golden.is_none() || opts.update_golden)
        && !plan.scenario.checks.golden.is_empty()
    {
        let provenance =
            crate::compare::provenance_of_run(&manifest, chrono::Utc::now().to_rfc3339());
        match store.write_pending(
            &plan.scenario.name,
            &env.hardware,
            &metrics,
            &provenance,
            Some(&plan.scenario.checks),
            Some(&crate::compare::band_widths(
                &plan.scenario.checks,
                golden.as_ref(),
            )),
        ) {
            Ok(path) => manifest.pending_golden = Some(path.display().to_string()),
            Err(e) if opts.ci => crate::util::note!("note: {e}"),
            Err(e) => return Err(CommandError::invalid(e.to_string())),
        }
        manifest
            .write(&run_dir)
            .map_err(|e| CommandError::run_failed(e.to_string()))?;
    }
    let reference = match reference {
        Some((_, g)) => Some(Reference::from_reference_run(&g)),
        None => golden.as_ref().map(Reference::from_golden),
    };
    let mut report = Report::from_run(&run_dir, &manifest, metrics, reference, verdict);
    report.trainer_tail = trainer_tail;
    crate::report::write_reports(&run_dir, &report)
        .map_err(|e| CommandError::run_failed(e.to_string()))?;
    Ok(report)
}

/// `rlharness run SCENARIO --seeds A..B`, and a multi-seed self-test: the scenario (with a
/// self-test's plant, run under the name of the scenario whose golden it is judged against)
/// once per seed into `DIR/seed-<S>/`, `jobs` side by side, each judged against the golden alone
/// and never writing one; then the combined verdict, made from what the directories store
/// (`compare::judge_combined`, as `compare DIR` makes it).
pub(crate) async fn run_seeds(
    file: &std::path::Path,
    seeds: &[u64],
    jobs: usize,
    opts: &crate::runner::RunOptions,
) -> Result<crate::report::Report, CommandError> {
    use crate::rundir::SeedsManifest;
    use futures_util::StreamExt;
    let mut set = opts.set.clone();
    let selftest = crate::spec::load_scenario(file, &set)
        .map_err(|e| CommandError::invalid(e.to_string()))?
        .selftest;
    if let Some(st) = &selftest {
        set.extend(st.plant.iter().cloned());
    }
    let mut scenario =
        crate::spec::load_scenario(file, &set).map_err(|e| CommandError::invalid(e.to_string()))?;
    let unmet = scenario.requires.unmet();
    if !unmet.is_empty() {
        return Ok(crate::report::Report::skipped(
            &scenario.name,
            &unmet.join("; "),
        ));
    }
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
    let plan = crate::plan::RunPlan::new(scenario.clone(), None, opts.steps)
        .map_err(|e| CommandError::invalid(e.to_string()))?;
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
    };
    let dir = match &opts.run_dir {
        Some(d) => {
            crate::fsx::create_dir_all(d).map_err(|e| CommandError::run_failed(e.to_string()))?;
            write_seeds(&manifest, d)?;
            d.clone()
        }
        None => {
            crate::runner::create_run_dir(&opts.out, &manifest.scenario, &plan.plan_hash, |d| {
                write_seeds(&manifest, d)
            })?
        }
    };
    let jobs = jobs.max(1);
    let total = seeds.len();
    // Seeds side by side: one bar each, drawn together (in the scenario's slot, whose child
    // environment they keep); one after the other: the scenario's own bar or lines. Step lines
    // name their seed either way.
    let slot = {
        let mut slot = crate::slot::current_slot();
        if jobs > 1 && opts.progress {
            slot.progress = Some(indicatif::MultiProgress::new());
        }
        slot
    };
    // Owned seeds: the stream's future stays `Send` for any caller (a `--jobs` task).
    let mut runs = futures_util::stream::iter(seeds.iter().copied().map(|seed| {
        let mut o = opts.clone();
        o.seed = Some(seed);
        o.run_dir = Some(SeedsManifest::seed_dir(&dir, seed));
        // Seed runs never write a golden: a multi-seed run judges, it does not bless.
        o.ci = true;
        o.update_golden = false;
        o.progress_label = Some(format!("{} seed {seed}", manifest.scenario));
        let plan = crate::plan::RunPlan::new(scenario.clone(), Some(seed), opts.steps)
            .map_err(|e| CommandError::invalid(e.to_string()));
        crate::slot::SLOT.scope(slot.clone(), async move {
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
        Some(group) => group.suspend(|| eprintln!("{line}")),
        None => eprintln!("{line}"),
    };
    while let Some((seed, report)) = runs.next().await {
        done += 1;
        match report {
            Ok(r) if !crate::util::quiet() => say(format!(
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
    let report = crate::report::seeds::combined_report(&dir, &opts.golden)?;
    crate::report::write_reports(&dir, &report)
        .map_err(|e| CommandError::run_failed(e.to_string()))?;
    Ok(report)
}

/// Write `seeds.json`; a failure to is the run's.
fn write_seeds(
    m: &crate::rundir::SeedsManifest,
    dir: &std::path::Path,
) -> Result<(), CommandError> {
    m.write(dir)
        .map_err(|e| CommandError::run_failed(e.to_string()))
}

/// A self-test's reference: the scenario as written, run on this host into a run directory of
/// its own (`RUN_DIR/reference` when the planted run's directory is fixed). It must complete.
async fn reference_run(
    plan: crate::plan::RunPlan,
    opts: &crate::runner::RunOptions,
) -> Result<(std::path::PathBuf, crate::golden::Golden), CommandError> {
    let name = plan.scenario.name.clone();
    let mut ref_opts = opts.clone();
    ref_opts.run_dir = opts.run_dir.as_ref().map(|d| d.join("reference"));
    let executed = crate::runner::execute(plan, &ref_opts).await?;
    if executed.end != crate::runner::RunEnd::Completed {
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
    let golden =
        crate::compare::reference_golden(&executed.run_dir, &executed.manifest, executed.metrics);
    Ok((executed.run_dir, golden))
}

/// `rlharness record`: run a scenario through the proxy, keep its whole wire traffic as a
/// cassette and install it as `GOLDEN/<scenario>/<hardware>/cassette/` (replacing the old one)
/// once the run completed. The run is not judged: a recording of a few steps is not a
/// convergence run.
async fn record(args: crate::cli::RecordArgs) -> Result<ExitStatus, CommandError> {
    use crate::backend::replay::cassette::{Cassette, META_FILE, METRICS_FILE};
    let opts = args.common.options(&args.scenario);
    if ci_env() {
        return Err(CommandError::invalid(
            "refusing to record under CI=true: CI never writes the golden store; record \
             locally and commit the cassette",
        ));
    }
    let scenario = crate::spec::load_scenario(&args.scenario, &opts.set)
        .map_err(|e| CommandError::invalid(e.to_string()))?;
    if matches!(
        scenario.backend,
        crate::backend::BackendSpec::Replay { .. } | crate::backend::BackendSpec::None
    ) {
        return Err(CommandError::invalid(format!(
            "{}: `record` needs a scenario with a backend to record (mock, torch or remote)",
            args.scenario.display()
        )));
    }
    let plan = crate::plan::RunPlan::new(scenario, opts.seed, opts.steps)
        .map_err(|e| CommandError::invalid(e.to_string()))?;
    let unmet = plan.scenario.requires.unmet();
    if !unmet.is_empty() {
        return Err(CommandError::invalid(format!(
            "{}: cannot record here: {}",
            args.scenario.display(),
            unmet.join("; ")
        )));
    }
    let executed = crate::runner::execute_recording(plan, &opts).await?;
    let recorded = executed.run_dir.join("cassette");
    if executed.end != crate::runner::RunEnd::Completed {
        return Err(CommandError::run_failed(format!(
            "the recording run did not complete ({}); the partial cassette stays in {} and no \
             cassette was installed",
            executed
                .end
                .reason()
                .unwrap_or_else(|| executed.end.status().into()),
            recorded.display()
        )));
    }
    let fail = |e: String| CommandError::run_failed(format!("record: {e}"));
    let meta = serde_json::json!({
        "format": "rlharness-cassette/1",
        "scenario": executed.plan.scenario.name,
        "hardware": executed.env.hardware,
        "device": executed.env.device,
        "seed": executed.plan.scenario.seed,
        "steps": executed.plan.scenario.steps,
        "plan_hash": executed.plan.plan_hash,
        "harness_version": executed.manifest.harness_version,
        "git_commit": executed.manifest.git_commit,
        "torch_version": executed.env.torch_version,
        "recorded": executed.ended.to_rfc3339(),
    });
    let text = serde_json::to_string_pretty(&meta).map_err(|e| fail(e.to_string()))?;
    crate::fsx::write_atomic(&recorded.join(META_FILE), text.as_bytes())
        .map_err(|e| fail(e.to_string()))?;
    std::fs::copy(
        executed.run_dir.join("metrics.csv"),
        recorded.join(METRICS_FILE),
    )
    .map_err(|e| fail(format!("cannot copy the run's metrics.csv: {e}")))?;
    // What is installed must read back: every body decompressed and checked.
    let cassette = Cassette::load(&recorded).map_err(|e| fail(e.to_string()))?;
    let target = opts
        .golden
        .join(&executed.plan.scenario.name)
        .join(&executed.env.hardware)
        .join("cassette");
    let replaced = target.exists();
    if replaced && !args.force {
        return Err(CommandError::invalid(format!(
            "{} already holds a cassette: pass --force to replace it (this recording stays in \
             {})",
            target.display(),
            recorded.display()
        )));
    }
    crate::backend::replay::install_cassette(&recorded, &target).map_err(fail)?;
    outln!(
        "{}: recorded {} exchanges ({} steps, {:.1} MiB of bodies) into {}{}",
        executed.plan.scenario.name,
        cassette.exchanges.len(),
        executed.plan.scenario.steps,
        cassette.body_bytes() as f64 / (1024.0 * 1024.0),
        target.display(),
        if replaced {
            " (replacing the cassette there)"
        } else {
            ""
        }
    );
    Ok(ExitStatus::Passed)
}

/// What `compare` prints: a terminal summary, the Markdown report, or `verdict.json`.
fn print_compared(
    report: &crate::report::Report,
    out: &std::path::Path,
    format: crate::cli::CompareFormat,
) -> Result<(), CommandError> {
    use crate::cli::CompareFormat;
    match format {
        CompareFormat::Summary => {
            out!(
                "{}",
                crate::report::render_terminal(
                    report,
                    Some(&out.display().to_string()),
                    crate::report::terminal::stdout_color()
                )
            );
        }
        CompareFormat::Md => out!("{}", crate::report::render_markdown(report)),
        CompareFormat::Json => {
            let path = out.join("verdict.json");
            let text = std::fs::read_to_string(&path).map_err(|e| {
                CommandError::run_failed(format!("cannot read {}: {e}", path.display()))
            })?;
            outln!("{}", text.trim_end());
        }
    }
    Ok(())
}
