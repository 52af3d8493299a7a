#!/usr/bin/env bash
# The scale path's GPU check (docs/SCALING.md): the PyTorch worker's update and generation on a
# random-weight Qwen2.5-7B-shaped model (bf16, LoRA), Hugging Face generate on the same model, and
# vLLM serving the same shape with the worker's adapter hot-loaded; one JSON line per figure. Then,
# with vLLM, the memory step (bench/memory-iteration-gpu.sh): a memory iteration of EMPO² against a
# plain one with vLLM's rollouts, the question results/memory-overhead/ left to a GPU.
# Meant to finish within 8 minutes on one H100/H200 with no network, plus 9 for the memory step
# (estimates; never run on a GPU). Where one command may run 10 minutes, run --skip-memory, then
# bench/memory-iteration-gpu.sh as a second command.
#
#   bench/gpu-check.sh [--dry] [--skip-vllm] [--skip-memory] [--vllm-eager] [--out FILE] [--new-tokens N]
#
# --dry: a tiny model on the CPU with empo2 serve in vLLM's place, the project's .venv: what CI
#        runs (test/gpu-check.test.ts) so that this script keeps working without a GPU.
#
# Python, first that applies: $EMPO2_GPU_PYTHON; .venv-gpu/bin/python; a .venv-gpu made here from
# the wheels in $EMPO2_WHEELS (default bench/wheels, git-ignored; docs/SCALING.md says how to fill
# it with pip download); python3, when it has torch, transformers and peft (vLLM's part then needs
# vllm in it too, or --skip-vllm). Nothing is fetched from the network.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ARGS=()
DRY=0
SKIP_VLLM=0
SKIP_MEMORY=0
OUT=""
PREV=""
for a in "$@"; do
  case "$a" in
    --dry) DRY=1 ;;
    --skip-vllm) SKIP_VLLM=1 ;;
    --skip-memory) SKIP_MEMORY=1 ;;
  esac
  [ "$PREV" = --out ] && OUT="$a"
  PREV="$a"
  # gpu_check.py takes the rest; the memory step is this script's.
  [ "$a" = --skip-memory ] || ARGS+=("$a")
done

fail() {
  echo "gpu-check: $*" >&2
  exit 2
}

has() { "$1" -c "import $2" >/dev/null 2>&1; }

if [ "$DRY" = 1 ]; then
  PY="${EMPO2_PYTHON:-$ROOT/.venv/bin/python}"
  [ -x "$PY" ] || fail "no Python at $PY: run 'npm run setup:test'"
  [ "$SKIP_VLLM" = 1 ] || command -v node >/dev/null || fail "--dry serves through empo2 serve, which needs node"
  export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
  exec timeout 600 "$PY" "$ROOT/bench/gpu_check.py" "${ARGS[@]}"
fi

WHEELS="${EMPO2_WHEELS:-$ROOT/bench/wheels}"
VENV="$ROOT/.venv-gpu"
PY="${EMPO2_GPU_PYTHON:-}"
if [ -z "$PY" ] && [ -x "$VENV/bin/python" ]; then PY="$VENV/bin/python"; fi
if [ -z "$PY" ] && compgen -G "$WHEELS/vllm-*.whl" >/dev/null; then
  echo "gpu-check: installing bench/requirements-gpu.txt from $WHEELS into $VENV (no network)" >&2
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --no-index --find-links "$WHEELS" -r "$ROOT/bench/requirements-gpu.txt" ||
    fail "the wheels in $WHEELS do not install (a package or a version is missing: prepare them again as docs/SCALING.md says)"
  PY="$VENV/bin/python"
fi
if [ -z "$PY" ]; then PY=python3; fi
command -v "$PY" >/dev/null || fail "no Python ($PY)"
has "$PY" "torch, transformers, peft" || fail "$PY lacks torch, transformers or peft: set EMPO2_GPU_PYTHON, or put wheels in $WHEELS (docs/SCALING.md)"
if [ "$SKIP_VLLM" = 0 ] && ! has "$PY" vllm; then
  fail "$PY has no vllm and $WHEELS holds no vllm wheel. Prepare the wheels on a machine with network (docs/SCALING.md):
  python3.12 -m pip download -d bench/wheels -r bench/requirements-gpu.txt
then copy bench/wheels to this machine; or run with --skip-vllm to time the worker and generate alone"
fi
"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" || fail "$PY's torch sees no GPU (--dry runs the CPU check)"
if [ "$SKIP_VLLM" = 0 ] && [ "$SKIP_MEMORY" = 0 ]; then
  # The memory step's own needs, refused before the GPU time is spent rather than after it.
  command -v node >/dev/null || fail "the memory step runs the trainer, which needs node (--skip-memory leaves it out)"
  [ -x "$ROOT/node_modules/.bin/tsx" ] || fail "the memory step needs this checkout's node_modules: run npm ci (or --skip-memory)"
  [ -f "$ROOT/models/smollm2-135m-instruct/config.json" ] ||
    fail "the memory step needs models/smollm2-135m-instruct (npm run setup; its config.json and tokenizer files are enough) or --skip-memory"
fi
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
if [ "$SKIP_VLLM" = 1 ] || [ "$SKIP_MEMORY" = 1 ]; then
  exec timeout 480 "$PY" "$ROOT/bench/gpu_check.py" "${ARGS[@]}"
fi
timeout 480 "$PY" "$ROOT/bench/gpu_check.py" "${ARGS[@]}"
EMPO2_GPU_PYTHON="$PY" exec timeout 540 bash "$ROOT/bench/memory-iteration-gpu.sh" ${OUT:+--out "$OUT"}
