//! Sampling: `/generate` requests parsed and answered, the generate queues that batch
//! concurrent calls (one-row calls of one prompt length on the CPU, batched calls on CUDA), and a batch
//! sampled now.

use std::sync::Mutex;

use tch::Device;

use super::{guard, lock, read_gate, TorchEngine, TORCH_RNG};
use crate::sample::{self, Draws, Sampled, SamplingParams};
use rlharness_arctic::engine::{Completion, EngineError, GenerateRequest};
use rlharness_arctic::task::{CharTokenizer, EOS_ID, PAD_ID};

/// Generate calls waiting for the running batch to end (CUDA only).
#[derive(Default)]
pub(super) struct GenQueue {
    pending: Vec<PendingGen>,
    /// A call is serving batches; new calls queue behind it.
    serving: bool,
}

struct PendingGen {
    job_id: u64,
    prompts: Vec<Vec<i64>>,
    params: SamplingParams,
    reply: tokio::sync::oneshot::Sender<Result<Vec<Sampled>, EngineError>>,
}

/// The generate queues ([`TorchEngine::enqueue`]): the CPU's one-row calls, and the
/// batched calls of `batch_generate`.
const CPU_QUEUE: usize = 0;
const GEN_QUEUE: usize = 1;

/// What a queued call's answer is when its batch ended without one.
pub(super) fn lost_answer() -> EngineError {
    EngineError::internal("generate: the batch this call rode in ended without an answer")
}

/// A `/generate` request's sampling parameters and tokenized prompts.
pub(super) fn parse_generate(
    request: &GenerateRequest,
) -> Result<(SamplingParams, Vec<Vec<i64>>), EngineError> {
    let params = SamplingParams::from_map(&request.sampling_params)?;
    let prompts = request
        .prompts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            CharTokenizer::encode(p)
                .map_err(|e| EngineError::bad_request(format!("prompt {i}: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((params, prompts))
}

/// The `/generate` answer of sampled rows: `n` rows a prompt, in prompt order.
pub(super) fn completions(
    sampled: Vec<Sampled>,
    prompts: &[Vec<i64>],
    n: usize,
) -> Vec<Completion> {
    sampled
        .into_iter()
        .enumerate()
        .map(|(k, s)| Completion {
            text: CharTokenizer::decode(&s.tokens),
            generation_len: s.tokens.len(),
            prompt_len: prompts[k / n].len(),
            finish_reason: if s.stopped { "stop" } else { "length" }.into(),
            token_ids: s.tokens,
            prefix_cache_len: 0,
            logprobs: s.logprobs,
        })
        .collect()
}

/// Calls batch together when they sample the same way; the seed of the batch is its first
/// call's.
fn same_sampling(a: &PendingGen, b: &PendingGen) -> bool {
    a.job_id == b.job_id
        && SamplingParams {
            seed: None,
            ..a.params.clone()
        } == SamplingParams {
            seed: None,
            ..b.params.clone()
        }
}

impl TorchEngine {
    pub fn generate_ids(
        &self,
        job_id: u64,
        prompts: &[Vec<i64>],
        params: &SamplingParams,
    ) -> Result<Vec<Sampled>, EngineError> {
        self.check_prompts(prompts)?;
        let Some(queue) = self.queue_for(prompts, params) else {
            // One call at a time, each under its own seed: bit-exact CPU runs.
            return self.generate_now(job_id, prompts, params);
        };
        let (answer, serve) = self.enqueue(queue, job_id, prompts, params);
        if serve {
            self.serve_queue(queue);
        }
        answer
            .blocking_recv()
            .unwrap_or_else(|_| Err(lost_answer()))
    }

    pub(super) fn check_prompts(&self, prompts: &[Vec<i64>]) -> Result<(), EngineError> {
        let vocab = self.config.vocab_size as i64;
        for (i, p) in prompts.iter().enumerate() {
            if p.is_empty() {
                return Err(EngineError::bad_request(format!("prompt {i} is empty")));
            }
            if let Some(bad) = p.iter().find(|&&t| t < 0 || t >= vocab) {
                return Err(EngineError::bad_request(format!(
                    "prompt {i} holds token id {bad}, outside the vocabulary of {vocab}"
                )));
            }
        }
        Ok(())
    }

    /// The queue a call goes to, or `None` when it runs at once.
    pub(super) fn queue_for(&self, prompts: &[Vec<i64>], params: &SamplingParams) -> Option<usize> {
        if self.device == Device::Cpu
            && prompts.len() == 1
            && params.n == 1
            && params.seed.is_none()
        {
            // The adapter's one-row call on the CPU ([`TorchEngine::serve_cpu_batches`]).
            return Some(CPU_QUEUE);
        }
        self.batch_generate.then_some(GEN_QUEUE)
    }

    /// Queue a call; returns where its answer arrives, and whether this caller found nobody
    /// serving the queue (then it must serve it, [`TorchEngine::serve_queue`], or no queued
    /// call is answered).
    pub(super) fn enqueue(
        &self,
        queue: usize,
        job_id: u64,
        prompts: &[Vec<i64>],
        params: &SamplingParams,
    ) -> (
        tokio::sync::oneshot::Receiver<Result<Vec<Sampled>, EngineError>>,
        bool,
    ) {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let mut q = lock(self.queue(queue));
        q.pending.push(PendingGen {
            job_id,
            prompts: prompts.to_vec(),
            params: params.clone(),
            reply,
        });
        let serve = !q.serving;
        q.serving = true;
        (answer, serve)
    }

    fn queue(&self, queue: usize) -> &Mutex<GenQueue> {
        if queue == CPU_QUEUE {
            &self.cpu_queue
        } else {
            &self.gen_queue
        }
    }

    /// Serve `queue` until it is empty; only the caller [`TorchEngine::enqueue`] told to.
    pub(super) fn serve_queue(&self, queue: usize) {
        if queue == CPU_QUEUE {
            self.serve_cpu_batches();
        } else {
            self.serve_generate_batches();
        }
    }

    /// Serve the queue of the adapter's one-row calls on the CPU: the first caller serves every
    /// call queued meanwhile, calls of the same job, sampling and prompt length as one batch
    /// whose rows each draw from their own call's seed ([`Job::request_seed`], taken in queue
    /// order). Prompts of one length need no padding and no kernel mixes rows, so a row samples
    /// the tokens it samples alone (`batched_cpu_rows_equal_single_calls` checks it) and the
    /// run does not depend on how the calls happened to batch. Only the last bits of a row's
    /// log-probabilities may differ with the batch's size (MKL's strict mode does not pin
    /// them): the sampler-vs-trainer rounding gap, which the exact lane leaves to its bands.
    fn serve_cpu_batches(&self) {
        loop {
            let pending = {
                let mut q = lock(&self.cpu_queue);
                if q.pending.is_empty() {
                    q.serving = false;
                    return;
                }
                std::mem::take(&mut q.pending)
            };
            // Calls that batch without padding together, in queue order.
            let mut groups: Vec<Vec<PendingGen>> = Vec::new();
            for call in pending {
                match groups.iter_mut().find(|g| {
                    g[0].job_id == call.job_id
                        && g[0].prompts[0].len() == call.prompts[0].len()
                        && g[0].params == call.params
                }) {
                    Some(g) => g.push(call),
                    None => groups.push(vec![call]),
                }
            }
            for group in groups {
                let first = &group[0];
                let result = self.job(first.job_id).and_then(|job| {
                    let eos = if first.params.ignore_eos { -1 } else { EOS_ID };
                    let _reading = read_gate(&self.weight_gate);
                    let (model, seeds) = {
                        let mut job = lock(&job);
                        let seeds: Vec<u64> = group
                            .iter()
                            .map(|g| job.request_seed(self.seed, &g.prompts))
                            .collect();
                        (job.model.share(), seeds)
                    };
                    let rows: Vec<Vec<i64>> = group.iter().map(|g| g.prompts[0].clone()).collect();
                    self.cpu_batch_max
                        .fetch_max(rows.len() as u64, std::sync::atomic::Ordering::Relaxed);
                    guard("generate", || {
                        Ok(sample::sample(
                            &model,
                            &rows,
                            &first.params,
                            eos,
                            PAD_ID,
                            &mut Draws::rows(&seeds),
                        ))
                    })
                });
                match result {
                    Ok(rows) => {
                        for (g, row) in group.into_iter().zip(rows) {
                            let _ = g.reply.send(Ok(vec![row]));
                        }
                    }
                    Err(e) => {
                        for g in group {
                            let _ = g.reply.send(Err(e.clone()));
                        }
                    }
                }
            }
        }
    }

    /// Serve queued generate calls, a batch at a time, until none is left. Waits briefly for
    /// calls sent together to arrive, so the first of them does not run alone.
    fn serve_generate_batches(&self) {
        const SETTLE: std::time::Duration = std::time::Duration::from_millis(20);
        const MAX_WAIT: std::time::Duration = std::time::Duration::from_millis(250);
        loop {
            let start = std::time::Instant::now();
            let mut seen = lock(&self.gen_queue).pending.len();
            while start.elapsed() < MAX_WAIT {
                std::thread::sleep(SETTLE);
                let now = lock(&self.gen_queue).pending.len();
                if now == seen {
                    break;
                }
                seen = now;
            }
            let group: Vec<PendingGen> = {
                let mut q = lock(&self.gen_queue);
                if q.pending.is_empty() {
                    q.serving = false;
                    return;
                }
                let mut pending = std::mem::take(&mut q.pending).into_iter();
                let Some(first) = pending.next() else {
                    q.serving = false;
                    return;
                };
                let (mut group, rest): (Vec<_>, Vec<_>) =
                    pending.partition(|p| same_sampling(p, &first));
                group.insert(0, first);
                q.pending = rest;
                group
            };
            let prompts: Vec<Vec<i64>> = group.iter().flat_map(|g| g.prompts.clone()).collect();
            let first = &group[0];
            match self.generate_now(first.job_id, &prompts, &first.params) {
                Ok(mut rows) => {
                    for g in group.into_iter().rev() {
                        let take = g.prompts.len() * g.params.n;
                        let mine = rows.split_off(rows.len().saturating_sub(take));
                        let _ = g.reply.send(Ok(mine));
                    }
                }
                Err(e) => {
                    for g in group {
                        let _ = g.reply.send(Err(e.clone()));
                    }
                }
            }
        }
    }

    /// One sampling call on the job's model, seeded by the call's seed (or, without one, by
    /// [`Job::request_seed`]). On CUDA the draws come from torch's generator (the batch stays on
    /// the device); elsewhere from the call's own host stream, without holding the job's lock.
    fn generate_now(
        &self,
        job_id: u64,
        prompts: &[Vec<i64>],
        params: &SamplingParams,
    ) -> Result<Vec<Sampled>, EngineError> {
        let job = self.job(job_id)?;
        let eos = if params.ignore_eos { -1 } else { EOS_ID };
        if self.device == Device::Cpu {
            let _reading = read_gate(&self.weight_gate);
            let (model, seed) = {
                let mut job = lock(&job);
                let seed = match params.seed {
                    Some(seed) => seed,
                    None => job.request_seed(self.seed, prompts),
                };
                (job.model.share(), seed)
            };
            let mut draws = Draws::host(seed);
            return guard("generate", || {
                Ok(sample::sample(
                    &model, prompts, params, eos, PAD_ID, &mut draws,
                ))
            });
        }
        let mut job = lock(&job);
        let seed = match params.seed {
            Some(seed) => seed,
            None => job.request_seed(self.seed, prompts),
        };
        let _rng = lock(&TORCH_RNG);
        tch::manual_seed(seed as i64);
        guard("generate", || {
            Ok(sample::sample(
                &job.model,
                prompts,
                params,
                eos,
                PAD_ID,
                &mut Draws::Torch,
            ))
        })
    }
}
