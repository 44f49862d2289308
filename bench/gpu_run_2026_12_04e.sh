#!/usr/bin/env bash
# The GPU run of 2026-12-04e (one H200), the second of the day's fourth session, after the oracle run
# bench/gpu_run_2026_12_04d.sh (the new v2 OFF levers oracle-exact on triton, the mend and lean v1
# too): A/B inside the run with bench.ab_traffic (both servers up at once, rows alternated, 2
# repeats, varied-closed at 32 / 64 / 128, 8B pair p = 0.2) on fa3: no speculation against forced
# off with the new levers (deferred draft K/V, lean v2 verify; their run-time proofs run under the
# traffic), then forced off without them against with them. Steps and
# carries as bench/gpu_run_2026_12_03c.sh (models, install, part 1..6, wait).
set -uo pipefail
export SELF=bench/gpu_run_2026_12_04e.sh
[ "${1:-}" = chain ] || exec bash bench/gpu_run_2026_12_03c.sh "$@"
source bench/gpu_ab_steps.sh
source .gpuwheels/B/env.sh
bash bench/gpu_run_2026_12_03c.sh heartbeat
for t in $(seq 300); do [ -e "$R/models.done" ] && [ -e "$R/fa3.ready" ] && break; sleep 1; done
NEW=(--b-env SPECCONSOLE_OFF_DEFERRED_DRAFT_KV=1 --b-env SPECCONSOLE_OFF_LEAN_V2_VERIFY=1)
ab ab-fa3-none --attention-backend fa3 --a none --b off "${NEW[@]}"
ab ab-fa3-new --attention-backend fa3 --a off --b off "${NEW[@]}"
touch "$R/all.done"
