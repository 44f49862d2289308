"""Unit tests of the console's UI-free layer: parsing, model, client, log follower, process group, CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import types
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from console import cli, fmt, logparse, modes, throughput
from console import state as st
from console.client import Backoff, ServerClient, ServerUnreachable, parse_server_info, parse_set_result
from console.config import AppConfig, ConfigError, api_key_from_server_args, find_config, load_config, url_from_server_args
from console.logfollow import LogFollower
from console.model import CONFIRM_TIMEOUT_S, ConsoleModel, validate_threshold
from console.process import ServerProcess, group_members
from console.screens.threshold_dialog import ThresholdRequest, parse_request
from console.widgets.batch_chart import chart_rows, nice_max
from console.widgets.spec_panel import badge_state, big_text

GATE = {
    "worker_class": "EAGLEWorkerV2", "spec_version": "v2", "overlap": True, "sglang_version": "0.5.12",
    "speculative_algorithm": "EAGLE3", "topk": 1, "num_steps": 3, "num_draft_tokens": 4, "spec_enabled": True,
    "threshold": 32, "hysteresis": 4, "max_running_requests": 48, "cuda_graph_max_bs": 48,
    "last_decode_batch_size": 12, "decode_steps_on": 100, "decode_steps_off": 5, "switches": 2,
    "last_switch": {"step": 90, "direction": "on", "batch_size": 20}, "accept_length_recent": 2.94,
    "off_cuda_graph": True, "off_steps_cuda_graph": 5, "tp_rank": 0, "tp_size": 1,
    "ranks": [{"tp_rank": 0, "spec_enabled": True, "threshold": 32, "hysteresis": 4, "switches": 2,
               "decode_steps_on": 100, "decode_steps_off": 5}],
}
INFO = {"version": "0.5.12", "internal_states": [{"spec_gate": GATE}]}
LOADS = {"timestamp": 0, "version": "0.5.12", "dp_rank_count": 2, "loads": [
    {"dp_rank": 0, "num_running_reqs": 5, "num_waiting_reqs": 1, "gen_throughput": 100.0, "max_running_requests": 48,
     "token_usage": 0.2, "speculative": {"accept_length": 3.0, "accept_rate": 0.66}},
    {"dp_rank": 1, "num_running_reqs": 7, "num_waiting_reqs": 0, "gen_throughput": 50.5, "max_running_requests": 48,
     "token_usage": 0.4, "speculative": {"accept_length": 2.0, "accept_rate": 0.33}},
], "aggregate": {}}


# -- throughput model ------------------------------------------------------------------------

def test_throughput_model_matches_the_h200_table():
    for bs, none, eagle, _ in throughput.H200_TABLE:
        assert throughput.gen_throughput(bs, False) == none
        assert throughput.gen_throughput(bs, True) == eagle
    xs = [1, 2, 3, 4, 8, 16, 32, 64, 100, 128, 160]
    for on in (True, False):
        ys = [throughput.gen_throughput(x, on) for x in xs]
        assert ys == sorted(ys)
    assert 4 < throughput.crossover_batch_size() < 16
    assert throughput.gen_throughput(0, True) == 0.0


# -- state / client parsing -------------------------------------------------------------------

def test_parse_server_info_and_loads():
    sample = parse_server_info(INFO, LOADS)
    g = sample.gate
    assert g.worker_class == "EAGLEWorkerV2" and g.threshold == 32 and g.last_switch.direction == "on"
    assert g.ranks[0].decode_steps_off == 5 and not g.ranks_disagree
    load = sample.load
    assert (load.running_reqs, load.waiting_reqs, load.dp_ranks) == (12, 1, 2)
    assert load.gen_throughput == pytest.approx(150.5) and load.token_usage == pytest.approx(0.3)
    assert load.accept_length == pytest.approx(2.5)
    assert sample.version == "0.5.12"


def test_parsing_is_robust_to_garbage():
    g = st.GateState.from_json({"threshold": "32", "spec_enabled": 1, "switches": True, "ranks": [1, None], "last_switch": 5})
    assert g.threshold is None and g.spec_enabled is None and g.switches is None and g.ranks == () and g.last_switch is None
    assert parse_server_info({"internal_states": [{}]}, None).gate is None  # gate not enabled
    assert parse_server_info({}, {"loads": "x"}).load == st.LoadState(dp_ranks=0)
    with pytest.raises(ValueError):
        parse_set_result({"updated": "yes"})
    r = parse_set_result({"updated": False, "reason": "no", "threshold": 32, "hysteresis": True})
    assert r == st.SetResult(False, "no", 32, None)


def test_snapshot_running_batch_falls_back_to_spec_gate():
    from console.load_figures import LoadTracker

    g = st.GateState.from_json(GATE)
    running = LoadTracker().update(st.ServerSample("0.5.12", g, None), at=0.0).running
    assert (running.value, running.source) == (12, st.SRC_SPEC_GATE)
    running = LoadTracker().update(st.ServerSample("0.5.12", g, st.LoadState(running_reqs=3)), at=0.0).running
    assert (running.value, running.source) == (3, st.SRC_LOADS)
    assert st.ConsoleSnapshot().running_batch is None


def test_the_decode_token_counter_rate_is_taken_over_the_last_5_seconds():
    # prefill bursts: 1 s polls alternate 14,000 and 3,500 tok/s; clients get the 8,750 mean
    from console.load_figures import RATE_WINDOW_S, WINDOW_RATE, LoadTracker

    tracker, total, shown = LoadTracker(), 0.0, []
    for t in range(12):
        total += 14_000 if t % 2 else 3_500
        sample = st.ServerSample("0.5.12", None, None, metrics=st.MetricsState(decode_tokens_total=total))
        shown.append(tracker.update(sample, at=float(t)).throughput)
    assert shown[0].value is None and shown[1] == st.Figure(14_000, st.SRC_METRICS, None)  # one interval
    late = [f.value for f in shown[int(RATE_WINDOW_S) + 1:]]
    assert all(8_750 * 0.85 <= v <= 8_750 * 1.15 for v in late), late
    assert shown[-1].window == WINDOW_RATE == "5 s avg"
    restarted = st.ServerSample("0.5.12", None, None, metrics=st.MetricsState(decode_tokens_total=100.0))
    assert tracker.update(restarted, at=12.0).throughput.value != pytest.approx(late[-1])  # not a rate across it


def test_backoff():
    b = Backoff(interval_s=1.0, max_s=10.0)
    assert [b.delay(n) for n in range(7)] == [1.0, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]


async def test_client_against_a_mock_transport():
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path == "/server_info":
            return httpx.Response(200, json=INFO)
        if request.url.path == "/v1/loads":
            return httpx.Response(404)
        if request.url.path == "/set_internal_state":
            body = json.loads(request.content)
            return httpx.Response(200, json={"updated": True, "reason": None, "threshold": 16, "hysteresis": 4,
                                             "echo": body})
        return httpx.Response(404)

    client = ServerClient("http://x:1/", api_key="k", transport=httpx.MockTransport(handler))
    sample = await client.poll()
    assert sample.gate.threshold == 32 and sample.load is None  # no /v1/loads: still a sample
    await client.poll()
    assert [r.url.path for r in seen].count("/v1/loads") == 1  # not asked again after a 404
    res = await client.set_gate(threshold=16)
    assert res.updated and res.threshold == 16
    assert json.loads(seen[-1].content) == {"server_args": {"speculative_disable_batch_threshold": 16}}
    assert seen[-1].headers["authorization"] == "Bearer k"
    await client.aclose()


async def test_client_unreachable_reasons():
    def handler(request):
        raise httpx.ConnectError("refused")

    client = ServerClient("http://x:1", transport=httpx.MockTransport(handler))
    with pytest.raises(ServerUnreachable, match="connection refused"):
        await client.poll()
    with pytest.raises(ServerUnreachable):
        await client.set_gate(threshold=3)
    await client.aclose()
    client = ServerClient("http://x:1", transport=httpx.MockTransport(lambda r: httpx.Response(500, text="boom")))
    with pytest.raises(ServerUnreachable, match="HTTP 500"):
        await client.poll()
    with pytest.raises(ServerUnreachable, match="HTTP 500"):
        await client.set_gate(threshold=3)
    await client.aclose()
    # JSON, but not SGLang's /server_info: an answer from something else, not "no gate"
    for body, says in (({}, "has no internal_states"), ([1, 2], "is not a JSON object"),
                       ({"internal_states": [{"spec_gate": []}]}, "spec_gate is a JSON list"),
                       ({"internal_states": {"spec_gate": {}}}, "internal_states is a JSON dict, not"),
                       ({"internal_states": ["x"]}, "internal_states is a JSON list of str, not")):
        client = ServerClient("http://x:1", transport=httpx.MockTransport(lambda r, b=body: httpx.Response(200, json=b)))
        with pytest.raises(ServerUnreachable, match=says) as exc:
            await client.poll()
        assert st.answered_not_sglang(str(exc.value))
        await client.aclose()
    # a body cut off mid-answer is told apart from one that is not JSON at all (a new user's report)
    for text, says in (('{"internal_states": [{"spec_ga', st.BROKEN_JSON_REASON), ("hello", st.NOT_JSON_REASON)):
        client = ServerClient("http://x:1", transport=httpx.MockTransport(lambda r, t=text: httpx.Response(200, text=t)))
        with pytest.raises(ServerUnreachable) as exc:
            await client.poll()
        assert str(exc.value) == says
        await client.aclose()
    assert not st.answered_not_sglang(st.BROKEN_JSON_REASON)


# -- log parsing -----------------------------------------------------------------------------

@pytest.mark.parametrize("line,kind", [
    ("[2026-11-30 12:00:00] Spec v2 is enabled by default for eagle/eagle3/standalone speculative decoding.", logparse.VERIFY),
    ("[2026-11-30 12:00:00] Spec v1 is used for eagle/eagle3/standalone speculative decoding because overlap schedule is disabled.", logparse.VERIFY),
    ("[2026-11-30 12:00:00 TP0] spec_gate: worker=EAGLEWorkerV2 spec=v2 overlap=on threshold=32 hysteresis=4", logparse.VERIFY),
    ("[2026-11-30 12:00:00 TP0] spec_gate: speculation off (batch 37 >= 32)", logparse.SWITCH),
    ("[2026-11-30 12:00:00 TP1] spec_gate: speculation on (batch 20 < 28)", logparse.SWITCH),
    ("[2026-11-30 12:00:00 TP0] spec_gate: threshold 32 -> 16", logparse.GATE),
    ("[2026-11-30 12:00:00 TP0] spec_gate: hysteresis 4 -> 2", logparse.GATE),
    ("[2026-11-30 12:00:00 TP0] spec_gate: rejected {'speculative_disable_batch_threshold': 0}: threshold must be >= 1", logparse.REJECTED),
    ("[2026-11-30 12:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):", logparse.ERROR),
    ("torch.OutOfMemoryError: CUDA out of memory.", logparse.ERROR),
    ("[2026-11-30 12:00:00] WARNING: something odd", logparse.WARNING),
    ("[2026-11-30 12:00:00 TP0] Decode batch, #running-req: 3, #token: 9, token usage: 0.00, accept len: 2.95, "
     "accept rate: 0.65, cuda graph: True, gen throughput (token/s): 371.00, #queue-req: 0", logparse.DECODE),
    ("[2026-11-30 12:00:00 TP0] Load weight begin. avail mem=139.21 GB", logparse.PLAIN),
    ("[console 12:00:00] threshold 32 -> 33 confirmed by spec_gate", logparse.CONSOLE),
])
def test_classify(line, kind):
    assert logparse.classify(line) == kind


def test_split_prefix_and_decode():
    assert logparse.split_prefix("[2026-11-30 12:00:00 DP1 TP3] hello") == ("2026-11-30 12:00:00", 3, "hello")
    assert logparse.split_prefix("no prefix") == (None, None, "no prefix")
    d = logparse.parse_decode("Decode batch, #running-req: 37, #token: 9, token usage: 0.10, accept len: 1.00, "
                              "accept rate: 0.00, cuda graph: False, gen throughput (token/s): 5980.00, #queue-req: 4")
    assert (d.running_reqs, d.accept_length, d.gen_throughput, d.queue_reqs) == (37, 1.0, 5980.0, 4)


def test_log_facts_and_startup_phases():
    facts = logparse.LogFacts()
    for line in [
        "[t] Spec v1 is used for eagle/eagle3/standalone speculative decoding because overlap schedule is disabled.",
        "[2026-11-30 12:00:00 TP0] Load weight begin. avail mem=1 GB",
        "[2026-11-30 12:00:00 TP0] Capture cuda graph begin. This can take up to several minutes.",
        "[2026-11-30 12:00:00 TP0] spec_gate: worker=EAGLEWorker spec=v1 overlap=off threshold=8 hysteresis=0",
        "[2026-11-30 12:00:00 TP0] Load weight end.",  # phases never go backwards
    ]:
        facts.feed(line)
    assert facts.family == "v1" and facts.family_reason == "overlap schedule is disabled"
    assert (facts.gate_worker, facts.gate_spec, facts.gate_overlap) == ("EAGLEWorker", "v1", "off")
    assert facts.phase == st.PHASE_GRAPHS
    facts.feed("[2026-11-30 12:00:00] The server is fired up and ready to roll!")
    assert facts.phase == st.PHASE_READY
    facts.feed(logparse.START_MARKER + " python -m x")  # a restart forgets the old run
    assert facts.family is None and facts.gate_worker is None and facts.phase == st.PHASE_STARTING


def test_check_worker():
    g2 = st.GateState.from_json(GATE)
    g1 = st.GateState.from_json({**GATE, "worker_class": "EAGLEWorker", "spec_version": "v1", "overlap": False})
    v2 = logparse.LogFacts(family="v2", gate_worker="EAGLEWorkerV2")
    assert logparse.check_worker(g2, v2, True).status == st.CHECK_VERIFIED
    mism = logparse.check_worker(g1, logparse.LogFacts(family="v2"), True)
    assert mism.status == st.CHECK_MISMATCH and "log says Spec v2" in mism.detail
    assert logparse.check_worker(g2, logparse.LogFacts(gate_worker="EAGLEWorker"), True).status == st.CHECK_MISMATCH
    inconsistent = st.GateState.from_json({**GATE, "spec_version": "v1"})
    assert logparse.check_worker(inconsistent, None, False).status == st.CHECK_MISMATCH
    assert "attach --log" in logparse.check_worker(g2, None, False).detail
    assert logparse.check_worker(g2, logparse.LogFacts(), True).status == st.CHECK_UNVERIFIED
    assert logparse.check_worker(None, v2, True).status == st.CHECK_UNKNOWN


# -- model -----------------------------------------------------------------------------------

def lines(outcome) -> list[str]:
    """The log-pane lines of a threshold-protocol Outcome."""
    return list(outcome.log_lines)


def said(outcome) -> tuple[bool, str]:
    """``(accepted for sending, its one log line)`` of a request's Outcome."""
    return outcome.ok, outcome.log_lines[0]


def _sample(threshold=32, hysteresis=4, max_running=48, spec_enabled=True):
    gate = {**GATE, "threshold": threshold, "hysteresis": hysteresis, "max_running_requests": max_running,
            "spec_enabled": spec_enabled}
    return parse_server_info({"version": "0.5.12", "internal_states": [{"spec_gate": gate}]}, LOADS)


def test_validate_threshold():
    assert validate_threshold(1, 48) is None and validate_threshold(48, 48) is None
    assert "must be >= 1" in validate_threshold(0, 48)
    assert "above max running requests 48" in validate_threshold(49, 48)
    assert validate_threshold(1000, None) is None


def test_change_is_shown_only_once_confirmed():
    now = [0.0]
    m = ConsoleModel(clock=lambda: now[0])
    m.on_sample(_sample())
    assert m.check_request(33) is None
    ok, line = said(m.request_change(33, None))
    assert ok and line == "request threshold 32 -> 33"
    assert m.pending.threshold == 33 and not m.pending.accepted and m.base_threshold() == 33  # pending at once
    sent = m.next_to_send()
    assert sent == {"threshold": 33} and m.next_to_send() is None  # one request in flight at a time
    now[0] += 1
    assert lines(m.on_set_result(sent, st.SetResult(True, None, 33, 4))) == []  # accepted: not logged again
    assert m.pending.accepted
    snap = m.snapshot()
    assert snap.gate.threshold == 32 and snap.pending.threshold == 33  # not shown as the value yet
    assert lines(m.on_sample(_sample(threshold=33), polled_at=0.5)) == []  # a poll that began before the answer
    now[0] += 1
    assert lines(m.on_sample(_sample(threshold=32))) == []
    assert lines(m.on_sample(_sample(threshold=33))) == ["threshold 32 -> 33 confirmed by spec_gate"]
    assert m.pending is None and m.message_level == "ok"
    # not confirmed in time
    m.request_change(34, None)
    m.on_set_result(m.next_to_send(), st.SetResult(True, None, 34, 4))
    now[0] += CONFIRM_TIMEOUT_S + 1
    msgs = lines(m.on_sample(_sample(threshold=33)))
    assert m.pending is None and "still shows threshold 33" in msgs[0] and m.message_level == "error"


def test_a_value_already_the_target_is_not_sent_with_the_other():
    """T sends threshold and hysteresis to every server: one already at the hysteresis asked gets
    the threshold alone (a fresh user saw "hysteresis 4 -> 4" and "hysteresis back to 4 confirmed")."""
    now = [0.0]
    m = ConsoleModel(clock=lambda: now[0])
    m.on_sample(_sample(threshold=31, hysteresis=4))
    ok, line = said(m.request_change(30, 4))
    assert ok and line == "request threshold 31 -> 30"
    sent = m.next_to_send()
    assert sent == {"threshold": 30}
    m.on_set_result(sent, st.SetResult(True, None, 30, 4))
    now[0] += 0.1
    assert lines(m.on_sample(_sample(threshold=30, hysteresis=4))) == ["threshold 31 -> 30 confirmed by spec_gate"]
    ok, line = said(m.request_change(30, 2))
    assert ok and line == "request hysteresis 4 -> 2" and m.next_to_send() == {"hysteresis": 2}


def test_presses_that_cancel_out_are_confirmed_as_back_to_the_value():
    now = [0.0]
    m = ConsoleModel(clock=lambda: now[0])
    m.on_sample(_sample(threshold=33))
    m.step_threshold(+1)
    m.step_threshold(-1)  # while 34 is in flight
    while (change := m.next_to_send()) is not None:
        m.on_set_result(change, st.SetResult(True, None, change["threshold"], 4))
    now[0] += 0.1
    assert lines(m.on_sample(_sample(threshold=33))) == ["threshold back to 33 confirmed by spec_gate"]


def test_each_press_steps_the_target_and_is_sent_in_order():
    now = [0.0]
    m = ConsoleModel(clock=lambda: now[0])
    m.on_sample(_sample())
    assert said(m.step_threshold(+1)) == (True, "request threshold 32 -> 33")
    first = m.next_to_send()
    assert first == {"threshold": 33}  # the first press goes out at once
    steps = [said(m.step_threshold(+1))[1] for _ in range(7)]  # more presses while it is in flight
    assert steps[:2] == ["request threshold 33 -> 34", "request threshold 34 -> 35"]
    assert steps[-1] == "request threshold 39 -> 40"
    assert m.pending.threshold == 40 and m.next_to_send() is None
    now[0] += 0.1
    assert lines(m.on_set_result(first, st.SetResult(True, None, 33, 4))) == []
    assert not m.pending.accepted  # 33 accepted, but the target is 40
    sent = []
    while (change := m.next_to_send()) is not None:  # every press is sent, in order, one at a time
        sent.append(change["threshold"])
        assert m.next_to_send() is None
        m.on_set_result(change, st.SetResult(True, None, change["threshold"], 4))
    assert sent == [34, 35, 36, 37, 38, 39, 40] and m.pending.accepted
    now[0] += 0.1
    assert lines(m.on_sample(_sample(threshold=40))) == ["threshold 32 -> 40 confirmed by spec_gate"]
    # a rejected step with nothing newer queued: the target falls back to the server's values
    m.step_threshold(-1)
    sent = m.next_to_send()
    assert lines(m.on_set_result(sent, st.SetResult(False, "busy", 40, 4))) == ["set threshold 39 rejected by server: busy"]
    assert m.pending is None and m.base_threshold() == 40
    # no answer: pending and the queued presses dropped, the next poll shows the truth
    m.step_threshold(-1)
    m.step_threshold(-1)
    sent = m.next_to_send()
    (text,) = lines(m.on_set_failure(sent, "timed out"))
    assert "no answer from server (timed out)" in text and "1 queued change(s) not sent (threshold 38)" in text
    assert m.pending is None and not m.sending and m.next_to_send() is None


def test_rejection_and_refusals():
    m = ConsoleModel()
    assert "no answer from the server yet" in m.check_request(5)
    m.on_sample(parse_server_info({"internal_states": [{}]}, None))
    assert "without the speculation gate" in m.check_request(5)
    m.on_sample(_sample())
    assert "must be" in m.check_request(None, 40)  # H >= this server's N 32: refused before sending
    ok, _ = said(m.request_change(None, 20))  # the server may still reject what the console let pass
    assert ok
    text = lines(m.on_set_result(m.next_to_send(), st.SetResult(False, "hysteresis 20 is not allowed here", 32, 4)))
    assert text == ["set hysteresis 20 rejected by server: hysteresis 20 is not allowed here"]
    assert m.pending is None and m.message_level == "error"
    m.on_sample(_sample())  # the server still has N 32 / H 4: the reason still applies
    assert m.snapshot().message == "rejected: hysteresis 20 is not allowed here"
    assert "above max running requests 48" in m.check_request(49)
    assert "must be > hysteresis 4" in m.check_request(4)  # a step may not reach the hysteresis
    assert m.check_request(4, 2) is None  # with a new hysteresis the server judges the pair
    m.on_failure("connection refused")
    assert said(m.step_threshold(1)) == (False, "server unreachable (connection refused): threshold not changed")
    m.on_failure("HTTP 401 unauthorized: pass --api-key")
    assert "pass --api-key" in m.check_request()
    ro = ConsoleModel(readonly=True)
    ro.on_sample(_sample())
    assert "read-only" in ro.check_request(33)


def test_escape_sequences_in_a_servers_strings_never_reach_the_terminal_raw():
    """Fresh-user finding: a server whose spec_gate.worker_class held ESC[31m...BEL had the raw escape
    reach the terminal through the Speculation panel (the log pane showed it as ^[)."""
    evil = "\x1b[31mEvil\x07"
    gate = {**GATE, "worker_class": evil, "gpu": {"name": evil, "error": evil}, "auto_reason": evil}
    info = {"version": evil, "simulated": {"note": evil}, "internal_states": [{"spec_gate": gate}]}
    sample = parse_server_info(info, LOADS)
    shown = [sample.version, sample.simulated_note, sample.gate.worker_class, sample.gate.auto_reason,
             sample.gate.gpu.name, sample.gate.gpu.error,
             parse_set_result({"updated": False, "reason": evil}).reason]
    assert shown == ["^[[31mEvil^G"] * 7
    assert fmt.printable("a\tb\x7f") == "a\tb^?"  # tab kept, DEL in caret notation too


def test_a_rejection_reason_goes_once_the_server_has_other_values():
    """Fresh-user finding: 'rejected: hysteresis 10 must be < threshold 5' stayed on screen after
    another client set N 40 / H 8."""
    m = ConsoleModel()
    m.on_sample(_sample(threshold=5, hysteresis=4))
    m.request_change(None, 3)
    m.on_set_result(m.next_to_send(), st.SetResult(False, "hysteresis 3 is not allowed here", 5, 4))
    m.on_sample(_sample(threshold=5, hysteresis=4))
    assert m.snapshot().message == "rejected: hysteresis 3 is not allowed here"
    m.on_sample(_sample(threshold=40, hysteresis=8))  # another client's change, said as such
    assert m.snapshot().message == "threshold changed to 40 and hysteresis changed to 8 outside this console"


def test_values_a_restarted_server_comes_back_with_are_said_to_be_the_restarts_not_another_clients():
    """Fresh-user finding: after r restarted a crashed demo server at its launch arguments' 32 / 4,
    the log said 'threshold changed to 32 ... outside this console'."""
    m = ConsoleModel()
    m.on_sample(_sample(threshold=23, hysteresis=4))
    m.reset_changes()  # the console restarted the server
    m.on_sample(_sample(threshold=32, hysteresis=4))
    assert m.snapshot().message.startswith("threshold changed to 32 with the restart")
    m.on_sample(_sample(threshold=40, hysteresis=4))  # later changes are someone else's again
    assert m.snapshot().message == "threshold changed to 40 outside this console"
    m.reset_changes()
    m.on_sample(_sample(threshold=40, hysteresis=4))  # came back with the same values: nothing to say
    m.on_sample(_sample(threshold=44, hysteresis=4))
    assert m.snapshot().message == "threshold changed to 44 outside this console"


def test_a_restart_back_to_a_value_this_console_had_sent_earlier_is_said_too():
    """Fresh-user finding: - then + (sending 32), then t -> 20, then a crash and r: N went back to the
    launch value 32 without a line, because 32 counted as this console's own recent change."""
    m = ConsoleModel()
    m.on_sample(_sample(threshold=32, hysteresis=4))
    for value in (31, 32, 20):
        m.request_change(value, None)
        m.on_set_result(m.next_to_send(), st.SetResult(True, None, value, 4, 10))
        m.on_sample(_sample(threshold=value, hysteresis=4))
    m.reset_changes()  # the console restarted the crashed server
    m.on_sample(_sample(threshold=32, hysteresis=4))
    assert m.snapshot().message.startswith("threshold changed to 32 with the restart")


def test_another_clients_change_back_to_a_value_this_console_set_earlier_is_said():
    """Fresh-user finding: this console set 40 (confirmed), then 41 (confirmed); curl set 40 again and
    the console said nothing, its line still reading 'threshold 40 -> 41 confirmed by spec_gate'."""
    m = ConsoleModel()
    m.on_sample(_sample(threshold=32, hysteresis=3))
    for value in (40, 41):
        m.request_change(value, None)
        m.on_set_result(m.next_to_send(), st.SetResult(True, None, value, 3, 10))
        m.on_sample(_sample(threshold=value, hysteresis=3))
        assert m.snapshot().message.endswith("confirmed by spec_gate")
    m.on_sample(_sample(threshold=40, hysteresis=3))
    assert m.snapshot().message == "threshold changed to 40 outside this console"


def test_an_attached_server_restarted_elsewhere_is_told_by_its_decode_step_count_going_back():
    """A fresh user's find: an attached server killed and started again by hand came back at its
    launch N 32, which the console had sent minutes before among many + / - presses: no line."""
    m = ConsoleModel()

    def sample(threshold, steps):
        gate = {**GATE, "threshold": threshold, "decode_steps_on": steps, "decode_steps_off": 0}
        return parse_server_info({"version": "0.5.12", "internal_states": [{"spec_gate": gate}]}, LOADS)

    m.on_sample(sample(32, 500))
    for value in (33, 32, 7):
        m.request_change(value, None)
        m.on_set_result(m.next_to_send(), st.SetResult(True, None, value, 4, 10))
        m.on_sample(sample(value, 600))
    m.on_failure("connection refused")
    m.on_sample(sample(32, 3))  # a new process: its counts start again
    assert m.snapshot().message.startswith("threshold changed to 32 with the restart")
    m.on_sample(sample(32, 40))
    m.on_sample(sample(40, 80))  # counts going up again: someone else's change is said as such
    assert m.snapshot().message == "threshold changed to 40 outside this console"


def test_a_change_replaced_by_another_client_is_said_at_once_not_after_the_confirm_timeout():
    """Fresh-user finding: with two consoles, the one whose 30 was overwritten by another's 34 showed
    '-> 30 pending' for ~16 s, then 'accepted but spec_gate still shows threshold 34'."""
    now = [100.0]
    m = ConsoleModel(clock=lambda: now[0])
    m.on_sample(_sample(threshold=32))
    m.request_change(30, None)
    sent = m.next_to_send()
    m.on_set_result(sent, st.SetResult(True, None, 30, 4, 10))
    now[0] += 0.5
    out = m.on_sample(_sample(threshold=34))
    assert out.log_lines == ("threshold changed to 34 outside this console (set threshold 30 was accepted, then replaced)",)
    assert m.pending is None
    # rapid presses: a value this console sent on the way is not someone else's
    m.on_sample(_sample(threshold=32))
    for _ in range(3):
        m.step_threshold(1)
    while (change := m.next_to_send()) is not None:
        m.on_set_result(change, st.SetResult(True, None, change["threshold"], 4, 11))
    now[0] += 0.5
    assert m.on_sample(_sample(threshold=34)).log_lines == ()  # 33, 34 on the way to 35
    assert m.on_sample(_sample(threshold=35)).log_lines == ("threshold 32 -> 35 confirmed by spec_gate",)


def _stepped(threshold, decided, hysteresis=4):
    """A sample whose gate has decided ``decided`` decode batches."""
    gate = {**GATE, "threshold": threshold, "hysteresis": hysteresis, "max_running_requests": 48,
            "decode_steps_on": decided, "decode_steps_off": 0}
    return parse_server_info({"version": "0.5.12", "internal_states": [{"spec_gate": gate}]}, LOADS)


def test_two_consoles_a_value_set_just_before_ours_is_not_said_to_have_replaced_it():
    """Fresh-user find (two consoles on one demo server): A set 33, B sent 35 a second later (log
    33 -> 35); B's next poll, taken before 35 decided a batch, showed 33, and B said 'threshold
    changed to 33 outside this console (set threshold 35 was accepted, then replaced)' while the
    server kept 35."""
    now = [100.0]
    m = ConsoleModel(clock=lambda: now[0])
    m.on_sample(_stepped(34, 200))
    m.request_change(35, None)
    m.on_set_result(m.next_to_send(), st.SetResult(True, None, 35, 4, 205))  # decides batch 205 on
    now[0] += 0.5
    assert m.on_sample(_stepped(33, 205)).log_lines == ()  # A's 33, before ours decided a batch
    assert m.pending is not None
    assert m.on_sample(_stepped(35, 207)).log_lines == ("threshold 34 -> 35 confirmed by spec_gate",)


def test_two_consoles_ours_replaced_by_the_value_we_replaced_is_said_at_once():
    """Fresh-user find: A sent 35 -> 34, B sent 34 -> 35 right after; A waited 16 s, then said
    'accepted but spec_gate still shows threshold 35' and never that another client changed it."""
    now = [100.0]
    m = ConsoleModel(clock=lambda: now[0])
    m.on_sample(_stepped(35, 300))
    m.request_change(34, None)
    m.on_set_result(m.next_to_send(), st.SetResult(True, None, 34, 4, 302))
    now[0] += 0.5
    assert m.on_sample(_stepped(35, 302)).log_lines == ()  # ours has decided no batch yet
    out = m.on_sample(_stepped(35, 304))  # it has, and 35 is back: another client's
    assert out.log_lines == ("threshold changed to 35 outside this console (set threshold 34 was accepted, "
                             "then replaced)",)
    assert m.pending is None


def test_connection_and_histories():
    now = [100.0]
    m = ConsoleModel(clock=lambda: now[0], history=3)
    m.on_failure("connection refused")
    now[0] += 12
    m.on_failure("connection refused")
    snap = m.snapshot()
    assert snap.down_for_s == 12 and snap.connection.failures == 2
    for _ in range(5):
        m.on_sample(_sample())
    assert m.connection.reachable and m.snapshot().down_for_s is None
    assert m.snapshot().batch_history == (12, 12, 12)
    m.on_gpus(st.GpuPanelState(status=st.GPU_OK, rows=(st.GpuRow(0, util_pct=5.0), st.GpuRow(1, lost=True))))
    assert m.snapshot().gpu_util_history == ((5.0,), (None,))


def test_an_outage_that_began_with_a_timed_out_poll_counts_from_that_poll():
    """Fresh-user find: a port that accepts but never answers showed "unreachable for 0 s (timed
    out)" when the first poll timed out, ~8 s after it was sent."""
    now = [100.0]
    m = ConsoleModel(clock=lambda: now[0])
    sent = now[0]
    now[0] += 8  # the request's timeout
    m.on_failure("timed out", since=sent)
    assert m.snapshot().down_for_s == 8
    now[0] += 10
    m.on_failure("timed out", since=now[0] - 8)  # a later failure does not move the start
    assert m.snapshot().down_for_s == 18


# -- widgets' pure parts ---------------------------------------------------------------------

def test_badge_states():
    g = st.GateState.from_json(GATE)
    on = st.ConsoleSnapshot(gate=g, sample_seen=True, connection=st.ConnectionState(reachable=True))
    assert badge_state(on) == ("SPEC ON", "decode batch 12 < threshold 32", "-on")
    off = st.ConsoleSnapshot(gate=st.GateState.from_json({**GATE, "spec_enabled": False, "last_decode_batch_size": 37}),
                             sample_seen=True)
    assert badge_state(off) == ("SPEC OFF", "decode batch 37 >= threshold 32", "-off")
    held = st.ConsoleSnapshot(gate=st.GateState.from_json({**GATE, "spec_enabled": False, "last_decode_batch_size": 30}),
                              sample_seen=True)
    assert "back on below 28" in badge_state(held)[1]
    assert all(len(badge_state(x, 34)[1]) <= 34 for x in (on, off, held))  # fits the 80-column panel
    assert badge_state(held, 34)[1] == "decode batch 30: back on below 28"
    down = st.ConsoleSnapshot(sample_seen=True, now=20.0, connection=st.ConnectionState(reachable=False, down_since=8.0))
    assert badge_state(down) == ("NO DATA", "unreachable for 12 s", "-alarm")
    # something answers, only not as SGLang (fresh-user finding: it read "unreachable")
    other = st.ConsoleSnapshot(sample_seen=True, now=20.0, connection=st.ConnectionState(
        reachable=False, down_since=8.0, last_error="HTTP 404: no SGLang server at this URL"))
    assert badge_state(other) == ("NO DATA", "no SGLang answer for 12 s", "-alarm")
    from console.widgets.status_bar import connection_text

    assert connection_text(other) == ("no SGLang answer for 12 s (HTTP 404: no SGLang server at this URL)", "error")
    assert connection_text(down)[0] == "unreachable for 12 s"
    html = st.ConsoleSnapshot(sample_seen=True, now=20.0, connection=st.ConnectionState(
        reachable=False, down_since=8.0, last_error=st.NOT_JSON_REASON))  # an HTML page answered
    assert connection_text(html) == (f"no SGLang answer for 12 s ({st.NOT_JSON_REASON})", "error")
    cut = st.ConsoleSnapshot(sample_seen=True, now=20.0, connection=st.ConnectionState(
        reachable=False, down_since=8.0, last_error=st.BROKEN_JSON_REASON))  # a real answer cut off
    assert connection_text(cut) == (f"no whole answer for 12 s ({st.BROKEN_JSON_REASON})", "error")
    # the port accepts, no answer comes in time (fresh-user finding: it read "unreachable")
    hung = st.ConsoleSnapshot(sample_seen=True, now=20.0, connection=st.ConnectionState(
        reachable=False, down_since=8.0, last_error=st.NO_ANSWER_REASON))
    assert badge_state(hung) == ("NO DATA", "not answering for 12 s", "-alarm")
    assert connection_text(hung) == ("not answering for 12 s (timed out)", "error")
    auth = st.ConsoleSnapshot(sample_seen=True, connection=st.ConnectionState(
        reachable=False, down_since=8.0, last_error="HTTP 401 unauthorized: pass --api-key"))
    assert badge_state(auth) == ("NO ACCESS", "HTTP 401 unauthorized: pass --api-key", "-alarm")
    assert badge_state(auth, 34)[1] == "HTTP 401: pass --api-key"
    crashed = st.ConsoleSnapshot(process=st.ProcessState(phase=st.PHASE_CRASHED, exit_code=1))
    assert badge_state(crashed)[0] == "SERVER DOWN"
    assert badge_state(st.ConsoleSnapshot(sample_seen=True))[0] == "NO GATE"
    assert big_text("SPEC ON") is not None and len(big_text("SPEC OFF")) == 3 and big_text("NO DATA") is None


def _chart(history, threshold, hysteresis, height, width=24):
    labels, cells, ymax = chart_rows(tuple(history), threshold, hysteresis, width=width, height=height)
    rows = {height - 1 - i: (lab.rstrip("┤│").strip(), [k for k, _ in row], "".join(c for _, c in row))
            for i, (lab, row) in enumerate(zip(labels, cells))}  # keyed by row from the bottom
    return rows, ymax


@pytest.mark.parametrize("height", [3, 4, 5, 8, 11])
@pytest.mark.parametrize("history", [(1, 4, 8), (10, 40, 20), (64, 64, 30), (128, 96, 4), (31, 32, 33)])
def test_batch_chart_row_mapping(height, history):
    """The ─ row holds exactly the sizes >= N, labels are 0 (bottom), N (─ row), N-H (┄ row), max (top)."""
    n, h = 32, 4
    rows, ymax = _chart(history, n, h, height)
    step = ymax / height
    (thr_row,) = [r for r, (_, kinds, _) in rows.items() if "thr" in kinds]
    assert thr_row * step == pytest.approx(n)  # N is the lower edge of the ─ row
    assert 1 <= thr_row <= height - 2  # a row below for ON bars, a row above for the axis maximum
    assert rows[thr_row][0] == "32" and rows[0][0] == "0" and rows[height - 1][0] == fmt.num(ymax)
    assert ymax >= max(history) or max(history) > height * n  # bars fit unless even k = 1 cannot hold them
    visible = list(history)
    kinds_thr = rows[thr_row][1][-len(visible):]
    for v, kind in zip(visible, kinds_thr):
        # a bar below N never covers the line; a bar at or above N crosses it in the OFF colour
        assert kind == ("off" if v >= n else "thr"), (v, kind)
    for r, (_, kinds, _) in rows.items():
        for v, kind in zip(visible, kinds[-len(visible):]):
            if kind in ("on", "off"):
                assert kind == ("off" if v >= n else "on")
                assert v > r * step or r == 0 or (r == thr_row and v >= n)  # a bar only in rows it reaches
    hys = [r for r, (_, kinds, _) in rows.items() if "hys" in kinds]
    if hys:
        (hys_row,) = hys
        assert hys_row * step <= n - h < (hys_row + 1) * step  # the ┄ row contains N - H
        assert rows[hys_row][0] == "28" and 0 < hys_row < thr_row


def test_batch_chart_cases_from_the_field():
    # threshold 32 with bars up to 40 at 4 rows: the ─ line is on the row labelled 32, not on the top row
    rows, ymax = _chart((40, 36, 30), 32, 4, 4)
    assert [rows[r][0] for r in (3, 2, 1, 0)] == ["64", "32", "28", "0"] and ymax == 64
    assert rows[2][2].endswith("─▄▂─") and rows[1][2].endswith("┄██▇") and rows[3][2].endswith("    ")
    # bars up to 150: the bottom row says 0, the ─ line is above the bars below 32, tall bars are cut (▲)
    rows, ymax = _chart((150, 8, 8), 32, 4, 4)
    assert rows[0][0] == "0" and rows[1][0] == "32" and ymax == 128
    assert rows[1][2].endswith("█──") and rows[3][2].endswith("▲  ")
    # the ┄ line shows at 80x24 (4 rows) and on tall charts while the batch is below N - H
    rows, _ = _chart((8, 8, 8), 32, 4, 4)
    assert rows[1][0] == "28" and rows[1][2].endswith("┄┄┄")
    rows, _ = _chart((8, 8, 8), 32, 4, 11)
    assert any("┄" in text for _, _, text in rows.values())
    # the axis follows the bars on screen, not the whole history
    _, ymax_all = _chart([128] * 100 + [8] * 30, 32, 4, 4, width=24)
    assert ymax_all == 64
    # no threshold: a round axis above the data
    rows, ymax = _chart((5, 3), None, None, 4)
    assert ymax == nice_max(5 * 1.15) and rows[0][0] == "0" and not any("thr" in k for _, k, _ in rows.values())


def test_threshold_dialog_parsing():
    assert parse_request("16", "2", 32, 4, 48) == ThresholdRequest(16, 2)
    assert parse_request("32", "2", 32, 4, 48) == ThresholdRequest(None, 2)  # only what changed
    assert "refused" in parse_request("49", "", 32, 4, 48)
    assert "not a whole number" in parse_request("x", "", 32, 4, 48)
    assert parse_request("32", "4", 32, 4, 48) == "nothing changed"
    # not reduced to their digits (Input(type="integer") used to drop the rest: 2.5 -> 25)
    for text in ("2.5", "1.5", "3e1", "1_000", "+-5", "٣", "0x10"):
        assert parse_request(text, "", 32, 4, 48) == f"threshold {text!r} is not a whole number (e.g. 32)"
    # "+5" could mean "5 more": refused, saying what the field takes (a fresh user read "not a whole number")
    assert parse_request("+20", "", 32, 4, 48) == "threshold: the value itself, e.g. 20, no sign"
    # a too-long hysteresis names its real limit, not the field's digit count (a new user's report)
    assert parse_request("", "9" * 40, 32, 4, 48) == f"hysteresis {'9' * 12}… is out of range (below the threshold)"
    assert "hysteresis '1.5' is not a whole number" in parse_request("", "1.5", 32, 4, 48)
    assert "out of range" in parse_request("9" * 40, "", 32, 4, 48)
    assert parse_request(" 33 ", "", 32, 4, 48) == ThresholdRequest(33, None)


def test_fmt():
    assert fmt.num(2457.3, "tok/s") == "2,457 tok/s" and fmt.num(None, "W") == "n/a"
    assert fmt.duration(12.7) == "12 s" and fmt.duration(185) == "3 min 05 s" and fmt.duration(3720) == "1 h 02 min"
    assert fmt.mem_gib(1024, None) == "1.0/n/a GiB" and fmt.pair(None, None, "W") == "n/a"
    line = fmt.sparkline([0, 50, 100, None], 6, top=100)
    assert len(line) == 6 and line.startswith("  ") and line[-1] == " " and line[-2] == "█"


# -- config / CLI ----------------------------------------------------------------------------

def test_server_args_to_url_and_key():
    assert url_from_server_args([]) == "http://127.0.0.1:30000"
    assert url_from_server_args(["--host", "0.0.0.0", "--port", "31000"]) == "http://127.0.0.1:31000"
    assert url_from_server_args(["--port=8000", "--host=10.0.0.2"]) == "http://10.0.0.2:8000"
    assert api_key_from_server_args(["--api-key", "a", "--admin-api-key", "b"]) == "b"
    assert api_key_from_server_args(["--api-key=a"]) == "a"


def test_config_file(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    assert find_config() is None
    user = tmp_path / "xdg" / "specconsole" / "specconsole.toml"
    user.parent.mkdir(parents=True)
    user.write_text('[console]\ntheme = "light"\n')
    assert find_config() == user
    local = tmp_path / "specconsole.toml"
    local.write_text('[server]\nargs = ["--port", "31001"]\n[console]\ninterval = 2\n')
    assert find_config() == local  # the working directory wins
    cfg = load_config(local)
    assert cfg["server"]["args"] == ["--port", "31001"] and cfg["console"]["interval"] == 2
    local.write_text('[server]\nargs = "--port 1"\n')
    with pytest.raises(ConfigError):
        load_config(local)


def test_cli_modes(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SPECCONSOLE_SERVER_CMD", raising=False)
    monkeypatch.setattr("console.client.probe", lambda url, timeout_s=0.7: False)

    cfg = cli.resolve(["launch", "--theme", "ansi", "--", "--model-path", "M", "--port", "31002"])
    assert cfg.mode == "launch" and cfg.url == "http://127.0.0.1:31002" and cfg.theme == "ansi"
    assert cfg.server_command[1:3] == ["-m", "server_patch.launch_server"] and cfg.server_command[-2:] == ["--port", "31002"]
    assert str(cfg.log_path).startswith(str(tmp_path / "state"))

    cfg = cli.resolve(["attach", "http://h:1", "--log", "x.log", "--api-key", "k", "--readonly", "--interval", "2"])
    assert (cfg.mode, cfg.url, cfg.log_path, cfg.api_key, cfg.readonly, cfg.interval_s) == ("attach", "http://h:1", Path("x.log"), "k", True, 2.0)

    cfg = cli.resolve(["demo", "--port", "31003", "--", "--load", "fixed:4"])
    assert cfg.mode == "demo" and cfg.url == "http://127.0.0.1:31003" and cfg.nvml == "sim"
    assert cfg.server_command[1:3] == ["-m", "console.demo_server"] and cfg.server_command[-2:] == ["--load", "fixed:4"]

    assert cli.resolve([]).mode == "none"  # no config, nothing on :30000
    monkeypatch.setattr("console.client.probe", lambda url, timeout_s=0.7: True)
    assert cli.resolve([]).mode == "attach"
    (tmp_path / "specconsole.toml").write_text('[server]\nargs = ["--port", "31004"]\n[console]\ntheme = "light"\n')
    cfg = cli.resolve([])
    assert cfg.mode == "launch" and cfg.url.endswith(":31004") and cfg.theme == "light"
    assert cli.resolve(["--theme", "dark"]).theme == "dark"  # the command line wins

    monkeypatch.setenv("SPECCONSOLE_SERVER_CMD", "python3 -m console.demo_server")
    assert cli.resolve(["launch", "--", "--port", "1"]).server_command == ["python3", "-m", "console.demo_server", "--port", "1"]
    for bad in (["launch"], ["attach", "u", "--", "x"], ["--interval", "0"], ["--", "--model-path", "M"]):
        with pytest.raises(SystemExit):
            cli.resolve(bad)


# -- log follower ----------------------------------------------------------------------------

def test_log_follower_partial_lines_truncation_rotation(tmp_path):
    path = tmp_path / "server.log"
    f = LogFollower(path)
    assert f.read_new() == []  # not there yet
    path.write_text("a\nb")
    assert f.read_new() == ["a"]
    with open(path, "a") as fh:
        fh.write("c\nd\n")
    assert f.read_new() == ["bc", "d"]
    path.write_text("x\n")  # truncated (same inode)
    assert f.read_new() == ["x"]
    rotated = tmp_path / "server.log.1"
    path.rename(rotated)
    with open(rotated, "a") as fh:
        fh.write("last of old\n")
    path.write_text("new file\n")
    assert f.read_new() == ["last of old", "new file"]


def test_log_follower_tail_of_a_big_file_keeps_facts(tmp_path):
    path = tmp_path / "big.log"
    with open(path, "w") as fh:
        fh.write("[t] Spec v2 is enabled by default for eagle/eagle3/standalone speculative decoding.\n")
        for i in range(20000):
            fh.write(f"[t TP0] line {i}\n")
    scanned = []
    f = LogFollower(path, initial_tail_bytes=1000, on_scan=scanned.append)
    lines = f.read_new()
    assert lines[-1] == "[t TP0] line 19999" and len(lines) < 100
    assert scanned[0].endswith("Spec v2 is enabled by default for eagle/eagle3/standalone speculative decoding.")


def test_log_follower_shows_control_bytes_in_caret_notation_and_long_lines_cut(tmp_path, monkeypatch):
    from console import logfollow

    path = tmp_path / "odd.log"
    path.write_bytes(b"ok\tline\n\x1b[31mred\x1b[0m \x00\x07\x7f\n")
    assert LogFollower(path).read_new() == ["ok\tline", "^[[31mred^[[0m ^@^G^?"]
    # NULs before a line's text (a hole: truncate -s 2G, then a line appended) do not hide it
    path.write_bytes(b"\0" * 300_000 + b"AFTER-HOLE\n")
    assert LogFollower(path).read_new() == ["AFTER-HOLE"]
    # an existing file whose last line is longer than the tail: shown cut, not left out
    path.write_bytes(b"first\n" + b"x" * 5000 + b"\n")
    assert LogFollower(path, initial_tail_bytes=1000).read_new() == ["x" * 999]
    # no newline at all: passed on in pieces of MAX_LINE_BYTES, not held in memory
    monkeypatch.setattr(logfollow, "MAX_LINE_BYTES", 100)
    path.write_bytes(b"y" * 250)
    f = LogFollower(path)
    assert f.read_new() == ["y" * 250]
    with open(path, "ab") as fh:
        fh.write(b"z" * 50)
    assert f.read_new() == []  # 50 bytes: still a partial line
    # a line longer than MAX_LINE_CHARS is cut and says how much is left out
    path.write_text("w" * (logfollow.MAX_LINE_CHARS + 1234) + "\n")
    [line] = LogFollower(path).read_new()
    assert line == "w" * logfollow.MAX_LINE_CHARS + "… [1,234 more characters]"


def test_classifying_a_long_word_stays_linear():
    """``\\w+Error\\b`` rescanned a long word from every position (a 2.5 MB line froze the app); a
    100 KB word now classifies in milliseconds (a regression would take ~10 s here)."""
    assert logparse.classify("y" * 100_000) == logparse.PLAIN
    assert logparse.classify("x" * 100_000 + "Error") == logparse.ERROR
    for line in ("[t] ValueError: bad", "ConnectionResetError: peer", "an Error here"):
        assert logparse.classify(line) == logparse.ERROR, line


# -- process group ---------------------------------------------------------------------------

CHILD = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); {extra} time.sleep(60)"


def _proc(tmp_path, extra="", timeout=3.0):
    code = CHILD.format(extra=extra)
    return ServerProcess([sys.executable, "-c", code], tmp_path / "p.log", stop_timeout_s=timeout)


def _wait_members(p, n, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and len(p.members()) < n:
        time.sleep(0.05)
    assert len(p.members()) >= n


def test_stop_terminates_the_whole_group(tmp_path):
    p = _proc(tmp_path)
    p.start()
    _wait_members(p, 2)
    assert os.getpgid(p.pid) == p.pid != os.getpgid(0)  # its own session / process group
    assert p.stop() == -signal.SIGTERM
    assert p.members() == [] and group_members(p.pgid) == []
    assert p.stop() == -signal.SIGTERM  # idempotent
    assert (tmp_path / "p.log").read_text().startswith(logparse.START_MARKER)


def test_stop_escalates_to_sigkill(tmp_path):
    p = _proc(tmp_path, extra="import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN);", timeout=0.3)
    p.start()
    _wait_members(p, 2)
    time.sleep(0.2)  # let it install the handler
    assert p.stop() == -signal.SIGKILL
    assert p.members() == []


def test_stop_after_crash_cleans_up_leftovers(tmp_path):
    code = "import subprocess, sys; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); print('boom'); sys.exit(3)"
    p = ServerProcess([sys.executable, "-c", code], tmp_path / "c.log", stop_timeout_s=2)
    p.start()
    deadline = time.monotonic() + 10
    while p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert p.poll() == 3
    assert p.members()  # the orphan is still in the group
    p.stop()
    assert p.members() == []
    assert p.last_lines(1) == ["boom"]


def test_unstartable_command_raises(tmp_path):
    with pytest.raises(OSError):
        ServerProcess(["/nonexistent/server"], tmp_path / "x.log").start()


def test_app_config_defaults():
    cfg = AppConfig()
    assert cfg.mode == "attach" and cfg.interval_s == 1.0 and cfg.theme == "dark" and cfg.handle_signals


@pytest.mark.parametrize("modules,allowed", [
    # the console reads the server only through the contract
    ("console.app, console.cli, console.headless_check", {"server_patch", "server_patch.contract"}),
    # the simulated server drives server_patch's own (pure) gate
    ("console.demo_server", {"server_patch", "server_patch.contract", "server_patch.gate",
                             "server_patch.auto_threshold"}),
])
def test_console_never_imports_sglang_or_server_patch(modules, allowed):
    code = (f"import sys, {modules}; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('sglang', 'server_patch', 'torch') "
            f"and m not in {sorted(allowed)!r}]; "
            "print(bad); sys.exit(1 if bad else 0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_switch_rate_and_gate_warnings():
    from console.widgets.spec_panel import gate_warnings

    now = [0.0]
    m = ConsoleModel(clock=lambda: now[0])
    for i in range(7):
        gate = {**GATE, "switches": i * 2}
        m.on_sample(parse_server_info({"internal_states": [{"spec_gate": gate}]}, None))
        now[0] += 5.0
    assert m.switch_rate() == pytest.approx(12 * 60 / 30)
    g = st.GateState.from_json({**GATE, "threshold": 64, "max_running_requests": 48, "cuda_graph_max_bs": 8,
                                "last_decode_batch_size": 12,
                                "ranks": [{"tp_rank": 0, "spec_enabled": True}, {"tp_rank": 1, "spec_enabled": False}]})
    warnings = gate_warnings(st.ConsoleSnapshot(gate=g))
    assert any("never fires" in w for w in warnings)
    assert any("no CUDA graph" in w for w in warnings)
    assert any("TP ranks disagree" in w for w in warnings)
    assert not any("wrong keys" in w for w in warnings)
    bad = st.GateState.from_json({**GATE, "off_target_attention": "triton-decode-kernel",
                                  "off_attention_checks": 70, "off_attention_mismatches": 2})
    assert "OFF-step attention read wrong keys on 2 checked steps (see log)" in gate_warnings(st.ConsoleSnapshot(gate=bad))
    assert not any("early seq_lens" in w for w in warnings)
    early_bad = st.GateState.from_json({**GATE, "off_early_seq_lens": True, "off_early_seq_lens_checks": 64,
                                        "off_early_seq_lens_mismatches": 1})
    assert ("OFF-step early seq_lens differed on 1 checked steps (see log)"
            in gate_warnings(st.ConsoleSnapshot(gate=early_bad)))
    assert not any("KV-only" in w for w in warnings)
    kv_bad = st.GateState.from_json({**GATE, "off_draft_extend": "full", "off_kv_only_checks": 3,
                                     "off_kv_only_mismatches": 1})
    assert ("OFF-step KV-only draft K/V differed on 1 checked steps (see log)"
            in gate_warnings(st.ConsoleSnapshot(gate=kv_bad)))


# -- fresh-user findings ---------------------------------------------------------------------

def test_attach_url_without_scheme_is_normalized_or_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    assert cli.resolve(["attach", "127.0.0.1:39998"]).url == "http://127.0.0.1:39998"
    assert cli.resolve(["attach", "gpu-box:30000/"]).url == "http://gpu-box:30000"
    assert cli.resolve(["attach", "https://h:1"]).url == "https://h:1"
    for bad in ("ftp://h:1", "http://", "127.0.0.1:notaport"):
        with pytest.raises(SystemExit):
            cli.resolve(["attach", bad])
        assert "URL" in capsys.readouterr().err


def test_an_unknown_option_of_a_mode_is_reported_with_that_modes_usage(tmp_path, monkeypatch, capsys):
    """Fresh-user finding: `specconsole demo --bogus` printed the top-level usage."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        cli.resolve(["demo", "--bogus"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.startswith("usage: specconsole demo") and "unrecognized arguments: --bogus" in err


async def test_http_401_says_pass_api_key():
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(401, json={"error": "Unauthorized"})

    client = ServerClient("http://x", transport=httpx.MockTransport(handler))
    with pytest.raises(ServerUnreachable, match=r"^HTTP 401 unauthorized: pass --api-key$"):
        await client.poll()
    with pytest.raises(ServerUnreachable, match=r"HTTP 401 unauthorized: pass --api-key"):
        await client.set_gate(threshold=3)
    await client.aclose()


def test_cli_help_shows_server_args_and_demo_options(capsys):
    for argv in (["launch", "--help"], ["demo", "--help"]):
        with pytest.raises(SystemExit):
            cli.build_parser().parse_args(argv)
    out = capsys.readouterr().out
    assert "specconsole launch [options] -- <server args>" in out
    assert "specconsole demo [options] [-- <demo server args>]" in out
    demo_help = out[out.index("specconsole demo [options]"):]
    assert "--log-dir DIR" in demo_help and "where the demo server's log goes" in demo_help
    assert "SIGTERM to SIGKILL delay" in demo_help


def test_h200_reference_is_in_the_repo_and_cited_on_screen():
    from console import demo_server

    assert "shared/gpu" not in (throughput.__doc__ or "") and "shared/gpu" not in demo_server.NOTE
    assert "measured on an H200, synthetic 8B pair, SGLang 0.5.12" in demo_server.NOTE
    for bs, none, eagle, accept in throughput.H200_TABLE:  # the docstring carries the same table
        assert f"| {bs} | {none:.0f} | {eagle:.0f} |" in throughput.__doc__
    console_doc = (Path(__file__).resolve().parents[1] / "docs" / "console.md").read_text()
    assert "shared/gpu" not in console_doc and "console/throughput.py" in console_doc


def test_switch_rate_is_shown_only_when_the_gate_thrashes():
    from console.widgets.spec_panel import THRASH_PER_MIN, detail_lines

    d = {k: None for k in ("label", "value", "dim", "ok", "alarm", "pending")}
    g = st.GateState.from_json(GATE)

    def text(rate):
        snap = st.ConsoleSnapshot(gate=g, sample_seen=True, switches_per_min=rate)
        return "\n".join(t.plain for t in detail_lines(snap, d, 80))

    assert "/min" not in text(None) and "/min" not in text(6.0)  # a load that moves: no rate
    assert "/min" not in text(THRASH_PER_MIN - 1)
    assert f"switches 2 ({THRASH_PER_MIN:.0f}/min: thrashing)" in text(THRASH_PER_MIN)


def _details(width=120, **gate):
    """The spec panel's detail lines as plain text for a ``spec_gate`` of ``GATE`` + ``gate``."""
    from console.widgets.spec_panel import detail_lines

    d = {k: None for k in ("label", "value", "dim", "ok", "alarm", "pending")}
    snap = st.ConsoleSnapshot(gate=st.GateState.from_json({**GATE, **gate}), sample_seen=True)
    return "\n".join(t.plain for t in detail_lines(snap, d, width))


def test_details_say_when_the_next_batch_is_prepared_after_an_off_step():
    text = _details
    assert "next batch prepared" not in text()  # a server without the field (older patch)
    assert "next batch prepared during the OFF verify, 64 checked, 0 wrong" in text(
        off_early_seq_lens=True, off_early_seq_lens_checks=64, off_early_seq_lens_mismatches=0)
    assert "next batch prepared after the OFF verify" in text(off_early_seq_lens=False)


def test_details_say_what_an_off_step_draft_extend_computes():
    text = _details
    assert "OFF draft extend" not in text()  # a server without the field (older patch)
    assert "OFF draft extend kv-only, 1 checked, 0 wrong, 1 resume step\n" in text(
        off_draft_extend="kv-only", off_kv_only_checks=1, off_kv_only_mismatches=0, off_resume_steps=1) + "\n"
    assert "replayed by 5,310 OFF steps + 1 resume" in text(off_cuda_graph=True, off_steps_cuda_graph=5310,
                                                             off_resume_steps=1)
    assert "OFF draft extend kv-only, 64 checked, 0 wrong, 3 resume steps" in text(
        off_draft_extend="kv-only", off_kv_only_checks=64, off_kv_only_mismatches=0, off_resume_steps=3)
    assert "OFF draft extend kv-only (eager), 90 checked, 0 wrong, 0 resume steps, 41 KV-only prefills" in text(
        off_draft_extend="kv-only", off_kv_only_runs="eager", off_kv_only_checks=90, off_kv_only_mismatches=0,
        off_resume_steps=0, off_kv_only_prefills=41)
    assert "OFF draft extend full (SPECCONSOLE_OFF_DRAFT_KV_ONLY=0)" in text(
        off_draft_extend="full", off_draft_extend_reason="SPECCONSOLE_OFF_DRAFT_KV_ONLY=0")
    assert "draft extend 5 + KV-only 900; ON target" in text(
        off_target_graph_replays=905, off_draft_extend_graph_replays=5, off_kv_only_graph_replays=900,
        on_target_graph_replays=10)


def test_details_say_how_the_targets_prefills_run_and_what_v1_gives_up():
    text = _details
    assert "target prefill" not in text()  # a server without the field (older patch)
    assert "target prefill piecewise-cuda-graph, 69 checked, 0 wrong" in text(
        target_prefill="piecewise-cuda-graph", target_prefill_checks=69, target_prefill_mismatches=0)
    assert "target prefill eager (SPECCONSOLE_TARGET_PREFILL_GRAPH=0)" in text(
        target_prefill="eager", target_prefill_reason="SPECCONSOLE_TARGET_PREFILL_GRAPH=0")
    assert "without the overlap scheduler" in text(spec_version="v1", overlap=False)
    assert "without the overlap scheduler" not in text(spec_version="v2", overlap=True)
    assert "expect ~2/3" in text(spec_version="v1", overlap=False) and "SPECCONSOLE_OFF_LEAN_V1=1 gives ~3/4" in text(
        spec_version="v1", overlap=False)
    lean = text(spec_version="v1", overlap=False, off_lean_v1="on", off_lean_v1_steps=6754, off_lean_v1_checks=90,
                off_lean_v1_mismatches=0)
    assert "expect ~3/4" in lean and "OFF step path lean, 6,754 steps, 90 checked, 0 wrong" in lean
    topk4 = text(spec_version="v1", off_lean_v1="topk > 1", topk=4)
    assert "OFF step path SGLang's verify path (topk > 1)" in topk4 and "SPECCONSOLE_OFF_LEAN_V1" not in topk4
    assert "SPECCONSOLE_OFF_LEAN_V1" not in text(spec_version="v1", topk=4)  # the lean step takes topk 1 only
    assert "OFF step path" not in text(spec_version="v2")
    assert "OFF draft K/V deferred, 1,496,719 rows in 191 flushes" in text(
        off_deferred_draft_kv="on", off_deferred_draft_kv_rows=1496719, off_deferred_draft_kv_flushes=191)
    assert "OFF draft K/V stored at once (v1 (EAGLEWorker))" in text(off_deferred_draft_kv="v1 (EAGLEWorker)")
    assert "OFF draft K/V" not in text()  # switched off, or a plugin before it
    assert "OFF verify argmax of greedy batches, 11,642 steps, 109 checked, 0 wrong" in text(
        off_lean_v2_verify="on", off_lean_v2_verify_steps=11642, off_lean_v2_verify_checks=109,
        off_lean_v2_verify_mismatches=0)
    assert "OFF verify SGLang's tree verify (proof failed)" in text(off_lean_v2_verify="proof failed")
    assert "OFF verify metadata fused, 64 checked, 0 wrong" in text(
        off_verify_metadata="fused", off_verify_metadata_checks=64, off_verify_metadata_mismatches=0)
    assert "OFF verify metadata FlashAttention's (topk > 1)" in text(off_verify_metadata="topk > 1")
    assert "OFF verify metadata" not in text()
    assert "OFF future map tokens and seq_lens only, 9,000 steps, 64 checked, 0 wrong" in text(
        off_lean_future_map="on", off_lean_future_map_steps=9000, off_lean_future_map_checks=64,
        off_lean_future_map_mismatches=0)
    assert "OFF future map SGLang's (v1 has no future map)" in text(off_lean_future_map="v1 has no future map")
    assert "OFF future map" not in text()
    assert "KV reserve 16 tokens a request, 9,100 steps without allocating, 900 top-ups, 64 checked, 0 wrong" in text(
        kv_reserve="on", kv_reserve_tokens=16, kv_reserve_skipped_steps=9100, kv_reserve_topups=900,
        kv_reserve_checks=64, kv_reserve_mismatches=0)
    assert "KV reserve SGLang's allocation (v1 allocates and frees inside each step)" in text(
        kv_reserve="v1 allocates and frees inside each step")
    assert "KV reserve" not in text()


def test_stale_values_while_the_server_is_down():
    from rich.style import Style

    from console.widgets.load_panel import summary_lines

    g = st.GateState.from_json(GATE)
    load = st.LoadState(running_reqs=50, waiting_reqs=3, gen_throughput=8574.0)
    figures = st.LoadFigures(st.Figure(50, st.SRC_LOADS), st.Figure(3, st.SRC_LOADS), st.Figure(8574.0, st.SRC_METRICS))
    up = st.ConsoleSnapshot(gate=g, load=load, sample_seen=True, connection=st.ConnectionState(reachable=True),
                            figures=figures)
    down = replace(up, connection=st.ConnectionState(reachable=False, down_since=1.0))
    crashed = replace(up, process=st.ProcessState(phase=st.PHASE_CRASHED, exit_code=1))
    assert not up.stale and down.stale and crashed.stale
    assert not st.ConsoleSnapshot(connection=st.ConnectionState(reachable=False)).stale  # nothing shown yet
    grey, bold = Style(dim=True), Style(bold=True)
    (line,) = summary_lines(down, 80, bold, bold, grey)
    assert line.plain == "running 50  queue 3  8,574 tok/s"
    assert all(span.style == grey for span in line.spans)
    (line,) = summary_lines(up, 80, bold, bold, grey)
    assert all(span.style == bold for span in line.spans)
    # the two batch sizes are labelled apart: running requests (/v1/loads) vs the last decode batch (spec_gate)
    both = replace(up, gate=st.GateState.from_json({**GATE, "last_decode_batch_size": 48}))
    assert both.running_batch == 50 and both.decode_batch == 48
    assert badge_state(both)[1] == "decode batch 48 < threshold 32"


# -- second fresh-user test ------------------------------------------------------------------

def test_port_problem_says_who_holds_the_port_and_what_to_do(tmp_path, monkeypatch, capsys):
    import socket
    import threading

    from console import portcheck

    free = portcheck.port_problem("127.0.0.1", _free_port(), hint="stop it or pass --port")
    assert free is None
    with socket.socket() as sock:  # something that listens but speaks no HTTP (closes at once)
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        port = sock.getsockname()[1]

        def close_all():
            while True:
                try:
                    conn, _ = sock.accept()
                except OSError:
                    return
                conn.close()

        threading.Thread(target=close_all, daemon=True).start()
        text = portcheck.port_problem("127.0.0.1", port, hint="stop it or pass --port", timeout_s=0.3)
        assert text.startswith(f"port {port} on 127.0.0.1 is already in use by a process that does not speak HTTP")
        assert f"pid {os.getpid()}" in text  # the listener, found through /proc
        assert text.endswith("stop it or pass --port")
        assert portcheck.port_problem("0.0.0.0", port, hint="h") is not None  # every interface: seen too
        # the CLI refuses before the screen starts, with the message in the terminal
        monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
        monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
        monkeypatch.chdir(tmp_path)
        assert cli.main(["demo", "--port", str(port)]) == 1
        err = " ".join(capsys.readouterr().err.split())  # wrapped to the terminal
        assert "already in use" in err and "pass --port P (specconsole demo --port P)" in err
        assert "specconsole attach" not in err  # nothing there that attach could watch
        assert cli.main(["launch", "--", "--model-path", "M", "--port", str(port)]) == 1
        assert "specconsole launch -- ... --port P" in " ".join(capsys.readouterr().err.split())
    # a server that answers /server_info: watching it is the way out
    import http.server
    import json as _json

    class Info(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = _json.dumps({"version": "0.5.12"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Info)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        port = srv.server_address[1]
        assert cli.main(["demo", "--port", str(port)]) == 1
        err = " ".join(capsys.readouterr().err.split())
        assert "an SGLang 0.5.12 server" in err and f"specconsole attach http://127.0.0.1:{port}" in err
    finally:
        srv.shutdown()
        srv.server_close()
    info = {"version": "0.5.12", "model_path": "M", "simulated": {"note": "x"},
            "internal_states": [{"spec_gate": {"threshold": 50}}]}
    assert portcheck.describe_server_info(info) == "an SGLang 0.5.12 server (simulated demo server, model M, threshold 50)"


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_cli_refuses_negative_stop_timeout_and_bad_ports(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    for bad, why in ((["demo", "--stop-timeout", "-1"], "--stop-timeout must be a finite number of seconds >= 0"),
                     (["launch", "--stop-timeout", "-0.5", "--", "--model-path", "M"], "--stop-timeout must be a"),
                     # NaN compares false with everything: a server ignoring SIGTERM would never be killed
                     (["demo", "--stop-timeout", "nan"], "(got nan)"),
                     (["demo", "--stop-timeout", "inf"], "(got inf)"),
                     # a NaN poll interval spun the event loop at 100% CPU, deaf to q, Ctrl+C and SIGTERM
                     (["demo", "--interval", "nan"], "--interval must be a number of seconds from 0.1 to 3600 (got nan)"),
                     # an interval of 1e300 s looked like a hung console (a change stayed pending forever)
                     (["demo", "--interval", "1e300"], "(got 1e+300)"),
                     (["demo", "--interval", "inf"], "(got inf)"),
                     (["demo", "--interval", "0.01"], "(got 0.01)"),
                     (["demo", "--port", "0"], "--port must be 1-65535"),
                     (["demo", "--port", "70000"], "--port must be 1-65535")):
        with pytest.raises(SystemExit):
            cli.resolve(bad)
        assert why in capsys.readouterr().err
    # an out-of-range --interval after the mode is told with that mode's usage, as a non-number is
    with pytest.raises(SystemExit):
        cli.resolve(["demo", "--interval", "0"])
    assert "usage: specconsole demo" in capsys.readouterr().err
    # the demo's own arguments after -- win, the URL follows them
    assert cli.resolve(["demo", "--port", "31005", "--", "--port", "31006"]).url == "http://127.0.0.1:31006"


def test_attach_refuses_a_host_that_is_not_one(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    for bad, why in (("not a url", "'not a url' is not a host name or IP address"),
                     ("http://exa mple:1", "is not a host name"),
                     ("http://-bad-:1", "is not a host name"),
                     ("127.0.0.1:99999", "port 99999 is out of range"),
                     ("http://h:0", "port 0 is out of range"),
                     ("http://999.1.1.1:30000", "'999.1.1.1' is not a host name or IP address")):
        with pytest.raises(SystemExit):
            cli.resolve(["attach", bad])
        assert why in capsys.readouterr().err
    for good in ("localhost:30000", "10.0.0.5", "[::1]:30000", "gpu_box-1.lan:8000", "a1.b2:1"):
        assert cli.resolve(["attach", good]).url.startswith("http://")
    # fresh-user finding: the server's own --host went to httpx unchecked (a traceback on screen)
    for argv in (["demo", "--", "--host", "999.1.1.1"], ["launch", "--", "--host", "999.1.1.1", "--model-path", "M"]):
        with pytest.raises(SystemExit) as exc:
            cli.resolve(argv)
        assert exc.value.code == 2 and "--host '999.1.1.1' is not a host name or IP address" in capsys.readouterr().err


async def test_tls_and_protocol_errors_are_not_called_connection_refused():
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Plain(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Plain)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        client = ServerClient(f"https://127.0.0.1:{srv.server_address[1]}", timeout_s=2)  # https to plain HTTP
        with pytest.raises(ServerUnreachable, match=r"^TLS error: .*\(a plain http:// server\?\)$"):
            await client.poll()
        await client.aclose()
    finally:
        srv.shutdown()
        srv.server_close()

    def raising(exc):
        def handler(request):
            raise exc
        return httpx.MockTransport(handler)

    for exc, reason in ((httpx.ReadError(""), "protocol error: connection closed without an HTTP answer (an https:// server?)"),
                        (httpx.RemoteProtocolError("Server disconnected without sending a response."),
                         "protocol error: Server disconnected without sending a response."),
                        (httpx.RemoteProtocolError("illegal status line: bytearray(b'SSH-2.0-OpenSSH_9.2p1')"),
                         "protocol error: illegal status line: 'SSH-2.0-OpenSSH_9.2p1' (an SSH server"),
                        (httpx.RemoteProtocolError("illegal status line: bytearray(b'\\x00\\xffGARBAGE')"),
                         "protocol error: illegal status line: '??GARBAGE' (not an HTTP server"),
                        (httpx.ConnectError("[Errno -2] Name or service not known"), "host not found"),
                        (httpx.ConnectError("[Errno 111] Connection refused"), "connection refused")):
        client = ServerClient("http://x:1", transport=raising(exc))
        with pytest.raises(ServerUnreachable) as info:
            await client.poll()
        assert str(info.value).startswith(reason), str(info.value)
        await client.aclose()


async def test_http_401_with_a_key_says_the_key_was_rejected():
    client = ServerClient("http://x", api_key="wrong", transport=httpx.MockTransport(lambda r: httpx.Response(401)))
    with pytest.raises(ServerUnreachable, match=r"^the API key was rejected \(HTTP 401\)$"):
        await client.poll()
    with pytest.raises(ServerUnreachable, match=r"^the API key was rejected \(HTTP 401\)$"):
        await client.set_gate(threshold=3)
    await client.aclose()
    m = ConsoleModel()
    m.on_failure("the API key was rejected (HTTP 401)")
    snap = m.snapshot()
    assert snap.connection.auth_refused
    assert badge_state(snap, 30) == ("NO ACCESS", "API key rejected (HTTP 401)", "-alarm")
    assert "pass --api-key" not in " ".join(badge_state(snap, w)[1] for w in (20, 40, 80))


def _model_with_gate(threshold=32, hysteresis=4, clock=None) -> ConsoleModel:
    m = ConsoleModel(clock=clock or (lambda: 0.0))
    gate = {**GATE, "threshold": threshold, "hysteresis": hysteresis}
    m.on_sample(parse_server_info({"internal_states": [{"spec_gate": gate}]}, None), polled_at=0.0)
    return m


def test_reconnect_clears_unreachable_notices_and_late_changes_are_confirmed():
    now = [0.0]
    m = _model_with_gate(clock=lambda: now[0])
    # a change that times out (server frozen) ...
    ok, _ = said(m.step_threshold(1))
    change = m.next_to_send()
    (line,) = lines(m.on_set_failure(change, "timed out"))
    assert "no answer" in line and m.pending is None
    now[0] = 1.0
    m.on_failure("timed out")
    why = m.check_request()
    assert why == "server not answering (timed out): threshold not changed"
    assert m.refuse(why).kind == "connection" and m.snapshot().message == why
    # ... the server comes back and shows the value: the stale notice goes, the change is confirmed
    now[0] = 5.0
    said_lines = lines(m.on_sample(_sample(33), polled_at=5.0))
    assert said_lines == ["threshold 32 -> 33 confirmed by spec_gate (applied, although the request was not answered as expected)"]
    assert m.snapshot().message == said_lines[0] and m.snapshot().message_level == "ok"
    assert lines(m.on_sample(_sample(33), polled_at=6.0)) == []  # said once

    # a change that never applied: "not applied" once the server has answered for a while
    m = _model_with_gate(clock=lambda: now[0])
    m.step_threshold(1)
    m.on_set_failure(m.next_to_send(), "timed out")
    now[0] = 10.0
    assert lines(m.on_sample(_sample(32), polled_at=10.0)) == []
    now[0] = 14.0
    (line,) = lines(m.on_sample(_sample(32), polled_at=14.0))
    assert line == ("set threshold 33 was not answered as expected and spec_gate shows threshold 32: not applied so far "
                    "(confirmed if it lands later)")
    now[0] = 20.0  # it applied after all: still confirmed
    assert "confirmed by spec_gate" in lines(m.on_sample(_sample(33), polled_at=20.0))[0]

    # a change that was never sent (the console's own server is gone) is not watched for
    m = _model_with_gate(clock=lambda: now[0])
    m.step_threshold(1)
    (line,) = lines(m.on_set_failure(m.next_to_send(), "the server this console started is not running", delivered=False))
    assert line == "set threshold 33 not sent: the server this console started is not running"
    assert lines(m.on_sample(_sample(33), polled_at=30.0)) == []


def test_no_threshold_changes_for_a_server_that_is_not_running():
    m = _model_with_gate()
    m.on_process(st.ProcessState(phase=st.PHASE_CRASHED, exit_code=1))
    assert m.check_request() == "the server this console started is not running: threshold not changed"
    m.on_process(st.ProcessState(phase=st.PHASE_CRASHED, error="port 1 is already in use"))
    assert m.check_request() == "the server this console started was not started: threshold not changed"
    m = _model_with_gate()
    m.on_failure("port 1 is held by pid 2 (x), not by the server this console started", foreign=True)
    assert m.check_request().startswith("not sent: another process holds the port")
    from console.widgets.status_bar import connection_text

    snap = replace(m.snapshot(), process=st.ProcessState(phase=st.PHASE_STARTING))
    assert connection_text(snap) == ("NOT CONNECTED: port 1 is held by pid 2 (x), not by the server this console started", "error")
    assert badge_state(snap)[0] == "PORT TAKEN"


def test_n_minus_h_of_one_is_warned_and_n_h_stay_pinned():
    from console.widgets.spec_panel import gate_warnings, pinned_values

    def snap(n, h, **kw):
        return st.ConsoleSnapshot(gate=st.GateState.from_json({**GATE, "threshold": n, "hysteresis": h}), sample_seen=True, **kw)

    assert "N-H = 1: once off, never back on" in gate_warnings(snap(5, 4))
    assert "N-H = 1: once off, never back on" in gate_warnings(snap(1, 0))
    assert not [w for w in gate_warnings(snap(6, 4)) if "N-H" in w]
    assert pinned_values(snap(32, 4)) == "N 32 · H 4"
    pending = st.PendingChange(threshold=33, hysteresis=2, old_threshold=32, old_hysteresis=4, since=0.0)
    assert pinned_values(snap(32, 4, pending=pending)) == "N 32→33 · H 4→2"


def test_header_shows_the_actual_poll_interval_while_backing_off():
    from console.widgets.status_bar import status_segments

    snap = st.ConsoleSnapshot(interval_s=1.0, poll_delay_s=8.0, connection=st.ConnectionState(reachable=False))
    texts = [t for t, _ in status_segments(snap)]
    assert "retry every 8 s" in texts and "every 1 s" not in texts
    assert "every 1 s" in [t for t, _ in status_segments(replace(snap, poll_delay_s=1.0))]
    assert "every 0.5 s" in [t for t, _ in status_segments(replace(snap, interval_s=0.5, poll_delay_s=None))]


def test_log_filter_line():
    from console.widgets.log_panel import filter_line

    assert filter_line("", "", "", 0) == ""
    assert filter_line("spec_gate|console", "worker=", "decode", 15) == \
        "only: spec_gate|console · hide: worker= · search: decode (15 matches) · c clears"
    assert filter_line("", "", "x", 1) == "search: x (1 match) · c clears"


def test_demo_gate_measures_the_first_on_steps_after_each_switch():
    """The demo feeds server_patch's gate: the first ON batch after OFF steps is a resume step and
    is recorded a little below the usual accept length (the OFF steps kept the draft's KV current)."""
    import io

    from console import demo_server as ds

    args = ds.build_parser().parse_args(["--speculative-disable-batch-threshold", "16",
                                         "--speculative-disable-hysteresis", "2"])
    sim = ds.Simulation(args, ds.LogWriter(io.StringIO()))
    sim.accept_now = 3.0
    for batch in (10, 20, 10):  # on, off, on again
        sim.batch = batch
        sim._run_step(sim._decode_step(), graph=True)
    assert sim.gate.switches == 2 and sim.gate.spec_enabled
    assert sim.gate.accept_length_first_on_step == pytest.approx(2.9) and sim.gate.steps_since_on == 1
    assert sim.runner.off_resume_steps == 1 and sim.runner.off_kv_only_graph_replays == 1


def test_config_file_errors_name_the_file_and_key(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    cases = [
        ('[console]\ninterval = nan\n', "specconsole.toml: console.interval must be a number of seconds from 0.1 to 3600 (got nan)"),
        ('[console]\ninterval = 0\n', "console.interval must be a number of seconds from 0.1 to 3600 (got 0)"),
        ('[console]\nintervall = 1\n', "unknown [console] key(s) intervall"),
        ('[sever]\nattach = "x"\n', "unknown key(s) sever"),
        ('[server]\nargs = ["--model-path", "M"]\nattach = "http://127.0.0.1:30000"\n',
         "server.args (launch) and server.attach (watch) exclude each other"),
        ('[console]\ninterval = true\n', "console.interval has the wrong type"),
    ]
    for text, why in cases:
        (tmp_path / "specconsole.toml").write_text(text)
        with pytest.raises(SystemExit):
            cli.resolve([])
        err = capsys.readouterr().err
        assert why in err, (text, err)


def test_http_404_says_the_url_is_not_the_servers_root():
    from console.client import status_reason

    assert "no SGLang server at this URL" in status_reason(404)


# -- third fresh-user test (2026-11-30, second session) ---------------------------------------

@pytest.mark.parametrize("key, why", [
    ("ключ", "non-ASCII"),            # crashed the app inside httpx (and exited 0)
    ("abc ", "leading/trailing blank"),  # showed as a misleading 'protocol error' with the key on screen
    ("a\nb", "control characters"),
])
def test_api_keys_an_http_header_cannot_carry_are_refused_at_startup(tmp_path, monkeypatch, capsys, key, why):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    for argv in (["attach", "127.0.0.1:31010", "--api-key", key],
                 ["launch", "--", "--model-path", "M", "--api-key", key],
                 ["demo", "--", f"--admin-api-key={key}"]):
        with pytest.raises(SystemExit) as exc:
            cli.resolve(argv)
        assert exc.value.code != 0
        err = capsys.readouterr().err
        assert why in err and (not key.strip() or key.strip() not in err)  # never echoes the secret
    assert cli.resolve(["attach", "127.0.0.1:31010", "--api-key", "s3cr3t-Key_1"]).api_key == "s3cr3t-Key_1"
    with pytest.raises(SystemExit):
        cli.resolve(["attach", "127.0.0.1:31010", "--api-key", ""])
    assert "--api-key must be a non-empty string" in capsys.readouterr().err


def _config_error(tmp_path, monkeypatch, capsys, text: str) -> str:
    """``text`` as ./specconsole.toml (no user config): what plain ``specconsole`` exits with."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "specconsole.toml").write_text(text)
    with pytest.raises(SystemExit):
        cli.resolve([])
    return capsys.readouterr().err


@pytest.mark.parametrize("server, why", [
    ('attach = "127.0.0.1:1"\nlog = 5', "server.log must be a non-empty string"),
    ('args = ["--port", "31009"]\nlog_dir = 5', "server.log_dir must be a non-empty string"),
    ("attach = 5", "server.attach must be a non-empty string"),
    ('attach = "127.0.0.1:1"\napi_key = ["a"]', "server.api_key must be a non-empty string"),
    ('attach = "127.0.0.1:1"\napi_key = " k"', "server.api_key has control characters or a leading/trailing blank"),
    ('args = ["--model-path", "M"]\napi_key = "k"', "server.api_key applies only with server.attach"),
    ('api_key = "k"', "server.api_key applies only with server.attach"),
    ('log = "/tmp/x.log"', "server.log applies only with server.attach"),
    ('attach = "127.0.0.1:1"\nlog_dir = "logs"', "server.log_dir applies only with server.args"),
    ('args = ["--model-path", "M", "--port", "abc"]', "server.args --port must be a number from 1 to 65535"),
    ("args = []", "server.args is empty"),
])
def test_config_values_of_the_wrong_type_are_refused_with_file_and_key(tmp_path, monkeypatch, capsys, server, why):
    err = _config_error(tmp_path, monkeypatch, capsys, f"[server]\n{server}\n")
    assert "specconsole.toml" in err and why in err


def test_config_that_is_not_utf8_or_has_an_unknown_theme_names_the_file(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "specconsole.toml").write_bytes(b"\xff\xfe")
    with pytest.raises(SystemExit):
        cli.resolve([])
    assert "specconsole.toml: not UTF-8" in capsys.readouterr().err
    (tmp_path / "specconsole.toml").write_text('[console]\ntheme = "neon"\n')
    with pytest.raises(SystemExit):
        cli.resolve(["demo"])
    assert "specconsole.toml: console.theme: unknown theme 'neon'" in capsys.readouterr().err


@pytest.mark.parametrize("console, flag, why", [
    ('theme = "neon"', ["--theme", "dark"], "console.theme: unknown theme 'neon'"),
    ("interval = 0", ["--interval", "1"], "console.interval must be a number of seconds from 0.1"),
])
def test_a_bad_config_value_is_refused_even_when_a_flag_overrides_it(tmp_path, monkeypatch, capsys,
                                                                      console, flag, why):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "specconsole.toml").write_text(f"[console]\n{console}\n")
    with pytest.raises(SystemExit) as exc:
        cli.resolve([*flag, "demo"])
    assert exc.value.code == 2 and why in capsys.readouterr().err


def test_the_config_files_readonly_can_be_lifted_from_the_command_line(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "specconsole.toml").write_text("[console]\nreadonly = true\n")
    assert cli.resolve(["demo"]).readonly is True
    assert cli.resolve(["--no-readonly", "demo"]).readonly is False
    (tmp_path / "specconsole.toml").write_text("")
    assert cli.resolve(["--readonly", "demo"]).readonly is True


def test_an_unusable_default_log_dir_names_where_it_came_from(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("XDG_STATE_HOME", "/proc/nonexistent")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit):
        cli.resolve(["demo"])
    last = capsys.readouterr().err.splitlines()[-1]
    assert "default log directory /proc/nonexistent/specconsole/logs: cannot create it" in last
    assert "$XDG_STATE_HOME" in last and "choose another with --log-dir" in last


def test_attach_log_that_is_a_directory_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit):
        cli.resolve(["attach", "127.0.0.1:31010", "--log", str(tmp_path)])
    assert "is a directory; give the server's log file" in capsys.readouterr().err
    missing = tmp_path / "later.log"  # a file that does not exist yet is followed once it appears
    assert cli.resolve(["attach", "127.0.0.1:31010", "--log", str(missing)]).log_path == missing
    with pytest.raises(SystemExit):  # a fresh user's find: '' read as "--log . is a directory"
        cli.resolve(["attach", "127.0.0.1:31010", "--log", ""])
    assert "argument --log: is empty: give the server's log file" in capsys.readouterr().err


@pytest.mark.parametrize("make, kind", [
    (lambda p: os.mkfifo(p / "fifo") or p / "fifo", "a named pipe"),  # blocked quitting (fresh-user find)
    (lambda p: Path("/dev/zero"), "a device"),  # never ends: a core spent reading it
])
def test_attach_log_that_is_not_a_regular_file_is_refused(tmp_path, monkeypatch, capsys, make, kind):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    path = make(tmp_path)
    with pytest.raises(SystemExit) as exc:
        cli.resolve(["attach", "127.0.0.1:31010", "--log", str(path)])
    assert exc.value.code == 2 and f"--log {path} is {kind}; give the server's log file" in capsys.readouterr().err


def test_headless_check_says_why_spec_gate_was_not_seen(tmp_path, capsys):
    from console import headless_check

    port = modes.free_port()  # nothing listens there
    code = headless_check.main(["--url", f"http://127.0.0.1:{port}", "--out", str(tmp_path / "hc"),
                                "--timeout", "1", "--gpus", "sim"])
    out = capsys.readouterr().out  # (the progress lines go through Textual's stdout capture here)
    observed = json.loads((tmp_path / "hc" / "observed.json").read_text())
    assert code == 1 and observed["steps"][0] == {"step": "spec_gate seen", "ok": False, "why": "connection refused"}
    assert "after.svg" not in out  # only what was written is listed


async def test_headless_check_says_when_its_log_proves_nothing(tmp_path):
    """Second fresh-user pass: `--log /nonexistent` printed a plain OK; the check still passes (the
    live worker class is known) but now says the log did not confirm it."""
    from console import headless_check
    from console_support import DemoServer

    srv = DemoServer(tmp_path, ["--load", "fixed:2"]).wait_ready()
    try:
        lines: list[str] = []
        cfg = AppConfig(mode="attach", url=srv.url, log_path=tmp_path / "nope.log", interval_s=0.2,
                        log_dir=tmp_path, nvml="sim")
        result = await headless_check.run_check(cfg, tmp_path / "hc", size=(100, 30), timeout=10,
                                                restore=True, progress=lines.append)
    finally:
        srv.stop()
    assert result["ok"] is True
    assert any(x.startswith(f"note: worker class not cross-checked with {tmp_path / 'nope.log'}: unverified")
               for x in lines), lines


def _hc_model(reachable=True, sample=True, gate=None, last_error=None):
    return types.SimpleNamespace(connection=st.ConnectionState(reachable=reachable, last_error=last_error),
                                 sample=object() if sample else None, gate=gate)


def test_headless_check_knows_answers_that_can_never_show_a_gate():
    from console.headless_check import final_answer

    assert final_answer(_hc_model(reachable=None, sample=False)) is None  # nothing yet
    assert final_answer(_hc_model(reachable=False, sample=False, last_error="connection refused")) is None  # starting?
    assert "has no spec_gate" in final_answer(_hc_model())
    assert "spec_gate has no usable threshold" in final_answer(_hc_model(gate=st.GateState.from_json({**GATE, "threshold": "x"})))
    assert final_answer(_hc_model(reachable=False, sample=False, last_error="HTTP 404: no SGLang server at this URL")) \
        == "HTTP 404: no SGLang server at this URL"
    assert final_answer(_hc_model(reachable=False, sample=False, last_error=st.NOT_JSON_REASON)) == st.NOT_JSON_REASON
    assert final_answer(_hc_model(gate=st.GateState.from_json(GATE))) is None
    huge = st.GateState.from_json({**GATE, "threshold": 10**12, "max_running_requests": None})
    assert "threshold 1000000000000 is above any batch size" in final_answer(_hc_model(gate=huge))
    absurd = st.GateState.from_json({**GATE, "threshold": 10**30, "max_running_requests": None})  # no JSON int
    assert "spec_gate has no usable threshold" in final_answer(_hc_model(gate=absurd))
    above = st.GateState.from_json({**GATE, "threshold": 97, "max_running_requests": 96})
    assert "above its max running requests 96" in final_answer(_hc_model(gate=above))
    assert final_answer(_hc_model(reachable=False, sample=False, last_error="protocol error: connection closed "
                                  "without an HTTP answer (an https:// server?)")).startswith("protocol error")
    crashed = _hc_model(reachable=False, sample=False, last_error="connection refused")
    crashed.process = st.ProcessState(phase=st.PHASE_CRASHED, exit_code=1,
                                      last_lines=("needs SGLang 0.5.12: No module named 'orjson'",))
    assert final_answer(crashed) == "the server exited (code 1); last log line: needs SGLang 0.5.12: No module named 'orjson'"
    crashed.process = st.ProcessState(phase=st.PHASE_CRASHED, error="port 30000 is taken")
    assert final_answer(crashed) == "the server was not started: port 30000 is taken"


def test_headless_check_stops_waiting_once_the_answer_is_final(monkeypatch):
    import asyncio

    from console import headless_check

    clock = [0.0]
    monkeypatch.setattr(headless_check.time, "monotonic", lambda: clock[0])

    class Pilot:
        async def pause(self, s):
            clock[0] += s

    seen, why = asyncio.run(headless_check._wait_for_gate(Pilot(), _hc_model(), timeout=60))
    assert not seen and "has no spec_gate" in why
    assert clock[0] < 60 and clock[0] >= headless_check.FINAL_ANSWER_S  # gave up early, not at once
    clock[0] = 0.0
    seen, why = asyncio.run(headless_check._wait_for_gate(
        Pilot(), _hc_model(reachable=False, sample=False, last_error="connection refused"), timeout=3))
    assert (seen, why) == (False, None) and clock[0] >= 3  # refused: may still be starting, waits it out
    seen, why = asyncio.run(headless_check._wait_for_gate(Pilot(), _hc_model(gate=st.GateState.from_json(GATE)), 60))
    assert (seen, why) == (True, None)
    absurd = st.GateState.from_json({**GATE, "threshold": 10**12, "max_running_requests": None})
    seen, why = asyncio.run(headless_check._wait_for_gate(Pilot(), _hc_model(gate=absurd), 60))
    assert not seen and "above any batch size" in why  # not "gate seen", then +1 sent to 10**12


def test_absurd_numbers_from_a_broken_server_show_as_n_a_or_short():
    g = st.GateState.from_json({**GATE, "switches": -5, "max_running_requests": -1, "accept_length_recent": float("nan"),
                                "threshold": 1e300})
    assert g.switches is None and g.max_running_requests is None and g.accept_length_recent is None
    assert fmt.num(g.threshold) == "n/a"  # not 300 digits over six lines (no JSON number is that integer)
    assert st.GateState.from_json({**GATE, "last_decode_batch_size": 1e308}).last_decode_batch_size is None
    assert fmt.num(1e300, "tok/s") == "1e+300 tok/s" and fmt.num(8574.2, "tok/s") == "8,574 tok/s"


# -- second fresh-user pass (same session) ---------------------------------------------------

def test_keys_with_inner_spaces_are_accepted_and_never_shown(tmp_path, monkeypatch):
    from console.config import redact_args

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    # SGLang compares the key as a plain string: an inner space is a valid key
    assert cli.resolve(["attach", "127.0.0.1:31010", "--api-key", "my secret key"]).api_key == "my secret key"
    cfg = cli.resolve(["launch", "--", "--model-path", "M", "--api-key=SEKRIT99", "--admin-api-key", "ADMINSEK"])
    shown = " ".join(redact_args(cfg.server_command))
    assert "SEKRIT99" not in shown and "ADMINSEK" not in shown
    assert "--api-key=***" in shown and "--admin-api-key ***" in shown


def test_log_file_marker_line_does_not_carry_the_key(tmp_path):
    from console.process import ServerProcess

    log = tmp_path / "server.log"
    proc = ServerProcess([sys.executable, "-c", "pass", "--api-key", "TOPSECRET42"], log)
    proc.start()
    proc.popen.wait(timeout=10)
    text = log.read_text()
    assert "TOPSECRET42" not in text and "--api-key '***'" in text  # (shlex-quoted)


@pytest.mark.parametrize("url", ["http://admin:PWSEKRIT@127.0.0.1:1", "http://admin:PWSEKRIT@127.0.0.1:99999",
                                 "127.0.0.1:1/?api_key=QSEKRIT"])
def test_urls_with_credentials_are_refused_without_echoing_them(url, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit):
        cli.resolve(["attach", url])
    err = capsys.readouterr().err
    assert "no user:password@" in err and "SEKRIT" not in err


@pytest.mark.parametrize("argv, why", [
    (["demo", "--", "--port", "0"], "demo server --port must be a number from 1 to 65535"),
    (["demo", "--", "--port", "70000"], "demo server --port must be a number from 1 to 65535"),
    (["launch", "--", "--model-path", "M", "--port", "abc"], "server --port must be a number"),
    (["launch", "--", "--model-path", "M", "--host", "bad host"], "is not a host name or IP address"),
])
def test_server_addresses_the_console_could_not_watch_are_refused(argv, why, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit):
        cli.resolve(argv)
    assert why in capsys.readouterr().err


def test_config_with_a_utf8_bom_is_read(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "specconsole.toml").write_bytes(b"\xef\xbb\xbf[console]\ninterval = 2.5\n")
    assert cli.resolve(["demo"]).interval_s == 2.5


def test_http_431_names_the_likely_cause():
    from console.client import status_reason

    assert "is the API key that long?" in status_reason(431, api_key_given=True)
    assert status_reason(431) == "HTTP 431: request headers too large"


def test_exit_code_says_the_launched_server_crashed():
    assert cli.exit_code(0, None) == 0
    assert cli.exit_code(0, st.ProcessState(phase=st.PHASE_READY)) == 0
    assert cli.exit_code(0, st.ProcessState(phase=st.PHASE_CRASHED, exit_code=1)) == cli.EXIT_SERVER_CRASHED == 3
    assert cli.exit_code(1, st.ProcessState(phase=st.PHASE_CRASHED, exit_code=1)) == 1  # the console's own crash wins


# fresh-user pass 3 (2026-11-30): refused before the screen opens, and messages that say what is wrong

def test_a_log_dir_the_console_cannot_write_is_refused_before_the_screen_opens(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    a_file = tmp_path / "notes.txt"
    a_file.write_text("x")
    for argv, says in ((["demo", "--log-dir", str(a_file)], "is a file, not a directory"),
                       (["launch", "--log-dir", str(a_file / "sub"), "--", "--model-path", "M"], "cannot create it"),
                       (["demo", "--log-dir", "/proc/nonexistent/x"], "cannot create it"),
                       (["demo", "--log-dir", "/proc"], "cannot write a log file there"),  # os.access said yes
                       (["demo", "--log-dir", ""], "an empty path"),  # was: the current directory
                       (["launch", "--log-dir", " ", "--", "--model-path", "M"], "an empty path")):
        with pytest.raises(SystemExit) as exc:
            cli.resolve(argv)
        assert exc.value.code == 2
        last = capsys.readouterr().err.splitlines()[-1]
        assert "--log-dir" in last and says in last
    cfg = cli.resolve(["demo", "--log-dir", str(tmp_path / "new" / "logs")])  # created at the launch, not here
    assert not (tmp_path / "new").exists() and cfg.log_dir == tmp_path / "new" / "logs"
    monkeypatch.setattr(cli, "_stdout_is_terminal", lambda: False)  # refused later: still nothing left behind
    assert cli.main(["demo", "--log-dir", str(tmp_path / "new" / "logs")]) == 2
    assert not (tmp_path / "new").exists()
    (tmp_path / "specconsole.toml").write_text(f'[server]\nargs = ["--port", "31004"]\nlog_dir = "{a_file}"\n')
    with pytest.raises(SystemExit):
        cli.resolve([])
    assert "server.log_dir" in capsys.readouterr().err


def test_config_that_names_no_server_or_is_a_directory_says_so(tmp_path, monkeypatch, capsys):
    from console.screens.no_server import NoServerScreen

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("console.client.probe", lambda url, timeout_s=0.7: False)
    assert cli.resolve([]).config_path is None
    assert NoServerScreen("http://127.0.0.1:30000", "/cfg").why.startswith("No `specconsole.toml`")
    for text in ("", "[server]\n", '[console]\ntheme = "light"\n'):
        (tmp_path / "specconsole.toml").write_text(text)
        cfg = cli.resolve([])
        assert cfg.mode == "none" and cfg.config_path == str(tmp_path / "specconsole.toml")
        why = NoServerScreen(cfg.url, "/cfg", cfg.config_path).why
        assert "names no server" in why and "No `specconsole.toml`" not in why
    (tmp_path / "specconsole.toml").unlink()
    (tmp_path / "specconsole.toml").mkdir()
    with pytest.raises(SystemExit):
        cli.resolve([])
    assert "specconsole.toml is not a file" in capsys.readouterr().err


@pytest.mark.parametrize("text, says", [
    ('[server]\nlog = "/tmp/x.log"', "a launched server's log is written by the console"),
    ('[server]\napi_key = "k"', "a launched server's key goes in server.args as --api-key"),
    ('[console]\ninterval = "fast"', "console.interval has the wrong type: expected a number of seconds"),
    ('[console]\nreadonly = "yes"', "console.readonly has the wrong type: expected true or false, got 'yes'"),
])
def test_config_messages_name_what_each_key_expects(tmp_path, monkeypatch, capsys, text, says):
    err = _config_error(tmp_path, monkeypatch, capsys, text + "\n")
    assert says in err
    if "log" in text:
        assert "api-key" not in err  # the message is about the log, not the key


def test_a_server_whose_spec_gate_has_no_threshold_gets_no_change_sent():
    """A non-SGLang server answering /server_info with a junk spec_gate: `t` and +/- are refused
    (a change was sent, logged as 'threshold None -> 5' and followed by 'spec_gate shows ... None')."""
    m = ConsoleModel()
    m.on_sample(parse_server_info({"internal_states": [{"spec_gate": {"worker_class": "x"}}]}, None))
    for refused in (m.check_request(), m.check_request(5, 1), said(m.request_change(5, 1))[1], said(m.step_threshold(1))[1]):
        assert "spec_gate has no threshold (it does not follow specconsole's contract" in refused
    assert m.next_to_send() is None


def test_an_answer_that_is_not_json_is_one_line_without_the_page():
    from console.client import answer_summary

    page = "<!DOCTYPE HTML>\n<html lang=\"en\">\n<head>\n" + "<p>x</p>\n" * 50
    html = httpx.Response(501, text=page, headers={"content-type": "text/html;charset=utf-8"})
    assert answer_summary(html) == "HTTP 501 with an HTML page (not SGLang's JSON)"
    assert answer_summary(httpx.Response(200, text=page)) == "HTTP 200 with an HTML page (not SGLang's JSON)"
    assert answer_summary(httpx.Response(502, text="")) == "HTTP 502 with an empty body"
    long = httpx.Response(200, text="upstream\nerror " + "y" * 200)
    said = answer_summary(long)
    assert "\n" not in said and len(said) < 110 and said.startswith("HTTP 200 with 'upstream error yyy")
    m = ConsoleModel()
    m.on_sample(_sample())
    m.request_change(40, None)
    [text] = lines(m.on_set_failure(m.next_to_send(), answer_summary(html)))
    assert text == "set threshold 40: the server answered HTTP 501 with an HTML page (not SGLang's JSON); not confirmed"
    m.request_change(41, None)
    [text] = lines(m.on_set_failure(m.next_to_send(), st.NOT_JSON_REASON))
    assert text == f"set threshold 41: the server answered, but its {st.NOT_JSON_REASON}; not confirmed"


def test_the_threshold_dialog_checks_the_hysteresis_and_names_the_limit():
    assert parse_request("33", "33", 32, 4, 96) == "hysteresis 33 refused: must be < threshold 33"
    assert parse_request("", "1000000", 32, 4, 96) == "hysteresis 1000000 refused: must be < threshold 32"
    assert parse_request("", "-1", 32, 4, 96) == "hysteresis -1 refused: must be >= 0"
    assert parse_request("1000000000", "", 32, 4, 96) == "threshold 1000000000 is out of range (at most 96)"
    assert parse_request("8", "", 32, 4, 96) == ThresholdRequest(8, None)  # H 4 < 8: fine
    assert parse_request("4", "", 32, 4, 96) == "hysteresis 4 refused: must be < threshold 4"


@pytest.mark.parametrize("argv, says", [
    (["--out", "FILE"], "is a file; give a directory"),
    (["--size", "10x3"], "--size must be from 80x24"),
    (["--size", "99999x99999"], "to 1000x500"),
    (["--out", ""], "--out is empty"),
    (["--out", "FILE/sub"], "cannot write there"),
    (["--size", "big"], "--size must look like 160x50"),
    (["--timeout", "-1"], "--timeout must be a number of seconds > 0"),
    (["--interval", "0"], "--interval must be a number of seconds from 0.1"),
    (["--log", "DIR"], "is a directory; give the server's log file"),
])
def test_headless_check_refuses_bad_options_before_starting_anything(tmp_path, capsys, argv, says):
    from console import headless_check

    a_file = tmp_path / "f"
    a_file.write_text("x")
    argv = [x.replace("FILE", str(a_file)).replace("DIR", str(tmp_path)) for x in argv]
    if "--out" not in argv:
        argv += ["--out", str(tmp_path / "out")]
    with pytest.raises(SystemExit) as exc:
        headless_check.main(["--demo", *argv])
    assert exc.value.code == 2 and says in capsys.readouterr().err
    assert not (tmp_path / "out").exists() or "--out" not in argv[-2:]  # nothing started


@pytest.mark.parametrize("url,says", [
    ("ftp://x", "use http:// or https://"),
    ("not a url", "is not a host name or IP address"),
    ("http://127.0.0.1:99999", "port 99999 is out of range"),
    ("http://user:pw@127.0.0.1:30000", "no user:password@"),
    ("", "has no host"),
])
def test_headless_check_refuses_a_bad_url_at_once_as_attach_does(tmp_path, capsys, url, says):
    """It waited the whole --timeout (60 s) and then blamed the server ('no answer')."""
    from console import headless_check

    with pytest.raises(SystemExit) as exc:
        headless_check.main(["--url", url, "--out", str(tmp_path / "out")])
    assert exc.value.code == 2 and says in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


async def test_headless_check_restores_the_threshold_when_a_screenshot_cannot_be_written(tmp_path):
    """A screenshot that fails (after.svg made a directory after the start-up check) fails the
    check but does not leave the server at the changed threshold (it did: 33 instead of 32)."""
    from console import headless_check
    from console.modes import demo_config

    cfg = demo_config(AppConfig(interval_s=0.2, log_dir=tmp_path / "logs", nvml="sim"),
                      extra=["--startup-seconds", "0.2", "--load", "fixed:8"])
    out = tmp_path / "out"
    (out / "after.svg").mkdir(parents=True)
    from console.nvml_sim import SimulatedNvml

    result = await headless_check.run_check(cfg, out, size=(100, 30), timeout=20, restore=True,
                                            nvml_module=SimulatedNvml(seed=0), ready_timeout=20)
    assert result["confirmed"] is True and result["restored"] is True
    assert result["ok"] is False and "after.svg" in result["screenshot_errors"][0]


def test_headless_check_stopped_by_sigterm_stops_its_server_and_writes_what_it_saw(tmp_path):
    """Fresh-user finding: `timeout 300 python -m console.headless_check --launch ...` left
    nothing in --out (and the default SIGTERM action would leave the launched server running)."""
    out = tmp_path / "hc"
    port = modes.free_port()
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}  # its demo log stays in tmp_path
    proc = subprocess.Popen([sys.executable, "-m", "console.headless_check", "--demo", "--out", str(out),
                             "--timeout", "60", "--", "--startup-seconds", "60", "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not _demo_servers(port):
        time.sleep(0.1)
    assert _demo_servers(port), "the demo server was never started"
    proc.send_signal(signal.SIGTERM)
    text = proc.communicate(timeout=30)[0]
    assert proc.returncode == 1 and "interrupted" in text
    observed = json.loads((out / "observed.json").read_text())
    assert observed["interrupted"] == "SIGTERM" and observed["ok"] is False
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _demo_servers(port):
        time.sleep(0.1)
    assert not _demo_servers(port)  # the demo server it started is gone


def _demo_servers(port: int) -> list[int]:
    """PIDs of demo servers started for ``port`` (from /proc: Linux, as CI)."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        if b"console.demo_server" in args and str(port).encode() in args:
            pids.append(int(d))
    return pids


def test_a_config_log_dir_without_server_args_is_refused(tmp_path, monkeypatch, capsys):
    """Fresh-user find: ``[server] log_dir = "logs"`` alone was ignored without a word (with attach it was refused)."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "specconsole.toml").write_text('[server]\nlog_dir = "logs"\n')
    with pytest.raises(SystemExit) as exc:
        cli.resolve([])
    assert exc.value.code == 2 and "server.log_dir applies only with server.args" in capsys.readouterr().err


def test_the_console_refuses_a_stdout_that_is_not_a_terminal(tmp_path):
    """Fresh-user find: ``specconsole </dev/null | tail`` started the TUI and wrote its escape codes into the pipe."""
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "xdg"), "XDG_STATE_HOME": str(tmp_path / "state")}
    proc = subprocess.run([sys.executable, "-m", "console", "attach", "127.0.0.1:9"], cwd=tmp_path, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    assert "standard output is not a terminal" in proc.stderr and "headless_check" in proc.stderr


def test_a_server_string_longer_than_any_of_the_contract_is_cut():
    """Fresh-user find: a 3,000-character worker_class made a notice that covered half the screen."""
    g = st.GateState.from_json({**GATE, "worker_class": "EAGLEWorkerV2" + "x" * 3000})
    assert len(g.worker_class) == st.MAX_STR and g.worker_class.endswith("…")
    assert st.GateState.from_json(GATE).worker_class == GATE["worker_class"]


def test_a_timeout_after_connecting_is_not_answering_and_one_before_is_a_connect_timeout():
    import httpx

    from console import client

    assert client._reason(httpx.ReadTimeout("x")) == st.NO_ANSWER_REASON
    assert client._reason(httpx.ConnectTimeout("x")) == "connect timed out"
    assert st.ConnectionState(reachable=False, last_error="connect timed out").down_word == "unreachable"
    m = ConsoleModel(clock=lambda: 10.0)
    m.on_failure(st.NO_ANSWER_REASON)
    assert m.snapshot().connection.down_word == "not answering"


def test_a_relative_xdg_directory_is_ignored_as_the_spec_says(monkeypatch, tmp_path):
    """Fresh-user find: XDG_CONFIG_HOME=relative was read from the working directory."""
    from console import config

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", "relative")
    monkeypatch.setenv("XDG_STATE_HOME", "also/relative")
    assert config.user_config_dir() == tmp_path / ".config" / "specconsole"
    assert config.default_log_dir() == tmp_path / ".local" / "state" / "specconsole" / "logs"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    assert config.user_config_dir() == tmp_path / "cfg" / "specconsole"


def test_one_change_for_every_server_is_checked_against_each_servers_own_values():
    """Fresh-user finds (T): H 10 was sent to a server of N 7 (which rejected it), and a server
    already at N 7 / H 2 logged 'request threshold 7 -> 7, hysteresis 2 -> 2'."""
    m = ConsoleModel()
    m.on_sample(_sample(threshold=7, hysteresis=2))
    out = m.request_change(None, 10)
    assert not out.ok and "hysteresis" in out.log_lines[0] and m.next_to_send() is None
    same = m.request_change(7, 2)
    assert same.ok and same.log_lines == ("already threshold 7, hysteresis 2: nothing sent",)
    assert m.next_to_send() is None and m.pending is None


def test_a_listener_whose_connect_times_out_is_named_as_such_not_as_another_address(monkeypatch):
    """Fresh-user find: a listener on the same address whose accept queue was full (the connect
    timed out) was called "a process listening on another address"."""
    from console import portcheck

    monkeypatch.setattr(portcheck, "_accepts", lambda host, port, timeout_s: None)  # timed out
    monkeypatch.setattr(portcheck, "_bind_in_use", lambda host, port: True)
    text = portcheck.port_problem("127.0.0.1", 38333, hint="h")
    assert "does not accept connections in time (its queue may be full)" in text
    monkeypatch.setattr(portcheck, "_accepts", lambda host, port, timeout_s: False)  # refused: elsewhere
    assert "listening on another address" in portcheck.port_problem("127.0.0.1", 38333, hint="h")
    monkeypatch.setattr(portcheck, "_bind_in_use", lambda host, port: False)
    assert portcheck.port_problem("127.0.0.1", 38333, hint="h") is None


def test_minus_from_a_threshold_above_max_running_goes_to_the_limit():
    """Fresh-user find: a server started with N 24 and max running requests 20 (N never fires):
    ``-`` was refused ('threshold 23 refused: above max running requests 20'), so only ``t`` got
    out. A step down now goes to the limit, with a notice; ``+`` is still refused."""
    m = ConsoleModel(clock=lambda: 0.0)
    gate = {**GATE, "threshold": 24, "hysteresis": 4, "max_running_requests": 20}
    m.on_sample(parse_server_info({"internal_states": [{"spec_gate": gate}]}, None), polled_at=0.0)
    out = m.step_threshold(-1)
    assert out.ok and out.notice == "threshold 24 is above max running requests 20: - goes to 20"
    assert m.next_to_send() == {"threshold": 20}
    assert not m.step_threshold(+1).ok


def test_an_accept_length_no_eagle_step_can_make_is_shown_marked():
    from console.servers import server_row
    from server_patch import contract

    assert contract.accept_length_problem(2.94, 3) is None and contract.accept_length_problem(4.0, 3) is None
    assert contract.accept_length_problem(None, 3) is None and contract.accept_length_problem(0.0, None) is None
    assert "> 4" in contract.accept_length_problem(1e308, 3)  # 3 draft steps emit at most 4 tokens a step
    assert "not a token count" in contract.accept_length_problem(-1.0, None)
    assert "not a token count" in contract.accept_length_problem(float("inf"), 3)
    text = _details(accept_length_recent=1e308)
    assert "accept 1e+308 tok/step ⚠ accept length 1e+308 > 4 (num_steps 3 + 1)" in text
    assert "⚠ accept length" not in _details()  # 2.94 with 3 steps: plausible, unmarked
    snap = st.ConsoleSnapshot(gate=st.GateState.from_json({**GATE, "accept_length_recent": 9.5}), sample_seen=True)
    assert server_row(snap).accept == "9.50!"
    snap = st.ConsoleSnapshot(gate=st.GateState.from_json(GATE), sample_seen=True)
    assert server_row(snap).accept == "2.94"


def test_the_demo_server_logs_no_traceback_for_a_client_that_went_away(capsys):
    """A fresh user's find: SIGSTOP the demo past the console's timeout, SIGCONT: BrokenPipeError
    tracebacks in the log pane and later in the crash dialog's last lines."""
    from console.demo_server import _DemoHTTPServer

    server = _DemoHTTPServer.__new__(_DemoHTTPServer)  # handle_error only: no socket
    for exc in (BrokenPipeError(32, "Broken pipe"), ConnectionResetError(104, "reset")):
        try:
            raise exc
        except ConnectionError:
            server.handle_error(None, ("127.0.0.1", 1))
    assert "Traceback" not in capsys.readouterr().err
    try:
        raise ValueError("a real bug")
    except ValueError:
        server.handle_error(None, ("127.0.0.1", 1))
    assert "ValueError: a real bug" in capsys.readouterr().err
