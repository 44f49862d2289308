#!/usr/bin/env bash
# The tail of bench/gpu_run_2026_12_06e.sh's session (one H100): after the auto-shift step, its chain
# (now at p = 0.5, which the budget could not finish) is stopped and a forced-off row at 4 requests is
# measured against no speculation on triton (GPU_PLAN's item 2), then `wait`.
R=/tmp/run
source .gpuwheels/B/env.sh
pkill -f '[g]pu_run_next.sh chain'; pkill -f '[b]ench.ab_traffic'; pkill -f '[l]aunch_server'
sleep 3; pkill -9 -f '[l]aunch_server'; sleep 2
echo "stopped the chain for ab-off-c4 $(date +%T)" >>"$R/jobs.log"
setsid bash -c 'R=/tmp/run; t0=$SECONDS
  python3 -m bench.ab_traffic --models /tmp/models/8b/p0.2 --a none --b off --repeats 2 \
    --workloads varied-closed --concurrency 4 --row-seconds 12 --max-total-tokens 49152 \
    --out $R/ab-off-c4 >$R/ab-off-c4.log 2>&1
  echo "ab-off-c4 rc=$? $((SECONDS - t0)) s" >>$R/jobs.log; touch $R/all.done' </dev/null >/dev/null 2>&1 &
sleep 1
bash bench/gpu_run_2026_12_06e.sh wait "${1:-400}" | tail -n 4
