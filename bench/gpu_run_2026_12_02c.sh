#!/usr/bin/env bash
# The third GPU run of 2026-12-02 (one H200): the console in a real terminal on variable-length load
# (issue 15), serving conditions for the patch (issue 18: KV-sensitive v1 correctness with phase G,
# retraction/aborts/radix churn, fa3 correctness, logprobs and sampled requests across switches,
# eager OFF steps), then the OFF mode's cost on fa3 and on v1 after the prefill graph (issue 16).
#
#   bash bench/gpu_run_2026_12_02c.sh models     (carry .gpuwheels/A): wheels to /tmp/whl, the 8B pair
#                                                p = 0.2 and the KV-sensitive 1B pair into /tmp/models
#   bash bench/gpu_run_2026_12_02c.sh install    (carry .gpuwheels/B .gpuwheels/C .devrun: the working
#                                                tree counts against the 64 MiB of a call),
#                                                then starts the chain with setsid and waits like `wait`
#   bash bench/gpu_run_2026_12_02c.sh part N SECONDS   (carry .gpuwheels/FN, N = 1..5): FA3's piece N;
#                                                once all five are there the kernel is unpacked; then waits
#   bash bench/gpu_run_2026_12_02c.sh wait SECONDS   waits for all.done or SECONDS, packs $OUT/run.tgz
# .devrun: this project as a wheel (pip wheel --no-deps -w .devrun .), so SGLang finds the plugin, and
# .devrun/head: the committed tree (git archive HEAD), where the console runs from.
set -uo pipefail
R=/tmp/run
F=/tmp/fa3parts
step=${1:?step}; shift || true
env_sh() { source .gpuwheels/B/env.sh; }
eagle3() {  # an 8B-shaped EAGLE-3 server on pair $1 (bench/server_harness.py's arguments)
  echo --model-path "$1/target" --speculative-algorithm EAGLE3 --speculative-draft-model-path "$1/draft" \
    --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 \
    --max-running-requests 128 --cuda-graph-max-bs 128 --mem-fraction-static 0.3 \
    --attention-backend triton --sampling-backend pytorch --grammar-backend none --dtype bfloat16 --log-level info
}
fa3_unpack() {  # all five pieces in order -> /tmp/fa3.zip -> sgl_kernel/flash_ops into /tmp/site
  for i in 0 1 2 3 4; do [ -f $F/part$i ] || return 0; done
  cat $F/part0 $F/part1 $F/part2 $F/part3 $F/part4 > /tmp/fa3.zip
  cp $F/fa3.md5 /tmp/fa3parts.md5 2>/dev/null
  (env_sh; bash $F/apply-fa3.sh) > "$R/fa3.log" 2>&1 && touch "$R/fa3.ready"
  cat "$R/fa3.log"
}
case "$step" in
  models)
    mkdir -p /tmp/whl "$R" && cp .gpuwheels/A/*.whl /tmp/whl/ && ls /tmp/whl | wc -l
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
    export PYTHONUNBUFFERED=1
    python3 -m bench.synthetic_models --out /tmp/models/8b/p0.2 --preset 8b --p-wrong 0.2 --device cuda 2>&1 | tail -n 3 | tee "$R/models.log"
    python3 -m bench.synthetic_models --out /tmp/models/1b/kv-p0.2 --preset 1b --p-wrong 0.2 --kv-sensitive \
      --device cuda 2>&1 | tail -n 3 | tee -a "$R/models.log" ;;
  install)
    mkdir -p $F
    cp .gpuwheels/B/*.whl .gpuwheels/C/*.whl .devrun/*.whl /tmp/whl/
    bash .gpuwheels/B/install-on-gpu.sh || exit 1
    env_sh
    python3 -c "from importlib.metadata import entry_points as e, version as v; print('plugins:', [x.value for x in e(group='sglang.srt.plugins')], 'fastapi', v('fastapi'), 'textual', v('textual'), 'pyte', v('pyte'))"
    setsid bash bench/gpu_run_2026_12_02c.sh chain >"$R/chain.log" 2>&1 </dev/null &
    sleep 2
    bash bench/gpu_run_2026_12_02c.sh wait "${1:-30}" ;;
  part)
    n=${1:?piece}; shift
    mkdir -p $F && cp .gpuwheels/F$n/* $F/ && ls -la $F
    fa3_unpack
    bash bench/gpu_run_2026_12_02c.sh wait "${1:-20}" ;;
  chain)
    env_sh
    m=/tmp/models/8b; kv=/tmp/models/1b/kv-p0.2
    # A. the console in a real terminal (its tok/s is compared with the same server's own figures);
    #    beside it, once its server is up, the correctness runs one at a time. SGLang sizes its KV pool
    #    as free memory - total x (1 - mem fraction), so a server started next to the console's
    #    (~45 GB) needs a fraction above ~0.35: 0.5 each (none of this is a throughput figure)
    (cd .devrun/head && python3 -m bench.console_terminal --out "$R/console" --lengths varied --levels 4,32,96 --seconds-per-level 30 \
      --capture-every 5 -- $(eagle3 $m/p0.2) --enable-metrics --speculative-disable-batch-threshold 32 \
      --speculative-disable-hysteresis 4 --host 127.0.0.1 --port 30000 >"$R/console.log" 2>&1) &
    for t in $(seq 120); do grep -q "ready after" "$R/console.log" 2>/dev/null && break; sleep 3; done
    python3 -m bench.churn_correctness --models $kv --kv-sensitive --configs v2-topk1 --mem-fraction 0.5 \
      --out "$R/gate-churn.json" --log-dir "$R/churn-logs" >"$R/churn.log" 2>&1
    python3 -m bench.logprob_switch --models $kv --kv-sensitive --configs v2-topk1 --mem-fraction 0.5 \
      --out "$R/gate-logprobs.json" --log-dir "$R/logprob-logs" >"$R/logprob.log" 2>&1
    python3 -m bench.gate_correctness --models $kv --kv-sensitive --configs v1-topk1 --parallel 1 --skip-auto \
      --mem-fraction 0.5 --out "$R/gate-correctness-kv.json" --log-dir "$R/gate-logs" >"$R/gatekv.log" 2>&1
    wait
    touch "$R/A.done"
    # C. throughput, one server at a time: forced off vs none on fa3 (v2), then on v1 (both without overlap)
    for t in $(seq 60); do [ -e "$R/fa3.ready" ] && break; sleep 5; done
    if [ -e "$R/fa3.ready" ]; then
      for cfg in none off; do
        python3 -m bench.throughput traffic --models $m/p0.2 --config $cfg --attention-backend fa3 \
          --workloads varied-closed --concurrency 32,64,128 --row-seconds 6 --out "$R/fa3" --port 30720 \
          >"$R/fa3-$cfg.log" 2>&1
      done
    fi
    touch "$R/C.done"
    python3 -m bench.logprob_switch --models $kv --kv-sensitive --configs v1-topk1,v1-topk4 --parallel 1 --mem-fraction 0.3 \
      --out "$R/gate-logprobs.json" --log-dir "$R/logprob-logs" >"$R/logprob-v1.log" 2>&1
    for cfg in none off; do
      python3 -m bench.throughput traffic --models $m/p0.2 --config $cfg --worker v1 \
        --workloads varied-closed --concurrency 32,64,128 --row-seconds 6 --out "$R/v1" --port 30730 \
        >"$R/v1-$cfg.log" 2>&1
    done
    touch "$R/all.done" ;;
  wait)
    limit=${1:-500}; t0=$SECONDS
    while [ $((SECONDS - t0)) -lt "$limit" ] && [ ! -e "$R/all.done" ]; do
      sleep 10
      echo "--- $((SECONDS - t0)) s: $(ls "$R" | tr '\n' ' ')"
      for f in chain console churn logprob gatekv fa3-none fa3-off logprob-v1 v1-none v1-off; do
        [ -s "$R/$f.log" ] && echo "$f: $(tail -n 1 "$R/$f.log" | cut -c1-200)"
      done
    done
    tar czf "${OUT:-/tmp/out}/run.tgz" --exclude='work' --exclude='load' -C "$R" . 2>/dev/null
    ls -la "${OUT:-/tmp/out}" ;;
  *) echo "unknown step $step" >&2; exit 2 ;;
esac
