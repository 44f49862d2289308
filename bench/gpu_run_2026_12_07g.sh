#!/usr/bin/env bash
# Two questions h200-2026-12-07f left (prepared 2026-12-07, twelfth session as gpu_run_next_placement.sh; run 2026-12-07 on an H100,
# results in bench/results/h100-2026-12-07g/), triton v2, 8B pair:
#   1. Is the OFF mode's larger gap on the H200 (auto OFF / none 0.93 at 32 requests, +8% a step in the 40-step
#      lines, every server pinned to 4 cores) the H200 or the pinning (h100-2026-12-07e, unpinned: 0.975, +2-3%)?
#      p = 0.5 none / auto (OFF from 16 up), closed 32 / 64, two interleaved repeats, pinned (--pin-cpus), then the
#      same with new servers unpinned; py-spy on both sides at 32 each time (the torch profiler's 200-step
#      window ranked these servers opposite to their rows in 07f, so it is not used here):
#        python -m bench.decode_log ab-pinned/server-logs/ab-a-none-p0.5.log.gz --sizes 32,64   (and b, and ab-unpinned)
#        python -m bench.cpu_profile compare --by self ab-pinned/profile/{a,b}/cpu-profile-*.json   (and ab-unpinned)
#      C is auto with the lean future map (opt-in, never measured on triton: it skips three of the five FutureMap
#      gathers and stores of an OFF step, which it never reads; 07e's trace has the OFF step at 43 GPU activities
#      outside its forward against none's 14, five of them these gathers), against B step for step (pinned
#      servers' 40-step lines agree to 0.01%, 07f):
#        python -m bench.decode_log ab-pinned/server-logs/ab-b-auto-p0.5.log.gz --versus ab-pinned/server-logs/ab-c-auto-p0.5.log.gz --sizes all
#   2. The plugin's cost while speculating, with a draft that wins on the H200 (p = 0.5 did not: none = always
#      at 1 request, none 1.10x always at 4): p = 0.2 none / always / auto at 1 / 4, one repeat, pinned, the
#      torch profiler and py-spy on always and auto at 4 (auto ON there), auto's step record.
#        python -m bench.throughput compare-profiles ab-on-cost-p0.2/profile/{b,c}/profile-traffic-*.json
# Steps: `models` (.gpuwheels/A), `wheels` (.gpuwheels/A2), `install 520` (.gpuwheels/B .devrun), `wait 570`,
# `wait 300`, sent at once. About 1,200 s with set-up (each part ~350 s with its servers' start). Rename to its
# date when run.
export SELF=bench/gpu_run_2026_12_07g.sh
set -uo pipefail
source bench/gpu_ab_steps.sh
dispatch "$@"
models_p05
placement_log  # which cores each server's threads ran on
pool=$(three_pool)
for pin in pinned unpinned; do
  ab "ab-$pin" --models /tmp/models/8b/p0.5 --a none --b auto --repeats "${REPEATS:-2}" --interleave \
    $([ $pin = pinned ] && echo --pin-cpus) --workloads varied-closed --concurrency 32,64 --row-seconds 10 \
    --max-total-tokens "$pool" --cpu-profile-row varied-closed:32 \
    --c auto --c-env SPECCONSOLE_OFF_LEAN_FUTURE_MAP=1
done
ab ab-on-cost-p0.2 --models /tmp/models/8b/p0.2 --a none --b always --c auto --repeats 1 --interleave --pin-cpus \
  --workloads varied-closed --concurrency 1,4 --row-seconds 10 --max-total-tokens "$pool" \
  --profile-row varied-closed:4 --cpu-profile-row varied-closed:4 --profile-sides b,c \
  --c-env SPECCONSOLE_AUTO_TRACE="$R/auto-trace-on-cost-p0.2.jsonl"
touch "$R/all.done"
