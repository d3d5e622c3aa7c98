//! Settings of a job (from its JobConfig) and of one call (from `meta`), resolved the way the
//! Arctic server resolves them: ZoRRo jobs take the logits knobs and temperature from
//! `ds_worker_config` at init, other jobs from each call's `meta`.

use serde_json::{Map, Value};

use super::loss::{ActorLoss, AggMode};
use rlharness_arctic::engine::EngineError;

/// What the forward-backward asks of the entropy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entropy {
    /// Not computed.
    Off,
    /// Computed for the metrics, no gradient.
    Value,
    /// Computed and differentiated (`entropy_coeff != 0`).
    WithGrad,
}

/// `logits.optimization`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogitsOpt {
    None,
    /// Compute log-probs chunk by chunk (same numbers, bounded memory in forward-only calls).
    Compute,
    /// ZoRRo-only memory mode; an error on the padded path, as on the real server.
    Memory,
}

impl LogitsOpt {
    fn parse(v: &Value, source: &str) -> Result<Self, EngineError> {
        match v.as_str() {
            Some("none") => Ok(LogitsOpt::None),
            Some("compute") => Ok(LogitsOpt::Compute),
            Some("memory") => Ok(LogitsOpt::Memory),
            _ => Err(EngineError::bad_request(format!(
                "{source}.logits_optimization must be none, compute or memory, got {v}"
            ))),
        }
    }
}

/// What the job's `ds_worker_config` fixes at init.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerSettings {
    pub zorro: bool,
    /// `response_len`: ZoRRo splits prompt from response at `S - response_len`.
    pub response_len: Option<i64>,
    pub temperature: f64,
    pub logits_opt: LogitsOpt,
    pub logits_fp32: bool,
    pub peak_mem_gib: f64,
}

fn get_bool(m: &Map<String, Value>, key: &str, source: &str) -> Result<Option<bool>, EngineError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(other) => Err(EngineError::bad_request(format!(
            "{source}.{key} must be a boolean, got {other}"
        ))),
    }
}

fn get_f64(m: &Map<String, Value>, key: &str, source: &str) -> Result<Option<f64>, EngineError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_f64().map(Some).ok_or_else(|| {
            EngineError::bad_request(format!("{source}.{key} must be a number, got {v}"))
        }),
    }
}

impl WorkerSettings {
    pub fn from_config(dwc: Option<&Value>) -> Result<Self, EngineError> {
        let empty = Map::new();
        let m = match dwc {
            None | Some(Value::Null) => &empty,
            Some(Value::Object(m)) => m,
            Some(other) => {
                return Err(EngineError::bad_request(format!(
                    "ds_worker_config must be an object, got {other}"
                )))
            }
        };
        let src = "ds_worker_config";
        Ok(WorkerSettings {
            zorro: get_bool(m, "zorro_train_enable", src)?.unwrap_or(false),
            response_len: get_f64(m, "response_len", src)?.map(|v| v as i64),
            temperature: get_f64(m, "temperature", src)?.unwrap_or(1.0),
            logits_opt: match m.get("logits_optimization") {
                None | Some(Value::Null) => LogitsOpt::None,
                Some(v) => LogitsOpt::parse(v, src)?,
            },
            logits_fp32: get_bool(m, "logits_compute_in_fp32", src)?.unwrap_or(false),
            peak_mem_gib: get_f64(m, "logits_optimization_peak_mem_size_in_gib", src)?
                .unwrap_or(4.0),
        })
    }
}

/// Everything one `/forward` or `/forward-backward` call is computed with.
#[derive(Debug, Clone, PartialEq)]
pub struct CallSettings {
    pub pad_token_id: i64,
    /// Divide logits by this before log-softmax (`apply_temperature` post-processor).
    pub temperature: Option<f64>,
    pub zorro: bool,
    pub response_len: Option<i64>,
    pub logits_opt: LogitsOpt,
    pub logits_fp32: bool,
    pub peak_mem_gib: f64,
    pub want_entropy: bool,
    pub actor: ActorLoss,
}

impl CallSettings {
    pub fn resolve(
        worker: &WorkerSettings,
        meta: &Map<String, Value>,
        post: &[String],
    ) -> Result<Self, EngineError> {
        let src = "meta";
        for p in post {
            if !rlharness_arctic::processing::POST_PROCESSORS.contains(&p.as_str()) {
                return Err(EngineError::bad_request(format!(
                    "unknown post-processor {p:?} in processing.post"
                )));
            }
        }
        let zorro = get_bool(meta, "zorro_train_enable", src)?.unwrap_or(false);
        if zorro && !worker.zorro {
            return Err(EngineError::bad_request(
                "meta.zorro_train_enable is true but the job was initialised without ds_worker_config.zorro_train_enable",
            ));
        }
        let pad_token_id = match meta.get("pad_token_id") {
            None | Some(Value::Null) => rlharness_arctic::task::PAD_ID,
            Some(v) => v.as_i64().ok_or_else(|| {
                EngineError::bad_request(format!("meta.pad_token_id must be an integer, got {v}"))
            })?,
        };
        // ZoRRo reads the init values; the padded path the per-call ones.
        let (logits_opt, logits_fp32, peak_mem_gib, temperature) = if zorro {
            (
                worker.logits_opt,
                worker.logits_fp32,
                worker.peak_mem_gib,
                worker.temperature,
            )
        } else {
            let opt = match meta.get("logits_optimization") {
                None | Some(Value::Null) => LogitsOpt::None,
                Some(v) => LogitsOpt::parse(v, src)?,
            };
            if opt == LogitsOpt::Memory {
                return Err(EngineError::bad_request(
                    "meta.logits_optimization=memory needs ZoRRo (zorro_train_enable); use none or compute",
                ));
            }
            (
                opt,
                get_bool(meta, "logits_compute_in_fp32", src)?.unwrap_or(false),
                get_f64(meta, "logits_optimization_peak_mem_size_in_gib", src)?.unwrap_or(4.0),
                get_f64(meta, "temperature", src)?.unwrap_or(1.0),
            )
        };
        let apply_temp = post.iter().any(|p| p == "apply_temperature");
        if apply_temp && temperature <= 0.0 {
            return Err(EngineError::bad_request(format!(
                "temperature must be positive to apply it, got {temperature}"
            )));
        }
        let want_entropy = post
            .iter()
            .any(|p| p == "compute_entropy_and_logprobs" || p == "compute_entropy")
            || get_bool(meta, "calculate_entropy", src)?.unwrap_or(false);
        Ok(CallSettings {
            pad_token_id,
            temperature: apply_temp.then_some(temperature),
            zorro,
            response_len: worker.response_len,
            logits_opt,
            logits_fp32,
            peak_mem_gib,
            want_entropy,
            actor: actor_config(meta.get("actor_config"))?,
        })
    }
}

/// `meta.actor_config`: an object, or that object serialised as a JSON string.
fn actor_config(v: Option<&Value>) -> Result<ActorLoss, EngineError> {
    let parsed;
    let m = match v {
        None | Some(Value::Null) => return Ok(ActorLoss::default()),
        Some(Value::Object(m)) => m,
        Some(Value::String(s)) => {
            parsed = serde_json::from_str::<Value>(s).map_err(|e| {
                EngineError::bad_request(format!("meta.actor_config is not valid JSON: {e}"))
            })?;
            match &parsed {
                Value::Object(m) => m,
                _ => {
                    return Err(EngineError::bad_request(
                        "meta.actor_config must be an object",
                    ))
                }
            }
        }
        Some(other) => {
            return Err(EngineError::bad_request(format!(
                "meta.actor_config must be an object, got {other}"
            )))
        }
    };
    let src = "meta.actor_config";
    let d = ActorLoss::default();
    Ok(ActorLoss {
        entropy_coeff: get_f64(m, "entropy_coeff", src)?.unwrap_or(d.entropy_coeff),
        agg: match m.get("loss_agg_mode") {
            None | Some(Value::Null) => d.agg,
            Some(Value::String(s)) => {
                AggMode::parse(s).map_err(|e| EngineError::bad_request(e.to_string()))?
            }
            Some(other) => {
                return Err(EngineError::bad_request(format!(
                    "{src}.loss_agg_mode must be a string, got {other}"
                )))
            }
        },
        use_kl_loss: get_bool(m, "use_kl_loss", src)?.unwrap_or(d.use_kl_loss),
        kl_coef: get_f64(m, "kl_loss_coef", src)?.unwrap_or(d.kl_coef),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn meta(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn padded_path_reads_meta_and_zorro_reads_init_values() {
        let plain = WorkerSettings::from_config(None).unwrap();
        let post = vec![
            "apply_temperature".to_string(),
            "compute_entropy_and_logprobs".to_string(),
        ];
        let s = CallSettings::resolve(
            &plain,
            &meta(json!({"pad_token_id": 0, "temperature": 0.5, "logits_compute_in_fp32": true,
                          "actor_config": "{\"entropy_coeff\": 0.01, \"loss_agg_mode\": \"seq-mean-token-mean\"}"})),
            &post,
        )
        .unwrap();
        assert_eq!(s.temperature, Some(0.5));
        assert!(s.logits_fp32 && s.want_entropy && !s.zorro);
        assert_eq!(s.actor.entropy_coeff, 0.01);
        assert_eq!(s.actor.agg, AggMode::SeqMeanTokenMean);

        let z = WorkerSettings::from_config(Some(
            &json!({"zorro_train_enable": true, "temperature": 0.7,
            "logits_optimization": "memory", "response_len": 8}),
        ))
        .unwrap();
        let s = CallSettings::resolve(
            &z,
            &meta(json!({"zorro_train_enable": true, "temperature": 0.1,
            "logits_optimization": "none"})),
            &post,
        )
        .unwrap();
        assert_eq!(
            (s.temperature, s.logits_opt, s.response_len),
            (Some(0.7), LogitsOpt::Memory, Some(8))
        );
    }

    #[test]
    fn bad_meta_is_a_400_naming_the_key() {
        let plain = WorkerSettings::from_config(None).unwrap();
        for (m, key) in [
            (json!({"logits_optimization": "memory"}), "memory"),
            (json!({"zorro_train_enable": true}), "zorro"),
            (json!({"pad_token_id": "x"}), "pad_token_id"),
            (json!({"actor_config": {"loss_agg_mode": "avg"}}), "avg"),
            (json!({"actor_config": "{not json"}), "actor_config"),
        ] {
            let err = CallSettings::resolve(&plain, &meta(m), &[]).unwrap_err();
            assert_eq!(err.status, 400);
            assert!(err.detail.contains(key), "{}", err.detail);
        }
        let err = CallSettings::resolve(&plain, &Map::new(), &["softmax".into()]).unwrap_err();
        assert!(err.detail.contains("softmax"));
    }
}
