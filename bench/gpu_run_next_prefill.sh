#!/usr/bin/env bash
# The auto threshold with prefills charged to each mode (SPECCONSOLE_AUTO_PREFILL=1, opt-in; built 2026-12-08,
# fifteenth session; not run): p = 0.2 none / auto / auto + prefill on triton v2, two interleaved repeats, Poisson
# 4 / 16 / 48 req/s (where h100-2026-12-08's auto was 0.972 / 1.059 / 1.036x the better static e2e) and closed
# 16 / 32 / 64 (the switch must not cost the closed rows), both auto servers tracing every decode result
# (`bench.auto_trace --table`: each mode's prefill cost, one_prefill_between), then gate_correctness --auto with the
# switch (v2 topk 1) if time is left. On an H200 the three 8B servers get 131,072-token pools.
# Steps: `models` (.gpuwheels/A), `wheels` (.gpuwheels/A2), `install 520` (.gpuwheels/B .devrun), `wait 570`,
# `wait ...`, sent at once (~900 s of rows with set-up). Rename to its date when run.
export SELF=bench/gpu_run_next_prefill.sh
set -uo pipefail
source bench/gpu_ab_steps.sh
dispatch "$@"
pool=$(three_pool)
ab ab-prefill --a none --b auto --c auto --c-env SPECCONSOLE_AUTO_PREFILL=1 --interleave --repeats "${REPEATS:-2}" \
  --workloads varied-poisson,varied-closed --rates "${RATES:-4,16,48}" --concurrency "${CONC:-16,32,64}" \
  --row-seconds 10 --max-total-tokens "$pool" \
  --b-env SPECCONSOLE_AUTO_TRACE="$R/auto-trace-b.jsonl" --c-env SPECCONSOLE_AUTO_TRACE="$R/auto-trace-c.jsonl"
t0=$SECONDS
SPECCONSOLE_AUTO_PREFILL=1 python3 -m bench.gate_correctness --models /tmp/models/1b/kv-p0.2 --build 1b --kv-sensitive \
  --auto --configs v2-topk1 --mem-fraction 0.5 --out "$R/gate-correctness-auto-prefill.json" --log-dir "$R/gate-logs" \
  >"$R/gate.log" 2>&1
echo "gate-auto-prefill rc=$? $((SECONDS - t0)) s" >>"$R/jobs.log"
pkill -f '[l]aunch_server'; sleep 2; pkill -9 -f '[l]aunch_server'
touch "$R/all.done"
