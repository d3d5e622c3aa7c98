//! What a scenario's `checks` block says, below every stage that uses it: the golden rules,
//! bands, directions and step ranges (`spec`), the convergence expression language (`expr`: a
//! pest grammar, its AST and its evaluation over a `MetricTable`), and the verdict a scenario
//! declares (`expected`). The spec loader validates with these types, the golden store
//! measures calibration windows with them, and the judge (`judge`) judges with them; none of them reads
//! or writes files.

pub(crate) mod direction;
pub(crate) mod domain;
mod expected;
pub mod expr;
mod seed_range;
mod spec;

pub(crate) use expected::{ExpectedOutcome, ExpectedVerdict};
pub(crate) use seed_range::{parse_seed_range, SeedRangeError};
pub(crate) use spec::window_value;
pub(crate) use spec::{
    stability_enabled_for, Calibrated, ChecksSpec, Direction, Expectation, GoldenRule, GoldenRules,
    ImprovementLimit, RuleRef, WindowBand,
};
