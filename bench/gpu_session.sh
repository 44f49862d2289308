#!/usr/bin/env bash
# Steps of a GPU-machine session (see ../shared/gpu/README.md). Run from the repo root there:
#   bash bench/gpu_session.sh copy-a            (carry .gpuwheels/A)
#   bash bench/gpu_session.sh install           (carry .gpuwheels/B and .devrun: our wheel, built here
#                                                with `pip wheel --no-deps -w .devrun .`)
#   bash bench/gpu_session.sh models PRESET P...   synthetic pairs into /tmp/models/PRESET/pP
#   bash bench/gpu_session.sh smoke | gate [args]
#   bash bench/gpu_session.sh gate-kv [args]    the gate on the KV-sensitive 1b pair (built into
#                                                /tmp/models/1b/kv-p0.2 on the first call)
set -euo pipefail
step=${1:?step}; shift || true
out=${OUT:-/tmp/out}; mkdir -p "$out"
env_sh() { source .gpuwheels/B/env.sh 2>/dev/null || export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} PATH=/tmp/site/bin:$PATH HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1; }
case "$step" in
  copy-a)
    mkdir -p /tmp/whl && cp .gpuwheels/A/*.whl /tmp/whl/ && ls /tmp/whl | wc -l
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv ;;
  install)
    cp .gpuwheels/B/*.whl .devrun/*.whl /tmp/whl/
    bash .gpuwheels/B/install-on-gpu.sh
    env_sh
    python3 -c "from importlib.metadata import entry_points as e; print('plugins:', [x.value for x in e(group='sglang.srt.plugins')])" ;;
  models)
    env_sh; preset=${1:?preset}; shift
    for p in "$@"; do
      python3 -m bench.synthetic_models --out /tmp/models/$preset/p$p --preset "$preset" --p-wrong "$p" --device cuda
    done ;;
  smoke)
    env_sh; python3 -m bench.gpu_smoke --models-root /tmp/models/1b --out "$out/gpu-smoke.json" "$@" ;;
  gate)
    env_sh; python3 -m bench.gate_correctness --models /tmp/models/1b/p0.2 --out "$out/gate-correctness.json" "$@" ;;
  gate-kv)
    env_sh; m=/tmp/models/1b/kv-p0.2
    build=(); [ -f $m/oracle.json ] || build=(--build 1b --p-wrong 0.2)
    python3 -m bench.gate_correctness --models $m "${build[@]}" --kv-sensitive --out "$out/gate-correctness-kv.json" "$@" ;;
  logs)
    tar czf "$out/logs.tgz" -C /tmp specconsole-logs 2>/dev/null || true ;;
  *) echo "unknown step $step" >&2; exit 2 ;;
esac
