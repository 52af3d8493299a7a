#!/usr/bin/env bash
# The Retrospex study (PROTOCOL.md), one job after another, from the repository root. Each job is one
# empo2 command; a job whose output file exists is skipped, so the script can be stopped (Ctrl-C, a
# session's end) and started again: it goes on with the first job not done. An evaluation stopped part-way
# goes on from its last finished lockstep chunk (env.max_instances episodes, kept in <job>.json.partial;
# every eval runs with --resume, docs/EVALUATING.md): a 3-hour session loses at most the chunk it was in.
# A partial file left with other settings (seed, variations, instances, model, critic) stops the job,
# naming the difference; delete it to start that job again.
#
#   per seed k (0, 1, 2), built-in power/clue/unlock, then the same on ScienceWorld find-living-thing:
#     log        the frozen model on the train split at temperature 1, every episode recorded
#     critic     empo2 critic train on those episodes (500 passes)
#     no-critic  empo2 eval of the frozen model (test split, 102 episodes)
#     retrospex  the same with --method retrospex --critic
#     proposals  the same with λ ≡ 1 (--decay 1 --floor 1): the proposals without the critic
#
#   bash results/retrospex-smollm2/study.sh                 # all of it (about 14-20 h of one core, README.md)
#   bash results/retrospex-smollm2/study.sh builtin         # the built-in arms only (about 10-14 h)
#   bash results/retrospex-smollm2/study.sh report          # results.md from what is done so far
#   DRY=1 bash results/retrospex-smollm2/study.sh builtin   # 2 variations per family, 20 passes, seed 0, into /tmp
#   SEEDS=2 JOBS="log critic no-critic" bash results/retrospex-smollm2/study.sh builtin   # only those jobs (beside a
#                                                           # Retrospex job: two of those do not fit in 24 GB together)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
if [ "${DRY:-0}" = 1 ]; then
  OUT=${OUT:-/tmp/retrospex-smollm2-dry} SEEDS=${SEEDS:-0} LOG_VARIATIONS=2 SW_LOG_VARIATIONS=2 EVAL_VARIATIONS=2 EPOCHS=20
  DEST=${DEST:-$OUT}
fi
OUT=${OUT:-results/retrospex-smollm2/runs}
SEEDS=${SEEDS:-0 1 2}
LOG_VARIATIONS=${LOG_VARIATIONS:-43}
SW_LOG_VARIATIONS=${SW_LOG_VARIATIONS:-128}
EVAL_VARIATIONS=${EVAL_VARIATIONS:-34}
EPOCHS=${EPOCHS:-500}
JOBS=${JOBS:-log critic no-critic retrospex proposals}
THREADS=${THREADS:-1}
MODEL=models/smollm2-135m-instruct
export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS

say() { echo "[retrospex-study $(date -u +%FT%TZ)] $*"; }

# run <done-file> <log-file> <command...>: the command, unless <done-file> exists; its output in <log-file>.
# A failed attempt is tried again (ATTEMPTS in all, WAIT seconds apart): on a shared machine a starved
# worker can miss its start or call timeout; a real fault fails every attempt and stops the script.
run() {
  local done=$1 log=$2
  shift 2
  if [ -f "$done" ]; then
    say "done already: $done"
    return 0
  fi
  mkdir -p "$(dirname "$done")" "$(dirname "$log")"
  local attempt t0
  for ((attempt = 1; attempt <= ${ATTEMPTS:-3}; attempt++)); do
    say "start (attempt $attempt): $* (output in $log)"
    t0=$SECONDS
    if "$@" >"$log" 2>&1; then
      say "finished in $((SECONDS - t0)) s: $done"
      return 0
    fi
    say "FAILED after $((SECONDS - t0)) s (attempt $attempt): $* (see $log)"
    tail -5 "$log"
    cp "$log" "$log.failed-$attempt"
    [ "$attempt" -lt "${ATTEMPTS:-3}" ] && sleep "${WAIT:-300}"
  done
  exit 1
}

# arm <set> <config> <logged variations per task> <instances> <instances for Retrospex> <seed> <jobs...>: at most
# <instances> episodes in lockstep (KV-cache memory, JVMs); Retrospex's episodes run 4 rows each, so fewer.
arm() {
  local set=$1 cfg=$2 logged=$3 plain=$4 instances=$5 k=$6
  shift 6
  local d=$OUT/$set/seed$k
  # The PyTorch worker named, not left to model.engine auto: auto probes the venv with a 2-minute timeout,
  # and on a machine busy enough to starve the probe it silently plays on the tfjs engine instead.
  # --resume: a stopped evaluation goes on from the chunks it finished (none yet: it starts at the first).
  local base=(node bin/empo2.js eval "$MODEL" -c "$cfg" --set "seed=$k" --set model.engine=torch --resume)
  local job
  for job in "$@"; do
    [[ " $JOBS " == *" $job "* ]] || continue
    case $job in
      log)
        mkdir -p "$d/logged/trajectories"
        run "$d/logged/logged.json" "$d/logged/logged.log" "${base[@]}" --set env.eval_split=train --set "env.eval_variations=$logged" \
          --set "env.max_instances=$plain" \
          --set rollout.eval_temperature=1.0 --json "$d/logged/logged.json" --trajectories "$d/logged/trajectories/logged.jsonl"
        ;;
      critic)
        run "$d/critic.json" "$d/critic.log" node bin/empo2.js critic train "$d/logged" --seed "$k" --epochs "$EPOCHS" --out "$d/critic.json"
        ;;
      no-critic)
        mkdir -p "$d/trajectories"
        run "$d/no-critic.json" "$d/no-critic.log" "${base[@]}" --set "env.eval_variations=$EVAL_VARIATIONS" --set "env.max_instances=$plain" \
          --json "$d/no-critic.json" --trajectories "$d/trajectories/no-critic.jsonl"
        ;;
      retrospex | proposals)
        mkdir -p "$d/trajectories"
        local extra=()
        [ "$job" = proposals ] && extra=(--decay 1 --floor 1)
        run "$d/$job.json" "$d/$job.log" "${base[@]}" --set "env.eval_variations=$EVAL_VARIATIONS" --set "env.max_instances=$instances" \
          --method retrospex --critic "$d/critic.json" "${extra[@]}" --json "$d/$job.json" --trajectories "$d/trajectories/$job.jsonl"
        ;;
    esac
  done
}

builtin() {
  local k
  # Retrospex and proposals: 9 episodes in lockstep (4 chunks per family of 34), not 17: with 17 the worker's KV caches
  # (17 x 4 proposal rows) passed 16 GB and the kernel killed it on this 24 GB machine (RUNS.md, session 32).
  for k in $SEEDS; do arm builtin configs/real-grpo.yaml "$LOG_VARIATIONS" 34 9 "$k" log critic no-critic retrospex; done
  for k in $SEEDS; do arm builtin configs/real-grpo.yaml "$LOG_VARIATIONS" 34 9 "$k" proposals; done
}

scienceworld() {
  local k
  for k in $SEEDS; do
    arm scienceworld results/retrospex-smollm2/scienceworld.yaml "$SW_LOG_VARIATIONS" 5 5 "$k" log critic no-critic retrospex proposals
  done
}

report() {
  mkdir -p "${DEST:-results/retrospex-smollm2}"
  npx tsx results/retrospex-smollm2/report.ts --out "$OUT" --dest "${DEST:-results/retrospex-smollm2}"
}

case ${1:-all} in
  all) builtin && scienceworld && report ;;
  builtin) builtin && report ;;
  scienceworld) scienceworld && report ;;
  report) report ;;
  *)
    echo "usage: study.sh [all|builtin|scienceworld|report]" >&2
    exit 2
    ;;
esac
