#!/usr/bin/env bash
# The GPU run of 2026-12-05, third session: ten minutes of device time were left after eight refused
# starts, too few for FA3's six pieces, so v1 only (triton, no FA3 needed): none / forced off, one
# repeat, the torch profiler at 128 on both (0.86 there on 2026-12-05: where the v1 gap goes); on an
# H200 a third server, forced off with the draft K/V of its lean OFF steps deferred
# (SPECCONSOLE_OFF_DEFERRED_DRAFT_KV_V1=1, first time on a GPU). bench.ab_traffic as in
# bench/gpu_run_next.sh (servers up at once, 131072-token pools, rows alternated, varied-closed at
# 32 / 64 / 128, 8B pair p = 0.2). Steps: models (carry .gpuwheels/A), install 3 (.gpuwheels/B
# .devrun), then `wait` calls of at most ~400 s.
export SELF=bench/gpu_run_2026_12_05d.sh
set -uo pipefail
source bench/gpu_ab_steps.sh
dispatch "$@"
if [ "${mib:-0}" -ge 100000 ]; then  # H200: three 8B servers with 131072-token pools (~100 GB) fit
  ab ab-v1 --worker v1 --a none --b off --c off --c-env SPECCONSOLE_OFF_DEFERRED_DRAFT_KV_V1=1 \
    --max-total-tokens 131072 --repeats 1 --profile-row varied-closed:128 --profile-sides a,b
else  # H100 (~80 GB): two at a time
  ab ab-v1 --worker v1 --a none --b off --max-total-tokens 131072 --repeats 1 --profile-row varied-closed:128
fi
touch "$R/all.done"
