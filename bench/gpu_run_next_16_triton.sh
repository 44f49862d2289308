#!/usr/bin/env bash
# Issue 16 on triton v2 at the sizes where p = 0.5's auto rows run OFF (prepared 2026-12-07, tenth session; not
# run): h100-2026-12-07d's auto was the OFF mode from 16 requests up (94-97% of its decode steps) and lost
# 2-5% to no speculation there; the servers' 40-step lines put an OFF decode step at +3% against none's at 16
# and 32 running requests. The profiles so far were fa3 at 64 / 128; this one is triton at 32.
#   none / forced off, closed 16 / 32 / 128, two servers up at once, 10 s rows, 2 repeats interleaved, the
#   torch profiler and py-spy on both at 32 (~8 min with the start; py-spy's wheel in .gpuwheels/B, as
#   CONTRIBUTING.md says), then
#   python -m bench.throughput compare-profiles ab-triton-16/profile/{a,b}/profile-traffic-*.json
#   python -m bench.cpu_profile compare ...   (the scheduler's CPU by function, none against off)
# Steps: `models` (.gpuwheels/A), `wheels` (.gpuwheels/A2), `install 520` (.gpuwheels/B .devrun), `wait 570`.
# Rename to its date when run.
export SELF=bench/gpu_run_next_16_triton.sh
set -uo pipefail
source bench/gpu_ab_steps.sh
dispatch "$@"
ab ab-triton-16 --a none --b off --max-total-tokens 131072 --repeats 2 --interleave --row-seconds 10 \
  --concurrency 16,32,128 --profile-row varied-closed:32 --cpu-profile-row varied-closed:32 --profile-sides a,b
touch "$R/all.done"
