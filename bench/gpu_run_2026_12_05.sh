#!/usr/bin/env bash
# The GPU run of 2026-12-05 (bench/results/h100-2026-12-05/): it adapts to the GPU's memory. On an
# H100 (what came, after four refused starts) two 8B servers at a time: triton v2 none / forced off,
# fa3 none / forced off with py-spy at 128, v1 none / forced off (cut by the device time in its
# second repeat). On an H200 the fa3 run would have had a third server (forced off with pageable
# host copies). All with bench.ab_traffic (both servers up at once, 131072-token KV pools, rows
# alternated, 2 repeats, varied-closed at 32 / 64 / 128, 8B pair p = 0.2, greedy servers start
# without the sampling-kernel build). Steps and carries as bench/gpu_run_2026_12_03c.sh (models with
# .gpuwheels/A, install 3 with .gpuwheels/B .devrun, part 1..5 1 and part 6 3 with .gpuwheels/FN,
# wait 560, wait 540), except `models` here (the 8B pair only).
export SELF=bench/gpu_run_2026_12_05.sh
set -uo pipefail
source bench/gpu_ab_steps.sh
dispatch "$@"
# triton first (no FA3 needed: its six pieces arrive while it runs), then fa3, then v1
if [ "${mib:-0}" -ge 100000 ]; then  # H200: three 8B servers with 131072-token pools (~100 GB) fit
  ab ab-triton --a none --b off --max-total-tokens 131072
  fa3_ready && ab ab-fa3 --attention-backend fa3 --a none --b off --c off --max-total-tokens 131072 \
    --b-env SPECCONSOLE_HOST_COPY_PINNED=0 --cpu-profile-row varied-closed:128 --profile-sides a,c
else  # H100 (~80 GB): two 8B servers at a time (~67 GB)
  ab ab-triton --a none --b off --max-total-tokens 131072
  fa3_ready && ab ab-fa3 --attention-backend fa3 --a none --b off --max-total-tokens 131072 \
    --cpu-profile-row varied-closed:128
fi
ab ab-v1 --worker v1 --a none --b off --max-total-tokens 131072
touch "$R/all.done"
