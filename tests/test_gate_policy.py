"""The gate policy (threshold, hysteresis, switches, runtime updates, validation) as pure code."""

import pytest

from server_patch.contract import HYSTERESIS_KEY, THRESHOLD_KEY, GateConfig, GateConfigError, parse_update
from server_patch.gate import SpecGate, switch_log_line



def states(gate, sizes):
    out = []
    for bs in sizes:
        gate.decide(bs)
        out.append(gate.spec_enabled)
    return out


def test_off_at_threshold_on_below_it_without_hysteresis():
    gate = SpecGate(GateConfig(32, 0))
    assert states(gate, [1, 31, 32, 33, 31, 32]) == [True, True, False, False, True, False]
    assert gate.switches == 3
    assert gate.decode_steps_on == 3 and gate.decode_steps_off == 3


def test_hysteresis_holds_off_until_below_n_minus_h():
    gate = SpecGate(GateConfig(32, 4))
    assert states(gate, [40, 31, 29, 28, 27, 31, 32]) == [False, False, False, False, True, True, False]
    assert gate.last_switch.direction == "off" and gate.last_switch.batch_size == 32
    assert gate.switches == 3


def test_switch_records_step_and_log_lines_match_the_contract():
    gate = SpecGate(GateConfig(32, 4))
    gate.decide(10)
    sw = gate.decide(37)
    assert (sw.step, sw.direction, sw.batch_size) == (1, "off", 37)
    assert switch_log_line(sw, gate.config) == "spec_gate: speculation off (batch 37 >= 32)"
    sw = gate.decide(20)
    assert switch_log_line(sw, gate.config) == "spec_gate: speculation on (batch 20 < 28)"
    assert gate.decide(21) is None


def test_current_off_is_the_decision_for_the_batch_just_decided():
    gate = SpecGate(GateConfig(2, 0))
    gate.decide(1)
    assert gate.current_off is False
    gate.decide(2)
    assert gate.current_off is True


def test_threshold_one_forces_off_for_every_decode_batch():
    gate = SpecGate(GateConfig(1, 0))
    assert states(gate, [1, 1, 5]) == [False, False, False]


def test_runtime_update_applies_from_the_next_decision():
    gate = SpecGate(GateConfig(32, 0))
    gate.decide(20)
    assert gate.spec_enabled
    gate.update(GateConfig(16, 0))
    gate.decide(20)
    assert not gate.spec_enabled


@pytest.mark.parametrize(
    "n,h,why",
    [
        (0, 0, "threshold must be >= 1"),
        (-3, 0, "threshold must be >= 1"),
        (8, 8, "hysteresis 8 must be < threshold 8"),
        (8, -1, "hysteresis must be >= 0"),
        (True, 0, "threshold must be an integer"),
        ("8", 0, "threshold must be an integer"),
        (8.0, 0, "threshold must be an integer"),
        (65, 0, "threshold 65 > max running requests 64"),
    ],
)
def test_invalid_configs_are_refused_with_the_reason(n, h, why):
    with pytest.raises(GateConfigError, match=why):
        GateConfig(n, h).validate(max_running_requests=64)


def test_parse_update_either_key_alone_keeps_the_other():
    cur = GateConfig(32, 4)
    assert parse_update(cur, {THRESHOLD_KEY: 16}, 64) == GateConfig(16, 4)
    assert parse_update(cur, {HYSTERESIS_KEY: 2}, 64) == GateConfig(32, 2)
    assert parse_update(cur, {THRESHOLD_KEY: 64, HYSTERESIS_KEY: 63}, 64) == GateConfig(64, 63)


def test_parse_update_is_all_or_nothing():
    cur = GateConfig(32, 4)
    with pytest.raises(GateConfigError, match="hysteresis 4 must be < threshold 4"):
        parse_update(cur, {THRESHOLD_KEY: 4}, 64)  # would leave H >= N
    with pytest.raises(GateConfigError, match="cannot be mixed"):
        parse_update(cur, {THRESHOLD_KEY: 16, "pp_max_micro_batch_size": 8}, 64)
    with pytest.raises(GateConfigError, match="no gate key"):
        parse_update(cur, {}, 64)
    assert cur == GateConfig(32, 4)


def test_accept_length_counts_recorded_speculative_batches_only():
    gate = SpecGate(GateConfig(4, 0))
    assert gate.accept_length_recent is None
    gate.record_accept(num_verifies=2, num_correct_drafts=4)  # 6 tokens / 2 verifies
    gate.record_accept(num_verifies=1, num_correct_drafts=0)  # 1 / 1
    assert gate.accept_length_recent == pytest.approx(7 / 3)
    gate.record_accept(num_verifies=0, num_correct_drafts=0)  # empty batch: ignored
    assert gate.recent_accept_window() == (7, 3)


def test_accept_length_since_on_measures_the_first_on_batches_after_a_switch():
    gate = SpecGate(GateConfig(4, 0))
    gate.decide(8)  # off
    gate.decide(1)  # on again
    for _ in range(SpecGate.FIRST_ON_STEPS + 5):
        gate.record_accept(num_verifies=1, num_correct_drafts=2)
    snap = gate.snapshot()
    assert snap["accept_length_first_on_step"] == pytest.approx(3.0)
    assert snap["steps_since_on"] == SpecGate.FIRST_ON_STEPS
    assert snap["accept_length_since_on"] == pytest.approx(3.0)


def test_snapshot_has_the_contract_keys():
    gate = SpecGate(GateConfig(8, 2))
    gate.decide(9)
    snap = gate.snapshot()
    for key in ("spec_enabled", "threshold", "hysteresis", "last_decode_batch_size", "decode_steps_on",
                "decode_steps_off", "switches", "last_switch", "accept_length_recent"):
        assert key in snap
    assert snap["last_switch"] == {"step": 0, "direction": "off", "batch_size": 9}


def test_switches_into_and_back_from_an_auto_probe_are_marked_and_a_real_change_is_not():
    gate = SpecGate(GateConfig(None, 0))
    # (mode, probing) as the auto policy decides: ON preferred, an OFF probe of two steps, ON, then OFF preferred
    plan = iter([(True, False), (False, True), (False, True), (True, False), (False, False), (False, False)])
    gate.policy.decide = lambda batch_size, step, off_steps=None: next(plan)
    marks = []
    for _ in range(6):
        switch = gate.decide(8)
        marks.append(None if switch is None else (switch.direction, gate.probe_switch))
    assert marks == [None, ("off", True), None, ("on", True), ("off", False), None]
    assert gate.switches == 3


def test_the_scheduler_logs_probe_switches_at_debug_and_real_changes_at_info(caplog, monkeypatch):
    import logging
    from types import SimpleNamespace

    from server_patch import scheduler_hooks as sh

    gate = SpecGate(GateConfig(None, 0))
    plan = iter([(True, False), (False, True), (True, False), (False, False)])
    gate.policy.decide = lambda batch_size, step, off_steps=None: next(plan)
    gate.estimate_text = lambda bs: "auto: batch %d" % bs
    runtime = SimpleNamespace(gate=gate, sync_table=lambda: None, metrics=SimpleNamespace(update=lambda r: None))
    batch = SimpleNamespace(forward_mode=SimpleNamespace(is_decode=lambda: True), batch_size=lambda: 8)
    monkeypatch.setattr(sh, "_runtime", lambda scheduler: runtime)
    with caplog.at_level(logging.DEBUG, logger=sh.logger.name):
        for _ in range(4):
            sh.after_get_next_batch_to_run(batch, object())
    info = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert len(info) == 1 and "speculation off" in info[0]
    assert len(debug) == 2 and "probe)" in debug[0] and "probe ended" in debug[1]


def test_with_the_auto_threshold_hysteresis_stays_below_max_running_requests():
    GateConfig(None, 47).validate(48)
    with pytest.raises(GateConfigError, match="hysteresis 48 must be < max running requests 48"):
        GateConfig(None, 48).validate(48)
    GateConfig(None, 10**6).validate(None)  # at startup max running requests is not final yet
