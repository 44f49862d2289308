"""The simulated server speaks the contract (server_patch/contract.py, docs/contract.md: HTTP + log
lines) and simulates the gate faithfully."""

from __future__ import annotations

import re
import time
from pathlib import Path

import httpx
import pytest

from console import demo_server as ds
from console import logparse
from console_support import DemoServer
from server_patch import contract

CONTRACT_DOC = Path(__file__).resolve().parents[1] / "docs" / "contract.md"


def _doc_gate_rows() -> list[str]:
    """The rows of docs/contract.md's ``spec_gate`` table (under ``## `GET /server_info```)."""
    text = CONTRACT_DOC.read_text()
    start = text.index("## `GET /server_info`")
    table = text[start:text.index("\n## ", start + 10)]
    return [line for line in table.splitlines() if line.startswith("| `")]


def _doc_gate_keys() -> set[str]:
    """The keys named in the first column of docs/contract.md's ``spec_gate`` table."""
    keys: set[str] = set()
    for line in _doc_gate_rows():
        keys.update(re.findall(r"`([a-z0-9_]+)`", line.split("|")[1]))
    return keys


def test_contract_doc_lists_exactly_the_contract_fields():
    """docs/contract.md is the prose of server_patch/contract.py: the same spec_gate keys, the same
    per-rank subset, the same /set_internal_state answer keys."""
    assert _doc_gate_keys() == set(contract.SPEC_GATE_FIELDS)
    (ranks_row,) = [line for line in _doc_gate_rows() if line.split("|")[1].strip() == "`ranks`"]
    listed = re.search(r"`\{([a-z0-9_, ]+)\}`", ranks_row).group(1)
    assert [k.strip() for k in listed.split(",")] == list(contract.RANK_FIELDS)
    text = CONTRACT_DOC.read_text()
    example = re.search(r'`(\{"updated": true[^`]*\})`', text).group(1)
    assert re.findall(r'"([a-z_]+)":', example) == list(contract.SET_ANSWER_KEYS)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = DemoServer(tmp_path_factory.mktemp("demo"), ["--load", "fixed:8", "--tp-size", "2"]).wait_ready()
    yield srv
    srv.stop()


def test_server_info_has_spec_gate_per_contract(server):
    info = server.get("/server_info")
    assert info["version"] == "0.5.12"
    gate = info["internal_states"][0]["spec_gate"]
    assert set(gate) == set(contract.SPEC_GATE_FIELDS)
    # plausible values: load 8 < threshold 32, so every step so far was ON, on the ON graph
    assert gate["spec_enabled"] is True and gate["decode_steps_on"] > 0
    assert gate["on_target_graph_replays"] == gate["decode_steps_on"]
    assert gate["off_target_graph_replays"] == gate["off_draft_extend_graph_replays"] == gate["off_steps_cuda_graph"] == 0
    assert gate["steps_since_on"] == min(16, gate["decode_steps_on"])  # the first 16 ON batches, no more
    assert 2.0 < gate["accept_length_since_on"] < 4.0 and 2.0 < gate["accept_length_first_on_step"] < 4.0
    assert gate["worker_class"] == "EAGLEWorkerV2" and gate["spec_version"] == "v2" and gate["overlap"] is True
    assert (gate["threshold"], gate["hysteresis"], gate["tp_size"]) == (32, 4, 2)
    assert [r["tp_rank"] for r in gate["ranks"]] == [0, 1]
    assert set(gate["ranks"][0]) == {"tp_rank", "spec_enabled", "threshold", "hysteresis", "switches",
                                     "decode_steps_on", "decode_steps_off", "off_attention_checks",
                                     "off_attention_mismatches", "off_early_seq_lens_checks",
                                     "off_early_seq_lens_mismatches", "off_kv_only_checks",
                                     "off_kv_only_mismatches", "off_lean_v1_checks", "off_lean_v1_mismatches",
                                     "off_lean_v2_verify_checks", "off_lean_v2_verify_mismatches",
                                     "off_verify_metadata_checks", "off_verify_metadata_mismatches",
                                     "off_lean_future_map_checks", "off_lean_future_map_mismatches",
                                     "off_resume_steps", "kv_reserve_checks",
                                     "kv_reserve_mismatches", "target_prefill_checks",
                                         "target_prefill_mismatches", "mode", "decisions_digest",
                                     "host", "node_rank", "gpu"}


def test_loads_shape(server):
    loads = server.get("/v1/loads?include=core,spec")
    assert {"timestamp", "version", "dp_rank_count", "loads", "aggregate"} <= set(loads)
    (entry,) = loads["loads"]
    assert entry["num_running_reqs"] == 8 and entry["num_waiting_reqs"] == 0
    assert entry["max_running_requests"] == 96
    assert entry["gen_throughput"] == 0.0  # as SGLang without --enable-metrics (tests/test_real_answers.py)
    assert set(entry["speculative"]) == {"accept_length", "accept_rate"}
    assert "speculative" not in server.get("/v1/loads?include=core")["loads"][0]


@pytest.mark.parametrize("args,reason", [
    ({"speculative_disable_batch_threshold": 0}, "threshold must be >= 1"),
    ({"speculative_disable_batch_threshold": 97}, "threshold 97 > max running requests 96"),
    ({"speculative_disable_batch_threshold": "16"}, "threshold must be an integer, got '16'"),
    ({"speculative_disable_batch_threshold": True}, "threshold must be an integer, got True"),
    ({"speculative_disable_hysteresis": -1}, "hysteresis must be >= 0"),
    ({"speculative_disable_hysteresis": 32}, "hysteresis 32 must be < threshold 32"),
    ({"speculative_disable_batch_threshold": 4, "speculative_disable_hysteresis": 4}, "hysteresis 4 must be < threshold 4"),
    ({"speculative_disable_batch_threshold": 16, "max_micro_batch_size": 2}, "gate keys cannot be mixed"),
])
def test_set_internal_state_rejections(server, args, reason):
    ans = server.post({"server_args": args})
    assert ans["updated"] is False and reason in ans["reason"]
    assert (ans["threshold"], ans["hysteresis"]) == (32, 4)  # unchanged
    gate = server.get("/server_info")["internal_states"][0]["spec_gate"]
    assert (gate["threshold"], gate["hysteresis"]) == (32, 4)
    assert f"spec_gate: rejected {args!r}: " in server.log.read_text()


def test_set_internal_state_applies_and_logs(server):
    before = server.get("/server_info")["internal_states"][0]["spec_gate"]
    ans = server.post({"server_args": {"speculative_disable_batch_threshold": 16, "speculative_disable_hysteresis": 2}})
    assert set(ans) == set(contract.SET_ANSWER_KEYS)
    assert (ans["updated"], ans["reason"], ans["threshold"], ans["hysteresis"]) == (True, None, 16, 2)
    # the first decode batch the new values decide: after every batch run before the answer
    assert isinstance(ans["decode_step"], int)
    assert ans["decode_step"] >= before["decode_steps_on"] + before["decode_steps_off"]
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        gate = server.get("/server_info")["internal_states"][0]["spec_gate"]
        if gate["threshold"] == 16:
            break
        time.sleep(0.05)
    assert (gate["threshold"], gate["hysteresis"]) == (16, 2)
    assert all(r["threshold"] == 16 for r in gate["ranks"])
    log = server.log.read_text()
    assert "[" in log and " TP0] spec_gate: threshold 32 -> 16" in log and " TP1] spec_gate: threshold 32 -> 16" in log
    assert "spec_gate: hysteresis 4 -> 2" in log
    ans = server.post({"server_args": {"speculative_disable_batch_threshold": 32, "speculative_disable_hysteresis": 4}})
    assert ans["updated"] is True


def test_log_lines_are_sglang_format(server):
    lines = server.log.read_text().splitlines()
    kinds = {logparse.classify(line) for line in lines}
    assert {logparse.VERIFY, logparse.DECODE} <= kinds
    assert any(line.endswith("Spec v2 is enabled by default for eagle/eagle3/standalone speculative decoding.") for line in lines)
    assert any("TP0] spec_gate: worker=EAGLEWorkerV2 spec=v2 overlap=on threshold=32 hysteresis=4" in line for line in lines)
    decode = [logparse.parse_decode(line) for line in lines if logparse.classify(line) == logparse.DECODE]
    assert decode and decode[-1].running_reqs == 8 and decode[-1].queue_reqs == 0
    ts, tp, msg = logparse.split_prefix(next(line for line in lines if "Decode batch" in line))
    assert ts is not None and tp == 0 and msg.startswith("Decode batch, #running-req: 8")


def test_gate_not_enabled_has_no_spec_gate(tmp_path):
    srv = DemoServer(tmp_path, ["--load", "fixed:2"], gate=False).wait_ready()
    try:
        assert "spec_gate" not in srv.get("/server_info")["internal_states"][0]
        ans = srv.post({"server_args": {"speculative_disable_batch_threshold": 8}})
        assert ans["updated"] is False and "not enabled" in ans["reason"]
    finally:
        srv.stop()


def test_api_key_is_enforced(tmp_path):
    srv = DemoServer(tmp_path, ["--api-key", "sekret"]).wait_ready()
    try:
        assert httpx.get(srv.url + "/server_info", timeout=2).status_code == 401
        ok = httpx.get(srv.url + "/server_info", headers={"Authorization": "Bearer sekret"}, timeout=2)
        assert ok.status_code == 200
    finally:
        srv.stop()


def test_the_demo_drives_server_patchs_own_gate():
    """No re-implementation of the gate: the simulation's gate is server_patch's SpecGate, and
    the demo's spec_gate answer is built from the contract's field list."""
    from server_patch import contract
    from server_patch.gate import SpecGate

    sim, _ = _sim()
    assert type(sim.gate) is SpecGate
    assert set(sim.spec_gate()) == set(contract.SPEC_GATE_FIELDS)
    sim.tick(time.monotonic())
    assert sim.gate.decode_steps == sim.step >= 1  # one gate decision per simulated decode batch


def test_load_pattern_rises_and_falls():
    levels = ds.parse_levels("1,64,4,128")
    values = [ds.load_at(levels, 10.0, t) for t in range(0, 40)]
    assert values[0] == 1 and max(values) == 128 and min(values) == 1
    assert values[9] == 1 and values[19] == 64 and values[29] == 4 and values[39] == 128  # holds
    assert 1 < values[12] < 64  # ramps
    assert ds.parse_levels("fixed:8") == [8.0] and ds.load_at([8.0], 10, 123) == 8
    with pytest.raises(ValueError):
        ds.parse_levels("")


def _sim(*argv: str):
    import io

    args = ds.build_parser().parse_args(["--speculative-disable-batch-threshold", "32",
                                         "--speculative-disable-hysteresis", "4", "--load", "fixed:8", *argv])
    out = io.StringIO()
    return ds.Simulation(args, ds.LogWriter(out)), out


def test_each_accepted_change_is_logged_in_order():
    sim, out = _sim()
    for t in (16, 20, 24):  # three POSTs before the next simulated decode batch
        ans = sim.set_internal_state({"server_args": {"speculative_disable_batch_threshold": t}})
        assert ans["updated"] and ans["decode_step"] == sim.step  # all decide from the next batch on
    assert sim.set_internal_state({"server_args": {"speculative_disable_hysteresis": 2}})["updated"]
    sim.tick(time.monotonic())
    gate_lines = [line.split("] ", 1)[1] for line in out.getvalue().splitlines() if "spec_gate: " in line]
    assert gate_lines == ["spec_gate: threshold 32 -> 16", "spec_gate: threshold 16 -> 20",
                          "spec_gate: threshold 20 -> 24", "spec_gate: hysteresis 4 -> 2"]
    assert (sim.gate.threshold, sim.gate.hysteresis) == (24, 2)


def test_an_off_stretch_runs_kv_only_and_one_resume_step_on_the_way_back():
    """As server_patch: OFF steps replay the KV-only draft-extend graph (the full one only for the
    sampled proof), and the first batch after the switch back is one full OFF step."""
    sim, _ = _sim()
    now = time.monotonic()
    sim.set_internal_state({"server_args": {"speculative_disable_batch_threshold": 1, "speculative_disable_hysteresis": 0}})
    for i in range(3):
        sim.tick(now + i)
    off = sim.spec_gate()
    assert off["spec_enabled"] is False and off["decode_steps_off"] > 0
    assert off["off_kv_only_graph_replays"] == off["off_steps_cuda_graph"] == off["decode_steps_off"]
    assert off["off_draft_extend_graph_replays"] == off["off_kv_only_checks"] > 0
    assert off["off_resume_steps"] == 0
    sim.set_internal_state({"server_args": {"speculative_disable_batch_threshold": 32}})
    for i in range(3, 6):
        sim.tick(now + i)
    on = sim.spec_gate()
    assert on["spec_enabled"] is True and on["off_resume_steps"] == 1
    assert on["off_target_graph_replays"] == on["off_steps_cuda_graph"] + 1
    assert on["off_draft_extend_graph_replays"] == on["off_kv_only_checks"] + 1
    steps_on_after = on["decode_steps_on"] - off["decode_steps_on"]
    assert on["on_target_graph_replays"] - off["on_target_graph_replays"] == steps_on_after - 1


@pytest.mark.parametrize("body,reason", [
    (b"{not json", "body is not JSON"),
    (b"", "empty body"),
    (b"   ", "empty body"),
    (b"[1, 2]", "must be a JSON object"),
    (b'{"server_args": {}}', "at least one key"),
    (b'{"server_args": {"speculative_disable_batch_threshold": 16}, "extra": 1}', "unknown top-level keys ['extra']"),
])
def test_malformed_bodies_get_one_rejection_shape(server, body, reason):
    r = httpx.post(server.url + "/set_internal_state", content=body, timeout=2)
    assert r.status_code == 400, r.text
    ans = r.json()
    assert set(ans) == {"updated", "reason", "threshold", "hysteresis"}
    assert ans["updated"] is False and reason in ans["reason"]
    assert (ans["threshold"], ans["hysteresis"]) == (32, 4)


def test_huge_integer_is_out_of_range_not_bad_json(server):
    body = b'{"server_args": {"speculative_disable_batch_threshold": ' + b"9" * 5000 + b"}}"
    r = httpx.post(server.url + "/set_internal_state", content=body, timeout=2)
    assert r.status_code == 200
    ans = r.json()
    assert ans["updated"] is False and ans["reason"] == "threshold <5000-digit integer> is out of range"
    assert (ans["threshold"], ans["hysteresis"]) == (32, 4)


@pytest.mark.parametrize("argv, why", [
    (["--speculative-disable-batch-threshold", "0"], "threshold must be >= 1"),  # server_patch refuses it too
    (["--speculative-disable-batch-threshold", "32", "--speculative-disable-hysteresis", "40"], "must be < threshold 32"),
    (["--max-running-requests", "0"], "--max-running-requests must be >= 1"),
    (["--phase-seconds", "-1"], "--phase-seconds must be from"),
    (["--tick", "0"], "--tick must be from"),  # spun at 50% CPU and did not stop on SIGTERM
    (["--tick", "nan"], "--tick must be from"),
    (["--load", "abc"], "--load must be comma-separated"),  # was a ValueError traceback
    (["--load", "1e9"], "--load must be comma-separated"),
    (["--port", "70000"], "--port must be from 1 to 65535"),  # was an OverflowError traceback
    (["--crash-after", "-1"], "--crash-after must be >= 0"),
    (["--exit-code", "300"], "--exit-code must be from 1 to 255"),
    (["--log", "/"], "--log /: cannot append to it"),  # was an IsADirectoryError traceback
])
def test_demo_server_refuses_what_the_real_server_or_a_sane_simulation_would(argv, why, capsys):
    import console.demo_server as ds

    with pytest.raises(SystemExit) as exc:
        ds.main(argv)
    assert exc.value.code == 2 and why in capsys.readouterr().err


def _handled(stop, timeout: float = 5.0) -> bool:
    return stop.wait(timeout)


def test_sigterm_stops_the_server_even_while_the_log_lock_is_held():
    """The signal handler takes no lock: it used to log (the log writer's lock) and set the stop
    event (its condition's lock) itself, and a SIGTERM that arrived while the main thread held
    either (writing a Decode line, waking from ``stop.wait``) hung the server for good."""
    import io
    import signal
    import threading

    log = ds.LogWriter(io.StringIO())
    stop = threading.Event()
    old = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        handler = ds.install_stop_signals(log, stop)
        with log.lock:  # as if the signal came in the middle of a log line
            handler(signal.SIGTERM, None)  # returns at once (it would block forever on the lock)
            assert not stop.is_set()  # the thread waits for the lock, like the main thread's line
        assert _handled(stop)
        assert "Received signal SIGTERM; shutting down" in log.stream.getvalue()
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def test_stubborn_demo_ignores_sigterm_but_not_sigint():
    import io
    import signal
    import threading

    log = ds.LogWriter(io.StringIO())
    stop = threading.Event()
    old = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        handler = ds.install_stop_signals(log, stop, stubborn=True)
        handler(signal.SIGTERM, None)
        assert not _handled(stop, 0.3)
        assert "ignoring it (demo --stubborn)" in log.stream.getvalue()
        handler(signal.SIGINT, None)
        assert _handled(stop)
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def test_a_typo_of_a_demo_flag_is_named_with_the_flag_it_resembles():
    from console import demo_server

    parser = demo_server.build_parser()
    assert demo_server.did_you_mean(parser, ["--laod", "8,48"]) == " (did you mean --laod -> --load?)"
    assert demo_server.did_you_mean(parser, ["--mem-fraction-static", "0.8"]) == ""  # a real SGLang flag
