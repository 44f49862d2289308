#!/usr/bin/env bash
# The KV reserve (server_patch/kv_reserve.py, opt-in; prepared 2026-12-07, fourteenth session, not run), triton v2,
# 8B pair, not pinned. SGLang's spec-v2 prepare_for_decode allocates a few KV slots for every request on nearly every
# decode step; with SPECCONSOLE_KV_RESERVE=16 a step that must allocate tops all requests up 16 beyond SGLang's bound
# and the steps between allocate nothing (07g's py-spy: its self time 7.7 ms per 1,000 tokens on the OFF server
# against 2.1 for a server without speculation's one slot, at 32 requests).
#   1. p = 0.5 none / auto / auto + reserve (auto OFF from ~16 up), closed 32 / 64 / 128, two interleaved repeats,
#      py-spy on the three at 32; read per running-request count (decode_log --versus cannot pair B's and C's lines:
#      C's #token counts its reserved slots), then by function:
#        python -m bench.decode_log ab-reserve/server-logs/ab-b-auto-p0.5.log.gz --sizes 32,64   (and c)
#        python -m bench.cpu_profile compare --by self ab-reserve/profile/{b,c}/cpu-profile-*.json
#      and the reserve's own counters in C's spec_gate (kv_reserve_topups / _skipped_steps / _checks / _mismatches).
#   2. bench.gate_correctness v2-topk1 on the KV-sensitive 1B pair with the reserve: oracle-exact, every proof 0
#      mismatches (kv_reserve_proof_ok among them).
#   3. ON steps: p = 0.2 always / auto / auto + reserve at 4 / 16 (auto ON there), one repeat interleaved.
# Steps: `models` (.gpuwheels/A), `wheels` (.gpuwheels/A2), `install 520` (.gpuwheels/B .devrun), `wait 570`,
# `wait ...`, sent at once. About 1,000 s with set-up (part 1 ~450 s with its servers' start, 2 ~200 s, 3 ~250 s);
# for a cut budget CONC=32,64 and ON_PART=0 on the install step (~550 s).
# Prepared as gpu_run_next_reserve.sh; run 2026-12-07 (fourteenth session), results in bench/results/*-2026-12-07h/.
export SELF=bench/gpu_run_2026_12_07h.sh
set -uo pipefail
source bench/gpu_ab_steps.sh
dispatch "$@"
reserve_parts
touch "$R/all.done"
