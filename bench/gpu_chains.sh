#!/usr/bin/env bash
# The throughput benchmark (bench/throughput.py) and the console's GPU check as two background
# chains, one per GPU of an nvidia-h200-x2 machine, so that they fit one session's device time.
# Each chain runs its servers one after another on its own GPU (CUDA_VISIBLE_DEVICES), so no two
# servers ever share a GPU (SGLang's KV sizing refuses that) and each timing has its GPU alone.
#
#   bash bench/gpu_chains.sh start          start both chains with setsid (they outlive the call)
#   bash bench/gpu_chains.sh kernels        the GPU kernel-equivalence test of the OFF attention (seconds)
#   bash bench/gpu_chains.sh start-one      plan B on a one-GPU machine: chain0 then chain1 on GPU 0
#   bash bench/gpu_chains.sh start-tp2      the TP=2 gate correctness on both GPUs (after the chains)
#   bash bench/gpu_chains.sh start-p05      always-on + gate with the p=0.5 pair, one GPU each (last)
#   bash bench/gpu_chains.sh wait SECONDS [DONE-FILES]
#                                           wait until the chains (or DONE-FILES, e.g. tp2.done)
#                                           are done or SECONDS passed, then pack
#                                           /tmp/chains into $OUT/chains.tgz and the server logs
#                                           into $OUT/server-logs.tgz
# Prerequisites: bench/gpu_session.sh install; models in /tmp/models/{1b/p0.2,8b/p0.2}.
# chain0 (GPU 0): the benchmark of issue #5 on one GPU, one config after the other (8B pair,
#   p=0.2): no speculation, EAGLE-3 always on, the gate at threshold 24 + forced-off rows +
#   threshold sweep.
# chain1 (GPU 1): gate correctness v2-topk1 (the v2 OFF step's early next-batch seq_lens), then an
#   A/B of the OFF step on one GPU: no speculation, gate forced off with SPECCONSOLE_OFF_EARLY_SEQ_LENS=0,
#   gate forced off as shipped, at 16/32/64/128 requests.
# tp2 (both GPUs, after the chains): gate correctness at TP=2 for v2-topk1 and v1-topk1.
# p05 (both GPUs, optional, last): always-on and the gate with the weak draft (p=0.5).
# The 2026-11-30 runs' chains are in git history.
set -uo pipefail
R=/tmp/chains
step=${1:?step}; shift || true
case "$step" in
  start)
    mkdir -p "$R"
    for g in 0 1; do
      CUDA_VISIBLE_DEVICES=$g setsid bash bench/gpu_chains.sh "chain$g" >"$R/chain$g.log" 2>&1 </dev/null &
    done
    sleep 2; echo "started: $(ls "$R")" ;;
  kernels)
    # seconds: the decode-kernel OFF attention against SGLang's kernels (must pass before the rest)
    source .gpuwheels/B/env.sh
    python3 -m pytest -q -p no:cacheprovider tests/test_gpu_off_attention.py 2>&1 | tee "$R/kernels.log" ;;
  chain0)
    source .gpuwheels/B/env.sh
    export OMP_NUM_THREADS=8  # two chains share the host's 32 cores
    m=/tmp/models/8b/p0.2
    python3 -m bench.throughput run --config none --models $m --out "$R/gpu0" --port 30500
    python3 -m bench.throughput run --config always --models $m --out "$R/gpu0" --port 30500
    python3 -m bench.throughput run --config gate --threshold 24 --recommend --recommend-thresholds 12,17,24,32 \
      --recommend-levels 1,8,16,32 --models $m --out "$R/gpu0" --port 30500
    touch "$R/chain0.done" ;;
  chain1)
    source .gpuwheels/B/env.sh
    export OMP_NUM_THREADS=8
    python3 -m bench.gate_correctness --configs v2-topk1 --parallel 1 --mem-fraction 0.4 \
      --models /tmp/models/1b/p0.2 --out "$R/gate-correctness-gpu1.json" --base-port 31100
    # --profile 128: a few decode steps under SGLang's profiler (GPU busy vs waiting for the CPU)
    m=/tmp/models/8b/p0.2; ab="--concurrency 16,32,64,128 --no-time-varying --profile 128 --models $m --port 30600"
    python3 -m bench.throughput run --config none $ab --out "$R/ab-none"
    SPECCONSOLE_OFF_EARLY_SEQ_LENS=0 python3 -m bench.throughput run --config gate --threshold 1 --hysteresis 0 $ab --out "$R/ab-off-late"
    python3 -m bench.throughput run --config gate --threshold 1 --hysteresis 0 $ab --out "$R/ab-off-early"
    touch "$R/chain1.done" ;;
  tp2)
    # both GPUs: started with setsid by `start-tp2`, results merged per config as each ends
    source .gpuwheels/B/env.sh
    python3 -m bench.gate_correctness --tp 2 --configs v2-topk1,v1-topk1 --parallel 1 --mem-fraction 0.4 \
      --models /tmp/models/1b/p0.2 --out "$R/gate-correctness-tp2.json" --base-port 31200
    touch "$R/tp2.done" ;;
  start-one)
    # plan B on a one-GPU machine: both chains one after the other on GPU 0
    mkdir -p "$R"
    CUDA_VISIBLE_DEVICES=0 setsid bash -c "bash bench/gpu_chains.sh chain0 > $R/chain0.log 2>&1; bash bench/gpu_chains.sh chain1 > $R/chain1.log 2>&1" </dev/null >/dev/null 2>&1 &
    sleep 2; echo "started chain0 then chain1 on GPU 0" ;;
  p05)
    # optional, both GPUs after tp2: the weak draft (p=0.5); none does not depend on p (same target)
    source .gpuwheels/B/env.sh
    export OMP_NUM_THREADS=8
    m=/tmp/models/8b/p0.5
    CUDA_VISIBLE_DEVICES=0 python3 -m bench.throughput run --config always --models $m --out "$R/p05" --port 30500 > "$R/p05-always.log" 2>&1 &
    CUDA_VISIBLE_DEVICES=1 python3 -m bench.throughput run --config gate --threshold 24 --models $m --out "$R/p05-gate" --port 30600 > "$R/p05-gate.log" 2>&1
    wait; touch "$R/p05.done" ;;
  start-p05)
    mkdir -p "$R"; setsid bash bench/gpu_chains.sh p05 >"$R/p05.log" 2>&1 </dev/null &
    sleep 2; echo "started p05" ;;
  start-tp2)
    mkdir -p "$R"; setsid bash bench/gpu_chains.sh tp2 >"$R/tp2.log" 2>&1 </dev/null &
    sleep 2; echo "started tp2" ;;
  wait)
    limit=${1:-500}; t0=$SECONDS
    want=${2:-chain0.done chain1.done}
    done_all() { for f in $want; do [ -e "$R/$f" ] || return 1; done; }
    while [ $((SECONDS - t0)) -lt "$limit" ] && ! done_all; do
      sleep 20
      echo "--- $((SECONDS - t0)) s: $(ls "$R" | tr '\n' ' ')"
      for f in chain0 chain1 tp2 p05-always p05-gate; do tail -n 2 "$R/$f.log" 2>/dev/null | cut -c1-200; done
    done
    tar czf "${OUT:-/tmp/out}/chains.tgz" -C "$R" . 2>/dev/null
    tar czf "${OUT:-/tmp/out}/server-logs.tgz" -C /tmp specconsole-logs 2>/dev/null
    ls -la "${OUT:-/tmp/out}" ;;
  *) echo "unknown step $step" >&2; exit 2 ;;
esac
