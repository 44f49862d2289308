#!/usr/bin/env bash
# The next GPU run, prepared on 2026-12-07 (seventh session) after bench/results/h100-2026-12-07b/ (issue 17's
# whole list in one run on an H100, 10 s rows: p = 0.2 0.907-1.017x the better static, its auto server ON
# and slower at c <= 16 for a stretch; p = 0.5 0.952-1.003x, a near tie at 4 resolved OFF; e2e 0.999-1.045x;
# time-varying 1.187x; shift 82 / 1,801 steps; gate auto v2 only). Since then a tie between two crossovers
# keeps speculation on, every row records what the gate did during it (spec_gate_delta), and the rows are
# interleaved (each row on every side before the next: a slow stretch of one server no longer lands on
# its rows alone; ~1 s more a row for its own traffic call). The same run:
#   1. p = 0.2: none / always / auto, closed 1 / 4 / 16 / 32 / 64 / 128, Poisson 4 / 16 / 48, then the
#      time-varying load on the same three servers (~810 s);
#   2. p = 0.5: always / auto, the same rows, on step 1's none server (`bench.ab_collect --share-none`) (~460 s);
#   3. the shifting draft, its concurrency calibrated on its own prompts (~210 s);
#   4. bench.gate_correctness --auto for the three configs at TP 1 (~280 s; the budget reached v2 topk 1 in 07b).
# No FA3: steps `models` (.gpuwheels/A), `wheels` (.gpuwheels/A2), `install 520` (.gpuwheels/B .devrun), then `wait 570` / `wait 592`
# sent at once (the whole 30-minute budget: 07b ended during step 4). This session's budget was cut to
# ~1,000 s by refused starts (eight, 2026-12-07 05:55-06:35): p = 0.5 runs first with its own none
# server (the near tie at 4 and the OFF-led rows), then p = 0.2 always / auto on that none server, as
# far as the budget goes; no time-varying load (1.187x in 07b); steps 3-4 only if time is left. With
# ~640 s left (eleven refusals by 07:10): three rows twice each rather than many once (one 10 s repeat
# moves a ratio by ~2.3%: bench.repeat_noise): c = 4 (07b's near tie, the tie rule's first GPU test),
# c = 32 (OFF leads: auto against none is the OFF mode's cost plus the probes'), 48 / s (e2e 1.042x). On an H100 the pools are cut to
# 49,152 tokens (the pool caps the batch at ~70 requests: say so). Rename to its date when run.
export SELF=bench/gpu_run_next.sh
set -uo pipefail
source bench/gpu_ab_steps.sh
if [ "${1:-}" = models ]; then models_8b fam; exit 0; fi
dispatch "$@"
auto_list_p05_first --interleave --concurrency 4,32 --rates 48 --repeats 2
touch "$R/all.done"
