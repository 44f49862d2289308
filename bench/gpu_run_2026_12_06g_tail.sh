#!/usr/bin/env bash
# Sent mid-run on 2026-12-06 (second call after 560 s): bench/gpu_run_2026_12_06g.sh's chain (run as gpu_run_next.sh) stopped after its p = 0.5
# rows (budget), then v2 topk 1's auto gate_correctness alone (three at 0.25 of an H100 could not size
# its KV cache) and p = 0.2's time-varying load (one short 64-request row per side first: --repeats >= 1).
set -uo pipefail
source bench/gpu_ab_steps.sh
source .gpuwheels/B/env.sh
pkill -f '[g]pu_run_next.sh chain'  # the chain under the name it ran as (bench/gpu_run_2026_12_06g.sh now)
while pgrep -f '[a]b-auto-triton-p0.5' >/dev/null; do sleep 2; done
echo "ab-auto-triton-p0.5 ended" >>"$R/jobs.log"
pkill -f '[l]aunch_server'; sleep 2; pkill -9 -f '[l]aunch_server'
t0=$SECONDS
python3 -m bench.gate_correctness --models /tmp/models/1b/kv-p0.2 --kv-sensitive --auto --configs v2-topk1 \
  --mem-fraction 0.5 --out "$R/gate-correctness-auto-v2.json" --log-dir "$R/gate-logs-v2" >"$R/gate-v2.log" 2>&1
echo "gate-auto-v2 rc=$? $((SECONDS - t0)) s" >>"$R/jobs.log"
pkill -f '[l]aunch_server'; sleep 2; pkill -9 -f '[l]aunch_server'
ab ab-tv-triton-p0.2 --a none --b always --c auto --repeats 1 --workloads varied-closed --concurrency 64 \
  --row-seconds 6 --max-total-tokens 49152 --time-varying
touch "$R/all.done"
