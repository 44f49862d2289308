"""The console and the demo server with the auto threshold: mode, reason, learned curve, keys."""

from __future__ import annotations

import io

import pytest

from console import demo_server as ds
from console import state as st
from console.app import SpecConsoleApp
from console.model import ConsoleModel
from console.screens.threshold_dialog import ThresholdRequest, parse_request
from console.widgets.spec_panel import badge_state, detail_lines, pinned_values
from console_support import demo_cfg, screen_text, wait_for
from server_patch import contract

SIZE = (120, 40)


def _sim(threshold: str, load: str):
    args = ds.build_parser().parse_args([contract.THRESHOLD_FLAG, threshold, "--load", load])
    return ds.Simulation(args, ds.LogWriter(io.StringIO()))


def test_the_demo_learns_the_crossover_of_its_h200_table():
    """console/throughput.py: EAGLE-3 wins at 4 requests (938 vs 743 tok/s), loses at 16 (2457 vs 2871)."""
    sim = _sim("auto", "4")
    for batch in (1, 4, 8, 16, 64, 128):
        sim.batch = batch
        for _ in range(1500):
            sim._run_step(sim._decode_step(), graph=True)
    gate = sim.spec_gate()
    assert gate["mode"] == "auto" and 5 <= gate["threshold"] <= 16, gate["threshold"]
    buckets = {b["lo"]: b for b in gate["auto_buckets"]}
    assert buckets[4]["on"] is True and buckets[64]["on"] is False
    # ON is never probed at 128: OFF is well ahead at 64 already (auto_threshold.IMPLY_RATIO)
    assert gate["auto_reason"].startswith("auto: OFF at batch 128 (est. OFF "), gate["auto_reason"]
    assert "OFF ahead at smaller batches; crossover" in gate["auto_reason"]
    assert 0 < gate["auto_probe_share"] <= gate["auto_probe_time_share"] <= 0.05  # ON probes cost more than OFF steps


def _gate(**kw) -> st.GateState:
    base = {"worker_class": "EAGLEWorkerV2", "spec_version": "v2", "spec_enabled": False, "threshold": 24,
            "hysteresis": 2, "mode": "auto", "last_decode_batch_size": 40, "max_running_requests": 128,
            "auto_reason": "auto: OFF at batch 40 (est. ON 4,700 vs OFF 5,200 tok/s)", "auto_probes": 3,
            "auto_probe_share": 0.004,
            "auto_buckets": [{"lo": 16, "hi": 23, "on_tok_s": 3456.0, "off_tok_s": 2953.0, "on": True},
                             {"lo": 32, "hi": 47, "on_tok_s": 4737.0, "off_tok_s": 5192.0, "on": False}]}
    return st.GateState.from_json({**base, **kw})


def test_the_panel_says_auto_why_and_shows_the_learned_curve():
    from rich.style import Style

    snap = st.ConsoleSnapshot(gate=_gate(), sample_seen=True, connection=st.ConnectionState(reachable=True))
    assert badge_state(snap) == ("SPEC OFF", "auto: OFF at batch 40 (est. ON 4,700 vs OFF 5,200 tok/s)", "-off")
    assert pinned_values(snap) == "N auto (≈24)"
    text = "\n".join(x.plain for x in detail_lines(snap, {k: Style() for k in
                                                          ("label", "value", "dim", "ok", "alarm", "pending")}, 80))
    assert "threshold auto (crossover ≈ 24 req)" in text and "auto probes 3 (0.4% of decode steps)" in text
    assert "32-47     4,737      5,192  OFF ◀ batch 40" in text and "16-23     3,456      2,953  ON" in text
    assert "N-H" not in text  # the manual rules' warnings do not apply
    timed = st.ConsoleSnapshot(gate=_gate(auto_probe_time_share=0.011), sample_seen=True)
    text = "\n".join(x.plain for x in detail_lines(timed, {k: Style() for k in
                                                            ("label", "value", "dim", "ok", "alarm", "pending")}, 80))
    assert "auto probes 3 (0.4% of decode steps, ~1.1% of decode time)" in text
    learning = st.ConsoleSnapshot(gate=_gate(threshold=None), sample_seen=True)
    assert pinned_values(learning) == "N auto (learning)"


def _model(gate: st.GateState) -> ConsoleModel:
    now = [0.0]
    m = ConsoleModel(clock=lambda: now[0])
    m.now = now
    m.on_sample(st.ServerSample("0.5.12", gate, None))
    return m


def test_a_toggles_auto_and_plus_leaves_auto_at_the_crossover():
    m = _model(_gate(mode="manual", threshold=32))
    out = m.toggle_auto()
    assert out.ok and out.log_lines == ("request threshold 32 -> auto",) and m.next_to_send() == {"threshold": "auto"}
    auto = _model(_gate())
    assert auto.toggle_auto().log_lines == ("request threshold auto -> 24",)
    assert _model(_gate()).step_threshold(1).log_lines == ("request threshold auto -> 25",)
    refused = _model(_gate(threshold=None)).step_threshold(1)
    assert not refused.ok and "has not found a crossover yet" in refused.log_lines[0]


def test_the_no_crossover_refusal_goes_once_the_auto_threshold_has_one():
    """Fresh-user finding: "has not found a crossover yet" stayed under "crossover ≈ 8 req"."""
    m = _model(_gate(threshold=None))
    assert not m.toggle_auto().ok and "has not found a crossover yet" in (m.message or "")
    m.on_sample(st.ServerSample("0.5.12", _gate(threshold=None), None))
    assert m.message is not None  # still learning: the reason still holds
    m.on_sample(st.ServerSample("0.5.12", _gate(threshold=8), None))
    assert m.message is None


def test_leaving_auto_below_the_hysteresis_brings_the_hysteresis_down_with_it():
    """Fresh-user finding: with H 19 and a learned crossover of 8, `a` and `+` were refused
    ("must be > hysteresis 19") and auto stayed on."""
    out = _model(_gate(threshold=8, hysteresis=19)).toggle_auto()
    # not N - 1: speculation must still come back on below N - H (second fresh-user pass)
    assert out.ok and out.log_lines == ("request threshold auto -> 8, hysteresis 19 -> 3",)
    assert out.notice == "hysteresis 19 -> 3: it must stay below threshold 8 (speculation back on below 5)"
    m = _model(_gate(threshold=8, hysteresis=19))
    assert m.step_threshold(1).log_lines == ("request threshold auto -> 9, hysteresis 19 -> 4",)
    assert m.next_to_send() == {"threshold": 9, "hysteresis": 4}
    low = _model(_gate(threshold=2, hysteresis=19)).toggle_auto()
    assert low.log_lines == ("request threshold auto -> 2, hysteresis 19 -> 0",)
    kept = _model(_gate(threshold=8, hysteresis=2)).toggle_auto()
    assert kept.log_lines == ("request threshold auto -> 8",) and kept.notice is None


def test_auto_is_confirmed_by_the_mode_and_its_moving_crossover_is_not_an_outside_change():
    m = _model(_gate(mode="manual", threshold=32))
    m.toggle_auto()
    sent = m.next_to_send()
    m.on_set_result(sent, st.SetResult(True, None, None, 2, 100))
    m.now[0] = 10.0
    out = m.on_sample(st.ServerSample("0.5.12", _gate(threshold=20), None), polled_at=10.0)
    assert out.log_lines == ("threshold 32 -> auto confirmed by spec_gate",)
    assert m.on_sample(st.ServerSample("0.5.12", _gate(threshold=28), None)).log_lines == ()  # it learns on


def test_the_dialog_takes_auto():
    assert parse_request("auto", "", 32, 4, 96) == ThresholdRequest("auto", None)
    assert parse_request("AUTO", "2", 32, 4, 96) == ThresholdRequest("auto", 2)
    assert "not a whole number" in parse_request("automatic", "", 32, 4, 96)
    # with auto, H is kept for a later manual N, at most max running requests: refused before sending
    assert parse_request("auto", "200", 32, 4, 96) == "hysteresis 200 refused: must be < max running requests 96"
    assert parse_request("auto", "95", 32, 4, 96) == ThresholdRequest("auto", 95)


async def test_a_in_the_console_switches_the_demo_to_auto_and_back(tmp_path):
    app = SpecConsoleApp(demo_cfg(tmp_path, ["--load", "fixed:8"]))
    try:
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: app.model.gate is not None, what="spec_gate")
            await pilot.press("a")
            await wait_for(pilot, lambda: app.model.gate.mode == "auto", what="auto on the server")
            await wait_for(pilot, lambda: "N auto" in screen_text(app) and "auto:" in screen_text(app),
                           what="auto on screen")
            await wait_for(pilot, lambda: "confirmed" in (app.model.message or ""), what="confirmed")
    finally:
        app.shutdown_server()


@pytest.mark.parametrize("argv", [["--speculative-disable-batch-threshold", "auto"]])
def test_the_demo_cli_takes_auto(argv):
    args = ds.build_parser().parse_args(argv)
    ds.check_args(ds.build_parser(), args)
    assert ds.Simulation(args, ds.LogWriter(io.StringIO())).gate.config.auto


def test_a_reason_too_long_for_the_panel_keeps_the_estimates_in_shorter_words():
    """Fresh-user find: the server's reason (~75 columns) never fit the ~62-column panel, which fell
    back to "auto: decode batch 40" and hid why."""
    long = "auto: OFF at batch 40 (est. ON 4,737 vs OFF 5,192 tok/s; crossover 24, OFF ahead at smaller batches)"
    snap = st.ConsoleSnapshot(gate=_gate(auto_reason=long), sample_seen=True,
                              connection=st.ConnectionState(reachable=True))
    assert badge_state(snap, 62)[1] == "auto: OFF at batch 40 (ON 4,737 vs OFF 5,192 tok/s)"
    assert badge_state(snap, 40)[1] == "batch 40: ON 4.7k vs OFF 5.2k tok/s"
    assert badge_state(snap, 30)[1] == "auto: decode batch 40"


def test_the_learned_curve_says_which_modes_are_ties_or_outvoted():
    """Fresh-user find: buckets marked OFF with ON estimated ahead, and nothing said why."""
    from rich.style import Style

    gate = _gate(auto_buckets=[
        {"lo": 6, "hi": 7, "on_tok_s": 1500.0, "off_tok_s": 1477.0, "on": False},  # 1.6%: a tie
        {"lo": 8, "hi": 11, "on_tok_s": 2100.0, "off_tok_s": 1900.0, "on": False},  # ON ahead 10%: lost the fit
        {"lo": 32, "hi": 47, "on_tok_s": 4737.0, "off_tok_s": 5192.0, "on": False}])
    snap = st.ConsoleSnapshot(gate=gate, sample_seen=True, connection=st.ConnectionState(reachable=True))
    text = "\n".join(x.plain for x in detail_lines(snap, {k: Style() for k in
                                                          ("label", "value", "dim", "ok", "alarm", "pending")}, 80))
    assert "6-7     1,500      1,477  OFF ≈" in text
    assert "8-11     2,100      1,900  OFF outvoted" in text
    assert "32-47     4,737      5,192  OFF ◀ batch 40" in text
    assert "≈ within 3% (no vote)" in text
