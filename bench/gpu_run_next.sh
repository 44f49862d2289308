#!/usr/bin/env bash
# The next GPU run, prepared on 2026-12-05 after bench/results/h100-2026-12-05/ (triton off / none
# 0.967-0.996, fa3 0.947-0.962, v1 0.86-0.95 in one repeat; the OFF side's py-spy profile sampled the
# idle server, mended since). It adapts to the GPU's memory, all with bench.ab_traffic (servers up
# at once, 131072-token KV pools, rows alternated, 2 repeats, varied-closed at 32 / 64 / 128, 8B pair
# p = 0.2):
#   1. v1 none / forced off, both repeats (the last run's second was cut);
#   2. fa3 none / forced off (on an H200 also forced off with pageable host copies), then at 128 the
#      torch profiler (GPU timeline, `bench.throughput compare-profiles`) and py-spy on the measured
#      server's scheduler (`bench.cpu_profile compare`): where fa3's OFF gap at 64 / 128 goes;
#   3. while device time lasts: fa3 none / forced off with the lean future map and the fused fa3 verify
#      metadata (both opt-in, first time on a GPU): the same ratio as 2 with the two levers on.
# Steps and carries as bench/gpu_run_2026_12_03c.sh (models with .gpuwheels/A, install 3 with
# .gpuwheels/B .devrun, part 1..5 1 and part 6 3 with .gpuwheels/FN, then wait 560 until all.done),
# except `models` here (the 8B pair only). Rename it to its date when run.
export SELF=bench/gpu_run_next.sh
set -uo pipefail
source bench/gpu_ab_steps.sh
dispatch "$@"
# A short lease (the first of 2026-12-05's second session was taken back mid-run, nothing returned):
# fa3 first, one repeat, for its profiles at 128; then v1's both repeats while device time lasts
fa3_ready && ab ab-fa3 --attention-backend fa3 --a none --b off --max-total-tokens 131072 --repeats 1 \
  --profile-row varied-closed:128 --cpu-profile-row varied-closed:128
ab ab-v1 --worker v1 --a none --b off --max-total-tokens 131072
touch "$R/all.done"
