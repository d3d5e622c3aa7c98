use serde_json::{json, Map, Value};

use super::loss::prompt_token_len;
use super::script::CurveShape;
use super::*;
use crate::engine::{f32_tensor, Engine, GenerateRequest, ModelBatch};
use crate::flops::ModelSpec;
use crate::server::frame::{i64_tensor, tensor_f64};
use crate::task::{ArithConfig, ArithTask, CharTokenizer, EOS_ID};
use crate::wire::api::{JobConfig, JobType};

fn config(job_type: JobType, extra: Value) -> JobConfig {
    let mut v = json!({"model_name": "Qwen/Qwen3-0.6B", "job_type": job_type.as_str()});
    if let (Some(o), Value::Object(e)) = (v.as_object_mut(), extra) {
        o.extend(e);
    }
    serde_json::from_value(v).unwrap()
}

fn engine_with_jobs(script: MockScript, seed: u64) -> MockEngine {
    let e = MockEngine::new(script, seed).unwrap();
    e.create_job(1, &config(JobType::Sampling, json!({})))
        .unwrap();
    e.create_job(
        2,
        &config(
            JobType::Training,
            json!({"checkpoint_path": "/nonexistent"}),
        ),
    )
    .unwrap();
    e
}

fn prompts(seed: u64, count: usize) -> Vec<String> {
    ArithTask::new(ArithConfig::default())
        .unwrap()
        .batch(seed, 0, count)
        .into_iter()
        .map(|p| p.prompt)
        .collect()
}

fn accuracy_of(e: &MockEngine, ps: &[String]) -> f64 {
    let req = GenerateRequest {
        prompts: ps.to_vec(),
        sampling_params: json!({"n": 4}).as_object().unwrap().clone(),
    };
    let out = e.generate(1, &req).unwrap().value;
    let correct = out
        .iter()
        .enumerate()
        .filter(|(i, c)| {
            let answer = ArithTask::solve(&ps[i / 4]).unwrap();
            c.text == format!("#### {answer}")
        })
        .count();
    correct as f64 / out.len() as f64
}

#[test]
fn reward_rises_with_syncs_and_stays_flat_without() {
    let ps = prompts(5, 100);
    let synced = engine_with_jobs(MockScript::default(), 5);
    let unsynced = engine_with_jobs(MockScript::default(), 5);
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for _ in 0..20 {
        with.push(accuracy_of(&synced, &ps));
        without.push(accuracy_of(&unsynced, &ps));
        for e in [&synced, &unsynced] {
            e.step(2, None).unwrap();
        }
        synced.weight_sync(2, &[1]).unwrap();
    }
    let early = |v: &[f64]| v[..3].iter().sum::<f64>() / 3.0;
    let late = |v: &[f64]| v[17..].iter().sum::<f64>() / 3.0;
    assert!(late(&with) > early(&with) + 0.4, "{with:?}");
    assert!(
        (late(&without) - early(&without)).abs() < 0.1,
        "{without:?}"
    );
    assert!(early(&without) < 0.25, "{without:?}");
}

#[test]
fn a_sync_without_new_weights_does_not_count() {
    let e = engine_with_jobs(MockScript::default(), 1);
    e.weight_sync(2, &[1]).unwrap();
    e.weight_sync(2, &[1]).unwrap();
    assert_eq!(e.sampling_accuracy(1).unwrap(), 0.1);
    e.step(2, None).unwrap();
    e.weight_sync(2, &[1]).unwrap();
    assert!(e.sampling_accuracy(1).unwrap() > 0.1);
}

#[test]
fn generation_is_deterministic_per_seed_and_respects_max_tokens() {
    let ps = prompts(9, 8);
    let req = GenerateRequest {
        prompts: ps.clone(),
        sampling_params: json!({"n": 3, "max_tokens": 3})
            .as_object()
            .unwrap()
            .clone(),
    };
    let a = engine_with_jobs(MockScript::default(), 9)
        .generate(1, &req)
        .unwrap();
    let b = engine_with_jobs(MockScript::default(), 9)
        .generate(1, &req)
        .unwrap();
    let c = engine_with_jobs(MockScript::default(), 10)
        .generate(1, &req)
        .unwrap();
    assert_eq!(a.value, b.value);
    assert_ne!(a.value, c.value);
    assert_eq!(a.value.len(), 24);
    for comp in &a.value {
        assert!(comp.token_ids.len() <= 3);
        assert_eq!(comp.generation_len, comp.token_ids.len());
        assert_eq!(comp.prompt_len, 10);
        if comp.finish_reason == "stop" {
            assert_eq!(comp.token_ids.last(), Some(&EOS_ID));
        } else {
            assert_eq!(comp.finish_reason, "length");
        }
    }
    assert!(a.sim_seconds.unwrap() > 0.0);
    // Rollouts of one prompt differ from each other.
    let texts: std::collections::HashSet<_> = a.value.iter().map(|c| c.text.clone()).collect();
    assert!(texts.len() > 3);
    let bad = GenerateRequest {
        prompts: ps,
        sampling_params: json!({"n": 0}).as_object().unwrap().clone(),
    };
    let err = engine_with_jobs(MockScript::default(), 9)
        .generate(1, &bad)
        .unwrap_err();
    assert_eq!(err.status, 422);
}

#[test]
fn non_arith_prompts_get_noise() {
    let e = engine_with_jobs(MockScript::default(), 3);
    let req = GenerateRequest {
        prompts: vec!["hello".into()],
        sampling_params: Map::new(),
    };
    let out = e.generate(1, &req).unwrap().value;
    assert!(!out[0].text.contains("####"), "{:?}", out[0].text);
}

/// A `[1, P+R]` batch: prompt `prompt` left-padded to `p`, response right-padded to `r`.
fn one_row_batch(prompt: &[i64], response: &[i64], p: usize, r: usize) -> ModelBatch {
    let s = p + r;
    let mut ids = vec![0i64; s];
    let mut mask = vec![0i64; s];
    for (i, &t) in prompt.iter().enumerate() {
        ids[p - prompt.len() + i] = t;
        mask[p - prompt.len() + i] = 1;
    }
    for (i, &t) in response.iter().enumerate() {
        ids[p + i] = t;
        mask[p + i] = 1;
    }
    ModelBatch {
        batch: vec![
            ("input_ids".into(), i64_tensor(vec![1, s], &ids)),
            ("attention_mask".into(), i64_tensor(vec![1, s], &mask)),
            ("prompts".into(), i64_tensor(vec![1, p], &ids[..p])),
        ],
        meta: Map::new(),
        post: vec!["compute_entropy_and_logprobs".into()],
        loss_fn: None,
    }
}

fn f32s(t: &crate::wire::Tensor) -> Vec<f32> {
    tensor_f64(t, "t")
        .unwrap()
        .into_iter()
        .map(|v| v as f32)
        .collect()
}

#[test]
fn trainer_and_sampler_log_probs_agree_only_after_a_sync() {
    let e = engine_with_jobs(MockScript::default(), 11);
    let prompt = "Q:3+4=?\nA:";
    let response = CharTokenizer::encode("#### 7").unwrap();
    let p_ids = CharTokenizer::encode(prompt).unwrap();
    let batch = one_row_batch(&p_ids, &response, 12, 8);
    let trainer = |e: &MockEngine| {
        let out = e.forward(2, &batch).unwrap().value;
        f32s(&out.logprobs)[11..11 + response.len()].to_vec()
    };
    assert_eq!(
        trainer(&e),
        e.sampler_logprobs(1, prompt, &response).unwrap()
    );
    e.step(2, None).unwrap();
    assert_ne!(
        trainer(&e),
        e.sampler_logprobs(1, prompt, &response).unwrap()
    );
    e.weight_sync(2, &[1]).unwrap();
    assert_eq!(
        trainer(&e),
        e.sampler_logprobs(1, prompt, &response).unwrap()
    );
    let (tn, tp) = e.weight_norm(2).unwrap();
    assert_eq!((tn, tp), e.weight_norm(1).unwrap());
}

#[test]
fn log_prob_alignment_follows_zorro() {
    let e = engine_with_jobs(MockScript::default(), 4);
    let response = [5i64, 6, 7];
    let mut batch = one_row_batch(&[2, 3], &response, 4, 5);
    batch.meta.insert("pad_token_id".into(), json!(151643));
    let plain = f32s(&e.forward(2, &batch).unwrap().value.logprobs);
    // Columns P-1+t hold the response; everything else the pad id as a float.
    assert!(plain[3..6].iter().all(|&v| v < 0.0));
    for (i, v) in plain.iter().enumerate() {
        if !(3..6).contains(&i) {
            assert_eq!(*v, 151643.0, "column {i}");
        }
    }
    batch.meta.insert("zorro_train_enable".into(), json!(true));
    let out = e.forward(2, &batch).unwrap().value;
    let zorro = f32s(&out.logprobs);
    assert_eq!(&zorro[4..7], &plain[3..6]);
    assert!(zorro
        .iter()
        .enumerate()
        .all(|(i, &v)| (4..7).contains(&i) || v == 0.0));
    assert!(out.entropy.is_some());
    assert_eq!(out.avg_loss, None);

    // Enabled at init, the per-call flag is not needed.
    e.create_job(
        3,
        &config(
            JobType::LogProb,
            json!({"ds_config": {}, "ds_worker_config": {"zorro_train_enable": true}}),
        ),
    )
    .unwrap();
    batch.meta.remove("zorro_train_enable");
    batch.post.clear();
    let out = e.forward(3, &batch).unwrap().value;
    assert_eq!(f32s(&out.logprobs), zorro);
    assert!(out.entropy.is_none());
}

fn update_batch(e: &MockEngine, advantage: f64) -> ModelBatch {
    let response = [5i64, 6, 7, 8];
    let mut b = one_row_batch(&[2, 3, 4], &response, 3, 4);
    let old = f32s(&e.forward(2, &b).unwrap().value.logprobs);
    // Left-zero-pad the [B,R] tensors to [B,S]: response token t at column P+t.
    let mut old_full = vec![0f32; 7];
    let mut adv = vec![0f32; 7];
    let mut rmask = vec![0i64; 7];
    for t in 0..4 {
        old_full[3 + t] = old[2 + t];
        adv[3 + t] = advantage as f32;
        rmask[3 + t] = 1;
    }
    b.batch
        .push(("old_log_probs".into(), f32_tensor(vec![1, 7], &old_full)));
    b.batch
        .push(("advantages".into(), f32_tensor(vec![1, 7], &adv)));
    b.batch
        .push(("response_mask".into(), i64_tensor(vec![1, 7], &rmask)));
    b.loss_fn = Some("verl_grpo".into());
    b
}

#[test]
fn forward_backward_computes_grpo_metrics_and_step_reports_lr() {
    let e = MockEngine::new(MockScript::default(), 2).unwrap();
    e.create_job(
        2,
        &config(
            JobType::Training,
            json!({"checkpoint_path": "/x", "ds_config": {"optimizer": {"params": {"lr": 1e-6}},
                "scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": 1e-6, "warmup_num_steps": 4, "warmup_type": "linear"}}}}),
        ),
    )
    .unwrap();
    let b = update_batch(&e, 1.0);
    let out = e.forward_backward(2, &b).unwrap();
    let m = &out.value.metrics;
    // On-policy (old log-probs from the same version): ratio 1, loss = -A.
    assert!(
        (m["actor/pg_loss"].as_f64().unwrap() + 1.0).abs() < 1e-6,
        "{m:?}"
    );
    assert!(m["actor/ppo_kl"].as_f64().unwrap().abs() < 1e-6);
    assert!(m.contains_key("actor/entropy_loss"));
    assert!((out.value.avg_loss + 1.0).abs() < 1e-6);
    let sim = out.sim_seconds.unwrap();
    let mfu = e.cost_model().shape.training_flops(&[7]) / sim / 989e12;
    assert!((0.3..=0.45).contains(&mfu), "{mfu}");
    let s1 = e.step(2, None).unwrap().value;
    assert_eq!(s1.last_lr, 0.0);
    assert!(s1.grad_norm.unwrap() > 0.0);
    // A step without gradients reports a zero norm.
    let s2 = e.step(2, None).unwrap().value;
    assert_eq!(s2.grad_norm, Some(0.0));
    assert!((s2.last_lr - 0.25e-6).abs() < 1e-18);
    // Off-policy now: the ratio moved.
    let m = e.forward_backward(2, &b).unwrap().value.metrics;
    assert!(m["actor/ppo_kl"].as_f64().unwrap().abs() > 1e-6, "{m:?}");
}

/// Arctic-Platform 0.1.4's GRPO names (`grpo`, `ap_grpo` and the `_echo_v1` pair) compute
/// the same policy loss as 5864380's `grpo` and `verl_grpo`.
#[test]
fn every_grpo_name_of_both_releases_is_the_same_policy_loss() {
    let e = engine_with_jobs(MockScript::default(), 2);
    let mut b = update_batch(&e, 0.5);
    let want = e.forward_backward(2, &b).unwrap().value;
    for name in ["grpo", "ap_grpo", "grpo_echo_v1", "ap_grpo_echo_v1"] {
        b.loss_fn = Some(name.into());
        let got = e.forward_backward(2, &b).unwrap().value;
        assert_eq!(got.metrics, want.metrics, "{name}");
        assert_eq!(got.avg_loss, want.avg_loss, "{name}");
    }
    // An SFT loss is not the policy loss: it needs no advantages.
    b.loss_fn = Some("sft".into());
    b.batch.retain(|(k, _)| k != "advantages");
    assert_ne!(
        e.forward_backward(2, &b).unwrap().value.avg_loss,
        want.avg_loss
    );
}

/// `meta.return_fwd_batch` (0.1.4): `/forward-backward` also answers the forward pass's
/// log-probs and entropy, the same as `/forward` under the same weights; without it, none.
#[test]
fn forward_backward_returns_the_forward_batch_only_when_asked() {
    let e = engine_with_jobs(MockScript::default(), 3);
    let mut b = update_batch(&e, 1.0);
    assert!(e.forward_backward(2, &b).unwrap().value.fwd_batch.is_none());
    b.meta.insert("return_fwd_batch".into(), json!(false));
    assert!(e.forward_backward(2, &b).unwrap().value.fwd_batch.is_none());
    b.meta.insert("return_fwd_batch".into(), json!(true));
    let fwd = e.forward(2, &b).unwrap().value;
    let got = e.forward_backward(2, &b).unwrap().value.fwd_batch.unwrap();
    assert_eq!(got.logprobs.shape, vec![1, 7]);
    assert_eq!(f32s(&got.logprobs), f32s(&fwd.logprobs));
    assert_eq!(
        got.entropy.as_ref().map(f32s),
        fwd.entropy.as_ref().map(f32s)
    );
    assert!(f32s(&got.logprobs).iter().any(|&v| v != 0.0));
    // After a step the policy moved: the forward batch follows the new weights.
    e.step(2, None).unwrap();
    let after = e.forward_backward(2, &b).unwrap().value.fwd_batch.unwrap();
    assert_ne!(f32s(&after.logprobs), f32s(&got.logprobs));
}

#[test]
fn missing_loss_tensors_are_unprocessable() {
    let e = engine_with_jobs(MockScript::default(), 2);
    let mut b = update_batch(&e, 1.0);
    b.batch.retain(|(k, _)| k != "advantages");
    let err = e.forward_backward(2, &b).unwrap_err();
    assert_eq!(err.status, 422);
    assert!(err.detail.contains("batch.advantages"), "{}", err.detail);
}

#[test]
fn save_and_load_round_trip_the_version() {
    let dir = tempfile::tempdir().unwrap();
    let e = MockEngine::new(MockScript::default(), 2).unwrap();
    let root = dir.path().display().to_string();
    e.create_job(
        2,
        &config(JobType::Training, json!({"checkpoint_path": root})),
    )
    .unwrap();
    e.step(2, None).unwrap();
    e.step(2, None).unwrap();
    let saved = e.save(2, &json!({"export_hf": true})).unwrap();
    assert_eq!(saved["global_step"], json!(2));
    let path = saved["path"].as_str().unwrap();
    assert!(path.ends_with("global_step_2"));
    assert!(std::path::Path::new(saved["hf_path"].as_str().unwrap())
        .join("config.json")
        .exists());
    e.step(2, None).unwrap();
    assert_eq!(e.policy_version(2).unwrap(), 3);
    let loaded = e.load_checkpoint(2, &json!({})).unwrap();
    assert_eq!(loaded["global_step"], json!(2));
    assert_eq!(e.policy_version(2).unwrap(), 2);
    let err = e.load_checkpoint(2, &json!({"step": 99})).unwrap_err();
    assert_eq!(err.status, 400);
    assert!(err.detail.contains("global_step_99"), "{}", err.detail);
    // save_total_limit prunes the oldest checkpoints this engine wrote.
    e.step(2, None).unwrap();
    e.save(2, &json!({"save_total_limit": 1})).unwrap();
    assert!(!std::path::Path::new(path).exists());
}

#[test]
fn scripts_validate_and_deserialize_with_defaults() {
    let s: MockScript = serde_json::from_value(json!({})).unwrap();
    assert_eq!(s, MockScript::default());
    let s: MockScript =
        serde_json::from_value(json!({"reward": {"offset": -0.1, "shape": "exp"}})).unwrap();
    assert_eq!(s.reward.shape, CurveShape::Exp);
    assert!((s.reward.accuracy(0) - 0.0).abs() < 1e-12);
    assert!(serde_json::from_value::<MockScript>(json!({"rewards": {}})).is_err());
    let bad = MockScript {
        device: "tpu".into(),
        ..MockScript::default()
    };
    let err = MockEngine::new(bad, 0).err().unwrap();
    assert!(err.to_string().contains("tpu"), "{err}");
    let bad = MockScript {
        model: ModelSpec::Preset("gpt-9".into()),
        ..MockScript::default()
    };
    assert!(MockEngine::new(bad, 0).is_err());
}

#[test]
fn unknown_jobs_are_not_found() {
    let e = MockEngine::new(MockScript::default(), 0).unwrap();
    assert_eq!(e.step(7, None).unwrap_err().status, 404);
    assert_eq!(e.weight_norm(7).unwrap_err().status, 404);
}

#[test]
fn lower_efficiency_scale_lengthens_simulated_time() {
    let fast = MockEngine::new(MockScript::default(), 0).unwrap();
    let mut script = MockScript::default();
    script.efficiency.scale = 0.9;
    let slow = MockEngine::new(script, 0).unwrap();
    let seqlens = [300u64; 16];
    let ratio =
        slow.cost_model().forward_backward(&seqlens) / fast.cost_model().forward_backward(&seqlens);
    assert!((ratio - 1.0 / 0.9).abs() < 1e-9, "{ratio}");
}

/// `sampling_params.logprobs` 0 returns one log-probability per generated token, the policy's at
/// the sampler's synced version (what `/forward` gives the same tokens at that version); null
/// returns none; anything else is refused with the key named.
#[test]
fn generate_returns_log_probs_when_asked_and_refuses_a_bad_request() {
    let e = engine_with_jobs(MockScript::default(), 3);
    let ps = prompts(3, 2);
    let ask = |lp: Value| GenerateRequest {
        prompts: ps.clone(),
        sampling_params: json!({"n": 2, "logprobs": lp}).as_object().unwrap().clone(),
    };
    let out = e.generate(1, &ask(json!(0))).unwrap().value;
    for (i, c) in out.iter().enumerate() {
        let lp = c.logprobs.as_ref().unwrap();
        assert_eq!(lp.len(), c.token_ids.len());
        let prompt_len = prompt_token_len(&ps[i / 2]);
        for (t, (&tok, &l)) in c.token_ids.iter().zip(lp).enumerate() {
            assert_eq!(l, policy::token_logprob(3, tok, prompt_len + t, 0));
        }
    }
    let none = e.generate(1, &ask(Value::Null)).unwrap().value;
    assert!(none.iter().all(|c| c.logprobs.is_none()));
    let err = e.generate(1, &ask(json!("yes"))).unwrap_err().to_string();
    assert!(err.contains("sampling_params.logprobs"), "{err}");
}
