#!/usr/bin/env bash
# The next GPU run, prepared on 2026-12-05 after bench/results/h100-2026-12-05b/ (fa3 at 128: the OFF
# server's prefill steps take 24.3 ms against 17.4, mostly GPU idle; its trace had 2.7x the event syncs,
# 2.5x the stream syncs and 36 blocking copies against 2, but the traces stayed on the GPU machine). All
# with bench.ab_traffic (servers up at once, 131072-token KV pools, rows alternated, varied-closed at
# 32 / 64 / 128, 8B pair p = 0.2); it adapts to an H100 or an H200 only in the servers it starts:
#   1. fa3 none / forced off, one repeat, then the torch profiler at 128 on both: the trace summaries
#      now name each sync's and each GPU gap's CPU site (bench.trace_summary sync_sites / idle_sites)
#      and the traces come back in $OUT/traces.tar;
#   2. fa3 none / forced off again with --freeze-gc (gc.freeze() in both schedulers before the rows):
#      py-spy found SGLang's own Python ~1.5x slower in the OFF scheduler; if the collector is it, the
#      ratio rises here against step 1;
#   3. v1 none / forced off, one repeat, the torch profiler at 128 on both (0.86 there on 2026-12-05:
#      where the v1 gap goes); on an H200 a third server, forced off with its draft K/V deferred
#      (SPECCONSOLE_OFF_DEFERRED_DRAFT_KV_V1=1, first time on a GPU);
#   4. fa3 none / forced off with the lean future map and the fused fa3 verify metadata (first time on
#      a GPU), one repeat, if the device time lasts.
# Steps and carries as bench/gpu_run_2026_12_03c.sh (models with .gpuwheels/A, install 3 with
# .gpuwheels/B .devrun, part 1..5 1 and part 6 200 with .gpuwheels/FN, then `wait` calls of at most
# ~400 s: a machine taken back mid-call returns nothing). Rename it to its date when run.
export SELF=bench/gpu_run_next.sh
set -uo pipefail
source bench/gpu_ab_steps.sh
dispatch "$@"
fa3_ready && ab ab-fa3 --attention-backend fa3 --a none --b off --max-total-tokens 131072 --repeats 1 \
  --profile-row varied-closed:128
fa3_ready && ab ab-fa3-freeze-gc --attention-backend fa3 --a none --b off --max-total-tokens 131072 --repeats 1 \
  --freeze-gc
if [ "${mib:-0}" -ge 100000 ]; then  # H200: three 8B servers with 131072-token pools (~100 GB) fit
  ab ab-v1 --worker v1 --a none --b off --c off --c-env SPECCONSOLE_OFF_DEFERRED_DRAFT_KV_V1=1 \
    --max-total-tokens 131072 --repeats 1 --profile-row varied-closed:128 --profile-sides a,b
else  # H100 (~80 GB): two at a time
  ab ab-v1 --worker v1 --a none --b off --max-total-tokens 131072 --repeats 1 --profile-row varied-closed:128
fi
fa3_ready && ab ab-fa3-levers --attention-backend fa3 --a none --b off --max-total-tokens 131072 \
  --repeats 1 --b-env SPECCONSOLE_OFF_LEAN_FUTURE_MAP=1 --b-env SPECCONSOLE_OFF_FA3_FUSED_VERIFY_METADATA=1
touch "$R/all.done"
