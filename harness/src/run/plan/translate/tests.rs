use super::*;

/// The worked expectation of the knob reference: GSM8K recipe, Qwen3-1.7B, ZoRRo on.
#[test]
fn worked_expectation_of_the_knob_reference() {
    let cfg = json!({
        "data": {"train_batch_size": 32, "max_prompt_length": 1024, "max_response_length": 1024},
        "actor_rollout_ref": {
            "model": {"path": "Qwen/Qwen3-1.7B"},
            "actor": {"ppo_mini_batch_size": 32, "ppo_micro_batch_size_per_gpu": 8,
                      "ppo_max_token_len_per_gpu": 16384, "ppo_epochs": 1,
                      "optim": {"lr": 1e-6, "betas": [0.9, 0.95], "lr_warmup_steps_ratio": 0.05}},
            "rollout": {"n": 8, "temperature": 1.0}
        },
        "remote_backend": {"colocate": true, "training_gpus": 1, "log_prob_gpus": 0,
            "weight_sync": {"cuda_ipc": true},
            "train": {"zorro_train": {"enable": true, "max_rollouts": 8},
                      "logits": {"optimization": "memory"},
                      "deepspeed": {"zero_optimization": {"stage": 2}}}}
    });
    let t = translate(&cfg, 100).unwrap();
    assert_eq!(t.jobs.len(), 2, "no log_prob job with log_prob_gpus = 0");
    assert_eq!(t.jobs[0].job_type, JobType::Sampling);
    let train = &t.jobs[1];
    let ds = train.ds_config.as_ref().unwrap();
    assert_eq!(ds["train_batch_size"], 256);
    assert_eq!(ds["train_micro_batch_size_per_gpu"], 8);
    assert_eq!(ds["gradient_accumulation_steps"], 32);
    assert_eq!(ds["optimizer"]["params"]["lr"], 1e-6);
    assert_eq!(ds["zero_optimization"]["stage"], 2);
    assert_eq!(ds["scheduler"]["type"], "WarmupLR");
    let dwc = train.ds_worker_config.as_ref().unwrap();
    assert_eq!(dwc["zorro_train_enable"], true);
    assert_eq!(dwc["response_len"], 1024);
    assert_eq!(dwc["max_token_len"], 16384);
    assert_eq!(dwc["rollout_n"], 8);
    assert_eq!(dwc["temperature"], 1.0);
    assert_eq!(dwc["use_unpad"], true);
    assert_eq!(dwc["logits_optimization"], "memory");
    assert!(train.cuda_ipc);
    assert_eq!(t.shape.updates_per_step(), 1);
    assert_eq!(t.update_meta["global_batch_size"], 256);
}

/// The adapter's `sampling_params`: its defaults overlaid by verl's values, and nothing
/// more (no `n`: each prompt is sent `rollout.n` times; no `seed`).
#[test]
fn sampling_params_are_the_adapters_keys() {
    let cfg = json!({"data": {"max_prompt_length": 12, "max_response_length": 8},
        "actor_rollout_ref": {"model": {"path": "m"},
        "actor": {"ppo_mini_batch_size": 2}, "rollout": {"n": 4, "temperature": 0.7}}});
    let t = translate(&cfg, 1).unwrap();
    assert_eq!(
        Value::Object(t.sampling_params.clone()),
        json!({"temperature": 0.7, "top_p": 1.0, "top_k": -1, "max_tokens": 8,
               "logprobs": null, "repetition_penalty": 1.0})
    );
}

/// The adapter's `meta`: exactly 14 keys on `/forward`; on `/forward-backward` those plus
/// `actor_config`, `policy_loss_config`, `global_batch_size` (the driver adds the
/// per-mini-batch `batch_num_tokens` and `rollout_is_weights`).
#[test]
fn meta_has_the_adapters_keys_per_route() {
    let cfg = json!({"actor_rollout_ref": {"model": {"path": "m"},
        "actor": {"ppo_mini_batch_size": 2, "entropy_coeff": 0.0}, "rollout": {"n": 4}}});
    let t = translate(&cfg, 1).unwrap();
    let keys: Vec<&str> = t.meta.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "zorro_train_enable",
            "zorro_train_max_rollouts",
            "load_balancer",
            "rollout_n",
            "max_prompt_len",
            "max_response_len",
            "max_token_len_per_gpu",
            "temperature",
            "calculate_entropy",
            "pad_token_id",
            "drop_position_ids",
            "logits_optimization",
            "logits_optimization_peak_mem_size_in_gib",
            "logits_compute_in_fp32",
        ]
    );
    let extra: Vec<&str> = t
        .update_meta
        .keys()
        .map(String::as_str)
        .filter(|k| !t.meta.contains_key(*k))
        .collect();
    assert_eq!(
        extra,
        ["actor_config", "policy_loss_config", "global_batch_size"]
    );
    assert_eq!(t.update_meta["global_batch_size"], 8);
    assert_eq!(t.update_meta["calculate_entropy"], false);
    assert_eq!(t.meta["calculate_entropy"], true);
}

/// `to_onprem` writes no null or false extras: the sampling job has no DeepSpeed keys,
/// an unset quantization is absent, a DeepSpeed log_prob job gets the training job's
/// `ds_config` and its own settings in `log_prob_config`.
#[test]
fn job_configs_carry_only_the_keys_the_real_client_writes() {
    let cfg = json!({"actor_rollout_ref": {"model": {"path": "m"},
        "rollout": {"quantization": null, "gpu_memory_utilization": 0.5}},
        "remote_backend": {"log_prob_gpus": 1}});
    let t = translate(&cfg, 1).unwrap();
    let s = t.jobs[0].to_onprem();
    // An empty arctic_inference_config (no rollout block) is not written either.
    assert_eq!(
        s.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["model_name", "job_type", "vllm_config", "seed"]
    );
    assert!(s["vllm_config"].get("quantization").is_none());
    let lp = t.jobs[1].to_onprem();
    assert_eq!(lp["ds_config"], t.jobs[2].to_onprem()["ds_config"]);
    assert_eq!(lp["log_prob_config"]["train_micro_batch_size_per_gpu"], 1);
    let train = t.jobs[2].to_onprem();
    for absent in [
        "vllm_config",
        "arctic_inference_config",
        "log_prob_config",
        "training_config",
    ] {
        assert!(train.get(absent).is_none(), "{absent}");
    }
    assert_eq!(train["cuda_ipc"], false);
}

#[test]
fn without_zorro_the_logits_knobs_travel_only_in_meta() {
    let cfg = json!({
        "actor_rollout_ref": {"model": {"path": "m"}},
        "remote_backend": {"log_prob_gpus": 1, "train": {"logits": {"compute_in_fp32": true}}}
    });
    let t = translate(&cfg, 5).unwrap();
    let kinds: Vec<_> = t.jobs.iter().map(|j| j.job_type).collect();
    assert_eq!(
        kinds,
        vec![JobType::Sampling, JobType::LogProb, JobType::Training]
    );
    let dwc = t.jobs[2].ds_worker_config.as_ref().unwrap();
    assert!(dwc.get("logits_compute_in_fp32").is_none());
    assert_eq!(t.meta["logits_compute_in_fp32"], true);
    let err = translate(
        &json!({"data": {"train_batch_size": "x"}, "actor_rollout_ref": {"model": {"path": "m"}}}),
        1,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("data.train_batch_size"), "{err}");
}
