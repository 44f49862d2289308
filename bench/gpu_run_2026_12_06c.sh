#!/usr/bin/env bash
# The second GPU run of 2026-12-06 (what the first left of the session's 30 minutes, ~9): issue 17's
# shifting draft. The 8B-shaped pair with two prompt families (family 0: p = 0.1, accept length ~3.3;
# family 1: p = 0.6, ~1.6) on triton at 4 concurrent requests, where the 2026-12-01/02 H200 rows put
# the step-time ratio t_on / t_off between the two accept lengths (~2.3: speculation pays for family
# 0, not for family 1), phases 0 -> 1 -> 0 of 20 s: how many decode steps auto needs to re-find its
# choice after each change of the prompt mix.
#   bash bench/gpu_run_2026_12_06c.sh models            (carry .gpuwheels/A)
#   bash bench/gpu_run_2026_12_06c.sh install SECONDS   (carry .gpuwheels/B .devrun)
#   bash bench/gpu_run_2026_12_06c.sh wait SECONDS
export SELF=bench/gpu_run_2026_12_06c.sh
set -uo pipefail
R=/tmp/run
case "${1:-}" in
  models)
    mkdir -p /tmp/whl "$R" && cp .gpuwheels/A/*.whl /tmp/whl/
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
    setsid bash -c 'export PYTHONUNBUFFERED=1
      python3 -m bench.synthetic_models --out /tmp/models/8b/fam --preset 8b --families 2 \
        --p-wrong-families 0.1,0.6 --device cuda 2>&1 | tail -n 2
      touch /tmp/run/models.done' >"$R/models.log" 2>&1 </dev/null &
    sleep 1; exit 0 ;;
  chain)
    source .gpuwheels/B/env.sh
    bash bench/gpu_run_2026_12_03c.sh heartbeat
    for t in $(seq 300); do [ -e "$R/models.done" ] && break; sleep 1; done
    t0=$SECONDS
    python3 -m bench.auto_shift --models /tmp/models/8b/fam --out "$R/auto-shift.json" --concurrency 4 \
      --phase-seconds 20 --log-dir "$R/logs" >"$R/auto-shift.log" 2>&1
    echo "auto-shift rc=$? $((SECONDS - t0)) s" >>"$R/jobs.log"
    pkill -f launch_server; sleep 2; pkill -9 -f launch_server
    touch "$R/all.done" ;;
  *) exec bash bench/gpu_run_2026_12_03c.sh "$@" ;;
esac
