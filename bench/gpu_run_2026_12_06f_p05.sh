#!/usr/bin/env bash
# Sent mid-run when the budget showed that bench/gpu_run_next.sh's chain would not reach p = 0.5: waits
# for the p = 0.2 auto side's traffic, stops the chain before its time-varying load, then runs p = 0.5
# always / auto at fewer rows (closed 4 / 16 / 32 / 64 / 128, Poisson 16 / 48) and packs as `wait` does.
set -uo pipefail
R=/tmp/run
export SELF=bench/gpu_run_2026_12_06f.sh
for t in $(seq 400); do grep -q '"side": "c", "config": "auto", "rc"' "$R/ab-auto-triton-p0.2.log" && break; sleep 1; done
pkill -f '[g]pu_run_2026_12_06f.sh chain'; pkill -f '[b]ench.ab_traffic'; sleep 1
pkill -f '[l]aunch_server'; sleep 3; pkill -9 -f '[l]aunch_server'; sleep 2
echo "stopped the chain before p = 0.2's time-varying load $(date +%T)" >>"$R/jobs.log"
setsid bash -c 'source .gpuwheels/B/env.sh; source bench/gpu_ab_steps.sh
  ab ab-auto-triton-p0.5 --models /tmp/models/8b/p0.5 --a always --b auto --repeats 1 \
    --workloads varied-closed,varied-poisson --concurrency 4,16,32,64,128 --rates 16,48 --row-seconds 12 \
    --max-total-tokens 49152
  touch /tmp/run/all.done' >"$R/p05-chain.log" 2>&1 </dev/null &
bash bench/gpu_run_2026_12_03c.sh wait "${1:-500}"
