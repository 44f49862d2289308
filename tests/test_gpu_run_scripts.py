"""The next GPU runs' scripts (bench/gpu_run_next*.sh) pass bench.ab_traffic's argument checks.

A script runs on the GPU machine against a 30-minute budget, where an argument error costs a server
start and a call. Each script's chain runs here with its GPU steps stubbed out: every ``ab`` call goes
to ``bench.ab_traffic`` with synthetic-pair paths that do not exist, so that it stops, after checking
all of its arguments, at "no synthetic pair" (exit 2) instead of starting servers.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = sorted(ROOT.glob("bench/gpu_run_next*.sh"))

STUBS = r'''
R="$STUB_RUN"
dispatch() { :; }
models_p05() { :; }
models_8b() { :; }
shift_calibrated() { :; }
gate_auto() { :; }
fa3_ready() { return 0; }
placement_log() { :; }
ab() {
  local name=$1; shift
  local args=() prev=""
  for x in "$@"; do  # a pair that exists on this machine must never start a server here
    case "$prev" in --models|--b-models|--c-models) x="/nonexistent-specconsole-models/$(basename "$x")" ;; esac
    args+=("$x"); prev=$x
  done
  "$STUB_PYTHON" -m bench.ab_traffic --models /nonexistent-specconsole-models/p0.2 --repeats 2 \
    --workloads varied-closed --out "$R/$name" "${args[@]}" >/dev/null 2>"$R/$name.err"
  echo "$name $?" >>"$R/ab.rc"
}
'''


def test_there_are_next_run_scripts():
    assert SCRIPTS, "no bench/gpu_run_next*.sh"


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_each_ab_call_of_a_next_run_passes_the_argument_checks(script, tmp_path):
    text = script.read_text()
    assert "source bench/gpu_ab_steps.sh" in text, "a run script sources the shared steps"
    stub = tmp_path / "stubs.sh"
    stub.write_text(STUBS)
    chain = tmp_path / script.name
    chain.write_text(text.replace("source bench/gpu_ab_steps.sh",
                                  f"source bench/gpu_ab_steps.sh; source {stub}", 1))
    run = tmp_path / "run"
    run.mkdir()
    # the GPU machines have 16 CPUs (--pin-cpus cuts them into groups); this one may have fewer
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import os\nos.sched_getaffinity = lambda pid: set(range(16))\n")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "STUB_RUN": str(run), "STUB_PYTHON": sys.executable,
           "PYTHONPATH": str(site)}
    done = subprocess.run(["bash", str(chain)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    calls = [line.split() for line in (run / "ab.rc").read_text().splitlines()]
    assert calls, f"{script.name} calls no ab"
    for name, rc in calls:
        err = (run / f"{name}.err").read_text()
        assert rc == "2" and "no synthetic pair at /nonexistent-specconsole-models/" in err, (
            f"{script.name}: ab {name} did not pass bench.ab_traffic's checks: "
            f"{re.sub(r'(?s).*error: ', '', err).strip()[:300]}")
