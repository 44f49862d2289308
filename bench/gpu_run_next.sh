#!/usr/bin/env bash
# The next GPU run, prepared on 2026-12-06 after bench/results/h100-2026-12-06e/ (one H100, triton:
# auto 0.994-1.030x the better static at c = 1-128 and e2e 0.949-1.009x for p = 0.2, time-varying
# 1.149x; p = 0.5 only at 16 / 64; the shifting draft at 16 requests, a concurrency picked from a curve
# of other traffic, flipped but did not hold OFF where it led by ~4%). Issue 17's acceptance run, on
# whatever GPU comes (it asks for one H200), triton, none / always / auto, closed loop at 1 / 4 / 16 /
# 32 / 64 / 128 (32: the H100 crossover, where the hysteresis band built after 06e acts) and Poisson at 4 / 16 / 48 req/s, one repeat, 12 s rows:
#   1. p = 0.2, then the time-varying load (1 -> 64 -> 4 -> 128 -> 2) on each server;
#   2. p = 0.5 (the same target, its draft beside: the none rows are labelled 0.5 by bench.ab_collect);
#   3. the shifting draft (families p = 0.1 / 0.6), its concurrency from a curve learned on its own
#      32-token prompts (bench.auto_shift --calibrate 8,16,32,64, 8 s a level), phases 0 -> 1 -> 0 of 30 s.
# No FA3: steps `models` (.gpuwheels/A), `install 3` (.gpuwheels/B .devrun), then `wait 560` calls
# (a call may run 600 s). On the H100 of 2026-12-06e step 1 took 778 s and the shift 172 s; ~13 + ~9 + ~4
# min and ~4 min of start-up: the whole 30 minutes. On an H100 the pools are cut to 49,152 tokens (the
# pool caps the batch at ~110-120: say so). Rename to its date when run.
export SELF=bench/gpu_run_next.sh
set -uo pipefail
source bench/gpu_ab_steps.sh
if [ "${1:-}" = models ]; then models_8b fam; exit 0; fi
dispatch "$@"
models_p05
auto_ab ab-auto-triton-p0.2 1,4,16,32,64,128 --time-varying
auto_ab ab-auto-triton-p0.5 1,4,16,32,64,128 --b-models /tmp/models/8b/p0.5 --c-models /tmp/models/8b/p0.5
t0=$SECONDS
python3 -m bench.auto_shift --models /tmp/models/8b/fam --out "$R/auto-shift.json" --concurrency 32 \
  --calibrate 8,16,32,64 --calibrate-seconds 8 --phase-seconds 30 --log-dir "$R/logs" >"$R/auto-shift.log" 2>&1
echo "auto-shift rc=$? $((SECONDS - t0)) s" >>"$R/jobs.log"
pkill -f '[l]aunch_server'; sleep 2; pkill -9 -f '[l]aunch_server'
touch "$R/all.done"
