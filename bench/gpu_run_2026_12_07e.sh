#!/usr/bin/env bash
# Three questions in one run (prepared 2026-12-07, tenth session; run 2026-12-07 on an H100: bench/results/h100-2026-12-07e/), p = 0.5 on triton v2, the rows where
# h100-2026-12-07d lost: none / always / auto, closed 4 / 16 / 32 / 64 and Poisson 16 / s, 2 repeats interleaved,
# 10 s rows, three 8B servers up at once (~650 s with the start):
#   1. #16: where the OFF mode's +3% a decode step goes on triton. From 16 requests up auto is the OFF mode (94-97%
#      of its steps in 07d), so the torch profiler and py-spy on none and auto at 32 compare a server without
#      speculation with OFF steps (the profiles so far were fa3 at 64 / 128); then
#        python -m bench.throughput compare-profiles ab-triton-p0.5/profile/{a,c}/profile-traffic-*.json
#        python -m bench.cpu_profile compare ab-triton-p0.5/profile/a/cpu-profile-*.json ab-triton-p0.5/profile/c/cpu-profile-*.json
#   2. #17: the tie rule at 4 requests (07d: 0.946x twice where the crossover was held at a tie);
#   3. the step record of auto (`auto-trace-p0.5.jsonl`, `python -m bench.auto_trace`): why its ON estimates at small
#      batches read low.
# py-spy's wheel in .gpuwheels/B (CONTRIBUTING.md). Steps: `models` (.gpuwheels/A), `wheels` (.gpuwheels/A2),
# `install 520` (.gpuwheels/B .devrun), `wait 570` / `wait 300`. Run as gpu_run_next_triton_p05.sh, then renamed.
export SELF=bench/gpu_run_2026_12_07e.sh
set -uo pipefail
source bench/gpu_ab_steps.sh
dispatch "$@"
models_p05
pool=49152
if [ "${mib:-0}" -ge 100000 ]; then pool=131072; fi
ab ab-triton-p0.5 --models /tmp/models/8b/p0.5 --a none --b always --c auto --repeats "${REPEATS:-2}" --interleave \
  --workloads varied-closed,varied-poisson --concurrency 4,16,32,64 --rates 16 --row-seconds 10 \
  --max-total-tokens "$pool" --profile-row varied-closed:32 --cpu-profile-row varied-closed:32 --profile-sides a,c \
  --c-env SPECCONSOLE_AUTO_TRACE="$R/auto-trace-p0.5.jsonl"
touch "$R/all.done"
