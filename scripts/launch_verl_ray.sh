#!/usr/bin/env bash
# Launch the paper's stage 4 (agentic PPO with a critic) on a Ray cluster with verl.
#
# One node times kernels and trains nothing (the evaluation service); the others form the Ray
# cluster that trains and generates. Run on each node, with the same repo checkout and env:
#
#   ROLE=eval   EVAL_GPUS=0,1,2,3,4,5,6,7            scripts/launch_verl_ray.sh   # kernel timing node (makes the token)
#   ROLE=head   HEAD_IP=10.0.0.1                     scripts/launch_verl_ray.sh   # Ray head, then wait
#   ROLE=worker HEAD_IP=10.0.0.1                     scripts/launch_verl_ray.sh   # every other training node
#   ROLE=submit HEAD_IP=10.0.0.1 EVAL_URL=http://10.0.0.9:8420 NNODES=4 \
#        TASKS=tasks.parquet ACTOR=runs/rft/final CRITIC=runs/value/final  scripts/launch_verl_ray.sh
#
# Extra arguments are Hydra overrides passed to verl (e.g. trainer.total_training_steps=3).
# CONFIG=ppo_agentic_smoke runs three small steps of the same recipe; DRY_RUN=1 (submit) prints the command only.
# Ray workers take their environment from `ray start`, not from the submitting shell: submit hands
# its CUDA_AGENT_*, NNODES and GPUS_PER_NODE to `cuda-agent train verl-launch`, which passes them to
# every worker through verl's ray_kwargs.ray_init.runtime_env.env_vars (and checks that it did).
set -euo pipefail
cd "$(dirname "$0")/.."
ROLE=${ROLE:?set ROLE=eval|head|worker|submit}
RAY_PORT=${RAY_PORT:-6379}
CONFIG=${CONFIG:-ppo_agentic}
TOKEN_FILE=${EVAL_TOKEN_FILE:-$PWD/.cache/eval_token}  # the evaluation service's shared secret
# NVLink multicast stays off (shared hosts); keep these exported for every process verl starts.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

case "$ROLE" in
  eval)
    # The sandbox behind HTTP, one worker pool per GPU; training and generation never touch these GPUs.
    # It runs the code it is sent, so on the network it requires a token: made here once (mode 600),
    # read by every client from EVAL_TOKEN_FILE (a shared file system, or copy it to the submit node).
    if [ ! -s "$TOKEN_FILE" ]; then
      mkdir -p "$(dirname "$TOKEN_FILE")"
      (umask 077 && python3 -c 'import secrets; print(secrets.token_hex(32))' > "$TOKEN_FILE")
    fi
    exec cuda-agent train serve --gpus "${EVAL_GPUS:-0}" --host "${EVAL_HOST:-0.0.0.0}" --port "${EVAL_PORT:-8420}" \
      --token-file "$TOKEN_FILE" --per-gpu "${EVAL_PER_GPU:-2}" --max-queue "${EVAL_MAX_QUEUE:-2048}" \
      --per-client "${EVAL_PER_CLIENT:-1024}"
    ;;
  head)
    ray start --head --port "$RAY_PORT" --num-gpus "${GPUS_PER_NODE:-8}" --dashboard-host 0.0.0.0
    ;;
  worker)
    ray start --address "${HEAD_IP:?}:$RAY_PORT" --num-gpus "${GPUS_PER_NODE:-8}"
    ;;
  submit)
    : "${EVAL_URL:?set EVAL_URL=http://<eval node>:8420}"
    # Clients (the agent loop, the reward) read the token file named by CUDA_AGENT_EVAL_TOKEN_FILE: its path
    # travels to the Ray workers, never the token (verl prints what it forwards; verl-launch refuses a token)
    if [ -s "$TOKEN_FILE" ]; then
      export CUDA_AGENT_EVAL_TOKEN_FILE="$(realpath "$TOKEN_FILE")"
      unset CUDA_AGENT_EVAL_TOKEN
    else
      echo "no token file for the evaluation service: copy the eval node's token file to storage every node sees and set EVAL_TOKEN_FILE" >&2; exit 1
    fi
    python3 -c 'import sys; from cuda_agent.train.client import EvalClient
try: EvalClient(sys.argv[1], retries=0, timeout_s=10).check()
except Exception as e: sys.exit(f"evaluation service: {e}")' "$EVAL_URL"
    # Ray workers do not see this shell's environment, nor its directory: every path is made
    # absolute (on storage every node sees), and verl-launch forwards every variable the config
    # reads, and every CUDA_AGENT_* one, through ray_kwargs.ray_init.runtime_env.env_vars.
    DATA=$(realpath -m "${DATA_DIR:-data/verl}")
    if [ ! -f "$DATA/agentic_train.parquet" ]; then
      cuda-agent train data verl --in "${TASKS:?set TASKS=tasks.parquet}" --out "$DATA/agentic_train.parquet"
      cuda-agent train data verl --in "${VAL_TASKS:-${TASKS}}" --out "$DATA/agentic_val.parquet"
    fi
    local_path() { if [ -e "$1" ]; then realpath "$1"; else printf '%s' "$1"; fi; }  # else a hub id
    export CUDA_AGENT_EVAL_URL="$EVAL_URL" CUDA_AGENT_TRAIN_DATA="$DATA/agentic_train.parquet" \
      CUDA_AGENT_VAL_DATA="$DATA/agentic_val.parquet" CUDA_AGENT_ACTOR="$(local_path "${ACTOR:-runs/rft/final}")" \
      CUDA_AGENT_CRITIC="$(local_path "${CRITIC:-runs/value/final}")" CUDA_AGENT_LOOPS="$PWD/configs/verl/agent_loops.yaml" \
      CUDA_AGENT_RUNS="$(realpath -m "${RUNS_DIR:-runs/verl}")" NNODES="${NNODES:-1}" GPUS_PER_NODE="${GPUS_PER_NODE:-8}"
    check_args=()
    [ "$CONFIG" = ppo_agentic ] || check_args+=(--no-paper)
    export RAY_ADDRESS="${HEAD_IP:?}:$RAY_PORT"
    [ -z "${DRY_RUN:-}" ] || check_args+=(--dry-run)  # print the command, run nothing
    exec cuda-agent train verl-launch "${check_args[@]}" --check-files "configs/verl/$CONFIG.yaml" "$@"
    ;;
  *)
    echo "ROLE must be eval, head, worker or submit" >&2; exit 2
    ;;
esac
