#!/usr/bin/env python3
"""One verl training step, as verl's Arctic adapter drives it through the on-prem client.

    python3 session.py BASE_URL CHECKPOINT_DIR

The route order and every body are the adapter's: JobConfigs as the client's `to_onprem`
writes them, one prompt a `/generate` request (prompt as text, the adapter's
`sampling_params`, every key with explicit nulls), `/forward` for old log-probs with the 14
`meta` keys, one `/forward-backward` (those 14 plus `actor_config`, `policy_loss_config`,
`global_batch_size`, `batch_num_tokens` as a 0-d I64 tensor and `rollout_is_weights: None`)
and one `/step`, the four-call weight sync, `/save` with explicit nulls, sleep level 1, then
the jobs destroyed in the client's order. Like the real client, any non-2xx answer raises;
every binary answer is decoded with the Python codec. Exit 0 when the whole step went through.
"""

import math
import os
import struct
import sys
import time
import urllib.error
import urllib.request

# Tiny arrays: one BLAS thread. OpenBLAS's default (a thread per core that spins between calls)
# cost more CPU than the work itself, beside the harness on a 2-core machine.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dssst1 import Raw, request_body, response_value  # noqa: E402

P, R, B = 12, 8, 4
MODEL = "Qwen/Qwen3-0.6B"


class Client:
    def __init__(self, base):
        self.base = base.rstrip("/")

    def call(self, method, route, body=None, frame=None):
        data, headers = request_body(body, frame)
        req = urllib.request.Request(self.base + route, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=120) as resp:
                raw = resp.read()
                ctype = resp.headers.get("Content-Type", "")
        except urllib.error.HTTPError as e:
            raise SystemExit(f"{method} {route}: HTTP {e.code}: {e.read()[:500]!r}")
        return response_value(raw, ctype)

    def wait_healthy(self):
        # The client polls /health every 2 s and swallows errors; a test polls faster.
        for _ in range(300):
            try:
                if self.call("GET", "/health") == {"status": "OK"}:
                    return
            except (OSError, SystemExit):
                pass
            time.sleep(0.1)
        raise SystemExit(f"{self.base} never became healthy")


def meta14():
    return {
        "zorro_train_enable": False,
        "zorro_train_max_rollouts": 1,
        "load_balancer": True,
        "rollout_n": 1,
        "max_prompt_len": P,
        "max_response_len": R,
        "max_token_len_per_gpu": 4096,
        "temperature": 1.0,
        "calculate_entropy": True,
        "pad_token_id": 0,
        "drop_position_ids": True,
        "logits_optimization": "none",
        "logits_optimization_peak_mem_size_in_gib": 4,
        "logits_compute_in_fp32": False,
    }


def i64(a):
    return Raw.of(np.asarray(a, dtype="<i8"))


def f32(a):
    return Raw.of(np.asarray(a, dtype="<f4"))


def main(base, ckpt):
    c = Client(base)
    c.wait_healthy()
    # Jobs are created in the order sampling, (log_prob,) training.
    sampling = {"model_name": MODEL, "job_type": "sampling",
                "vllm_config": {"tensor_parallel_size": 1, "max_model_len": P + R}, "seed": 42}
    training = {
        "model_name": MODEL, "job_type": "training",
        "ds_config": {"train_batch_size": B, "train_micro_batch_size_per_gpu": B,
                      "gradient_accumulation_steps": 1,
                      "optimizer": {"type": "AdamW", "params": {"lr": 1e-06, "weight_decay": 0.01,
                                                                "betas": [0.9, 0.999], "eps": 1e-08}},
                      "gradient_clipping": 1.0},
        "ds_worker_config": {"attn_implementation": "flash_attention_2", "use_liger": False,
                             "enable_gradient_checkpointing": True},
        "checkpoint_path": ckpt, "full_determinism": False, "seed": 42,
        "cuda_ipc": False, "low_memory": False,
    }
    sid = c.call("POST", "/initialize", sampling)["job_id"]
    tid = c.call("POST", "/initialize", training)["job_id"]
    for j in (tid, sid):  # the client's order: training, sampling, log_prob
        assert c.call("GET", f"/job/{j}")["status"] == "RUNNING"

    def sync_weights():
        # Wake weights, weight-sync, wake kv_cache, reset the prefix cache: the adapter's order.
        c.call("POST", f"/wake-inference?job_id={sid}", ["weights"])
        ws = c.call("POST", f"/operation?job_id={tid}", {
            "operation_type": "weight-sync", "sub_job_id": tid, "sub_job_type": "training",
            "payload": {"source_sub_job_id": tid, "target_sub_job_ids": [sid]}})
        assert ws is not None
        c.call("POST", f"/wake-inference?job_id={sid}", ["kv_cache"])
        c.call("POST", f"/operation?job_id={sid}", {
            "operation_type": "reset-prefix-cache", "sub_job_type": "sampling",
            "payload": {"drain": True, "timeout_s": 60.0, "retry_interval_s": 0.1}})

    # Colocated verl: the rollout sleeps once built, and the weight sync wakes it.
    c.call("POST", f"/sleep-inference?job_id={sid}", {"level": 1})
    sync_weights()

    # Rollout: one prompt a request, the prompt as text.
    params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_tokens": R, "logprobs": None,
              "repetition_penalty": 1.0}
    prompts = ["Q:3+4=?\nA:", "Q:9-2=?\nA:", "Q:5+5=?\nA:", "Q:8-1=?\nA:"]
    results = []
    for p in prompts:
        out = c.call("POST", f"/generate?job_id={sid}",
                     frame={"prompts": [p], "sampling_params": params, "routing_key": None,
                            "strict": False})
        assert out["job_id"] == sid, out
        (r,) = out["results"]
        assert isinstance(r["text"], str) and r["token_ids"], r
        results.append(r)
    c.call("POST", f"/sleep-inference?job_id={sid}", {"level": 1})

    # verl's padded layout: prompts left-padded to P, responses right-padded to R.
    S = P + R
    ids = np.zeros((B, S), "<i8")
    mask = np.zeros((B, S), "<i8")
    prom = np.zeros((B, P), "<i8")
    resp = np.zeros((B, R), "<i8")
    rmask = np.zeros((B, S), "<i8")
    for i, (p, r) in enumerate(zip(prompts, results)):
        ptoks = [2 + (ord(ch) % 20) for ch in p][-P:]
        rtoks = r["token_ids"][:R]
        ids[i, P - len(ptoks):P] = ptoks
        mask[i, P - len(ptoks):P] = 1
        prom[i, P - len(ptoks):] = ptoks
        ids[i, P:P + len(rtoks)] = rtoks
        mask[i, P:P + len(rtoks)] = 1
        rmask[i, P:P + len(rtoks)] = 1
        resp[i, :len(rtoks)] = rtoks
    batch = {"input_ids": i64(ids), "attention_mask": i64(mask), "prompts": i64(prom)}

    fwd = c.call("POST", f"/forward?job_id={tid}", frame={
        "batch": batch, "meta": meta14(),
        "processing": {"post": ["compute_entropy_and_logprobs"], "loss_fn": None}})
    lp = fwd["batch"]["logprobs"]
    assert lp.shape == [B, S], lp
    assert fwd["metrics"] == {} and fwd["avg_loss"] == 0.0, fwd
    old = np.frombuffer(lp.data, dtype={"F32": "<f4", "BF16": "<u2"}[lp.dtype])
    old = old.astype("<f4") if lp.dtype == "F32" else np.zeros(B * S, "<f4")
    old = old.reshape(B, S)
    old_lp = np.where(rmask == 1, np.roll(old, 1, axis=1), 0.0).astype("<f4")

    adv = np.where(rmask == 1, np.array([[1.0], [-1.0], [0.5], [-0.5]]), 0.0).astype("<f4")
    update = dict(batch)
    update.update({"responses": i64(resp), "response_mask": i64(rmask), "old_log_probs": f32(old_lp),
                   "advantages": f32(adv), "loss_mask": i64(rmask)})
    actor_config = {"ppo_mini_batch_size": B, "clip_ratio": 0.2, "entropy_coeff": 0.0,
                    "use_kl_loss": False, "loss_agg_mode": "token-mean",
                    "policy_loss": {"loss_mode": "vanilla"}}
    meta = meta14()
    meta["calculate_entropy"] = False
    meta["actor_config"] = actor_config
    meta["policy_loss_config"] = {"loss_mode": "vanilla"}
    meta["global_batch_size"] = B
    meta["batch_num_tokens"] = Raw("I64", [], struct.pack("<q", int(rmask.sum())), scalar=True)
    meta["rollout_is_weights"] = None
    fb = c.call("POST", f"/forward-backward?job_id={tid}", frame={
        "batch": update, "meta": meta,
        "processing": {"post": ["apply_temperature", "compute_entropy_and_logprobs"],
                       "loss_fn": "verl_grpo"}})
    losses = [fb["avg_loss"]]
    # The adapter averages the returned losses with numpy: a null here would crash it.
    assert isinstance(fb["avg_loss"], float) and math.isfinite(float(np.mean(losses))), fb
    assert isinstance(fb["metrics"].get("actor/pg_loss"), float), fb
    st = c.call("POST", f"/step?job_id={tid}", {"learning_rate": None})
    assert st["job_id"] == tid and "last_lr" in st["metrics"], st

    sync_weights()

    saved = c.call("POST", f"/save?job_id={tid}", {
        "checkpoint_id": None, "checkpoint_type": "resumable", "path": None, "step": 1,
        "export_hf": False, "save_total_limit": None, "stage_info": None})
    assert saved["job_id"] == tid and saved["hf_path"] is None, saved
    c.call("POST", f"/sleep-inference?job_id={sid}", {"level": 1})

    # Shutdown: training, then sampling.
    c.call("POST", f"/destroy?job_id={tid}", {"job_type": "training"})
    c.call("POST", f"/destroy?job_id={sid}", {"job_type": "sampling"})
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1], sys.argv[2]))
