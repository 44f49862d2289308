#!/usr/bin/env bash
# The next GPU run, prepared on 2026-12-07 after bench/results/h100-2026-12-07/ (one H100: p = 0.5 with
# the accept-length fix 0.976-1.017x the better static, e2e 0.998-1.020x; the shifting draft re-found in
# 135 / 1,986 decode steps). Issue 17's remaining rows, triton, one repeat, 12 s rows:
#   1. p = 0.2: none / always / auto, closed 1 / 4 / 16 / 32 / 64 / 128, Poisson 4 / 16 / 48 (06f's e2e
#      1.036x at 48 / s predates the probes charged by time) (~690 s);
#   2. bench.gate_correctness --auto for the three configs (passed on an H100 in 06g; on an H200 its own
#      record) (~250 s);
#   3. p = 0.2's time-varying load (1.166x on the H100 in 06g) (~400 s).
# No FA3: steps `models` (.gpuwheels/A), `install 3` (.gpuwheels/B .devrun), then `wait 560` calls.
# ~25 minutes with start-up. On an H100 the pools are cut to 49,152 tokens (the pool caps the batch at
# ~70 requests: say so). Rename to its date when run.
export SELF=bench/gpu_run_next.sh
set -uo pipefail
source bench/gpu_ab_steps.sh
if [ "${1:-}" = models ]; then models_8b; exit 0; fi
dispatch "$@"
auto_ab ab-auto-triton-p0.2 1,4,16,32,64,128
gate_auto 0.25
ab ab-tv-triton-p0.2 --a none --b always --c auto --repeats 1 --workloads varied-closed --concurrency 64 \
  --row-seconds 6 --max-total-tokens "$( [ "${mib:-0}" -ge 100000 ] && echo 131072 || echo 49152 )" --time-varying
touch "$R/all.done"
