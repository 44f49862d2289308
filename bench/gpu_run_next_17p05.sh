#!/usr/bin/env bash
# Issue 17's rows for the weaker draft, acceptance-grade (prepared 2026-12-07, eighth session; not run). One
# repeat of a 10 s row moves ln(ratio) by sigma ~0.023 (`python -m bench.repeat_noise bench/results/*/ab-*/ab-summary.json
# --row-seconds 10`): at a true 0.99 one repeat clears 0.97 on all 12 closed rows 9% of the time, three
# repeats 48%, so each row is measured three times, interleaved (each row on every side before the next):
#   1. p = 0.5: none / always / auto, closed 1 / 4 / 16 / 32 / 64 / 128, Poisson 4 / 16 / 48, 3 repeats
#      (~1,100 s with the three starts);
#   2. the shifting draft, calibrated (~210 s), if time is left.
# p = 0.2's rows, the time-varying load and gate_correctness --auto: bench/gpu_run_next_17p02.sh, a session
# of its own (the same server code). Auto's server records every decode result (`SPECCONSOLE_AUTO_TRACE`:
# read it with `python -m bench.auto_trace`). Steps: `models` (.gpuwheels/A), `wheels` (.gpuwheels/A2), `install 520` (.gpuwheels/B .devrun),
# then `wait 570` / `wait 592` sent at once. Rename to its date when run.
export SELF=bench/gpu_run_next_17p05.sh
set -uo pipefail
source bench/gpu_ab_steps.sh
if [ "${1:-}" = models ]; then models_8b fam; exit 0; fi
dispatch "$@"
auto_rows --interleave --repeats "${REPEATS:-3}" ${CONC:+--concurrency "$CONC"} ${RATES:+--rates "$RATES"}  # REPEATS=2, CONC=4,32 RATES=48 on the install step for a cut budget
models_p05
ab ab-auto-triton-p0.5 --models /tmp/models/8b/p0.5 --a none --b always --c auto "${ROWS[@]}" \
  --c-env SPECCONSOLE_AUTO_TRACE="$R/auto-trace-p0.5.jsonl"  # every decode result of auto: bench.auto_trace
shift_calibrated
touch "$R/all.done"
