#!/usr/bin/env bash
# Asks the study's running jobs to stop (study.sh): a trainer finishes its iteration and saves a
# checkpoint, an evaluation stops (it is made again), an adaptation keeps its finished trials. Each
# slot of study.sh then stops, its job left open for the next study.sh to resume. `stop.sh now` sends a
# second signal: trainers exit at once, losing the iteration under way (the last checkpoint stays).
pkill -INT -f 'bin/empo2.js (train|eval) ' ; pkill -INT -f 'bench/adapt-vs-no-tips.ts'
if [ "${1:-}" = now ]; then sleep 2; pkill -INT -f 'bin/empo2.js (train|eval) '; fi
exit 0
