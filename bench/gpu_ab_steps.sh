# Sourced by the bench.ab_traffic GPU runs (bench/gpu_run_2026_12_04e.sh and later): the 8B pair's
# `models` step and the chain's helpers. The other steps (install, part, wait, heartbeat) are
# bench/gpu_run_2026_12_03c.sh's.
R=/tmp/run

models_8b() {  # step `models` (carry .gpuwheels/A): wheels to /tmp/whl; the 8B pair p = 0.2 written in the background, then with `fam` the families pair (its own target)
  mkdir -p /tmp/whl "$R" /tmp/fa3parts && cp .gpuwheels/A/*.whl /tmp/whl/ && ls /tmp/whl | wc -l
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  local fam=""
  if [ "${1:-}" = fam ]; then
    fam='python3 -m bench.synthetic_models --out /tmp/models/8b/fam --preset 8b --families 2 --p-wrong-families 0.1,0.6 --device cuda 2>&1 | tail -n 3'
  fi
  setsid bash -c "export PYTHONUNBUFFERED=1
    python3 -m bench.synthetic_models --out /tmp/models/8b/p0.2 --preset 8b --p-wrong 0.2 --device cuda 2>&1 | tail -n 2
    $fam
    touch /tmp/run/models.done" >"$R/models.log" 2>&1 </dev/null &
  sleep 1
}

chain_start() {  # the chain's start: SGLang's environment, the heartbeat, the models written
  source .gpuwheels/B/env.sh
  bash bench/gpu_run_2026_12_03c.sh heartbeat
  for t in $(seq 300); do [ -e "$R/models.done" ] && break; sleep 1; done
  mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -n 1)
  echo "gpu memory ${mib} MiB" >>"$R/jobs.log"
}

ab() {  # ab NAME ARGS...: one bench.ab_traffic run into $R/NAME, its time in jobs.log
  local name=$1 t0=$SECONDS; shift
  python3 -m bench.ab_traffic --models /tmp/models/8b/p0.2 --repeats 2 --workloads varied-closed \
    --out "$R/$name" "$@" >"$R/$name.log" 2>&1
  echo "$name rc=$? $((SECONDS - t0)) s" >>"$R/jobs.log"
  pkill -f '[l]aunch_server'; sleep 2; pkill -9 -f '[l]aunch_server'
}

fa3_ready() {  # wait up to 300 s for the FA3 kernel (its FA3_PIECES pieces come by `part` calls)
  for t in $(seq 300); do [ -e "$R/fa3.ready" ] && return 0; sleep 1; done; return 1
}

dispatch() {  # a run script's steps: `models` here, `chain` starts the chain (the script goes on), the rest 03c's
  case "${1:-}" in
    models) models_8b; exit 0 ;;
    wheels) mkdir -p /tmp/whl && cp .gpuwheels/A2/*.whl /tmp/whl/ && ls /tmp/whl | wc -l; exit 0 ;;  # the rest of A (carry .gpuwheels/A2): A alone fills a carry beside the tree
    chain) chain_start ;;
    *) exec bash bench/gpu_run_2026_12_03c.sh "$@" ;;
  esac
}

models_p05() {  # the p = 0.5 draft beside the p = 0.2 target (in the chain, after `models`)
  python3 -m bench.synthetic_models --out /tmp/models/8b/p0.5 --preset 8b --p-wrong 0.5 \
    --target-from /tmp/models/8b/p0.2 --device cuda >"$R/models-p0.5.log" 2>&1
}

placement_log() {  # in the background until all.done: every 2 s, the CPU each SGLang thread last ran on (psr) and
  # its CPU share, into placement.log, with the host's topology once: whether a slower server shared cores
  lscpu -e=CPU,CORE,SOCKET,NODE >"$R/placement.log" 2>&1
  (while [ ! -e "$R/all.done" ]; do
     echo "--- $(date +%T)"; ps -eLo pid,tid,psr,pcpu,comm --sort=-pcpu | awk 'NR == 1 || $4 > 1.0' | head -n 40
     sleep 2; done) >>"$R/placement.log" 2>&1 &
}

three_pool() {  # the KV pool (tokens) of each of three 8B servers on this GPU: 131,072 on an H200, 49,152 on an H100
  if [ "${mib:-0}" -ge 100000 ]; then echo 131072; else echo 49152; fi
}

auto_ab() {  # auto_ab NAME CONCURRENCY [more bench.ab_traffic arguments]: none / always / auto, one repeat, 12 s rows
  local name=$1 levels=$2; shift 2
  local pool
  pool=$(three_pool)
  ab "$name" --a none --b always --c auto --repeats 1 --workloads varied-closed,varied-poisson \
    --concurrency "$levels" --rates 4,16,48 --row-seconds 12 --max-total-tokens "$pool" "$@"
}

gate_auto() {  # gate_auto MEM_FRACTION: bench.gate_correctness's auto phase for the three configs on the KV-sensitive 1B pair
  local t0=$SECONDS
  python3 -m bench.gate_correctness --models /tmp/models/1b/kv-p0.2 --build 1b --kv-sensitive --auto --mem-fraction "$1" \
    --out "$R/gate-correctness-auto.json" --log-dir "$R/gate-logs" >"$R/gate.log" 2>&1
  echo "gate-auto rc=$? $((SECONDS - t0)) s" >>"$R/jobs.log"
  pkill -f '[l]aunch_server'; sleep 2; pkill -9 -f '[l]aunch_server'
}

shift_calibrated() {  # the shifting draft (families pair), its concurrency from a curve learned on its own prompts
  local t0=$SECONDS
  python3 -m bench.auto_shift --models /tmp/models/8b/fam --out "$R/auto-shift.json" --concurrency 32 \
    --calibrate 8,16,32,64 --calibrate-seconds 8 --phase-seconds 30 --log-dir "$R/logs" >"$R/auto-shift.log" 2>&1
  echo "auto-shift rc=$? $((SECONDS - t0)) s" >>"$R/jobs.log"
  pkill -f '[l]aunch_server'; sleep 2; pkill -9 -f '[l]aunch_server'
}

auto_rows() {  # auto_rows [more bench.ab_traffic arguments]: issue 17's rows (closed 1-128, Poisson 4 / 16 / 48) into ROWS
  local pool
  pool=$(three_pool)
  ROWS=(--repeats 1 --workloads varied-closed,varied-poisson --concurrency 1,4,16,32,64,128 --rates 4,16,48
        --row-seconds 10 --max-total-tokens "$pool" "$@")
}

auto_list() {  # auto_list [more bench.ab_traffic arguments]: issue 17's whole list in one run (bench/gpu_run_2026_12_07b.sh
  # and later): p = 0.2 none / always / auto with the time-varying load on its servers, p = 0.5 always / auto (its
  # baseline p = 0.2's none rows: bench.ab_collect --share-none), the calibrated shift, gate_correctness --auto;
  # TV= (empty) leaves the time-varying load out
  local tv=${TV---time-varying}
  auto_rows "$@"
  models_p05
  ab ab-auto-triton-p0.2 --a none --b always --c auto "${ROWS[@]}" $tv
  ab ab-auto-triton-p0.5 --models /tmp/models/8b/p0.5 --a always --b auto "${ROWS[@]}"
  shift_calibrated
  gate_auto 0.25
}

auto_list_p05_first() {  # auto_list_p05_first [more bench.ab_traffic arguments]: auto_list's rows for a cut
  # budget, p = 0.5 first (none / always / auto: the near ties and the OFF-led rows), then p = 0.2 always / auto on
  # its none rows (--share-none), no time-varying load, then the shift and gate_correctness if time is left
  auto_rows "$@"
  models_p05
  ab ab-auto-triton-p0.5 --models /tmp/models/8b/p0.5 --a none --b always --c auto "${ROWS[@]}"
  ab ab-auto-triton-p0.2 --a always --b auto "${ROWS[@]}"
  shift_calibrated
  gate_auto 0.25
}

reserve_parts() {  # the KV reserve's three parts (bench/gpu_run_2026_12_07h.sh and later): p = 0.5 none / auto /
  # auto + reserve at CONC (32,64,128), REPEATS (2) interleaved repeats, py-spy at 32; gate_correctness v2-topk1 on the
  # KV-sensitive 1B pair with the reserve; unless ON_PART=0, p = 0.2 always / auto / auto + reserve at 4 / 16
  models_p05
  local pool t0
  pool=$(three_pool)
  local reserve=(--c auto --c-env SPECCONSOLE_KV_RESERVE=16 --workloads varied-closed --row-seconds 10 --interleave
                 --max-total-tokens "$pool")
  ab ab-reserve --models /tmp/models/8b/p0.5 --a none --b auto "${reserve[@]}" --repeats "${REPEATS:-2}" \
    --concurrency "${CONC:-32,64,128}" --cpu-profile-row varied-closed:32
  t0=$SECONDS
  SPECCONSOLE_KV_RESERVE=16 python3 -m bench.gate_correctness --models /tmp/models/1b/kv-p0.2 --build 1b --kv-sensitive \
    --configs v2-topk1 --mem-fraction 0.5 --out "$R/gate-correctness-reserve.json" --log-dir "$R/gate-logs" >"$R/gate.log" 2>&1
  echo "gate-reserve rc=$? $((SECONDS - t0)) s" >>"$R/jobs.log"
  pkill -f '[l]aunch_server'; sleep 2; pkill -9 -f '[l]aunch_server'
  [ "${ON_PART:-1}" = 0 ] || ab ab-reserve-on --a always --b auto "${reserve[@]}" --repeats 1 --concurrency 4,16
}
