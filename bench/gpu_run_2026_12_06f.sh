#!/usr/bin/env bash
# The next GPU run, prepared on 2026-12-06 (fourth session) after bench/results/h100-2026-12-06e/ (one
# H100, triton: auto 0.994-1.030x the better static at c = 1-128 and e2e 0.949-1.009x for p = 0.2,
# time-varying 1.149x; p = 0.5 only at 16 / 64; the shifting draft flipped but did not hold OFF).
# Issue 17's acceptance run on whatever GPU comes (it asks for one H200), triton, one repeat, 12 s rows:
#   1. bench.gate_correctness in auto mode (the hysteresis band) for v2 topk 1, v1 topk 1, v1 topk 4 at
#      TP 1 on the KV-sensitive 1B pair, three servers at once (~150 s);
#   2. p = 0.2: none / always / auto, closed loop at 1 / 4 / 16 / 32 / 64 / 128 (32: the H100
#      crossover, where the band acts) and Poisson at 4 / 16 / 48 req/s, then the time-varying load
#      (1 -> 64 -> 4 -> 128 -> 2) on each server;
#   3. p = 0.5 (the same target, its own draft): always / auto only; its baseline is step 2's none
#      server (no speculation has no draft: `bench.ab_collect --share-none`), which saves ~150 s;
#   4. the shifting draft (families p = 0.1 / 0.6), its concurrency from a curve learned on its own
#      32-token prompts (bench.auto_shift --calibrate 8,16,32,64, 8 s a level), phases 0 -> 1 -> 0 of 30 s.
# No FA3: steps `models` (.gpuwheels/A), `install 3` (.gpuwheels/B .devrun), then `wait 560` calls
# (a call may run 600 s). Estimated ~150 + ~800 + ~450 + ~200 s and ~4 min of start-up: step 4 may
# not fit. On an H100 the pools are cut to 49,152 tokens (the pool caps the batch at ~110-120: say so).
# Rename to its date when run.
export SELF=bench/gpu_run_2026_12_06f.sh
set -uo pipefail
source bench/gpu_ab_steps.sh
if [ "${1:-}" = models ]; then models_8b fam; exit 0; fi
dispatch "$@"
t0=$SECONDS
python3 -m bench.gate_correctness --models /tmp/models/1b/kv-p0.2 --build 1b --kv-sensitive --auto \
  --out "$R/gate-correctness-auto.json" --log-dir "$R/gate-logs" >"$R/gate.log" 2>&1
echo "gate-auto rc=$? $((SECONDS - t0)) s" >>"$R/jobs.log"
pkill -f '[l]aunch_server'; sleep 2; pkill -9 -f '[l]aunch_server'
models_p05
auto_ab ab-auto-triton-p0.2 1,4,16,32,64,128 --time-varying
pool=49152; if [ "${mib:-0}" -ge 100000 ]; then pool=131072; fi
ab ab-auto-triton-p0.5 --models /tmp/models/8b/p0.5 --a always --b auto --repeats 1 \
  --workloads varied-closed,varied-poisson --concurrency 1,4,16,32,64,128 --rates 4,16,48 --row-seconds 12 \
  --max-total-tokens "$pool"
t0=$SECONDS
python3 -m bench.auto_shift --models /tmp/models/8b/fam --out "$R/auto-shift.json" --concurrency 32 \
  --calibrate 8,16,32,64 --calibrate-seconds 8 --phase-seconds 30 --log-dir "$R/logs" >"$R/auto-shift.log" 2>&1
echo "auto-shift rc=$? $((SECONDS - t0)) s" >>"$R/jobs.log"
pkill -f '[l]aunch_server'; sleep 2; pkill -9 -f '[l]aunch_server'
touch "$R/all.done"
