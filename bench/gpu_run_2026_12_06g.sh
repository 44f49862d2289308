#!/usr/bin/env bash
# The next GPU run, prepared on 2026-12-06 after bench/results/h100-2026-12-06f/ (one H100, triton,
# auto with its hysteresis band: p = 0.2 at 0.975-1.012x the better static, p = 0.5 at 0.936-0.983x,
# where ON probes at 2.7-4x an OFF step's time were budgeted in steps; gate_correctness --auto passed
# for v1 topk 1 / topk 4, v2 topk 1's server did not fit 0.15 of the H100). Since then probes are
# charged by their time (auto_threshold.probe_cost). Issue 17's acceptance run, triton, one repeat, 12 s rows:
#   1. bench.gate_correctness --auto for v2 topk 1, v1 topk 1, v1 topk 4 at TP 1 on the KV-sensitive
#      1B pair, three servers at once at 0.25 of the GPU each (~250 s);
#   2. p = 0.5 first (06f's weak spot, where the probe charge acts): none / always / auto, closed 1 / 4 /
#      16 / 32 / 64 / 128, Poisson 4 / 16 / 48, its own none server this time (06f's 1.167x at 16 / s was
#      against another run's none) (~600 s);
#   3. p = 0.2: the same rows, then the time-varying load (1 -> 64 -> 4 -> 128 -> 2) on each server
#      (~800 s on an H100; 06f measured its rows with the band already);
#   4. the shifting draft, its concurrency from a curve learned on its own prompts (~200 s).
# No FA3: steps `models` (.gpuwheels/A), `install 3` (.gpuwheels/B .devrun), then `wait 560` calls.
# ~30 minutes with start-up: step 4 may not fit. On an H100 the pools are cut to 49,152 tokens (the
# pool caps the batch at ~70 requests: say so). Ran on 2026-12-06 (an H100 came; 06g) until the p = 0.5 rows: then bench/gpu_run_2026_12_06g_tail.sh.
export SELF=bench/gpu_run_2026_12_06g.sh
set -uo pipefail
source bench/gpu_ab_steps.sh
if [ "${1:-}" = models ]; then models_8b fam; exit 0; fi
dispatch "$@"
gate_auto 0.25
models_p05
auto_ab ab-auto-triton-p0.5 1,4,16,32,64,128 --b-models /tmp/models/8b/p0.5 --c-models /tmp/models/8b/p0.5
auto_ab ab-auto-triton-p0.2 1,4,16,32,64,128 --time-varying
shift_calibrated
touch "$R/all.done"
