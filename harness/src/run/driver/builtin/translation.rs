//! What the builtin driver sends, derived from the config once by the plan
//! (`run/plan/translate/`, the Arctic adapter's translation): the JobConfigs, the `meta` of each
//! call, the sampling parameters and the batch's shape.

use serde_json::{Map, Value};

use rlharness_arctic::wire::api::JobConfig;

/// Everything the driver derives from the config once, at start-up.
#[derive(Debug, Clone)]
pub(crate) struct Translation {
    /// In creation order: sampling, log_prob (when `log_prob_gpus > 0`), training.
    pub(crate) jobs: Vec<JobConfig>,
    /// The `meta` of every `/forward`: the adapter's 14 keys.
    pub(crate) meta: Map<String, Value>,
    /// The `meta` of every `/forward-backward` before its per-mini-batch tensors: the 14 keys
    /// (with the actor's `calculate_entropy`), `actor_config`, `policy_loss_config`,
    /// `global_batch_size`.
    pub(crate) update_meta: Map<String, Value>,
    /// `meta` keys a planted bug drops (the per-mini-batch ones included).
    pub(crate) dropped_meta: Vec<String>,
    /// `sampling_params` of every `/generate`: exactly the adapter's keys (`temperature`,
    /// `top_p`, `top_k`, `max_tokens`, `logprobs`, `repetition_penalty`).
    pub(crate) sampling_params: Map<String, Value>,
    pub(crate) shape: BatchShape,
    pub(crate) zorro: bool,
    pub(crate) colocate: bool,
    pub(crate) use_kl_loss: bool,
    pub(crate) drop_position_ids: bool,
    pub(crate) norm_adv_by_std: bool,
    /// GPUs the throughput is divided by (`trainer.n_gpus_per_node x trainer.nnodes`).
    pub(crate) n_gpus: f64,
}

/// Batch sizing of one training step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct BatchShape {
    /// Prompts per step (`data.train_batch_size`).
    pub(crate) prompts: usize,
    /// Rollouts per prompt (`actor_rollout_ref.rollout.n`).
    pub(crate) n: usize,
    /// Prompts per PPO mini-batch (`actor.ppo_mini_batch_size`).
    pub(crate) mini_batch_prompts: usize,
    pub(crate) ppo_epochs: usize,
    pub(crate) max_prompt_len: usize,
    pub(crate) max_response_len: usize,
}

impl BatchShape {
    pub(crate) fn mini_batches(&self) -> usize {
        self.prompts.div_ceil(self.mini_batch_prompts).max(1)
    }
    /// forward-backward + step pairs per training step.
    #[cfg(test)]
    pub(crate) fn updates_per_step(&self) -> usize {
        self.ppo_epochs * self.mini_batches()
    }
}
