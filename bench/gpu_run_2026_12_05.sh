#!/usr/bin/env bash
# The GPU run of 2026-12-05 (bench/results/h100-2026-12-05/): it adapts to the GPU's memory. On an
# H100 (what came, after four refused starts) two 8B servers at a time: triton v2 none / forced off,
# fa3 none / forced off with py-spy at 128, v1 none / forced off (cut by the device time in its
# second repeat). On an H200 the fa3 run would have had a third server (forced off with pageable
# host copies). All with bench.ab_traffic (both servers up at once, 131072-token KV pools, rows
# alternated, 2 repeats, varied-closed at 32 / 64 / 128, 8B pair p = 0.2, greedy servers start
# without the sampling-kernel build). Steps and carries as bench/gpu_run_2026_12_03c.sh (models with
# .gpuwheels/A, install 3 with .gpuwheels/B .devrun, part 1..5 1 and part 6 3 with .gpuwheels/FN,
# wait 560, wait 540), except `models` here (the 8B pair only).
export SELF=bench/gpu_run_2026_12_05.sh
set -uo pipefail
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
