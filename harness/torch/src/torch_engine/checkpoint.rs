//! Checkpoints: a job's weights and optimizer state saved and loaded, and the latest one found
//! under a root.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use tch::{Device, Tensor};

use super::{Job, TorchEngine};
use rlharness_arctic::engine::EngineError;

impl TorchEngine {
    pub(super) fn save_impl(&self, job: &Job, request: &Value) -> Result<Value, EngineError> {
        let trainer = job
            .trainer
            .as_ref()
            .ok_or_else(|| EngineError::bad_request("save needs a training job"))?;
        let step = match request.get("step") {
            None | Some(Value::Null) => trainer.global_step,
            Some(v) => v.as_u64().ok_or_else(|| {
                EngineError::bad_request(format!(
                    "save: step must be a non-negative integer, got {v}"
                ))
            })?,
        };
        let dir = match request.get("path").and_then(Value::as_str) {
            Some(p) => PathBuf::from(p),
            None => {
                let root = job.checkpoint_path.as_deref().ok_or_else(|| {
                    EngineError::bad_request(
                        "save: no path given and the job has no checkpoint_path",
                    )
                })?;
                Path::new(root).join(format!("global_step_{step}"))
            }
        };
        rlharness_arctic::fsx::create_dir_all(&dir)
            .map_err(|e| EngineError::internal(e.to_string()))?;
        let _g = tch::no_grad_guard();
        let weights = job.model.host_weights(None);
        let model_file = dir.join("model.safetensors");
        Tensor::write_safetensors(&weights, &model_file).map_err(|e| {
            EngineError::internal(format!("cannot write {}: {e}", model_file.display()))
        })?;
        let mut opt_state = Vec::new();
        for (k, name) in job.model.names.iter().enumerate() {
            opt_state.push((
                format!("exp_avg.{name}"),
                trainer.opt.m[k].to_device(Device::Cpu),
            ));
            opt_state.push((
                format!("exp_avg_sq.{name}"),
                trainer.opt.v[k].to_device(Device::Cpu),
            ));
            if let Some(m) = trainer.opt.master.get(k) {
                opt_state.push((format!("master.{name}"), m.to_device(Device::Cpu)));
            }
        }
        let opt_file = dir.join("optimizer.safetensors");
        Tensor::write_safetensors(&opt_state, &opt_file).map_err(|e| {
            EngineError::internal(format!("cannot write {}: {e}", opt_file.display()))
        })?;
        let state = json!({"global_step": step, "optimizer_steps": trainer.opt.steps});
        rlharness_arctic::fsx::write_atomic(
            &dir.join("trainer_state.json"),
            state.to_string().as_bytes(),
        )
        .map_err(|e| EngineError::internal(e.to_string()))?;
        let export_hf = request
            .get("export_hf")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let path = dir.display().to_string();
        Ok(
            json!({"path": path, "hf_path": if export_hf { Value::String(path.clone()) } else { Value::Null }, "global_step": step}),
        )
    }

    pub(super) fn load_impl(&self, job: &mut Job, request: &Value) -> Result<Value, EngineError> {
        if job.trainer.is_none() {
            return Err(EngineError::bad_request(
                "load-checkpoint needs a training job",
            ));
        }
        let dir = match (
            request.get("path").and_then(Value::as_str),
            request.get("step").and_then(Value::as_u64),
        ) {
            (Some(p), _) => PathBuf::from(p),
            (None, step) => {
                let root = job.checkpoint_path.as_deref().ok_or_else(|| {
                    EngineError::bad_request(
                        "load-checkpoint: no path given and the job has no checkpoint_path",
                    )
                })?;
                match step {
                    Some(s) => Path::new(root).join(format!("global_step_{s}")),
                    None => latest_checkpoint(Path::new(root))?,
                }
            }
        };
        let read = |file: &str| -> Result<HashMap<String, Tensor>, EngineError> {
            let p = dir.join(file);
            Tensor::read_safetensors(&p)
                .map(|v| v.into_iter().collect())
                .map_err(|e| {
                    EngineError::bad_request(format!(
                        "cannot read checkpoint file {}: {e}",
                        p.display()
                    ))
                })
        };
        let weights = read("model.safetensors")?;
        let opt = read("optimizer.safetensors")?;
        let state_path = dir.join("trainer_state.json");
        let state: Value = serde_json::from_str(
            &rlharness_arctic::fsx::read_to_string(&state_path)
                .map_err(|e| EngineError::bad_request(e.to_string()))?,
        )
        .map_err(|e| {
            EngineError::bad_request(format!("{} is not valid JSON: {e}", state_path.display()))
        })?;
        let get = |m: &HashMap<String, Tensor>, key: String| {
            m.get(&key).map(|t| t.shallow_clone()).ok_or_else(|| {
                EngineError::bad_request(format!("checkpoint {} lacks {key}", dir.display()))
            })
        };
        let names = job.model.names.clone();
        let new_weights = names
            .iter()
            .map(|n| get(&weights, n.clone()))
            .collect::<Result<Vec<_>, _>>()?;
        job.model
            .copy_from(&new_weights)
            .map_err(EngineError::bad_request)?;
        let trainer = job
            .trainer
            .as_mut()
            .ok_or_else(|| EngineError::internal("training job lost its trainer"))?;
        let _g = tch::no_grad_guard();
        for (k, n) in names.iter().enumerate() {
            trainer.opt.m[k].copy_(&get(&opt, format!("exp_avg.{n}"))?.to_device(job.device));
            trainer.opt.v[k].copy_(&get(&opt, format!("exp_avg_sq.{n}"))?.to_device(job.device));
            if !trainer.opt.master.is_empty() {
                trainer.opt.master[k]
                    .copy_(&get(&opt, format!("master.{n}"))?.to_device(job.device));
            }
        }
        trainer.global_step = state
            .get("global_step")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        trainer.opt.steps = state
            .get("optimizer_steps")
            .and_then(Value::as_u64)
            .unwrap_or(trainer.global_step);
        Ok(json!({"path": dir.display().to_string(), "global_step": trainer.global_step}))
    }
}

pub(super) fn latest_checkpoint(root: &Path) -> Result<PathBuf, EngineError> {
    let entries = std::fs::read_dir(root).map_err(|e| {
        EngineError::bad_request(format!(
            "load-checkpoint: cannot list {}: {e}",
            root.display()
        ))
    })?;
    entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_prefix("global_step_")
                .and_then(|s| s.parse::<u64>().ok())
                .map(|s| (s, e.path()))
        })
        .max_by_key(|(s, _)| *s)
        .map(|(_, p)| p)
        .ok_or_else(|| {
            EngineError::bad_request(format!(
                "load-checkpoint: no global_step_* checkpoint in {}",
                root.display()
            ))
        })
}
