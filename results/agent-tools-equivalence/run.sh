#!/usr/bin/env bash
# Runs (or resumes) the study's seeds one after another from the frozen worktree (PROTOCOL.md):
#   results/agent-tools-equivalence/run.sh "0 1 2"   [WT=/work/wt/eqtools OUT=/work/main/runs/agent-tools-eq]
# A seed whose metrics.jsonl holds the evaluation after iteration 40 is skipped; one with a checkpoint resumes.
set -euo pipefail
WT=${WT:-/work/wt/eqtools}
OUT=${OUT:-/work/main/runs/agent-tools-eq}
mkdir -p "$OUT"
cd "$WT"
for s in ${1:-0 1 2}; do
  dir="$OUT/seed$s"
  if [ -f "$dir/metrics.jsonl" ] && grep -q '"type":"eval","iteration":40' "$dir/metrics.jsonl"; then
    echo "seed $s: finished"; continue
  fi
  resume=()
  [ -f "$dir/checkpoints/latest.json" ] && resume=(--resume)
  echo "seed $s: $(date -u +%FT%TZ) start ${resume[*]:-fresh}"
  OMP_NUM_THREADS=1 npx tsx examples/agent-tools/train.ts "$dir" --set seed=$s "${resume[@]}" >>"$OUT/seed$s.log" 2>&1
  echo "seed $s: $(date -u +%FT%TZ) exit $?"
done
