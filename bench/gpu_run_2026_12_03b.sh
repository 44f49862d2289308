#!/usr/bin/env bash
# The second GPU run of 2026-12-03 (one H200), on the ~9 minutes of device time left: what stage B of
# bench/gpu_run_2026_12_03.sh could not finish because the scheduler sat in FlashInfer's JIT build of
# its sampling module at the first sampled verify (server_patch/sampling_warmup.py now builds it at
# start-up): the OFF-step sampling proof, v2 logprobs under threshold flips with SGLang's soft
# watchdog (the "stall"), v1 topk 4 logprobs. All five servers together (1B pairs, 16384-token pools).
#
#   bash bench/gpu_run_2026_12_03b.sh models          (carry .gpuwheels/A): wheels, the 1B pairs in the background
#   bash bench/gpu_run_2026_12_03b.sh install SECONDS  (carry .gpuwheels/B .gpuwheels/C .devrun): install, the
#                                                      chain (setsid), then wait
#   bash bench/gpu_run_2026_12_03b.sh wait SECONDS     $OUT/run.tgz is rewritten every 10 s (a call cut at the
#                                                      device-time limit still brings the latest back)
set -uo pipefail
R=/tmp/run
step=${1:?step}; shift || true
env_sh() { source .gpuwheels/B/env.sh; }
job() {  # job NAME LIMIT_S CMD...
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout -s INT -k 30 "$limit" "$@" >"$R/$name.log" 2>&1
  echo "$name rc=$? $((SECONDS - t0)) s" >>"$R/jobs.log"
}
case "$step" in
  models)
    mkdir -p /tmp/whl "$R" && cp .gpuwheels/A/*.whl /tmp/whl/
    setsid bash -c 'python3 -m bench.synthetic_models --out /tmp/models/1b/kv-p0.2 --preset 1b --p-wrong 0.2 --kv-sensitive --device cuda 2>&1 | tail -n 2
      python3 -m bench.synthetic_models --out /tmp/models/1b/p0.2 --preset 1b --p-wrong 0.2 --device cuda 2>&1 | tail -n 2
      touch /tmp/run/models.done' >"$R/models.log" 2>&1 </dev/null &
    sleep 1 ;;
  install)
    cp .gpuwheels/B/*.whl .gpuwheels/C/*.whl .devrun/*.whl /tmp/whl/
    bash .gpuwheels/B/install-on-gpu.sh >"$R/install.log" 2>&1 || { tail "$R/install.log"; exit 1; }
    setsid bash bench/gpu_run_2026_12_03b.sh chain >"$R/chain.log" 2>&1 </dev/null &
    bash bench/gpu_run_2026_12_03b.sh wait "${1:-20}" ;;
  chain)
    env_sh
    kv=/tmp/models/1b/kv-p0.2; p02=/tmp/models/1b/p0.2
    (while [ ! -e "$R/all.done" ]; do
       echo "$(date +%T) cpu $(head -n 1 /proc/pressure/cpu) load $(cut -d' ' -f1-3 /proc/loadavg)"; sleep 1; done) >"$R/heartbeat.log" 2>&1 &
    for t in $(seq 120); do [ -e "$R/models.done" ] && break; sleep 1; done
    export SPECCONSOLE_BENCH_SERVER_ARGS="--max-total-tokens 16384"
    kvrun() { echo --models $kv --kv-sensitive --mem-fraction 0.85; }
    jobs_b=()
    job sampling 400 python3 -m bench.sampling_distribution --models $p02 --mem-fraction 0.85 --port 31300 \
      --out "$R/sampling.json" --log-dir "$R/logs/sampling" & jobs_b+=($!)
    SPECCONSOLE_BENCH_SERVER_ARGS="--max-total-tokens 16384 --soft-watchdog-timeout 20" SGLANG_LOG_FORWARD_ITERS=1 \
      job stall-2 400 python3 -m bench.logprob_switch $(kvrun) --configs v2-topk1 --port 31500 \
      --out "$R/gate-logprobs-stall2.json" --log-dir "$R/logs/stall2" & jobs_b+=($!)
    job logprobs-v1topk4 400 python3 -m bench.logprob_switch $(kvrun) --configs v1-topk4 --port 31540 \
      --out "$R/gate-logprobs-v1topk4.json" --log-dir "$R/logs/logprobs" & jobs_b+=($!)
    wait "${jobs_b[@]}"
    touch "$R/all.done" ;;
  wait)
    limit=${1:-500}; t0=$SECONDS
    while [ $((SECONDS - t0)) -lt "$limit" ] && [ ! -e "$R/all.done" ]; do
      sleep 10
      echo "--- $((SECONDS - t0)) s: $(tr '\n' ';' <"$R/jobs.log" 2>/dev/null) $(tail -n 1 "$R/heartbeat.log" 2>/dev/null)"
      tar czf "${OUT:-/tmp/out}/run.tgz" -C "$R" . 2>/dev/null
    done
    grep -h "sampled verify kernels\|warming the sampled" "$R"/logs/*/*.log 2>/dev/null | head -n 5
    tar czf "${OUT:-/tmp/out}/run.tgz" -C "$R" . 2>/dev/null; ls -la "${OUT:-/tmp/out}" ;;
  *) echo "unknown step $step" >&2; exit 2 ;;
esac
