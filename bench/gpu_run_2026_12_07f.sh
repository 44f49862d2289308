#!/usr/bin/env bash
# Two controls in one run (prepared 2026-12-07, eleventh session; ran the twelfth as bench/gpu_run_next_on_cost.sh with REPEATS=1: bench/results/h200-2026-12-07f/), p = 0.5 on triton v2, 8B pair,
# three servers up at once, rows interleaved, 10 s rows (~800 s with set-up; the second part may be cut):
#   1. The plugin's cost while speculating (h100-2026-12-07e: auto ran ON on 99% of the steps at 4 requests and
#      still measured 0.964 / 0.979x of always, 0.986x at 1; its ON steps ~3% slower in the 40-step lines).
#      none / always / auto at 1 and 4 requests, two repeats, then the torch profiler and py-spy on always and
#      auto at 4 (auto ON there):
#        python -m bench.throughput compare-profiles ab-on-cost/profile/{b,c}/profile-traffic-*.json
#        python -m bench.cpu_profile compare ab-on-cost/profile/b/cpu-profile-*.json ab-on-cost/profile/c/cpu-profile-*.json
#      and auto's step record (now with each batch's context) at 1 / 4.
#   2. Two servers without speculation beside auto at 32, all three profiled, each server on its own CPUs
#      (--pin-cpus, its first run): 07e's OFF scheduler, unpinned, ran its plain torch ops ~10% slower on the CPU
#      than none's (argmax 50 vs 42 us, arange 39 vs 32, add 20 vs 17, median; compare-profiles' "CPU per op":
#      1.107). Pinned, two identical servers should agree per op; if auto (OFF) then agrees with none too, 07e's
#      difference was placement (and later A/B runs pin), else it is the OFF server's own. B's TWIN_OF_A=1 only
#      tells the two none servers apart for bench.ab_traffic (nothing reads it).
#        python -m bench.throughput compare-profiles ab-none-twice/profile/{a,b}/profile-traffic-*.json
#        python -m bench.throughput compare-profiles ab-none-twice/profile/{a,c}/profile-traffic-*.json
# Steps: `models` (.gpuwheels/A), `wheels` (.gpuwheels/A2), `install 520` (.gpuwheels/B .devrun), `wait 570`,
# `wait 300`, sent at once. Rename to its date when run.
export SELF=bench/gpu_run_2026_12_07f.sh
set -uo pipefail
source bench/gpu_ab_steps.sh
dispatch "$@"
models_p05
placement_log  # which cores each server's threads ran on (the control's question)
pool=$(three_pool)
ab ab-on-cost --models /tmp/models/8b/p0.5 --a none --b always --c auto --repeats "${REPEATS:-2}" --interleave \
  --workloads varied-closed --concurrency 1,4 --row-seconds 10 --max-total-tokens "$pool" \
  --profile-row varied-closed:4 --cpu-profile-row varied-closed:4 --profile-sides b,c \
  --c-env SPECCONSOLE_AUTO_TRACE="$R/auto-trace-on-cost.jsonl"
ab ab-none-twice --models /tmp/models/8b/p0.5 --a none --b none --b-env TWIN_OF_A=1 --c auto --repeats 1 --interleave --pin-cpus \
  --workloads varied-closed --concurrency 32 --row-seconds 10 --max-total-tokens "$pool" \
  --profile-row varied-closed:32 --profile-sides a,b,c
touch "$R/all.done"
