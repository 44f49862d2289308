#!/usr/bin/env bash
# The GPU run of 2026-12-04 (one H200), from bench/GPU_PLAN.md: v1's OFF-step sampling proof (issue 18
# item 4), then issue 16's varied-closed rows with 16 s rows (the 6 s rows of 2026-12-03c were one wave
# at 128): fa3 none, fa3 forced off with the KV-only draft extend on its own CUDA graph (new: SGLang
# captures no OFF draft-extend graph on fa3), fa3 forced off with it eager as before
# (SPECCONSOLE_OFF_DRAFT_KV_ONLY_GRAPH=0), v1 none / off, triton v2 none / off, in that order (each
# ~3 min; $OUT/run.tgz brings back whatever finished); profiles at 64 on fa3 none / off and v1 none / off.
# The steps models / install / part / wait are bench/gpu_run_2026_12_03c.sh's (same carries); only
# the chain is this run's.
set -uo pipefail
export SELF=bench/gpu_run_2026_12_04.sh
[ "${1:-}" = chain ] || exec bash bench/gpu_run_2026_12_03c.sh "$@"
R=/tmp/run
source .gpuwheels/B/env.sh
(while [ ! -e "$R/all.done" ]; do
   echo "$(date +%T) cpu $(head -n 1 /proc/pressure/cpu) load $(cut -d' ' -f1-3 /proc/loadavg)"; sleep 1; done) \
  >"$R/heartbeat.log" 2>&1 &
for t in $(seq 120); do [ -e "$R/models1b.done" ] && break; sleep 1; done
t0=$SECONDS
SPECCONSOLE_BENCH_SERVER_ARGS="--max-total-tokens 16384" timeout -s INT -k 30 600 \
  python3 -m bench.sampling_distribution --config v1-topk1 --models /tmp/models/1b/p0.2 --mem-fraction 0.85 \
  --port 31300 --out "$R/sampling-v1.json" --log-dir "$R/logs/sampling" >"$R/sampling.log" 2>&1
echo "sampling rc=$? $((SECONDS - t0)) s" >>"$R/jobs.log"
pkill -f launch_server; sleep 3; pkill -9 -f launch_server
for t in $(seq 300); do [ -e "$R/models.done" ] && [ -e "$R/fa3.ready" ] && break; sleep 1; done
tp() {  # tp NAME ARGS...: one server's varied-closed rows at 32 / 64 / 128, 16 s each
  local name=$1; shift; local t0=$SECONDS
  python3 -m bench.throughput traffic --models /tmp/models/8b/p0.2 --workloads varied-closed \
    --concurrency 32,64,128 --row-seconds 16 --port 30720 "$@" >"$R/$name.log" 2>&1
  echo "$name rc=$? $((SECONDS - t0)) s" >>"$R/jobs.log"
  pkill -f launch_server; sleep 2; pkill -9 -f launch_server
}
if [ -e "$R/fa3.ready" ]; then
  tp fa3-none --attention-backend fa3 --config none --out "$R/fa3" --profile-row varied-closed:64
  tp fa3-off --attention-backend fa3 --config off --out "$R/fa3" --profile-row varied-closed:64
  SPECCONSOLE_OFF_DRAFT_KV_ONLY_GRAPH=0 tp fa3-off-eagerkv --attention-backend fa3 --config off --out "$R/fa3-eagerkv"
fi
tp v1-none --worker v1 --config none --out "$R/v1" --profile-row varied-closed:64
tp v1-off --worker v1 --config off --out "$R/v1" --profile-row varied-closed:64
tp triton-none --attention-backend triton --config none --out "$R/triton"
tp triton-off --attention-backend triton --config off --out "$R/triton"
touch "$R/all.done"
