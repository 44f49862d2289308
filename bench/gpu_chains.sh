#!/usr/bin/env bash
# The throughput benchmark (bench/throughput.py) and the console's GPU check as two background
# chains, one per GPU of an nvidia-h200-x2 machine, so that they fit one session's device time.
# Each chain runs its servers one after another on its own GPU (CUDA_VISIBLE_DEVICES), so no two
# servers ever share a GPU (SGLang's KV sizing refuses that) and each timing has its GPU alone.
#
#   bash bench/gpu_chains.sh start          start both chains with setsid (they outlive the call)
#   bash bench/gpu_chains.sh wait SECONDS   wait until both are done or SECONDS passed, then pack
#                                           /tmp/chains into $OUT/chains.tgz and the server logs
#                                           into $OUT/server-logs.tgz
# Prerequisites: bench/gpu_session.sh install; models in /tmp/models/{1b/p0.2,8b/p0.2,8b/p0.5}.
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
  chain0)
    source .gpuwheels/B/env.sh
    python3 -m bench.throughput run --config none --models /tmp/models/8b/p0.2 --out "$R/gpu0" --port 30500
    python3 -m bench.throughput run --config always --models /tmp/models/8b/p0.2 --out "$R/gpu0" --port 30500
    python3 -m bench.throughput run --config always --models /tmp/models/8b/p0.5 --out "$R/gpu0" --port 30500 --no-time-varying
    touch "$R/chain0.done" ;;
  chain1)
    source .gpuwheels/B/env.sh
    python3 -m bench.throughput run --config gate --threshold 12 --recommend --recommend-thresholds 4,8,12,16 \
      --models /tmp/models/8b/p0.2 --out "$R/gpu1" --port 30600
    m=/tmp/models/1b/p0.2
    python3 -m console.headless_check --launch --timeout 300 --out "$R/console" --log-dir /tmp/specconsole-logs/console -- \
      --model-path $m/target --speculative-algorithm EAGLE3 --speculative-draft-model-path $m/draft \
      --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 \
      --max-running-requests 64 --cuda-graph-max-bs 64 --mem-fraction-static 0.5 \
      --attention-backend triton --sampling-backend pytorch --grammar-backend none --dtype bfloat16 \
      --port 30700 --speculative-disable-batch-threshold 16 --speculative-disable-hysteresis 2
    echo "headless_check exit $?"
    python3 -m bench.throughput run --config gate --threshold 8 --models /tmp/models/8b/p0.5 --out "$R/gpu1" --port 30600 --no-time-varying
    touch "$R/chain1.done" ;;
  wait)
    limit=${1:-500}; t0=$SECONDS
    while [ $((SECONDS - t0)) -lt "$limit" ] && ! { [ -e "$R/chain0.done" ] && [ -e "$R/chain1.done" ]; }; do
      sleep 20
      echo "--- $((SECONDS - t0)) s: $(ls "$R" | tr '\n' ' ')"
      for g in 0 1; do tail -n 2 "$R/chain$g.log" 2>/dev/null | cut -c1-200; done
    done
    tar czf "${OUT:-/tmp/out}/chains.tgz" -C "$R" . 2>/dev/null
    tar czf "${OUT:-/tmp/out}/server-logs.tgz" -C /tmp specconsole-logs 2>/dev/null
    ls -la "${OUT:-/tmp/out}" ;;
  *) echo "unknown step $step" >&2; exit 2 ;;
esac
