"""``python -m bench.throughput`` on bad input: one line on stderr, a non-zero exit, no traceback,
and no ``--out`` file. (``bench.decode_log``'s errors are in ``test_bench_decode_log.py``.)"""

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench import throughput

HEADER = ",".join(throughput.CSV_COLUMNS)
GOOD = [
    "none,0.2,64,8000,6,6.5,,",
    "gate-forced-off,0.2,64,7600,6.3,6.9,2.9,1",
]


def write_csv(path: Path, *lines: str, header: str = HEADER) -> Path:
    path.write_text("\n".join([header, *lines]) + "\n")
    return path


def fails(monkeypatch, capsys, *args) -> str:
    """Run the CLI expecting a non-zero exit without starting a server; return the error line."""
    monkeypatch.setattr(throughput, "run", lambda a: pytest.fail("run() must not start after an error"))
    monkeypatch.setattr(sys, "argv", ["throughput", *map(str, args)])
    with pytest.raises(SystemExit) as exc:
        throughput.main()
    code = exc.value.code
    assert code not in (0, None)
    # sys.exit("...") carries the message (Python prints it, exit 1); parser.error printed it (exit 2).
    message = code if isinstance(code, str) else capsys.readouterr().err.strip().splitlines()[-1]
    assert "\n" not in message and "Traceback" not in message
    return message


# 1. missing file / directory -------------------------------------------------------------------

def test_summarize_without_a_csv_names_the_missing_default_file(tmp_path, monkeypatch, capsys):
    msg = fails(monkeypatch, capsys, "summarize", "--results", tmp_path)
    assert f"no such file: {tmp_path / 'throughput.csv'}" in msg


@pytest.mark.parametrize("cmd", ["summarize", "plot", "offcost"])
def test_a_missing_csv_or_a_directory_is_named(tmp_path, monkeypatch, capsys, cmd):
    out = ["--out", tmp_path / "out.json"] if cmd != "summarize" else []
    assert fails(monkeypatch, capsys, cmd, tmp_path / "nope.csv", *out) == f"no such file: {tmp_path / 'nope.csv'}"
    assert fails(monkeypatch, capsys, cmd, tmp_path, *out) == f"{tmp_path} is a directory"
    assert not (tmp_path / "out.json").exists()


# 2. not a throughput CSV -----------------------------------------------------------------------

@pytest.mark.parametrize("cmd", ["summarize", "plot", "offcost"])
def test_a_csv_without_the_columns_names_the_file_and_the_missing_columns(tmp_path, monkeypatch, capsys, cmd):
    path = tmp_path / "hello.csv"
    path.write_text("hello world\n")
    out = ["--out", tmp_path / "out.json"] if cmd != "summarize" else []
    msg = fails(monkeypatch, capsys, cmd, path, *out)
    assert msg.startswith(f"{path} is not a throughput CSV: missing columns config, p_wrong, concurrency")
    assert not (tmp_path / "out.json").exists()


def test_a_real_traffic_csv_given_to_summarize_points_to_summarize_traffic(monkeypatch, capsys):
    path = Path(__file__).resolve().parents[1] / "bench" / "results" / "h100-2026-12-06f" / "auto-threshold.csv"
    msg = fails(monkeypatch, capsys, "summarize", path)
    assert msg == f"{path} is a real-traffic CSV: read it with `python -m bench.throughput summarize-traffic {path}`"


def test_a_csv_missing_one_column_names_only_that_column(tmp_path, monkeypatch, capsys):
    path = write_csv(tmp_path / "t.csv", "none,0.2,64,8000,6,,", header=HEADER.replace(",p99_tpot_ms", ""))
    assert fails(monkeypatch, capsys, "summarize", path).endswith("missing columns p99_tpot_ms")


# 3. cells that are not measurements --------------------------------------------------------------

@pytest.mark.parametrize("line, column, says", [
    ("none,0.2,abc,8000,6,6.5,,", "concurrency", "'abc' is not an integer"),
    ("none,0.2,64", "output_tok_s", "is missing (short line)"),
    ("none,0.2,64,,6,6.5,,", "output_tok_s", "is empty"),
    ("none,0.2,64,nan,6,6.5,,", "output_tok_s", "'nan' is not a measurement"),
    ("none,0.2,64,8000,inf,6.5,,", "mean_tpot_ms", "'inf' is not a measurement"),
    ("none,0.2,64,8000,6,-1,,", "p99_tpot_ms", "'-1' is not a measurement"),
    ("none,0.2,0,8000,6,6.5,,", "concurrency", "'0' is not a measurement"),
    ("always,0.2,64,8000,6,6.5,-2,", "accept_length", "'-2' is not a measurement"),
    ("gate-n8,0.2,64,8000,6,6.5,2.9,", "threshold", "is empty"),  # recommend() needs N
])
def test_a_bad_cell_is_named_by_file_line_and_column(tmp_path, monkeypatch, capsys, line, column, says):
    path = write_csv(tmp_path / "t.csv", GOOD[0], line)
    msg = fails(monkeypatch, capsys, "summarize", path)
    assert msg.startswith(f"{path}:3: column {column}: ") and says in msg


def test_extra_values_are_refused_and_optional_cells_may_be_empty(tmp_path, monkeypatch, capsys):
    path = write_csv(tmp_path / "t.csv", GOOD[0] + ",oops")
    assert fails(monkeypatch, capsys, "summarize", path) == f"{path}:2: more values than columns"
    rows = throughput.read_rows([write_csv(tmp_path / "ok.csv", *GOOD)])
    assert [r["config"] for r in rows] == ["none", "gate-forced-off"] and rows[0]["output_tok_s"] == "8000"


# 4. binary file --------------------------------------------------------------------------------

def test_a_binary_csv_is_refused(tmp_path, monkeypatch, capsys):
    path = tmp_path / "t.csv"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe\x81" * 20)
    assert fails(monkeypatch, capsys, "summarize", path) == f"{path} is not a text CSV (not UTF-8; binary file?)"


# 5. nothing to work with -----------------------------------------------------------------------

@pytest.mark.parametrize("content", ["", HEADER + "\n"], ids=["empty", "header-only"])
@pytest.mark.parametrize("cmd", ["summarize", "plot", "offcost"])
def test_an_empty_or_header_only_csv_has_no_rows(tmp_path, monkeypatch, capsys, content, cmd):
    path = tmp_path / "t.csv"
    path.write_text(content)
    out = ["--out", tmp_path / "out.json"] if cmd != "summarize" else []
    assert fails(monkeypatch, capsys, cmd, path, *out) == f"{path} has no rows"
    assert not (tmp_path / "out.json").exists()


def test_offcost_without_a_none_and_forced_off_pair_writes_nothing(tmp_path, monkeypatch, capsys):
    path = write_csv(tmp_path / "t.csv", GOOD[0], "gate-forced-off,0.2,128,7600,6.3,6.9,2.9,1")
    msg = fails(monkeypatch, capsys, "offcost", path, "--out", tmp_path / "cost.json")
    assert msg.startswith("no (none, gate-forced-off) pair at the same p_wrong and concurrency")
    assert not (tmp_path / "cost.json").exists()


def test_offcost_with_a_pair_still_writes_the_json(tmp_path, monkeypatch, capsys):
    path = write_csv(tmp_path / "t.csv", *GOOD)
    monkeypatch.setattr(sys, "argv", ["throughput", "offcost", str(path), "--out", str(tmp_path / "cost.json")])
    throughput.main()
    cost = json.loads((tmp_path / "cost.json").read_text())
    assert [(r["concurrency"], r["ratio"]) for r in cost["rows"]] == [(64, 0.95)]
    # the recorded command is one that runs as written (fresh-user finding: it lacked --out)
    assert cost["command"] == f"python -m bench.throughput offcost {path} --out {tmp_path / 'cost.json'}"
    monkeypatch.setattr(sys, "argv", ["throughput", "offcost", str(path), "--out", str(tmp_path / "c2.json"),
                                      "--note", "run's note"])
    throughput.main()
    again = json.loads((tmp_path / "c2.json").read_text())
    assert again["command"].endswith(""" --note 'run'"'"'s note'""") and again["note"] == "run's note"


# 6. --out that cannot be written ---------------------------------------------------------------

@pytest.mark.parametrize("cmd", ["plot", "offcost"])
def test_out_in_a_missing_directory_is_refused_before_reading(tmp_path, monkeypatch, capsys, cmd):
    out = tmp_path / "nonexistent" / "dir" / "x.json"
    msg = fails(monkeypatch, capsys, cmd, tmp_path / "not-read.csv", "--out", out)
    assert msg.endswith(f"--out {out}: directory {out.parent} does not exist")
    msg = fails(monkeypatch, capsys, cmd, tmp_path / "not-read.csv", "--out", tmp_path)
    assert msg.endswith("is a directory; give a file name")


def test_out_never_overwrites_an_input_csv(tmp_path, monkeypatch, capsys):
    path = write_csv(tmp_path / "t.csv", *GOOD)
    before = path.read_text()
    msg = fails(monkeypatch, capsys, "offcost", path, "--out", path)
    assert msg.endswith("is one of the input CSVs; it would be overwritten")
    assert path.read_text() == before


# 7. plot without matplotlib --------------------------------------------------------------------

def test_plot_without_matplotlib_says_how_to_install_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    path = write_csv(tmp_path / "t.csv", *GOOD)
    msg = fails(monkeypatch, capsys, "plot", path, "--out", tmp_path / "t.png")
    assert msg == "plot needs matplotlib: pip install matplotlib"
    assert not (tmp_path / "t.png").exists()


# 9. help for every subcommand and option -------------------------------------------------------

def test_every_subcommand_and_option_has_help(monkeypatch):
    class Built(Exception):
        pass

    def built(self, *args, **kwargs):
        raise Built(self)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", built)
    with pytest.raises(Built) as exc:
        throughput.main()
    ap = exc.value.args[0]
    sub = next(a for a in ap._actions if isinstance(a, argparse._SubParsersAction))
    helps = {c.dest: bool(c.help) for c in sub._choices_actions}
    assert helps == dict.fromkeys(["run", "summarize", "plot", "offcost", "traffic", "summarize-traffic",
                                   "compare-profiles"], True)
    for name, parser in sub.choices.items():
        assert [a.dest for a in parser._actions if not a.help] == [], name
    run_help = sub.choices["run"].format_help()
    assert "fraction of GPU memory" in run_help and "concurrent requests" in run_help


# 10. run: the models must be there (checked before any server starts) ----------------------------

def test_run_refuses_a_directory_that_is_not_a_synthetic_pair(tmp_path, monkeypatch, capsys):
    msg = fails(monkeypatch, capsys, "run", "--config", "none", "--models", tmp_path / "nope", "--out", tmp_path / "o")
    assert "is not a synthetic pair made by python -m bench.synthetic_models" in msg and "no such directory" in msg
    (tmp_path / "half" / "target").mkdir(parents=True)
    msg = fails(monkeypatch, capsys, "run", "--config", "none", "--models", tmp_path / "half", "--out", tmp_path / "o")
    assert "(needs target/, draft/, oracle.json; missing: draft, oracle.json)" in msg
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("flag", ["--target", "--draft"])
def test_run_refuses_a_local_model_path_that_does_not_exist(tmp_path, monkeypatch, capsys, flag):
    paths = {"--target": "org/target", "--draft": "org/draft", flag: str(tmp_path / "missing")}
    msg = fails(monkeypatch, capsys, "run", "--config", "always", "--target", paths["--target"],
                "--draft", paths["--draft"], "--out", tmp_path / "o")
    assert f"{flag} {tmp_path / 'missing'}: no such directory" in msg


def test_run_passes_hugging_face_ids_and_existing_dirs_through(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr(throughput, "run", lambda a: seen.append(a) or True)
    monkeypatch.setattr(sys, "argv", ["throughput", "run", "--config", "gate", "--target", "org/name",
                                      "--draft", str(tmp_path), "--out", str(tmp_path / "o"),
                                      "--concurrency", "1,4", "--", "--tp-size", "2"])
    throughput.main()
    assert seen[0].target == "org/name" and seen[0].concurrency == [1, 4] and seen[0].server_args == ["--tp-size", "2"]


def test_run_refuses_bad_levels(tmp_path, monkeypatch, capsys):
    msg = fails(monkeypatch, capsys, "run", "--config", "gate", "--target", "org/t", "--draft", "org/d",
                "--out", tmp_path, "--concurrency", "1,a")
    assert "expected comma-separated positive integers, got '1,a'" in msg


# the real command line: exit status and stderr, no traceback --------------------------------------

def test_the_module_prints_one_line_without_a_traceback(tmp_path):
    path = tmp_path / "hello.csv"
    path.write_text("hello world\n")
    proc = subprocess.run([sys.executable, "-m", "bench.throughput", "summarize", str(path)],
                          capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.splitlines() == [f"{path} is not a throughput CSV: missing columns "
                                        + ", ".join(throughput.CSV_COLUMNS)]


def test_offcost_write_error_is_one_line(tmp_path, monkeypatch, capsys):
    """``--out /dev/full``: the directory exists, the write fails (was an OSError traceback)."""
    import bench.throughput as t

    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full on this machine")
    csv_path = tmp_path / "t.csv"
    csv_path.write_text(
        "config,p_wrong,concurrency,output_tok_s,mean_tpot_ms,p99_tpot_ms,accept_length,threshold\n"
        "none,0.2,64,8800,6.5,7.4,,\n"
        "gate-forced-off,0.2,64,7200,8.1,8.4,2.95,1\n")
    monkeypatch.setattr("sys.argv", ["x", "offcost", str(csv_path), "--out", "/dev/full"])
    with pytest.raises(SystemExit) as exc:
        t.main()
    assert "cannot write /dev/full" in str(exc.value.code)


def test_summarize_warns_about_rows_it_would_drop_or_pick_silently():
    from bench.throughput import row_warnings

    row = dict(p_wrong="0.2", output_tok_s="1", mean_tpot_ms="1", p99_tpot_ms="1", accept_length="", threshold="")
    rows = [dict(row, config="none", concurrency="64"), dict(row, config="none", concurrency="64"),
            dict(row, config="weird", concurrency="8"), dict(row, config="gate-n12", concurrency="8", threshold="12")]
    warnings = row_warnings(rows)
    assert any("unknown config(s) weird" in w for w in warnings)
    assert any("none p=0.2 at 64" in w and "last one read" in w for w in warnings)
    assert row_warnings(rows[:1]) == []


# run(): what a run stopped half-way leaves behind ------------------------------------------------

def test_run_writes_its_json_after_every_phase_so_a_late_failure_keeps_the_rows(tmp_path, monkeypatch, capsys):
    """A gate run whose threshold sweep fails still has its levels, time-varying load and
    forced-off rows on disk (x2-2026-11-30c lost a gate's time-varying result that way)."""
    from bench import server_harness

    class FakeServer:
        url, ready_s = "http://127.0.0.1:1", 1.0

        def log_tail(self, n):
            return "last log line"

    written = []
    real_write_json = server_harness.write_json

    def write_json(path, data):
        real_write_json(path, data)
        written.append(json.loads(path.read_text()))

    def set_gate(url, threshold=None, hysteresis=None, **values):
        if threshold == 16:
            raise RuntimeError("server went away")
        return {"updated": True}

    monkeypatch.setattr(server_harness, "start_server", lambda *a, **k: FakeServer())
    monkeypatch.setattr(server_harness, "wait_ready", lambda *a, **k: None)
    monkeypatch.setattr(server_harness, "stop_server", lambda s: -9)
    monkeypatch.setattr(server_harness, "set_gate", set_gate)
    monkeypatch.setattr(server_harness, "spec_gate", lambda url: {"accept_length_recent": 2.9})
    monkeypatch.setattr(server_harness, "write_json", write_json)
    import httpx
    monkeypatch.setattr(httpx, "get", lambda *a, **k: httpx.Response(200, json={"version": "0.5.12"}))
    monkeypatch.setattr(throughput.subprocess, "run", lambda *a, **k: argparse.Namespace(stdout="H200, 580\n"))
    monkeypatch.setattr(throughput, "bench_serving", lambda port, c, n, out, seed=1: {
        "output_throughput": 100.0 * c, "mean_tpot_ms": 5.0, "p99_tpot_ms": 6.0, "duration": 1.0,
        "total_output_tokens": 256 * n})
    a = argparse.Namespace(
        config="gate", models=None, label="prod", target="t", draft="d", threshold=48, hysteresis=2,
        concurrency=[1, 64], time_varying=True, recommend=True, recommend_thresholds=[16],
        recommend_levels=[16], profile=None, mem_fraction=0.8, port=1, server_args=[], out=tmp_path)
    assert throughput.run(a) is False  # main() exits 1 on it

    final = json.loads((tmp_path / "throughput-gate-pprod.json").read_text())
    assert len(written) >= 4  # levels, time-varying, forced-off, then the end
    assert "time_varying" not in written[0] and "time_varying" in written[1]
    assert final["time_varying"]["total_output_tokens"] == 256 * sum(n for _, n in throughput.TIME_VARYING)
    assert [r["concurrency"] for r in final["forced_off"]] == [64, 128]
    assert final["error"] == "RuntimeError: server went away" and final["exit_code"] == -9
    assert final["bench_serving_mode"] in ("in-process", "subprocess")
    rows = throughput.read_rows([tmp_path / "throughput.csv"])
    assert [(r["config"], r["concurrency"]) for r in rows] == [
        ("gate", "1"), ("gate", "64"), ("gate-forced-off", "64"), ("gate-forced-off", "128")]
    out, err = capsys.readouterr()
    assert '"time_varying"' in out  # printed when measured, not only at the end
    assert err.splitlines() == ["RuntimeError: server went away", "last log line"]  # on stderr, each line once


def test_run_exits_1_when_the_server_fails_to_start(tmp_path, monkeypatch, capsys):
    """Fresh-user find: a server that exited during start-up printed its error to stdout, the log
    tail twice, and exited 0."""
    from bench import server_harness

    class FakeServer:
        url, ready_s = "http://127.0.0.1:1", 1.0

        def log_tail(self, n):
            return "ValueError: no model at x"

    def wait_ready(*a, **k):
        raise RuntimeError("bench-none-pmodel exited with 1: ValueError: no model at x")

    monkeypatch.setattr(server_harness, "start_server", lambda *a, **k: FakeServer())
    monkeypatch.setattr(server_harness, "wait_ready", wait_ready)
    monkeypatch.setattr(server_harness, "stop_server", lambda s: 1)
    monkeypatch.setattr(sys, "argv", ["throughput", "run", "--config", "none", "--target", "org/x",
                                      "--out", str(tmp_path / "o")])  # no --draft: none needs none
    with pytest.raises(SystemExit) as exc:
        throughput.main()
    assert exc.value.code == 1
    out, err = capsys.readouterr()
    assert err.splitlines() == ["RuntimeError: bench-none-pmodel exited with 1: ValueError: no model at x", ""]
    assert json.loads((tmp_path / "o" / "throughput-none-pmodel.json").read_text())["exit_code"] == 1


@pytest.mark.parametrize("port", ["0", "70000"])
def test_run_refuses_a_port_outside_1_65535(tmp_path, monkeypatch, capsys, port):
    msg = fails(monkeypatch, capsys, "run", "--config", "none", "--target", "org/t", "--out", tmp_path / "o",
                "--port", port)
    assert f"--port must be 1-65535, got {port}" in msg


def test_level_prompts_are_four_waves_and_at_least_32():
    assert [throughput.level_prompts(c) for c in (1, 4, 8, 16, 128)] == [32, 32, 32, 64, 512]


def test_gpu_smoke_names_a_models_root_without_its_pairs_and_starts_nothing(tmp_path, monkeypatch, capsys):
    """A fresh user's find: a wrong --models-root ended in a FileNotFoundError traceback from a thread."""
    from bench import gpu_smoke

    monkeypatch.setattr(gpu_smoke, "run_one", lambda *a: pytest.fail("no server may start after an error"))
    for p in sorted({p for p, _ in gpu_smoke.RUNS}):
        if p != 0.5:
            for name in ("target", "draft", "oracle.json"):
                (tmp_path / f"p{p}" / name).mkdir(parents=True)
    for argv, says in (([], "p0.5/ lacks target, draft, oracle.json"),
                       (["--parallel", "0"], "--parallel must be >= 1"),
                       (["--mem-fraction", "1.5"], "--mem-fraction must be between 0 and 1")):
        if argv:
            for name in ("target", "draft", "oracle.json"):
                (tmp_path / "p0.5" / name).mkdir(parents=True, exist_ok=True)
        with pytest.raises(SystemExit) as exc:
            gpu_smoke.main(["--models-root", str(tmp_path), "--out", str(tmp_path / "out.json"), *argv])
        assert exc.value.code == 2 and says in capsys.readouterr().err
    assert not (tmp_path / "out.json").exists()
