#!/usr/bin/env bash
# The next GPU run, prepared on 2026-12-06 after bench/results/h100-2026-12-06b/ (auto on fa3 with
# 49,152-token pools on an H100: speculation won at every load there, no crossover in range, so that
# run did not test auto's OFF side). Issue 17's rows where a crossover exists: triton (the H200 rows
# of 2026-12-01/02 put it between 4 and 16 requests for p = 0.2), none / always / auto, closed loop
# at 1 / 4 / 16 / 64 / 128 and Poisson at 4 / 16 / 48 req/s, one repeat, 12 s rows:
#   1. p = 0.2, then the time-varying load (1 -> 64 -> 4 -> 128 -> 2) on each server;
#   2. p = 0.5 (the same target, its draft beside: the none rows are labelled 0.5 by bench.ab_collect).
# No FA3 (triton): steps `models` (.gpuwheels/A), `install 3` (.gpuwheels/B .devrun), then `wait` calls
# of at most ~400 s. ~11 + ~9 min on an H200 plus ~3 min of start-up. On an H100 the pools are cut to
# 49,152 tokens (the pool then caps the batch at ~110: say so with the numbers). Rename to its date when run.
export SELF=bench/gpu_run_next.sh
set -uo pipefail
source bench/gpu_ab_steps.sh
dispatch "$@"
python3 -m bench.synthetic_models --out /tmp/models/8b/p0.5 --preset 8b --p-wrong 0.5 \
  --target-from /tmp/models/8b/p0.2 --device cuda >"$R/models-p0.5.log" 2>&1
if [ "${mib:-0}" -ge 100000 ]; then pool=131072; else pool=49152; fi
auto_ab() {  # auto_ab NAME [more bench.ab_traffic arguments]
  local name=$1; shift
  ab "$name" --a none --b always --c auto --repeats 1 --workloads varied-closed,varied-poisson \
    --concurrency 1,4,16,64,128 --rates 4,16,48 --row-seconds 12 --max-total-tokens "$pool" "$@"
}
auto_ab ab-auto-triton-p0.2 --time-varying
auto_ab ab-auto-triton-p0.5 --b-models /tmp/models/8b/p0.5 --c-models /tmp/models/8b/p0.5
touch "$R/all.done"
