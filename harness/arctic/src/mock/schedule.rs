//! The learning rate DeepSpeed reports after each optimizer step, computed from the training
//! job's `ds_config` (`optimizer.params.lr` and `scheduler`) the way DeepSpeed's
//! `lr_schedules` do, so a knob such as the warmup ratio visibly reaches `/step`'s `last_lr`.
//!
//! DeepSpeed schedulers start at `last_batch_iteration = -1` and are stepped once per optimizer
//! step, so after `k` steps the reported rate is the schedule at iteration `k - 1`.

use serde_json::Value;

/// Optimizer learning rate when `ds_config` names none (the Arctic server's default).
pub(crate) const DEFAULT_LR: f64 = 1e-5;

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum LrSchedule {
    Constant(f64),
    /// `WarmupLR` (and `WarmupDecayLR` when `total_num_steps` is set).
    Warmup {
        min_lr: f64,
        max_lr: f64,
        warmup_steps: f64,
        log: bool,
        decay_total_steps: Option<f64>,
    },
    /// `WarmupCosineLR`: ratios of the optimizer's own rate.
    WarmupCosine {
        base_lr: f64,
        total_steps: f64,
        warmup_steps: f64,
        warmup_min_ratio: f64,
        cos_min_ratio: f64,
        log: bool,
    },
}

fn num(params: &Value, key: &str, default: f64, ctx: &str) -> Result<f64, String> {
    match params.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => v
            .as_f64()
            .filter(|x| x.is_finite())
            .ok_or_else(|| format!("{ctx}.{key} must be a finite number, got {v}")),
    }
}

fn warmup_type(params: &Value, ctx: &str) -> Result<bool, String> {
    match params.get("warmup_type") {
        None | Some(Value::Null) => Ok(true),
        Some(Value::String(s)) if s == "log" => Ok(true),
        Some(Value::String(s)) if s == "linear" => Ok(false),
        Some(v) => Err(format!(
            "{ctx}.warmup_type must be \"log\" or \"linear\", got {v}"
        )),
    }
}

/// A `ds_config` whose optimizer or scheduler the mock cannot follow: the key and why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct ScheduleError(pub(crate) String);

impl LrSchedule {
    /// Read the schedule from a training job's `ds_config` (absent: constant default rate).
    pub(crate) fn from_ds_config(ds_config: Option<&Value>) -> Result<Self, ScheduleError> {
        Self::read(ds_config).map_err(ScheduleError)
    }

    fn read(ds_config: Option<&Value>) -> Result<Self, String> {
        let null = Value::Null;
        let ds = ds_config.unwrap_or(&null);
        let opt_params = ds
            .get("optimizer")
            .and_then(|o| o.get("params"))
            .unwrap_or(&null);
        let base_lr = num(opt_params, "lr", DEFAULT_LR, "ds_config.optimizer.params")?;
        let Some(sched) = ds.get("scheduler").filter(|s| !s.is_null()) else {
            return Ok(LrSchedule::Constant(base_lr));
        };
        let kind = sched
            .get("type")
            .and_then(Value::as_str)
            .ok_or("ds_config.scheduler.type must name a DeepSpeed scheduler")?;
        let p = sched.get("params").unwrap_or(&null);
        let ctx = "ds_config.scheduler.params";
        match kind {
            "WarmupLR" | "WarmupDecayLR" => {
                let decay_total_steps = if kind == "WarmupDecayLR" {
                    Some(
                        p.get("total_num_steps")
                            .and_then(Value::as_f64)
                            .ok_or("ds_config.scheduler.params.total_num_steps is required by WarmupDecayLR")?,
                    )
                } else {
                    None
                };
                // WarmupLR peaks at the optimizer's own rate unless told otherwise;
                // WarmupDecayLR keeps DeepSpeed's historical 0.001.
                let default_max = if decay_total_steps.is_some() {
                    0.001
                } else {
                    base_lr
                };
                Ok(LrSchedule::Warmup {
                    min_lr: num(p, "warmup_min_lr", 0.0, ctx)?,
                    max_lr: num(p, "warmup_max_lr", default_max, ctx)?,
                    warmup_steps: num(p, "warmup_num_steps", 1000.0, ctx)?.max(2.0),
                    // DeepSpeed warns and falls back to log for an unknown warmup type here.
                    log: warmup_type(p, ctx).unwrap_or(true),
                    decay_total_steps,
                })
            }
            "WarmupCosineLR" => Ok(LrSchedule::WarmupCosine {
                base_lr,
                total_steps: p
                    .get("total_num_steps")
                    .and_then(Value::as_f64)
                    .ok_or("ds_config.scheduler.params.total_num_steps is required by WarmupCosineLR")?,
                warmup_steps: num(p, "warmup_num_steps", 1000.0, ctx)?.max(2.0),
                warmup_min_ratio: num(p, "warmup_min_ratio", 0.0, ctx)?,
                cos_min_ratio: num(p, "cos_min_ratio", 0.0001, ctx)?,
                log: warmup_type(p, ctx)?,
            }),
            other => Err(format!(
                "ds_config.scheduler.type {other:?} is not supported by the mock (WarmupLR, WarmupDecayLR, WarmupCosineLR)"
            )),
        }
    }

    /// The rate at DeepSpeed's `last_batch_iteration = it`.
    pub(crate) fn at_iteration(&self, it: i64) -> f64 {
        let warm = |it: f64, w: f64, log: bool| {
            if log {
                (it + 1.0).ln() / w.ln()
            } else {
                it / w
            }
        };
        match *self {
            LrSchedule::Constant(lr) => lr,
            LrSchedule::Warmup {
                min_lr,
                max_lr,
                warmup_steps,
                log,
                decay_total_steps,
            } => {
                if it < 0 {
                    return 0.0;
                }
                let i = it as f64;
                let gamma = if i < warmup_steps {
                    warm(i, warmup_steps, log)
                } else if let Some(total) = decay_total_steps {
                    ((total - i) / (total - warmup_steps).max(1.0)).max(0.0)
                } else {
                    1.0
                };
                min_lr + (max_lr - min_lr) * gamma
            }
            LrSchedule::WarmupCosine {
                base_lr,
                total_steps,
                warmup_steps,
                warmup_min_ratio,
                cos_min_ratio,
                log,
            } => {
                if it < 0 {
                    return 0.0;
                }
                let i = it as f64;
                let ratio = if i < warmup_steps {
                    warmup_min_ratio + warm(i, warmup_steps, log) * (1.0 - warmup_min_ratio)
                } else {
                    let real_step = i - warmup_steps + 1.0;
                    let real_total = total_steps - warmup_steps;
                    let c = (1.0 + (std::f64::consts::PI * real_step / real_total).cos()) / 2.0;
                    (cos_min_ratio + (1.0 - cos_min_ratio) * c).max(0.0)
                };
                base_lr * ratio
            }
        }
    }

    /// `last_lr` after `steps` optimizer steps.
    pub(crate) fn after_steps(&self, steps: u64) -> f64 {
        self.at_iteration(steps as i64 - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn no_config_is_the_server_default() {
        let s = LrSchedule::from_ds_config(None).unwrap();
        assert_eq!(s.after_steps(1), 1e-5);
        let s = LrSchedule::from_ds_config(Some(&json!({"optimizer": {"params": {"lr": 3e-6}}})))
            .unwrap();
        assert_eq!(s.after_steps(7), 3e-6);
    }

    #[test]
    fn warmup_lr_linear_and_log_follow_deepspeed() {
        let cfg = json!({"scheduler": {"type": "WarmupLR", "params": {
            "warmup_min_lr": 0.0, "warmup_max_lr": 1e-6, "warmup_num_steps": 10, "warmup_type": "linear"}}});
        let s = LrSchedule::from_ds_config(Some(&cfg)).unwrap();
        assert_eq!(s.after_steps(1), 0.0);
        assert!((s.after_steps(6) - 0.5e-6).abs() < 1e-18);
        assert_eq!(s.after_steps(11), 1e-6);
        assert_eq!(s.after_steps(100), 1e-6);
        let cfg = json!({"optimizer": {"params": {"lr": 1e-6}},
            "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 10}}});
        let s = LrSchedule::from_ds_config(Some(&cfg)).unwrap();
        let want = 1e-6 * (3.0f64).ln() / (10.0f64).ln();
        assert!((s.after_steps(3) - want).abs() < 1e-18);
    }

    #[test]
    fn warmup_cosine_warms_then_decays_to_the_floor() {
        let cfg = json!({"optimizer": {"params": {"lr": 1e-6}}, "scheduler": {"type": "WarmupCosineLR",
            "params": {"total_num_steps": 20, "warmup_num_steps": 4, "warmup_type": "linear", "cos_min_ratio": 0.0}}});
        let s = LrSchedule::from_ds_config(Some(&cfg)).unwrap();
        assert_eq!(s.after_steps(1), 0.0);
        assert!((s.after_steps(3) - 0.5e-6).abs() < 1e-18);
        let peak = s.after_steps(5);
        assert!(peak < 1e-6 && peak > 0.98e-6, "{peak}");
        assert!(s.after_steps(12) < peak);
        assert!(s.after_steps(20).abs() < 1e-12);
    }

    #[test]
    fn bad_schedulers_are_clear_errors() {
        let e = LrSchedule::from_ds_config(Some(&json!({"scheduler": {"type": "OneCycle"}})))
            .unwrap_err();
        assert!(e.0.contains("OneCycle"), "{e}");
        let e = LrSchedule::from_ds_config(Some(&json!({"optimizer": {"params": {"lr": "auto"}}})))
            .unwrap_err();
        assert!(e.0.contains("ds_config.optimizer.params.lr"), "{e}");
        let e = LrSchedule::from_ds_config(Some(&json!({"scheduler": {"type": "WarmupCosineLR"}})))
            .unwrap_err();
        assert!(e.0.contains("total_num_steps"), "{e}");
    }
}
