//! What Arctic-Platform 0.1.4 added to a training call, on the libtorch engine: its GRPO names
//! (`grpo`, `ap_grpo`, `grpo_echo_v1`, `ap_grpo_echo_v1`) are the policy loss 5864380 calls
//! `grpo` and `verl_grpo`, `ap_compute_logprobs` is a post-processor, and
//! `meta.return_fwd_batch` makes `forward_backward` answer the forward pass's log-probs and
//! entropy, as `forward` computes them on the same weights.

use super::*;

/// A trainer (job 2) whose micro-batch is `micro` rows, beside a sampler (job 1).
fn trainer(micro: u64) -> TorchEngine {
    let engine = TorchEngine::new(&warm_spec(0), 21).unwrap();
    engine
        .create_job(1, &job_config(JobType::Sampling))
        .unwrap();
    let mut training = job_config(JobType::Training);
    training.ds_config = Some(
        json!({"optimizer": {"params": {"lr": 1e-2}}, "train_micro_batch_size_per_gpu": micro}),
    );
    engine.create_job(2, &training).unwrap();
    engine
}

#[test]
fn every_grpo_name_of_both_releases_is_the_same_policy_loss() {
    let engine = trainer(4);
    let (prompts, responses) = sample_rows();
    let (tensors, p, r) = padded_batch(&prompts, &responses);
    let old = forward_logprobs(&engine, 2, &tensors, json!({}));
    let mut update = grpo_update(&tensors, 3, p + r, p, &old, 0.5);
    // No step between the calls: the weights stay, so the metrics must too.
    let want = engine.forward_backward(2, &update).unwrap().value;
    assert!(
        want.metrics.contains_key("actor/pg_loss"),
        "{:?}",
        want.metrics
    );
    for name in ["grpo", "ap_grpo", "grpo_echo_v1", "ap_grpo_echo_v1"] {
        update.loss_fn = Some(name.into());
        let got = engine.forward_backward(2, &update).unwrap().value;
        assert_eq!(got.metrics, want.metrics, "{name}");
        assert_eq!(got.avg_loss, want.avg_loss, "{name}");
    }
    // Without advantages a policy name is refused, naming what is missing.
    update.loss_fn = Some("ap_grpo".into());
    update.batch.retain(|(k, _)| k != "advantages");
    let e = engine.forward_backward(2, &update).unwrap_err();
    assert!(e.detail.contains("advantages"), "{}", e.detail);
    // 0.1.4's log-prob post-processor is accepted; an unknown one is not.
    let mut fwd = forward_batch(tensors.clone(), json!({}));
    fwd.post = vec!["ap_compute_logprobs".into()];
    assert!(engine.forward(2, &fwd).unwrap().value.entropy.is_none());
    fwd.post = vec!["compute_everything".into()];
    assert_eq!(engine.forward(2, &fwd).unwrap_err().status, 400);
}

#[test]
fn forward_backward_returns_the_forward_batch_only_when_asked() {
    // Micro-batches of 2 over 3 rows: the pieces come back in row order.
    for micro in [2, 4] {
        let engine = trainer(micro);
        let (prompts, responses) = sample_rows();
        let (tensors, p, r) = padded_batch(&prompts, &responses);
        let forward = engine
            .forward(
                2,
                &forward_batch(tensors.clone(), json!({"pad_token_id": 0})),
            )
            .unwrap()
            .value;
        let old = f32_values(&forward.logprobs).unwrap();
        let mut update = grpo_update(&tensors, 3, p + r, p, &old, 1.0);
        assert!(engine
            .forward_backward(2, &update)
            .unwrap()
            .value
            .fwd_batch
            .is_none());
        update.meta.insert("return_fwd_batch".into(), json!(true));
        let got = engine
            .forward_backward(2, &update)
            .unwrap()
            .value
            .fwd_batch
            .unwrap_or_else(|| panic!("micro {micro}: no forward batch"));
        assert_eq!(got.logprobs.shape, forward.logprobs.shape, "micro {micro}");
        let lp = f32_values(&got.logprobs).unwrap();
        assert!(
            max_abs_diff(&lp, &old) < 1e-5,
            "micro {micro}: {}",
            max_abs_diff(&lp, &old)
        );
        assert!(lp.iter().any(|&v| v != 0.0));
        let ent = f32_values(got.entropy.as_ref().expect("entropy was asked for")).unwrap();
        let want = f32_values(forward.entropy.as_ref().unwrap()).unwrap();
        assert!(max_abs_diff(&ent, &want) < 1e-4, "micro {micro}");
        // After a step the weights moved, and so does the forward batch.
        engine.step(2, None).unwrap();
        let after = engine.forward_backward(2, &update).unwrap().value;
        let moved = f32_values(&after.fwd_batch.unwrap().logprobs).unwrap();
        assert!(max_abs_diff(&moved, &lp) > 1e-6, "micro {micro}");
    }
}
