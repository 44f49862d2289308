#!/usr/bin/env bash
# The fourth GPU run of 2026-12-04 (one H200), first of two this session: the oracle runs only, so
# that what they find can be mended before the A/B run (bench/gpu_run_next.sh):
# 1. the triton draft-extend mend for v1 (server_patch/triton_draft_extend.py), phase A alone, four
#    servers side by side: v1 topk 1 with the mend, without it (expected 1.3: the bug), v1 topk 4
#    with it, v1 topk 1 eager (the layout the mend copies); beside them the new v2 OFF levers
#    (deferred draft K/V, lean v2 verify; opt-in) on v2 triton, phases A-G;
# 2. if the mend holds, the lean v1 step's oracle (phases A-G) and v1 topk 4's, side by side.
# Steps and carries as bench/gpu_run_2026_12_03c.sh, without the FA3 pieces: models (.gpuwheels/A),
# install SECONDS (.gpuwheels/B .devrun), wait SECONDS. Only the 1B pairs are written (the 8B writer
# is stopped: the A/B run writes it).
set -uo pipefail
export SELF=bench/gpu_run_2026_12_04d.sh
[ "${1:-}" = chain ] || exec bash bench/gpu_run_2026_12_03c.sh "$@"
R=/tmp/run
source .gpuwheels/B/env.sh
bash bench/gpu_run_2026_12_03c.sh heartbeat
kv=/tmp/models/1b/kv-p0.2
for t in $(seq 120); do [ -e "$R/models1b.done" ] && break; sleep 1; done
pkill -f "preset 8b"; sleep 2
python3 -m bench.synthetic_models --out $kv --preset 1b --p-wrong 0.2 --kv-sensitive --device cuda >"$R/models-kv.log" 2>&1
gc() {  # gc NAME PORT ARGS...: one bench.gate_correctness run on the KV-sensitive pair (KV pool: $MAXTOK tokens)
  local name=$1 port=$2; shift 2
  SPECCONSOLE_BENCH_SERVER_ARGS="--max-total-tokens ${MAXTOK:-131072}" timeout -s INT -k 30 480 python3 -m bench.gate_correctness \
    --models $kv --kv-sensitive --mem-fraction 0.85 --base-port "$port" --out "$R/gate-$name.json" \
    --log-dir "$R/gate-logs/$name" "$@" >"$R/gate-$name.log" 2>&1
  echo "gate-$name rc=$? $(date +%T)" >>"$R/jobs.log"
}
# 1. (SGLang builds FlashInfer's sampling kernels once: the first server pays)
MAXTOK=16384 SPECCONSOLE_OFF_DEFERRED_DRAFT_KV=1 SPECCONSOLE_OFF_LEAN_V2_VERIFY=1 gc new-v2 31600 --configs v2-topk1 --skip-auto &
sleep 20
MAXTOK=16384 gc mend-v1 31000 --configs v1-topk1 --forced-on-only &
MAXTOK=16384 SPECCONSOLE_TRITON_DRAFT_EXTEND_FIX=0 gc nomend-v1 31100 --configs v1-topk1 --forced-on-only &
MAXTOK=16384 gc mend-v1topk4 31200 --configs v1-topk4 --forced-on-only &
MAXTOK=16384 gc eager-v1 31300 --configs v1-topk1 --forced-on-only -- --disable-cuda-graph &  # the layout the mend copies
wait
pkill -f launch_server; sleep 3; pkill -9 -f launch_server
# 2. the lean v1 step's oracle and v1 topk 4's, with the mend (default on)
if grep -q '"forced_on_verify_ct_matches_oracle": true' "$R/gate-mend-v1.log"; then
  MAXTOK=16384 SPECCONSOLE_OFF_LEAN_V1=1 gc lean-v1 31400 --configs v1-topk1 --skip-auto &
  MAXTOK=16384 gc v1topk4 31500 --configs v1-topk4 --skip-auto &
  wait
  pkill -f launch_server; sleep 3; pkill -9 -f launch_server
fi
touch "$R/all.done"
