//! CUDA graph decoding and the split layout (devices, syncs, rules).

use super::*;

/// On CUDA, decoding through a captured graph samples exactly what eager decoding samples:
/// the same kernels on the same inputs, replayed. Greedy and seeded sampling, prompts of
/// several lengths (left padding) whose decoding crosses from one attended length (a
/// 256-position bucket of the cache) to the next, so a second graph is captured mid-call,
/// `n` > 1, an end-of-sequence stop. Needs a CUDA device,
/// so it is ignored by default; run it on a GPU host with
/// `cargo test --release --features torch -p rlharness-torch --test torch_backend -- --ignored cuda_graph`.
#[test]
#[ignore = "needs a CUDA device: the GPU lane, bash ci/gpu-tests.sh"]
fn cuda_graph_decoding_samples_what_eager_decoding_samples() {
    let engine = |graphs: bool| {
        let spec = TorchSpec {
            model: Box::new(ModelSpec {
                kind: ModelKind::Qwen3,
                preset: Some("qwen3-0.6b".into()),
                layers: Some(4),
                ..ModelSpec::default()
            }),
            device: TorchDevice::Cuda,
            dtype: TorchDType::Bf16,
            cuda_graphs: graphs,
            ..TorchSpec::default()
        };
        let e = TorchEngine::new(&spec, 11).unwrap();
        e.create_job(1, &job_config(JobType::Sampling)).unwrap();
        e
    };
    let (eager, graphed) = (engine(false), engine(true));
    let prompts: Vec<Vec<i64>> = (0..6i64)
        .map(|i| (0..(5 + 45 * i)).map(|t| 100 + 37 * t + i).collect())
        .collect();
    for (temperature, seed) in [(0.0, 1u64), (1.0, 2), (0.7, 3)] {
        let params = sampling(3, temperature, 40, Some(seed), false);
        let a = eager.generate_ids(1, &prompts, &params).unwrap();
        let b = graphed.generate_ids(1, &prompts, &params).unwrap();
        assert_eq!(a, b, "temperature {temperature}");
    }
}

// ------------------------------------------------------------------ the layout (issue #21)

/// An engine laid out as `colocate` says, both roles on `training`/`sampling`, recording into
/// `record`: trainer job 2 (with `cuda_ipc`, learning rate `lr`), sampler job 1. One update of
/// the trainer, then a weight sync; returns the engine.
fn laid_out_engine(
    spec: &TorchSpec,
    layout: rlharness_torch::layout::EngineLayout,
    cuda_ipc: bool,
    lr: f64,
) -> TorchEngine {
    let engine = TorchEngine::new(spec, 13)
        .unwrap()
        .with_layout(layout)
        .unwrap();
    engine
        .create_job(1, &job_config(JobType::Sampling))
        .unwrap();
    let mut training = job_config(JobType::Training);
    training.cuda_ipc = cuda_ipc;
    training.ds_config =
        Some(json!({"optimizer": {"params": {"lr": lr}}, "train_micro_batch_size_per_gpu": 2}));
    engine.create_job(2, &training).unwrap();
    let (prompts, responses) = sample_rows();
    let (tensors, p, r) = padded_batch(&prompts, &responses);
    let old = forward_logprobs(&engine, 2, &tensors, json!({}));
    engine
        .forward_backward(
            2,
            &grpo_update(&tensors, prompts.len(), p + r, p, &old, 1.0),
        )
        .unwrap();
    engine.step(2, None).unwrap();
    engine.weight_sync(2, &[1]).unwrap();
    engine
}

fn layout(
    colocate: bool,
    training: tch::Device,
    sampling: tch::Device,
    record: Option<std::path::PathBuf>,
) -> rlharness_torch::layout::EngineLayout {
    rlharness_torch::layout::EngineLayout {
        colocate,
        training,
        sampling,
        record,
    }
}

/// On the CPU both roles sit on `cpu` whatever the layout, and the numbers do not depend on
/// it; the rules and the record follow the knobs: split, the sync is a device-to-device copy
/// and `cuda_ipc` is reported as having no effect; colocated, `cuda_ipc` is honoured.
#[test]
fn split_layout_on_the_cpu_records_devices_syncs_and_rules() {
    use rlharness_arctic::torch_spec::layout::SyncPath;
    let spec = warm_spec(0);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("backend_layout.json");
    let cpu = tch::Device::Cpu;
    let split = laid_out_engine(
        &spec,
        layout(false, cpu, cpu, Some(path.clone())),
        true,
        1e-2,
    );
    let colocated = laid_out_engine(&spec, layout(true, cpu, cpu, None), true, 1e-2);

    let r = split.layout_record();
    assert!(!r.colocate);
    assert_eq!(
        (r.devices.training.as_str(), r.devices.sampling.as_str()),
        ("cpu", "cpu")
    );
    let jobs: Vec<(u64, &str, &str)> = r
        .jobs
        .iter()
        .map(|j| (j.job_id, j.job_type.as_str(), j.device.as_str()))
        .collect();
    assert_eq!(jobs, [(1, "sampling", "cpu"), (2, "training", "cpu")]);
    assert_eq!(r.rules.sync, SyncPath::DeviceToDevice);
    assert!(r.rules.cuda_ipc_asked && !r.rules.cuda_ipc_honoured);
    assert!(
        r.rules.notes[0].contains("no effect"),
        "{:?}",
        r.rules.notes
    );
    assert!(r.rules.sampler_sleep_frees.is_empty());
    assert_eq!(r.weight_syncs.len(), 1);
    let sync = &r.weight_syncs[0];
    let params = split.info().num_parameters;
    assert_eq!(sync.bytes, params * 4, "f32 parameters, one target");
    assert!(sync.seconds > 0.0 && sync.seconds.is_finite());
    assert_eq!(
        (sync.from.as_str(), sync.to.as_slice()),
        ("cpu", &["cpu".to_string()][..])
    );
    // The file says the same.
    let file: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(file["colocate"], false);
    assert_eq!(
        file["devices"],
        json!({"training": "cpu", "sampling": "cpu"})
    );
    assert_eq!(file["weight_syncs"][0]["bytes"], json!(params * 4));
    assert_eq!(file["rules"]["sync"], "device_to_device");

    let c = colocated.layout_record();
    assert!(c.colocate);
    assert_eq!(c.rules.sync, SyncPath::CudaIpc);
    assert!(c.rules.cuda_ipc_honoured && c.rules.notes.is_empty());
    assert_eq!(c.rules.sampler_sleep_frees, ["weights", "kv_cache"]);
    assert_eq!(c.weight_syncs[0].bytes, params * 4);

    // Same weights, either layout, bit for bit.
    for job in [1, 2] {
        let (a, b) = (
            split.job_weights(job).unwrap(),
            colocated.job_weights(job).unwrap(),
        );
        for ((na, ta), (nb, tb)) in a.iter().zip(&b) {
            assert_eq!(na, nb);
            assert!(ta.equal(tb), "{na} of job {job}");
        }
    }
}

#[test]
fn a_layout_on_another_device_kind_is_refused() {
    let engine = random_engine(TorchDType::F32, 1);
    let err = engine
        .with_layout(layout(false, tch::Device::Cpu, tch::Device::Cuda(1), None))
        .unwrap_err();
    assert!(
        err.detail.contains("cuda:1") && err.detail.contains("cpu"),
        "{}",
        err.detail
    );
}

/// The split layout on CUDA: the trainer on cuda:0, the sampler on cuda:1 when the host has
/// two devices, both on cuda:0 with one (the layout's rules hold either way). A sync copies
/// the trainer's weights into the sampler, bytes and seconds recorded, and the sampler
/// generates from them. Needs a CUDA device, so it is ignored by default; on a GPU host:
/// `cargo test --release --features torch -p rlharness-torch --test torch_backend -- --ignored split_layout_on_cuda`.
#[test]
#[ignore = "needs a CUDA device: the GPU lane, bash ci/gpu-tests.sh"]
fn split_layout_on_cuda_places_the_roles_and_syncs_across() {
    let spec = TorchSpec {
        model: Box::new(ModelSpec {
            kind: ModelKind::Qwen3,
            preset: Some("qwen3-0.6b".into()),
            layers: Some(2),
            ..ModelSpec::default()
        }),
        device: TorchDevice::Cuda,
        dtype: TorchDType::Bf16,
        ..TorchSpec::default()
    };
    // Loads libtorch's CUDA backend (the count is 0 before).
    drop(TorchEngine::new(&spec, 1).unwrap());
    let visible = tch::Cuda::device_count() as usize;
    let knobs = rlharness_arctic::torch_spec::layout::LayoutKnobs {
        colocate: false,
        training_gpus: 1,
        sampling_gpus: 1,
    };
    let sampling = if visible >= 2 {
        let map =
            rlharness_arctic::torch_spec::layout::device_map(TorchDevice::Cuda, knobs, visible)
                .unwrap();
        assert_eq!(map.sampling.to_string(), "cuda:1");
        tch::Device::Cuda(1)
    } else {
        let err =
            rlharness_arctic::torch_spec::layout::device_map(TorchDevice::Cuda, knobs, visible)
                .unwrap_err()
                .to_string();
        assert!(err.contains("needs 2 CUDA devices"), "{err}");
        tch::Device::Cuda(0)
    };
    let want_sampling = if visible >= 2 { "cuda:1" } else { "cuda:0" };
    let engine = laid_out_engine(
        &spec,
        layout(false, tch::Device::Cuda(0), sampling, None),
        true,
        1e-3,
    );
    let (a, b) = (
        engine.job_weights(1).unwrap(),
        engine.job_weights(2).unwrap(),
    );
    for ((name, ta), (_, tb)) in a.iter().zip(&b) {
        assert!(
            ta.equal(tb),
            "{name}: the sampler must hold the trainer's weights"
        );
    }
    let rec = engine.layout_record();
    assert_eq!(rec.devices.training, "cuda:0");
    assert_eq!(rec.devices.sampling, want_sampling);
    assert!(!rec.rules.cuda_ipc_honoured && !rec.rules.notes.is_empty());
    let sync = &rec.weight_syncs[0];
    assert_eq!(sync.from, "cuda:0");
    assert_eq!(sync.to, [want_sampling]);
    assert_eq!(
        sync.bytes,
        engine.info().num_parameters * 2,
        "bf16 parameters"
    );
    assert!(sync.seconds > 0.0);
    eprintln!(
        "split layout: trainer cuda:0, sampler {want_sampling}; sync of {} bytes in {:.4} s",
        sync.bytes, sync.seconds
    );
    let params = rlharness_torch::sample::SamplingParams {
        n: 2,
        temperature: 1.0,
        top_p: 1.0,
        top_k: -1,
        max_tokens: 8,
        seed: Some(3),
        ignore_eos: true,
        logprobs: false,
    };
    let (prompts, _) = sample_rows();
    let out = engine.generate_ids(1, &prompts, &params).unwrap();
    assert_eq!(out.len(), prompts.len() * 2);
    assert!(out.iter().all(|s| s.tokens.len() == 8));
}

/// `backend.sampler_mantissa_bits` outside 1..=22 is refused at start-up, naming the key and
/// the value; inside it, the engine starts.
#[test]
fn a_sampler_mantissa_width_an_f32_cannot_hold_is_refused() {
    for bits in [0, 23, 64] {
        let spec = TorchSpec {
            sampler_mantissa_bits: Some(bits),
            ..warm_spec(0)
        };
        let err = TorchEngine::new(&spec, 1).err().unwrap();
        assert!(
            err.detail
                .contains(&format!("backend.sampler_mantissa_bits must be in 1..=22 (an f32 mantissa has 23), got {bits}")),
            "{}",
            err.detail
        );
    }
    let spec = TorchSpec {
        sampler_mantissa_bits: Some(9),
        ..warm_spec(0)
    };
    assert!(TorchEngine::new(&spec, 1).is_ok());
}
