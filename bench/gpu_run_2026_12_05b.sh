#!/usr/bin/env bash
# The second GPU run of 2026-12-05 (an H100, bench/results/h100-2026-12-05b/): fa3 none / forced off, one
# repeat at 32 / 64 / 128, then the torch profiler and py-spy at 128 on both servers; then v1 none / forced
# off (cut by the device time after its none rows of repeat 0). The session's first lease was taken back
# mid-run and returned nothing; this is the second, 15 minutes long.
# Steps and carries as bench/gpu_run_2026_12_03c.sh (models with .gpuwheels/A, install 3 with
# .gpuwheels/B .devrun, part 1..5 1 and part 6 200 with .gpuwheels/FN, then wait 415).
export SELF=bench/gpu_run_2026_12_05b.sh
set -uo pipefail
source bench/gpu_ab_steps.sh
dispatch "$@"
# A short lease (the first of 2026-12-05's second session was taken back mid-run, nothing returned):
# fa3 first, one repeat, for its profiles at 128; then v1's both repeats while device time lasts
fa3_ready && ab ab-fa3 --attention-backend fa3 --a none --b off --max-total-tokens 131072 --repeats 1 \
  --profile-row varied-closed:128 --cpu-profile-row varied-closed:128
ab ab-v1 --worker v1 --a none --b off --max-total-tokens 131072
touch "$R/all.done"
