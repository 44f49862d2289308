#!/usr/bin/env bash
# The second GPU run of 2026-12-04 (one H200), prepared the same day from bench/GPU_PLAN.md: issue 16's CPU side by
# function (py-spy on the scheduler during the 64 row: --cpu-profile-row; carry the py-spy wheel in
# .gpuwheels/B) and the OFF path's CPU cuts, opt-in and measured together first ("lean": the KV-only
# draft prefill while OFF, SPECCONSOLE_OFF_PREFILL_KV_ONLY=1; the lean draft-extend post-processing,
# SPECCONSOLE_OFF_LEAN_DRAFT_EXTEND=1; on fa3 the KV-only graph, SPECCONSOLE_OFF_DRAFT_KV_ONLY_GRAPH=1,
# which the lean post-processing needs; on v1 the lean OFF step, SPECCONSOLE_OFF_LEAN_V1=1): their
# gate-correctness proof on the KV-sensitive pair (v2 topk 1, v1 topk 1, phases A-G: G prefills while
# OFF and resumes), then fa3 none / off-lean, v1 none / off-lean, fa3 and v1 off as before, triton
# off-lean, each ~3 min. The steps models / install / part /
# wait are bench/gpu_run_2026_12_03c.sh's (same carries); only the chain is this run's.
set -uo pipefail
export SELF=bench/gpu_run_2026_12_04b.sh
[ "${1:-}" = chain ] || exec bash bench/gpu_run_2026_12_03c.sh "$@"
R=/tmp/run
source .gpuwheels/B/env.sh
bash bench/gpu_run_2026_12_03c.sh heartbeat
which py-spy >"$R/pyspy.log" 2>&1 || echo "no py-spy: the rows run, the CPU profiles say why" >>"$R/pyspy.log"
lean() { SPECCONSOLE_OFF_PREFILL_KV_ONLY=1 SPECCONSOLE_OFF_LEAN_DRAFT_EXTEND=1 SPECCONSOLE_OFF_DRAFT_KV_ONLY_GRAPH=1 \
  SPECCONSOLE_OFF_LEAN_V1=1 "$@"; }
for t in $(seq 120); do [ -e "$R/models1b.done" ] && break; sleep 1; done
t0=$SECONDS
python3 -m bench.synthetic_models --out /tmp/models/1b/kv-p0.2 --preset 1b --p-wrong 0.2 --kv-sensitive \
  --device cuda >"$R/models-kv.log" 2>&1
lean timeout -s INT -k 30 540 python3 -m bench.gate_correctness \
  --models /tmp/models/1b/kv-p0.2 --kv-sensitive --configs v2-topk1,v1-topk1 --skip-auto \
  --out "$R/gate-correctness-lean.json" --log-dir "$R/gate-logs" >"$R/gate.log" 2>&1
echo "gate rc=$? $((SECONDS - t0)) s" >>"$R/jobs.log"
pkill -f launch_server; sleep 3; pkill -9 -f launch_server
for t in $(seq 300); do [ -e "$R/models.done" ] && [ -e "$R/fa3.ready" ] && break; sleep 1; done
tp() {  # tp NAME ARGS...: one server's varied-closed rows at 32 / 64 / 128, 16 s each, py-spy at 64
  local name=$1; shift; local t0=$SECONDS
  python3 -m bench.throughput traffic --models /tmp/models/8b/p0.2 --workloads varied-closed \
    --concurrency 32,64,128 --row-seconds 16 --port 30720 --cpu-profile-row varied-closed:64 "$@" >"$R/$name.log" 2>&1
  echo "$name rc=$? $((SECONDS - t0)) s" >>"$R/jobs.log"
  pkill -f launch_server; sleep 2; pkill -9 -f launch_server
}
# most wanted first (the device time may end before the last): lean against none, then off as before
if [ -e "$R/fa3.ready" ]; then
  tp fa3-none --attention-backend fa3 --config none --out "$R/fa3"
  lean tp fa3-off-lean --attention-backend fa3 --config off --out "$R/fa3-lean"
fi
tp v1-none --worker v1 --config none --out "$R/v1"
lean tp v1-off-lean --worker v1 --config off --out "$R/v1-lean"
[ -e "$R/fa3.ready" ] && tp fa3-off --attention-backend fa3 --config off --out "$R/fa3"
tp v1-off --worker v1 --config off --out "$R/v1"
lean tp triton-off-lean --attention-backend triton --config off --out "$R/triton-lean"
touch "$R/all.done"
