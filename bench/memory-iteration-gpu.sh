#!/usr/bin/env bash
# The GPU check's memory step (bench/gpu-check.sh runs it after its figures): what a memory iteration
# of EMPO² costs against a plain one when vLLM generates the rollouts and the update runs on the GPU.
# results/memory-overhead/ measured 5.3× (off-policy) and 17.1× (on-policy) on the CPU and left the
# paper's ~1.3× to a GPU with vLLM. This runs bench/memory-iteration.ts at that study's shape
# (configs/real-empo2.yaml, SmolLM2-135M-Instruct, LoRA r 16, 10-step episodes; arms plain, tips-off,
# tips-on) with its rollouts on a vLLM server that takes the adapter after every update
# (rollout.remote.sync: lora), the worker's update on the GPU. Prints the bench's table, then one
# JSON line per arm as gpu-check's figures ({"check": "gpu-check", "figure": "memory_iteration", ...}).
#
#   bench/memory-iteration-gpu.sh [--dry] [--model DIR] [--work DIR] [--out FILE] [--set key=value ...]
#
# --model: a Hugging Face model directory (default models/smollm2-135m-instruct, from npm run setup).
#          Without weights in it (only config.json and the tokenizer files, which a device runner can
#          carry where the 538 MB of weights cannot), a random-weight model of its shape is drawn into
#          --work first: the costs of the same shapes, but the tips and actions are random text, so the
#          tips' lengths are not the model's (every figure line says "random_weights": true).
# --dry:   empo2 serve on the CPU in vLLM's place and 2-step episodes of one task: checks the plumbing
#          (server, adapter sync, the bench, the figure lines) where no GPU is; its numbers mean nothing.
# --set:   passed on to every run (e.g. --set memory.embedder=hash where the Python lacks MiniLM).
#
# Python (vLLM's and the trainer's worker's): $EMPO2_GPU_PYTHON (gpu-check.sh sets it), else .venv-gpu's,
# else python3; with --dry, $EMPO2_PYTHON or .venv's. Needs node and this checkout's node_modules.
# Runs within 9 minutes on one H100 (estimated: never run on a GPU; vLLM's start 1–2 min, three arms of
# two iterations and two one-episode-per-task evaluations each).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DRY=0
MODEL="$ROOT/models/smollm2-135m-instruct"
WORK=""
OUT=""
SETS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --dry) DRY=1 ;;
    --model) MODEL="$2"; shift ;;
    --work) WORK="$2"; shift ;;
    --out) OUT="$2"; shift ;;
    --set) SETS+=(--set "$2"); shift ;;
    *) echo "memory-iteration-gpu: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

fail() {
  echo "memory-iteration-gpu: $*" >&2
  exit 2
}

command -v node >/dev/null || fail "no node: the trainer is TypeScript (Node 20)"
[ -x "$ROOT/node_modules/.bin/tsx" ] || fail "no node_modules in $ROOT: run npm ci"
[ -f "$MODEL/config.json" ] && [ -f "$MODEL/tokenizer.json" ] || fail "$MODEL holds no config.json and tokenizer.json (npm run setup installs SmolLM2-135M-Instruct; --model names another)"
if [ "$DRY" = 1 ]; then
  PY="${EMPO2_PYTHON:-$ROOT/.venv/bin/python}"
else
  PY="${EMPO2_GPU_PYTHON:-}"
  if [ -z "$PY" ] && [ -x "$ROOT/.venv-gpu/bin/python" ]; then PY="$ROOT/.venv-gpu/bin/python"; fi
  PY="${PY:-python3}"
fi
command -v "$PY" >/dev/null || fail "no Python ($PY)"
"$PY" -c "import torch, transformers" >/dev/null 2>&1 || fail "$PY lacks torch or transformers"
if [ "$DRY" = 0 ]; then
  "$PY" -c "import vllm" >/dev/null 2>&1 || fail "$PY has no vllm (bench/gpu-check.sh says how to prepare its wheels)"
  "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" || fail "$PY's torch sees no GPU (--dry checks the plumbing on the CPU)"
fi

KEEP_WORK=1
if [ -z "$WORK" ]; then
  WORK="$(mktemp -d "${TMPDIR:-/tmp}/empo2-memory-gpu-XXXXXX")"
  KEEP_WORK=0
fi
mkdir -p "$WORK"
WORK="$(cd "$WORK" && pwd)"
SERVER_PID=""
cleanup() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM -- "-$SERVER_PID" 2>/dev/null || true
    for _ in $(seq 30); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 1; done
    kill -KILL -- "-$SERVER_PID" 2>/dev/null || true
  fi
  [ "$KEEP_WORK" = 1 ] || rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A model directory without weights: draw them (seed 0) in its shape, beside copies of its other files.
RANDOM_WEIGHTS=false
if ! compgen -G "$MODEL/*.safetensors" >/dev/null; then
  RANDOM_WEIGHTS=true
  echo "memory-iteration-gpu: $MODEL has no weights; drawing a random-weight model of its shape into $WORK/model" >&2
  mkdir -p "$WORK/model"
  cp "$MODEL"/*.json "$WORK/model/"
  "$PY" - "$WORK/model" <<'PY'
import sys, torch
from transformers import AutoConfig, AutoModelForCausalLM
torch.manual_seed(0)
model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(sys.argv[1]), dtype=torch.float32)
model.save_pretrained(sys.argv[1])
PY
  MODEL="$WORK/model"
fi
MODEL="$(cd "$MODEL" && pwd)"

PORT="$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
export EMPO2_API_KEY="memory-iteration-gpu"
RUNS="$WORK/runs"
mkdir -p "$RUNS"
if [ "$DRY" = 1 ]; then
  setsid node "$ROOT/bin/empo2.js" serve "$MODEL" --served-model-name base --port "$PORT" \
    --allow-weight-updates --weights-root "$RUNS" >"$WORK/server.log" 2>&1 &
else
  VLLM_ALLOW_RUNTIME_LORA_UPDATING=True HF_HUB_OFFLINE=1 setsid "$PY" -m vllm.entrypoints.openai.api_server \
    --model "$MODEL" --served-model-name base --dtype bfloat16 --enable-lora --max-lora-rank 16 --max-loras 1 \
    --gpu-memory-utilization 0.3 --host 127.0.0.1 --port "$PORT" --api-key "$EMPO2_API_KEY" --seed 0 \
    >"$WORK/server.log" 2>&1 &
fi
SERVER_PID=$!
BASE="http://127.0.0.1:$PORT"
STARTED=$SECONDS
until node -e "fetch('$BASE/v1/models', { headers: { Authorization: 'Bearer ' + process.env.EMPO2_API_KEY } }).then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"; do
  kill -0 "$SERVER_PID" 2>/dev/null || { tail -20 "$WORK/server.log" >&2; fail "the server exited (log above, $WORK/server.log)"; }
  [ $((SECONDS - STARTED)) -lt 300 ] || { tail -20 "$WORK/server.log" >&2; fail "the server did not answer within 300 s"; }
  sleep 2
done
echo "memory-iteration-gpu: server up at $BASE after $((SECONDS - STARTED)) s" >&2

# The study's shape; vLLM constrains by its own request fields, not the allowed_texts the remote engine
# sends, so every arm writes its actions as free text (the same for all three: the ratios compare alike).
SHAPE=(--set env.max_steps=10)
if [ "$DRY" = 1 ]; then
  SHAPE=(--set env.max_steps=2 --set 'env.tasks=["power"]' --set rollout.tasks_per_batch=1 --set rollout.group_size=2)
fi
FIGURES="$WORK/memory-iteration.json"
EMPO2_PYTHON="$PY" node "$ROOT/node_modules/.bin/tsx" "$ROOT/bench/memory-iteration.ts" -c "$ROOT/configs/real-empo2.yaml" \
  --out "$RUNS" --no-before --json "$FIGURES" --set "model.path=$MODEL" --set rollout.constrained=false \
  --set "rollout.remote.base_url=$BASE" --set rollout.remote.sync=lora "${SHAPE[@]}" "${SETS[@]}"

MODE=full
[ "$DRY" = 0 ] || MODE=dry
node -e '
const fs = require("node:fs");
const [file, mode, server, randomWeights, out] = process.argv.slice(1);
const f = JSON.parse(fs.readFileSync(file, "utf8"));
for (const a of f.arms) {
  const line = JSON.stringify({
    check: "gpu-check", figure: "memory_iteration", mode, rollouts: server, random_weights: randomWeights === "true",
    arm: a.arm, value: +a.iteration_vs_plain.toFixed(3), unit: "x plain iteration", iteration_s: +a.iteration_s.toFixed(1),
    rollout_s: +a.rollout_s.toFixed(1), rollout_vs_plain: +a.rollout_vs_plain.toFixed(3), memory_s: +a.memory_s.toFixed(1),
    optimiser_s: +a.optimiser_s.toFixed(1), prefill_tokens: a.prefill_tokens, sequence_tokens: a.sequence_tokens, env_steps: a.env_steps,
  });
  console.log(line);
  if (out) fs.appendFileSync(out, line + "\n");
}
console.log(`memory iteration on the ${server} path: slowest ${f.slowest_memory_vs_plain.toFixed(2)}x a plain one (target ${f.target}x)`);
' "$FIGURES" "$MODE" "$([ "$DRY" = 1 ] && echo empo2_serve || echo vllm)" "$RANDOM_WEIGHTS" "$OUT"
