//! `rlharness golden audit`: the judge audits a scenario's verdict (`judge::audit`).

use std::path::Path;

use crate::app::cli::{self, AuditArgs, AuditFormat};
use crate::app::errors::Failure;
use crate::judge::audit::{audit as run_audit, Audit, AuditOptions};
use crate::model::checks::ChecksSpec;
use crate::model::error::{CommandError, ExitStatus};
use crate::model::golden::audit_record::{AuditFigures, AuditRecord, AUDIT_FILE};
use crate::model::golden::{Golden, GoldenStore};
use crate::model::util;

/// `rlharness golden audit SCENARIO`: the audit printed (a summary, or JSON); exit 1 when it
/// found a problem (a false-alarm rate above the budget, a rule that cannot fail).
pub(crate) fn audit(args: &AuditArgs, golden: Option<&Path>) -> Result<ExitStatus, CommandError> {
    let golden_root = cli::golden_store(golden, Some(&args.scenario));
    let scenario = crate::run::plan::load_checked(&args.scenario, &[])?;
    if args.draws == 0 {
        return Err(CommandError::invalid("--draws must be at least 1"));
    }
    let dir = super::calibrate::calibration_dir(
        &golden_root,
        &scenario.name,
        args.hardware.as_deref(),
        "golden audit",
    )?;
    let hardware = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let store = GoldenStore::new(&golden_root);
    let g = store.load(&scenario.name, &hardware)?.ok_or_else(|| {
        CommandError::invalid(format!(
            "no golden for `{}` in {}: nothing to audit",
            scenario.name,
            dir.display()
        ))
    })?;
    let opts = AuditOptions {
        draws: args.draws,
        power_draws: args.power_draws,
        seeds: args.seeds.max(1),
        rng_seed: args.rng_seed,
    };
    util::note!(
        "audit: {} synthetic verdict(s) of {} seed(s) of {} against {}",
        opts.draws,
        opts.seeds,
        scenario.name,
        dir.display()
    );
    let mut a = run_audit(&scenario.name, &scenario.checks, &g, opts)?;
    a.stored = Some(
        match &g.audit {
            _ if args.save => "saved",
            None => "none",
            Some(r) if r.holds_for(&g, &scenario.checks) => "holds",
            Some(_) => "stale",
        }
        .to_string(),
    );
    if args.save {
        save(&a, &scenario.checks, &g)?;
    }
    match args.format {
        AuditFormat::Json => {
            let text = serde_json::to_string_pretty(&a).map_err(Failure::AuditJson)?;
            outln!("{text}");
        }
        AuditFormat::Summary => outln!("{}", summary(&a)),
    }
    Ok(if a.problems.is_empty() {
        ExitStatus::Passed
    } else {
        ExitStatus::CheckFailed
    })
}

/// `--save`: the audit's rate into the golden's `audit.json`, beside the entries of other seed
/// counts made for the same golden, calibration and checks.
fn save(a: &Audit, checks: &ChecksSpec, g: &Golden) -> Result<(), CommandError> {
    // The reward's rule: the one a reader asks "how small a drop does it catch?" of.
    let reward = if a.seeds > 1 {
        "seeds:critic/rewards/mean"
    } else {
        "golden:critic/rewards/mean"
    };
    let figures = AuditFigures {
        seeds: a.seeds,
        draws: a.draws,
        false_alarms: a.false_alarms,
        false_alarm_rate: a.false_alarm_rate,
        false_alarm_ci: a.false_alarm_ci,
        smallest_shift: a
            .rules
            .iter()
            .find(|r| r.rule == reward)
            .and_then(|r| r.smallest_shift.clone()),
    };
    let old = AuditRecord::read(&g.dir)?;
    AuditRecord::updated(old, g, checks, figures).write(&g.dir)?;
    util::note!("audit: saved to {}", g.dir.join(AUDIT_FILE).display());
    Ok(())
}

/// The audit as a person reads it: the rate with its interval, then a line per rule.
fn summary(a: &Audit) -> String {
    let pct = |x: f64| format!("{:.2}%", 100.0 * x);
    let mut out = format!(
        "{}: {} {}: false alarms {} of {} ({}, 95% interval {}..{}) against a budget of {}; \
         {} calibration runs{}, {} window(s) share the budget\n",
        a.scenario,
        a.seeds,
        if a.seeds == 1 {
            "seed (single runs)"
        } else {
            "seeds per verdict"
        },
        a.false_alarms,
        a.draws,
        pct(a.false_alarm_rate),
        pct(a.false_alarm_ci[0]),
        pct(a.false_alarm_ci[1]),
        pct(a.alpha_run),
        a.calibration_runs,
        if a.calibration_values {
            ""
        } else {
            " (summaries only)"
        },
        a.budget_tests
    );
    let rows: Vec<Vec<String>> = a
        .rules
        .iter()
        .map(|r| {
            vec![
                r.rule.clone(),
                r.share.map_or("-".into(), |s| format!("{s:.4}")),
                pct(r.fire_rate),
                r.fires_on_calibration_runs.to_string(),
                r.smallest_shift.clone().unwrap_or_else(|| {
                    if r.cannot_fail {
                        "CANNOT FAIL".into()
                    } else {
                        "-".into()
                    }
                }),
                r.band.clone().unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    out.push_str(&util::plain_table(
        &[
            "rule",
            "share",
            "fires",
            "on calibration runs",
            "caught 80% at",
            "band (first window)",
        ],
        &rows,
        &[false, true, true, true, true, false],
    ));
    match a.stored.as_deref() {
        Some("stale") => out.push_str(
            "\nnote: the golden's audit.json was made for another golden, calibration or \
             checks: verdicts do not state it (`--save` replaces it)",
        ),
        Some("none") => out.push_str(
            "\nnote: no audit.json beside the golden: verdicts state no audited rate (`--save`)",
        ),
        _ => {}
    }
    for w in &a.warnings {
        out.push_str(&format!("\nwarning: {w}"));
    }
    for p in &a.problems {
        out.push_str(&format!("\nerror: {p}"));
    }
    out
}
