#!/usr/bin/env bash
# The GPU run of 2026-12-03 (one H200): a rerun of 2026-12-02d, whose results were lost (never copied
# back): what issue 18 still owes on a GPU (fa3 and flashinfer correctness, v1 churn, grammar, eager
# OFF steps, the OFF-step sampling proof, logprobs on v1 topk 4), the v2 logprob run of the 82 s stall
# with SGLang's soft watchdog, then the OFF mode's cost on fa3 with and without the eager KV-only draft
# extend, profiled (issue 16), and v1 if time is left. Changed from 02d: stage B's jobs that were
# several servers one after the other (grammar, churn, sampling) run as parallel jobs or servers;
# the small-load tools get a 16384-token KV pool so that all of stage B fits on the GPU at once.
#
#   bash bench/gpu_run_2026_12_03.sh models     (carry .gpuwheels/A): wheels to /tmp/whl; the pairs
#                                                (8B p = 0.2, 1B KV-sensitive, 1B p = 0.2) are written
#                                                in the background (models.done)
#   bash bench/gpu_run_2026_12_03.sh install    (carry .gpuwheels/B .gpuwheels/C .devrun), then the
#                                                chain (setsid) and a wait
#   bash bench/gpu_run_2026_12_03.sh part N SECONDS   (carry .gpuwheels/FN, N = 1..5): FA3's piece N;
#                                                with all five the kernel is unpacked (fa3.ready)
#   bash bench/gpu_run_2026_12_03.sh wait SECONDS   waits for all.done or SECONDS, packs $OUT/run.tgz
#
# The correctness runs go together on the GPU (stage B): every server a bench tool starts gets
# SPECCONSOLE_BENCH_SERVER_ARGS="--max-total-tokens 131072" (bench/server_harness.py) and a memory
# fraction of 0.85, so its KV pool is 131072 tokens whatever the others hold (SGLang: free -
# free_before_load x 0.15, capped). Throughput (stage C) runs alone afterwards.
set -uo pipefail
R=/tmp/run
F=/tmp/fa3parts
step=${1:?step}; shift || true
env_sh() { source .gpuwheels/B/env.sh; }
fa3_unpack() {  # all five pieces in order -> /tmp/fa3.zip -> sgl_kernel/flash_ops into /tmp/site
  for i in 0 1 2 3 4; do [ -f $F/part$i ] || return 0; done
  [ -f /tmp/installed ] || { echo "fa3: pieces here, waiting for the install"; return 0; }
  cat $F/part0 $F/part1 $F/part2 $F/part3 $F/part4 > /tmp/fa3.zip
  (env_sh; bash $F/apply-fa3.sh) > "$R/fa3.log" 2>&1 && touch "$R/fa3.ready"
  tail -n 3 "$R/fa3.log"
}
job() {  # job NAME LIMIT_S CMD...: one stage-B run, its output in $R/NAME.log, its end in jobs.log
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout -s INT -k 60 "$limit" "$@" >"$R/$name.log" 2>&1  # SIGINT: the tool stops its servers
  echo "$name rc=$? $((SECONDS - t0)) s" >>"$R/jobs.log"
}
case "$step" in
  models)
    mkdir -p /tmp/whl "$R" && cp .gpuwheels/A/*.whl /tmp/whl/ && ls /tmp/whl | wc -l
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
    setsid bash -c 'export PYTHONUNBUFFERED=1
      python3 -m bench.synthetic_models --out /tmp/models/8b/p0.2 --preset 8b --p-wrong 0.2 --device cuda 2>&1 | tail -n 2
      python3 -m bench.synthetic_models --out /tmp/models/1b/kv-p0.2 --preset 1b --p-wrong 0.2 --kv-sensitive --device cuda 2>&1 | tail -n 2
      python3 -m bench.synthetic_models --out /tmp/models/1b/p0.2 --preset 1b --p-wrong 0.2 --device cuda 2>&1 | tail -n 2
      touch /tmp/run/models.done' >"$R/models.log" 2>&1 </dev/null &
    sleep 1 ;;
  install)
    mkdir -p $F
    cp .gpuwheels/B/*.whl .gpuwheels/C/*.whl .devrun/*.whl /tmp/whl/
    bash .gpuwheels/B/install-on-gpu.sh || exit 1
    touch /tmp/installed
    env_sh
    python3 -c "from importlib.metadata import entry_points as e, version as v; print('plugins:', [x.value for x in e(group='sglang.srt.plugins')], 'py-spy', v('py-spy'))"
    which py-spy
    setsid bash bench/gpu_run_2026_12_03.sh chain >"$R/chain.log" 2>&1 </dev/null &
    sleep 2
    fa3_unpack
    bash bench/gpu_run_2026_12_03.sh wait "${1:-20}" ;;
  part)
    n=${1:?piece}; shift
    mkdir -p $F && cp .gpuwheels/F$n/* $F/ && ls $F
    fa3_unpack
    bash bench/gpu_run_2026_12_03.sh wait "${1:-5}" ;;
  chain)
    env_sh
    m=/tmp/models/8b; kv=/tmp/models/1b/kv-p0.2; p02=/tmp/models/1b/p0.2
    (while [ ! -e "$R/all.done" ]; do
       echo "$(date +%T) cpu $(head -n 1 /proc/pressure/cpu) io $(head -n 1 /proc/pressure/io) load $(cut -d' ' -f1-3 /proc/loadavg)"
       sleep 1; done) >"$R/heartbeat.log" 2>&1 &
    hb=$!  # not a stage-B job: stage B's wait names its jobs (a bare wait would wait for this loop too)
    for t in $(seq 120); do [ -e "$R/models.done" ] && break; sleep 2; done
    nvidia-smi --query-gpu=memory.used --format=csv
    # B. correctness, together on the GPU (see the header)
    export SPECCONSOLE_BENCH_SERVER_ARGS="--max-total-tokens 131072"
    MF=0.85
    kvrun() { echo --models $kv --kv-sensitive --mem-fraction $MF; }
    jobs_b=()
    small="--max-total-tokens 16384"  # grammar, sampling, logprobs: at most 32 short requests at once
    for c in v1-topk1 v1-topk4; do
      job churn-$c 600 python3 -m bench.churn_correctness $(kvrun) --configs $c --port $((31100 + ${#jobs_b[@]} * 10)) \
        --out "$R/gate-churn-$c.json" --log-dir "$R/logs/churn-$c" & jobs_b+=($!)
    done
    for c in v2-topk1 v1-topk1 v1-topk4; do
      SPECCONSOLE_BENCH_SERVER_ARGS="$small" job grammar-$c 600 python3 -m bench.grammar_switch $(kvrun) --configs $c \
        --port $((31200 + ${#jobs_b[@]} * 10)) --out "$R/gate-grammar-$c.json" --log-dir "$R/logs/grammar-$c" & jobs_b+=($!)
    done
    SPECCONSOLE_BENCH_SERVER_ARGS="$small" job sampling 600 python3 -m bench.sampling_distribution --models $p02 \
      --mem-fraction $MF --port 31300 --out "$R/sampling.json" --log-dir "$R/logs/sampling" & jobs_b+=($!)
    (job eager 420 python3 -m bench.gate_correctness $(kvrun) --configs v2-topk1 --skip-auto --base-port 31400 \
       --out "$R/gate-eager.json" --log-dir "$R/logs/eager" -- --disable-cuda-graph
     job eager-bs8 420 python3 -m bench.gate_correctness $(kvrun) --configs v2-topk1 --skip-auto --base-port 31450 \
       --out "$R/gate-eager.json" --log-dir "$R/logs/eager-bs8" -- --cuda-graph-max-bs 8) & jobs_b+=($!)
    # the 82 s stall of 2026-12-02c: v2 logprobs under 10 ms threshold flips, with SGLang's soft
    # watchdog (a py-spy dump of the scheduler after 20 s without progress) and iteration numbers
    SPECCONSOLE_BENCH_SERVER_ARGS="$small --soft-watchdog-timeout 20" SGLANG_LOG_FORWARD_ITERS=1 \
      job stall-1 420 python3 -m bench.logprob_switch $(kvrun) --configs v2-topk1 --port 31500 \
      --out "$R/gate-logprobs-stall1.json" --log-dir "$R/logs/stall1" & jobs_b+=($!)
    SPECCONSOLE_BENCH_SERVER_ARGS="$small" job logprobs-v1topk4 420 python3 -m bench.logprob_switch $(kvrun) \
      --configs v1-topk4 --port 31540 --out "$R/gate-logprobs-v1topk4.json" --log-dir "$R/logs/logprobs" & jobs_b+=($!)
    for t in $(seq 90); do [ -e "$R/fa3.ready" ] && break; sleep 2; done
    if [ -e "$R/fa3.ready" ]; then
      job fa3-gate 600 python3 -m bench.gate_correctness $(kvrun) --configs v2-topk1,v1-topk1 --parallel 2 --skip-auto \
        --base-port 31600 --out "$R/gate-fa3.json" --log-dir "$R/logs/fa3" -- --attention-backend fa3 & jobs_b+=($!)
      SPECCONSOLE_OFF_DRAFT_KV_ONLY_EAGER=1 job fa3-gate-eagerkv 600 python3 -m bench.gate_correctness $(kvrun) \
        --configs v2-topk1 --skip-auto --base-port 31700 --out "$R/gate-fa3-eagerkv.json" --log-dir "$R/logs/fa3-eagerkv" \
        -- --attention-backend fa3 & jobs_b+=($!)
    fi
    job flashinfer-gate 600 python3 -m bench.gate_correctness $(kvrun) --configs v1-topk4 --skip-auto \
      --base-port 31800 --out "$R/gate-flashinfer.json" --log-dir "$R/logs/flashinfer" -- --attention-backend flashinfer & jobs_b+=($!)
    (sleep 120; nvidia-smi --query-gpu=memory.used --format=csv; nvidia-smi --query-compute-apps=pid,used_memory --format=csv) \
      >"$R/gpu-mem-B.log" 2>&1 &
    wait "${jobs_b[@]}"
    touch "$R/B.done"
    unset SPECCONSOLE_BENCH_SERVER_ARGS
    pkill -f launch_server; sleep 5; pkill -9 -f launch_server
    nvidia-smi --query-gpu=memory.used --format=csv
    # C. throughput alone: fa3 none / forced off with the eager KV-only draft extend / forced off as
    #    today, variable lengths (profiles at 64 of the first two), then v1 none / off
    if [ -e "$R/fa3.ready" ]; then
      tp() { python3 -m bench.throughput traffic --models $m/p0.2 --attention-backend fa3 --workloads varied-closed \
        --concurrency 32,64,128 --row-seconds 6 --port 30720 "$@"; }
      tp --config none --out "$R/fa3" --profile-row varied-closed:64 >"$R/fa3-none.log" 2>&1
      SPECCONSOLE_OFF_DRAFT_KV_ONLY_EAGER=1 tp --config off --out "$R/fa3-eagerkv" --profile-row varied-closed:64 \
        >"$R/fa3-off-eagerkv.log" 2>&1
      tp --config off --out "$R/fa3" >"$R/fa3-off.log" 2>&1
    fi
    touch "$R/C.done"
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
      [ -s "$R/jobs.log" ] && tr '\n' ';' <"$R/jobs.log" && echo
      for f in chain fa3-none fa3-off-eagerkv fa3-off v1-none v1-off; do
        [ -s "$R/$f.log" ] && echo "$f: $(tail -n 1 "$R/$f.log" | cut -c1-160)"
      done
    done
    tail -n 1 "$R/heartbeat.log" 2>/dev/null
    tar czf "${OUT:-/tmp/out}/run.tgz" --exclude='work' --exclude='load' --exclude='*.trace.json*' -C "$R" . 2>/dev/null
    ls -la "${OUT:-/tmp/out}" ;;
  *) echo "unknown step $step" >&2; exit 2 ;;
esac
