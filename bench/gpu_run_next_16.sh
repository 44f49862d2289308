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
# Steps as bench/gpu_run_2026_12_03c.sh: `models` (.gpuwheels/A), `wheels` (.gpuwheels/A2), `install 3` (.gpuwheels/B .devrun),
# `part 1..7 1` and `part 8 200` (.gpuwheels/F1..F8: the FA3 kernel, ../shared/gpu/fetch-fa3.sh's zip cut in
# eight: the ~24 MiB working tree and a piece must stay under 64 MiB; `cat .gpuwheels/F[1-5]/part* > /tmp/fa3.zip`,
# `split -b 31000000 -d -a 1 /tmp/fa3.zip part`, partK into .gpuwheels/F(K+1) with apply-fa3.sh in F8), every
# step with FA3_PIECES=8, then `wait` calls of at most ~400 s. Rename to its date when run.
export SELF=bench/gpu_run_next_16.sh
set -uo pipefail
source bench/gpu_ab_steps.sh
dispatch "$@"
pair=(--a none --b off --max-total-tokens 131072 --repeats 2 --interleave --row-seconds 10)
ab ab-v1 --worker v1 "${pair[@]}"
ab ab-triton "${pair[@]}"
fa3_ready && ab ab-fa3 --attention-backend fa3 "${pair[@]}"
touch "$R/all.done"
