#!/usr/bin/env bash
# The real-model study's third attempt (RUNS.md, "Third attempt"): two slots, one per core, work down one
# list of jobs; each job is what `empo2 compare` (or bench/adapt-vs-no-tips.ts) would run for it, and
# each can be stopped and run again: it skips what is done and resumes what is not.
#
#   train:<label>:<seed>  empo2 train of configs/real-<label>.yaml into $OUT/<label>/seed<seed> (compare's
#                         child command), then the evaluation of its iter-000006 checkpoint on 34
#                         variations per task (compare --equal-steps-eval's child command), so that the
#                         kept checkpoints at iterations 4, 6 and 8 all have an evaluation of 102 episodes
#                         and any equal-steps point between them needs nothing more, even if the machine is
#                         lost before the last run ends
#   adapt:<label>:<seed>  memory-only adaptation of that run's final checkpoint (the protocol's command)
#
# Work already in $ARCHIVE is not redone on a new machine (runs/ lost, RUNS.md): a training finished there is
# done, and so is an adaptation with its adapt-vs-no-tips.md. An adaptation still to make whose run finished
# only in the archive needs the final weights again: the run is trained again into its own folder (runs
# repeat bit for bit on these machines), its small files archived under $ARCHIVE/retrain/, and the
# adaptation waits until the retrained run's scores and losses equal the archived run's.
#
# After every job the small files of every run (no weights) are copied into $ARCHIVE, which is committed:
# `compare --report-only --out $ARCHIVE` reads them as it reads the run folders.
#
#   STUDY=/work/wt/study bash results/real-model/study.sh     # from anywhere; stop with stop.sh
#   bash results/real-model/study.sh archive                  # only the copy into $ARCHIVE
#   bash results/real-model/study.sh slot c                   # one more slot beside the running ones
#   THREADS=2 bash results/real-model/study.sh slot a         # one slot alone, both cores to it
set -uo pipefail
STUDY=${STUDY:-/work/wt/study}
OUT=${OUT:-/work/main/runs/real-model}
ADAPT_OUT=${ADAPT_OUT:-/work/main/runs/real-model-adapt}
ARCHIVE=${ARCHIVE:-/work/main/results/real-model/runs}
JOBS=(train:grpo:0 train:empo2:0 train:grpo:1 train:empo2:1 train:grpo:2 train:empo2:2
  adapt:grpo:0 adapt:empo2:0 adapt:grpo:1 adapt:empo2:1 adapt:grpo:2 adapt:empo2:2
  train:gigpo:0 train:gigpo:1 train:gigpo:2)
CLAIMS=$OUT/.claims
THREADS=${THREADS:-1}
export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS
cd "$STUDY" || exit 1

say() { echo "[study $(date -u +%FT%TZ) slot $SLOT] $*"; }

finished() { [ -f "$OUT/$1/seed$2/eval.md" ]; }
archived() { [ -f "$ARCHIVE/$1/seed$2/eval.md" ]; }

# The small files under $1 (metrics, evaluations, configs, reports; no weights, memories,
# trajectories or iterations saved part-way) into $2, and of each checkpoint its trainer_state.json and the latest pointer: enough
# for compare's report.
copy_small() {
  [ -d "$1" ] || return 0
  (cd "$1" && find . -name .claims -prune -o -name trajectories -prune -o -name 'partial-iter-*' -prune -o -type f \( -path '*/checkpoints/*' \( -name trainer_state.json -o -name latest.json \) -o ! -path '*/checkpoints/*' \( -name '*.jsonl' -o -name '*.json' -o -name '*.yaml' -o -name '*.md' -o -name '*.csv' \) \) ! -name memory.json -print) |
    while read -r f; do mkdir -p "$2/$(dirname "$f")" && cp -p "$1/$f" "$2/$f"; done
}
archive() {
  local run
  for run in "$OUT"/*/seed*; do
    [ -d "$run" ] || continue
    if [ -f "$run/.retrain" ]; then copy_small "$run" "$ARCHIVE/retrain/${run#"$OUT"/}"; else copy_small "$run" "$ARCHIVE/${run#"$OUT"/}"; fi
  done
  copy_small "$ADAPT_OUT" "$ARCHIVE/adapt"
}

# Whether a retrained run ($1) repeats the archived one ($2), line by line of metrics.jsonl (wall times aside):
# the same environment steps, scores, success rates and tips, so the same episodes were sampled; loss and
# grad norm within 1% + 5e-4. Not bit for bit: PyTorch at two threads sums in another order than the
# archived runs' one thread. Measured on EMPO² seed 2, iterations 1-4 again at two threads (0f1f796 against
# 4982578): every episode the same, loss off by 0.15-0.52%, grad norm by 0.10-0.39%.
same_run() {
  node -e '
    const fs = require("fs");
    const exact = ["type", "iteration", "env_steps", "train_env_steps", "mean_score", "success_rate", "tips_added", "memory_size"];
    const close = (a, b) => a === b || (typeof a === "number" && typeof b === "number" && Math.abs(a - b) <= 0.01 * Math.max(Math.abs(a), Math.abs(b)) + 5e-4);
    const read = (f) => fs.readFileSync(f, "utf8").trim().split("\n").map((l) => JSON.parse(l));
    const [a, b] = process.argv.slice(1).map((d) => read(d + "/metrics.jsonl"));
    let worst = 0;
    for (let i = 0; i < Math.max(a.length, b.length); i++) {
      const x = a[i] ?? {}, y = b[i] ?? {};
      const off = exact.filter((k) => x[k] !== y[k]).concat(["loss", "grad_norm"].filter((k) => !close(x[k], y[k])));
      if (off.length) { console.error(`metrics line ${i + 1}: ${off.join(", ")} differ: ${JSON.stringify(x)} against ${JSON.stringify(y)}`); process.exit(1); }
      for (const k of ["loss", "grad_norm"]) if (typeof x[k] === "number" && x[k] !== y[k]) worst = Math.max(worst, Math.abs(x[k] - y[k]) / Math.max(Math.abs(x[k]), Math.abs(y[k])));
    }
    console.log(`same episodes in all ${a.length} lines; loss and grad norm at most ${(100 * worst).toFixed(2)}% apart`);
  ' "$1" "$2"
}

# A retrained run ($1 seed $2) that is not the archived one ($3: how they differ). Decided in RUNS.md
# (session 23) before such an adaptation was seen: trials made on the lost weights move to $ADAPT_OUT-lost
# and $ARCHIVE/adapt-lost as a record only, and the adaptation starts afresh on the retrained checkpoint,
# its folder saying so (retrained.md, shown by adaptation.ts) with the retrained run's held-out scores
# beside the archived run's.
retrained_apart() {
  local name="$1-seed$2" f dest
  for f in "$ADAPT_OUT/$name" "$ADAPT_OUT/$name.log" "$ARCHIVE/adapt/$name"; do
    [ -e "$f" ] || continue
    dest="${f%/*}-lost/${f##*/}"
    mkdir -p "${dest%/*}" && rm -rf "$dest" && mv "$f" "$dest" || return 1
  done
  mkdir -p "$ADAPT_OUT/$name" && node -e '
    const fs = require("fs");
    const [run, archived, why, out] = process.argv.slice(1);
    const evals = (d) => fs.readFileSync(d + "/metrics.jsonl", "utf8").trim().split("\n").map((l) => JSON.parse(l))
      .filter((m) => m.type === "eval").map((m) => `${m.mean_score.toFixed(2)} at ${m.train_env_steps} steps`).join(", ");
    fs.writeFileSync(out, [
      "Retrained checkpoint: the archived run'"'"'s final weights were lost with a machine; the run trained again (same config, seed and task draws) is not the archived one, so this adaptation is of the retrained run'"'"'s final checkpoint, with a fresh memory. Trials made on the lost weights are kept as a record only (`adapt-lost/`).",
      "",
      `How the runs differ (the first metrics line apart): ${why.split("\n")[0].split(": {")[0]}.`,
      "",
      `Held-out evaluations (mean score of 102 episodes): archived run ${evals(archived)}; retrained run ${evals(run)}.`,
      "",
    ].join("\n"));
  ' "$OUT/$1/seed$2" "$ARCHIVE/$1/seed$2" "$3" "$ADAPT_OUT/$name/retrained.md"
}

train() { # label seed [retrain]
  local dir="$OUT/$1/seed$2" resume=()
  if [ -z "${3:-}" ] && archived "$1" "$2"; then say "train $1 seed $2: finished in the archive"; return 0; fi
  if ! finished "$1" "$2"; then
    # A checkpoint, or an iteration saved part-way before the first one (train.partial_save_minutes).
    compgen -G "$dir/checkpoints/latest.json" >/dev/null || compgen -G "$dir/checkpoints/partial-iter-*" >/dev/null && resume=(--resume)
    mkdir -p "$dir" && { [ -z "${3:-}" ] || touch "$dir/.retrain"; }
    say "train $1 seed $2 ${resume[*]} ${3:-}"
    node bin/empo2.js train --config "configs/real-$1.yaml" --set env.max_instances=34 --set "seed=$2" --set "run_dir=$dir" "${resume[@]}" >>"$dir/train.log" 2>&1 || return $?
  fi
  local ck="$dir/checkpoints/iter-000006"
  if [ -z "${3:-}" ] && [ -d "$ck" ] && [ ! -f "$dir/checkpoint-evals/iter-000006.json" ]; then
    mkdir -p "$dir/checkpoint-evals"
    say "evaluate $1 seed $2 iter-000006"
    node bin/empo2.js eval "$ck" --config "$dir/config.yaml" --set env.eval_variations=34 --json "$dir/checkpoint-evals/iter-000006.json" >>"$dir/checkpoint-evals.log" 2>&1 || return $?
  fi
}

adapt() { # label seed
  if [ -f "$ARCHIVE/adapt/$1-seed$2/adapt-vs-no-tips.md" ]; then say "adapt $1 seed $2: finished in the archive"; return 0; fi
  if [ -f "$OUT/$1/seed$2/.retrain" ] || { ! finished "$1" "$2" && archived "$1" "$2"; }; then
    train "$1" "$2" retrain || return $?
    local why
    if [ ! -f "$ADAPT_OUT/$1-seed$2/retrained.md" ] && ! why=$(same_run "$OUT/$1/seed$2" "$ARCHIVE/$1/seed$2" 2>&1); then
      say "adapt $1 seed $2: the retrained run differs from the archived one; adapted as a checkpoint of its own"
      retrained_apart "$1" "$2" "$why" || return 1
    fi
  fi
  until finished "$1" "$2"; do
    [ -f "$CLAIMS/train:$1:$2/ended" ] && { say "adapt $1 seed $2: its training ended unfinished"; return 1; }
    sleep 300
  done
  say "adapt $1 seed $2"
  npx tsx bench/adapt-vs-no-tips.ts --checkpoint "$OUT/$1/seed$2" -c configs/real-empo2.yaml --set env.max_instances=34 \
    --tasks fetch --seeds 0 --trials 5 --variations 10 --jobs 1 --out "$ADAPT_OUT/$1-seed$2" >>"$ADAPT_OUT/$1-seed$2.log" 2>&1
}

# A job is claimed by one slot. A claim neither ended nor held by a live slot (the session that ran it
# ended, the machine was kept) is taken over, so a restarted slot resumes that job rather than passing it.
claim() {
  if mkdir "$CLAIMS/$1" 2>/dev/null; then echo "$BASHPID" >"$CLAIMS/$1/slot.pid"; return 0; fi
  [ -f "$CLAIMS/$1/ended" ] && return 1
  local pid; pid=$(cat "$CLAIMS/$1/slot.pid" 2>/dev/null)
  if [ -n "$pid" ] && ps -p "$pid" -o args= 2>/dev/null | grep -q study.sh; then return 1; fi
  echo "$BASHPID" >"$CLAIMS/$1/slot.pid"
  say "$1: claimed by a slot that is gone (${pid:-no pid kept}); taking it over"
}

# The next job this slot claims, into $job (no subshell: a claim records this slot's pid): first an adaptation
# whose training job ended with its run finished on this machine (the final weights are here; on a kept
# machine that saves retraining a run the archive holds), then the first job of the list.
next_job() {
  local j kind label seed
  for j in "${JOBS[@]}"; do
    IFS=: read -r kind label seed <<<"$j"
    [ "$kind" = adapt ] && [ -f "$CLAIMS/train:$label:$seed/ended" ] && finished "$label" "$seed" &&
      claim "$j" && { job=$j; return 0; }
  done
  for j in "${JOBS[@]}"; do claim "$j" && { job=$j; return 0; }; done
  return 1
}

slot() {
  local job kind label seed code
  while next_job; do
    IFS=: read -r kind label seed <<<"$job"
    $kind "$label" "$seed"
    code=$?
    # Stopped on request (stop.sh: exit 130): the claim stays open, so the next slot resumes the job.
    if [ $code -eq 130 ]; then archive; say "$job stopped on request; study.sh again resumes it"; return $code; fi
    touch "$CLAIMS/$job/ended"
    archive
    if [ $code -ne 0 ]; then say "$job stopped (exit $code); this slot stops"; return $code; fi
    say "$job done"
  done
}

if [ "${1:-}" = archive ]; then archive; exit; fi   # the copy alone, e.g. before a session ends
# One more slot beside running ones (after a slot stopped): `study.sh slot c`; remove the claim of a job
# that ended unfinished to have it redone ($CLAIMS/<job>).
if [ "${1:-}" = slot ]; then SLOT=${2:-c} slot; exit; fi
rm -rf "$CLAIMS" && mkdir -p "$CLAIMS" "$ADAPT_OUT"
SLOT=a slot &
sleep 5
SLOT=b slot &
wait
