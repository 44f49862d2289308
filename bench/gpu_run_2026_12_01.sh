#!/usr/bin/env bash
# The GPU run of 2026-12-01 (one H200): the console against a real gated server in a real terminal
# (with --enable-metrics: the /v1/loads mend, the gate on /metrics, each rank's GPU against
# nvidia-smi), then the auto threshold against no speculation and always-on on realistic traffic
# with two draft qualities, then (if time is left) the shifting draft.
#
#   bash bench/gpu_run_2026_12_01.sh copy-a      (carry .gpuwheels/A)
#   bash bench/gpu_run_2026_12_01.sh install     (carry .gpuwheels/B .gpuwheels/C .devrun), then starts
#                                                the chain with setsid and waits like `wait`
#   bash bench/gpu_run_2026_12_01.sh wait SECONDS   waits for all.done or SECONDS, packs $OUT/run.tgz
# .devrun: this project as a wheel (pip wheel --no-deps -w .devrun .), so SGLang finds the plugin.
set -uo pipefail
R=/tmp/run
step=${1:?step}; shift || true
env_sh() { source .gpuwheels/B/env.sh; }
eagle3() {  # an 8B-shaped EAGLE-3 server on pair $1 (bench/server_harness.py's arguments)
  echo --model-path "$1/target" --speculative-algorithm EAGLE3 --speculative-draft-model-path "$1/draft" \
    --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 \
    --max-running-requests 128 --cuda-graph-max-bs 128 --mem-fraction-static 0.8 \
    --attention-backend triton --sampling-backend pytorch --grammar-backend none --dtype bfloat16 --log-level info
}
case "$step" in
  copy-a)
    mkdir -p /tmp/whl && cp .gpuwheels/A/*.whl /tmp/whl/ && ls /tmp/whl | wc -l
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv ;;
  install)
    cp .gpuwheels/B/*.whl .gpuwheels/C/*.whl .devrun/*.whl /tmp/whl/
    bash .gpuwheels/B/install-on-gpu.sh || exit 1
    env_sh
    python3 -c "from importlib.metadata import entry_points as e, version as v; print('plugins:', [x.value for x in e(group='sglang.srt.plugins')], 'fastapi', v('fastapi'), 'textual', v('textual'))"
    mkdir -p "$R"
    setsid bash bench/gpu_run_2026_12_01.sh chain >"$R/chain.log" 2>&1 </dev/null &
    sleep 2
    bash bench/gpu_run_2026_12_01.sh wait "${1:-420}" ;;
  chain)
    env_sh
    m=/tmp/models/8b
    python3 -m bench.synthetic_models --out $m/p0.2 --preset 8b --p-wrong 0.2 --device cuda >"$R/models.log" 2>&1
    python3 -m bench.synthetic_models --out $m/p0.5 --preset 8b --p-wrong 0.5 --device cuda >>"$R/models.log" 2>&1
    touch "$R/models.done"
    # 1. the console in a real terminal against a gated server with --enable-metrics
    python3 -m bench.console_terminal --out "$R/console" --levels 4,32,96 --seconds-per-level 25 --capture-every 5 \
      -- $(eagle3 $m/p0.2) --enable-metrics --speculative-disable-batch-threshold 32 --speculative-disable-hysteresis 4 \
      --host 127.0.0.1 --port 30000 >"$R/console.log" 2>&1
    touch "$R/console.done"
    # 2. auto threshold vs none / always on variable-length traffic, p = 0.2 then p = 0.5
    python3 -m bench.auto_run --pairs $m/p0.2,$m/p0.5 --out "$R/auto" --concurrency 1,16,64,128 \
      --rates 4,16,48 --row-seconds 6 >"$R/auto.log" 2>&1
    touch "$R/auto.done"
    # 3. the shifting draft: one auto server, prompt families with good and weak drafts in turn
    python3 -m bench.synthetic_models --out /tmp/models/1b/fam --preset 1b --families 2 --p-wrong-families 0.1,0.6 \
      --device cuda >>"$R/models.log" 2>&1
    python3 -m bench.auto_shift --models /tmp/models/1b/fam --out "$R/auto-shift.json" --concurrency 16 \
      --phase-seconds 30 >"$R/shift.log" 2>&1
    touch "$R/all.done" ;;
  wait)
    limit=${1:-500}; t0=$SECONDS
    while [ $((SECONDS - t0)) -lt "$limit" ] && [ ! -e "$R/all.done" ]; do
      sleep 15
      echo "--- $((SECONDS - t0)) s: $(ls "$R" | tr '\n' ' ')"
      for f in chain console auto shift; do tail -n 2 "$R/$f.log" 2>/dev/null | cut -c1-240; done
    done
    tar czf "${OUT:-/tmp/out}/run.tgz" --exclude='work' --exclude='load' -C "$R" . 2>/dev/null
    ls -la "${OUT:-/tmp/out}" ;;
  *) echo "unknown step $step" >&2; exit 2 ;;
esac
