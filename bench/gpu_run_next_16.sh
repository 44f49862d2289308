#!/usr/bin/env bash
# Issue 16's rows for a GPU session of their own (prepared 2026-12-07, seventh session; not run): the OFF
# mode (gate forced off) against no speculation on variable-length closed loops at 32 / 64 / 128 requests,
# 8B pair p = 0.2, two servers up at once (131,072-token pools: two fit an H100), 10 s rows, 2 repeats
# interleaved (bench.ab_traffic --interleave: each row on both servers before the next; one repeat's off
# rows spread 4-7% between runs of the same code, h200-2026-12-06):
#   1. v1: none / off, both --disable-overlap-schedule (~6 min);
#   2. v2 triton: none / off (~6 min);
#   3. v2 fa3 (SGLang's default on Hopper): none / off (~6 min), whose none rows are also the default
#      server v1 is reported against (`bench.ab_collect ab-v1 ab-fa3 ...`, summarize-traffic's "/ none v2").
# Steps as bench/gpu_run_2026_12_03c.sh: `models` (.gpuwheels/A), `install 3` (.gpuwheels/B .devrun),
# `part 1..5 1` and `part 6 200` (.gpuwheels/F1..F6: the FA3 kernel, ../shared/gpu/fetch-fa3.sh cut in
# six), then `wait` calls of at most ~400 s. Rename to its date when run.
export SELF=bench/gpu_run_next_16.sh
set -uo pipefail
source bench/gpu_ab_steps.sh
dispatch "$@"
pair=(--a none --b off --max-total-tokens 131072 --repeats 2 --interleave --row-seconds 10)
ab ab-v1 --worker v1 "${pair[@]}"
ab ab-triton "${pair[@]}"
fa3_ready && ab ab-fa3 --attention-backend fa3 "${pair[@]}"
touch "$R/all.done"
