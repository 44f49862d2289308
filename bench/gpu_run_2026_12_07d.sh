#!/usr/bin/env bash
# The run of bench/results/h100-2026-12-07d/ (2026-12-07, tenth session, one H100, 1,530 s of budget after
# two refused starts): bench/gpu_run_next_17p05.sh from commit e86717a's tree (the plugin wheel from a2ee340's
# server_patch, unchanged since) with REPEATS=3; its steps were `models` (.gpuwheels/A), `wheels`
# (.gpuwheels/A2), `REPEATS=3 ... install 520` (.gpuwheels/B .devrun), `wait 570`, `wait 320`. The budget ended
# in repeat 2 after auto's row at 128 requests (the shift step never ran). That script stays the plan of the
# next sessions, so this one only names the setting.
export REPEATS=${REPEATS:-3}
exec bash bench/gpu_run_next_17p05.sh "$@"
