#!/usr/bin/env bash
# The third GPU run of 2026-12-04 (one H200), bench/GPU_PLAN.md items 1-3: the v1 oracle with the lean
# v1 OFF step (gate_correctness on the KV-sensitive pair, alone on the GPU once the 8B pair is
# written), then issue 16's rows in one run without py-spy: fa3 / v1 / triton none and forced off at
# 32 / 64 / 128 (16 s rows), every OFF server with the CPU cuts built since the last run: the lean
# replay of the KV-only graph, the fused OFF verify metadata on fa3 (both opt-in), the cached 1-node
# verify tree (default); v1 off with the lean step; then the p = 0.5 pair on fa3 if time is left.
# An OFF server that fails with the opt-in cuts runs again without them (`-plain`).
# The steps models / install / part / wait are bench/gpu_run_2026_12_03c.sh's (same carries).
set -uo pipefail
export SELF=bench/gpu_run_2026_12_04c.sh
[ "${1:-}" = chain ] || exec bash bench/gpu_run_2026_12_03c.sh "$@"
R=/tmp/run
source .gpuwheels/B/env.sh
bash bench/gpu_run_2026_12_03c.sh heartbeat
v1lean() { SPECCONSOLE_OFF_LEAN_V1=1 SPECCONSOLE_OFF_PREFILL_KV_ONLY=1 SPECCONSOLE_OFF_KV_ONLY_LEAN_REPLAY=1 "$@"; }
replay() { SPECCONSOLE_OFF_KV_ONLY_LEAN_REPLAY=1 SPECCONSOLE_OFF_FA3_FUSED_VERIFY_METADATA=1 "$@"; }  # opt-in cuts
for t in $(seq 120); do [ -e "$R/models1b.done" ] && break; sleep 1; done
python3 -m bench.synthetic_models --out /tmp/models/1b/kv-p0.2 --preset 1b --p-wrong 0.2 --kv-sensitive \
  --device cuda >"$R/models-kv.log" 2>&1
for t in $(seq 300); do [ -e "$R/models.done" ] && break; sleep 1; done  # the 8B writer is done with the GPU
t0=$SECONDS
v1lean timeout -s INT -k 30 420 python3 -m bench.gate_correctness \
  --models /tmp/models/1b/kv-p0.2 --kv-sensitive --configs v1-topk1 --skip-auto \
  --out "$R/gate-correctness-v1-lean.json" --log-dir "$R/gate-logs" >"$R/gate.log" 2>&1
echo "gate-v1 rc=$? $((SECONDS - t0)) s" >>"$R/jobs.log"
pkill -f launch_server; sleep 3; pkill -9 -f launch_server
for t in $(seq 300); do [ -e "$R/fa3.ready" ] && break; sleep 1; done
tp() {  # tp NAME MODELS ARGS...: one server's varied-closed rows at 32 / 64 / 128, 16 s each; returns its rc
  local name=$1 models=$2 rc; shift 2; local t0=$SECONDS
  python3 -m bench.throughput traffic --models "$models" --workloads varied-closed \
    --concurrency 32,64,128 --row-seconds 16 --port 30720 "$@" >"$R/$name.log" 2>&1
  rc=$?
  echo "$name rc=$rc $((SECONDS - t0)) s" >>"$R/jobs.log"
  pkill -f launch_server; sleep 2; pkill -9 -f launch_server
  return $rc
}
offtp() {  # offtp WRAP NAME DIR MODELS ARGS...: forced off with the cuts of WRAP into $R/DIR; without them if that fails
  local wrap=$1 name=$2 dir=$3 models=$4; shift 4
  $wrap tp "$name" "$models" "$@" --config off --out "$R/$dir" || tp "$name-plain" "$models" "$@" --config off --out "$R/$dir-plain"
}
m=/tmp/models/8b/p0.2
if [ -e "$R/fa3.ready" ]; then
  tp fa3-none $m --attention-backend fa3 --config none --out "$R/fa3"
  offtp replay fa3-off fa3 $m --attention-backend fa3
fi
tp v1-none $m --worker v1 --config none --out "$R/v1"
offtp v1lean v1-off-lean v1 $m --worker v1
tp triton-none $m --attention-backend triton --config none --out "$R/triton"
offtp replay triton-off triton $m --attention-backend triton
python3 -m bench.synthetic_models --out /tmp/models/8b/p0.5 --preset 8b --p-wrong 0.5 --device cuda >"$R/models-p05.log" 2>&1
if [ -e "$R/fa3.ready" ]; then
  tp fa3-none-p05 /tmp/models/8b/p0.5 --attention-backend fa3 --config none --out "$R/fa3-p05"
  offtp replay fa3-off-p05 fa3-p05 /tmp/models/8b/p0.5 --attention-backend fa3
fi
touch "$R/all.done"
