//! The CPU flagship as a plain loop on the libtorch engine: warm-started tiny model, GRPO on
//! the arith task, the same calls the driver makes. Prints one line per step and a JSON
//! summary with the wall time.
//!
//! `cargo run --release --features torch -p rlharness-torch --example tiny_grpo -- [--steps N] [--lr X]
//!  [--prompts N] [--n N] [--seed N] [--threads N] [--entropy-coeff X] [--collapse]`
//! `--collapse` uses the settings of the collapse scenario (learning rate far too large).

use std::time::Instant;

use rlharness_arctic::torch_spec::TorchSpec;
use rlharness_torch::grpo::{run_grpo, window_mean, GrpoRun};
use rlharness_torch::TorchEngine;

fn main() -> anyhow::Result<()> {
    let mut run = GrpoRun::default();
    let mut spec = TorchSpec::default();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let value = |k: usize| -> anyhow::Result<&str> {
            args.get(k + 1)
                .map(String::as_str)
                .ok_or_else(|| anyhow::anyhow!("{} needs a value", args[k]))
        };
        match args[i].as_str() {
            "--steps" => run.steps = value(i)?.parse()?,
            "--lr" => run.lr = value(i)?.parse()?,
            "--prompts" => run.prompts_per_step = value(i)?.parse()?,
            "--n" => run.n = value(i)?.parse()?,
            "--seed" => run.seed = value(i)?.parse()?,
            "--threads" => spec.threads = value(i)?.parse()?,
            "--ws-steps" => spec.warm_start.steps = value(i)?.parse()?,
            "--ws-correct" => spec.warm_start.correct_fraction = value(i)?.parse()?,
            "--ws-lr" => spec.warm_start.lr = value(i)?.parse()?,
            "--entropy-coeff" => run.entropy_coeff = value(i)?.parse()?,
            "--collapse" => {
                let c = GrpoRun::collapse();
                run.lr = c.lr;
                run.prompts_per_step = c.prompts_per_step;
                run.gradient_clipping = c.gradient_clipping;
                i += 1;
                continue;
            }
            other => anyhow::bail!("unknown argument {other}"),
        }
        i += 2;
    }
    let t0 = Instant::now();
    let engine = TorchEngine::new(&spec, run.seed)?;
    let setup = t0.elapsed().as_secs_f64();
    println!("engine: {:?} (set-up {setup:.2} s)", engine.info());
    let t1 = Instant::now();
    let recs = run_grpo(&engine, &run, |r| {
        println!(
            "step {:3}  reward {:.3}  entropy {:.3}  pg_loss {:+.4}  grad_norm {:.3}  len {:.2}  {:.2} s",
            r.step, r.reward_mean, r.entropy, r.pg_loss, r.grad_norm, r.response_length, r.seconds
        )
    })?;
    let run_s = t1.elapsed().as_secs_f64();
    let k = recs.len();
    let w = 10.min(k);
    let summary = serde_json::json!({
        "steps": k,
        "lr": run.lr,
        "prompts_per_step": run.prompts_per_step,
        "n": run.n,
        "seed": run.seed,
        "threads": engine.info().threads,
        "torch": engine.info().torch_version,
        "warm_start_cached": engine.info().warm_start_cached,
        "reward_first_window": window_mean(&recs, 0, w, |r| r.reward_mean),
        "reward_final_window": window_mean(&recs, k - w, k, |r| r.reward_mean),
        "entropy_first_window": window_mean(&recs, 0, w, |r| r.entropy),
        "entropy_final_window": window_mean(&recs, k - w, k, |r| r.entropy),
        "setup_seconds": setup,
        "run_seconds": run_s,
    });
    println!("{summary}");
    Ok(())
}
