#!/usr/bin/env bash
# Issue 16's acceptance rows for a GPU session of their own (prepared 2026-12-07, seventh session; both drafts
# since the thirteenth; not run): the OFF mode (gate forced off) against no speculation on variable-length
# closed loops at 32 / 64 / 128 requests, 8B target with two drafts (p = 0.2, accept length ~3: side B;
# p = 0.5, ~1.9: side C, `--c-models`; the target is the same for every p, so one server without
# speculation is A for both), three servers up at once (131,072-token pools: three fit an H200, an H100
# takes two, so on an H100 `three_pool` gives 49,152), 10 s rows, 2 repeats interleaved (A B C, then C B A;
# one repeat's off rows spread 4-7% between runs of the same code, h200-2026-12-06), not pinned (07g):
#   1. v1: none / off / off, all --disable-overlap-schedule (~7 min);
#   2. v2 triton: none / off / off (~8 min), then py-spy on each at 32 (`cpu_profile compare --by self`);
#   3. v2 fa3 (SGLang's default on Hopper): none / off / off (~7 min), whose none rows are also the default
#      server v1 is reported against (`bench.ab_collect ab-v1 ab-fa3 ...`, summarize-traffic's "/ none v2").
# Read: python -m bench.ab_collect $R/ab-v1 $R/ab-triton $R/ab-fa3 --csv real-traffic.csv (b_over_a: p = 0.2,
# c_over_a: p = 0.5; `steady_tok_s` beside each row: a row at 128 is partly drain).
# Steps as bench/gpu_run_2026_12_03c.sh: `models` (.gpuwheels/A), `wheels` (.gpuwheels/A2), `install 3` (.gpuwheels/B .devrun),
# `part 1..7 1` and `part 8 200` (.gpuwheels/F1..F8: the FA3 kernel, ../shared/gpu/fetch-fa3.sh's zip cut in
# eight: the ~24 MiB working tree and a piece must stay under 64 MiB; `cat .gpuwheels/F[1-5]/part* > /tmp/fa3.zip`,
# `split -b 31000000 -d -a 1 /tmp/fa3.zip part`, partK into .gpuwheels/F(K+1) with apply-fa3.sh in F8), every
# step with FA3_PIECES=8, then `wait` calls of at most ~400 s. ~1,300 s of rows after set-up: with refused
# starts, `SKIP_V1=1` on the install step leaves v1 out. Rename to its date when run.
export SELF=bench/gpu_run_next_16.sh
set -uo pipefail
source bench/gpu_ab_steps.sh
dispatch "$@"
models_p05
pair=(--a none --b off --c off --c-models /tmp/models/8b/p0.5 --max-total-tokens "$(three_pool)" --repeats 2
      --interleave --row-seconds 10)
[ -n "${SKIP_V1:-}" ] || ab ab-v1 --worker v1 "${pair[@]}"
ab ab-triton "${pair[@]}" --cpu-profile-row varied-closed:32  # py-spy on all three at 32 after the repeats:
  # is the OFF scheduler CPU-bound on the H200 (its wait for the previous result near 0%; 07g, H100: 41% against 60%)?
fa3_ready && ab ab-fa3 --attention-backend fa3 "${pair[@]}"
touch "$R/all.done"
