//! The scenario's `driver` block: which driver trains (`DriverSpec`), and the builtin driver's
//! own settings (its task, scorer, planted bugs, retry policy). The driver reads it
//! (the `driver` module re-exports it) and adds what it does with it (`RetrySpec::policy`).

use rlharness_arctic::task::scorer::ScorerConfig;
use rlharness_arctic::task::ArithConfig;

use super::CommandDriverSpec;

/// The scenario's `driver` block.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum DriverSpec {
    /// The builtin GRPO driver.
    Builtin(BuiltinDriverSpec),
    /// An external trainer started as a command (verl's launcher).
    Command(CommandDriverSpec),
}

impl DriverSpec {
    /// The block's `kind:` as the scenario writes it.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            DriverSpec::Builtin(_) => "builtin",
            DriverSpec::Command(_) => "command",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Default, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct BuiltinDriverSpec {
    #[serde(default)]
    pub(crate) task: TaskSpec,
    #[serde(default)]
    pub(crate) scorer: ScorerConfig,
    /// Bugs to plant on purpose, so the harness's own tests prove it would notice them.
    #[serde(default)]
    pub(crate) plant: Vec<Plant>,
    /// Resend policy. Absent: the real on-prem client's behaviour, which never sends a call
    /// twice (its first non-2xx answer raises). A scenario opts in to retries explicitly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) retry: Option<RetrySpec>,
}

/// An opt-in retry policy (`driver.retry`): transient failures (a 502/503/504 answer, a
/// refused or dropped connection) of idempotent routes are sent again, at most `attempts`
/// sends in all, with a doubling backoff from `first_backoff_ms` up to `max_backoff_ms`.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RetrySpec {
    pub(crate) attempts: u32,
    #[serde(default = "default_first_backoff_ms")]
    pub(crate) first_backoff_ms: u64,
    #[serde(default = "default_max_backoff_ms")]
    pub(crate) max_backoff_ms: u64,
}

fn default_first_backoff_ms() -> u64 {
    200
}
fn default_max_backoff_ms() -> u64 {
    2000
}

/// A deliberate driver bug (self-tests of the harness).
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum Plant {
    /// Never sync weights to the sampler: the reward stays flat.
    SkipWeightSync,
    /// Skip every weight sync from the one before this step's rollout on: the sampler samples
    /// with stale weights from this step (`skip_weight_sync_from: 3` leaves steps 1 and 2
    /// synced). The smallest skipped sync a window median can see (docs/verdicts.md).
    SkipWeightSyncFrom(u64),
    /// The Arctic integration's original bug: under ZoRRo the logits knobs travel only in
    /// `meta`, never in `ds_worker_config`, where the ZoRRo server reads them.
    LogitsInMetaOnly,
    /// Drop one key from every call's `meta`.
    DropMetaKey(String),
    /// Add this to every sample's reward (`reward_offset: -0.1`): the logged reward moves by
    /// exactly that much, while GRPO's group-normalised advantages, and so the learning, stay
    /// the same. The verdicts' power is measured with it (`ci/bench-verdicts.sh`).
    RewardOffset(f64),
}

impl BuiltinDriverSpec {
    /// What a planted reward offset adds to every sample's reward (0 without one).
    pub(crate) fn reward_offset(&self) -> f64 {
        self.plant
            .iter()
            .map(|p| match p {
                Plant::RewardOffset(d) => *d,
                _ => 0.0,
            })
            .sum()
    }

    /// Whether a planted bug skips the weight sync that precedes `step`'s rollout (the sync
    /// at start-up precedes step 1; the one after step `s`'s update precedes step `s + 1`).
    pub(crate) fn skips_sync_before(&self, step: u64) -> bool {
        self.plant.iter().any(|p| match p {
            Plant::SkipWeightSync => true,
            Plant::SkipWeightSyncFrom(from) => step >= *from,
            _ => false,
        })
    }
}

#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(tag = "name", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum TaskSpec {
    Arith(ArithConfig),
}

impl Default for TaskSpec {
    fn default() -> Self {
        TaskSpec::Arith(ArithConfig::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(plant: &str) -> BuiltinDriverSpec {
        serde_json::from_str(&format!(r#"{{"plant": {plant}}}"#)).unwrap()
    }

    #[test]
    fn a_skipped_sync_from_a_step_leaves_the_earlier_ones() {
        let from3 = spec(r#"[{"skip_weight_sync_from": 3}]"#);
        let skipped: Vec<u64> = (1..=5).filter(|s| from3.skips_sync_before(*s)).collect();
        assert_eq!(skipped, [3, 4, 5]);
        let all = spec(r#"["skip_weight_sync"]"#);
        assert!((1..=5).all(|s| all.skips_sync_before(s)));
        let none = spec("[]");
        assert!(!(1..=5).any(|s| none.skips_sync_before(s)));
    }
}
