//! Golden rules, convergence expressions and verdicts.

/// The scenario's `checks` block.
#[derive(Debug, Clone, PartialEq, Default, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct ChecksSpec {}

/// A scenario's declared expected outcome (a strict expected failure, like a strict xfail).
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectedVerdict {}
