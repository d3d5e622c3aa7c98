#!/usr/bin/env python3
"""One training step driven by the real, released Arctic-Platform 0.1.4 client.

    python client_014.py BASE_URL CHECKPOINT_DIR

`arctic_platform` 0.1.4 (with its `[verl]` extra) must be importable: the Rust test puts the
folder `ARCTIC_RELEASED_SRC` on PYTHONPATH. Everything goes through the package's own
`ArcticClientConfig` and `AsyncArcticRLClient` over its HTTP transport (`OnPremConfig`,
protocol http), and frames through its own `arctic_platform.wire`:

- the client creates the jobs (sampling, then training, each polled until RUNNING); the
  training JobConfig carries `ds_config.sequence_parallel_size`, and a second JobConfig whose
  paths disagree must be refused with a 422 naming both;
- sleep, then the client's weight sync (wake weights, /operation weight-sync, wake kv_cache,
  /operation reset-prefix-cache), one `/generate` a prompt;
- `/forward` for old log-probs; `/forward-backward` with `verl_grpo` and
  `meta.return_fwd_batch`, which must answer `batch.logprobs`; again with each 0.1.4 GRPO name;
  the same frame in a `force_chunk` envelope (`wire.encode_byte_chunks`) posted raw, which must
  answer what the bare frame did;
- `/step`, the weight sync again, `/save`, sleep/wake of the training engine, then the client's
  shutdown, which destroys the jobs (checked on `/status`).

Exit 0 only when every call went through and answered as said; anything else raises.
"""

import asyncio
import importlib.metadata
import math
import sys
from urllib.parse import urlparse

import torch
from arctic_platform import wire
from arctic_platform.client import (
    ArcticClientConfig,
    AsyncArcticRLClient,
    OnPremConfig,
    SamplingConfig,
    TrainingConfig,
)

P, R, B = 12, 8, 4
MODEL = "Qwen/Qwen3-0.6B"


def say(what):
    print(f"client_014: {what}", flush=True)


def meta14():
    return {
        "zorro_train_enable": False, "zorro_train_max_rollouts": 1, "load_balancer": True,
        "rollout_n": 1, "max_prompt_len": P, "max_response_len": R,
        "max_token_len_per_gpu": 4096, "temperature": 1.0, "calculate_entropy": True,
        "pad_token_id": 0, "drop_position_ids": True, "logits_optimization": "none",
        "logits_optimization_peak_mem_size_in_gib": 4, "logits_compute_in_fp32": False,
    }


def config(base, ckpt, ds_extra=None, worker_extra=None):
    url = urlparse(base)
    ds = {"train_batch_size": B, "train_micro_batch_size_per_gpu": B,
          "gradient_accumulation_steps": 1, "sequence_parallel_size": 1,
          "optimizer": {"type": "AdamW", "params": {"lr": 1e-06, "weight_decay": 0.01,
                                                    "betas": [0.9, 0.999], "eps": 1e-08}},
          "gradient_clipping": 1.0}
    ds.update(ds_extra or {})
    worker = {"attn_implementation": "flash_attention_2", "use_liger": False,
              "enable_gradient_checkpointing": True}
    worker.update(worker_extra or {})
    return ArcticClientConfig(
        model_name=MODEL, seed=42, max_seq_len=P + R, training_gpus=1, sampling_gpus=1,
        job_ready_timeout=60.0, request_timeout=120.0,
        training=TrainingConfig(checkpoint_path=ckpt, ds_config=ds, ds_worker_config=worker),
        sampling=SamplingConfig(vllm={"tensor_parallel_size": 1}),
        backend=OnPremConfig(protocol="http", host=url.hostname, port=url.port),
    )


def padded(prompts, results):
    """verl's padded layout: prompts left-padded to P, responses right-padded to R."""
    S = P + R
    ids = torch.zeros((B, S), dtype=torch.int64)
    mask = torch.zeros((B, S), dtype=torch.int64)
    prom = torch.zeros((B, P), dtype=torch.int64)
    resp = torch.zeros((B, R), dtype=torch.int64)
    rmask = torch.zeros((B, S), dtype=torch.int64)
    for i, (p, r) in enumerate(zip(prompts, results)):
        ptoks = [2 + (ord(ch) % 20) for ch in p][-P:]
        rtoks = list(r["token_ids"][:R])
        ids[i, P - len(ptoks):P] = torch.tensor(ptoks)
        mask[i, P - len(ptoks):P] = 1
        prom[i, P - len(ptoks):] = torch.tensor(ptoks)
        ids[i, P:P + len(rtoks)] = torch.tensor(rtoks)
        mask[i, P:P + len(rtoks)] = 1
        rmask[i, P:P + len(rtoks)] = 1
        resp[i, :len(rtoks)] = torch.tensor(rtoks)
    return {"input_ids": ids, "attention_mask": mask, "prompts": prom}, resp, rmask


def check_loss(out, what):
    assert isinstance(out.get("avg_loss"), float) and math.isfinite(out["avg_loss"]), (what, out)
    assert isinstance(out["metrics"].get("actor/pg_loss"), float), (what, out)


async def session(base, ckpt):
    version = importlib.metadata.version("arctic-platform")
    assert version == "0.1.4", f"arctic-platform {version} was imported, not 0.1.4"
    cfg = config(base, ckpt)
    client = AsyncArcticRLClient(cfg)
    say(f"jobs created and RUNNING: {client.jobs}")
    transport = client.transport
    sid, tid = client.jobs.sampling, client.jobs.training

    # 0.1.4's JobConfig refuses disagreeing sequence-parallel degrees, before anything else.
    clash = config(base, ckpt, {"sequence_parallel_size": 2}, {"sequence_parallel": 4})
    try:
        transport._start(clash.to_onprem("training"))
    except RuntimeError as e:
        text = str(e)
        assert "(422)" in text and "ds_config.sequence_parallel_size" in text, text
        assert "ds_worker_config.sequence_parallel" in text, text
        say("a JobConfig with conflicting sequence-parallel degrees was refused (422)")
    else:
        raise AssertionError("a JobConfig with conflicting sequence-parallel degrees was accepted")
    info = transport.session.get(f"{base}/job/{tid}", timeout=60).json()
    assert info.get("sp_size") == 1, info

    await client.sleep_inference(level=1)
    await client.sync_weights()
    say("slept, then the weight sync woke the sampler")

    params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_tokens": R, "logprobs": None,
              "repetition_penalty": 1.0}
    prompts = ["Q:3+4=?\nA:", "Q:9-2=?\nA:", "Q:5+5=?\nA:", "Q:8-1=?\nA:"]
    results = []
    for p in prompts:
        (r,) = await client.generate([p], params)
        assert isinstance(r["text"], str) and r["token_ids"], r
        results.append(r)
    await client.sleep_inference(level=1)
    say(f"generated {len(results)} samples")

    batch, resp, rmask = padded(prompts, results)
    fwd = await client.fwd_no_grad({"batch": batch, "meta": meta14()},
                                   processing={"post": ["compute_entropy_and_logprobs"],
                                               "loss_fn": None})
    lp = fwd["batch"]["logprobs"]
    assert tuple(lp.shape) == (B, P + R), lp.shape
    say("forward answered log-probs")

    old = torch.where(rmask == 1, torch.roll(lp.float(), 1, dims=1), torch.zeros(()))
    adv = torch.where(rmask == 1, torch.tensor([[1.0], [-1.0], [0.5], [-0.5]]), torch.zeros(()))
    update = dict(batch)
    update.update({"responses": resp, "response_mask": rmask, "old_log_probs": old,
                   "advantages": adv, "loss_mask": rmask})
    meta = meta14()
    meta.update({"calculate_entropy": False, "global_batch_size": B,
                 "actor_config": {"ppo_mini_batch_size": B, "clip_ratio": 0.2,
                                  "entropy_coeff": 0.0, "use_kl_loss": False,
                                  "loss_agg_mode": "token-mean",
                                  "policy_loss": {"loss_mode": "vanilla"}},
                 "policy_loss_config": {"loss_mode": "vanilla"},
                 "batch_num_tokens": torch.tensor(int(rmask.sum())),
                 "rollout_is_weights": None})
    post = ["apply_temperature", "compute_entropy_and_logprobs"]
    verl = {"post": post, "loss_fn": "verl_grpo"}
    asked = dict(meta, return_fwd_batch=True)
    fb = await client.fwd_bwd({"batch": update, "meta": asked}, processing=verl)
    check_loss(fb, "verl_grpo with return_fwd_batch")
    got = fb["batch"]["logprobs"]
    assert tuple(got.shape) == (B, P + R), got.shape
    plain = await client.fwd_bwd({"batch": update, "meta": meta}, processing=verl)
    check_loss(plain, "verl_grpo")
    assert "batch" not in plain, sorted(plain)
    say("forward-backward answered its forward batch only when asked")

    echo = {"aux_ce_weight": 0.0, "echo_global_num_sequences": B}
    for name, cfg_ in [("grpo", None), ("ap_grpo", None), ("grpo_echo_v1", echo),
                       ("ap_grpo_echo_v1", echo)]:
        processing = {"post": post, "loss_fn": name}
        if cfg_ is not None:
            processing["config"] = cfg_
        out = await client.fwd_bwd({"batch": update, "meta": meta}, processing=processing)
        check_loss(out, name)
        assert out["avg_loss"] == plain["avg_loss"], (name, out["avg_loss"], plain["avg_loss"])
    say("forward-backward took 0.1.4's GRPO names")

    frame = wire.dumps({"batch": update, "meta": meta, "processing": verl})
    chunks = wire.encode_byte_chunks(frame, kind="request", operation="fwd-bwd",
                                     force_chunk=True)
    assert len(chunks) == 1 and chunks[0] != frame, len(chunks)
    assert wire.read_byte_chunk_metadata(chunks[0])["total_chunks"] == 1
    r = transport.session.post(f"{base}/forward-backward", params={"job_id": tid},
                               data=chunks[0],
                               headers={"Content-Type": "application/octet-stream"},
                               timeout=120)
    r.raise_for_status()
    wrapped = wire.loads(r.content)
    assert wrapped["avg_loss"] == plain["avg_loss"], (wrapped["avg_loss"], plain["avg_loss"])
    say("a force_chunk envelope was served as its frame")

    st = await client.step()
    assert st["job_id"] == tid and "last_lr" in st["metrics"], st
    await client.sync_weights()
    saved = await client.save_checkpoint(step=1)
    assert saved["job_id"] == tid, saved
    await client.sleep_training(mode="all")
    await client.wake_training()
    await client.sleep_inference(level=1)
    say("stepped, synced, saved, slept and woke")

    await client.shutdown()
    jobs = transport.session.get(f"{base}/status", timeout=60).json()["jobs"]
    assert jobs == {}, jobs
    say(f"shut down: jobs {sid} and {tid} destroyed")
    return 0


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    return asyncio.run(session(sys.argv[1].rstrip("/"), sys.argv[2]))


if __name__ == "__main__":
    sys.exit(main())
