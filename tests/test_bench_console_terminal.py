"""``bench.console_terminal``: the acceptance run of the console in a real pty, here against the
demo server (``SPECCONSOLE_SERVER_CMD``), with bench_serving stubbed (``--no-load``, a stand-in
module run by the real ``bench.serving_driver``, or a failing driver: the demo simulates its own load). Waits have timeouts; nothing asserts how long a step took.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench import console_terminal as ct
from console.process import group_members
from console_support import free_port
from server_patch import contract

pytest.importorskip("pyte")
pytest.importorskip("ptyprocess")

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "sglang-0.5.12-h200"
SUMMARY_KEYS = {"command", "date", "levels", "per_level", "console_access_lines_seen", "plain_words_seen",
                "confirmed_plus", "exit_status", "leftover_pids", "gpu_mem_after_mib", "error"}
LEVEL_KEYS = {"captures", "steady_captures", "median_ratio", "min_ratio", "max_ratio", "within_10pct"}


def demo_args(port: int) -> list[str]:
    return ["--port", str(port), "--startup-seconds", "0.3", "--load", "fixed:8", "--log-interval", "0.5",
            contract.THRESHOLD_FLAG, "32", "--enable-metrics"]


def run_args(out: Path, port: int, *extra: str) -> list[str]:
    return ["--out", str(out), "--levels", "4", "--seconds-per-level", "6", "--capture-every", "2",
            "--steady-after", "2", *extra, "--", *demo_args(port)]


def demo_pids(port: int) -> list[int]:
    """Live processes of a demo server on ``port``."""
    return [r["pid"] for r in ct.proc_table()
            if "console.demo_server" in r["cmdline"] and f"--port {port}" in r["cmdline"]]


def no_group_left(summary: dict) -> bool:
    """Nothing of the server's process group was left when the console had exited (processes that
    merely name sglang may be another job's on a shared test machine)."""
    return isinstance(summary["leftover_pids"], list) and not [r for r in summary["leftover"] if r["in_group"]]


@pytest.fixture
def demo_env(monkeypatch):
    monkeypatch.setenv("SPECCONSOLE_SERVER_CMD", f"{sys.executable} -m console.demo_server")


# -- pure parts ------------------------------------------------------------------------------------

def test_load_line_and_words():
    screen = "│ running 1,024  queue 3  5,980 tok/s   │\n│   SPEC OFF · decode batch 37 >= threshold 32 │"
    assert ct.parse_load_line(screen) == {"running": 1024, "queue": 3, "tok_s": 5980.0,
                                          "line": "running 1,024  queue 3  5,980 tok/s"}
    assert ct.parse_load_line("running n/a  queue n/a  n/a")["tok_s"] is None
    assert ct.parse_load_line("max running 96 req  cuda graph max bs 96 req") is None
    assert ct.spec_word(screen) == "SPEC OFF" and ct.spec_word("█▀▀ █▀█") is None
    assert ct.is_ready(" LAUNCH │ 127.0.0.1:30000 │ connected │\n" + screen)
    assert not ct.is_ready(" LAUNCH │ NOT CONNECTED: port 30000 is held by pid 7\n" + screen)
    assert not ct.is_ready(" LAUNCH │ starting: loading weights 12 s\n\n" + screen + "\n│ NCCL connected │")
    assert ct.confirmations("│ [console 10:00:00] threshold 32 -> 33 confirmed by spec_gate  ▁│") == {
        "threshold 32 -> 33 confirmed by spec_gate"}


def test_server_log_figures_from_the_recorded_h200_log():
    text = gzip.open(FIXTURES / "server-gate-under-console.log.gz", "rt").read()
    line = ct.newest_decode_line(text)
    assert line["running_req"] > 0 and line["gen_tok_s"] > 0 and line["time"].startswith("2026-12-01")
    assert ct.newest_decode_line("no decode lines here") is None
    assert set(ct.access_lines(text)) == {'"GET /server_info HTTP/1.1"', '"GET /v1/loads?include=core%2Cspec HTTP/1.1"'}
    demo = "[2026-12-01 22:31:03 TP0] Decode batch, #running-req: 9, #token: 3456, gen throughput (token/s): 1853.78, #queue-req: 2"
    assert ct.newest_decode_line(demo)["gen_tok_s"] == 1853.78 and ct.newest_decode_line(demo)["queue_req"] == 2


def test_model_paths_become_models():
    anchors = ct.model_path_anchors(["--model-path", "/tmp/models/8b/target",
                                     "--speculative-draft-model-path=/tmp/models/8b/draft", "--tokenizer-path", "org/tok"])
    body = {"model_path": "/tmp/models/8b/target", "list": ["/tmp/models/8b/draft"], "n": 3}
    assert ct.scrub(body, anchors) == {"model_path": "MODELS/8b/target", "list": ["MODELS/8b/draft"], "n": 3}
    assert ct.scrub('model_name="/tmp/models/8b/target"', anchors) == 'model_name="MODELS/8b/target"'
    assert ct.scrub("/m", ct.model_path_anchors(["--model-path", "/m"])) == "MODELS/m"


def test_level_stats_use_steady_captures_only():
    def cap(t, shown, server, age=1.0, running=8):
        return {"level": 4, "t_in_level_s": t, "load_active": True, "ratio": ct.ratio(shown, server),
                "shown_running": running, "server_line_age_s": age, "shown_tok_s": shown, "server_tok_s": server}
    caps = [cap(2, 10, 100), cap(12, 100, 100), cap(14, 105, 100), cap(16, 50, 100, age=99), cap(18, 0, 0)]
    stats = ct.level_stats(caps, 4, steady_after_s=10)
    assert stats["captures"] == 5 and stats["steady_captures"] == 2
    assert stats["median_ratio"] == 1.025 and stats["within_10pct"] is True
    assert ct.level_stats(caps, 32)["within_10pct"] is None


# -- against the demo server -------------------------------------------------------------------------

def check_outputs(out: Path, summary: dict, port: int) -> list[dict]:
    assert SUMMARY_KEYS <= set(summary), SUMMARY_KEYS - set(summary)
    assert summary["error"] is None, summary["error"]
    assert LEVEL_KEYS <= set(summary["per_level"]["4"])
    captures = [json.loads(line) for line in (out / "captures.jsonl").read_text().splitlines()]
    assert captures and all(c["level"] == 4 for c in captures)
    assert any(c["shown_tok_s"] and c["server_tok_s"] for c in captures), captures
    assert all((out / c["screen_file"]).is_file() for c in captures)
    assert summary["plain_words_seen"] is True and summary["console_access_lines_seen"] is False
    assert summary["confirmed_plus"] is True and summary["help_seen"] is True and summary["confirmations"]
    assert summary["exit_status"] == 0 and no_group_left(summary) and demo_pids(port) == []
    endpoints = json.loads((out / "endpoints.json").read_text())
    assert set(endpoints) == {"idle", "load-c4"}
    for tag in endpoints.values():
        assert set(tag) == set(ct.ENDPOINTS) | {"nvidia-smi"}  # nvidia-smi: beside, for the rank GPU check
        assert tag["/server_info"]["status"] == 200 and isinstance(tag["/server_info"]["body"], dict)
        assert isinstance(tag["/metrics"]["body"], str) and tag["/health"] == {"status": 200}
    assert list((out / "logs").glob("server-*.log"))
    return captures


@pytest.mark.timeout(240)
def test_acceptance_run_without_load(tmp_path, demo_env):
    port = free_port()
    out = tmp_path / "run"
    assert ct.main(run_args(out, port, "--no-load")) == 0
    summary = json.loads((out / "summary.json").read_text())
    check_outputs(out, summary, port)
    assert summary["load"] is False and summary["per_level"]["4"]["load_runs"] == []


#: plays sglang.bench_serving for bench.serving_driver (run in-process, in the load thread)
STAND_IN = """
import argparse, json, time

if __name__ == "__main__":
    p = argparse.ArgumentParser()
    for flag in ("--output-file", "--num-prompts", "--max-concurrency", "--port", "--dataset-name",
                 "--random-input-len", "--random-output-len"):
        p.add_argument(flag, required=True)
    a, _ = p.parse_known_args()
    with open(a.output_file + ".argv", "a") as f:
        f.write(json.dumps(vars(a)) + "\\n")
    time.sleep(1.0)
    with open(a.output_file, "w") as f:
        f.write(json.dumps({"output_throughput": 1000.0, "duration": 1.0, "completed": int(a.num_prompts)}) + "\\n")
"""


@pytest.mark.timeout(240)
def test_acceptance_run_with_stubbed_load(tmp_path, demo_env, monkeypatch):
    from bench.serving_driver import IN_PROCESS, ServingDriver

    (tmp_path / "stand_in_bench_serving.py").write_text(STAND_IN)
    monkeypatch.syspath_prepend(str(tmp_path))
    driver = ServingDriver(module="stand_in_bench_serving", mode=IN_PROCESS)
    monkeypatch.setattr(ct, "serving_driver", lambda: driver)
    port = free_port()
    out = tmp_path / "run"
    assert ct.main(run_args(out, port)) == 0
    summary = json.loads((out / "summary.json").read_text())
    check_outputs(out, summary, port)
    assert driver.mode == IN_PROCESS and summary["load_error"] is None
    runs = summary["per_level"]["4"]["load_runs"]
    assert runs and all(r["completed"] == r["num_prompts"] and "error" not in r for r in runs)
    assert summary["warmup"] and summary["warmup"][0]["completed"] == 4
    argv = json.loads((out / "load" / "c4-0.jsonl.argv").read_text().splitlines()[0])
    assert argv["max_concurrency"] == "4" and argv["port"] == str(port) and argv["dataset_name"] == "random-ids"
    assert argv["random_input_len"] == argv["random_output_len"] == "256"


class FailingDriver:
    def run(self, argv: list[str]) -> str:
        raise RuntimeError("sglang.bench_serving exited with 1 (subprocess): no tokenizer")


@pytest.mark.timeout(240)
def test_a_failing_load_is_reported_and_the_rest_still_runs(tmp_path, demo_env, monkeypatch):
    monkeypatch.setattr(ct, "serving_driver", FailingDriver)
    port = free_port()
    out = tmp_path / "run"
    assert ct.main(run_args(out, port)) == 1
    summary = json.loads((out / "summary.json").read_text())
    assert summary["error"] is None and "no tokenizer" in summary["load_error"]
    assert summary["per_level"]["4"]["load_runs"] == [] and summary["per_level"]["4"]["steady_captures"] == 0
    assert summary["confirmed_plus"] is True and summary["exit_status"] == 0 and no_group_left(summary)
    assert demo_pids(port) == []


@pytest.mark.timeout(120)
def test_a_crashing_server_still_gives_a_summary(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCONSOLE_SERVER_CMD", f"{sys.executable} -c 'import sys; print(\"boom\"); sys.exit(3)'")
    out = tmp_path / "run"
    assert ct.main(["--out", str(out), "--no-load", "--ready-timeout", "60", "--", "--port", str(free_port())]) == 1
    summary = json.loads((out / "summary.json").read_text())
    assert SUMMARY_KEYS <= set(summary)
    assert "crashed" in summary["error"]
    assert not summary["server_pgid"] or group_members(summary["server_pgid"]) == []
    assert list((out / "screens").glob("*-error.txt"))


@pytest.mark.timeout(180)
def test_sigterm_stops_everything_and_writes_the_summary(tmp_path):
    port = free_port()
    out = tmp_path / "run"
    env = dict(os.environ, SPECCONSOLE_SERVER_CMD=f"{sys.executable} -m console.demo_server")
    args = ["--out", str(out), "--levels", "4", "--seconds-per-level", "600", "--capture-every", "1", "--no-load",
            "--", *demo_args(port)]
    proc = subprocess.Popen([sys.executable, "-m", "bench.console_terminal", *args], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not (out / "captures.jsonl").exists() and proc.poll() is None:
            time.sleep(0.2)
        assert (out / "captures.jsonl").exists(), (out / "progress.log").read_text()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 1
    finally:
        if proc.poll() is None:
            proc.kill()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["error"].startswith("interrupted") and summary["console_killed"] is True
    assert summary["server_pgid"] and group_members(summary["server_pgid"]) == []
    assert demo_pids(port) == []


def test_shown_tok_s_is_also_compared_with_what_the_clients_got():
    from bench.console_terminal import vs_clients

    stats = {"median_shown_tok_s": 8049.0, "load_runs": [
        {"output_throughput": 8748.0, "duration": 19.7}, {"output_throughput": 9000.0, "duration": 0.0}]}
    assert vs_clients(stats) == {"client_tok_s": 8748.0, "median_ratio_vs_clients": 0.9201,
                                 "within_10pct_vs_clients": True}
    assert vs_clients({"median_shown_tok_s": None, "load_runs": []})["client_tok_s"] is None


def test_bench_servings_own_server_info_requests_are_not_the_consoles_polls():
    from bench import console_terminal as ct

    line = '[2026-12-02 17:48:12] INFO:     127.0.0.1:47364 - "GET /server_info HTTP/1.1" 200 OK\n'
    assert ct.access_lines(line * 2) == []  # a bench_serving run's start and end
    assert ct.access_lines(line * ct.OWN_POLL_ROWS) == ['"GET /server_info HTTP/1.1"']


def test_a_server_on_another_port_is_not_a_leftover_of_the_console(monkeypatch):
    from bench import console_terminal as ct

    table = [{"pid": 11, "cmdline": "python3 -m server_patch.launch_server --model-path m --port 31500"},
             {"pid": 12, "cmdline": "python3 -m server_patch.launch_server --model-path m --port 30000"},
             {"pid": 13, "cmdline": "python3 -m sglang.launch_server --port=30000 --x"}]
    monkeypatch.setattr(ct, "proc_table", lambda: table)
    monkeypatch.setattr(ct, "own_lineage", lambda: set())
    monkeypatch.setattr(ct, "group_members", lambda pgid: [])
    assert [r["pid"] for r in ct.leftovers(None, "30000")] == [12, 13]
    assert [r["pid"] for r in ct.leftovers(None)] == [11, 12, 13]


def test_varied_lengths_load_uses_the_traffic_shapes():
    from pathlib import Path

    from bench import console_terminal as ct

    argv = ct.load_argv("127.0.0.1", 30000, 32, 100, 1, Path("x.jsonl"), "varied")
    assert argv[argv.index("--random-input-len") + 1] == "1024"
    assert argv[argv.index("--random-range-ratio") + 1] == "0.0625"
    assert ct.load_argv("h", 1, 1, 1, 1, Path("x"))[ct.load_argv("h", 1, 1, 1, 1, Path("x")).index("--random-range-ratio") + 1] == "1.0"


def test_the_window_figure_is_the_mean_of_the_decode_lines_of_the_last_seconds():
    import time as _time

    from bench import console_terminal as ct

    def line(ts, tps):
        return (f"[{ts}] Decode batch, #running-req: 32, #token: 100, token usage: 0.01, cuda graph: True, "
                f"gen throughput (token/s): {tps}, #queue-req: 0\n")

    text = line("2026-12-02 17:47:58", 9000.0) + line("2026-12-02 17:48:03", 3000.0) + line("2026-12-02 17:48:05", 4000.0)
    now = _time.mktime(_time.strptime("2026-12-02 17:48:05", "%Y-%m-%d %H:%M:%S"))
    assert ct.window_decode_tok_s(text, now, 6.0) == 3500.0  # the 17:47:58 line is outside (now - 6, now]
    assert ct.window_decode_tok_s(text, now - 60, 6.0) is None


def test_recheck_rereads_a_finished_run_and_writes_its_own_file(tmp_path):
    import json as _json
    import shutil

    from bench import console_terminal as ct

    recorded = Path(__file__).resolve().parent.parent / "bench" / "results" / "h200-2026-12-02c" / "console"
    run = tmp_path / "run"
    shutil.copytree(recorded, run)
    (run / "summary-recheck.json").unlink(missing_ok=True)
    assert ct.main(["--recheck", "--out", str(run)]) == 0
    got = _json.loads((run / "summary-recheck.json").read_text())
    assert got["per_level"]["4"]["window_within_10pct"] == 1.0 and got["leftover_pids"] == []
    assert got["other_processes"] == [2109] and got["console_access_lines_seen"] is False
    assert (run / "captures.jsonl").exists() and (run / "summary.json").exists()  # nothing cleared
    assert ct.main(["--recheck", "--out", str(tmp_path / "missing")]) == 1
