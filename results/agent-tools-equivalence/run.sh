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
  if [ -f "$dir/checkpoints/latest.json" ]; then
    resume=(--resume)
  elif [ -d "$dir" ]; then
    # Stopped before its first checkpoint: nothing to resume, so it starts again (the old folder kept aside).
    mv "$dir" "$dir.stopped-$(date -u +%Y%m%dT%H%M%SZ)"
  fi
  echo "seed $s: $(date -u +%FT%TZ) start ${resume[*]:-fresh}"
  # A checkpoint every iteration (an iteration takes ~10 minutes here); where checkpoints fall changes nothing trained.
  OMP_NUM_THREADS=1 npx tsx examples/agent-tools/train.ts "$dir" --set seed=$s --set train.checkpoint_every=1 "${resume[@]}" >>"$OUT/seed$s.log" 2>&1
  echo "seed $s: $(date -u +%FT%TZ) exit $?"
done
