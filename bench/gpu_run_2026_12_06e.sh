#!/usr/bin/env bash
# The GPU run of 2026-12-06 evening (one H100: bench/results/h100-2026-12-06e/), prepared after bench/results/h100-2026-12-06b/ (auto on fa3 with
# 49,152-token pools on an H100: speculation won at every load there, no crossover in range, so that
# run did not test auto's OFF side) and h100-2026-12-06c/ (the shifting draft at 4 requests: no flip
# on that GPU). Issue 17 where a crossover exists: triton (the H200 rows of 2026-12-01/02 put it
# between 4 and 16 requests for p = 0.2), none / always / auto, closed loop at 1 / 4 / 16 / 64 / 128
# and Poisson at 4 / 16 / 48 req/s, one repeat, 12 s rows:
#   1. p = 0.2, then the time-varying load (1 -> 64 -> 4 -> 128 -> 2) on each server;
#   2. the shifting draft (families p = 0.1 / 0.6) at the concurrency picked from the curve (1)'s auto
#      server learned (bench.auto_shift --concurrency-from: where its t_on / t_off lies between the
#      families' accept lengths; 8 if the curve has no such size), phases 0 -> 1 -> 0 of 30 s;
#   3. p = 0.5 (the same target, its draft beside: the none rows are labelled 0.5 by bench.ab_collect).
# No FA3 (triton): steps `models` (.gpuwheels/A), `install 3` (.gpuwheels/B .devrun), then `wait` calls
# of at most ~400 s. ~11 + ~4 + ~9 min on an H200 plus ~3 min of start-up. On an H100 the pools are
# cut to 49,152 tokens (the pool then caps the batch at ~110: say so with the numbers). On the H100 of
# 2026-12-06 step 1 took 778 s and step 2 172 s; step 3 was stopped for gpu_run_2026_12_06e_tail.sh.
export SELF=bench/gpu_run_2026_12_06e.sh
set -uo pipefail
source bench/gpu_ab_steps.sh
if [ "${1:-}" = models ]; then models_8b fam; exit 0; fi
dispatch "$@"
models_p05
auto_ab ab-auto-triton-p0.2 1,4,16,64,128 --time-varying
t0=$SECONDS
python3 -m bench.auto_shift --models /tmp/models/8b/fam --out "$R/auto-shift.json" --concurrency 8 \
  --concurrency-from "$R/ab-auto-triton-p0.2/repeat0/c/traffic-auto-v2-p0.2.json" --phase-seconds 30 \
  --log-dir "$R/logs" >"$R/auto-shift.log" 2>&1
echo "auto-shift rc=$? $((SECONDS - t0)) s" >>"$R/jobs.log"
pkill -f launch_server; sleep 2; pkill -9 -f launch_server
auto_ab ab-auto-triton-p0.5 1,4,16,64,128 --b-models /tmp/models/8b/p0.5 --c-models /tmp/models/8b/p0.5
touch "$R/all.done"
