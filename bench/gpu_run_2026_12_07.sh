#!/usr/bin/env bash
# The next GPU run, prepared on 2026-12-06 after bench/results/h100-2026-12-06g/ (one H100: gate_correctness
# --auto passed for all three configs; p = 0.5 with its own none server 0.954-0.991x the better static,
# e2e 0.998-1.012x; time-varying 1.166x). Since then a bucket's accept length is a slow EMA while the fast
# one agrees with it, shrunk toward the recent accept length (the c = 4 near tie, 0.954x). Issue 17's
# remaining rows, triton, one repeat, 12 s rows:
#   1. p = 0.5 first (where the accept fix acts): none / always / auto, closed 1 / 4 / 16 / 32 / 64 / 128,
#      Poisson 4 / 16 / 48, its own none server (~690 s);
#   2. the shifting draft, its concurrency from a curve learned on its own prompts (~200 s);
#   3. p = 0.2: the same rows (06f's e2e 1.036x at 48 / s was before probes were charged by time) (~690 s);
#   4. bench.gate_correctness --auto for the three configs (servers now start one at a time) (~250 s).
# No FA3: steps `models` (.gpuwheels/A), `install 3` (.gpuwheels/B .devrun), then `wait 560` calls.
# ~30 minutes with start-up: steps 3-4 may not fit. On an H100 the pools are cut to 49,152 tokens (the
# pool caps the batch at ~70 requests: say so). Ran on 2026-12-07 (an H100 came; bench/results/h100-2026-12-07/):
# p = 0.5 and the shift; p = 0.2 cut by the budget after its none server.
export SELF=bench/gpu_run_2026_12_07.sh
set -uo pipefail
source bench/gpu_ab_steps.sh
if [ "${1:-}" = models ]; then models_8b fam; exit 0; fi
dispatch "$@"
models_p05
auto_ab ab-auto-triton-p0.5 1,4,16,32,64,128 --b-models /tmp/models/8b/p0.5 --c-models /tmp/models/8b/p0.5
shift_calibrated
auto_ab ab-auto-triton-p0.2 1,4,16,32,64,128
gate_auto 0.25  # passed on the H100 (06g); on an H200 the same run's own record, if the budget reaches it
touch "$R/all.done"
