#!/usr/bin/env bash
# The second GPU run of 2026-12-02 (one H200): the EAGLE target's prefill on SGLang's piecewise CUDA
# graph (server_patch/prefill_graph.py, new) and the auto threshold's settling/accept rules, measured:
# no speculation and auto (p = 0.2) with the auto server forced off at 32/64/128 and both profiled on
# varied-closed:64; the same forced-off rows on a server whose target prefills stay eager (the
# before); KV-sensitive gate correctness on v2 (with the prefill-graph proof); then always at p = 0.2
# and auto/always at p = 0.5 while device time lasts.
#
#   bash bench/gpu_run_2026_12_02b.sh models     (carry .gpuwheels/A): wheels to /tmp/whl, the 8B pair
#                                                p = 0.2 and the KV-sensitive 1B pair into /tmp/models
#   bash bench/gpu_run_2026_12_02b.sh install    (carry .gpuwheels/B .devrun), then starts the chain
#                                                with setsid and waits like `wait`
#   bash bench/gpu_run_2026_12_02b.sh wait SECONDS   waits for all.done or SECONDS, packs $OUT/run.tgz
# .devrun: this project as a wheel (pip wheel --no-deps -w .devrun .), so SGLang finds the plugin.
set -uo pipefail
R=/tmp/run
step=${1:?step}; shift || true
env_sh() { source .gpuwheels/B/env.sh; }
case "$step" in
  models)
    mkdir -p /tmp/whl "$R" && cp .gpuwheels/A/*.whl /tmp/whl/ && ls /tmp/whl | wc -l
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
    export PYTHONUNBUFFERED=1
    python3 -m bench.synthetic_models --out /tmp/models/8b/p0.2 --preset 8b --p-wrong 0.2 --device cuda 2>&1 | tee "$R/models.log"
    python3 -m bench.synthetic_models --out /tmp/models/1b/kv-p0.2 --preset 1b --p-wrong 0.2 --kv-sensitive \
      --device cuda 2>&1 | tee -a "$R/models.log" ;;
  install)
    cp .gpuwheels/B/*.whl .devrun/*.whl /tmp/whl/
    bash .gpuwheels/B/install-on-gpu.sh || exit 1
    env_sh
    python3 -c "from importlib.metadata import entry_points as e, version as v; print('plugins:', [x.value for x in e(group='sglang.srt.plugins')], 'fastapi', v('fastapi'))"
    setsid bash bench/gpu_run_2026_12_02b.sh chain >"$R/chain.log" 2>&1 </dev/null &
    sleep 2
    bash bench/gpu_run_2026_12_02b.sh wait "${1:-420}" ;;
  chain)
    env_sh
    m=/tmp/models/8b
    # 1. none and auto (p = 0.2), auto forced off at 32/64/128; none and off profiled at varied-closed:64
    python3 -m bench.auto_run --pairs $m/p0.2 --configs none,auto --out "$R/auto" --concurrency 1,16,64,128 \
      --rates 4,16,48 --row-seconds 6 --off-levels 32,64,128 --profile-row varied-closed:64 --profile-delay 2.5 >"$R/auto.log" 2>&1
    touch "$R/auto.done"
    # 2. the before: forced off, target prefills eager (SGLang 0.5.12's own behaviour), same rows and profile
    SPECCONSOLE_TARGET_PREFILL_GRAPH=0 python3 -m bench.throughput traffic --models $m/p0.2 --config off \
      --workloads varied-closed --concurrency 32,64,128 --row-seconds 6 --profile-row varied-closed:64 --profile-delay 2.5 \
      --out "$R/off-eager" --port 30710 >"$R/off-eager.log" 2>&1
    touch "$R/off-eager.done"
    # 3. gate correctness on the KV-sensitive pair, v2 topk 1 alone (A-F and auto; the prefill-graph proof)
    python3 -m bench.gate_correctness --models /tmp/models/1b/kv-p0.2 --kv-sensitive --configs v2-topk1 \
      --parallel 1 --mem-fraction 0.3 --out "$R/gate-correctness-kv.json" --log-dir "$R/gate-logs" >"$R/gatekv.log" 2>&1
    touch "$R/gatekv.done"
    # 4. always at p = 0.2; then p = 0.5 auto and always (none does not depend on the draft)
    python3 -m bench.auto_run --pairs $m/p0.2 --configs always --out "$R/auto-always" --concurrency 1,16,64,128 \
      --rates 4,16,48 --row-seconds 6 --off-levels "" >"$R/auto-always.log" 2>&1
    touch "$R/auto-always.done"
    python3 -m bench.synthetic_models --out $m/p0.5 --preset 8b --p-wrong 0.5 --device cuda >>"$R/models.log" 2>&1
    python3 -m bench.auto_run --pairs $m/p0.5 --configs auto,always --out "$R/auto-p05" --concurrency 1,16,64,128 \
      --rates 4,16,48 --row-seconds 6 --off-levels "" >"$R/auto-p05.log" 2>&1
    touch "$R/all.done" ;;
  wait)
    limit=${1:-500}; t0=$SECONDS
    while [ $((SECONDS - t0)) -lt "$limit" ] && [ ! -e "$R/all.done" ]; do
      sleep 15
      echo "--- $((SECONDS - t0)) s: $(ls "$R" | tr '\n' ' ')"
      for f in chain auto off-eager gatekv auto-always auto-p05; do tail -n 2 "$R/$f.log" 2>/dev/null | cut -c1-240; done
    done
    tar czf "${OUT:-/tmp/out}/run.tgz" --exclude='work' --exclude='load' -C "$R" . 2>/dev/null
    ls -la "${OUT:-/tmp/out}" ;;
  *) echo "unknown step $step" >&2; exit 2 ;;
esac
