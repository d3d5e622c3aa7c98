//! A JobConfig's sequence-parallel degree (`sp_size`), resolved as Arctic-Platform 0.1.4's
//! `JobConfig` does it: several nested paths may carry it (verl writes
//! `ds_config.sequence_parallel_size`, other clients `training_config.sp_size`, worker-shaped
//! configs `ds_worker_config...`); which of them count depends on the job type, each that is
//! set must be an integer >= 1, and they must agree. Unset everywhere is 1. 5864380 read none
//! of them, so a config it accepted is refused here only when it contradicts itself or sets a
//! degree that is not one.

use serde_json::Value;

use super::api::{JobConfig, JobType};

type Path = &'static [&'static str];

const DS_WORKER_PATHS: [Path; 3] = [
    &["ds_worker_config", "sequence_parallel"],
    &["ds_worker_config", "sequence_parallel_size"],
    &["ds_worker_config", "parallelism", "sequence_parallel"],
];
const TRAINING_PATHS: [Path; 2] = [
    &["training_config", "sp_size"],
    &["ds_config", "sequence_parallel_size"],
];
const LOG_PROB_PATH: Path = &["log_prob_config", "sequence_parallel_size"];
const DS_CONFIG_PATH: Path = &["ds_config", "sequence_parallel_size"];

/// Why a JobConfig's sequence-parallel degree is refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SpSizeError {
    /// A path holds something other than an integer >= 1 (a float, a bool, a string, 0).
    #[error("{path} must be an integer >= 1 (1 = disabled); got {value}")]
    NotADegree { path: String, value: Value },
    /// Two live paths disagree: every live path that is set, with its degree, in path order
    /// (0.1.4's wording and its Python dict form).
    #[error("conflicting sequence-parallel degrees: {{{}}}", .0.iter().map(|(p, v)| format!("'{p}': {v}")).collect::<Vec<_>>().join(", "))]
    Conflict(Vec<(String, u64)>),
}

/// The paths that count for a job: a log_prob job reads its `log_prob_config` when that sets
/// a degree and the training `ds_config` it is sent otherwise; a sampling job only the
/// worker-shaped ones; a training job the training ones and the worker-shaped ones.
fn live_paths(config: &JobConfig) -> Vec<Path> {
    let mut paths: Vec<Path> = match config.job_type {
        JobType::LogProb if nested(config, LOG_PROB_PATH).is_some() => vec![LOG_PROB_PATH],
        JobType::LogProb => vec![DS_CONFIG_PATH, LOG_PROB_PATH],
        JobType::Sampling => Vec::new(),
        JobType::Training => TRAINING_PATHS.to_vec(),
    };
    paths.extend(DS_WORKER_PATHS);
    paths
}

/// The value at `path`; `None` where a step is absent, null or not an object.
fn nested(config: &JobConfig, path: Path) -> Option<&Value> {
    let (first, rest) = path.split_first()?;
    let top = match *first {
        "ds_config" => config.ds_config.as_ref(),
        "training_config" => config.training_config.as_ref(),
        "log_prob_config" => config.log_prob_config.as_ref(),
        "ds_worker_config" => config.ds_worker_config.as_ref(),
        _ => None,
    }?;
    rest.iter()
        .try_fold(top, |node, key| node.as_object()?.get(*key))
        .filter(|v| !v.is_null())
}

/// The job's sequence-parallel degree: 1 when no live path sets one.
pub fn sp_size(config: &JobConfig) -> Result<u64, SpSizeError> {
    let mut found: Vec<(String, u64)> = Vec::new();
    for path in live_paths(config) {
        let Some(v) = nested(config, path) else {
            continue;
        };
        let name = path.join(".");
        let degree = v
            .as_u64()
            .filter(|&d| d >= 1)
            .ok_or_else(|| SpSizeError::NotADegree {
                path: name.clone(),
                value: v.clone(),
            })?;
        found.push((name, degree));
    }
    match found.first() {
        None => Ok(1),
        Some(&(_, d)) if found.iter().all(|(_, x)| *x == d) => Ok(d),
        Some(_) => Err(SpSizeError::Conflict(found)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job(v: Value) -> JobConfig {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn unset_is_one_and_each_path_is_read() {
        assert_eq!(sp_size(&job(json!({"model_name": "m"}))), Ok(1));
        for (block, inner) in [
            ("ds_config", json!({"sequence_parallel_size": 2})),
            ("training_config", json!({"sp_size": 2})),
            ("ds_worker_config", json!({"sequence_parallel": 2})),
            ("ds_worker_config", json!({"sequence_parallel_size": 2})),
            (
                "ds_worker_config",
                json!({"parallelism": {"sequence_parallel": 2}}),
            ),
        ] {
            let c = job(json!({"model_name": "m", "job_type": "training", block: inner}));
            assert_eq!(sp_size(&c), Ok(2), "{block}: {inner}");
        }
        // Null and a non-object step read as unset.
        let c = job(
            json!({"model_name": "m", "ds_config": {"sequence_parallel_size": null}, "ds_worker_config": {"parallelism": 3}}),
        );
        assert_eq!(sp_size(&c), Ok(1));
    }

    #[test]
    fn agreeing_paths_resolve_and_conflicting_ones_name_both() {
        let agree = job(
            json!({"model_name": "m", "ds_config": {"sequence_parallel_size": 4}, "training_config": {"sp_size": 4}}),
        );
        assert_eq!(sp_size(&agree), Ok(4));
        let clash = job(
            json!({"model_name": "m", "ds_config": {"sequence_parallel_size": 2}, "ds_worker_config": {"sequence_parallel": 4}}),
        );
        let e = sp_size(&clash).unwrap_err();
        assert_eq!(
            e.to_string(),
            "conflicting sequence-parallel degrees: {'ds_config.sequence_parallel_size': 2, 'ds_worker_config.sequence_parallel': 4}"
        );
    }

    #[test]
    fn which_paths_count_depends_on_the_job_type() {
        // A sampling job reads only the worker-shaped paths: its ds_config does not count.
        let s = job(
            json!({"model_name": "m", "job_type": "sampling", "ds_config": {"sequence_parallel_size": 2}, "ds_worker_config": {"sequence_parallel": 4}}),
        );
        assert_eq!(sp_size(&s), Ok(4));
        // A log_prob job with its own degree does not compare it with the training ds_config.
        let lp = job(
            json!({"model_name": "m", "job_type": "log_prob", "ds_config": {"sequence_parallel_size": 2}, "log_prob_config": {"sequence_parallel_size": 1}}),
        );
        assert_eq!(sp_size(&lp), Ok(1));
        let lp = job(
            json!({"model_name": "m", "job_type": "log_prob", "ds_config": {"sequence_parallel_size": 2}}),
        );
        assert_eq!(sp_size(&lp), Ok(2));
        // training_config is not a log_prob path.
        let lp = job(
            json!({"model_name": "m", "job_type": "log_prob", "training_config": {"sp_size": 2}}),
        );
        assert_eq!(sp_size(&lp), Ok(1));
    }

    #[test]
    fn a_degree_must_be_an_integer_of_at_least_one() {
        for bad in [json!(0), json!(-1), json!(2.0), json!(true), json!("2")] {
            let c = job(json!({"model_name": "m", "training_config": {"sp_size": bad}}));
            let e = sp_size(&c).unwrap_err();
            assert_eq!(
                e,
                SpSizeError::NotADegree {
                    path: "training_config.sp_size".into(),
                    value: bad.clone()
                }
            );
            assert!(e.to_string().contains("integer >= 1"), "{e}");
        }
    }
}
