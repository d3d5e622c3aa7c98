//! The names a `{batch, meta, processing}` frame may carry in `processing.post` and
//! `processing.loss_fn`, with what each means here, and the `meta` switch
//! `return_fwd_batch`: one list for the server's checks and every engine's, so the mock and the
//! torch engine accept the same names.
//!
//! Arctic-Platform 5864380 registers the losses `grpo` (its own GRPO), `verl_grpo`, `sft` and
//! `sft_ce`. Release 0.1.4 renamed the GRPO family: `grpo` and `grpo_echo_v1` are the Cortex
//! contract, `ap_grpo` and `ap_grpo_echo_v1` the platform's own (5864380's `grpo`). The two
//! contracts differ only in how a loss-scale key given twice is settled, which verl's layout
//! never does: here every GRPO name computes the same PPO-clip policy loss. An `_echo_v1` name
//! also checks its strict `processing.config` as 0.1.4 does; this server computes no ECHO
//! auxiliary term, so it serves such a name only as the control run (`aux_ce_weight` 0).

use serde_json::{Map, Value};

/// The policy (GRPO/PPO) losses: 5864380's names and 0.1.4's.
pub const POLICY_LOSSES: [&str; 5] = [
    "grpo",
    "verl_grpo",
    "ap_grpo",
    "grpo_echo_v1",
    "ap_grpo_echo_v1",
];

/// The supervised losses.
pub const SFT_LOSSES: [&str; 2] = ["sft", "sft_ce"];

/// Every loss name a request may carry.
pub fn loss_names() -> impl Iterator<Item = &'static str> {
    POLICY_LOSSES.iter().chain(SFT_LOSSES.iter()).copied()
}

/// Whether `name` is a loss this server computes.
pub fn is_known_loss(name: &str) -> bool {
    loss_names().any(|n| n == name)
}

/// Whether `name` is a policy (GRPO family) loss: it needs `old_log_probs` and `advantages`.
pub fn is_policy_loss(name: &str) -> bool {
    POLICY_LOSSES.contains(&name)
}

/// The post-processors `processing.post` may name: 5864380's (`compute_logprobs` among them)
/// and 0.1.4's `ap_compute_logprobs`. Only the two entropy ones change what is computed.
pub const POST_PROCESSORS: [&str; 6] = [
    "identity",
    "compute_entropy_and_logprobs",
    "compute_logprobs",
    "ap_compute_logprobs",
    "compute_entropy",
    "apply_temperature",
];

/// The GRPO config keys 0.1.4 knows (`_GRPO_CONFIG_DEFAULTS`).
const GRPO_CONFIG_KEYS: [&str; 22] = [
    "eps_clip",
    "eps_clip_higher",
    "c_clip",
    "behav_imp_weight_cap",
    "m2_threshold",
    "importance_sampling_level",
    "current_version",
    "prox_logp_method",
    "use_sapo_loss",
    "sapo_tau_pos",
    "sapo_tau_neg",
    "use_decoupled_loss",
    "use_cispo_loss",
    "is_weight_clip_max",
    "loss_agg_mode",
    "dp_size",
    "batch_num_tokens",
    "global_batch_size",
    "entropy_coeff",
    "use_kl_loss",
    "kl_loss_coef",
    "kl_loss_type",
];

/// The ECHO config keys (`_ECHO_CONFIG_DEFAULTS`) and the ones an `_echo_v1` loss requires.
const ECHO_CONFIG_KEYS: [&str; 3] = [
    "aux_ce_weight",
    "echo_global_num_sequences",
    "echo_batch_denominator",
];
const ECHO_REQUIRED_KEYS: [&str; 2] = ["aux_ce_weight", "echo_global_num_sequences"];

/// Why a loss's `processing.config` is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LossConfigError {
    /// What 0.1.4's loss function raises (inside the handler: its plain-text 500).
    #[error("{0}")]
    Refused(String),
    /// What 0.1.4 would run but this server does not compute.
    #[error("{0}")]
    NotServed(String),
}

/// Check `processing.config` against the loss `name` as 0.1.4's loss functions do: `grpo` and
/// `ap_grpo` refuse ECHO keys; an `_echo_v1` loss refuses unknown keys and needs
/// `aux_ce_weight` and `echo_global_num_sequences` set. Other losses read no config here.
pub fn check_loss_config(name: &str, config: &Map<String, Value>) -> Result<(), LossConfigError> {
    let echo_keys: Vec<&str> = ECHO_CONFIG_KEYS
        .iter()
        .copied()
        .filter(|k| config.contains_key(*k))
        .collect();
    match name {
        "grpo" | "ap_grpo" if !echo_keys.is_empty() => Err(LossConfigError::Refused(format!(
            "loss_fn {name:?} does not accept ECHO config keys {echo_keys:?}: request {:?}",
            format!("{name}_echo_v1")
        ))),
        "grpo_echo_v1" | "ap_grpo_echo_v1" => {
            let mut unknown: Vec<&str> = config
                .keys()
                .map(String::as_str)
                .filter(|k| !GRPO_CONFIG_KEYS.contains(k) && !ECHO_CONFIG_KEYS.contains(k))
                .collect();
            unknown.sort_unstable();
            if !unknown.is_empty() {
                return Err(LossConfigError::Refused(format!(
                    "unknown config keys for loss_fn {name:?}: {unknown:?}"
                )));
            }
            let missing: Vec<&str> = ECHO_REQUIRED_KEYS
                .iter()
                .copied()
                .filter(|k| config.get(*k).is_none_or(Value::is_null))
                .collect();
            if !missing.is_empty() {
                return Err(LossConfigError::Refused(format!(
                    "loss_fn {name:?} requires non-null processing.config keys {missing:?}"
                )));
            }
            if config.get("aux_ce_weight").and_then(Value::as_f64) == Some(0.0) {
                return Ok(());
            }
            Err(LossConfigError::NotServed(format!(
                "loss_fn {name:?} with processing.config.aux_ce_weight {}: this server computes no ECHO auxiliary term, so it serves {name:?} only as its control run (aux_ce_weight 0)",
                config["aux_ce_weight"]
            )))
        }
        _ => Ok(()),
    }
}

/// `meta.return_fwd_batch` (0.1.4): whether `/forward-backward` answers the forward pass's
/// per-token `batch` (log-probs, and entropy when asked) beside its metrics. Absent or null is
/// false. The real server reads it with Python's `bool()`, so a number counts by being
/// non-zero; a string, list or object is refused here (the real server would take `"false"`
/// for true).
pub fn return_fwd_batch(meta: &Map<String, Value>) -> Result<bool, NotAFlag> {
    match meta.get("return_fwd_batch") {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(Value::Number(n)) => Ok(n.as_f64().is_some_and(|x| x != 0.0)),
        Some(other) => Err(NotAFlag {
            key: "meta.return_fwd_batch",
            value: other.clone(),
        }),
    }
}

/// A flag of a frame's `meta` that holds no flag (a string, list or object).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{key} must be a boolean, got {value}")]
pub struct NotAFlag {
    pub key: &'static str,
    pub value: Value,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cfg(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn both_releases_loss_names_are_known_and_sorted_by_kind() {
        for n in ["grpo", "verl_grpo", "sft", "sft_ce"] {
            assert!(is_known_loss(n), "5864380's {n}");
        }
        for n in ["ap_grpo", "grpo_echo_v1", "ap_grpo_echo_v1"] {
            assert!(is_known_loss(n) && is_policy_loss(n), "0.1.4's {n}");
        }
        assert!(!is_policy_loss("sft") && !is_known_loss("cortex_grpo"));
        assert!(POST_PROCESSORS.contains(&"ap_compute_logprobs"));
    }

    #[test]
    fn echo_losses_check_their_config_as_the_release_does() {
        let ok =
            cfg(json!({"aux_ce_weight": 0.0, "echo_global_num_sequences": 8, "eps_clip": 0.2}));
        assert_eq!(check_loss_config("grpo_echo_v1", &ok), Ok(()));
        assert_eq!(check_loss_config("ap_grpo_echo_v1", &ok), Ok(()));
        let missing = cfg(json!({"aux_ce_weight": 0.0, "echo_global_num_sequences": null}));
        let e = check_loss_config("grpo_echo_v1", &missing).unwrap_err();
        assert!(
            matches!(&e, LossConfigError::Refused(m) if m.contains("echo_global_num_sequences")),
            "{e}"
        );
        let typo = cfg(json!({"aux_ce_weigth": 0.0, "echo_global_num_sequences": 8}));
        let e = check_loss_config("ap_grpo_echo_v1", &typo).unwrap_err();
        assert!(e.to_string().contains("aux_ce_weigth"), "{e}");
        let weighted = cfg(json!({"aux_ce_weight": 0.5, "echo_global_num_sequences": 8}));
        let e = check_loss_config("grpo_echo_v1", &weighted).unwrap_err();
        assert!(
            matches!(&e, LossConfigError::NotServed(m) if m.contains("0.5")),
            "{e}"
        );
        let echo_on_plain = cfg(json!({"aux_ce_weight": 0.0}));
        let e = check_loss_config("ap_grpo", &echo_on_plain).unwrap_err();
        assert!(e.to_string().contains("ap_grpo_echo_v1"), "{e}");
        // verl_grpo and the SFT losses read no ECHO schema.
        assert_eq!(check_loss_config("verl_grpo", &echo_on_plain), Ok(()));
        assert_eq!(
            check_loss_config("grpo", &cfg(json!({"eps_clip": 0.3}))),
            Ok(())
        );
    }

    #[test]
    fn return_fwd_batch_reads_like_python_bool_and_refuses_text() {
        let m = |v: Value| cfg(json!({ "return_fwd_batch": v }));
        assert_eq!(return_fwd_batch(&Map::new()), Ok(false));
        assert_eq!(return_fwd_batch(&m(json!(null))), Ok(false));
        assert_eq!(return_fwd_batch(&m(json!(true))), Ok(true));
        assert_eq!(return_fwd_batch(&m(json!(false))), Ok(false));
        assert_eq!(return_fwd_batch(&m(json!(1))), Ok(true));
        assert_eq!(return_fwd_batch(&m(json!(0))), Ok(false));
        let e = return_fwd_batch(&m(json!("false")))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("return_fwd_batch") && e.contains("\"false\""),
            "{e}"
        );
    }
}
