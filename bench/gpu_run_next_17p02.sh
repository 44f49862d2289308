#!/usr/bin/env bash
# Issue 17's rows for the better draft, acceptance-grade (prepared 2026-12-07, eighth session; not run): as
# bench/gpu_run_next_17p05.sh (three interleaved repeats a row: bench.repeat_noise), then the rest of the list:
#   1. p = 0.2: none / always / auto, closed 1 / 4 / 16 / 32 / 64 / 128, Poisson 4 / 16 / 48, 3 repeats,
#      then the time-varying load on the same three servers (~1,300 s);
#   2. bench.gate_correctness --auto for the three configs at TP 1 (~280 s), if time is left.
# Auto's server records every decode result (`SPECCONSOLE_AUTO_TRACE`, `python -m bench.auto_trace`): whether
# its ON estimates read low at small batches (h100-2026-12-07d) because of the samples taken soon after a
# switch, the context length, or the table rebuilds.
# Steps: `models` (.gpuwheels/A), `wheels` (.gpuwheels/A2), `install 520` (.gpuwheels/B .devrun), then `wait 570` / `wait 592`.
# Rename to its date when run.
export SELF=bench/gpu_run_next_17p02.sh
set -uo pipefail
source bench/gpu_ab_steps.sh
if [ "${1:-}" = models ]; then models_8b; exit 0; fi
dispatch "$@"
auto_rows --interleave --repeats "${REPEATS:-3}" ${CONC:+--concurrency "$CONC"} ${RATES:+--rates "$RATES"}  # REPEATS=2, CONC=4,32 RATES=48 on the install step for a cut budget
ab ab-auto-triton-p0.2 --a none --b always --c auto "${ROWS[@]}" --time-varying \
  --c-env SPECCONSOLE_AUTO_TRACE="$R/auto-trace-p0.2.jsonl"  # every decode result of auto: bench.auto_trace
gate_auto 0.25
touch "$R/all.done"
