//! The Arctic routes the engine serves: its [`Engine`] implementation (jobs, forward, step,
//! generate, weight sync, checkpoints, sleep, weight norm, weight digests).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tch::{Device, Kind, Tensor};

use super::generate::{completions, lost_answer, parse_generate};
use super::{guard, lock, peak_rss_gb_and_reset, write_gate, Job, TorchEngine, Trainer};
use crate::layout::{device_name, JobPlacement, SleepRecord, SyncRecord};
use crate::optim::{AdamW, OptimConfig};
use crate::settings::WorkerSettings;
use rlharness_arctic::engine::{
    Completion, Engine, EngineError, ForwardBackwardOutput, ForwardOutput, GenerateRequest,
    ModelBatch, QueuedGenerate, StepOutput, Timed,
};
use rlharness_arctic::wire::api::{JobConfig, JobType};
use rlharness_arctic::wire::digest::TensorDigest;

impl Engine for TorchEngine {
    fn create_job(&self, job_id: u64, config: &JobConfig) -> Result<(), EngineError> {
        let worker = WorkerSettings::from_config(config.ds_worker_config.as_ref())?;
        let ds = match config.job_type {
            JobType::Training => config.ds_config.as_ref(),
            // A DeepSpeed log_prob job carries the training job's ds_config (it only selects
            // DeepSpeed); its own engine settings travel in log_prob_config.
            JobType::LogProb => config
                .log_prob_config
                .as_ref()
                .or(config.ds_config.as_ref()),
            JobType::Sampling => None,
        };
        let optim = OptimConfig::from_ds_config(ds).map_err(EngineError::bad_request)?;
        let device = self.layout.device_for(config.job_type);
        let mut model = {
            let base = lock(&self.base);
            if device == base.device {
                base.deep_copy()
            } else {
                base.copy_to(device)
            }
        };
        if config.job_type == JobType::Sampling {
            self.round_sampler(&mut model)?;
        }
        let trainer = if config.job_type == JobType::Training {
            model.set_requires_grad(true);
            Some(Trainer {
                opt: AdamW::new(optim.clone(), &model.params),
                global_step: 0,
            })
        } else {
            None
        };
        let job = Job {
            job_type: config.job_type,
            device,
            model,
            trainer,
            worker,
            micro_batch: optim.micro_batch,
            checkpoint_path: config.checkpoint_path.clone(),
            weights_version: 0,
            occurrences: HashMap::new(),
        };
        lock(&self.jobs).insert(job_id, Arc::new(Mutex::new(job)));
        let mut record = lock(&self.record);
        record.jobs.retain(|j| j.job_id != job_id);
        record.jobs.push(JobPlacement {
            job_id,
            job_type: config.job_type.as_str().to_string(),
            device: device_name(device),
        });
        if config.job_type == JobType::Training {
            // The sync strategy is the training job's (`cuda_ipc`); the layout decides
            // whether it takes effect.
            record.rules = rlharness_arctic::torch_spec::layout::LayoutRules::new(
                self.layout.colocate,
                config.cuda_ipc,
            );
        }
        record.write(self.layout.record.as_ref());
        Ok(())
    }

    fn destroy_job(&self, job_id: u64) {
        lock(&self.jobs).remove(&job_id);
    }

    /// Log-probs (and entropy) of the response tokens. Works on any job, so a test can score
    /// the sampler's copy too; the server only routes training and log_prob jobs here.
    fn forward(
        &self,
        job_id: u64,
        batch: &ModelBatch,
    ) -> Result<Timed<ForwardOutput>, EngineError> {
        let job = self.job(job_id)?;
        let job = lock(&job);
        guard("forward", || self.forward_impl(&job, batch)).map(Timed::untimed)
    }

    fn forward_backward(
        &self,
        job_id: u64,
        batch: &ModelBatch,
    ) -> Result<Timed<ForwardBackwardOutput>, EngineError> {
        let job = self.job(job_id)?;
        let mut job = lock(&job);
        let started = std::time::Instant::now();
        let out = guard("forward-backward", || {
            self.forward_backward_impl(&mut job, batch)
        })
        .map(Timed::untimed);
        if self.slowdown > 0.0 {
            // The planted slow kernel: the results are on the host already, so this is wall
            // time the call really took, stretched.
            std::thread::sleep(started.elapsed().mul_f64(self.slowdown));
        }
        out
    }

    fn step(
        &self,
        job_id: u64,
        learning_rate: Option<f64>,
    ) -> Result<Timed<StepOutput>, EngineError> {
        let job = self.job(job_id)?;
        let _writing = write_gate(&self.weight_gate);
        let mut job = lock(&job);
        let job = &mut *job;
        let trainer = job
            .trainer
            .as_mut()
            .ok_or_else(|| EngineError::bad_request("step needs a training job"))?;
        if let Some(lr) = learning_rate {
            if !(lr.is_finite() && lr >= 0.0) {
                return Err(EngineError::bad_request(format!(
                    "learning_rate must be a non-negative number, got {lr}"
                )));
            }
        }
        let (_, norm) = guard("step", || {
            Ok(trainer.opt.step(&job.model.params, learning_rate))
        })?;
        trainer.global_step += 1;
        let last_lr = trainer.opt.next_lr();
        job.weights_changed();
        Ok(Timed::untimed(StepOutput {
            last_lr,
            grad_norm: Some(norm),
            peak_memory_gb: (self.device == Device::Cpu)
                .then(peak_rss_gb_and_reset)
                .flatten(),
        }))
    }

    fn generate(
        &self,
        job_id: u64,
        request: &GenerateRequest,
    ) -> Result<Timed<Vec<Completion>>, EngineError> {
        let (params, prompts) = parse_generate(request)?;
        let sampled = self.generate_ids(job_id, &prompts, &params)?;
        Ok(Timed::untimed(completions(sampled, &prompts, params.n)))
    }

    fn generate_queued(
        &self,
        job_id: u64,
        request: &GenerateRequest,
    ) -> Option<Result<QueuedGenerate, EngineError>> {
        let parsed = parse_generate(request).and_then(|(params, prompts)| {
            self.check_prompts(&prompts)?;
            Ok((params, prompts))
        });
        let (params, prompts) = match parsed {
            Ok(p) => p,
            Err(e) => return Some(Err(e)),
        };
        let queue = self.queue_for(&prompts, &params)?;
        let (answer, serve) = self.enqueue(queue, job_id, &prompts, &params);
        Some(Ok(QueuedGenerate {
            answer: Box::pin(async move {
                let sampled = answer.await.unwrap_or_else(|_| Err(lost_answer()))?;
                Ok(Timed::untimed(completions(sampled, &prompts, params.n)))
            }),
            serve: serve.then_some(queue),
        }))
    }

    fn serve_generate_queue(&self, queue: usize) {
        self.serve_queue(queue);
    }

    fn weight_sync(&self, source: u64, targets: &[u64]) -> Result<Timed<()>, EngineError> {
        let _writing = write_gate(&self.weight_gate);
        let started = std::time::Instant::now();
        let src = self.job(source)?;
        let (from, snapshot): (Device, Vec<Tensor>) = {
            let src = lock(&src);
            if src.job_type != JobType::Training {
                return Err(EngineError::bad_request(format!(
                    "weight-sync source {source} is not a training job"
                )));
            }
            let _g = tch::no_grad_guard();
            (
                src.device,
                src.model.params.iter().map(|p| p.detach().copy()).collect(),
            )
        };
        let snapshot_bytes: u64 = snapshot
            .iter()
            .map(|t| (t.numel() * t.kind().elt_size_in_bytes()) as u64)
            .sum();
        let mut to = Vec::with_capacity(targets.len());
        for &t in targets {
            if t == source {
                return Err(EngineError::bad_request(
                    "weight-sync target equals its source",
                ));
            }
            let job = self.job(t)?;
            let mut job = lock(&job);
            job.model
                .copy_from(&snapshot)
                .map_err(EngineError::internal)?;
            if job.job_type == JobType::Sampling {
                self.round_sampler(&mut job.model)?;
            }
            job.weights_changed();
            to.push(job.device);
        }
        if to.iter().any(|d| d.is_cuda()) {
            // The copies are queued on the devices: the seconds are the copies', not the
            // queueing's.
            for d in std::iter::once(from).chain(to.iter().copied()) {
                if let Device::Cuda(i) = d {
                    tch::Cuda::synchronize(i as i64);
                }
            }
        }
        let mut record = lock(&self.record);
        record.weight_syncs.push(SyncRecord {
            source,
            targets: targets.to_vec(),
            from: device_name(from),
            to: to.iter().map(|&d| device_name(d)).collect(),
            bytes: snapshot_bytes * targets.len() as u64,
            seconds: started.elapsed().as_secs_f64(),
        });
        record.write(self.layout.record.as_ref());
        Ok(Timed::untimed(()))
    }

    fn save(&self, job_id: u64, request: &Value) -> Result<Value, EngineError> {
        let job = self.job(job_id)?;
        let job = lock(&job);
        guard("save", || self.save_impl(&job, request))
    }

    fn load_checkpoint(&self, job_id: u64, request: &Value) -> Result<Value, EngineError> {
        let _writing = write_gate(&self.weight_gate);
        let job = self.job(job_id)?;
        let mut job = lock(&job);
        let out = guard("load-checkpoint", || self.load_impl(&mut job, request))?;
        job.weights_changed();
        Ok(out)
    }

    fn sleep_changed(&self, job_id: u64, asleep: bool) {
        // The job's type from the record, not the job: a running call may hold the job's lock,
        // and the server calls this on its async threads.
        let mut record = lock(&self.record);
        let Some(job_type) = record
            .jobs
            .iter()
            .find(|j| j.job_id == job_id)
            .map(|j| j.job_type.clone())
        else {
            return;
        };
        let frees = if job_type == JobType::Sampling.as_str() {
            record.rules.sampler_sleep_frees.clone()
        } else {
            record.rules.trainer_sleep_frees.clone()
        };
        record.sleeps.push(SleepRecord {
            job_id,
            job_type,
            asleep,
            frees: if asleep { frees } else { Vec::new() },
        });
        record.write(self.layout.record.as_ref());
    }

    /// Each tensor as the job holds it, copied to the host (`tensor_digest`).
    fn weight_digest(&self, job_id: u64) -> Result<Vec<TensorDigest>, EngineError> {
        let job = self.job(job_id)?;
        let job = lock(&job);
        guard("weight-digest", || {
            let _g = tch::no_grad_guard();
            job.model
                .names
                .iter()
                .zip(&job.model.params)
                .map(|(name, p)| tensor_digest(name, p))
                .collect()
        })
    }

    fn weight_norm(&self, job_id: u64) -> Result<(f64, u64), EngineError> {
        let job = self.job(job_id)?;
        let job = lock(&job);
        let _g = tch::no_grad_guard();
        let sq: f64 = job
            .model
            .params
            .iter()
            .map(|p| {
                p.to_kind(Kind::Float)
                    .square()
                    .sum(Kind::Float)
                    .double_value(&[])
            })
            .sum();
        Ok((sq.sqrt(), job.model.num_parameters()))
    }
}

/// The digest of one tensor's bytes as held: its dtype, on the host, contiguous (libtorch's
/// CPU tensors are little-endian, as the wire's are).
fn tensor_digest(name: &str, t: &Tensor) -> Result<TensorDigest, EngineError> {
    let host = t.detach().to_device(Device::Cpu).contiguous();
    let dtype = match host.kind() {
        Kind::Float => "F32",
        Kind::BFloat16 => "BF16",
        Kind::Half => "F16",
        Kind::Double => "F64",
        other => {
            return Err(EngineError::internal(format!(
            "weight-digest: tensor {name} is held as {other:?}, which has no safetensors name here"
        )))
        }
    };
    let numel = host.numel();
    let mut bytes = vec![0u8; numel * host.kind().elt_size_in_bytes()];
    host.f_copy_data_u8(&mut bytes, numel)
        .map_err(|e| EngineError::internal(format!("weight-digest: cannot read {name}: {e}")))?;
    let shape: Vec<u64> = host.size().iter().map(|&d| d as u64).collect();
    Ok(TensorDigest::of_bytes(name, dtype, &shape, &bytes))
}
