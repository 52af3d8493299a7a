#!/usr/bin/env bash
# Issue #89's EMPO² arm (PROTOCOL.md): EMPO² with the stand-in strong writer's tips, seeds 0, 1, 2. The GRPO
# arm is the real-model study's, reused from results/real-model/runs/grpo. Each job is what the real-model
# study ran for a run (results/real-model/study.sh, the child commands of `empo2 compare`):
#
#   seed <S>   empo2 train of configs/variants/real-empo2-strong-writer.yaml into $OUT/empo2/seed<S>
#              (--resume when a checkpoint or an iteration saved part-way is there), then the evaluation of
#              its iter-000006 checkpoint on 34 test variations per task (compare --equal-steps-eval's child
#              command), so that its checkpoints at iterations 4, 6 and 8 all have an evaluation of 102
#              episodes, as the GRPO runs' have; then tip-following.json (report.ts summarise: per iteration,
#              the memory-rollout steps and those that followed a tip, from the run's trajectories)
#
# Options that do not change what is trained (src/config/schema.ts RESUMABLE_OPTIONS) are set so that a stop
# loses little and the measures can be made: a checkpoint after every iteration, all eight kept (any
# equal-steps point can be evaluated later), and every training episode recorded (the tip-following share
# over all memory-rollout steps). An iteration running longer than 10 minutes is also saved part-way
# (train.partial_save_minutes, the config's default).
#
# The stand-in writer (oracle-writer.ts) is started on 127.0.0.1:$PORT (the config's base_url) unless one
# already answers there as `oracle-writer`; a writer this script started is started again if it exits while
# jobs run, and stopped when the script ends. One run.sh at a time ($OUT/.run.lock); $SLOTS jobs side by side.
# After every job the small files of every run (metrics, evaluations, configs, logs' summaries, the writer's
# answers in external-cache.jsonl, the final memory.json; no weights, no trajectories) are copied into
# $ARCHIVE, which is committed: report.ts reads them as it reads the run folders. Finished work is skipped,
# also when only the archive holds it (a lost machine).
#
# Stop: SIGINT or SIGTERM to this script (`run.sh stop`): the running trainers finish up to their next save
# (the end of the rollouts, an optimiser step, the iteration) and stop, an evaluation stops (it is made
# again), and the next run.sh resumes them; a second signal (`run.sh stop now`) stops them at once (the last
# save stays).
#
#   git -C /work/main worktree add --detach /work/wt/sw-frozen <commit>      # the frozen code, once
#   for l in node_modules .venv models; do ln -s /work/main/$l /work/wt/sw-frozen/$l; done
#   STUDY=/work/wt/sw-frozen nice -n 10 bash results/strong-writer/run.sh     # from anywhere; resumes
#   SLOTS=2 ...                       # two seeds side by side (one thread each)
#   SEEDS="2" ...                     # only these seeds
#   bash results/strong-writer/run.sh archive     # only the copy into $ARCHIVE
#   bash results/strong-writer/run.sh stop [now]  # ask a running run.sh to stop
#
# For a smoke check: EXTRA_SETS="--set train.iterations=2 ..." EVAL_CHECKPOINT=iter-000001 EVAL_VARIATIONS=1
# with OUT and ARCHIVE in a scratch folder.
set -uo pipefail
STUDY=${STUDY:-/work/wt/sw-frozen}
OUT=${OUT:-/work/main/runs/strong-writer}
ARCHIVE=${ARCHIVE:-/work/main/results/strong-writer/runs}
CONFIG=${CONFIG:-configs/variants/real-empo2-strong-writer.yaml}
PORT=${PORT:-8189}
TASKS=${TASKS:-power,clue,unlock}
read -r -a SEED_LIST <<<"${SEEDS:-0 1 2}"
SLOTS=${SLOTS:-1}
THREADS=${THREADS:-1}
EVAL_CHECKPOINT=${EVAL_CHECKPOINT:-iter-000006}
EVAL_VARIATIONS=${EVAL_VARIATIONS:-34}
EMPO2=${EMPO2:-bin/empo2.js} # the CLI (test/strong-writer-run.test.ts puts a stub trainer here)
read -r -a EXTRA <<<"${EXTRA_SETS:-}"
# Not what is trained: when to save and keep, what is recorded (RESUMABLE_OPTIONS).
KEEP=(--set train.checkpoint_every=1 --set train.keep_checkpoints=8 --set trajectories.train_per_iteration=16 --set trajectories.max_megabytes=2048)
export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS
RUN=$OUT/empo2
CLAIMS=$OUT/.claims
STOPPING=$OUT/.stopping
SLOT=main

say() { echo "[strong-writer $(date -u +%FT%TZ) $SLOT] $*"; }

mkdir -p "$OUT" || exit 1
OUT=$(cd "$OUT" && pwd)
RUN=$OUT/empo2
CLAIMS=$OUT/.claims
STOPPING=$OUT/.stopping

# Whether run folder $1 is done: its final evaluation, the checkpoint evaluation and the tip summary.
done_in() { [ -f "$1/eval.md" ] && [ -f "$1/checkpoint-evals/$EVAL_CHECKPOINT.json" ] && [ -f "$1/tip-following.json" ]; }

# The small files under $1 into $2 (as results/real-model/study.sh copies them), and the final memory.json.
copy_small() {
  [ -d "$1" ] || return 0
  (cd "$1" && find . -name trajectories -prune -o -name 'partial-iter-*' -prune -o -type f \( -path '*/checkpoints/*' \( -name trainer_state.json -o -name latest.json \) -o ! -path '*/checkpoints/*' \( -name '*.jsonl' -o -name '*.json' -o -name '*.yaml' -o -name '*.md' -o -name '*.csv' \) \) ! -name memory.json ! -name '*.tmp*' -print) |
    while read -r f; do mkdir -p "$2/$(dirname "$f")" && cp -p "$1/$f" "$2/$f"; done
  if [ -f "$1/eval.md" ] && [ -f "$1/checkpoints/latest.json" ]; then
    local last
    last=$(node -e 'console.log(JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")).checkpoint ?? "")' "$1/checkpoints/latest.json" 2>/dev/null)
    last=${last##*/}
    [ -n "$last" ] && [ -f "$1/checkpoints/$last/memory.json" ] && mkdir -p "$2/checkpoints/$last" && cp -p "$1/checkpoints/$last/memory.json" "$2/checkpoints/$last/memory.json"
  fi
  return 0
}
archive() {
  local run
  for run in "$RUN"/seed*; do [ -d "$run" ] && copy_small "$run" "$ARCHIVE/empo2/${run##*/}"; done
  return 0
}

# --- children: each in a session of its own (a Ctrl-C at the terminal reaches only this script, which passes
# one SIGINT on), its pid in $OUT/.children/, fd 9 (the lock) closed.
run_child() { # log command...
  local log=$1 pid code
  shift
  echo "# run.sh $(date -u +%FT%TZ): $*" >>"$log"
  setsid "$@" >>"$log" 2>&1 9>&- </dev/null &
  pid=$!
  echo "$pid" >"$OUT/.children/$pid"
  [ -e "$STOPPING" ] && kill -INT "$pid" 2>/dev/null # asked to stop while it started
  wait_for "$pid"
  code=$?
  rm -f "$OUT/.children/$pid"
  return $code
}
# The exit status of child $1; a signal to this shell interrupts wait (status > 128) while the child goes on.
wait_for() {
  local code again
  while :; do
    wait "$1"
    code=$?
    kill -0 "$1" 2>/dev/null || break
  done
  # If a signal interrupted the last wait just before the child ended, its status is still to be had.
  wait "$1" 2>/dev/null
  again=$?
  [ $again -ne 127 ] && code=$again
  return $code
}
# shellcheck disable=SC2329 # called by on_signal, a trap
signal_children() {
  local f
  for f in "$OUT"/.children/*; do [ -f "$f" ] && kill -INT "$(cat "$f")" 2>/dev/null; done
  return 0
}

# --- the stand-in writer
writer_answers() { curl -s -m 5 "http://127.0.0.1:$PORT/v1/models" 2>/dev/null | grep -q '"oracle-writer"'; }
start_writer() {
  setsid node --import tsx results/strong-writer/oracle-writer.ts --port "$PORT" --tasks "$TASKS" >>"$OUT/writer.log" 2>&1 9>&- </dev/null &
  echo $! >"$OUT/.writer.pid"
  local i
  for i in $(seq 1 120); do
    writer_answers && { say "stand-in writer (pid $(cat "$OUT/.writer.pid")) answers on port $PORT"; return 0; }
    kill -0 "$(cat "$OUT/.writer.pid")" 2>/dev/null || break
    sleep 0.5
  done
  say "the stand-in writer did not start (see $OUT/writer.log)"
  return 1
}
# Ours: started by this script, or by an earlier run.sh that was killed without its clean-up.
own_writer() {
  local pid
  pid=$(cat "$OUT/.writer.pid" 2>/dev/null) || return 1
  ps -p "$pid" -o args= 2>/dev/null | grep -q "oracle-writer.ts --port $PORT"
}
watch_writer() { # while jobs run: a writer of ours that exited is started again (its calls are retried meanwhile)
  trap ':' INT TERM
  while [ ! -e "$OUT/.writer.stop" ]; do
    if ! own_writer && ! writer_answers; then
      say "the stand-in writer is gone; starting it again"
      start_writer
    fi
    sleep 2
  done
}
# shellcheck disable=SC2329 # called by cleanup, a trap
stop_writer() {
  own_writer || return 0
  local pid i
  pid=$(cat "$OUT/.writer.pid")
  kill -INT "$pid" 2>/dev/null
  for i in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
  kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
  rm -f "$OUT/.writer.pid"
  say "stand-in writer (pid $pid) stopped"
}

# --- one seed
seed_job() { # seed
  local s=$1 dir=$RUN/seed$1 resume=() code
  if done_in "$ARCHIVE/empo2/seed$s"; then say "seed $s: finished in the archive"; return 0; fi
  if [ ! -f "$dir/eval.md" ]; then
    if compgen -G "$dir/checkpoints/latest.json" >/dev/null || compgen -G "$dir/checkpoints/partial-iter-*" >/dev/null; then
      resume=(--resume)
    elif [ -d "$ARCHIVE/empo2/seed$s" ]; then
      # Started on a machine that was lost: its weights are gone, so it starts again; the old files are kept apart.
      local lost
      lost=$ARCHIVE/lost/empo2/seed$s-$(date -u +%Y%m%dT%H%M%SZ)
      mkdir -p "${lost%/*}" && mv "$ARCHIVE/empo2/seed$s" "$lost" && say "seed $s: the archive's unfinished run moved to $lost; starting again"
    fi
    mkdir -p "$dir"
    say "train seed $s ${resume[*]}"
    run_child "$dir/train.log" node "$EMPO2" train --config "$CONFIG" --set env.max_instances=34 --set "seed=$s" \
      --set "run_dir=$dir" "${KEEP[@]}" "${EXTRA[@]}" "${resume[@]}"
    code=$?
    [ $code -eq 0 ] || return $code
    [ -f "$dir/eval.md" ] || { say "seed $s: the trainer exited without its final evaluation"; return 1; }
    # shellcheck disable=SC2016 # JavaScript's template, not the shell's
    say "seed $s trained: $(node -e 'const l = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").map(JSON.parse).filter((m) => m.type === "eval").at(-1); console.log(l ? `held out ${l.mean_score.toFixed(1)} at ${l.train_env_steps} steps` : "no evaluation logged")' "$dir/metrics.jsonl" 2>&1)"
  fi
  local ck=$dir/checkpoints/$EVAL_CHECKPOINT json=$dir/checkpoint-evals/$EVAL_CHECKPOINT.json
  if [ ! -f "$json" ]; then
    [ -d "$ck" ] || { say "seed $s: no checkpoint $ck to evaluate"; return 1; }
    mkdir -p "$dir/checkpoint-evals"
    say "evaluate seed $s $EVAL_CHECKPOINT on $EVAL_VARIATIONS variations per task"
    run_child "$dir/checkpoint-evals.log" node "$EMPO2" eval "$ck" --config "$dir/config.yaml" \
      --set "env.eval_variations=$EVAL_VARIATIONS" --json "$json"
    code=$?
    [ $code -eq 0 ] || { rm -f "$json"; return $code; }
  fi
  node --import tsx results/strong-writer/report.ts summarise "$dir" || return 1
}

# A slot: claims seeds in order until none is left or a stop was asked for.
slot() {
  local s code
  for s in "${SEED_LIST[@]}"; do
    [ -e "$STOPPING" ] && return 130
    mkdir "$CLAIMS/seed$s" 2>/dev/null || continue
    seed_job "$s"
    code=$?
    archive
    if [ $code -eq 130 ] || [ -e "$STOPPING" ]; then say "seed $s stopped on request; run.sh again resumes it"; return 130; fi
    if [ $code -ne 0 ]; then say "seed $s stopped (exit $code); this slot stops"; return $code; fi
    say "seed $s done"
  done
  return 0
}

case "${1:-}" in
  archive) archive; exit 0 ;;
  stop)
    pid=$(cat "$OUT/.run.pid" 2>/dev/null)
    if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then echo "no run.sh is running for $OUT"; exit 0; fi
    kill -TERM "$pid"
    [ "${2:-}" = now ] && { sleep 1; kill -TERM "$pid"; }
    exit 0 ;;
  '') ;;
  *) echo "usage: run.sh [archive | stop [now]]" >&2; exit 2 ;;
esac

cd "$STUDY" || exit 1
exec 9>"$OUT/.run.lock"
flock -n 9 || { say "another run.sh holds $OUT/.run.lock"; exit 1; }
echo $$ >"$OUT/.run.pid"
rm -rf "$CLAIMS" "$STOPPING" "$OUT/.writer.stop" && mkdir -p "$CLAIMS" "$OUT/.children" "$RUN" || exit 1
say "study $STUDY at $(git rev-parse --short HEAD 2>/dev/null || echo '?'), out $OUT, archive $ARCHIVE, seeds ${SEED_LIST[*]}, $SLOTS slot(s), $THREADS thread(s)"

SLOT_PIDS=()
WATCH_PID=
# shellcheck disable=SC2329 # a trap
on_signal() {
  if [ -e "$STOPPING" ]; then
    say "second signal: the jobs stop at once"
  else
    touch "$STOPPING"
    say "asked to stop: the running jobs finish up to their next save and stop (a second signal stops them at once)"
  fi
  signal_children
}
# shellcheck disable=SC2329 # a trap
cleanup() {
  local f pid i
  trap '' INT TERM
  touch "$OUT/.writer.stop"
  [ -n "$WATCH_PID" ] && wait "$WATCH_PID" 2>/dev/null
  # Children still there (this script killed while waiting for them): a second SIGINT ends them.
  for f in "$OUT"/.children/*; do
    [ -f "$f" ] || continue
    pid=$(cat "$f")
    kill -INT "$pid" 2>/dev/null
    sleep 1
    kill -INT "$pid" 2>/dev/null
    for i in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -0 "$pid" 2>/dev/null && { say "pid $pid did not stop; killed"; kill -KILL "$pid"; }
    rm -f "$f"
  done
  stop_writer
  archive
  rm -f "$OUT/.run.pid"
  say "ended"
}
trap on_signal INT TERM
trap cleanup EXIT

if writer_answers && ! own_writer; then
  say "a stand-in writer already answers on port $PORT (not started here; left running)"
else
  own_writer || start_writer || exit 1
  watch_writer &
  WATCH_PID=$!
fi

for i in $(seq 1 "$SLOTS"); do
  (
    SLOT=slot$i
    # A stop reaches the jobs through the main script, which waits for them. (A handler, not '': children
    # exec'd from here get the default actions back.)
    trap ':' INT TERM
    slot
  ) &
  SLOT_PIDS+=($!)
  sleep 2
done
code=0
for p in "${SLOT_PIDS[@]}"; do
  wait_for "$p"
  c=$?
  [ $c -ne 0 ] && code=$c
done
exit "$code"
