#!/usr/bin/env bash
# The fifteenth session's run (2026-12-08), chosen by the GPU that comes:
#   * an H200: the KV reserve (server_patch/kv_reserve.py, opt-in) as bench/gpu_run_2026_12_07h.sh parts 1-3
#     (GPU_PLAN step 0: the H100 is GPU-bound between prefills, the H200's step is close to the OFF scheduler's CPU):
#     1. p = 0.5 none / auto / auto + reserve (auto OFF from ~16 up), closed 32 / 64 / 128, two interleaved repeats,
#        py-spy on the three at 32 (read per running-request count: bench.decode_log --sizes; by function:
#        bench.cpu_profile compare --by self);
#     2. bench.gate_correctness v2-topk1 on the KV-sensitive 1B pair with the reserve (oracle-exact, every proof clean);
#     3. ON steps: p = 0.2 always / auto / auto + reserve at 4 / 16, one repeat.
#   * an H100: issue 17's rows for the better draft (bench/gpu_run_next_17p02.sh, two interleaved repeats):
#     p = 0.2 none / always / auto, closed 1-128, Poisson 4 / 16 / 48, the time-varying load, then
#     bench.gate_correctness --auto for the three configs if time is left.
# Steps: `models` (.gpuwheels/A), `wheels` (.gpuwheels/A2), `install 520` (.gpuwheels/B .devrun), `wait 570`,
# `wait ...`, sent at once.
export SELF=bench/gpu_run_2026_12_08.sh
set -uo pipefail
source bench/gpu_ab_steps.sh
dispatch "$@"
if [ "${mib:-0}" -ge 100000 ]; then
  echo "H200: the KV reserve A/B" >>"$R/jobs.log"
  reserve_parts
else
  echo "H100: issue 17's p = 0.2 rows" >>"$R/jobs.log"
  auto_rows --interleave --repeats "${REPEATS:-2}"
  ab ab-auto-triton-p0.2 --a none --b always --c auto "${ROWS[@]}" --time-varying \
    --c-env SPECCONSOLE_AUTO_TRACE="$R/auto-trace-p0.2.jsonl"
  gate_auto 0.25
fi
touch "$R/all.done"
