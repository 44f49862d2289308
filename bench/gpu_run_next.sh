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
# v1 first (no FA3 needed: its six pieces arrive while it runs), then fa3 with both profilers at 128
ab ab-v1 --worker v1 --a none --b off --max-total-tokens 131072
if [ "${mib:-0}" -ge 100000 ]; then  # H200: a third server, forced off with pageable host copies
  fa3_ready && ab ab-fa3 --attention-backend fa3 --a none --b off --c off --max-total-tokens 131072 \
    --c-env SPECCONSOLE_HOST_COPY_PINNED=0 --profile-row varied-closed:128 --cpu-profile-row varied-closed:128
else  # H100 (~80 GB): two 8B servers at a time (~67 GB)
  fa3_ready && ab ab-fa3 --attention-backend fa3 --a none --b off --max-total-tokens 131072 \
    --profile-row varied-closed:128 --cpu-profile-row varied-closed:128
fi
fa3_ready && ab ab-fa3-levers --attention-backend fa3 --a none --b off --max-total-tokens 131072 \
  --b-env SPECCONSOLE_OFF_LEAN_FUTURE_MAP=1 --b-env SPECCONSOLE_OFF_FA3_FUSED_VERIFY_METADATA=1
touch "$R/all.done"
