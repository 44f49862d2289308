#!/usr/bin/env bash
# The next GPU run (one H200), prepared on 2026-12-04 (fifth session) after h200-2026-12-04e
# (bench/GPU_PLAN.md): A/B inside the run with bench.ab_traffic (both servers up at once, rows
# alternated, 2 repeats, varied-closed at 32 / 64 / 128, 8B pair p = 0.2): 1. fa3 none against
# forced off (defaults: deferred draft K/V, lean v2 verify), then one more 128 row per side with
# py-spy on its scheduler (where the 128 gap goes); 2. v1 (lean OFF step) against v1 without
# speculation; 3. triton v2 forced off against none. Rename it to its date when run. Steps and
# carries as bench/gpu_run_2026_12_03c.sh (models, install, part 1..6, wait).
set -uo pipefail
export SELF=bench/gpu_run_next.sh
[ "${1:-}" = chain ] || exec bash bench/gpu_run_2026_12_03c.sh "$@"
R=/tmp/run
source .gpuwheels/B/env.sh
bash bench/gpu_run_2026_12_03c.sh heartbeat
for t in $(seq 300); do [ -e "$R/models.done" ] && [ -e "$R/fa3.ready" ] && break; sleep 1; done
ab() {  # ab NAME ARGS...: one bench.ab_traffic run
  local name=$1 t0=$SECONDS; shift
  python3 -m bench.ab_traffic --models /tmp/models/8b/p0.2 --repeats 2 --workloads varied-closed \
    --out "$R/$name" "$@" >"$R/$name.log" 2>&1
  echo "$name rc=$? $((SECONDS - t0)) s" >>"$R/jobs.log"
  pkill -f launch_server; sleep 2; pkill -9 -f launch_server
}
ab ab-fa3 --attention-backend fa3 --a none --b off --cpu-profile-row varied-closed:128
ab ab-v1 --worker v1 --a none --b off
ab ab-triton --a none --b off
touch "$R/all.done"
