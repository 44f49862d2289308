#!/usr/bin/env bash
# The third GPU run of 2026-12-03 (one H200): the OFF-step sampling proof with settings that can tell
# the samplers apart (issue 18 item 4: bench.sampling_distribution's `spread` and `min-p`), then the
# OFF mode's cost on variable-length traffic (issue 16, the stage C that bench/gpu_run_2026_12_03.sh
# never reached): fa3 none / forced off with the eager KV-only draft extend / forced off as before,
# profiled at 64, then v1 none / off on triton.
#
#   bash bench/gpu_run_2026_12_03c.sh models            (carry .gpuwheels/A): wheels to /tmp/whl; the 1B
#                                                        pair, then the 8B pair, written in the background
#   bash bench/gpu_run_2026_12_03c.sh install SECONDS   (carry .gpuwheels/B .devrun): install, the chain
#                                                        (setsid), then wait
#   bash bench/gpu_run_2026_12_03c.sh part N SECONDS    (carry .gpuwheels/FN, N = 1..6): FA3's piece N (six ~44 MB pieces: a carry and the 15 MB working tree stay under 64 MiB)
#   bash bench/gpu_run_2026_12_03c.sh wait SECONDS      $OUT/run.tgz rewritten every 10 s
#   bash bench/gpu_run_2026_12_03c.sh heartbeat         (from a later chain) the heartbeat log in the background
set -uo pipefail
R=/tmp/run
F=/tmp/fa3parts
SELF=${SELF:-bench/gpu_run_2026_12_03c.sh}  # the script whose chain and wait the steps call (bench/gpu_run_2026_12_04.sh reuses these steps)
step=${1:?step}; shift || true
env_sh() { source .gpuwheels/B/env.sh; }
fa3_unpack() {
  local n=${FA3_PIECES:-6} i  # how many pieces the FA3 zip was cut in (8 since the tree is ~24 MiB)
  for i in $(seq 0 $((n - 1))); do [ -f $F/part$i ] || return 0; done
  [ -f /tmp/installed ] || { echo "fa3: pieces here, waiting for the install"; return 0; }
  [ -e "$R/fa3.ready" ] && return 0
  for i in $(seq 0 $((n - 1))); do cat $F/part$i; done > /tmp/fa3.zip
  (env_sh; bash $F/apply-fa3.sh) > "$R/fa3.log" 2>&1 && touch "$R/fa3.ready"
  tail -n 3 "$R/fa3.log"
}
pack() {  # run.tgz without the profiler traces; traces.tgz with them while under the 16 MiB a file may have
  local o=${OUT:-/tmp/out}
  tar czf "$o/run.tgz" --exclude='work' --exclude='load' --exclude='*.trace.json*' -C "$R" . 2>/dev/null
  (cd "$R" && find . -name '*.trace.json*' | tar cf "$o/traces.tar" -T - 2>/dev/null)
  [ "$(stat -c %s "$o/traces.tar" 2>/dev/null || echo 0)" -le 16000000 ] || rm -f "$o/traces.tar"
}
case "$step" in
  models)
    mkdir -p /tmp/whl "$R" $F && cp .gpuwheels/A/*.whl /tmp/whl/ && ls /tmp/whl | wc -l
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
    setsid bash -c 'export PYTHONUNBUFFERED=1
      python3 -m bench.synthetic_models --out /tmp/models/1b/p0.2 --preset 1b --p-wrong 0.2 --device cuda 2>&1 | tail -n 2
      touch /tmp/run/models1b.done
      python3 -m bench.synthetic_models --out /tmp/models/8b/p0.2 --preset 8b --p-wrong 0.2 --device cuda 2>&1 | tail -n 2
      touch /tmp/run/models.done' >"$R/models.log" 2>&1 </dev/null &
    sleep 1 ;;
  install)
    cp .gpuwheels/B/*.whl .devrun/*.whl /tmp/whl/
    bash .gpuwheels/B/install-on-gpu.sh >"$R/install.log" 2>&1 || { tail "$R/install.log"; exit 1; }
    touch /tmp/installed
    setsid bash "$SELF" chain >"$R/chain.log" 2>&1 </dev/null &
    fa3_unpack
    bash "$SELF" wait "${1:-20}" ;;
  part)
    n=${1:?piece}; shift
    mkdir -p $F && cp .gpuwheels/F$n/* $F/ && ls $F | tr '\n' ' '
    fa3_unpack
    bash "$SELF" wait "${1:-5}" ;;
  chain)
    env_sh
    (while [ ! -e "$R/all.done" ]; do
       echo "$(date +%T) cpu $(head -n 1 /proc/pressure/cpu) load $(cut -d' ' -f1-3 /proc/loadavg)"; sleep 1; done) \
      >"$R/heartbeat.log" 2>&1 &
    for t in $(seq 120); do [ -e "$R/models1b.done" ] && break; sleep 1; done
    t0=$SECONDS
    SPECCONSOLE_BENCH_SERVER_ARGS="--max-total-tokens 16384" timeout -s INT -k 30 600 \
      python3 -m bench.sampling_distribution --models /tmp/models/1b/p0.2 --mem-fraction 0.85 --port 31300 \
      --out "$R/sampling.json" --log-dir "$R/logs/sampling" >"$R/sampling.log" 2>&1
    echo "sampling rc=$? $((SECONDS - t0)) s" >>"$R/jobs.log"
    pkill -f launch_server; sleep 3; pkill -9 -f launch_server
    for t in $(seq 300); do [ -e "$R/models.done" ] && [ -e "$R/fa3.ready" ] && break; sleep 1; done
    m=/tmp/models/8b/p0.2
    tp() { local name=$1; shift; t0=$SECONDS
      python3 -m bench.throughput traffic --models $m --workloads varied-closed --concurrency 32,64,128 \
        --row-seconds 6 --port 30720 "$@" >"$R/$name.log" 2>&1
      echo "$name rc=$? $((SECONDS - t0)) s" >>"$R/jobs.log"; }
    if [ -e "$R/fa3.ready" ]; then
      tp fa3-none --attention-backend fa3 --config none --out "$R/fa3" --profile-row varied-closed:64
      SPECCONSOLE_OFF_DRAFT_KV_ONLY_EAGER=1 tp fa3-off-eagerkv --attention-backend fa3 --config off \
        --out "$R/fa3-eagerkv" --profile-row varied-closed:64
      tp fa3-off --attention-backend fa3 --config off --out "$R/fa3" --profile-row varied-closed:64
    fi
    tp v1-none --worker v1 --config none --out "$R/v1"
    tp v1-off --worker v1 --config off --out "$R/v1"
    touch "$R/all.done" ;;
  heartbeat)  # for later chains: date, CPU pressure and load each second into heartbeat.log until all.done
    (while [ ! -e "$R/all.done" ]; do
       echo "$(date +%T) cpu $(head -n 1 /proc/pressure/cpu) load $(cut -d' ' -f1-3 /proc/loadavg)"; sleep 1; done) \
      >"$R/heartbeat.log" 2>&1 &
    ;;
  wait)
    limit=${1:-500}; t0=$SECONDS
    while [ $((SECONDS - t0)) -lt "$limit" ] && [ ! -e "$R/all.done" ]; do
      sleep 10
      echo "--- $((SECONDS - t0)) s: $(tr '\n' ';' <"$R/jobs.log" 2>/dev/null) $(tail -n 1 "$R/heartbeat.log" 2>/dev/null | cut -c1-60)"
      pack
    done
    pack; ls -la "${OUT:-/tmp/out}" ;;
  *) echo "unknown step $step" >&2; exit 2 ;;
esac
