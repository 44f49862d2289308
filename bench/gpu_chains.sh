#!/usr/bin/env bash
# The throughput benchmark (bench/throughput.py) and the TP=2 gate correctness as background jobs on
# the GPU machine, so that a session's device time goes to measuring, not to waiting on calls.
#
#   bash bench/gpu_chains.sh start          tp1, then chain0 on GPU 0, then tp2 if there are two GPUs,
#                                           with setsid (it outlives the call; all.done at the end)
#   bash bench/gpu_chains.sh kernels        the GPU kernel-equivalence test of the OFF attention (seconds)
#   bash bench/gpu_chains.sh start-tp1      the TP=1 gate correctness alone
#   bash bench/gpu_chains.sh start-tp2      the TP=2 gate correctness alone (start runs it after chain0)
#   bash bench/gpu_chains.sh start-p05      always-on + gate with the p=0.5 pair, one GPU each (last)
#   bash bench/gpu_chains.sh wait SECONDS [DONE-FILES]
#                                           wait until all.done (or DONE-FILES, e.g. tp2.done) is
#                                           done or SECONDS passed, then pack /tmp/chains (no
#                                           traces) into $OUT/chains.tgz and the server logs into
#                                           $OUT/server-logs.tgz
# Prerequisites: bench/gpu_session.sh install; models in /tmp/models/{1b/p0.2,8b/p0.2}.
# chain0 (GPU 0 alone, nothing else on the host meanwhile: speculative decoding at 1-8 requests is
#   CPU-bound, and a second job on the host moved its rows by 5-25% in x2-2026-11-30c): the
#   benchmark of issue #5 as one run on one GPU, 8B-shaped pair, p=0.2: no speculation, EAGLE-3
#   always on, the gate at threshold 48 (+ forced-off rows + the threshold sweep of --recommend).
# tp1 (both GPUs, first): gate correctness at TP=1 for v2-topk1, v1-topk1 and v1-topk4 with the
#   KV-only OFF draft extend (server_patch/draft_kv_only.py), ~4 min.
# tp2 (both GPUs, right after chain0 when started by `start`): gate correctness at TP=2 for
#   v2-topk1, v1-topk1 and v1-topk4 (TP2_CONFIGS).
# p05 (both GPUs, optional, last): always-on and the gate with the weak draft (p=0.5).
# Earlier sessions' chains (parallel per-GPU chains, the OFF-step A/B with profiles) are in git history.
set -uo pipefail
R=/tmp/chains
step=${1:?step}; shift || true
case "$step" in
  start)
    # the TP=1 gate correctness of all three configs first (both GPUs), then chain0 on GPU 0 alone,
    # then (two GPUs) the TP=2 gate correctness, with no idle gap in between waiting for a call
    mkdir -p "$R"
    setsid bash -c "bash bench/gpu_chains.sh tp1 >'$R/tp1.log' 2>&1
      bash bench/gpu_chains.sh kv-verdict >'$R/kv-verdict.log' 2>&1 || export SPECCONSOLE_OFF_DRAFT_KV_ONLY=0
      CUDA_VISIBLE_DEVICES=0 bash bench/gpu_chains.sh chain0 >'$R/chain0.log' 2>&1
      if [ \$(nvidia-smi -L | wc -l) -ge 2 ]; then bash bench/gpu_chains.sh tp2 >'$R/tp2.log' 2>&1; fi
      touch '$R/all.done'" </dev/null >/dev/null 2>&1 &
    sleep 2; echo "started: $(ls "$R")" ;;
  kv-verdict)
    # exit 0 when the TP=1 v2-topk1 run proved the KV-only OFF draft extend (else chain0 runs
    # the full one: SPECCONSOLE_OFF_DRAFT_KV_ONLY=0)
    python3 - "$R/gate-correctness-tp1-gpu0.json" <<'PY'
import json, sys
recs = {r["config"]: r for r in json.load(open(sys.argv[1]))}
r = recs.get("v2-topk1", {})
ok = (r.get("error") is None and r.get("oracle_match") is True
      and r.get("off_draft_extend") == "kv-only" and r.get("off_kv_only_proof_ok") is True)
print("kv-only proven" if ok else f"kv-only NOT proven: {r.get('error')} {r.get('off_draft_extend_reason')}")
sys.exit(0 if ok else 1)
PY
    ;;
  tp1)
    # gate correctness at TP=1 on the 1B pair: TP1_GPU0_CONFIGS (v2-topk1) on GPU 0, at once
    # (--mem-fraction-static 0.25 each when several: two at 0.4 do not fit one GPU), and the
    # TP1_GPU1_CONFIGS (both v1 configs) on GPU 1 one after the other; all three on GPU 0 with one
    # GPU. Every OFF step's draft extend is KV-only here
    source .gpuwheels/B/env.sh
    m=/tmp/models/1b/p0.2
    if [ $(nvidia-smi -L | wc -l) -ge 2 ]; then
      g0=${TP1_GPU0_CONFIGS:-v2-topk1}; n0=$(echo "$g0" | tr ',' '\n' | wc -l)
      CUDA_VISIBLE_DEVICES=0 python3 -m bench.gate_correctness --configs $g0 --parallel $n0 \
        --mem-fraction $([ "$n0" -eq 1 ] && echo 0.4 || echo 0.25) \
        --models $m --out "$R/gate-correctness-tp1-gpu0.json" --base-port 31000 &
      CUDA_VISIBLE_DEVICES=1 python3 -m bench.gate_correctness --configs ${TP1_GPU1_CONFIGS:-v1-topk1,v1-topk4} --parallel 1 --mem-fraction 0.4 \
        --models $m --out "$R/gate-correctness-tp1-gpu1.json" --base-port 31100
      wait
    else
      CUDA_VISIBLE_DEVICES=0 python3 -m bench.gate_correctness --configs v2-topk1,v1-topk1,v1-topk4 --parallel 3 \
        --mem-fraction 0.25 --models $m --out "$R/gate-correctness-tp1-gpu0.json" --base-port 31000
    fi
    touch "$R/tp1.done" ;;
  kernels)
    # seconds: the decode-kernel OFF attention against SGLang's kernels (must pass before the rest)
    source .gpuwheels/B/env.sh
    python3 -m pytest -q -p no:cacheprovider tests/test_gpu_off_attention.py 2>&1 | tee "$R/kernels.log" ;;
  chain0)
    source .gpuwheels/B/env.sh
    m=/tmp/models/8b/p0.2
    # --profile 64 (last in each run): five decode steps under SGLang's profiler, none vs OFF steps
    python3 -m bench.throughput run --config none --profile 64 --models $m --out "$R/gpu0" --port 30500
    python3 -m bench.throughput run --config always --models $m --out "$R/gpu0" --port 30500
    python3 -m bench.throughput run --config gate --threshold 48 --recommend --profile 64 --models $m --out "$R/gpu0" --port 30500
    touch "$R/chain0.done" ;;
  tp2)
    # both GPUs: started with setsid by `start-tp2`, results merged per config as each ends
    source .gpuwheels/B/env.sh
    python3 -m bench.gate_correctness --tp 2 --configs ${TP2_CONFIGS:-v2-topk1,v1-topk1,v1-topk4} --parallel 1 --mem-fraction 0.4 \
      --models /tmp/models/1b/p0.2 --out "$R/gate-correctness-tp2.json" --base-port 31200
    touch "$R/tp2.done" ;;
  p05)
    # optional, both GPUs after tp2: the weak draft (p=0.5); none does not depend on p (same target).
    # Two runs at once: their rows at 1-8 requests (CPU-bound) are not a clean comparison
    source .gpuwheels/B/env.sh
    export OMP_NUM_THREADS=8
    m=/tmp/models/8b/p0.5
    CUDA_VISIBLE_DEVICES=0 python3 -m bench.throughput run --config always --models $m --out "$R/p05" --port 30500 > "$R/p05-always.log" 2>&1 &
    CUDA_VISIBLE_DEVICES=1 python3 -m bench.throughput run --config gate --threshold 48 --models $m --out "$R/p05-gate" --port 30600 > "$R/p05-gate.log" 2>&1
    wait; touch "$R/p05.done" ;;
  start-p05)
    mkdir -p "$R"; setsid bash bench/gpu_chains.sh p05 >"$R/p05.log" 2>&1 </dev/null &
    sleep 2; echo "started p05" ;;
  start-tp1)
    mkdir -p "$R"; setsid bash bench/gpu_chains.sh tp1 >"$R/tp1.log" 2>&1 </dev/null &
    sleep 2; echo "started tp1" ;;
  start-tp2)
    mkdir -p "$R"; setsid bash bench/gpu_chains.sh tp2 >"$R/tp2.log" 2>&1 </dev/null &
    sleep 2; echo "started tp2" ;;
  wait)
    limit=${1:-500}; t0=$SECONDS
    want=${2:-all.done}
    done_all() { for f in $want; do [ -e "$R/$f" ] || return 1; done; }
    while [ $((SECONDS - t0)) -lt "$limit" ] && ! done_all; do
      sleep 20
      echo "--- $((SECONDS - t0)) s: $(ls "$R" | tr '\n' ' ')"
      for f in tp1 chain0 tp2 p05-always p05-gate; do tail -n 2 "$R/$f.log" 2>/dev/null | cut -c1-300; done
    done
    # profiler traces can be hundreds of MB (x2-2026-11-30c: 340 MB at 128 requests): not packed
    tar czf "${OUT:-/tmp/out}/chains.tgz" --exclude='*.trace.json*' -C "$R" . 2>/dev/null
    tar czf "${OUT:-/tmp/out}/server-logs.tgz" -C /tmp specconsole-logs 2>/dev/null
    ls -la "${OUT:-/tmp/out}" ;;
  *) echo "unknown step $step" >&2; exit 2 ;;
esac
