"""bench/auto_run.py's control flow on CPU: servers, traffic calls, time-varying load, the auto
server's spec_gate and forced-off rows, a failed step recorded and the rest still run."""

from __future__ import annotations

import json
import types

import pytest

from bench import auto_run, server_harness, throughput


def test_every_config_runs_in_order_and_a_failure_is_recorded(tmp_path, monkeypatch):
    for p in ("p0.2", "p0.5"):
        (tmp_path / "models" / p / "target").mkdir(parents=True)
    started, calls, gates = [], [], []

    def start_server(name, args, port, log_dir, **kw):
        started.append((name, args))
        return types.SimpleNamespace(url=f"http://127.0.0.1:{port}", ready_s=1.0)

    monkeypatch.setattr(server_harness, "start_server", start_server)
    monkeypatch.setattr(server_harness, "wait_ready", lambda s, timeout_s: None)
    monkeypatch.setattr(server_harness, "stop_server", lambda s: 0)
    monkeypatch.setattr(server_harness, "spec_gate", lambda url: {"threshold": 24, "auto_probes": 3})
    monkeypatch.setattr(server_harness, "set_gate", lambda url, **kw: gates.append(kw) or {"updated": True})

    def main():
        import sys
        calls.append(sys.argv[1:])
        if "--config" in sys.argv and sys.argv[sys.argv.index("--config") + 1] == "always" and "0.5" in sys.argv:
            raise RuntimeError("server went away")

    monkeypatch.setattr(throughput, "main", main)
    monkeypatch.setattr(throughput, "time_varying", lambda config, port, work: {"wall_s": 10.0})
    out = tmp_path / "out"
    pairs = f"{tmp_path}/models/p0.2,{tmp_path}/models/p0.5"
    assert auto_run.main(["--pairs", pairs, "--out", str(out)]) == 1  # one configuration failed
    names = [n for n, _ in started]
    assert names == ["auto-run-none-p0.2", "auto-run-always-p0.2", "auto-run-auto-p0.2",
                     "auto-run-always-p0.5", "auto-run-auto-p0.5"]  # none once: the same target
    assert all("--speculative-disable-batch-threshold" in args for n, args in started if "auto-" in n.split("run-")[1][:5])
    runs = json.loads((out / "auto-run.json").read_text())["runs"]
    assert runs[3]["error"] == "RuntimeError: server went away" and "error" not in runs[4]
    assert [g for g in gates] == [{"threshold": 1, "hysteresis": 0}, {"threshold": "auto"}] * 2
    assert any("off" in c and "real-traffic.csv" in c for c in calls)
    assert len(json.loads((out / "time-varying.json").read_text())) == 4  # the failed one has none
    assert json.loads((out / "spec-gate-auto-p0.2.json").read_text())["threshold"] == 24


def test_a_missing_pair_is_a_one_line_error(tmp_path, capsys):
    assert auto_run.main(["--pairs", str(tmp_path / "nope"), "--out", str(tmp_path / "o")]) == 2
    assert "no synthetic pair" in capsys.readouterr().err


def test_every_server_gets_the_attention_backend_and_worker_asked_for(tmp_path):
    pair = tmp_path / "p0.2"
    for config in ("none", "always", "auto"):
        args = auto_run.server_args(pair, config, 0.8, "fa3", "v1")
        last = len(args) - 1 - args[::-1].index("--attention-backend")  # argparse keeps the last value
        assert args[last + 1] == "fa3", config
        assert "--disable-overlap-schedule" in args, config
        assert ("auto" in args) == (config == "auto")
    default = auto_run.server_args(pair, "always", 0.8)
    assert default.count("--attention-backend") == 1  # the harness's triton, not overridden
    assert default[default.index("--attention-backend") + 1] == "triton"
    assert "--disable-overlap-schedule" not in default


@pytest.mark.parametrize("args, message", [
    (["--configs", "bogus"], "--configs"),
    (["--concurrency", "x"], "positive integers"),
    (["--rates", "-1"], "rates > 0"),
    (["--row-seconds", "0"], "--row-seconds"),
    (["--profile-row", "garbage"], "profile-row"),
    (["--port", "0"], "--port"),
])
def test_bad_options_are_refused_before_a_server_starts(tmp_path, monkeypatch, capsys, args, message):
    (tmp_path / "p0.2" / "target").mkdir(parents=True)
    monkeypatch.setattr(server_harness, "start_server", lambda *a, **k: pytest.fail("no server after a bad option"))
    with pytest.raises(SystemExit) as exc:
        auto_run.main(["--pairs", str(tmp_path / "p0.2"), "--out", str(tmp_path / "o"), *args])
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_no_pair_and_an_unwritable_out_are_one_line_errors(tmp_path, capsys):
    with pytest.raises(SystemExit):
        auto_run.main(["--pairs", ",", "--out", str(tmp_path / "o")])
    assert "--pairs names no pair" in capsys.readouterr().err
    (tmp_path / "p0.2" / "target").mkdir(parents=True)
    (tmp_path / "file").write_text("")
    with pytest.raises(SystemExit):
        auto_run.main(["--pairs", str(tmp_path / "p0.2"), "--out", str(tmp_path / "file" / "o")])
    assert "--out" in capsys.readouterr().err
