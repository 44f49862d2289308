#!/usr/bin/env bash
# The next GPU run (one H200), prepared on 2026-12-04 from bench/GPU_PLAN.md items 1-3: the v1 oracle
# with the lean v1 OFF step and the KV-only draft prefill (gate_correctness on the KV-sensitive pair,
# alone on the GPU once the 8B pair is written: on 2026-12-04b it ran beside the writer and found no
# memory), then issue 16's rows in one run without py-spy: fa3 / triton / v1 none and off at 32 / 64
# / 128, v1 off with the lean step; the lean replay of the KV-only graph and (fa3) the fused OFF verify
# metadata (both opt-in) on the OFF servers;
# then the p = 0.5 pair on fa3 if time is left. Rename it to its date when run. The steps models /
# install / part / wait are bench/gpu_run_2026_12_03c.sh's (same carries).
set -uo pipefail
export SELF=bench/gpu_run_next.sh
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
tp() {  # tp NAME MODELS ARGS...: one server's varied-closed rows at 32 / 64 / 128, 16 s each
  local name=$1 models=$2; shift 2; local t0=$SECONDS
  python3 -m bench.throughput traffic --models "$models" --workloads varied-closed \
    --concurrency 32,64,128 --row-seconds 16 --port 30720 "$@" >"$R/$name.log" 2>&1
  echo "$name rc=$? $((SECONDS - t0)) s" >>"$R/jobs.log"
  pkill -f launch_server; sleep 2; pkill -9 -f launch_server
}
m=/tmp/models/8b/p0.2
if [ -e "$R/fa3.ready" ]; then
  tp fa3-none $m --attention-backend fa3 --config none --out "$R/fa3"
  replay tp fa3-off $m --attention-backend fa3 --config off --out "$R/fa3"
fi
tp v1-none $m --worker v1 --config none --out "$R/v1"
v1lean tp v1-off-lean $m --worker v1 --config off --out "$R/v1"
tp triton-none $m --attention-backend triton --config none --out "$R/triton"
replay tp triton-off $m --attention-backend triton --config off --out "$R/triton"
python3 -m bench.synthetic_models --out /tmp/models/8b/p0.5 --preset 8b --p-wrong 0.5 --device cuda >"$R/models-p05.log" 2>&1
if [ -e "$R/fa3.ready" ]; then
  tp fa3-none-p05 /tmp/models/8b/p0.5 --attention-backend fa3 --config none --out "$R/fa3-p05"
  replay tp fa3-off-p05 /tmp/models/8b/p0.5 --attention-backend fa3 --config off --out "$R/fa3-p05"
fi
touch "$R/all.done"
