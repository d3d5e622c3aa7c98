//! The scripted mock engine: deterministic per seed, sensitive to the pipeline (reward follows
//! the number of weight syncs received), and simulating time with a cost model.

/// The mock's script, from the scenario's `backend: {kind: mock, ...}` block.
#[derive(Debug, Clone, PartialEq, Default, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct MockScript {}
