"""bench.serving_driver: SGLang's bench_serving CLI run repeatedly in one process.

A stand-in CLI module (written to tmp_path) plays bench_serving: it parses its argv like a CLI,
writes a JSON line to --output-file, and imports a "heavy" module that counts its imports.
"""

import json
import sys
import textwrap

import pytest

from bench import serving_driver
from bench.serving_driver import IN_PROCESS, SUBPROCESS, ServingDriver

HEAVY = """
import os
COUNT_FILE = os.environ["FAKE_HEAVY_COUNT"]
with open(COUNT_FILE, "a") as f:
    f.write("x")
"""

CLI = """
import argparse, json, os, sys
import fake_heavy

if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--output-file", required=True)
    p.add_argument("--num-prompts", type=int, required=True)
    p.add_argument("--fail", choices=["exit", "raise", "in-process"])
    a = p.parse_args()
    print("benchmark_args", sys.argv[1:])
    if a.fail == "exit":
        print("server said no")
        sys.exit(3)
    if a.fail == "raise":
        raise ConnectionError("connection refused")
    if a.fail == "in-process" and "pytest" in sys.modules:
        raise RuntimeError("only works in a fresh interpreter")
    with open(a.output_file, "a") as f:
        f.write(json.dumps({"completed": a.num_prompts}) + "\\n")
"""


@pytest.fixture
def fake_cli(tmp_path, monkeypatch):
    (tmp_path / "fake_heavy.py").write_text(textwrap.dedent(HEAVY))
    (tmp_path / "fake_bench_serving.py").write_text(textwrap.dedent(CLI))
    count = tmp_path / "imports"
    count.write_text("")
    monkeypatch.setenv("FAKE_HEAVY_COUNT", str(count))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # for the subprocess fallback
    monkeypatch.delenv(serving_driver.MODE_ENV, raising=False)
    yield count
    for name in ("fake_heavy", "fake_bench_serving"):
        sys.modules.pop(name, None)


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_in_process_runs_share_one_import_and_restore_argv(fake_cli, tmp_path):
    driver = ServingDriver(module="fake_bench_serving")
    argv_before = list(sys.argv)
    out_file = tmp_path / "out.jsonl"
    first = driver.run(["--output-file", str(out_file), "--num-prompts", "4"])
    second = driver.run(["--output-file", str(out_file), "--num-prompts", "8"])
    assert _lines(out_file) == [{"completed": 4}, {"completed": 8}]
    assert "'--num-prompts', '4'" in first and "'--num-prompts', '8'" in second  # output captured
    assert fake_cli.read_text() == "x"  # the heavy import happened once for two runs
    assert sys.argv == argv_before
    assert driver.mode == IN_PROCESS and driver.fallback_reason is None


@pytest.mark.parametrize("how, says", [("exit", "exited with 3"), ("raise", "ConnectionError")])
def test_a_failing_run_raises_with_its_output_in_both_modes(fake_cli, tmp_path, how, says):
    driver = ServingDriver(module="fake_bench_serving")
    with pytest.raises(RuntimeError) as err:
        driver.run(["--output-file", str(tmp_path / "o"), "--num-prompts", "1", "--fail", how])
    text = str(err.value)
    assert "(subprocess)" in text and "in-process first" in text  # tried both, reports both
    assert says in text or "server said no" in text
    assert not (tmp_path / "o").exists()


def test_in_process_failure_that_a_subprocess_survives_switches_mode(fake_cli, tmp_path, capsys):
    driver = ServingDriver(module="fake_bench_serving")
    out_file = tmp_path / "out.jsonl"
    driver.run(["--output-file", str(out_file), "--num-prompts", "2", "--fail", "in-process"])
    assert _lines(out_file) == [{"completed": 2}]
    assert driver.mode == SUBPROCESS
    assert "only works in a fresh interpreter" in driver.fallback_reason
    assert "using subprocesses from now on" in capsys.readouterr().err
    driver.run(["--output-file", str(out_file), "--num-prompts", "3"])  # stays in subprocess mode
    assert _lines(out_file)[-1] == {"completed": 3}
    assert fake_cli.read_text() == "xxx"  # one in-process import, then one per subprocess


def test_mode_from_environment_and_bad_mode(monkeypatch):
    monkeypatch.setenv(serving_driver.MODE_ENV, "subprocess")
    assert ServingDriver(module="x").mode == SUBPROCESS
    monkeypatch.setenv(serving_driver.MODE_ENV, "anything-else")
    assert ServingDriver(module="x").mode == IN_PROCESS
    with pytest.raises(ValueError, match="mode must be"):
        ServingDriver(module="x", mode="threads")
