//! The training job's optimizer as DeepSpeed configures it from `ds_config`: AdamW (decoupled
//! weight decay, bias correction, FusedAdam's defaults), global-norm gradient clipping, and
//! the `WarmupLR` / `WarmupCosineLR` schedulers with DeepSpeed's formulas and defaults.

use serde_json::Value;
use tch::{Kind, Tensor};

/// What `ds_config` asks of the optimizer.
#[derive(Debug, Clone, PartialEq)]
pub struct OptimConfig {
    pub lr: f64,
    pub betas: (f64, f64),
    pub eps: f64,
    pub weight_decay: f64,
    /// `gradient_clipping`; 0 disables (DeepSpeed's default).
    pub clip: f64,
    pub scheduler: Scheduler,
    /// `train_micro_batch_size_per_gpu`: sequences per forward/backward inside one call.
    pub micro_batch: usize,
}

/// DeepSpeed's learning-rate schedulers (`ds_config.scheduler`).
#[derive(Debug, Clone, PartialEq)]
pub enum Scheduler {
    Constant,
    WarmupLr {
        min_lr: f64,
        max_lr: f64,
        warmup_steps: f64,
        log: bool,
    },
    WarmupCosineLr {
        total_steps: f64,
        warmup_min_ratio: f64,
        warmup_steps: f64,
        cos_min_ratio: f64,
        log: bool,
    },
}

fn num(v: &Value, key: &str, default: f64) -> Result<f64, String> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(x) => x
            .as_f64()
            .ok_or_else(|| format!("ds_config key {key} must be a number, got {x}")),
    }
}

fn warmup_type(params: &Value) -> Result<bool, String> {
    match params.get("warmup_type").and_then(Value::as_str) {
        None | Some("log") => Ok(true),
        Some("linear") => Ok(false),
        Some(other) => Err(format!(
            "ds_config scheduler.params.warmup_type {other:?} is neither log nor linear"
        )),
    }
}

/// A `ds_config` the torch engine cannot train with, naming the key.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct DsConfigError(String);

impl OptimConfig {
    /// Read `ds_config`; absent keys take the values the Arctic server fills (AdamW lr 1e-5,
    /// betas 0.9/0.999, eps 1e-8, micro-batch 1) or DeepSpeed's defaults (no weight decay,
    /// no clipping).
    pub fn from_ds_config(ds: Option<&Value>) -> Result<Self, DsConfigError> {
        Self::read(ds).map_err(DsConfigError)
    }

    fn read(ds: Option<&Value>) -> Result<Self, String> {
        let empty = Value::Object(Default::default());
        let ds = ds.unwrap_or(&empty);
        let opt = ds.get("optimizer").unwrap_or(&empty);
        if let Some(t) = opt.get("type").and_then(Value::as_str) {
            if !t.eq_ignore_ascii_case("adamw") && !t.eq_ignore_ascii_case("adam") {
                return Err(format!(
                    "ds_config optimizer.type {t:?} is not supported (AdamW only)"
                ));
            }
        }
        let params = opt.get("params").unwrap_or(&empty);
        let betas = match params.get("betas") {
            None | Some(Value::Null) => (0.9, 0.999),
            Some(Value::Array(b)) if b.len() == 2 => match (b[0].as_f64(), b[1].as_f64()) {
                (Some(b1), Some(b2)) => (b1, b2),
                _ => return Err("ds_config optimizer.params.betas must be two numbers".into()),
            },
            Some(other) => {
                return Err(format!(
                    "ds_config optimizer.params.betas must be [b1, b2], got {other}"
                ))
            }
        };
        let lr = num(params, "lr", 1e-5)?;
        let sched = match ds.get("scheduler") {
            None | Some(Value::Null) => Scheduler::Constant,
            Some(s) => {
                let sp = s.get("params").unwrap_or(&empty);
                match s.get("type").and_then(Value::as_str) {
                    Some("WarmupLR") => Scheduler::WarmupLr {
                        min_lr: num(sp, "warmup_min_lr", 0.0)?,
                        max_lr: num(sp, "warmup_max_lr", 0.001)?,
                        warmup_steps: num(sp, "warmup_num_steps", 1000.0)?.max(2.0),
                        log: warmup_type(sp)?,
                    },
                    Some("WarmupCosineLR") => {
                        let total = sp.get("total_num_steps").and_then(Value::as_f64).ok_or_else(|| {
                            "ds_config scheduler WarmupCosineLR needs params.total_num_steps".to_string()
                        })?;
                        Scheduler::WarmupCosineLr {
                            total_steps: total,
                            warmup_min_ratio: num(sp, "warmup_min_ratio", 0.0)?,
                            warmup_steps: num(sp, "warmup_num_steps", 1000.0)?.max(2.0),
                            cos_min_ratio: num(sp, "cos_min_ratio", 0.0001)?,
                            log: warmup_type(sp)?,
                        }
                    }
                    other => {
                        return Err(format!(
                            "ds_config scheduler.type {other:?} is not supported (WarmupLR, WarmupCosineLR)"
                        ))
                    }
                }
            }
        };
        let micro = num(ds, "train_micro_batch_size_per_gpu", 1.0)?;
        if micro < 1.0 {
            return Err(format!(
                "ds_config train_micro_batch_size_per_gpu must be at least 1, got {micro}"
            ));
        }
        Ok(OptimConfig {
            lr,
            betas,
            eps: num(params, "eps", 1e-8)?,
            weight_decay: num(params, "weight_decay", 0.0)?,
            clip: num(ds, "gradient_clipping", 0.0)?,
            scheduler: sched,
            micro_batch: micro as usize,
        })
    }
}

impl Scheduler {
    /// The learning rate at scheduler iteration `it` (DeepSpeed's `last_batch_iteration`;
    /// the first optimizer step runs at iteration 0) for base rate `base_lr`.
    pub fn lr_at(&self, it: u64, base_lr: f64) -> f64 {
        let it = it as f64;
        match *self {
            Scheduler::Constant => base_lr,
            Scheduler::WarmupLr {
                min_lr,
                max_lr,
                warmup_steps,
                log,
            } => {
                let gamma = if it < warmup_steps {
                    if log {
                        (it + 1.0).ln() / warmup_steps.ln()
                    } else {
                        it / warmup_steps
                    }
                } else {
                    1.0
                };
                min_lr + (max_lr - min_lr) * gamma
            }
            Scheduler::WarmupCosineLr {
                total_steps,
                warmup_min_ratio,
                warmup_steps,
                cos_min_ratio,
                log,
            } => {
                let ratio = if it < warmup_steps {
                    let r = if log {
                        (it + 1.0).ln() / warmup_steps.ln()
                    } else {
                        it / warmup_steps
                    };
                    warmup_min_ratio + r * (1.0 - warmup_min_ratio)
                } else {
                    let done = it - warmup_steps + 1.0;
                    let span = (total_steps - warmup_steps).max(1.0);
                    let cos = (1.0 + (std::f64::consts::PI * done / span).cos()) / 2.0;
                    (cos_min_ratio + (1.0 - cos_min_ratio) * cos).max(0.0)
                };
                base_lr * ratio
            }
        }
    }
}

/// AdamW state over a parameter list; fp32 master weights when the model is not fp32.
pub struct AdamW {
    pub config: OptimConfig,
    pub m: Vec<Tensor>,
    pub v: Vec<Tensor>,
    /// fp32 copies of bf16 parameters (empty for an fp32 model).
    pub master: Vec<Tensor>,
    /// Optimizer steps taken (also the scheduler iteration of the next step).
    pub steps: u64,
    /// With master weights, `m`, `v` and `master` are views into these flat fp32 buffers, so a
    /// step is a dozen whole-model ops instead of a dozen per tensor (libtorch has no fused
    /// multi-tensor AdamW that tch exposes; per-tensor launches dominated the step on CUDA).
    flat: Option<FlatState>,
}

struct StepScalars {
    lr: f64,
    scale: f64,
    bc1: f64,
    bc2: f64,
}

struct FlatState {
    m: Tensor,
    v: Tensor,
    master: Tensor,
    /// Gradients gathered in fp32.
    grad: Tensor,
    /// `(offset, numel)` of each parameter in the buffers.
    spans: Vec<(i64, i64)>,
}

impl AdamW {
    pub fn new(config: OptimConfig, params: &[Tensor]) -> AdamW {
        let _g = tch::no_grad_guard();
        if params.is_empty() || params.iter().all(|p| p.kind() == Kind::Float) {
            let zeros = |p: &Tensor| Tensor::zeros(p.size(), (Kind::Float, p.device()));
            return AdamW {
                m: params.iter().map(zeros).collect(),
                v: params.iter().map(zeros).collect(),
                master: Vec::new(),
                steps: 0,
                config,
                flat: None,
            };
        }
        let device = params[0].device();
        let mut spans = Vec::with_capacity(params.len());
        let mut total = 0i64;
        for p in params {
            let n = p.numel() as i64;
            spans.push((total, n));
            total += n;
        }
        let buffer = || Tensor::zeros([total], (Kind::Float, device));
        let flat = FlatState {
            m: buffer(),
            v: buffer(),
            master: buffer(),
            grad: buffer(),
            spans,
        };
        let views = |buf: &Tensor| -> Vec<Tensor> {
            params
                .iter()
                .zip(&flat.spans)
                .map(|(p, &(off, n))| buf.narrow(0, off, n).view(p.size().as_slice()))
                .collect()
        };
        let master = views(&flat.master);
        for (dst, p) in master.iter().zip(params) {
            let mut d = dst.shallow_clone();
            d.copy_(&p.detach().to_kind(Kind::Float));
        }
        AdamW {
            m: views(&flat.m),
            v: views(&flat.v),
            master,
            steps: 0,
            config,
            flat: Some(flat),
        }
    }

    /// One optimizer step on the accumulated gradients: clip to the global norm, update,
    /// zero the gradients. Returns `(lr used, pre-clip gradient norm)`.
    pub fn step(&mut self, params: &[Tensor], lr_override: Option<f64>) -> (f64, f64) {
        if self.flat.is_some() {
            return self.step_flat(params, lr_override);
        }
        let _g = tch::no_grad_guard();
        let grads: Vec<Tensor> = params
            .iter()
            .map(|p| {
                let g = p.grad();
                if g.defined() {
                    g.to_kind(Kind::Float)
                } else {
                    Tensor::zeros(p.size(), (Kind::Float, p.device()))
                }
            })
            .collect();
        let sq: Vec<Tensor> = grads.iter().map(|g| g.square().sum(Kind::Float)).collect();
        let norm = Tensor::stack(&sq, 0)
            .sum(Kind::Float)
            .sqrt()
            .double_value(&[]);
        let StepScalars {
            lr,
            scale,
            bc1,
            bc2,
        } = self.advance(norm, lr_override);
        let c = &self.config;
        let (b1, b2) = c.betas;
        for (k, p) in params.iter().enumerate() {
            let g = if scale != 1.0 {
                &grads[k] * scale
            } else {
                grads[k].shallow_clone()
            };
            let _ = self.m[k].g_mul_scalar_(b1).g_add_(&(&g * (1.0 - b1)));
            let _ = self.v[k]
                .g_mul_scalar_(b2)
                .g_add_(&(g.square() * (1.0 - b2)));
            let denom = (&self.v[k] / bc2).sqrt() + c.eps;
            let update = (&self.m[k] / bc1) / denom;
            let target = if self.master.is_empty() {
                p.shallow_clone()
            } else {
                self.master[k].shallow_clone()
            };
            let mut target_mut = target.shallow_clone();
            if c.weight_decay != 0.0 {
                let _ = target_mut.g_mul_scalar_(1.0 - lr * c.weight_decay);
            }
            let _ = target_mut.g_add_(&(update * -lr));
            if !self.master.is_empty() {
                let mut pm = p.shallow_clone();
                pm.copy_(&target.to_kind(p.kind()));
            }
            let mut pg = p.grad();
            if pg.defined() {
                let _ = pg.zero_();
            }
        }
        (lr, norm)
    }

    /// [`AdamW::step`] over the flat buffers: the same update, written in the fewest
    /// whole-buffer passes aten offers without a fused kernel (PyTorch's single-tensor Adam
    /// does the same): `lerp_` for both moments, one `addcdiv_` for the update with the rate
    /// and both bias corrections folded into the denominator, one reduction for the norm.
    /// Each pass over 600M fp32 values moves gigabytes, so the pass count is the step's cost.
    fn step_flat(&mut self, params: &[Tensor], lr_override: Option<f64>) -> (f64, f64) {
        let _g = tch::no_grad_guard();
        let Some(flat) = &self.flat else {
            return (self.config.lr, 0.0);
        };
        let mut grad = flat.grad.shallow_clone();
        for (p, &(off, n)) in params.iter().zip(&flat.spans) {
            let g = p.grad();
            let mut dst = grad.narrow(0, off, n);
            if g.defined() {
                dst.copy_(&g.reshape([-1]));
            } else {
                let _ = dst.zero_();
            }
        }
        let norm = grad.norm().double_value(&[]);
        let StepScalars {
            lr,
            scale,
            bc1,
            bc2,
        } = self.advance(norm, lr_override);
        let Some(flat) = &self.flat else {
            return (lr, norm);
        };
        let c = &self.config;
        let (b1, b2) = c.betas;
        if scale != 1.0 {
            let _ = grad.g_mul_scalar_(scale);
        }
        let (mut m, mut v, mut master) = (
            flat.m.shallow_clone(),
            flat.v.shallow_clone(),
            flat.master.shallow_clone(),
        );
        // m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2.
        let _ = m.lerp_(&grad, 1.0 - b1);
        let _ = v.lerp_(&grad.square(), 1.0 - b2);
        if c.weight_decay != 0.0 {
            let _ = master.g_mul_scalar_(1.0 - lr * c.weight_decay);
        }
        if lr != 0.0 {
            // master -= lr (m / bc1) / (sqrt(v / bc2) + eps)
            //         = master + m / ((-bc1 / lr) (sqrt(v) / sqrt(bc2) + eps)).
            let mut denom = v.sqrt();
            let _ = denom
                .g_mul_scalar_(-bc1 / (lr * bc2.sqrt()))
                .g_add_scalar_(-bc1 * c.eps / lr);
            let _ = master.addcdiv_(&m, &denom);
        }
        for (k, p) in params.iter().enumerate() {
            let mut pm = p.shallow_clone();
            pm.copy_(&self.master[k]);
            let mut pg = p.grad();
            if pg.defined() {
                let _ = pg.zero_();
            }
        }
        (lr, norm)
    }

    /// Count one step: its rate, the clipping factor for the gradient's global `norm`, and
    /// the two bias corrections.
    fn advance(&mut self, norm: f64, lr_override: Option<f64>) -> StepScalars {
        let c = &self.config;
        let scale = if c.clip > 0.0 {
            (c.clip / (norm + 1e-6)).min(1.0)
        } else {
            1.0
        };
        let lr = lr_override.unwrap_or_else(|| c.scheduler.lr_at(self.steps, c.lr));
        self.steps += 1;
        let t = self.steps as f64;
        let (b1, b2) = c.betas;
        StepScalars {
            lr,
            scale,
            bc1: 1.0 - b1.powf(t),
            bc2: 1.0 - b2.powf(t),
        }
    }

    /// The rate the next step will use (DeepSpeed's `get_last_lr()` after a step).
    pub fn next_lr(&self) -> f64 {
        self.config.scheduler.lr_at(self.steps, self.config.lr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ds_config_defaults_and_errors() {
        let c = OptimConfig::from_ds_config(None).unwrap();
        assert_eq!(
            (c.lr, c.betas, c.eps, c.weight_decay, c.clip, c.micro_batch),
            (1e-5, (0.9, 0.999), 1e-8, 0.0, 0.0, 1)
        );
        let c = OptimConfig::from_ds_config(Some(&json!({
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "betas": [0.9, 0.95], "weight_decay": 0.1}},
            "gradient_clipping": 1.0, "train_micro_batch_size_per_gpu": 8
        })))
        .unwrap();
        assert_eq!(
            (c.lr, c.betas, c.weight_decay, c.clip, c.micro_batch),
            (1e-3, (0.9, 0.95), 0.1, 1.0, 8)
        );
        let err =
            OptimConfig::from_ds_config(Some(&json!({"optimizer": {"params": {"lr": "fast"}}})))
                .unwrap_err()
                .to_string();
        assert!(err.contains("lr"), "{err}");
        let err = OptimConfig::from_ds_config(Some(&json!({"scheduler": {"type": "OneCycle"}})))
            .unwrap_err()
            .to_string();
        assert!(err.contains("OneCycle"), "{err}");
    }

    #[test]
    fn schedulers_follow_deepspeed() {
        let warmup = |log: bool| Scheduler::WarmupLr {
            min_lr: 0.0,
            max_lr: 1.0,
            warmup_steps: 10.0,
            log,
        };
        let warm = warmup(false);
        assert_eq!(warm.lr_at(0, 5.0), 0.0);
        assert!((warm.lr_at(5, 5.0) - 0.5).abs() < 1e-12);
        assert_eq!(warm.lr_at(10, 5.0), 1.0);
        assert!((warmup(true).lr_at(9, 1.0) - 1.0).abs() < 1e-12);
        let cos = Scheduler::WarmupCosineLr {
            total_steps: 20.0,
            warmup_min_ratio: 0.0,
            warmup_steps: 10.0,
            cos_min_ratio: 0.0,
            log: false,
        };
        assert_eq!(cos.lr_at(0, 2.0), 0.0);
        assert!((cos.lr_at(5, 2.0) - 1.0).abs() < 1e-12);
        // Half way through the cosine part the ratio is 1/2 (step 10 counts as 1 of 10).
        assert!((cos.lr_at(14, 2.0) - 1.0).abs() < 1e-12);
        assert!(cos.lr_at(19, 2.0) < 1e-12);
    }

    #[test]
    fn adamw_matches_a_hand_computed_step_and_clips() {
        let p = Tensor::from_slice(&[1.0f32, -2.0]).set_requires_grad(true);
        let loss = (&p * Tensor::from_slice(&[3.0f32, 4.0])).sum(Kind::Float);
        loss.backward();
        let config = OptimConfig {
            lr: 0.1,
            betas: (0.9, 0.999),
            eps: 1e-8,
            weight_decay: 0.5,
            clip: 1.0,
            scheduler: Scheduler::Constant,
            micro_batch: 1,
        };
        let mut opt = AdamW::new(config, std::slice::from_ref(&p));
        let (lr, norm) = opt.step(std::slice::from_ref(&p), None);
        assert_eq!(lr, 0.1);
        assert!((norm - 5.0).abs() < 1e-6);
        // First Adam step moves each weight by lr * sign(g) after decay.
        let got = Vec::<f32>::try_from(&p.detach()).unwrap();
        let want = [1.0 * (1.0 - 0.05) - 0.1, -2.0 * (1.0 - 0.05) - 0.1];
        for (g, w) in got.iter().zip(want) {
            assert!((*g as f64 - w).abs() < 1e-5, "{got:?} vs {want:?}");
        }
        assert_eq!(p.grad().abs().sum(Kind::Float).double_value(&[]), 0.0);
    }

    #[test]
    fn flat_master_weight_steps_match_the_per_tensor_steps() {
        let config = OptimConfig::from_ds_config(Some(&json!({
            "gradient_clipping": 1.0,
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "betas": [0.9, 0.95], "weight_decay": 0.1}},
        })))
        .unwrap();
        let init = [vec![0.5f32, -1.0, 2.0, 0.25], vec![1.5f32, -0.75]];
        let grads = [vec![0.1f32, -0.2, 0.3, 4.0], vec![-3.0f32, 0.05]];
        let shape = |v: &Vec<f32>| {
            if v.len() == 4 {
                vec![2i64, 2]
            } else {
                vec![2i64]
            }
        };
        let bf: Vec<Tensor> = init
            .iter()
            .map(|v| {
                Tensor::from_slice(v)
                    .view(shape(v).as_slice())
                    .to_kind(Kind::BFloat16)
                    .set_requires_grad(true)
            })
            .collect();
        let f32s: Vec<Tensor> = bf
            .iter()
            .map(|p| p.detach().to_kind(Kind::Float).set_requires_grad(true))
            .collect();
        let mut flat = AdamW::new(config.clone(), &bf);
        let mut plain = AdamW::new(config, &f32s);
        assert!(flat.flat.is_some() && plain.flat.is_none());
        for _ in 0..2 {
            for ((b, f), g) in bf.iter().zip(&f32s).zip(&grads) {
                let gb = Tensor::from_slice(g)
                    .view(b.size().as_slice())
                    .to_kind(Kind::BFloat16);
                (b * &gb).sum(Kind::Float).backward();
                (f * gb.to_kind(Kind::Float)).sum(Kind::Float).backward();
            }
            let (lr_a, norm_a) = flat.step(&bf, None);
            let (lr_b, norm_b) = plain.step(&f32s, None);
            assert_eq!(lr_a, lr_b);
            assert!((norm_a - norm_b).abs() < 1e-5, "{norm_a} {norm_b}");
            for (k, f) in f32s.iter().enumerate() {
                let d = (&flat.master[k] - f.detach()).abs().max().double_value(&[]);
                assert!(d < 1e-6, "param {k}: {d}");
                let cast = (bf[k].detach().to_kind(Kind::Float)
                    - flat.master[k].to_kind(Kind::BFloat16).to_kind(Kind::Float))
                .abs()
                .max()
                .double_value(&[]);
                assert_eq!(cast, 0.0);
                assert_eq!(bf[k].grad().abs().sum(Kind::Float).double_value(&[]), 0.0);
            }
        }
    }
}
