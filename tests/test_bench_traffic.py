"""bench.traffic (``python -m bench.throughput traffic``) on CPU, with stand-ins.

- bench_serving: a stand-in CLI module (written to tmp_path, run in-process by the real
  ``ServingDriver``) whose argparse parser is built from the options that ``bench.bench_serving_cli``
  reads out of SGLang 0.5.12's own ``sglang/bench_serving.py``, so an unknown flag, a missing
  value or a value of the wrong type fails as it would on the GPU machine; it writes a result line
  with exactly the keys of the real ``result`` dict, numbers made up from the server's state.
- the server: a small HTTP server in a thread that answers ``/server_info``,
  ``/set_internal_state`` and ``/flush_cache`` like a (patched) SGLang server.
"""

from __future__ import annotations

import ast
import csv
import http.server
import json
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from bench import bench_serving_cli, throughput, traffic, traffic_summary
from bench.serving_driver import IN_PROCESS, ServingDriver

ROOT = Path(__file__).resolve().parents[1]
SOURCE = bench_serving_cli.bench_serving_source()
needs_sglang = pytest.mark.skipif(SOURCE is None, reason="needs SGLang's source (sglang/bench_serving.py)")


@pytest.fixture(scope="module")
def real_spec():
    if SOURCE is None:
        pytest.skip("needs SGLang's source (sglang/bench_serving.py)")
    return bench_serving_cli.cli_spec(SOURCE.read_text(encoding="utf-8"))


# -- the stand-ins -----------------------------------------------------------------------------------

STANDIN = r'''
import argparse, json, math, os, sys, urllib.request

if __name__ == "__main__":
    spec = json.load(open(os.environ["FAKE_BS_SPEC"]))
    p = argparse.ArgumentParser(allow_abbrev=False)
    types = {"int": int, "float": float, "str": str}
    for flag, o in spec["options"].items():
        kw = {}
        if not o["takes_value"]:
            kw["action"] = "store_true"
        else:
            if o["nargs"] is not None:
                kw["nargs"] = o["nargs"]
            if o["type"]:
                kw["type"] = types[o["type"]]
            if o["choices"]:
                kw["choices"] = o["choices"]
        p.add_argument(flag, **kw)
    a = p.parse_args()
    with open(os.environ["FAKE_BS_LOG"], "a") as f:
        f.write(json.dumps(sys.argv[1:]) + "\n")
    n_runs = sum(1 for _ in open(os.environ["FAKE_BS_LOG"]))
    if os.environ.get("FAKE_BS_FAIL_AT") and n_runs == int(os.environ["FAKE_BS_FAIL_AT"]):
        raise ConnectionError("server went away")
    if os.environ.get("FAKE_BS_SIGTERM_AT") and n_runs == int(os.environ["FAKE_BS_SIGTERM_AT"]):
        import signal, time
        os.kill(os.getpid(), signal.SIGTERM)  # the device call's time limit
        time.sleep(5)
    base = f"http://{a.host}:{a.port}"
    info = json.load(urllib.request.urlopen(base + "/server_info"))
    if a.flush_cache:
        urllib.request.urlopen(urllib.request.Request(base + "/flush_cache", data=b"", method="POST"))
    gate = (info["internal_states"] or [{}])[0].get("spec_gate")
    rate = a.request_rate if a.request_rate is not None else float("inf")
    batch = a.max_concurrency if math.isinf(rate) else min(a.max_concurrency, rate)
    on = bool(info["speculative_algorithm"]) and (gate is None or batch < gate["threshold"])
    tok_s = 100.0 * batch * ((1.6 if batch < 48 else 0.7) if on else (0.95 if gate else 1.0))
    mean_out = (max(int(a.random_output_len * a.random_range_ratio), 1) + a.random_output_len) / 2
    tpot = 1000.0 * batch / tok_s
    values = {"output_throughput": tok_s, "mean_tpot_ms": tpot, "p99_tpot_ms": 1.5 * tpot,
              "mean_e2e_latency_ms": tpot * mean_out + 20.0, "p99_e2e_latency_ms": 2 * tpot * mean_out + 40.0,
              "mean_ttft_ms": 20.0, "duration": a.num_prompts * mean_out / tok_s, "completed": a.num_prompts,
              "accept_length": 3.0 if on else None, "server_info": info, "request_rate": rate,
              "max_concurrency": a.max_concurrency, "random_range_ratio": a.random_range_ratio}
    result = {k: values.get(k, 0.0) for k in spec["result_keys"]}
    with open(a.output_file, "a") as f:
        f.write(json.dumps(result) + "\n")
'''


def server_state(config: str, worker: str = "v2", attention: str = "triton") -> dict:
    """A /server_info answer of a server of ``config`` (none / always / gate)."""
    state = {"speculative_algorithm": None if config == "none" else "EAGLE3",
             "disable_overlap_schedule": worker == "v1", "attention_backend": attention,
             "max_running_requests": 128, "version": "0.5.12", "internal_states": [{"avg_spec_accept_length": 1.0}]}
    if config == "gate":
        state["internal_states"][0]["spec_gate"] = {
            "spec_version": worker, "worker_class": "EAGLEWorkerV2" if worker == "v2" else "EAGLEWorker",
            "threshold": 48, "hysteresis": 2, "accept_length_recent": 2.9, "decode_steps_on": 0,
            "decode_steps_off": 0}
    return state


class FakeServer:
    """The HTTP stand-in; ``sets`` holds every accepted gate update, ``flushes`` counts /flush_cache.
    ``on_profile(path, body)`` answers /start_profile and /stop_profile: None (200) or a status."""

    def __init__(self, state: dict):
        self.state, self.sets, self.flushes, self.log = state, [], 0, []
        self.on_profile = lambda path, body: None
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, body):
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                outer.log.append(("GET", self.path))
                gate = outer.state["internal_states"][0].get("spec_gate")
                if self.path == "/server_info" and gate is not None:  # 30 ON and 10 OFF decode steps a read
                    gate.update(decode_steps_on=gate["decode_steps_on"] + 30,
                                decode_steps_off=gate["decode_steps_off"] + 10)
                self._send(outer.state if self.path == "/server_info" else {})

            def do_POST(self):
                outer.log.append(("POST", self.path))
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                if self.path == "/flush_cache":
                    outer.flushes += 1
                    return self._send({})
                if self.path in ("/start_profile", "/stop_profile"):
                    status = outer.on_profile(self.path, body)
                    if status is None:
                        return self._send({})
                    self.send_response(status)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                gate = outer.state["internal_states"][0].get("spec_gate")
                update = body.get("server_args", {})
                if gate is None:
                    return self._send({"updated": False, "reason": "the speculation gate is not enabled"})
                n = update.get("speculative_disable_batch_threshold", gate["threshold"])
                h = update.get("speculative_disable_hysteresis", gate["hysteresis"])
                if not 0 <= h < n:
                    return self._send({"updated": False, "reason": "hysteresis must be < threshold"})
                gate.update(threshold=n, hysteresis=h)
                outer.sets.append((n, h))
                self._send({"updated": True, "reason": None, "threshold": n, "hysteresis": h})

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def servers():
    made = []

    def make(config="gate", worker="v2", attention="triton", state=None):
        made.append(FakeServer(state or server_state(config, worker, attention)))
        return made[-1]

    yield make
    for s in made:
        s.close()


@pytest.fixture
def bench(tmp_path, monkeypatch, real_spec):
    """The stand-in bench_serving, driven in-process by a real ServingDriver; returns the argv log."""
    (tmp_path / "fake_bench_serving.py").write_text(textwrap.dedent(STANDIN))
    (tmp_path / "spec.json").write_text(json.dumps(real_spec))
    log = tmp_path / "bench_serving_argv.jsonl"
    log.write_text("")
    monkeypatch.setenv("FAKE_BS_SPEC", str(tmp_path / "spec.json"))
    monkeypatch.setenv("FAKE_BS_LOG", str(log))
    monkeypatch.delenv("FAKE_BS_FAIL_AT", raising=False)
    monkeypatch.delenv("FAKE_BS_SIGTERM_AT", raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(traffic, "_DRIVER", ServingDriver(module="fake_bench_serving", mode=IN_PROCESS))
    yield lambda: [json.loads(line) for line in log.read_text().splitlines()]
    sys.modules.pop("fake_bench_serving", None)


def cli(monkeypatch, *args):
    """``python -m bench.throughput ARGS`` in this process."""
    monkeypatch.setattr(sys, "argv", ["throughput", *map(str, args)])
    throughput.main()


def fails(monkeypatch, capsys, *args) -> str:
    """Run the CLI expecting a non-zero exit; return its one-line message (no traceback)."""
    monkeypatch.setattr(sys, "argv", ["throughput", *map(str, args)])
    with pytest.raises(SystemExit) as exc:
        throughput.main()
    code = exc.value.code
    assert code not in (0, None)
    message = code if isinstance(code, str) else capsys.readouterr().err.strip().splitlines()[-1]
    assert "\n" not in message and "Traceback" not in message
    return message


def read_csv(path: Path):
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        return reader.fieldnames, list(reader)


def opt(argv, flag):
    return argv[argv.index(flag) + 1] if flag in argv else None


# -- bench_serving's real command line ----------------------------------------------------------------

def test_the_spec_read_from_the_source_is_bench_serving_0_5_12s(real_spec):
    options = real_spec["options"]
    assert len(options) > 60  # every add_argument under __main__, groups included
    assert options["--request-rate"]["type"] == "float" and options["--max-concurrency"]["type"] == "int"
    assert options["--random-range-ratio"]["type"] == "float" and options["--seed"]["type"] == "int"
    assert not options["--flush-cache"]["takes_value"] and not options["--disable-tqdm"]["takes_value"]
    assert "random-ids" in options["--dataset-name"]["choices"]
    assert "sglang" in options["--backend"]["choices"]  # list(ASYNC_REQUEST_FUNCS.keys()) resolved
    assert options["--lora-name"]["action"] == "LoRAPathAction" and options["--lora-name"]["takes_value"]
    assert "--gsp-num-groups" in options and "--mooncake-num-rounds" in options  # argument groups
    assert set(bench_serving_cli.RESULT_KEYS) <= set(real_spec["result_keys"])
    assert {"server_info", "p90_e2e_latency_ms", "max_concurrent_requests"} <= set(real_spec["result_keys"])


@pytest.mark.parametrize("name", sorted(f"{l}-{a}" for l in traffic.LENGTHS for a in traffic.ARRIVALS))
def test_every_workloads_argv_is_taken_by_the_real_cli(real_spec, name, tmp_path):
    plan = traffic.Plan([traffic.parse_workload(name)], [1, 128], [2.0, 64.0], 128, 18.0, None, 1, traffic.WARMUP)
    rows = plan.argvs("127.0.0.1", 30500, tmp_path, "t")
    assert len(rows) == 2
    for _, argv, path, level in rows:
        assert bench_serving_cli.argv_problems(argv, real_spec) == []
        assert opt(argv, "--output-file") == str(path) and "--flush-cache" in argv and opt(argv, "--seed") == "1"
        assert opt(argv, "--dataset-name") == "random-ids"
        if name.endswith("-closed"):
            assert opt(argv, "--request-rate") is None and opt(argv, "--max-concurrency") == str(level["concurrency"])
        else:
            assert opt(argv, "--request-rate") in ("2", "64") and opt(argv, "--max-concurrency") == "128"


def test_argv_problems_names_what_the_real_cli_would_refuse(real_spec):
    bad = ["--num-prompt", "3", "--num-prompts", "x", "--flush-cache", "yes", "--seed", "--dataset-name", "nope"]
    assert bench_serving_cli.argv_problems(bad, real_spec) == [
        "unknown flag --num-prompt", "--num-prompts 'x' is not an int", "--flush-cache takes no value, got 'yes'",
        "--seed needs a value", "--dataset-name 'nope' is not one of its choices"]
    assert bench_serving_cli.argv_problems([], {"options": {}, "result_keys": ["duration"]}) == [
        "its result line lacks " + ", ".join(k for k in bench_serving_cli.RESULT_KEYS if k != "duration")]


@needs_sglang
def test_a_bench_serving_without_a_flag_is_refused_before_any_server_time(tmp_path, monkeypatch):
    edited = SOURCE.read_text(encoding="utf-8").replace('"--flush-cache"', '"--flush-kv-cache"')
    (tmp_path / "bench_serving.py").write_text(edited)
    monkeypatch.setattr(bench_serving_cli, "bench_serving_source", lambda: tmp_path / "bench_serving.py")
    argv = traffic.bench_serving_argv("h", 1, traffic.LENGTHS["varied"], 4, 1, tmp_path / "o", concurrency=4)
    with pytest.raises(traffic.BenchError, match="does not take this tool's arguments: unknown flag --flush-cache"):
        bench_serving_cli.check_bench_serving_cli([argv])
    monkeypatch.setattr(bench_serving_cli, "bench_serving_source", lambda: None)
    assert bench_serving_cli.check_bench_serving_cli([argv]).startswith("not checked")


@needs_sglang
def test_lengths_match_random_ids_range_semantics_of_the_source():
    """Lengths.input_range / output_range against SGLang's own compute_random_lens, run from its source."""
    import numpy as np

    common = SOURCE.parent / "benchmark" / "datasets" / "common.py"
    fn = next(n for n in ast.parse(common.read_text()).body
              if isinstance(n, ast.FunctionDef) and n.name == "compute_random_lens")
    scope = {"np": np, "List": list}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), str(common), "exec"), scope)
    np.random.seed(0)
    for name, lengths in traffic.LENGTHS.items():
        for full, expect in ((lengths.input_len, lengths.input_range), (lengths.output_len, lengths.output_range)):
            drawn = scope["compute_random_lens"](full, lengths.range_ratio, 20000)
            assert (min(drawn), max(drawn)) == expect, name
    assert traffic.LENGTHS["varied"].input_range == (64, 1024) and traffic.LENGTHS["varied"].output_range == (32, 512)
    assert traffic.LENGTHS["uniform"].input_range == (256, 256)


def test_request_counts_give_rows_of_about_row_seconds_for_the_slower_static_config():
    for name in traffic.LENGTHS:
        lengths = traffic.LENGTHS[name]
        prefill = max(0, lengths.mean_input - 256) / traffic.PREFILL_TOK_S
        for c in traffic.CLOSED_LEVELS:
            n = traffic.closed_prompts(c, lengths, traffic.ROW_SECONDS)
            assert n % c == 0 or lengths.range_ratio < 1  # whole waves of uniform requests
            assert n >= c
            seconds = n * (lengths.mean_output / traffic.REF_TOK_S[c] + prefill)
            assert traffic.ROW_SECONDS <= seconds <= 25, (name, c, n, seconds)
            # the faster config: no speculation at 128 (10892 tok/s), always-on at 1 (393 tok/s)
            fastest = n * (lengths.mean_output / (10892 if c == 128 else 393 if c == 1 else 1e9) + prefill)
            assert fastest >= 9 or c not in (1, 128), (name, c, fastest)  # ~10 s
        for r in traffic.POISSON_RATES:
            n = traffic.poisson_prompts(r, 128, lengths, traffic.ROW_SECONDS)
            service = n * (lengths.mean_output / traffic.REF_TOK_S[128] + prefill)
            assert 10 <= max(n / r, service) <= 25, (name, r, n)
            level = {"rate": r, "max_concurrency": 128, "num_prompts": n}
            assert traffic.row_seconds_estimate(traffic.parse_workload(f"{name}-poisson"), level) == max(n / r, service)
    assert traffic.closed_prompts(128, traffic.LENGTHS["varied"], 3) == 128  # at least one wave
    assert traffic.poisson_prompts(0.01, 128, traffic.LENGTHS["varied"], 3) == traffic.MIN_PROMPTS
    assert 215 < traffic.ref_tok_s(1.5) < 426 and traffic.ref_tok_s(1000) == 6451.0


# -- rows ----------------------------------------------------------------------------------------------

def test_worker_and_attention_come_from_server_info():
    facts = traffic.server_facts(server_state("gate", "v1", "flashinfer"))
    assert (facts["worker"], facts["worker_source"], facts["attention_backend"]) == ("v1", "spec_gate.spec_version",
                                                                                      "flashinfer")
    state = server_state("gate")
    state["disable_overlap_schedule"] = True  # spec_gate.spec_version wins over the flag
    assert traffic.server_facts(state)["worker"] == "v2"
    assert traffic.server_facts(server_state("none", "v1"))[
        "worker"] == "v1"  # no gate: disable_overlap_schedule
    assert traffic.server_facts({"internal_states": []})["worker"] is None
    with pytest.raises(traffic.BenchError, match="give --worker"):
        traffic.check_server("none", traffic.server_facts({"internal_states": []}), "u", None, None)
    assert traffic.check_server("none", traffic.server_facts({}), "u", "v1", "fa3")["worker"] == "v1"


def test_build_row_has_the_columns_in_order_and_units_from_the_result_line():
    facts = traffic.check_server("gate", traffic.server_facts(server_state("gate")), "u", None, None)
    result = {"output_throughput": 5025.04, "mean_tpot_ms": 6.12345, "p99_tpot_ms": 7.5, "mean_e2e_latency_ms": 1700.0,
              "p99_e2e_latency_ms": 3400.0, "mean_ttft_ms": 35.5, "duration": 17.25, "completed": 320,
              "accept_length": 1.0}
    w = traffic.parse_workload("varied-poisson")
    row = traffic.build_row("gate", w, 0.2, facts, result, num_prompts=320, rate=8.0, max_concurrency=128,
                            accept_length=2.9)
    assert list(row) == traffic.TRAFFIC_COLUMNS
    assert traffic.TRAFFIC_COLUMNS[:14] == [
        "config", "workload", "p_wrong", "worker", "attention_backend", "concurrency", "request_rate", "threshold",
        "output_tok_s", "mean_tpot_ms", "p99_tpot_ms", "mean_e2e_ms", "p99_e2e_ms", "mean_ttft_ms"]
    assert row["concurrency"] == "" and row["request_rate"] == "8" and row["threshold"] == 48
    assert (row["output_tok_s"], row["mean_tpot_ms"], row["accept_length"]) == (5025.0, 6.123, 2.9)
    closed = traffic.build_row("off", traffic.parse_workload("varied-closed"), 0.2, facts, result, num_prompts=320,
                               concurrency=32)
    assert (closed["concurrency"], closed["request_rate"], closed["threshold"], closed["max_concurrency"]) == (
        32, "", 1, 32)
    auto = traffic.build_row("auto", w, 0.2, facts, result, num_prompts=320, rate=2.0, max_concurrency=128)
    assert auto["threshold"] == "auto" and auto["accept_length"] == ""
    with pytest.raises(RuntimeError, match="lacks mean_ttft_ms"):
        traffic.build_row("gate", w, 0.2, facts, {k: v for k, v in result.items() if k != "mean_ttft_ms"},
                          num_prompts=1, rate=1.0)
    with pytest.raises(RuntimeError, match="no request of 320 completed"):
        traffic.build_row("gate", w, 0.2, facts, dict(result, completed=0), num_prompts=320, rate=1.0)


# -- traffic against a running server (--url) --------------------------------------------------------

def test_one_call_runs_several_workloads_against_one_server(servers, bench, tmp_path, monkeypatch, capsys):
    server = servers("gate")
    out = tmp_path / "out"
    cli(monkeypatch, "traffic", "--url", server.url, "--config", "gate", "--worker", "v2", "--attention-backend",
        "triton", "--p-wrong", "0.2", "--workloads", "varied-closed,varied-poisson", "--concurrency", "1,64",
        "--rates", "2,64", "--out", out, "--work-dir", tmp_path / "work")
    header, rows = read_csv(out / traffic.DEFAULT_CSV)
    assert header == traffic.TRAFFIC_COLUMNS
    assert [(r["workload"], r["concurrency"], r["request_rate"]) for r in rows] == [
        ("varied-closed", "1", ""), ("varied-closed", "64", ""), ("varied-poisson", "", "2"),
        ("varied-poisson", "", "64")]
    assert {(r["config"], r["p_wrong"], r["worker"], r["attention_backend"], r["threshold"]) for r in rows} == {
        ("gate", "0.2", "v2", "triton", "48")}
    assert [r["max_concurrency"] for r in rows] == ["1", "64", "128", "128"]
    assert rows[0]["accept_length"] == "2.9"  # spec_gate.accept_length_recent
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert [p["workload"] for p in printed] == [r["workload"] for r in rows]  # one JSON line per row
    argvs = bench()
    assert len(argvs) == len(traffic.WARMUP) + 4 and server.flushes == len(argvs)  # --flush-cache each run
    measured = argvs[len(traffic.WARMUP):]
    assert {opt(a, "--seed") for a in measured} == {"1"} and {opt(a, "--seed") for a in argvs[:2]} == {"999"}
    assert {opt(a, "--random-range-ratio") for a in measured} == {"0.0625"}
    assert [opt(a, "--num-prompts") for a in measured] == [
        str(traffic.closed_prompts(1, traffic.LENGTHS["varied"], traffic.ROW_SECONDS)),
        str(traffic.closed_prompts(64, traffic.LENGTHS["varied"], traffic.ROW_SECONDS)),
        str(traffic.poisson_prompts(2, 128, traffic.LENGTHS["varied"], traffic.ROW_SECONDS)),
        str(traffic.poisson_prompts(64, 128, traffic.LENGTHS["varied"], traffic.ROW_SECONDS))]
    meta = json.loads((out / "traffic-gate-v2-p0.2.json").read_text())["runs"]
    assert len(meta) == 1 and len(meta[0]["rows"]) == 4 and meta[0]["server"]["worker_source"] == "spec_gate.spec_version"
    assert meta[0]["bench_serving_cli"].startswith("checked against ") and len(meta[0]["warmup_output_tok_s"]) == 2
    assert server.sets == []  # gate without --threshold: the server's N, untouched
    # each row's spec_gate read before and after it; the stand-in counts 30 ON + 10 OFF steps a read,
    # and the bench stand-in reads /server_info once during the row: two reads' worth
    assert [r["spec_gate_delta"] for r in meta[0]["rows"]] == [
        {"decode_steps_on": 60, "decode_steps_off": 20, "on_share": 0.75, "auto_reason": None}] * 4


REAL_AUTO = Path(__file__).resolve().parents[1] / "bench/results/h100-2026-12-07b/ab-auto-triton-p0.2/repeat0/c/traffic-auto-v2-p0.2.json"


def test_gate_row_delta_on_a_real_spec_gate():
    after = json.loads(REAL_AUTO.read_text())["runs"][0]["final_spec_gate"]  # an H100 auto server's, 2026-12-07
    less = {"decode_steps_on": 100, "decode_steps_off": 300, "switches": 2, "auto_probes": 1, "auto_probe_steps": 8,
            "off_resume_steps": 1}
    before = {**after, **{k: after[k] - v for k, v in less.items()}}
    delta = traffic.gate_row_delta(before, after)
    assert delta == {**less, "on_share": 0.25, "auto_reason": after["auto_reason"]}
    assert traffic.gate_row_delta(after, before) is None  # counters went back: the server restarted
    assert traffic.gate_row_delta(None, after) is None and traffic.gate_row_delta(after, {}) is None
    idle = traffic.gate_row_delta(after, after)
    assert idle["decode_steps_on"] == idle["decode_steps_off"] == 0 and idle["on_share"] is None


def test_only_gate_servers_are_asked_for_spec_gate(servers):
    gate, none = servers("gate"), servers("none")
    assert traffic.gate_snapshot("always", gate.url) is None and gate.log == []
    assert traffic.gate_snapshot("auto", gate.url)["threshold"] == 48
    assert traffic.gate_snapshot("off", none.url) is None  # no spec_gate there: a label, not an error
    assert traffic.gate_snapshot("gate", "http://127.0.0.1:9") is None  # nothing listening


def test_every_config_gets_the_same_requests_and_off_is_restored(servers, bench, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    common = ["--p-wrong", "0.2", "--workloads", "uniform-closed,varied-poisson", "--quick", "--out", out,
              "--work-dir", tmp_path / "work"]
    none, always, gate = servers("none"), servers("always"), servers("gate")
    for config, server in (("none", none), ("always", always), ("gate", gate), ("off", gate)):
        cli(monkeypatch, "traffic", "--url", server.url, "--config", config, *common)
    argvs = bench()
    per_call = len(argvs) // 4
    # all but the server's port and the raw output file: same prompts, counts, seeds and arrivals
    same = [[x for i, x in enumerate(a) if a[i - 1] not in ("--port", "--output-file")] for a in argvs]
    calls = [same[i * per_call:(i + 1) * per_call] for i in range(4)]
    assert per_call == len(traffic.QUICK_WARMUP) + 5 and calls[0] == calls[1] == calls[2] == calls[3]
    assert gate.sets == [(1, 0), (48, 2)]  # off: forced, then restored
    header, rows = read_csv(out / traffic.DEFAULT_CSV)
    assert header == traffic.TRAFFIC_COLUMNS  # one header for four calls
    levels = len(traffic.QUICK_CLOSED_LEVELS) + len(traffic.QUICK_POISSON_RATES)
    assert [r["config"] for r in rows] == [c for c in ("none", "always", "gate", "off") for _ in range(levels)]
    assert {r["threshold"] for r in rows if r["config"] == "off"} == {"1"}
    assert {r["threshold"] for r in rows if r["config"] in ("none", "always")} == {""}
    off = {r["concurrency"]: float(r["output_tok_s"]) for r in rows if r["config"] == "off" and r["concurrency"]}
    assert off["1"] == 95.0  # the stand-in saw threshold 1: OFF steps at batch 1
    runs = json.loads((out / "traffic-off-v2-p0.2.json").read_text())["runs"]
    assert runs[0]["restored_gate"] == {"threshold": 48, "hysteresis": 2}


def test_gate_threshold_is_set_live_and_restored(servers, bench, tmp_path, monkeypatch):
    server = servers("gate")
    cli(monkeypatch, "traffic", "--url", server.url, "--config", "gate", "--threshold", "32", "--p-wrong", "0.2",
        "--workloads", "varied-closed", "--concurrency", "16", "--num-prompts", "8", "--no-warmup",
        "--out", tmp_path / "o", "--work-dir", tmp_path / "w")
    _, rows = read_csv(tmp_path / "o" / traffic.DEFAULT_CSV)
    assert [(r["threshold"], r["num_requests"]) for r in rows] == [("32", "8")]
    assert server.sets == [(32, 2), (48, 2)] and len(bench()) == 1  # --no-warmup: no warm-up runs


def test_the_worker_comes_from_the_server_and_a_wrong_flag_is_refused(servers, bench, tmp_path, monkeypatch, capsys):
    v1 = servers("gate", worker="v1", attention="flashinfer")
    args = ["--p-wrong", "0.2", "--workloads", "varied-closed", "--concurrency", "4", "--num-prompts", "4",
            "--no-warmup", "--out", tmp_path / "o", "--work-dir", tmp_path / "w"]
    cli(monkeypatch, "traffic", "--url", v1.url, "--config", "gate", *args)
    _, rows = read_csv(tmp_path / "o" / traffic.DEFAULT_CSV)
    assert (rows[0]["worker"], rows[0]["attention_backend"]) == ("v1", "flashinfer")
    assert (tmp_path / "o" / "traffic-gate-v1-p0.2.json").exists()
    msg = fails(monkeypatch, capsys, "traffic", "--url", v1.url, "--config", "gate", "--worker", "v2", *args)
    assert msg == f"--worker v2, but the server at {v1.url} runs v1 (/server_info spec_gate.spec_version)"
    msg = fails(monkeypatch, capsys, "traffic", "--url", v1.url, "--config", "gate", "--attention-backend", "triton",
                *args)
    assert msg == f"--attention-backend triton, but the server at {v1.url} runs flashinfer (/server_info attention_backend)"
    none_v1 = servers("none", worker="v1")
    cli(monkeypatch, "traffic", "--url", none_v1.url, "--config", "none", *args)
    _, rows = read_csv(tmp_path / "o" / traffic.DEFAULT_CSV)
    assert (rows[-1]["config"], rows[-1]["worker"]) == ("none", "v1")  # disable_overlap_schedule
    assert len(rows) == 2 and len(bench()) == 2  # the refused calls ran nothing


@pytest.mark.parametrize("server_config, config, says", [
    ("gate", "none", "--config none, but the server at URL runs EAGLE3 speculation"),
    ("none", "gate", "--config gate, but the server at URL does not speculate"),
    ("always", "gate", "--config gate needs the speculation gate, but the server at URL has no spec_gate"),
    ("always", "off", "--config off needs the speculation gate"),
    ("gate", "always", "--config always, but the server at URL has the speculation gate (threshold 48)"),
])
def test_a_server_that_is_not_the_config_is_refused(servers, bench, tmp_path, monkeypatch, capsys, server_config,
                                                    config, says):
    server = servers(server_config)
    msg = fails(monkeypatch, capsys, "traffic", "--url", server.url, "--config", config, "--p-wrong", "0.2",
                "--out", tmp_path / "o")
    assert msg.startswith(says.replace("URL", server.url))
    assert bench() == [] and not (tmp_path / "o" / traffic.DEFAULT_CSV).exists()
    assert list((tmp_path / "o").glob("*.json")) == []


def test_a_call_cut_short_keeps_its_rows_and_restores_the_gate(servers, bench, tmp_path, monkeypatch, capsys):
    server = servers("gate")
    monkeypatch.setenv("FAKE_BS_FAIL_AT", "3")  # warm-up skipped: the third row fails
    msg = fails(monkeypatch, capsys, "traffic", "--url", server.url, "--config", "off", "--p-wrong", "0.2",
                "--workloads", "varied-closed", "--concurrency", "1,4,16", "--num-prompts", "4", "--no-warmup",
                "--out", tmp_path / "o", "--work-dir", tmp_path / "w")
    assert msg.startswith(f"traffic stopped after 2 row(s) ({tmp_path / 'o' / traffic.DEFAULT_CSV} has them): "
                          f"RuntimeError: fake_bench_serving")
    _, rows = read_csv(tmp_path / "o" / traffic.DEFAULT_CSV)
    assert [r["concurrency"] for r in rows] == ["1", "4"]
    assert server.sets == [(1, 0), (48, 2)]
    run = json.loads((tmp_path / "o" / "traffic-off-v2-p0.2.json").read_text())["runs"][0]
    assert "server went away" in run["error"] and len(run["rows"]) == 2


def test_sigterm_mid_row_restores_the_gate_and_keeps_the_rows(servers, bench, tmp_path, monkeypatch, capsys):
    import signal

    server = servers("gate")
    monkeypatch.setenv("FAKE_BS_SIGTERM_AT", "2")
    before = signal.getsignal(signal.SIGTERM)
    msg = fails(monkeypatch, capsys, "traffic", "--url", server.url, "--config", "off", "--p-wrong", "0.2",
                "--workloads", "varied-closed", "--concurrency", "1,4", "--num-prompts", "4", "--no-warmup",
                "--out", tmp_path / "o", "--work-dir", tmp_path / "w")
    assert msg == f"traffic interrupted after 1 row(s) ({tmp_path / 'o' / traffic.DEFAULT_CSV} has them)"
    assert server.sets == [(1, 0), (48, 2)] and len(bench()) == 2  # not retried in a subprocess
    assert signal.getsignal(signal.SIGTERM) == before
    run = json.loads((tmp_path / "o" / "traffic-off-v2-p0.2.json").read_text())["runs"][0]
    assert run["error"].startswith("KeyboardInterrupt") and len(run["rows"]) == 1


def test_a_csv_with_other_columns_is_refused_before_anything_runs(servers, bench, tmp_path, monkeypatch, capsys):
    out = tmp_path / "o"
    out.mkdir()
    (out / traffic.DEFAULT_CSV).write_text(",".join(throughput.CSV_COLUMNS) + "\nnone,0.2,1,1,1,1,,\n")
    msg = fails(monkeypatch, capsys, "traffic", "--url", servers("none").url, "--config", "none", "--p-wrong", "0.2",
                "--out", out)
    assert "has other columns than a traffic CSV" in msg and "--csv-name" in msg
    assert bench() == []


@pytest.mark.parametrize("args, says", [
    (["--url", "ftp://h:1"], "--url ftp://h:1: expected http://HOST:PORT"),
    (["--url", "http://h"], "expected http://HOST:PORT"),
    (["--url", "http://h:1", "--config", "off", "--threshold", "8"], "--threshold is the gate's N, for --config gate"),
    (["--url", "http://h:1", "--config", "always", "--hysteresis", "1"], "--hysteresis goes with --config gate"),
    (["--url", "http://h:1", "--no-p"], "--p-wrong is needed to label the rows"),
    (["--url", "http://h:1", "--no-p", "--p-wrong", "7"], "a number is the draft's per-token error rate, in [0, 1]"),
    (["--url", "http://h:1", "--no-p", "--p-wrong", "my/pair"], "a label is one word without spaces or path separators"),
    (["--url", "http://h:1", "--workloads", "bogus-closed"], "workload 'bogus-closed' is not <lengths>-<arrivals>"),
    (["--url", "http://h:1", "--workloads", "varied-batch"], "arrivals in closed, poisson"),
    (["--url", "http://h:1", "--rates", "0,2"], "expected comma-separated request rates > 0"),
    (["--url", "http://h:1", "--rates", "inf"], "expected comma-separated request rates > 0"),
    (["--url", "http://h:1", "--concurrency", "0"], "expected comma-separated positive integers"),
    (["--url", "http://h:1", "--concurrency", "4,16,4"], "4 given more than once in '4,16,4': each level is one row"),
    (["--url", "http://h:1", "--rates", "4,4.0"], "4 given more than once in '4,4.0'"),
    (["--url", "http://h:1", "--workloads", "varied-closed,varied-closed"], "varied-closed given more than once"),
    (["--url", "http://h:1", "--csv-name", "a/b.csv"], "--csv-name is a file name inside --out"),
    (["--url", "http://h:1", "--row-seconds", "0"], "--row-seconds must be > 0"),
    (["--url", "http://h:1", "--max-concurrency", "0"], "--max-concurrency is a number of requests >= 1"),
    (["--url", "http://h:1", "--", "--tp-size", "2"], "only when traffic starts the server (not --url)"),
    (["--target", "org/t", "--config", "auto"], "--config auto starts no server of its own"),
    (["--target", "org/t", "--config", "gate"], "--config gate with --target needs --draft"),
    (["--models", "MISSING"], "is not a synthetic pair made by python -m bench.synthetic_models"),
    (["--url", "http://h:1", "--draft", "org/d"], "--draft goes with --target"),
    (["--url", "http://h:1", "--config", "gate", "--threshold", "4", "--hysteresis", "-1"], "hysteresis must be >= 0, got -1"),
])
def test_bad_traffic_arguments_are_one_line_errors(tmp_path, monkeypatch, capsys, args, says):
    monkeypatch.setattr(traffic, "traffic", lambda a: pytest.fail("traffic() must not start after an error"))
    args = [str(tmp_path / "missing") if x == "MISSING" else x for x in args]
    base = ["--out", tmp_path / "o"] + ([] if "--config" in args else ["--config", "gate"])
    base += [] if "--no-p" in args else ["--p-wrong", "0.2"]
    args = [x for x in args if x != "--no-p"]
    if "--" in args:
        i = args.index("--")
        args = args[:i] + [str(x) for x in base] + args[i:]
    else:
        args = args + [str(x) for x in base]
    assert says in fails(monkeypatch, capsys, "traffic", *args)
    assert not (tmp_path / "o").exists()


def test_an_unreachable_url_is_one_line(tmp_path, monkeypatch, capsys):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    msg = fails(monkeypatch, capsys, "traffic", "--url", f"http://127.0.0.1:{port}", "--config", "none",
                "--p-wrong", "0.2", "--out", tmp_path / "o")
    assert msg.startswith(f"cannot read http://127.0.0.1:{port}/server_info: ")


# -- traffic starting its own server -------------------------------------------------------------------

def test_start_mode_launches_like_run_and_stops_the_server(servers, bench, tmp_path, monkeypatch):
    from bench import server_harness

    pair = tmp_path / "pair"
    for d in ("target", "draft"):
        (pair / d).mkdir(parents=True)
    (pair / "oracle.json").write_text(json.dumps({"p_wrong": 0.5, "format_version": 1}))
    fake = servers("gate", worker="v1", attention="fa3")
    started, stopped = [], []

    class Started:
        url, ready_s = fake.url, 12.0

        def log_tail(self, n):
            return ""

    def start_server(name, args, port, log_dir, env=None, cpus=None):
        started.append((name, args, port, env))
        return Started()

    monkeypatch.setattr(server_harness, "start_server", start_server)
    monkeypatch.setattr(server_harness, "wait_ready", lambda server, timeout_s: None)
    monkeypatch.setattr(server_harness, "stop_server", lambda server: stopped.append(server) or 0)
    cli(monkeypatch, "traffic", "--models", pair, "--config", "gate", "--worker", "v1", "--attention-backend", "fa3",
        "--threshold", "32", "--workloads", "short-poisson", "--rates", "4", "--num-prompts", "4", "--no-warmup",
        "--out", tmp_path / "o", "--work-dir", tmp_path / "w", "--", "--tp-size", "2")
    name, args, port, env = started[0]
    assert name == "traffic-gate-v1-p0.5" and port == 30500 and len(stopped) == 1
    assert env == {"SPECCONSOLE_WARM_SAMPLING": "0"}  # greedy traffic: no start-up build of sampling kernels
    assert args[args.index("--model-path") + 1] == str(pair / "target")
    assert "--disable-overlap-schedule" in args and opt(args, "--speculative-disable-batch-threshold") == "32"
    assert args[-4:] == ["--attention-backend", "fa3", "--tp-size", "2"]  # after BASE_ARGS' triton: it wins
    assert fake.sets == []  # start mode: the threshold was a launch argument
    _, rows = read_csv(tmp_path / "o" / traffic.DEFAULT_CSV)
    assert [(r["p_wrong"], r["workload"], r["request_rate"], r["worker"]) for r in rows] == [
        ("0.5", "short-poisson", "4", "v1")]
    assert opt(bench()[0], "--random-range-ratio") == "0.125"


def test_start_mode_args_per_config():
    a = traffic.argparse.Namespace(config="none", worker="v1", attention_backend=None, mem_fraction=0.8,
                                   threshold=None, hysteresis=None, server_args=[])
    args = traffic.server_args_for(a, "/m/t", None)
    assert "--speculative-algorithm" not in args and args[-1] == "--disable-overlap-schedule"
    a.config, a.worker = "off", None
    args = traffic.server_args_for(a, "/m/t", "/m/d")
    assert opt(args, "--speculative-disable-batch-threshold") == "48" and "--disable-overlap-schedule" not in args
    a.config, a.server_args = "auto", ["--speculative-auto-threshold"]
    args = traffic.server_args_for(a, "/m/t", "/m/d")
    assert "--speculative-disable-batch-threshold" not in args and args[-1] == "--speculative-auto-threshold"


# -- summarize-traffic ---------------------------------------------------------------------------------

def trow(config, workload, level, tok_s, e2e=1000.0, worker="v2", threshold="", attention="triton", p="0.2"):
    closed = workload.endswith("-closed")
    if config == "off":
        threshold = 1
    if config == "auto" and threshold == "":
        threshold = "auto"
    return {"config": config, "workload": workload, "p_wrong": p, "worker": worker, "attention_backend": attention,
            "concurrency": level if closed else "", "request_rate": "" if closed else level,
            "threshold": threshold, "output_tok_s": tok_s, "mean_tpot_ms": 5, "p99_tpot_ms": 6,
            "mean_e2e_ms": e2e, "p99_e2e_ms": 2 * e2e, "mean_ttft_ms": 30, "accept_length": "", "num_requests": 8,
            "completed": 8, "duration_s": 10, "max_concurrency": level if closed else 128}


def write_rows(path: Path, rows) -> Path:
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=traffic.TRAFFIC_COLUMNS)
        w.writeheader()
        w.writerows(rows)
    return path


ROWS = [
    trow("none", "varied-closed", 64, 8000), trow("always", "varied-closed", 64, 6000),
    trow("gate", "varied-closed", 64, 7600, threshold=48), trow("off", "varied-closed", 64, 7700),
    trow("auto", "varied-closed", 64, 7900),
    trow("none", "varied-closed", 64, 7000, worker="v1"), trow("always", "varied-closed", 64, 5000, worker="v1"),
    trow("gate", "varied-closed", 64, 6300, worker="v1", threshold=48),
    trow("off", "varied-closed", 64, 6400, worker="v1"),
    trow("none", "varied-poisson", 8, 2100, e2e=1500), trow("always", "varied-poisson", 8, 2100, e2e=1000),
    trow("gate", "varied-poisson", 8, 2100, e2e=1100, threshold=48), trow("off", "varied-poisson", 8, 2100, e2e=1560),
    trow("gate", "varied-poisson", 8, 2100, e2e=1050, threshold=32),
    trow("gate", "uniform-closed", 1, 390, threshold=48),  # no static rows here
]


def test_traffic_ratios_per_workload_level_and_worker():
    recs = {(r["workload"], r["level"][1], r["worker"], r["threshold"]): r
            for r in traffic_summary.traffic_ratios([{k: str(v) for k, v in r.items()} for r in ROWS])}
    v2 = recs[("varied-closed", 64.0, "v2", "48")]["ratios"]
    assert v2 == {"off/none": round(7700 / 8000, 3), "gate/best": 0.95, "auto/best": round(7900 / 8000, 3)}
    v1 = recs[("varied-closed", 64.0, "v1", "48")]["ratios"]
    assert v1["off/none"] == round(6400 / 7000, 3) and v1["gate/best"] == 0.9 and v1["auto/best"] is None
    assert v1["off/none_v2"] == 0.8 and v1["gate/none_v2"] == round(6300 / 8000, 3) and v1["auto/none_v2"] is None
    p48, p32 = recs[("varied-poisson", 8.0, "v2", "48")], recs[("varied-poisson", 8.0, "v2", "32")]
    assert p48["e2e"]["gate/best"] == 1.1 and p32["e2e"]["gate/best"] == 1.05  # against always' 1000 ms
    assert p48["e2e"]["off/none"] == 1.04 and p48["ratios"]["gate/best"] == 1.0
    lone = recs[("uniform-closed", 1.0, "v2", "48")]
    assert lone["ratios"] == {"off/none": None, "gate/best": None, "auto/best": None} and "e2e" not in lone
    order = [(r["workload"], r["worker"]) for r in recs.values()]
    assert order.index(("uniform-closed", "v2")) < order.index(("varied-closed", "v2")) < order.index(
        ("varied-closed", "v1")) < order.index(("varied-poisson", "v2"))


def test_summarize_traffic_prints_the_tables(tmp_path, monkeypatch, capsys):
    path = write_rows(tmp_path / "t.csv", ROWS)
    cli(monkeypatch, "summarize-traffic", path)
    out = capsys.readouterr().out
    assert out.startswith("p_wrong=0.2\n")
    assert "| varied-closed | c=64 | v2 | triton | 48 | 8000.0 | 6000.0 | 7600.0 | 7700.0 | 7900.0 | 0.963 | 0.950 | 0.988 |  |  |  |" in out
    assert "| varied-closed | c=64 | v1 | triton | 48 | 7000.0 | 5000.0 | 6300.0 | 6400.0 | n/a | 0.914 | 0.900 | n/a | 0.800 | 0.787 | n/a |" in out
    assert "mean end-to-end latency, ms" in out
    assert "| varied-poisson | r=8/s cap 128 | v2 | triton | 32 | 1500.0 | 1000.0 | 1050.0 | 1560.0 | n/a | 1.040 | 1.050 | n/a |" in out
    assert "| uniform-closed | c=1 | v2 | triton | 48 | n/a | n/a | 390.0 | n/a | n/a | n/a | n/a | n/a |" in out


def test_a_v1_row_against_another_backends_v2_none_is_marked(tmp_path, monkeypatch, capsys):
    rows = [trow("none", "varied-closed", 64, 8000), trow("gate", "varied-closed", 64, 6000, worker="v1",
                                                              threshold=48, attention="flashinfer")]
    cli(monkeypatch, "summarize-traffic", write_rows(tmp_path / "t.csv", rows))
    out = capsys.readouterr().out
    assert "| varied-closed | c=64 | v1 | flashinfer | 48 | n/a | n/a | 6000.0 | n/a | n/a | n/a | n/a | n/a | n/a | 0.750* | n/a |" in out
    assert "* against the v2 none row of attention backend triton" in out


def test_summarize_traffic_warns_about_duplicates_and_lost_requests(tmp_path, monkeypatch, capsys):
    rows = [trow("none", "varied-closed", 64, 8000), trow("none", "varied-closed", 64, 8100),
            dict(trow("off", "varied-closed", 64, 7000), completed=5)]
    cli(monkeypatch, "summarize-traffic", write_rows(tmp_path / "t.csv", rows))
    captured = capsys.readouterr()
    assert "| varied-closed | c=64 | v2 | triton |  | 8100.0 |" in captured.out  # the last one read
    assert "1 measurement(s) appear more than once (none varied-closed c=64 v2 p=0.2)" in captured.err
    assert "1 row(s) had requests that did not complete" in captured.err


def test_an_auto_results_csv_uses_the_same_schema(tmp_path, monkeypatch, capsys):
    rows = [trow("none", "varied-poisson", 16, 4000, e2e=2000), trow("always", "varied-poisson", 16, 4000, e2e=1600),
            trow("auto", "varied-poisson", 16, 4000, e2e=1680), trow("auto", "varied-closed", 32, 5000, threshold=40)]
    cli(monkeypatch, "summarize-traffic", write_rows(tmp_path / "auto-traffic.csv", rows))
    out = capsys.readouterr().out
    assert "| varied-poisson | r=16/s cap 128 | v2 | triton |  | 2000.0 | 1600.0 | n/a | n/a | 1680.0 | n/a | n/a | 1.050 |" in out


GOOD = trow("none", "varied-closed", 64, 8000)


@pytest.mark.parametrize("change, column, says", [
    ({"config": "weird"}, "config", "'weird' is not one of none, always, gate, off, auto"),
    ({"workload": "varied"}, "workload", "'varied' is not <lengths>-<arrivals>"),
    ({"worker": "v3"}, "worker", "'v3' is not one of v2, v1"),
    ({"p_wrong": ""}, "p_wrong", "is empty"),
    ({"request_rate": "8"}, "request_rate", "must be empty for a closed workload"),
    ({"concurrency": ""}, "concurrency", "is empty (a closed workload needs it)"),
    ({"concurrency": "1.5"}, "concurrency", "'1.5' is not an integer"),
    ({"workload": "varied-poisson", "concurrency": "", "request_rate": "0"}, "request_rate", "'0' is not a measurement"),
    ({"workload": "varied-poisson"}, "concurrency", "must be empty for a poisson workload"),
    ({"config": "gate"}, "threshold", "is empty"),
    ({"config": "auto", "threshold": "x"}, "threshold", "'x' is not an integer (auto rows say 'auto' or N)"),
    ({"threshold": "48"}, "threshold", "must be empty for none"),
    ({"output_tok_s": "nan"}, "output_tok_s", "'nan' is not a measurement"),
    ({"mean_e2e_ms": ""}, "mean_e2e_ms", "is empty"),
    ({"mean_ttft_ms": "-1"}, "mean_ttft_ms", "'-1' is not a measurement"),
    ({"completed": "many"}, "completed", "'many' is not an integer"),
])
def test_a_bad_traffic_cell_is_named_by_file_line_and_column(tmp_path, monkeypatch, capsys, change, column, says):
    path = write_rows(tmp_path / "t.csv", [GOOD, dict(GOOD, **change)])
    msg = fails(monkeypatch, capsys, "summarize-traffic", path)
    assert msg.startswith(f"{path}:3: column {column}: ") and says in msg, msg


def test_summarize_traffic_file_errors(tmp_path, monkeypatch, capsys):
    assert fails(monkeypatch, capsys, "summarize-traffic", tmp_path / "no.csv") == f"no such file: {tmp_path / 'no.csv'}"
    assert fails(monkeypatch, capsys, "summarize-traffic", tmp_path) == f"{tmp_path} is a directory, not a file"
    import os

    pipe = tmp_path / "pipe.csv"
    os.mkfifo(pipe)  # a second fresh user's find: reading it waited for a writer forever
    assert fails(monkeypatch, capsys, "summarize-traffic", pipe) == f"{pipe} is a named pipe, not a file"
    sweep = tmp_path / "throughput.csv"
    sweep.write_text(",".join(throughput.CSV_COLUMNS) + "\nnone,0.2,1,1,1,1,,\n")
    assert fails(monkeypatch, capsys, "summarize-traffic", sweep) == (
        f"{sweep} is not a traffic CSV: missing columns workload, worker, attention_backend, request_rate, "
        f"mean_e2e_ms, p99_e2e_ms, mean_ttft_ms")
    empty = tmp_path / "e.csv"
    empty.write_text(",".join(traffic.TRAFFIC_COLUMNS) + "\n")
    assert fails(monkeypatch, capsys, "summarize-traffic", empty) == f"{empty} has no rows"
    binary = tmp_path / "b.csv"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe\x81" * 20)
    assert fails(monkeypatch, capsys, "summarize-traffic", binary) == f"{binary} is not a text CSV (not UTF-8; binary file?)"
    extra = write_rows(tmp_path / "x.csv", [GOOD])
    extra.write_text(extra.read_text().rstrip("\n") + ",surplus\n")
    assert fails(monkeypatch, capsys, "summarize-traffic", extra) == f"{extra}:2: more values than columns"
    short = tmp_path / "s.csv"
    short.write_text(",".join(traffic.TRAFFIC_COLUMNS) + "\nnone,varied-closed,0.2\n")
    assert fails(monkeypatch, capsys, "summarize-traffic", short) == f"{short}:2: column worker: is missing (short line)"


def test_summarize_traffic_from_the_real_command_line_has_no_traceback(tmp_path):
    path = tmp_path / "hello.csv"
    path.write_text("hello world\n")
    proc = subprocess.run([sys.executable, "-m", "bench.throughput", "summarize-traffic", str(path)],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.splitlines() == [f"{path} is not a traffic CSV: missing columns "
                                        + ", ".join(traffic.REQUIRED_COLUMNS)]
    ok = write_rows(tmp_path / "ok.csv", ROWS)
    proc = subprocess.run([sys.executable, "-m", "bench.throughput", "summarize-traffic", str(ok)],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0 and "| varied-closed | c=64 | v2 |" in proc.stdout


def test_the_csv_written_by_traffic_is_read_back(servers, bench, tmp_path, monkeypatch, capsys):
    from bench.traffic_summary import read_traffic_rows

    out = tmp_path / "o"
    for config, server in (("none", servers("none")), ("always", servers("always")), ("gate", servers("gate"))):
        cli(monkeypatch, "traffic", "--url", server.url, "--config", config, "--p-wrong", "0.2", "--quick",
            "--out", out, "--work-dir", tmp_path / "w")
    rows = read_traffic_rows([out / traffic.DEFAULT_CSV])
    assert len(rows) == 3 * (2 * len(traffic.QUICK_CLOSED_LEVELS) + len(traffic.QUICK_POISSON_RATES))
    capsys.readouterr()
    cli(monkeypatch, "summarize-traffic", out / traffic.DEFAULT_CSV)
    text = capsys.readouterr().out
    # the stand-in: speculation on below 48 requests (1.6x), off above; gate at c=128 = OFF steps (0.95x)
    assert "| uniform-closed | c=1 | v2 | triton | 48 | 100.0 | 160.0 | 160.0 | n/a | n/a | n/a | 1.000 | n/a |" in text
    assert "| uniform-closed | c=128 | v2 | triton | 48 | 12800.0 | 8960.0 | 12160.0 | n/a | n/a | n/a | 0.950 | n/a |" in text


def test_quick_and_explicit_levels(monkeypatch, tmp_path):
    seen = []
    monkeypatch.setattr(traffic, "traffic", seen.append)
    cli(monkeypatch, "traffic", "--url", "http://h:1", "--config", "none", "--p-wrong", "0.2", "--quick",
        "--out", tmp_path / "o")
    plan = seen[0].plan
    assert (plan.concurrency, plan.rates, plan.row_seconds, plan.warmup) == (
        traffic.QUICK_CLOSED_LEVELS, traffic.QUICK_POISSON_RATES, traffic.QUICK_ROW_SECONDS, traffic.QUICK_WARMUP)
    assert [w.name for w in plan.workloads] == traffic.DEFAULT_WORKLOADS
    cli(monkeypatch, "traffic", "--url", "http://h:1", "--config", "none", "--p-wrong", "0.2", "--quick",
        "--concurrency", "2,8", "--rates", "1.5", "--row-seconds", "10", "--out", tmp_path / "o")
    plan = seen[1].plan
    assert (plan.concurrency, plan.rates, plan.row_seconds) == ([2, 8], [1.5], 10.0)
    cli(monkeypatch, "traffic", "--url", "http://h:1", "--config", "none", "--p-wrong", "0.2", "--out", tmp_path / "o")
    plan = seen[2].plan
    assert (plan.concurrency, plan.rates, plan.row_seconds, plan.warmup) == (
        traffic.CLOSED_LEVELS, traffic.POISSON_RATES, traffic.ROW_SECONDS, traffic.WARMUP)


def test_more_requests_in_flight_than_the_server_runs_is_said(servers, bench, tmp_path, monkeypatch, capsys):
    state = server_state("none")
    state["max_running_requests"] = 64
    server = servers(state=state)
    cli(monkeypatch, "traffic", "--url", server.url, "--config", "none", "--p-wrong", "0.2", "--workloads",
        "varied-closed", "--concurrency", "128", "--num-prompts", "128", "--no-warmup", "--out", tmp_path / "o",
        "--work-dir", tmp_path / "w")
    assert "warning: up to 128 requests in flight, but the server runs at most 64 at once" in capsys.readouterr().err
    run = json.loads((tmp_path / "o" / "traffic-none-v2-p0.2.json").read_text())["runs"][0]
    assert "the server runs at most 64" in run["note"]


def test_dry_run_prints_the_plan_and_starts_nothing(tmp_path, monkeypatch, capsys):
    from bench import server_harness

    monkeypatch.setattr(server_harness, "start_server", lambda *a, **k: pytest.fail("--dry-run started a server"))
    pair = tmp_path / "pair"
    for d in ("target", "draft"):
        (pair / d).mkdir(parents=True)
    (pair / "oracle.json").write_text(json.dumps({"p_wrong": 0.2}))
    cli(monkeypatch, "traffic", "--models", pair, "--config", "off", "--quick", "--dry-run", "--out", tmp_path / "o")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("server: python -m server_patch.launch_server --model-path ")
    assert "--speculative-disable-batch-threshold 48" in lines[0] and lines[0].endswith("--port 30500 --host 127.0.0.1")
    rows = [json.loads(line) for line in lines[1:-1]]
    assert len(rows) == 2 * len(traffic.QUICK_CLOSED_LEVELS) + len(traffic.QUICK_POISSON_RATES)
    assert all(r["est_s"] > 0 and r["argv"][:2] == ["--backend", "sglang"] for r in rows)
    assert lines[-1].startswith(f"{len(rows)} rows, 2 warm-up runs: about ")
    assert not (tmp_path / "o").exists()


# -- --profile-row: SGLang's profiler over a repeat of one row -----------------------------------------

def write_trace(directory: str, name: str = "1764633600.1-TP-0.trace.json.gz") -> None:
    """What SGLang writes into /start_profile's output_dir: a small chrome trace with one target
    prefill, the draft's prefill and one OFF step (bench.trace_summary's stage tests have more)."""
    import gzip

    def x(cat, name, ts, dur, corr=None, pid=100, tid=100):
        e = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
        if corr is not None:
            e["args"] = {"correlation": corr}
        return e

    events = [x("user_annotation", "step[EXTEND bs=2 toks=300]", 0, 50), x("cuda_runtime", "cudaLaunchKernel", 1, 2, 1),
              x("kernel", "gemm", 10, 100, 1, 0, 7),
              x("user_annotation", "step[EXTEND bs=2 toks=300]", 60, 20), x("cuda_runtime", "cudaLaunchKernel", 61, 2, 2),
              x("kernel", "draft_gemm", 110, 20, 2, 0, 7),
              x("user_annotation", "step[TARGET_VERIFY bs=64]", 90, 10), x("cuda_runtime", "cudaGraphLaunch", 91, 2, 3),
              x("kernel", "decode_gemm", 140, 60, 3, 0, 7)]
    Path(directory).mkdir(parents=True, exist_ok=True)
    with gzip.open(Path(directory) / name, "wt") as f:
        json.dump({"traceEvents": events}, f)


PROFILE_ARGS = ["--p-wrong", "0.2", "--workloads", "varied-closed", "--concurrency", "16,64", "--num-prompts", "8",
                "--no-warmup", "--profile-row", "varied-closed:64", "--profile-delay", "0", "--profile-steps", "7"]


def test_profile_row_records_a_repeat_of_the_row_and_summarizes_it_by_stage(servers, bench, tmp_path, monkeypatch,
                                                                            capsys):
    server = servers("gate")
    posts = []

    def on_profile(path, body):
        posts.append((path, body, list(server.sets)))
        write_trace(body["output_dir"])

    server.on_profile = on_profile
    out = tmp_path / "o"
    cli(monkeypatch, "traffic", "--url", server.url, "--config", "off", *PROFILE_ARGS, "--out", out,
        "--work-dir", tmp_path / "w")
    _, rows = read_csv(out / traffic.DEFAULT_CSV)
    assert [r["concurrency"] for r in rows] == ["16", "64"]  # the profiled pass is not a row
    argvs = bench()
    assert len(argvs) == 3
    same = [[x for i, x in enumerate(a) if a[i - 1] not in ("--output-file", "--num-prompts")] for a in argvs]
    assert same[2] == same[1]  # the pass sends the c=64 row's requests again, three times as many
    assert int(opt(argvs[2], "--num-prompts")) == traffic.PROFILE_PASS_FACTOR * int(opt(argvs[1], "--num-prompts"))
    assert opt(argvs[2], "--output-file").endswith("-c64-profile.jsonl")
    (path, body, sets), = posts
    assert path == "/start_profile" and sets == [(1, 0)]  # while the gate was forced off
    assert body["num_steps"] == 7 and body["activities"] == ["CPU", "GPU"]
    assert body["with_stack"] is False and body["record_shapes"] is False
    name = "profile-traffic-off-v2-p0.2-varied-closed-c64"
    assert body["output_dir"] == str((out / name).resolve())
    doc = json.loads((out / f"{name}.json").read_text())
    assert doc["errors"] == [] and doc["primary"] == "1764633600.1-TP-0.trace.json.gz"
    assert doc["tokens_per_verify"] == 1.0 and doc["pass"]["completed"] == 24 and doc["threshold"] == 1
    stages = doc["traces"][doc["primary"]]["stages"]
    assert set(stages["stages"]) == {"prefill", "draft_prefill", "decode"}
    assert stages["tokens"]["output_tokens"] == 66 and doc["traces"][doc["primary"]]["summary"]["graph_launches"] == 1
    run = json.loads((out / "traffic-off-v2-p0.2.json").read_text())["runs"][0]
    assert run["profile"]["json"] == str(out / f"{name}.json") and run["profile"]["output_tokens"] == 66
    assert run["plan"]["profile"] == {"workload": "varied-closed", "level": 64.0, "steps": 7, "delay_s": 0.0}
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith('{"profile"')]
    assert printed[0]["stages_ms"]["draft_prefill"] > 0
    # the comparison command reads what was written (here the same profile twice: no gap)
    cli(monkeypatch, "compare-profiles", out / f"{name}.json", out / f"{name}.json")
    text = capsys.readouterr().out
    assert "A = off varied-closed c=64" in text and "B - A +0.00" in text
    assert "output tokens per decode step" in text and "NOT THE SAME LOAD" not in text
    assert "GPU idle gaps by the CPU site of the launch that ended them" in text  # the summary recorded sites


def test_a_gate_servers_profile_counts_its_verify_tokens_from_the_pass_own_on_and_off_steps(servers, bench, tmp_path,
                                                                                             monkeypatch, capsys):
    """A mostly-OFF gate server's verify batches make ~1 token a request, not the row's accept length
    (h100-2026-12-07e: auto at 32 was counted 2.006 a request, twice its tokens); the fake server
    adds 30 ON and 10 OFF decode steps a /server_info read, so the pass made (30 x 2.9 + 10) / 40 a request."""
    server = servers("gate")
    server.on_profile = lambda path, body: write_trace(body["output_dir"])
    out = tmp_path / "o"
    cli(monkeypatch, "traffic", "--url", server.url, "--config", "gate", "--threshold", "32", *PROFILE_ARGS,
        "--out", out, "--work-dir", tmp_path / "w")
    doc = json.loads((out / "profile-traffic-gate-v2-p0.2-varied-closed-c64.json").read_text())
    delta = doc["pass_spec_gate_delta"]
    assert delta["decode_steps_on"] == 3 * delta["decode_steps_off"] > 0 and delta["on_share"] == 0.75
    assert doc["tokens_per_verify"] == pytest.approx((30 * 2.9 + 10) / 40) and doc["tokens_per_verify_row"] == 2.9
    # compare-profiles can recount one side: every verify batch of B at 1 token a request
    name = out / "profile-traffic-gate-v2-p0.2-varied-closed-c64.json"
    capsys.readouterr()
    cli(monkeypatch, "compare-profiles", name, name, "--b-tokens-per-verify", "1")
    text = capsys.readouterr().out
    assert "B = gate varied-closed c=64" in text and "NOT THE SAME LOAD" in text  # A still at 2.425
    cli(monkeypatch, "compare-profiles", name, name, "--a-tokens-per-verify", "1", "--b-tokens-per-verify", "1")
    assert "NOT THE SAME LOAD" not in capsys.readouterr().out
    for bad in ("0", "-1", "nan", "inf", "1e308", "abc"):
        msg = fails(monkeypatch, capsys, "compare-profiles", name, name, "--a-tokens-per-verify", bad)
        assert "--a-tokens-per-verify" in msg and ("at most 64" in msg or "not a number" in msg)


def test_compare_profiles_says_what_it_cannot_use_in_one_line(servers, bench, tmp_path, monkeypatch, capsys):
    """Damaged summaries give one line, not a traceback; optional parts that are missing or malformed
    are left out with a note; a recount of a side without verify batches is told to change nothing."""
    server = servers("gate")
    server.on_profile = lambda path, body: write_trace(body["output_dir"])
    out = tmp_path / "o"
    cli(monkeypatch, "traffic", "--url", server.url, "--config", "off", *PROFILE_ARGS, "--out", out,
        "--work-dir", tmp_path / "w")
    good = out / "profile-traffic-off-v2-p0.2-varied-closed-c64.json"
    doc = json.loads(good.read_text())
    trace = doc["traces"][doc["primary"]]
    plain = json.loads(json.dumps(doc))
    plain["traces"][plain["primary"]]["stages"]["tokens"]["verify_requests"] = 0
    (tmp_path / "plain.json").write_text(json.dumps(plain))
    capsys.readouterr()
    cli(monkeypatch, "compare-profiles", good, tmp_path / "plain.json", "--b-tokens-per-verify", "2")
    assert "has no TARGET_VERIFY batches: --b-tokens-per-verify changes nothing" in capsys.readouterr().err
    for damage, says in ((lambda t: t["stages"].pop("steps"), "lacks the field 'steps'"),
                         (lambda t: t["stages"].__setitem__("window_ms", 0), "malformed"),
                         (lambda t: t["stages"].__setitem__("stages", []), "malformed")):
        broken = json.loads(json.dumps(doc))
        damage(broken["traces"][broken["primary"]])
        path = tmp_path / "broken.json"
        path.write_text(json.dumps(broken))
        assert says in fails(monkeypatch, capsys, "compare-profiles", good, path)
    broken = json.loads(json.dumps(doc))
    broken["traces"][broken["primary"]]["summary"]["cpu_ops"] = {"aten::add": "fast"}
    broken["traces"][broken["primary"]]["summary"]["sync_sites"] = "junk"
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(broken))
    cli(monkeypatch, "compare-profiles", good, path)
    printed = capsys.readouterr().out
    assert "sites are not shown: a summary's site lists are malformed" in printed
    assert trace["summary"].get("cpu_ops") is not None


@pytest.mark.parametrize("delta, accept, expected", [
    ({"decode_steps_on": 30, "decode_steps_off": 10}, 2.9, 2.425),
    ({"decode_steps_on": 0, "decode_steps_off": 10}, None, 1.0),      # all OFF: no accept length needed
    ({"decode_steps_on": 5, "decode_steps_off": 5}, None, None),      # ON steps, no accept length
    ({"decode_steps_on": 5, "decode_steps_off": 5}, float("nan"), None),
    ({"decode_steps_on": 0, "decode_steps_off": 0}, 2.0, None),       # no decode steps
    ({"decode_steps_off": 4}, 2.0, None), (None, 2.0, None),
])
def test_mixed_tokens_per_verify(delta, accept, expected):
    assert traffic.mixed_tokens_per_verify(delta, accept) == (pytest.approx(expected) if expected else expected)


def test_a_profile_cut_short_is_stopped_and_a_failed_one_keeps_the_rows(servers, bench, tmp_path, monkeypatch,
                                                                        capsys):
    server = servers("none")
    stops = []

    def on_profile(path, body):  # the pass ended before num_steps: only /stop_profile writes the trace
        if path == "/start_profile":
            server.profile_dir = body["output_dir"]
        else:
            stops.append(path)
            write_trace(server.profile_dir)

    server.on_profile = on_profile
    out = tmp_path / "o"
    cli(monkeypatch, "traffic", "--url", server.url, "--config", "none", *PROFILE_ARGS, "--out", out,
        "--work-dir", tmp_path / "w")
    doc = json.loads((out / "profile-traffic-none-v2-p0.2-varied-closed-c64.json").read_text())
    assert stops == ["/stop_profile"] and doc["stopped_early"] is True and doc["errors"] == []
    assert doc["tokens_per_verify"] is None  # no speculation
    assert "draft_prefill" not in doc["traces"][doc["primary"]]["stages"]["stages"]  # told: none
    # the server refuses to profile: said, recorded, and the call still ends well with its rows
    server.on_profile = lambda path, body: 500
    cli(monkeypatch, "traffic", "--url", server.url, "--config", "none", *PROFILE_ARGS, "--out", out,
        "--work-dir", tmp_path / "w")
    assert "warning: profile: /start_profile answered 500" in capsys.readouterr().err
    doc = json.loads((out / "profile-traffic-none-v2-p0.2-varied-closed-c64.json").read_text())
    assert doc["traces"] == {} and doc["errors"][0].startswith("/start_profile answered 500")
    _, rows = read_csv(out / traffic.DEFAULT_CSV)
    assert len(rows) == 4
    msg = fails(monkeypatch, capsys, "compare-profiles", out / "profile-traffic-none-v2-p0.2-varied-closed-c64.json",
                out / "profile-traffic-none-v2-p0.2-varied-closed-c64.json")
    assert "neither a stage summary nor a traffic profile with traces" in msg


@pytest.mark.parametrize("args, says", [
    (["--profile-row", "varied-closed"], "is not WORKLOAD:LEVEL"),
    (["--profile-row", "varied-closed:2.5"], "the level of varied-closed is a number of concurrent requests >= 1"),
    (["--profile-row", "varied-poisson:0"], "the level of varied-poisson is a request rate > 0"),
    (["--profile-row", "bogus-closed:64"], "workload 'bogus-closed' is not"),
    (["--profile-row", "varied-closed:32"], "--profile-row varied-closed:32: no such row in this call"),
    (["--profile-row", "long-closed:64"], "no such row in this call (workloads uniform-closed,varied-closed"),
    (["--profile-steps", "5"], "--profile-steps / --profile-delay go with --profile-row"),
    (["--profile-row", "varied-closed:64", "--profile-steps", "0"], "--profile-steps is a number of forward steps"),
    (["--profile-row", "varied-closed:64", "--profile-delay", "nan"], "--profile-delay is a number of seconds"),
])
def test_bad_profile_arguments_are_one_line_errors(tmp_path, monkeypatch, capsys, args, says):
    monkeypatch.setattr(traffic, "traffic", lambda a: pytest.fail("traffic() must not start after an error"))
    assert says in fails(monkeypatch, capsys, "traffic", "--url", "http://h:1", "--config", "none", "--p-wrong",
                         "0.2", "--concurrency", "16,64", "--workloads", "uniform-closed,varied-closed",
                         "--out", tmp_path / "o", *args)


def test_compare_profiles_file_errors(tmp_path, monkeypatch, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    for a, says in ((tmp_path / "missing.json", "no such file: "), (tmp_path, "is a directory"),
                    (bad, "cannot read ")):
        assert says in fails(monkeypatch, capsys, "compare-profiles", a, a)


def test_dry_run_shows_the_profiled_pass(tmp_path, monkeypatch, capsys):
    cli(monkeypatch, "traffic", "--url", "http://h:1", "--config", "none", "--p-wrong", "0.2", "--workloads",
        "varied-closed", "--concurrency", "16,64", "--profile-row", "varied-closed:64", "--dry-run",
        "--out", tmp_path / "o")
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert [line.get("profile_pass") for line in lines] == [None, None, "varied-closed"]
    assert lines[2]["steps"] == traffic.PROFILE_STEPS and lines[2]["est_s"] == lines[1]["est_s"]
    assert "warning" not in capsys.readouterr().err
    cli(monkeypatch, "traffic", "--url", "http://h:1", "--config", "none", "--p-wrong", "0.2", "--workloads",
        "varied-closed", "--concurrency", "64", "--num-prompts", "64", "--profile-row", "varied-closed:64",
        "--dry-run", "--out", tmp_path / "o")
    assert "warning: --profile-delay 6 s is over half of the row's ~" in capsys.readouterr().err



@pytest.mark.parametrize("delay, row_seconds, factor", [(6.0, 6.0, 3), (6.0, 12.0, 2), (6.0, 16.0, 1),
                                                        (6.0, 20.0, 1), (0.0, 2.0, 2), (6.0, None, 3)])
def test_the_profiled_pass_sends_enough_requests_to_outlast_its_window_but_no_more(delay, row_seconds, factor):
    assert traffic.profile_pass_factor(delay, row_seconds) == factor


def test_the_profiled_pass_runs_after_the_last_row_so_no_measured_row_follows_a_profiler(servers, bench, tmp_path,
                                                                                         monkeypatch):
    server = servers("gate")
    server.on_profile = lambda path, body: write_trace(body["output_dir"])
    args = [a if a != "varied-closed:64" else "varied-closed:16" for a in PROFILE_ARGS]
    cli(monkeypatch, "traffic", "--url", server.url, "--config", "off", *args, "--out", tmp_path / "o",
        "--work-dir", tmp_path / "w")
    argvs = bench()
    assert [opt(a, "--max-concurrency") for a in argvs] == ["16", "64", "16"]  # rows 16, 64, then the pass at 16
    assert opt(argvs[2], "--output-file").endswith("-c16-profile.jsonl")


def cpu_profile_call(monkeypatch, server, config, concurrency, row, pids, tmp_path):
    """``traffic --cpu-profile-row ROW`` against ``server`` with the scheduler PIDs ``pids``; its --out."""
    from bench import cpu_profile

    monkeypatch.setattr(cpu_profile, "scheduler_pids", lambda port=None: pids)
    monkeypatch.setattr(cpu_profile, "RECORD_DELAY_S", 0.0)
    out = tmp_path / "o"
    cli(monkeypatch, "traffic", "--url", server.url, "--config", config, "--p-wrong", "0.2", "--workloads",
        "varied-closed", "--concurrency", concurrency, "--num-prompts", "8", "--no-warmup",
        "--cpu-profile-row", row, "--out", out, "--work-dir", tmp_path / "w")
    return out


def test_cpu_profile_row_samples_the_scheduler_during_that_row_and_summarizes_it(servers, bench, tmp_path,
                                                                                 monkeypatch, capsys):
    from bench import cpu_profile

    raw = Path(__file__).parent / "fixtures" / "pyspy" / "toy-scheduler.txt"
    recorded = []

    def record(pid, seconds, out, rate=cpu_profile.RATE_HZ):
        recorded.append((pid, seconds))
        out.write_text(raw.read_text())
        return {"ok": True, "argv": cpu_profile.record_argv(pid, seconds, out, rate), "error": None}

    monkeypatch.setattr(cpu_profile, "record", record)
    out = cpu_profile_call(monkeypatch, servers("gate"), "off", "16,64", "varied-closed:64", [4242], tmp_path)
    assert recorded == [(4242, cpu_profile.RECORD_SECONDS)] and len(bench()) == 2  # no extra pass
    name = "cpu-profile-off-v2-p0.2-varied-closed-c64"
    doc = json.loads((out / f"{name}.json").read_text())
    assert doc["samples"] == 399 and doc["config"] == "off" and doc["output_tokens"] > 0
    run = json.loads((out / "traffic-off-v2-p0.2.json").read_text())["runs"][0]
    assert run["cpu_profile"]["ok"] is True and run["cpu_profile"]["pid"] == 4242
    assert '"cpu_profile": "cpu-profile-off' in capsys.readouterr().out


def test_cpu_profile_row_without_a_scheduler_here_keeps_the_rows_and_says_why(servers, bench, tmp_path, monkeypatch,
                                                                              capsys):
    out = cpu_profile_call(monkeypatch, servers("none"), "none", "16", "varied-closed:16", [], tmp_path)
    _, rows = read_csv(out / traffic.DEFAULT_CSV)
    assert len(rows) == 1
    assert "warning: cpu profile: no sglang::scheduler* process" in capsys.readouterr().err


def test_cpu_profile_row_must_name_a_row_of_the_call(monkeypatch, tmp_path, capsys):
    with pytest.raises(SystemExit):
        cli(monkeypatch, "traffic", "--url", "http://127.0.0.1:1", "--config", "none", "--p-wrong", "0.2",
            "--workloads", "varied-closed", "--concurrency", "16", "--cpu-profile-row", "varied-closed:32",
            "--out", tmp_path)
    assert "--cpu-profile-row varied-closed:32: no such row in this call" in capsys.readouterr().err


def _details(requests):
    """bench_serving's --output-details keys for requests given as (ttft, [itl, ...], output tokens)."""
    return {"ttfts": [r[0] for r in requests], "itls": [r[1] for r in requests],
            "output_lens": [r[2] for r in requests], "errors": [""] * len(requests)}


def test_steady_state_counts_the_tokens_made_while_every_slot_was_busy():
    # two slots, a token every 0.25 s per request: 8 tok/s while both are busy
    rows = [(0.25, [0.25], 2), (0.25, [0.25] * 3, 4), (0.25, [0.25], 2), (0.25, [0.25] * 7, 8)]
    # r0 ends at 0.5 (the window opens), r2 takes its slot at 0.5, r3 r1's at 1.0 (the window closes)
    assert traffic.steady_state(_details(rows), 2) == (8.0, 0.5)


def test_steady_state_does_not_move_with_the_drain_that_moves_output_throughput():
    short = [(0.25, [0.25], 2), (0.25, [0.25] * 3, 4), (0.25, [0.25], 2), (0.25, [0.25] * 7, 8)]
    long_tail = short[:3] + [(0.25, [0.25] * 99, 100)]  # the last request runs on alone
    assert traffic.steady_state(_details(long_tail), 2) == traffic.steady_state(_details(short), 2)


def test_steady_state_spreads_a_chunks_tokens_evenly():
    # r1 streams 4 tokens in 2 chunks (speculation on: 2 accepted a step)
    rows = [(0.25, [0.25], 2), (0.5, [0.5], 4), (0.25, [0.25], 2), (0.25, [0.25], 2)]
    tok_s, window = traffic.steady_state(_details(rows), 2)
    # window 0.5 .. 1.0: r0's 0.5 chunk (1 token), r1's 0.5 chunk (2 tokens), r2's 0.75 chunk (1)
    assert window == 0.5 and tok_s == 8.0


@pytest.mark.parametrize("change", ["no details", "a failed request", "no more requests than slots"])
def test_steady_state_is_none_without_a_window_it_can_trust(change):
    rows = [(0.25, [0.25], 2), (0.25, [0.25] * 3, 4), (0.25, [0.25], 2)]
    result = _details(rows)
    if change == "no details":
        result = {"output_throughput": 1.0}
    elif change == "a failed request":
        result["errors"][1] = "HTTP 500"
    else:
        result = _details(rows[:2])
    assert traffic.steady_state(result, 2) is None


def test_closed_loop_rows_ask_bench_serving_for_per_request_details_and_open_loop_rows_do_not(tmp_path):
    lengths = traffic.parse_workload("varied-closed").lengths
    closed = traffic.bench_serving_argv("h", 1, lengths, 10, 1, tmp_path / "o.jsonl", concurrency=4)
    poisson = traffic.bench_serving_argv("h", 1, lengths, 10, 1, tmp_path / "o.jsonl", rate=2.0, max_concurrency=4)
    assert "--output-details" in closed and "--output-details" not in poisson


def test_rows_append_to_a_csv_written_before_the_steady_state_columns(tmp_path):
    old = tmp_path / "real-traffic.csv"
    old.write_text(",".join(traffic.OLD_TRAFFIC_COLUMNS) + "\n")
    traffic.check_csv(old)  # accepted
    row = {c: "1" for c in traffic.TRAFFIC_COLUMNS}
    traffic.append_row(old, row)
    lines = old.read_text().splitlines()
    assert lines[0] == ",".join(traffic.OLD_TRAFFIC_COLUMNS) and len(lines[1].split(",")) == len(traffic.OLD_TRAFFIC_COLUMNS)


def test_steady_state_finds_the_full_batch_rate_of_a_simulated_closed_loop():
    """A closed loop of C slots on a server whose step takes 5 ms + 0.1 ms a request and gives every
    running request one token: steady_state reads C / step_time from bench_serving's per-request
    TTFT and ITLs, where the whole run's tok/s is pulled down by the drain."""
    import random

    rng = random.Random(0)
    c, n = 16, 120
    lens = [rng.randint(32, 512) for _ in range(n)]
    step = lambda b: 0.005 + 0.0001 * b  # noqa: E731
    t, waiting, running, records = 0.0, list(range(n)), {}, {}
    while waiting or running:
        while waiting and len(running) < c:  # a freed slot is taken at the next step
            i = waiting.pop(0)
            running[i] = []
            records[i] = [t]
        t += step(len(running))
        for i in list(running):
            running[i].append(t)
            if len(running[i]) == lens[i]:
                records[i].append(running.pop(i))
    ttfts = [records[i][1][0] - records[i][0] for i in range(n)]
    itls = [[b - a for a, b in zip(records[i][1], records[i][1][1:])] for i in range(n)]
    tok_s, window = traffic.steady_state({"ttfts": ttfts, "itls": itls, "output_lens": lens, "errors": [""] * n}, c)
    assert tok_s == pytest.approx(c / step(c), rel=0.02)
    whole = sum(lens) / t
    assert whole < 0.95 * tok_s and 0 < window < t


def test_a_call_stopped_before_its_first_row_says_so_and_a_missing_sglang_dependency_names_the_install(
        servers, bench, tmp_path, monkeypatch, capsys):
    server = servers("gate")

    def no_orjson(*args, **kwargs):
        raise ModuleNotFoundError("No module named 'orjson'")

    monkeypatch.setattr(traffic, "measure_server", no_orjson)
    msg = fails(monkeypatch, capsys, "traffic", "--url", server.url, "--config", "off", "--p-wrong", "0.2",
                "--workloads", "varied-closed", "--concurrency", "1", "--num-prompts", "4", "--no-warmup",
                "--out", tmp_path / "o", "--work-dir", tmp_path / "w")
    assert msg.startswith("traffic stopped before its first row: ModuleNotFoundError: No module named 'orjson'")
    assert "pip install 'specconsole[server]'" in msg
    assert not (tmp_path / "o").exists()  # nothing written: no empty --out left behind

    def bench_serving_failed(*args, **kwargs):  # its subprocess fallback failed on the import (a fresh user's run)
        raise RuntimeError("sglang.bench_serving exited with 1 (subprocess):\n\nTraceback ...\n"
                           "ModuleNotFoundError: No module named 'orjson'\n")

    monkeypatch.setattr(traffic, "measure_server", bench_serving_failed)
    msg = fails(monkeypatch, capsys, "traffic", "--url", server.url, "--config", "off", "--p-wrong", "0.2",
                "--workloads", "varied-closed", "--concurrency", "1", "--num-prompts", "4", "--no-warmup",
                "--out", tmp_path / "o", "--work-dir", tmp_path / "w")
    assert "(No module named 'orjson': SGLang's bench_serving needs SGLang 0.5.12" in msg
    assert "pip install 'specconsole[server]'" in msg


def test_ab_traffic_interleave_drives_the_real_traffic_rows_against_stand_in_servers(servers, bench, tmp_path, monkeypatch):
    """bench.ab_traffic --interleave through the real bench.throughput traffic code (stand-in servers
    and bench_serving): one call per row and side, each side warmed up once, every row in its side's
    CSV, the gate server's rows with what its gate did, the summary per row."""
    import types

    from bench import ab_traffic, server_harness

    none, gate = servers("none"), servers("gate")
    urls = {30720: none.url, 30730: gate.url}
    monkeypatch.setattr(server_harness, "start_server",
                        lambda name, args, port, log_dir, env=None, cpus=None: types.SimpleNamespace(url=urls[port], ready_s=1.0))
    monkeypatch.setattr(server_harness, "wait_ready", lambda s, timeout_s: None)
    monkeypatch.setattr(server_harness, "stop_server", lambda s: 0)
    pair = tmp_path / "p0.2"
    (pair / "target").mkdir(parents=True)
    out = tmp_path / "run"
    assert ab_traffic.main(["--models", str(pair), "--a", "none", "--b", "gate", "--repeats", "1", "--interleave",
                            "--workloads", "varied-closed,varied-poisson", "--concurrency", "1,4", "--rates", "2",
                            "--row-seconds", "1", "--out", str(out)]) == 0
    port = {none.url.rsplit(":", 1)[1]: "none", gate.url.rsplit(":", 1)[1]: "gate"}
    measured = [(port[opt(a, "--port")], opt(a, "--max-concurrency"), opt(a, "--request-rate"))
                for a in bench() if opt(a, "--seed") == "1"]
    assert measured == [("none", "1", None), ("gate", "1", None),  # row by row, the order turning
                        ("gate", "4", None), ("none", "4", None),
                        ("none", "128", "2"), ("gate", "128", "2")], measured
    assert len([a for a in bench() if opt(a, "--seed") == "999"]) == 2 * len(traffic.WARMUP)  # once per side
    for side, config in (("a", "none"), ("b", "gate")):
        _, rows = read_csv(out / "repeat0" / side / traffic.DEFAULT_CSV)
        assert [(r["config"], r["concurrency"], r["request_rate"]) for r in rows] == [
            (config, "1", ""), (config, "4", ""), (config, "", "2")]
    meta = json.loads((out / "repeat0" / "b" / "traffic-gate-v2-p0.2.json").read_text())["runs"]
    assert len(meta) == 3 and all(r["spec_gate_delta"]["decode_steps_on"] > 0 for run in meta for r in run["rows"])
    summary = json.loads((out / "ab-summary.json").read_text())["summary"]
    assert len(summary) == 3 and all(len(s["b_over_a"]) == 1 for s in summary)
