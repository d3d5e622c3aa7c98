//! The combined verdict of a multi-seed run (`rlharness run SCENARIO --seeds A..B`), from what
//! its directory stores (`seeds.json` and one run directory per seed): each seed re-judged
//! against the golden alone (`seed:<S>`), then the seeds' distribution against the golden's
//! calibration (`seeds:<metric>`, see `seeds`). `run` and `compare DIR` both call
//! [`judge_combined`], so both write the same verdict.

use std::path::{Path, PathBuf};

use super::budget::gates_in_a_seed;
use super::headline::{Headline, Judged};
use super::seeds::{judge_seeds, SeedRun};
use super::stored::{StoredError, StoredRun};
use super::verdict::{seed_rule_id, Evidence, Outcome, RuleStatus, RuleVerdict, Verdict};
use crate::model::golden::{Golden, GoldenError, GoldenStore, JudgedAgainst};
use crate::model::rundir::{RunStatus, SeedsFileError, SeedsManifest, MANIFEST_FILE};

#[derive(Debug, thiserror::Error)]
pub enum CombinedError {
    #[error(transparent)]
    Seeds(#[from] SeedsFileError),
    #[error(transparent)]
    Stored(#[from] StoredError),
    #[error(transparent)]
    Golden(#[from] GoldenError),
}

/// A multi-seed run judged: its directory, its seeds, their golden and the combined verdict.
pub(crate) struct Combined {
    pub(crate) dir: PathBuf,
    pub(crate) manifest: SeedsManifest,
    /// The seeds that ran, each re-judged against the golden alone, in seed order.
    pub(crate) seeds: Vec<(u64, StoredRun)>,
    /// The golden the seeds' distribution is judged against (with its calibration).
    pub(crate) golden: Option<Golden>,
    pub(crate) verdict: Verdict,
    /// How the combined run ended: completed, or failed or interrupted by its seeds.
    pub(crate) status: RunStatus,
    /// Why, when it did not complete: the seeds that broke, or how many never ran.
    pub(crate) reason: Option<String>,
    /// What the combined verdict is judged against now (`None` without a golden).
    pub(crate) judged_against: Option<JudgedAgainst>,
}

impl Combined {
    /// What decides the combined run's headline and exit status.
    pub(crate) fn judged(&self) -> Judged<'_> {
        Judged {
            verdict: Some(&self.verdict),
            status: Some(self.status),
            reason: self.reason.as_deref(),
            expected: self.manifest.expected_verdict.as_ref(),
            ..Judged::default()
        }
    }
}

/// The combined verdict of the multi-seed run in `dir`, from what it stores.
pub(crate) fn judge_combined(dir: &Path, golden_root: &Path) -> Result<Combined, CombinedError> {
    let manifest = SeedsManifest::read(dir)?;
    let mut seeds = Vec::new();
    let mut absent = Vec::new();
    let mut errored = Vec::new();
    for seed in &manifest.seeds {
        let sd = SeedsManifest::seed_dir(dir, *seed);
        if let Some(e) = manifest.errors.get(seed) {
            errored.push((*seed, e.clone()));
        } else if sd.join(MANIFEST_FILE).is_file() {
            seeds.push((*seed, StoredRun::judge(&sd, golden_root)?));
        } else {
            absent.push(*seed);
        }
    }
    let first = seeds.first().map(|(_, r)| r);
    let golden = match first {
        Some(r) => GoldenStore::new(golden_root).load(
            manifest.golden.as_deref().unwrap_or(&manifest.scenario),
            &r.manifest.hardware,
        )?,
        None => None,
    };
    // The checks the seeds ran with (the same for every seed).
    let checks = first.map(|r| r.manifest.checks.clone()).unwrap_or_default();
    let runs: Vec<SeedRun> = seeds
        .iter()
        .map(|(seed, r)| {
            let judged = r.judged();
            let status = seed_status(&judged);
            let mut summary = judged.summary();
            if status == RuleStatus::Pass && judged.headline() == Headline::Failed {
                summary.push_str(
                    " on its calibrated bands only, which the `seeds:` family judges in a \
                     multi-seed verdict (not gating here)",
                );
            }
            SeedRun {
                seed: *seed,
                table: &r.metrics,
                status,
                summary,
                dir: r.dir.display().to_string(),
            }
        })
        .collect();
    let mut verdict = judge_seeds(&runs, &checks, golden.as_ref());
    name_failing_rules_inside_seeds(&mut verdict, &seeds);
    add_unjudged_seed_rules(&mut verdict, &errored, &absent);
    let mut broken: Vec<String> = seeds
        .iter()
        .filter(|(_, r)| r.judged().headline() == Headline::RunFailed)
        .map(|(s, r)| format!("seed {s}: {}", r.judged().summary()))
        .collect();
    broken.extend(errored.iter().map(|(s, e)| format!("seed {s}: {e}")));
    let (status, reason) = combined_status(&broken, &absent);
    let judged_against = golden.as_ref().map(|g| super::judged_against(&checks, g));
    Ok(Combined {
        dir: dir.to_path_buf(),
        manifest,
        seeds,
        golden,
        verdict,
        status,
        reason,
        judged_against,
    })
}

/// How one seed's own verdict counts in the combined one: as it is, except that the rules the
/// `seeds:` family judges better (its calibrated bands) do not gate (`budget::gates_in_a_seed`).
pub(crate) fn seed_status(r: &Judged<'_>) -> RuleStatus {
    match r.headline() {
        Headline::Passed | Headline::ExpectedFailure | Headline::Skipped => RuleStatus::Pass,
        Headline::NoGolden => RuleStatus::Missing,
        Headline::Failed
            if r.verdict.is_some_and(|v| {
                v.grid_mismatch.is_none() && !v.failing().any(gates_in_a_seed)
            }) =>
        {
            RuleStatus::Pass
        }
        Headline::RunFailed | Headline::Failed => {
            if r.verdict.map(|v| v.outcome) == Some(Outcome::Improved) {
                RuleStatus::Improved
            } else {
                RuleStatus::Regressed
            }
        }
    }
}

/// Record in each failing `seed:<S>` rule's evidence the rules of that seed's own verdict that
/// decide it (`budget::gates_in_a_seed`), so that a scenario can expect exactly those to fail
/// (`expected_verdict.may_also_fail: [{rule: "seed:<S>/<rule id>", ...}]`).
fn name_failing_rules_inside_seeds(verdict: &mut Verdict, seeds: &[(u64, StoredRun)]) {
    for (seed, run) in seeds {
        let id = seed_rule_id(*seed);
        let Some(rule) = verdict
            .rules
            .iter_mut()
            .find(|r| r.rule == id && r.status != RuleStatus::Pass)
        else {
            continue;
        };
        if let Some(own) = run.judged().verdict {
            rule.evidence.failing_rules = own
                .failing()
                .filter(|r| gates_in_a_seed(r))
                .map(|r| r.rule.clone())
                .collect();
        }
    }
}

/// Add a `seed:<S>` rule for each seed that could not be judged: a regression for a seed whose
/// run failed to be made, a missing rule for one that never started.
fn add_unjudged_seed_rules(verdict: &mut Verdict, errored: &[(u64, String)], absent: &[u64]) {
    let rule = |seed: u64, status: RuleStatus, message: String| RuleVerdict {
        rule: seed_rule_id(seed),
        status,
        evidence: Evidence {
            message,
            ..Default::default()
        },
        metrics: Vec::new(),
        failing_steps: Vec::new(),
        points: Vec::new(),
        fail_fast: None,
    };
    for (seed, e) in errored {
        verdict.rules.push(rule(
            *seed,
            RuleStatus::Regressed,
            format!("seed {seed}: the run failed: {e}"),
        ));
        verdict.outcome = Outcome::Regressed;
    }
    // A seed that never started (the run was stopped before it) is a rule of its own.
    for seed in absent {
        verdict.rules.push(rule(
            *seed,
            RuleStatus::Missing,
            format!("seed {seed}: no run directory (the multi-seed run stopped before it)"),
        ));
        if verdict.outcome == Outcome::Passed {
            verdict.outcome = Outcome::Missing;
        }
    }
}

/// The combined run's status and reason from the seeds that broke (`broken`) or never ran
/// (`absent`).
fn combined_status(broken: &[String], absent: &[u64]) -> (RunStatus, Option<String>) {
    let status = if broken.is_empty() && absent.is_empty() {
        RunStatus::Completed
    } else if broken.is_empty() {
        RunStatus::Interrupted
    } else {
        RunStatus::Failed
    };
    let reason = (!broken.is_empty())
        .then(|| broken.join("; "))
        .or_else(|| (!absent.is_empty()).then(|| format!("{} seed(s) never ran", absent.len())));
    (status, reason)
}
