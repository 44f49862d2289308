#!/usr/bin/env bash
# The last minutes of bench/gpu_run_2026_12_06e.sh's session (one H100, ~330 s left): p = 0.5's
# none / always / auto at 16 and 64 requests, closed loop, one repeat (the chain's p = 0.5 step cut
# to what fits), then `wait`.
R=/tmp/run
source .gpuwheels/B/env.sh
rm -f "$R/all.done"
setsid bash -c 'R=/tmp/run; t0=$SECONDS
  python3 -m bench.ab_traffic --models /tmp/models/8b/p0.2 --b-models /tmp/models/8b/p0.5 \
    --c-models /tmp/models/8b/p0.5 --a none --b always --c auto --repeats 1 --workloads varied-closed \
    --concurrency 16,64 --row-seconds 12 --max-total-tokens 49152 \
    --out $R/ab-auto-triton-p0.5-short >$R/ab-auto-triton-p0.5-short.log 2>&1
  echo "ab-auto-triton-p0.5-short rc=$? $((SECONDS - t0)) s" >>$R/jobs.log; touch $R/all.done' \
  </dev/null >/dev/null 2>&1 &
sleep 1
bash bench/gpu_run_2026_12_06e.sh wait "${1:-300}" | tail -n 4
