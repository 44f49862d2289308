#!/usr/bin/env bash
# The next GPU run, prepared on 2026-12-06 after bench/results/h200-2026-12-06/ (the OFF mode's
# remaining fa3 / v1 gaps at 128 are within what one repeat can tell apart). Issue 17's rows: the
# auto threshold against both static configurations, no threshold chosen by anyone, on the realistic
# workloads (variable lengths, closed loop at 1 / 16 / 64 / 128 and Poisson arrivals at 4 / 16 / 48
# requests a second), fa3, one repeat, for two draft qualities of the 8B pair (p = 0.2: accept length
# ~2.95; p = 0.5: ~1.9, the draft whose fixed threshold kept speculation on where it lost):
#   1. p = 0.2: A none, B always, C auto, then the time-varying load (1 -> 64 -> 4 -> 128 -> 2) on each;
#   2. p = 0.5: A none (the same target), B always, C auto on the p = 0.5 draft.
# 12 s rows: 7 rows x 3 sides ~8 min a draft plus ~2.5 min of start-up, so both drafts fit one lease.
# On an H200 three 8B servers with 131072-token pools fit (~100 GB); on an H100 the pools are cut to
# 49152 tokens, alike on all three sides (the pool then caps the batch; say so with the numbers).
# Steps and carries as bench/gpu_run_2026_12_03c.sh (models with .gpuwheels/A, install 3 with
# .gpuwheels/B .devrun, part 1..5 1 and part 6 200 with .gpuwheels/FN, then `wait` calls of at most
# ~400 s: a machine taken back mid-call returns nothing). Rename it to its date when run.
export SELF=bench/gpu_run_2026_12_06b.sh
set -uo pipefail
source bench/gpu_ab_steps.sh
dispatch "$@"
python3 -m bench.synthetic_models --out /tmp/models/8b/p0.5 --preset 8b --p-wrong 0.5 \
  --target-from /tmp/models/8b/p0.2 --device cuda >"$R/models-p0.5.log" 2>&1
if [ "${mib:-0}" -ge 100000 ]; then pool=131072; else pool=49152; fi
auto_ab() {  # auto_ab NAME [--b-models DIR --c-models DIR]
  local name=$1; shift
  fa3_ready && ab "$name" --attention-backend fa3 --a none --b always --c auto --repeats 1 \
    --workloads varied-closed,varied-poisson --concurrency 1,16,64,128 --rates 4,16,48 --row-seconds 12 \
    --max-total-tokens "$pool" "$@"
}
auto_ab ab-auto-p0.2 --time-varying
auto_ab ab-auto-p0.5 --b-models /tmp/models/8b/p0.5 --c-models /tmp/models/8b/p0.5
touch "$R/all.done"
