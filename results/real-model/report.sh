#!/usr/bin/env bash
# A study's report from what the runs left (PROTOCOL.md, "Analysis"); run from the repository root.
#   bash results/real-model/report.sh                                   # #9: GRPO against EMPO²
#   DEST=results/real-model-gigpo bash results/real-model/report.sh grpo gigpo empo2
# RUNS: the run folders (default: the committed archive, results/real-model/runs). The first label is
# the reference of the paired differences. Writes into $DEST: compare's report (results.md, results.csv,
# runs.csv, curves.csv, the learning-curve plot) and per-iteration.md; for #9 also adaptation.md (once
# adaptations have finished) and, when RUNS holds the EMPO² checkpoints with their memories, tips.md.
set -euo pipefail
here=results/real-model
RUNS=${RUNS:-$here/runs}
DEST=${DEST:-$here}
labels=("$@")
[ ${#labels[@]} -gt 0 ] || labels=(grpo empo2)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# compare writes its report into the folder it reads, and takes the order of the labels from its
# compare.json: a folder of links to these labels only, listed in this order.
mkdir -p "$out/runs"
configs=()
for l in "${labels[@]}"; do
  ln -s "$(cd "$RUNS/$l" && pwd)" "$out/runs/$l"
  seeds=$(ls "$RUNS/$l" | sed -n 's/^seed\([0-9]*\)$/\1/p' | sort -n | paste -sd, -)
  configs+=("{\"label\":\"$l\",\"config\":\"configs/real-$l.yaml\",\"set\":[\"env.max_instances=34\"],\"seeds\":[$seeds]}")
done
(IFS=,; echo "{\"configs\":[${configs[*]}]}") > "$out/runs/compare.json"
npx empo2 compare --report-only --out "$out/runs"
mkdir -p "$DEST"
for f in results.md results.csv runs.csv curves.csv learning_curve.png learning_curve.svg; do
  # Text files name the runs' folder, not this temporary one.
  [ -f "$out/runs/$f" ] || continue
  case $f in *.png) cp "$out/runs/$f" "$DEST/$f" ;; *) sed "s#$out/runs#$RUNS#g" "$out/runs/$f" > "$DEST/$f" ;; esac
done
npx tsx $here/per-iteration.ts "$out/runs" | sed "s#$out/runs#$RUNS#" > "$DEST/per-iteration.md"
if [ "$DEST" = "$here" ]; then
  adapt=$RUNS/adapt
  [ -d "$adapt" ] || adapt=runs/real-model-adapt
  [ -d "$adapt" ] && { npx tsx $here/adaptation.ts "$adapt" > $here/adaptation.md || echo "no adaptation has finished yet"; }
  if ls "$RUNS"/empo2/seed*/checkpoints/iter-*/memory.json >/dev/null 2>&1; then
    npx tsx $here/tips.ts "$RUNS/empo2" > $here/tips.md
  fi
fi
echo "wrote $DEST/results.md and the rest; the verdict goes into the study's note by hand"
