#!/usr/bin/env bash
# The next GPU run (one H200), prepared on 2026-12-04 after h200-2026-12-04c (bench/GPU_PLAN.md):
# 1. the triton draft-extend mend for v1 (server_patch/triton_draft_extend.py) against the oracle,
#    phase A alone, four servers side by side: v1 topk 1 with the mend, v1 topk 1 without it (expected
#    1.3: the bug), v1 topk 4 with it, v1 topk 1 eager (the layout the mend copies); beside them the
#    deferred draft K/V (server_patch/deferred_draft_kv.py, opt-in) on v2 triton, phases A-G;
#    2. if the mend holds, the lean v1 step's oracle (phases A-G) and v1 topk 4's, and the deferred
#    draft K/V on v2 fa3, side by side; 3. A/B inside the run with bench.ab_traffic (both servers up,
#    rows alternated, 2 repeats): fa3 forced off with the deferred draft K/V against off without it,
#    then against no speculation. Rename it to its date when run. The steps models / install / part /
#    wait are bench/gpu_run_2026_12_03c.sh's (same carries).
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
# the OFF levers new since h200-2026-12-04c (opt-in): deferred draft K/V and the lean v2 verify
NEW="SPECCONSOLE_OFF_DEFERRED_DRAFT_KV=1 SPECCONSOLE_OFF_LEAN_V2_VERIFY=1"  # ab's --b-env; gc calls spell them out
# 1. the mend, phase A alone (SGLang builds FlashInfer's sampling kernels once: the first server pays),
#    beside the new OFF levers' oracle on v2 triton (phases A-G)
MAXTOK=16384 gc mend-v1 31000 --configs v1-topk1 --forced-on-only &
sleep 20
MAXTOK=16384 SPECCONSOLE_TRITON_DRAFT_EXTEND_FIX=0 gc nomend-v1 31100 --configs v1-topk1 --forced-on-only &
MAXTOK=16384 gc mend-v1topk4 31200 --configs v1-topk4 --forced-on-only &
MAXTOK=16384 gc eager-v1 31300 --configs v1-topk1 --forced-on-only -- --disable-cuda-graph &  # the layout the mend copies
MAXTOK=16384 SPECCONSOLE_OFF_DEFERRED_DRAFT_KV=1 SPECCONSOLE_OFF_LEAN_V2_VERIFY=1 gc new-v2 31600 --configs v2-topk1 --skip-auto &
wait
pkill -f launch_server; sleep 3; pkill -9 -f launch_server
# 2. the new levers' oracle on fa3; the lean v1 step's oracle and v1 topk 4's, with the mend (default on)
for t in $(seq 300); do [ -e "$R/fa3.ready" ] && break; sleep 1; done
if [ -e "$R/fa3.ready" ]; then
  MAXTOK=16384 SPECCONSOLE_OFF_DEFERRED_DRAFT_KV=1 SPECCONSOLE_OFF_LEAN_V2_VERIFY=1 gc new-v2-fa3 31700 \
    --configs v2-topk1 --skip-auto -- --attention-backend fa3 &
fi
if grep -q '"forced_on_verify_ct_matches_oracle": true' "$R/gate-mend-v1.log"; then
  MAXTOK=16384 SPECCONSOLE_OFF_LEAN_V1=1 gc lean-v1 31400 --configs v1-topk1 --skip-auto &
  MAXTOK=16384 gc v1topk4 31500 --configs v1-topk4 --skip-auto &
fi
wait
pkill -f launch_server; sleep 3; pkill -9 -f launch_server
# 3. A/B inside the run, both servers up at once, rows alternated (bench.ab_traffic), 8B pair, p = 0.2:
#    fa3 forced off with the new levers against off without them, then against no speculation; then
#    v1 off (lean, if its oracle held) against v1 none
ab() {  # ab NAME ARGS...: one bench.ab_traffic run
  local name=$1 t0=$SECONDS; shift
  python3 -m bench.ab_traffic --models /tmp/models/8b/p0.2 --repeats 2 --workloads varied-closed \
    --out "$R/$name" "$@" >"$R/$name.log" 2>&1
  echo "$name rc=$? $((SECONDS - t0)) s" >>"$R/jobs.log"
  pkill -f launch_server; sleep 2; pkill -9 -f launch_server
}
newenv=()
for v in $NEW; do newenv+=(--b-env "$v"); done
ran_ok() { grep -q '"oracle_match": true' "$R/gate-$1.log" && ! grep -q '"error": "' "$R/gate-$1.log"; }
if [ -e "$R/fa3.ready" ]; then
  if ran_ok new-v2-fa3 || ran_ok new-v2; then
    ab ab-fa3-new --attention-backend fa3 --a off --b off "${newenv[@]}"
    ab ab-fa3-none --attention-backend fa3 --a none --b off "${newenv[@]}"
  else
    ab ab-fa3-none --attention-backend fa3 --a none --b off
  fi
fi
if ran_ok lean-v1; then
  ab ab-v1-lean --worker v1 --a none --b off --b-env SPECCONSOLE_OFF_LEAN_V1=1
fi
touch "$R/all.done"
