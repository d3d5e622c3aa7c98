#!/usr/bin/env bash
# Starts real verl's trainer (`python -m verl.trainer.main_ppo`) with the real Arctic adapter, on
# CPU, for the scenarios of this folder. The harness appends the scenario's config as Hydra
# overrides ("$@"); this script adds what makes verl find the adapter and run without a GPU.
#
# Settings (environment):
#   VERL_SRC     a verl checkout with verl/remote_backend/ (proven: release/v0.7.1 @ 9dfab8e5d)
#   ARCTIC_SRC   an Arctic-Platform checkout (proven: 5864380)
#   VERL_PYTHON  the interpreter of verl's environment (default: the project's .venv-verl, made
#                by ci/verl-install.sh)
#   VERL_ASSETS  a folder of `rlharness assets verl` (default: made afresh beside the run folder)
#   RLHARNESS_BIN  the harness binary (the harness sets it for its trainers)
#   RLHARNESS_SCENARIO  the scenario file (set by the harness): the assets follow its model
#   RLHARNESS_SEED the scenario's seed (set by the harness): verl's data shuffle (`data.seed`)
#                  and the Arctic jobs' seed (`remote_backend.train.determinism.seed`, which
#                  the torch engine samples with)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
die() { echo "verl-arctic.sh: error: $*" >&2; exit 2; }
: "${VERL_SRC:?set VERL_SRC to a verl checkout (release/v0.7.1 or later, with verl/remote_backend/)}"
: "${ARCTIC_SRC:?set ARCTIC_SRC to an Arctic-Platform checkout}"
[[ -d "$VERL_SRC/verl/remote_backend" ]] || die "VERL_SRC=$VERL_SRC has no verl/remote_backend/ (verl release/v0.7.1 has it)"
adapter="$ARCTIC_SRC/arctic_platform/integrations/verl"
[[ -f "$adapter/adapter.py" ]] || die "ARCTIC_SRC=$ARCTIC_SRC has no arctic_platform/integrations/verl/adapter.py"
py=${VERL_PYTHON:-$root/.venv-verl/bin/python}
[[ -x "$py" ]] || die "no Python at $py: run ci/verl-install.sh, or set VERL_PYTHON"
run_dir=${RLHARNESS_RUN_DIR:?the harness sets RLHARNESS_RUN_DIR}
# What reaches the wire as a path (the model folder, the checkpoint folder) lives beside the run
# folders, not in them: the runs of one scenario, and the trials of one `propagate`, then send
# the same JobConfigs.
shared=$(dirname "$run_dir")
assets=${VERL_ASSETS:-}
if [[ -z "$assets" ]]; then
    assets="$shared/verl-assets"
    "${RLHARNESS_BIN:?the harness sets RLHARNESS_BIN}" assets verl --out "$assets" --force \
        --scenario "${RLHARNESS_SCENARIO:?the harness sets RLHARNESS_SCENARIO}" \
        --seed "${RLHARNESS_SEED:-1}" >&2
fi
# A path as a quoted Hydra value (run folders of `propagate` hold `=` and `,`).
hq() { printf "'%s'" "${1//\'/\\\'}"; }
export PYTHONPATH="$VERL_SRC:$ARCTIC_SRC${PYTHONPATH:+:$PYTHONPATH}"
export VERL_USE_EXTERNAL_MODULES=arctic_platform.integrations.verl.register
# No hub, no telemetry, no GPU kernels: everything verl and the adapter import must load offline.
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=disabled
export FLASH_ATTENTION_TRITON_AMD_ENABLE=TRUE RAY_USAGE_STATS_ENABLED=0 TOKENIZERS_PARALLELISM=false
export HF_HOME="$run_dir/hf-home" RAY_TMPDIR=${RAY_TMPDIR:-/tmp}
# verl's `ray.init()` starts a local cluster. Ray 2.60 turns token authentication on for it and
# reads, or else WRITES, ~/.ray/auth_token; that file then turns token auth on for every later
# `ray start --head` of the user. So the cluster gets a token of this run's own: the user's file
# is neither read nor written. Never printed.
export RAY_AUTH_MODE=token
RAY_AUTH_TOKEN=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
export RAY_AUTH_TOKEN
unset RAY_AUTH_TOKEN_PATH RAY_ADDRESS
exec "$py" -m verl.trainer.main_ppo \
    remote_backend=arctic \
    "hydra.searchpath=[$(hq "file://$adapter/config")]" \
    "hydra.run.dir=$(hq "$run_dir/hydra")" \
    "data.train_files=$(hq "$assets/data/train.jsonl")" \
    "data.val_files=$(hq "$assets/data/val.jsonl")" \
    "actor_rollout_ref.model.path=$(hq "$assets/model")" \
    actor_rollout_ref.rollout.name=arctic \
    actor_rollout_ref.rollout.agent.num_workers=1 reward.num_workers=1 \
    trainer.use_legacy_worker_impl=disable \
    actor_rollout_ref.actor.strategy=fsdp2 \
    +actor_rollout_ref.model.override_config.attn_implementation=eager \
    trainer.device=cpu ray_kwargs.ray_init.num_cpus=16 \
    +ray_kwargs.ray_init.include_dashboard=false \
    trainer.save_freq=-1 trainer.test_freq=-1 \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=64 \
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=64 \
    "trainer.default_local_dir=$(hq "$shared/verl-checkpoints")" \
    "data.seed=${RLHARNESS_SEED:-1}" "remote_backend.train.determinism.seed=${RLHARNESS_SEED:-1}" \
    "$@"
