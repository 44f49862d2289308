#!/usr/bin/env bash
# The GPU run of 2026-12-06 (prepared as gpu_run_next.sh after bench/results/h100-2026-12-05b/: fa3 at
# 128 the OFF server's prefill steps take 24.3 ms against 17.4, mostly GPU idle, with 2.7x the event
# syncs, 2.5x the stream syncs and 36 blocking copies against 2). All with bench.ab_traffic (servers up
# at once, 131072-token KV pools, rows alternated, varied-closed at 32 / 64 / 128, 8B pair p = 0.2); it
# adapts to an H100 or an H200 only in the servers it starts. v1 first: it needs no FA3, whose six
# pieces arrive by `part` calls while it runs.
#   1. v1 none / forced off with its draft K/V deferred (SPECCONSOLE_OFF_DEFERRED_DRAFT_KV_V1=1, first
#      time on a GPU), one repeat, the torch profiler at 128; on an H200 a third server forced off as
#      before (three 131072-token 8B servers do not fit an H100: there the plain OFF v1 rows of
#      h100-2026-12-05 are the before: 0.952 / 0.936 / 0.859);
#   2. fa3 none / forced off, one repeat, the torch profiler at 128: the trace summaries name each
#      sync's and each GPU gap's CPU site (bench.trace_summary sync_sites / idle_sites) and the traces
#      come back in $OUT/traces.tar;
#   3. fa3 none / forced off again with --freeze-gc (gc.freeze() in both schedulers before the rows):
#      py-spy found SGLang's own Python ~1.5x slower in the OFF scheduler; if the collector is it, the
#      ratio rises here against step 2;
#   4. fa3 none / forced off with the lean future map and the fused fa3 verify metadata, if time lasts.
# Steps and carries as bench/gpu_run_2026_12_03c.sh (models with .gpuwheels/A, install 3 with
# .gpuwheels/B .devrun, part 1..5 1 and part 6 200 with .gpuwheels/FN, then `wait` calls of at most
# ~400 s: a machine taken back mid-call returns nothing).
export SELF=bench/gpu_run_2026_12_06.sh
set -uo pipefail
source bench/gpu_ab_steps.sh
dispatch "$@"
if [ "${mib:-0}" -ge 100000 ]; then  # H200: three 8B servers with 131072-token pools (~100 GB) fit
  ab ab-v1 --worker v1 --a none --b off --c off --b-env SPECCONSOLE_OFF_DEFERRED_DRAFT_KV_V1=1 \
    --max-total-tokens 131072 --repeats 1 --profile-row varied-closed:128 --profile-sides a,b
else  # H100 (~80 GB): two at a time
  ab ab-v1 --worker v1 --a none --b off --b-env SPECCONSOLE_OFF_DEFERRED_DRAFT_KV_V1=1 \
    --max-total-tokens 131072 --repeats 1 --profile-row varied-closed:128
fi
fa3_ready && ab ab-fa3 --attention-backend fa3 --a none --b off --max-total-tokens 131072 --repeats 1 \
  --profile-row varied-closed:128
fa3_ready && ab ab-fa3-freeze-gc --attention-backend fa3 --a none --b off --max-total-tokens 131072 --repeats 1 \
  --freeze-gc
fa3_ready && ab ab-fa3-levers --attention-backend fa3 --a none --b off --max-total-tokens 131072 \
  --repeats 1 --b-env SPECCONSOLE_OFF_LEAN_FUTURE_MAP=1 --b-env SPECCONSOLE_OFF_FA3_FUSED_VERIFY_METADATA=1
touch "$R/all.done"
