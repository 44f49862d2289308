#!/usr/bin/env bash
# The next GPU run (one H200), prepared on 2026-12-04 after h200-2026-12-04c (bench/GPU_PLAN.md):
# 1. the triton draft-extend mend for v1 (server_patch/triton_draft_extend.py) against the oracle,
#    phase A alone, three servers side by side: v1 topk 1 with the mend, v1 topk 1 without it (expected
#    1.3: the bug), v1 topk 4 with it; 2. if the mend holds, the lean v1 step's oracle (phases A-G)
#    and v1 topk 4's, side by side; 3. issue 16's opt-in OFF cuts A/B'd inside the run, alternating:
#    fa3 none, off, off + cuts, off, off + cuts. Rename it to its date when run. The steps models /
#    install / part / wait are bench/gpu_run_2026_12_03c.sh's (same carries).
set -uo pipefail
export SELF=bench/gpu_run_next.sh
[ "${1:-}" = chain ] || exec bash bench/gpu_run_2026_12_03c.sh "$@"
R=/tmp/run
source .gpuwheels/B/env.sh
bash bench/gpu_run_2026_12_03c.sh heartbeat
kv=/tmp/models/1b/kv-p0.2
for t in $(seq 120); do [ -e "$R/models1b.done" ] && break; sleep 1; done
python3 -m bench.synthetic_models --out $kv --preset 1b --p-wrong 0.2 --kv-sensitive --device cuda >"$R/models-kv.log" 2>&1
for t in $(seq 300); do [ -e "$R/models.done" ] && break; sleep 1; done  # the 8B writer is done with the GPU
gc() {  # gc NAME PORT ARGS...: one bench.gate_correctness run on the KV-sensitive pair (KV pool: $MAXTOK tokens)
  local name=$1 port=$2; shift 2
  SPECCONSOLE_BENCH_SERVER_ARGS="--max-total-tokens ${MAXTOK:-131072}" timeout -s INT -k 30 480 python3 -m bench.gate_correctness \
    --models $kv --kv-sensitive --mem-fraction 0.85 --base-port "$port" --out "$R/gate-$name.json" \
    --log-dir "$R/gate-logs/$name" "$@" >"$R/gate-$name.log" 2>&1
  echo "gate-$name rc=$? $(date +%T)" >>"$R/jobs.log"
}
# 1. the mend, phase A alone (SGLang builds FlashInfer's sampling kernels once: the first server pays)
MAXTOK=16384 gc mend-v1 31000 --configs v1-topk1 --forced-on-only &
sleep 20
MAXTOK=16384 SPECCONSOLE_TRITON_DRAFT_EXTEND_FIX=0 gc nomend-v1 31100 --configs v1-topk1 --forced-on-only &
MAXTOK=16384 gc mend-v1topk4 31200 --configs v1-topk4 --forced-on-only &
wait
pkill -f launch_server; sleep 3; pkill -9 -f launch_server
# 2. the lean v1 step's oracle and v1 topk 4's, with the mend (default on)
if grep -q '"forced_on_verify_ct_matches_oracle": true' "$R/gate-mend-v1.log"; then
  SPECCONSOLE_OFF_LEAN_V1=1 gc lean-v1 31300 --configs v1-topk1 --skip-auto &
  gc v1topk4 31400 --configs v1-topk4 --skip-auto &
  wait
  pkill -f launch_server; sleep 3; pkill -9 -f launch_server
fi
# 3. the opt-in OFF cuts against off without them, alternating, fa3 (8B pair, p = 0.2)
for t in $(seq 300); do [ -e "$R/fa3.ready" ] && break; sleep 1; done
tp() {  # tp NAME ARGS...: one server's varied-closed rows at 32 / 64 / 128, 16 s each
  local name=$1 t0=$SECONDS; shift
  python3 -m bench.throughput traffic --models /tmp/models/8b/p0.2 --workloads varied-closed \
    --concurrency 32,64,128 --row-seconds 16 --port 30720 --attention-backend fa3 --out "$R/$name" "$@" >"$R/$name.log" 2>&1
  echo "$name rc=$? $((SECONDS - t0)) s" >>"$R/jobs.log"
  pkill -f launch_server; sleep 2; pkill -9 -f launch_server
}
cuts() { SPECCONSOLE_OFF_KV_ONLY_LEAN_REPLAY=1 SPECCONSOLE_OFF_FA3_FUSED_VERIFY_METADATA=1 "$@"; }
if [ -e "$R/fa3.ready" ]; then
  tp fa3-none --config none
  tp fa3-off-1 --config off
  cuts tp fa3-cuts-1 --config off
  tp fa3-off-2 --config off
  cuts tp fa3-cuts-2 --config off
fi
touch "$R/all.done"
