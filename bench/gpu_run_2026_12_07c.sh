#!/usr/bin/env bash
# The run of bench/results/h100-2026-12-07c/ (2026-12-07, one H100, 406 s of budget): bench/gpu_run_next_17p05.sh from
# commit 784477d's tree (the plugin wheel from a2ee340's server_patch, unchanged since) with the cut-budget settings; its steps were `models` (.gpuwheels/A), `wheels`
# (.gpuwheels/A2) and `REPEATS=2 CONC=4 RATES=4 ... install 370` (.gpuwheels/B .devrun). That script stays the
# next session's plan, so this one only names the settings.
export REPEATS=${REPEATS:-2} CONC=${CONC:-4} RATES=${RATES:-4}
exec bash bench/gpu_run_next_17p05.sh "$@"
