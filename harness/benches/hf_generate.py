"""Hugging Face transformers' generation at the Qwen3-0.6B shape: the baseline that
`torch_perf`'s generate figure is compared with (docs/performance.md, "Generation against
Hugging Face").

Random weights (nothing is downloaded), bf16, SDPA attention, eager `generate` with sampling
(temperature 1, no top-k, no top-p, no end-of-sequence stop), 80 prompts of 512 random tokens,
256 new tokens each: the same work as `torch_perf --gen-repeats 3`. One warm-up call on the
exact timed shape, then `--repeats` timed calls; prints one JSON line with each rate and the
median.

Run on the GPU machine, beside torch_perf in the same call (harness/benches/gpu_generate.sh
runs both, and the rest of the comparison):

    python3 harness/benches/hf_generate.py [--prompts 80] [--prompt-len 512] [--tokens 256] [--repeats 3]

Needs torch (CUDA) and transformers (written against 5.x; 4.x works too).
"""

import argparse
import json
import statistics
import time

import torch
import transformers
from transformers import Qwen3Config, Qwen3ForCausalLM


def qwen3_0_6b() -> Qwen3Config:
    return Qwen3Config(
        vocab_size=151936,
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=40960,
        rope_theta=1_000_000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        attn_implementation="sdpa",
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=80)
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()

    torch.manual_seed(0)
    model = Qwen3ForCausalLM(qwen3_0_6b()).to(device="cuda", dtype=torch.bfloat16).eval()
    ids = torch.randint(2, 151936, (a.prompts, a.prompt_len), device="cuda")
    mask = torch.ones_like(ids)
    kwargs = dict(
        attention_mask=mask,
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        max_new_tokens=a.tokens,
        min_new_tokens=a.tokens,
        eos_token_id=None,
        pad_token_id=0,
    )

    def timed() -> float:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.no_grad():
            out = model.generate(ids, **kwargs)
        torch.cuda.synchronize()
        secs = time.perf_counter() - t0
        new = (out.shape[1] - a.prompt_len) * a.prompts
        return new / secs

    timed()  # warm-up on the timed shape
    rates = [timed() for _ in range(a.repeats)]
    print(
        json.dumps(
            {
                "baseline": "hf_transformers_generate",
                "transformers": transformers.__version__,
                "torch": torch.__version__,
                "device": torch.cuda.get_device_name(0),
                "prompts": a.prompts,
                "prompt_len": a.prompt_len,
                "new_tokens": a.tokens,
                "tokens_per_s_each": [round(r, 1) for r in rates],
                "tokens_per_s_median": round(statistics.median(rates), 1),
            }
        )
    )


if __name__ == "__main__":
    main()
