#!/usr/bin/env bash
# The next GPU run, prepared on 2026-12-07 (seventh session) after bench/results/h100-2026-12-07/: all of
# issue 17's acceptance in ONE run on one GPU with the current code, triton, one repeat, 10 s rows
# (12 s before: the whole list must fit one 30-minute budget):
#   1. p = 0.2: none / always / auto, closed 1 / 4 / 16 / 32 / 64 / 128, Poisson 4 / 16 / 48, then the
#      time-varying load on the same three servers (~760 s);
#   2. p = 0.5 (its draft beside the same target): always / auto, the same rows; its baseline is step 1's
#      none server (no speculation has no draft: `bench.ab_collect --share-none`) (~420 s);
#   3. the shifting draft, its concurrency calibrated on its own prompts (~200 s);
#   4. bench.gate_correctness --auto for the three configs at TP 1 (~250 s; 06g passed them, cut first).
# No FA3: steps `models` (.gpuwheels/A), `install 3` (.gpuwheels/B .devrun), then `wait 560` calls.
# ~29 minutes with start-up. On an H100 the pools are cut to 49,152 tokens (the pool caps the batch at
# ~70 requests: say so). Ran on 2026-12-07 as bench/gpu_run_next.sh (an H100 came; bench/results/h100-2026-12-07b/):
# steps 1-3 and gate_correctness's v2 topk 1; v1 topk 1 and v1 topk 4 cut by the budget.
export SELF=bench/gpu_run_2026_12_07b.sh
set -uo pipefail
source bench/gpu_ab_steps.sh
if [ "${1:-}" = models ]; then models_8b fam; exit 0; fi
dispatch "$@"
auto_list
touch "$R/all.done"
