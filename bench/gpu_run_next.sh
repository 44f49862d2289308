#!/usr/bin/env bash
# The next GPU run (one H200), prepared on 2026-12-05 (no GPU that session) after the 2026-12-04 fifth
# session's run, whose results were lost with its machine's files (bench/GPU_PLAN.md). All with
# bench.ab_traffic (servers up at once, 131072-token KV pools so three 8B servers fit, rows alternated,
# 2 repeats, varied-closed at 32 / 64 / 128, 8B pair p = 0.2, greedy servers start without the
# sampling-kernel build):
#   1. fa3: none / forced off with pageable host copies (SPECCONSOLE_HOST_COPY_PINNED=0, as before
#      2026-12-05) / forced off (defaults: pinned): the pinned copies' before and after where the 128 gap
#      was measured (0.941 on 2026-12-04e), then one 128 row on A and C with py-spy on the scheduler;
#   2. triton v2: none / forced off / forced off + the lean future map (opt-in);
#   3. v1: none / forced off (the lean v1 step). (The fused fa3 verify metadata waits for a later run.)
# Steps and carries as bench/gpu_run_2026_12_03c.sh (install 3, part 1..6, wait), except `models`
# here (the 8B pair only: nothing in this run needs the 1B pair). Rename it to its date when run.
set -uo pipefail
export SELF=bench/gpu_run_next.sh
R=/tmp/run
case "${1:-}" in
  models)
    mkdir -p /tmp/whl "$R" /tmp/fa3parts && cp .gpuwheels/A/*.whl /tmp/whl/ && ls /tmp/whl | wc -l
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
    setsid bash -c 'export PYTHONUNBUFFERED=1
      python3 -m bench.synthetic_models --out /tmp/models/8b/p0.2 --preset 8b --p-wrong 0.2 --device cuda 2>&1 | tail -n 2
      touch /tmp/run/models.done' >"$R/models.log" 2>&1 </dev/null &
    sleep 1; exit 0 ;;
  chain) ;;
  *) exec bash bench/gpu_run_2026_12_03c.sh "$@" ;;
esac
source .gpuwheels/B/env.sh
bash bench/gpu_run_2026_12_03c.sh heartbeat
for t in $(seq 300); do [ -e "$R/models.done" ] && break; sleep 1; done
ab() {  # ab NAME ARGS...: one bench.ab_traffic run
  local name=$1 t0=$SECONDS; shift
  python3 -m bench.ab_traffic --models /tmp/models/8b/p0.2 --repeats 2 --workloads varied-closed \
    --out "$R/$name" "$@" >"$R/$name.log" 2>&1
  echo "$name rc=$? $((SECONDS - t0)) s" >>"$R/jobs.log"
  pkill -f launch_server; sleep 2; pkill -9 -f launch_server
}
fa3_ready() { for t in $(seq 300); do [ -e "$R/fa3.ready" ] && return 0; sleep 1; done; return 1; }
mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -n 1)
echo "gpu memory ${mib} MiB" >>"$R/jobs.log"
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
