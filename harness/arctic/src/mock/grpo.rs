//! verl's GRPO actor loss, computed from a batch's response tokens so `/forward-backward`
//! returns the metrics the real server would for the same inputs (see the project's GRPO
//! reference). Clip settings are the fixed values the Arctic loss uses.

use serde_json::{Map, Value};

pub const CLIP_LOW: f64 = 0.2;
pub const CLIP_HIGH: f64 = 0.2;
pub const CLIP_RATIO_C: f64 = 3.0;

/// The response tokens of one sequence (only those the loss mask keeps).
#[derive(Debug, Clone, Default)]
pub(crate) struct SeqTokens {
    pub(crate) logp: Vec<f64>,
    pub(crate) old_logp: Vec<f64>,
    pub(crate) advantages: Vec<f64>,
    pub(crate) ref_logp: Option<Vec<f64>>,
    pub(crate) entropy: Vec<f64>,
}

/// verl's `loss_agg_mode` (shared by the mock's and the torch backend's losses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggMode {
    TokenMean,
    TokenSum,
    SeqMeanTokenSum,
    SeqMeanTokenMean,
    SeqMeanTokenSumNorm,
}

/// A `loss_agg_mode` that verl does not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "actor_config.loss_agg_mode {0:?} is not one of token-mean, token-sum, seq-mean-token-sum, \
     seq-mean-token-mean, seq-mean-token-sum-norm"
)]
pub struct UnknownAggMode(pub String);

impl AggMode {
    pub fn parse(s: &str) -> Result<Self, UnknownAggMode> {
        Ok(match s {
            "token-mean" => AggMode::TokenMean,
            "token-sum" => AggMode::TokenSum,
            "seq-mean-token-sum" => AggMode::SeqMeanTokenSum,
            "seq-mean-token-mean" => AggMode::SeqMeanTokenMean,
            "seq-mean-token-sum-norm" => AggMode::SeqMeanTokenSumNorm,
            other => return Err(UnknownAggMode(other.to_string())),
        })
    }
}

/// The KL estimator of the KL loss (`kl_loss_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KlType {
    K1,
    Abs,
    K2,
    K3,
}

impl KlType {
    pub(crate) fn parse(s: &str) -> Result<Self, String> {
        Ok(match s {
            "kl" | "k1" => KlType::K1,
            "abs" => KlType::Abs,
            "mse" | "k2" => KlType::K2,
            "low_var_kl" | "k3" => KlType::K3,
            other => return Err(format!("unknown kl_loss_type {other:?}")),
        })
    }

    fn penalty(self, logp: f64, ref_logp: f64) -> f64 {
        match self {
            KlType::K1 => logp - ref_logp,
            KlType::Abs => (logp - ref_logp).abs(),
            KlType::K2 => 0.5 * (logp - ref_logp).powi(2),
            KlType::K3 => {
                let kl = (ref_logp - logp).clamp(-20.0, 20.0);
                (kl.exp() - kl - 1.0).clamp(-10.0, 10.0)
            }
        }
    }
}

/// The loss settings a call carries in `meta.actor_config`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LossSettings {
    pub(crate) agg: AggMode,
    pub(crate) entropy_coeff: f64,
    pub(crate) kl_coef: f64,
    pub(crate) kl_type: KlType,
    /// The padded response width (the `seq-mean-token-sum-norm` divisor).
    pub(crate) horizon: usize,
}

/// A `meta.actor_config` the mock's loss cannot follow: the key and why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct LossConfigError(pub(crate) String);

impl LossSettings {
    /// Read `meta.actor_config` (an object, or that object as a JSON string).
    pub(crate) fn from_meta(
        meta: &Map<String, Value>,
        horizon: usize,
    ) -> Result<Self, LossConfigError> {
        Self::read(meta, horizon).map_err(LossConfigError)
    }

    fn read(meta: &Map<String, Value>, horizon: usize) -> Result<Self, String> {
        let parsed;
        let cfg = match meta.get("actor_config") {
            Some(Value::Object(m)) => Some(m),
            Some(Value::String(s)) => {
                parsed = serde_json::from_str::<Value>(s)
                    .map_err(|e| format!("meta.actor_config is not valid JSON: {e}"))?;
                parsed.as_object()
            }
            _ => None,
        };
        let get_f = |k: &str, d: f64| -> Result<f64, String> {
            match cfg.and_then(|c| c.get(k)) {
                None | Some(Value::Null) => Ok(d),
                Some(v) => v
                    .as_f64()
                    .ok_or_else(|| format!("meta.actor_config.{k} must be a number, got {v}")),
            }
        };
        let get_s = |k: &str, d: &str| -> Result<String, String> {
            match cfg.and_then(|c| c.get(k)) {
                None | Some(Value::Null) => Ok(d.to_string()),
                Some(Value::String(s)) => Ok(s.clone()),
                Some(v) => Err(format!("meta.actor_config.{k} must be a string, got {v}")),
            }
        };
        Ok(Self {
            agg: AggMode::parse(&get_s("loss_agg_mode", "token-mean")?)
                .map_err(|e| e.to_string())?,
            entropy_coeff: get_f("entropy_coeff", 0.0)?,
            kl_coef: get_f("kl_loss_coef", 0.001)?,
            kl_type: KlType::parse(&get_s("kl_loss_type", "low_var_kl")?)?,
            horizon,
        })
    }
}

/// Aggregate per-token values of each sequence as verl's `agg_loss` does.
pub(crate) fn aggregate(per_seq: &[Vec<f64>], mode: AggMode, horizon: usize) -> f64 {
    let tokens: usize = per_seq.iter().map(Vec::len).sum();
    let total: f64 = per_seq.iter().flatten().sum();
    let seqs = per_seq.len().max(1) as f64;
    match mode {
        AggMode::TokenMean => {
            if tokens == 0 {
                0.0
            } else {
                total / tokens as f64
            }
        }
        AggMode::TokenSum => total,
        AggMode::SeqMeanTokenSum => total / seqs,
        AggMode::SeqMeanTokenMean => {
            per_seq
                .iter()
                .map(|s| {
                    if s.is_empty() {
                        0.0
                    } else {
                        s.iter().sum::<f64>() / s.len() as f64
                    }
                })
                .sum::<f64>()
                / seqs
        }
        AggMode::SeqMeanTokenSumNorm => total / horizon.max(1) as f64,
    }
}

fn token_mean(per_seq: &[Vec<f64>]) -> f64 {
    aggregate(per_seq, AggMode::TokenMean, 0)
}

/// `(metrics, loss)` of the vanilla PPO clipped surrogate with GRPO advantages.
pub(crate) fn policy_loss(
    seqs: &[SeqTokens],
    s: &LossSettings,
    with_entropy: bool,
) -> (Map<String, Value>, f64) {
    let mut pg = Vec::with_capacity(seqs.len());
    let mut kl = Vec::with_capacity(seqs.len());
    let mut clipped = Vec::with_capacity(seqs.len());
    let mut clipped_lower = Vec::with_capacity(seqs.len());
    for q in seqs {
        let mut pg_s = Vec::with_capacity(q.logp.len());
        let mut kl_s = Vec::with_capacity(q.logp.len());
        let mut c_s = Vec::with_capacity(q.logp.len());
        let mut cl_s = Vec::with_capacity(q.logp.len());
        for i in 0..q.logp.len() {
            let (lp, old, a) = (q.logp[i], q.old_logp[i], q.advantages[i]);
            let neg_kl = lp - old;
            let ratio = neg_kl.clamp(-20.0, 20.0).exp();
            let l1 = -a * ratio;
            let l2 = -a * ratio.clamp(1.0 - CLIP_LOW, 1.0 + CLIP_HIGH);
            let clip1 = l1.max(l2);
            let l3 = -a * CLIP_RATIO_C;
            let clip2 = l3.min(clip1);
            pg_s.push(if a < 0.0 { clip2 } else { clip1 });
            kl_s.push(-neg_kl);
            c_s.push(if l2 > l1 { 1.0 } else { 0.0 });
            cl_s.push(if clip1 > l3 && a < 0.0 { 1.0 } else { 0.0 });
        }
        pg.push(pg_s);
        kl.push(kl_s);
        clipped.push(c_s);
        clipped_lower.push(cl_s);
    }
    let pg_loss = aggregate(&pg, s.agg, s.horizon);
    let mut m = Map::new();
    m.insert("actor/pg_loss".into(), crate::wire::pyjson::float(pg_loss));
    m.insert(
        "actor/ppo_kl".into(),
        crate::wire::pyjson::float(token_mean(&kl)),
    );
    m.insert(
        "actor/pg_clipfrac".into(),
        crate::wire::pyjson::float(token_mean(&clipped)),
    );
    m.insert(
        "actor/pg_clipfrac_lower".into(),
        crate::wire::pyjson::float(token_mean(&clipped_lower)),
    );
    let mut loss = pg_loss;
    if with_entropy {
        let ent: Vec<Vec<f64>> = seqs.iter().map(|q| q.entropy.clone()).collect();
        let e = aggregate(&ent, s.agg, s.horizon);
        m.insert("actor/entropy_loss".into(), crate::wire::pyjson::float(e));
        loss -= s.entropy_coeff * e;
    }
    if seqs.iter().any(|q| q.ref_logp.is_some()) {
        let kls: Vec<Vec<f64>> = seqs
            .iter()
            .map(|q| match &q.ref_logp {
                Some(r) => q
                    .logp
                    .iter()
                    .zip(r)
                    .map(|(&lp, &rl)| s.kl_type.penalty(lp, rl))
                    .collect(),
                None => Vec::new(),
            })
            .collect();
        let k = aggregate(&kls, s.agg, s.horizon);
        m.insert("kl_loss".into(), crate::wire::pyjson::float(k));
        m.insert("kl_coef".into(), crate::wire::pyjson::float(s.kl_coef));
        loss += s.kl_coef * k;
    }
    m.insert("loss".into(), crate::wire::pyjson::float(loss));
    (m, loss)
}

/// Supervised loss: the negative mean log-likelihood of the kept tokens.
pub(crate) fn sft_loss(seqs: &[SeqTokens], s: &LossSettings) -> (Map<String, Value>, f64) {
    let nll: Vec<Vec<f64>> = seqs
        .iter()
        .map(|q| q.logp.iter().map(|l| -l).collect())
        .collect();
    let loss = aggregate(&nll, s.agg, s.horizon);
    let mut m = Map::new();
    m.insert("loss".into(), crate::wire::pyjson::float(loss));
    (m, loss)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn settings() -> LossSettings {
        LossSettings::from_meta(&Map::new(), 4).unwrap()
    }

    #[test]
    fn on_policy_loss_is_minus_the_mean_advantage() {
        let q = SeqTokens {
            logp: vec![-1.0, -2.0],
            old_logp: vec![-1.0, -2.0],
            advantages: vec![0.5, 0.5],
            ref_logp: None,
            entropy: vec![1.0, 1.0],
        };
        let (m, loss) = policy_loss(&[q], &settings(), false);
        assert!((loss + 0.5).abs() < 1e-12);
        assert_eq!(m["actor/ppo_kl"], json!(0.0));
        assert_eq!(m["actor/pg_clipfrac"], json!(0.0));
        assert!(m.get("kl_loss").is_none());
    }

    #[test]
    fn clipping_and_the_lower_cap_are_counted() {
        // ratio e^1 with positive advantage: clipped branch; ratio e^2 with negative advantage:
        // the clip_ratio_c cap.
        let q = SeqTokens {
            logp: vec![0.0, 0.0],
            old_logp: vec![-1.0, -2.0],
            advantages: vec![1.0, -1.0],
            ref_logp: Some(vec![0.0, 0.0]),
            entropy: vec![0.5, 0.5],
        };
        let (m, loss) = policy_loss(&[q], &settings(), true);
        assert_eq!(m["actor/pg_clipfrac"], json!(0.5));
        assert_eq!(m["actor/pg_clipfrac_lower"], json!(0.5));
        // tokens: -1.2 (clipped) and min(3, e^2) = 3: mean 0.9
        assert!((m["actor/pg_loss"].as_f64().unwrap() - 0.9).abs() < 1e-12);
        assert_eq!(m["kl_loss"], json!(0.0));
        assert_eq!(m["actor/entropy_loss"], json!(0.5));
        assert!((loss - 0.9).abs() < 1e-12);
    }

    #[test]
    fn aggregation_modes_match_verl() {
        let v = vec![vec![1.0, 3.0], vec![2.0]];
        assert_eq!(aggregate(&v, AggMode::TokenMean, 4), 2.0);
        assert_eq!(aggregate(&v, AggMode::TokenSum, 4), 6.0);
        assert_eq!(aggregate(&v, AggMode::SeqMeanTokenSum, 4), 3.0);
        assert_eq!(aggregate(&v, AggMode::SeqMeanTokenMean, 4), 2.0);
        assert_eq!(aggregate(&v, AggMode::SeqMeanTokenSumNorm, 4), 1.5);
        assert_eq!(aggregate(&[vec![]], AggMode::TokenMean, 4), 0.0);
    }

    #[test]
    fn actor_config_is_read_as_object_or_string() {
        let mut meta = Map::new();
        meta.insert(
            "actor_config".into(),
            json!("{\"loss_agg_mode\": \"token-sum\", \"kl_loss_coef\": 0.1}"),
        );
        let s = LossSettings::from_meta(&meta, 1).unwrap();
        assert_eq!(s.agg, AggMode::TokenSum);
        assert_eq!(s.kl_coef, 0.1);
        meta.insert("actor_config".into(), json!({"loss_agg_mode": "bogus"}));
        assert!(LossSettings::from_meta(&meta, 1)
            .unwrap_err()
            .0
            .contains("bogus"));
    }
}
