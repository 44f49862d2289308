"""bench/ab_traffic.py on CPU: both servers started once, the sides alternated per repeat, B over A per row."""

from __future__ import annotations

import json
import sys
import types

import pytest

from bench import ab_traffic, server_harness, throughput, traffic

HEADER = ",".join(traffic.TRAFFIC_COLUMNS)


def fake_row(config, conc, tok_s):
    row = dict.fromkeys(traffic.TRAFFIC_COLUMNS, "")
    row.update(config=config, workload="varied-closed", concurrency=str(conc), output_tok_s=str(tok_s))
    return ",".join(row[c] for c in traffic.TRAFFIC_COLUMNS)


def fake_servers(monkeypatch, url_of=lambda port: f"u{port}"):
    """Every server "starts" at once and is ready: ``url_of(port)`` is its URL."""
    monkeypatch.setattr(server_harness, "start_server",
                        lambda name, args, port, log_dir, env=None, cpus=None: types.SimpleNamespace(url=url_of(port), ready_s=1.0))
    monkeypatch.setattr(server_harness, "wait_ready", lambda s, timeout_s: None)
    monkeypatch.setattr(server_harness, "stop_server", lambda s: 0)


@pytest.fixture
def pair(tmp_path):
    (tmp_path / "p0.2" / "target").mkdir(parents=True)
    return tmp_path / "p0.2"


def test_two_servers_alternate_and_the_summary_is_b_over_a(pair, tmp_path, monkeypatch):
    started, stopped, calls = [], [], []

    def start_server(name, args, port, log_dir, env=None, cpus=None):
        started.append((name, port, env, args))
        return types.SimpleNamespace(url=f"http://127.0.0.1:{port}", ready_s=2.0)

    monkeypatch.setattr(server_harness, "start_server", start_server)
    monkeypatch.setattr(server_harness, "wait_ready", lambda s, timeout_s: None)
    monkeypatch.setattr(server_harness, "stop_server", lambda s: stopped.append(s.url) or 0)
    speed = {"none": 100.0, "off": 95.0}

    def main():
        argv = sys.argv[1:]
        calls.append(argv)
        out = ab_traffic.Path(argv[argv.index("--out") + 1])
        config = argv[argv.index("--config") + 1]
        lines = [HEADER] + [fake_row(config, c, speed[config] * (1 + 0.01 * len(calls))) for c in (32, 64)]
        (out / "real-traffic.csv").write_text("\n".join(lines) + "\n")

    monkeypatch.setattr(throughput, "main", main)
    out = tmp_path / "out"
    assert ab_traffic.main(["--models", str(pair), "--a", "none", "--b", "off", "--b-env", "X=1",
                            "--repeats", "3", "--concurrency", "32,64", "--out", str(out)]) == 0
    greedy = {"SPECCONSOLE_WARM_SAMPLING": "0"}  # the traffic is greedy: no start-up build of sampling kernels
    assert [(n, p, e) for n, p, e, _ in started] == [("ab-a-none-p0.2", 30720, greedy),
                                                      ("ab-b-off-p0.2", 30730, {**greedy, "X": "1"})]
    assert all("--sleep-on-idle" in args and "--max-total-tokens" in args for *_, args in started)
    assert "--speculative-disable-batch-threshold" in started[1][3]  # the gate server that off sets to 1 live
    sides = [c[c.index("--url") + 1][-5:] for c in calls]
    assert sides == ["30720", "30730", "30730", "30720", "30720", "30730"]  # A B, B A, A B
    assert ["--no-warmup" in c for c in calls] == [False, False, True, True, True, True]
    assert len(stopped) == 2
    summary = json.loads((out / "ab-summary.json").read_text())["summary"]
    (c32,) = [s for s in summary if s["concurrency"] == "32"]
    # call k ran at (1 + 0.01 k): repeat 0 = calls 1 (A) and 2 (B), repeat 1 = 4 (A) and 3 (B), ...
    want = [0.95 * 1.02 / 1.01, 0.95 * 1.03 / 1.04, 0.95 * 1.06 / 1.05]
    assert c32["b_over_a"] == [round(x, 4) for x in want]
    assert c32["min"] == round(min(want), 4) and c32["max"] == round(max(want), 4)


def test_interleave_measures_each_row_on_every_side_before_the_next(pair, tmp_path, monkeypatch):
    """--interleave: one traffic call per row and side, the sides' order turning row by row (A B C,
    C B A, ...), each side warmed up before its first row only, every row in the side's one CSV;
    the summary is the same as for whole sweeps."""
    calls = []
    fake_servers(monkeypatch, lambda port: f"http://127.0.0.1:{port}")
    speed = {"none": 100.0, "always": 120.0, "auto": 118.0}

    def main():
        argv = sys.argv[1:]
        calls.append(argv)
        out = ab_traffic.Path(argv[argv.index("--out") + 1])
        row = dict.fromkeys(traffic.TRAFFIC_COLUMNS, "")
        config = argv[argv.index("--config") + 1]
        if "--concurrency" in argv:
            row.update(workload=argv[argv.index("--workloads") + 1], concurrency=argv[argv.index("--concurrency") + 1])
        else:
            row.update(workload=argv[argv.index("--workloads") + 1], request_rate=argv[argv.index("--rates") + 1])
        row.update(config=config, output_tok_s=str(speed[config]))
        csv_path = out / "real-traffic.csv"
        head = [] if csv_path.exists() else [HEADER]
        with csv_path.open("a") as f:
            f.write("\n".join(head + [",".join(row[c] for c in traffic.TRAFFIC_COLUMNS)]) + "\n")

    monkeypatch.setattr(throughput, "main", main)
    out = tmp_path / "out"
    assert ab_traffic.main(["--models", str(pair), "--a", "none", "--b", "always", "--c", "auto", "--repeats", "1",
                            "--workloads", "varied-closed,varied-poisson", "--concurrency", "4,16", "--rates", "8",
                            "--interleave", "--out", str(out)]) == 0
    got = [(c[c.index("--url") + 1][-5:], c[c.index("--workloads") + 1],
            c[c.index("--concurrency") + 1] if "--concurrency" in c else "r" + c[c.index("--rates") + 1],
            "--no-warmup" not in c) for c in calls]
    assert got == [("30720", "varied-closed", "4", True), ("30730", "varied-closed", "4", True),
                   ("30740", "varied-closed", "4", True),
                   ("30740", "varied-closed", "16", False), ("30730", "varied-closed", "16", False),
                   ("30720", "varied-closed", "16", False),
                   ("30720", "varied-poisson", "r8", False), ("30730", "varied-poisson", "r8", False),
                   ("30740", "varied-poisson", "r8", False)]
    rows = ab_traffic.read_rows(out / "repeat0" / "c" / "real-traffic.csv")
    assert [(r["concurrency"], r["request_rate"]) for r in rows] == [("4", ""), ("16", ""), ("", "8")]
    record = json.loads((out / "ab-summary.json").read_text())
    assert [s.get("row") for s in record["steps"][:3]] == ["varied-closed 4"] * 3
    summary = {(s["workload"], s["concurrency"] or s["request_rate"]): s for s in record["summary"]}
    assert set(summary) == {("varied-closed", "4"), ("varied-closed", "16"), ("varied-poisson", "8")}
    assert summary[("varied-closed", "16")]["b_over_a"] == [1.2]


def test_a_server_that_does_not_start_is_recorded_and_the_other_is_stopped(pair, tmp_path, monkeypatch):
    stopped, events = [], []

    def start_server(name, args, port, log_dir, env=None, cpus=None):
        events.append(("start", port))
        return types.SimpleNamespace(url=f"u{port}", ready_s=1.0)

    monkeypatch.setattr(server_harness, "start_server", start_server)

    def wait_ready(server, timeout_s):
        events.append(("wait", server.url))
        if server.url == "u30730":
            raise RuntimeError("Not enough memory")

    monkeypatch.setattr(server_harness, "wait_ready", wait_ready)
    monkeypatch.setattr(server_harness, "stop_server", lambda s: stopped.append(s.url) or -9)
    monkeypatch.setattr(throughput, "main", lambda: pytest.fail("nothing measured without both servers"))
    out = tmp_path / "out"
    assert ab_traffic.main(["--models", str(pair), "--a", "none", "--b", "off", "--out", str(out)]) == 1
    rec = json.loads((out / "ab-summary.json").read_text())
    assert rec["error"] == "RuntimeError: Not enough memory" and stopped == ["u30720", "u30730"]
    # both started before either is waited for: their start-ups overlap
    assert events == [("start", 30720), ("start", 30730), ("wait", "u30720"), ("wait", "u30730")]
    assert rec["servers"]["b"]["exit_code"] == -9 and "startup_s" not in rec["servers"]["b"] and rec["summary"] == []


@pytest.mark.parametrize("args, message", [
    (["--a", "off", "--b", "off"], "the same server"),
    (["--a", "none", "--b", "off", "--b-env", "NOVALUE"], "NAME=VALUE"),
    (["--a", "none", "--b", "off", "--repeats", "0"], "--repeats must be >= 1, got 0"),
    (["--a", "none", "--b", "off", "--row-seconds", "nan"], "--row-seconds must be a finite number > 0"),
    (["--a", "none", "--b", "off", "--row-seconds", "inf"], "--row-seconds must be a finite number > 0"),
    (["--a", "none", "--b", "off", "--mem-fraction", "5"], "--mem-fraction is a fraction of GPU memory (0-1]"),
    (["--a", "none", "--b", "off", "--max-total-tokens", "-1"], "--max-total-tokens must be >= 1"),
    (["--a", "none", "--b", "off", "--concurrency", "abc"], "argument --concurrency: expected"),
    (["--a", "none", "--b", "off", "--concurrency", "x,y"], "positive integers"),
    (["--a", "none", "--b", "off", "--concurrency", "0"], "positive integers"),
    (["--a", "none", "--b", "off", "--workloads", "bogus"], "bogus"),
    (["--a", "none", "--b", "off", "--port", "99999"], "--port"),
    (["--a", "none", "--b", "off", "--c-env", "X=1"], "need --c"),
    (["--a", "none", "--b", "off", "--c", "off"], "B and C are the same server"),
    (["--a", "none", "--b", "off", "--c", "none"], "A and C are the same server"),
    (["--a", "none", "--b", "off", "--c", "gate", "--port", "65520"], "--port"),
    (["--a", "none", "--b", "off", "--profile-sides", "c"], "--profile-sides"),
    (["--a", "none", "--b", "off", "--server-args", "--x 'unclosed"], "--server-args"),
])
def test_bad_options_are_refused_before_a_server_starts(pair, tmp_path, monkeypatch, capsys, args, message):
    monkeypatch.setattr(server_harness, "start_server", lambda *a, **k: pytest.fail("no server after a bad option"))
    with pytest.raises(SystemExit) as exc:
        ab_traffic.main(["--models", str(pair), "--out", str(tmp_path / "o"), *args])
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_a_profile_pass_per_side_after_the_repeats_outside_the_summary(pair, tmp_path, monkeypatch):
    calls = []
    fake_servers(monkeypatch)

    def main():
        argv = sys.argv[1:]
        calls.append(argv)
        out = ab_traffic.Path(argv[argv.index("--out") + 1])
        config = argv[argv.index("--config") + 1]
        (out / "real-traffic.csv").write_text(HEADER + "\n" + fake_row(config, 128, 50.0 if "profile" in str(out) else 100.0) + "\n")

    monkeypatch.setattr(throughput, "main", main)
    out = tmp_path / "out"
    assert ab_traffic.main(["--models", str(pair), "--a", "none", "--b", "off", "--repeats", "1", "--concurrency",
                            "32,128", "--profile-row", "varied-closed:128", "--cpu-profile-row", "varied-closed:128",
                            "--out", str(out)]) == 0
    profile = calls[2:]
    assert [c[c.index("--url") + 1] for c in profile] == ["u30720", "u30730"]
    for c in profile:
        assert c[c.index("--concurrency") + 1] == "128" and c[c.index("--workloads") + 1] == "varied-closed"
        assert c[c.index("--profile-row") + 1] == c[c.index("--cpu-profile-row") + 1] == "varied-closed:128"
        assert "/profile/" in c[c.index("--out") + 1]
    summary = json.loads((out / "ab-summary.json").read_text())["summary"]
    assert [s["b_over_a"] for s in summary] == [[1.0]]  # the profile pass's rows are not in it


@pytest.mark.parametrize("extra, message", [
    (["--profile-row", "varied-closed"], "not WORKLOAD:LEVEL"),
    (["--profile-row", "varied-closed:64", "--cpu-profile-row", "varied-closed:128"], "name one row"),
])
def test_bad_profile_rows_are_refused_before_any_server(pair, tmp_path, monkeypatch, capsys, extra, message):
    monkeypatch.setattr(server_harness, "start_server", lambda *a, **k: pytest.fail("started a server"))
    with pytest.raises(SystemExit) as exc:
        ab_traffic.main(["--models", str(pair), "--a", "none", "--b", "off", "--out", str(tmp_path / "o")] + extra)
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_a_third_side_with_its_own_pair_rotates_and_is_divided_by_a(pair, tmp_path, monkeypatch):
    """--c: three servers started at once, measured A B C then C B A, C's rows labelled with its pair's p
    and summarized as c_over_a beside B's; a given SPECCONSOLE_WARM_SAMPLING wins over the greedy default."""
    (tmp_path / "p0.5" / "target").mkdir(parents=True)
    started, calls = [], []

    def start_server(name, args, port, log_dir, env=None, cpus=None):
        started.append((name, port, env, args))
        return types.SimpleNamespace(url=f"u{port}", ready_s=1.0)

    monkeypatch.setattr(server_harness, "start_server", start_server)
    monkeypatch.setattr(server_harness, "wait_ready", lambda s, timeout_s: None)
    monkeypatch.setattr(server_harness, "stop_server", lambda s: 0)
    speed = {"u30720": 100.0, "u30730": 90.0, "u30740": 99.0}

    def main():
        argv = sys.argv[1:]
        calls.append(argv)
        out = ab_traffic.Path(argv[argv.index("--out") + 1])
        url = argv[argv.index("--url") + 1]
        (out / "real-traffic.csv").write_text(HEADER + "\n" + fake_row("x", 64, speed[url]) + "\n")

    monkeypatch.setattr(throughput, "main", main)
    out = tmp_path / "out"
    assert ab_traffic.main(["--models", str(pair), "--a", "none", "--b", "off", "--c", "off",
                            "--c-models", str(tmp_path / "p0.5"), "--c-env", "SPECCONSOLE_WARM_SAMPLING=1",
                            "--repeats", "2", "--concurrency", "64", "--cpu-profile-row", "varied-closed:64",
                            "--profile-sides", "a,c", "--out", str(out)]) == 0
    assert [(n, p) for n, p, *_ in started] == [("ab-a-none-p0.2", 30720), ("ab-b-off-p0.2", 30730),
                                                ("ab-c-off-p0.5", 30740)]
    assert started[2][2] == {"SPECCONSOLE_WARM_SAMPLING": "1"}
    c_args = started[2][3]
    assert c_args[c_args.index("--model-path") + 1] == str(tmp_path / "p0.5" / "target")
    urls = [c[c.index("--url") + 1] for c in calls]
    assert urls == ["u30720", "u30730", "u30740", "u30740", "u30730", "u30720", "u30720", "u30740"]  # + profile a, c
    p_of = {c[c.index("--url") + 1]: c[c.index("--p-wrong") + 1] for c in calls}
    assert p_of == {"u30720": "0.2", "u30730": "0.2", "u30740": "0.5"}
    rec = json.loads((out / "ab-summary.json").read_text())
    (row,) = rec["summary"]
    assert row["b_over_a"] == [0.9, 0.9] and row["geomean"] == 0.9
    assert row["c_over_a"] == [0.99, 0.99] and row["c_geomean"] == 0.99 and row["c_min"] == row["c_max"] == 0.99
    assert rec["servers"]["c"]["models"].endswith("p0.5")


def e2e_row(config, conc, rate, tok_s, e2e):
    row = dict.fromkeys(traffic.TRAFFIC_COLUMNS, "")
    row.update(config=config, workload="varied-poisson" if rate else "varied-closed", concurrency=conc,
               request_rate=rate, output_tok_s=str(tok_s), mean_e2e_ms=str(e2e))
    return ",".join(row[c] for c in traffic.TRAFFIC_COLUMNS)


def test_an_auto_server_against_the_better_static_one_on_closed_and_open_loops(pair, tmp_path, monkeypatch):
    """none / always / auto: the auto server starts with the auto threshold, the open-loop rates reach
    bench.throughput traffic, and the summary has C against the better of A and B per row and repeat:
    tok/s over the higher, mean end-to-end latency over the lower (open loop)."""
    started, calls = [], []

    def start_server(name, args, port, log_dir, env=None, cpus=None):
        started.append(args)
        return types.SimpleNamespace(url=f"u{port}", ready_s=1.0)

    monkeypatch.setattr(server_harness, "start_server", start_server)
    monkeypatch.setattr(server_harness, "wait_ready", lambda s, timeout_s: None)
    monkeypatch.setattr(server_harness, "stop_server", lambda s: 0)
    # closed loop at 8: always wins (A 100, B 150, C 147); at 64 none wins (A 200, B 120, C 196);
    # open loop at 4 req/s: same tok/s, latency A 900, B 600, C 630
    table = {"u30720": [(8, "", 100, 1), (64, "", 200, 1), ("", "4", 40, 900)],
             "u30730": [(8, "", 150, 1), (64, "", 120, 1), ("", "4", 40, 600)],
             "u30740": [(8, "", 147, 1), (64, "", 196, 1), ("", "4", 40, 630)]}

    def main():
        argv = sys.argv[1:]
        calls.append(argv)
        out = ab_traffic.Path(argv[argv.index("--out") + 1])
        rows = [e2e_row("x", str(c), r, t, e) for c, r, t, e in table[argv[argv.index("--url") + 1]]]
        (out / "real-traffic.csv").write_text("\n".join([HEADER] + rows) + "\n")

    monkeypatch.setattr(throughput, "main", main)
    out = tmp_path / "out"
    assert ab_traffic.main(["--models", str(pair), "--a", "none", "--b", "always", "--c", "auto",
                            "--workloads", "varied-closed,varied-poisson", "--concurrency", "8,64", "--rates", "4",
                            "--repeats", "1", "--out", str(out)]) == 0
    assert started[2][-5:-3] == ["--speculative-disable-batch-threshold", "auto"]
    assert "--speculative-disable-batch-threshold" not in started[1]  # always: EAGLE-3 without the gate
    assert all(c[c.index("--rates") + 1] == "4" for c in calls)
    summary = {(s["concurrency"], s["request_rate"]): s for s in json.loads((out / "ab-summary.json").read_text())["summary"]}
    assert list(summary) == [("8", ""), ("64", ""), ("", "4")]  # the plan's order
    assert summary[("8", "")]["c_over_best"] == [0.98] and summary[("64", "")]["c_over_best"] == [0.98]
    assert summary[("8", "")]["b_over_a"] == [1.5] and "c_e2e_over_best" not in summary[("8", "")]
    open_loop = summary[("", "4")]
    assert open_loop["b_e2e_over_a"] == [0.6667] and open_loop["c_e2e_over_a"] == [0.7]
    assert open_loop["c_e2e_over_best"] == [1.05] and open_loop["c_e2e_over_best_geomean"] == 1.05


def test_bad_rates_are_refused_before_any_server(pair, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(server_harness, "start_server", lambda *a, **k: pytest.fail("started a server"))
    with pytest.raises(SystemExit) as exc:
        ab_traffic.main(["--models", str(pair), "--a", "none", "--b", "auto", "--rates", "0,-1",
                         "--out", str(tmp_path / "o")])
    assert exc.value.code == 2 and "request rates" in capsys.readouterr().err


def test_freeze_gc_is_posted_to_every_server_before_the_first_row(pair, tmp_path, monkeypatch):
    import httpx

    events = []
    fake_servers(monkeypatch, lambda port: f"http://h:{port}")
    monkeypatch.setattr(httpx, "post", lambda url, timeout: events.append(url) or httpx.Response(200))

    def main():
        argv = sys.argv[1:]
        events.append("row " + argv[argv.index("--url") + 1])
        out = ab_traffic.Path(argv[argv.index("--out") + 1])
        config = argv[argv.index("--config") + 1]
        (out / "real-traffic.csv").write_text("\n".join([HEADER, fake_row(config, 32, 1.0)]) + "\n")

    monkeypatch.setattr(throughput, "main", main)
    out = tmp_path / "out"
    assert ab_traffic.main(["--models", str(pair), "--a", "none", "--b", "off", "--repeats", "1",
                            "--concurrency", "32", "--freeze-gc", "--out", str(out)]) == 0
    assert events == ["http://h:30720/freeze_gc", "http://h:30730/freeze_gc", "row http://h:30720", "row http://h:30730"]
    servers = json.loads((out / "ab-summary.json").read_text())["servers"]
    assert servers["a"]["freeze_gc"] == 200 and servers["b"]["freeze_gc"] == 200


def test_server_args_reach_every_server(pair, tmp_path, monkeypatch):
    started = []
    monkeypatch.setattr(server_harness, "start_server",
                        lambda name, args, port, log_dir, env=None, cpus=None: started.append(args) or types.SimpleNamespace(
                            url=f"http://127.0.0.1:{port}", ready_s=1.0))
    monkeypatch.setattr(server_harness, "wait_ready", lambda s, timeout_s: None)
    monkeypatch.setattr(server_harness, "stop_server", lambda s: 0)

    def main():
        argv = sys.argv[1:]
        out = ab_traffic.Path(argv[argv.index("--out") + 1])
        config = argv[argv.index("--config") + 1]
        (out / "real-traffic.csv").write_text(HEADER + "\n" + fake_row(config, 32, 100.0) + "\n")

    monkeypatch.setattr(throughput, "main", main)
    assert ab_traffic.main(["--models", str(pair), "--a", "none", "--b", "off", "--repeats", "1", "--concurrency", "32",
                            "--server-args", "--gc-warning-threshold-secs 0.002", "--out", str(tmp_path / "o")]) == 0
    assert len(started) == 2
    assert all(args[-2:] == ["--gc-warning-threshold-secs", "0.002"] for args in started)


def test_the_summary_also_compares_the_steady_tok_s_where_both_rows_have_it(tmp_path):
    """``steady_tok_s`` (every slot busy, the drain left out) gets its own ratio beside b_over_a;
    rows of runs made before it (no such value) get none."""
    def row(config, conc, tok_s, steady):
        r = dict.fromkeys(traffic.TRAFFIC_COLUMNS, "")
        r.update(config=config, workload="varied-closed", concurrency=str(conc), output_tok_s=str(tok_s),
                 steady_tok_s=steady)
        return ",".join(r[c] for c in traffic.TRAFFIC_COLUMNS)

    for side, config, tok, steady in (("a", "none", 100.0, "200"), ("b", "off", 90.0, "196")):
        d = tmp_path / "repeat0" / side
        d.mkdir(parents=True)
        (d / "real-traffic.csv").write_text("\n".join([HEADER, row(config, 32, tok, steady), row(config, 64, tok, "")]) + "\n")
    summary = {s["concurrency"]: s for s in ab_traffic.summarize(tmp_path, 1)}
    assert summary["32"]["b_over_a"] == [0.9] and summary["32"]["b_steady_over_a"] == [0.98]
    assert "b_steady_over_a" not in summary["64"]


def test_an_out_that_is_a_file_is_refused(pair, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(server_harness, "start_server", lambda *a, **k: pytest.fail("no server after a bad option"))
    f = tmp_path / "notes.txt"
    f.write_text("x")
    with pytest.raises(SystemExit) as exc:
        ab_traffic.main(["--models", str(pair), "--a", "none", "--b", "off", "--out", str(f)])
    assert exc.value.code == 2 and f"--out {f}: a file, not a directory" in capsys.readouterr().err


def test_the_time_varying_load_runs_on_every_side_after_the_repeats(pair, tmp_path, monkeypatch):
    """--time-varying: after the rows, the staged load once per side (A B C), each side's tok/s from
    its own tokens and wall time, C against the better static side; a side whose load fails is
    recorded and the run exits 1, the other sides still measured."""
    events = []
    fake_servers(monkeypatch, lambda port: f"http://127.0.0.1:{port}")

    def main():
        argv = sys.argv[1:]
        events.append("rows")
        out = ab_traffic.Path(argv[argv.index("--out") + 1])
        (out / "real-traffic.csv").write_text("\n".join([HEADER, fake_row("x", 8, 100)]) + "\n")

    walls = {30720: 20.0, 30730: 25.0, 30740: 19.0}  # none, always, auto: auto the fastest

    def time_varying(config, port, work):
        events.append((config, port))
        return {"config": config, "stages": [], "total_output_tokens": 1000, "wall_s": walls[port]}

    monkeypatch.setattr(throughput, "main", main)
    monkeypatch.setattr(throughput, "time_varying", time_varying)
    out = tmp_path / "out"
    assert ab_traffic.main(["--models", str(pair), "--a", "none", "--b", "always", "--c", "auto", "--concurrency", "8",
                            "--repeats", "1", "--time-varying", "--out", str(out)]) == 0
    assert events == ["rows"] * 3 + [("none", 30720), ("always", 30730), ("auto", 30740)]
    tv = json.loads((out / "time-varying.json").read_text())
    assert tv["sides"]["c"]["output_tok_s"] == 52.6 and tv["b_over_a"] == 0.8
    assert tv["c_over_best"] == round(20.0 / 19.0, 4)

    def failing(config, port, work):
        if config == "always":
            raise RuntimeError("bench_serving wrote nothing\ntail")
        return time_varying(config, port, work)

    monkeypatch.setattr(throughput, "time_varying", failing)
    assert ab_traffic.main(["--models", str(pair), "--a", "none", "--b", "always", "--c", "auto", "--concurrency", "8",
                            "--repeats", "1", "--time-varying", "--out", str(tmp_path / "out2")]) == 1
    tv = json.loads((tmp_path / "out2" / "time-varying.json").read_text())
    assert tv["sides"]["b"]["error"] == "RuntimeError: bench_serving wrote nothing"
    assert "b_over_a" not in tv and "c_over_best" not in tv and tv["c_over_a"] == round(20.0 / 19.0, 4)


def test_an_empty_out_or_one_inside_a_run_is_refused(pair, tmp_path, monkeypatch, capsys):
    """Fresh-user find: --out '' wrote ab-summary.json and server-logs/ into the current directory, and
    --out OLD_RUN/repeat0 (or a new folder under a run) wrote them among that run's files."""
    monkeypatch.setattr(server_harness, "start_server", lambda *a, **k: pytest.fail("no server after a bad --out"))
    old = tmp_path / "old"
    (old / "repeat0" / "a").mkdir(parents=True)
    (old / "ab-summary.json").write_text('{"argv": ["the old run"]}')
    for out, message in (("", "--out is empty"), (" ", "--out is empty"),
                         (str(old / "repeat0"), f"is inside the run {old.resolve()}"),
                         (str(old / "new" / "deeper"), f"is inside the run {old.resolve()}")):
        with pytest.raises(SystemExit) as exc:
            ab_traffic.main(["--models", str(pair), "--a", "none", "--b", "off", "--out", out])
        assert exc.value.code == 2 and message in capsys.readouterr().err, out
    assert sorted(p.name for p in old.iterdir()) == ["ab-summary.json", "repeat0"]
    cut = tmp_path / "cut"  # a run cut short before its summary: repeat folders only
    (cut / "repeat0" / "a").mkdir(parents=True)
    other = tmp_path / "notes"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    for out, message in ((str(cut / "repeat0" / "new"), f"is inside the run {cut.resolve()}"),
                         (str(other), "is a directory with other files in it")):
        with pytest.raises(SystemExit) as exc:
            ab_traffic.main(["--models", str(pair), "--a", "none", "--b", "off", "--out", out])
        assert exc.value.code == 2 and message in capsys.readouterr().err, out
    assert [p.name for p in other.iterdir()] == ["notes.txt"]
    with pytest.raises(SystemExit) as exc:  # rates no row would use
        ab_traffic.main(["--models", str(pair), "--a", "none", "--b", "off", "--rates", "4,16",
                         "--out", str(tmp_path / "fresh")])
    assert exc.value.code == 2 and "--rates 4,16 goes with an open-loop workload" in capsys.readouterr().err


def test_an_out_that_holds_a_run_is_refused_and_left_as_it_was(pair, tmp_path, monkeypatch, capsys):
    """Fresh-user find: a failed run into an earlier run's folder replaced its ab-summary.json (the old
    rows then read as the new settings')."""
    monkeypatch.setattr(server_harness, "start_server", lambda *a, **k: pytest.fail("no server into an old run"))
    old = tmp_path / "old"
    (old / "repeat0" / "a").mkdir(parents=True)
    (old / "ab-summary.json").write_text('{"argv": ["the old run"]}')
    with pytest.raises(SystemExit) as exc:
        ab_traffic.main(["--models", str(pair), "--a", "none", "--b", "off", "--out", str(old)])
    assert exc.value.code == 2 and "holds a run already" in capsys.readouterr().err
    assert (old / "ab-summary.json").read_text() == '{"argv": ["the old run"]}'


@pytest.mark.parametrize("cpus, servers, groups, harness", [
    (range(16), 3, [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]], [12, 13, 14, 15]),
    (range(10), 2, [[0, 1, 2, 3], [4, 5, 6]], [7, 8, 9]),
    ([7, 3, 5, 1], 3, [[1], [3], [5]], [7]),
])
def test_cpu_groups_give_each_server_its_own_cpus_and_the_harness_the_rest(cpus, servers, groups, harness):
    assert ab_traffic.cpu_groups(cpus, servers) == (groups, harness)


def test_pin_cpus_pins_each_server_and_the_harness(pair, tmp_path, monkeypatch):
    """--pin-cpus: each server starts on its own group, the harness (and the traffic clients it starts)
    on the last; the groups are in the run's record; too few CPUs is a usage error."""
    started = {}

    def start_server(name, args, port, log_dir, env=None, cpus=None):
        started[name] = cpus
        return types.SimpleNamespace(url=f"u{port}", ready_s=1.0)

    monkeypatch.setattr(server_harness, "start_server", start_server)
    monkeypatch.setattr(server_harness, "wait_ready", lambda s, timeout_s: None)
    monkeypatch.setattr(server_harness, "stop_server", lambda s: 0)
    monkeypatch.setattr(ab_traffic.os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    own = []
    monkeypatch.setattr(ab_traffic.os, "sched_setaffinity", lambda pid, cpus: own.append(list(cpus)), raising=False)
    monkeypatch.setattr(ab_traffic, "measure", lambda a, urls, labels: [])
    out = tmp_path / "out"
    assert ab_traffic.main(["--models", str(pair), "--a", "none", "--b", "off", "--pin-cpus", "--out", str(out)]) == 0
    assert started == {"ab-a-none-p0.2": [0, 1, 2], "ab-b-off-p0.2": [3, 4, 5]} and own == [[6, 7]]
    assert json.loads((out / "ab-summary.json").read_text())["cpus"] == {"a": [0, 1, 2], "b": [3, 4, 5],
                                                                           "harness": [6, 7]}
    monkeypatch.setattr(ab_traffic.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    with pytest.raises(SystemExit):
        ab_traffic.main(["--models", str(pair), "--a", "none", "--b", "off", "--pin-cpus", "--out", str(tmp_path / "o2")])

