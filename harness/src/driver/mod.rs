//! Drivers: the builtin GRPO client of the Arctic API, and (later) external commands.

use crate::task::scorer::ScorerConfig;
use crate::task::ArithConfig;

/// The scenario's `driver` block.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum DriverSpec {
    /// The builtin GRPO driver.
    Builtin(BuiltinDriverSpec),
}

#[derive(Debug, Clone, PartialEq, Default, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct BuiltinDriverSpec {
    #[serde(default)]
    pub task: TaskSpec,
    #[serde(default)]
    pub scorer: ScorerConfig,
}

#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(tag = "name", rename_all = "snake_case", deny_unknown_fields)]
pub enum TaskSpec {
    Arith(ArithConfig),
}

impl Default for TaskSpec {
    fn default() -> Self {
        TaskSpec::Arith(ArithConfig::default())
    }
}
