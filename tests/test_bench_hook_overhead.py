"""bench.hook_overhead: the harness drives the real hooks on the ON path (timings are not asserted)."""

import json

from bench import hook_overhead


def test_the_gate_variant_takes_one_on_decision_per_step_and_the_json_has_every_variant(tmp_path, capsys):
    fns = hook_overhead.step_functions(8)
    for _ in range(3):
        fns["gate_on"]()
    gate = fns["gate_on"].runtime.gate
    assert gate.decode_steps_on == 3 and gate.decode_steps_off == 0 and gate.switches == 0
    assert gate.accept_length_recent == (8 + 16) / 8  # 16 correct drafts over 8 verifies + 1 bonus each
    out = tmp_path / "h.json"
    hook_overhead.main(["--bs", "1,4", "--steps", "10", "--repeat", "1", "--out", str(out)])
    data = json.loads(out.read_text())
    assert data == json.loads(capsys.readouterr().out)
    assert set(data["us_per_step"]) == {"1", "4"}
    for row in data["us_per_step"].values():
        assert set(row) == {"bare", "no_gate", "gate_on", "gate_extra_us"} and row["gate_on"] > 0


def test_large_batches_stay_on_and_a_bad_out_is_refused_before_measuring(tmp_path, capsys):
    fns = hook_overhead.step_functions(20_000)  # crashed in the OFF path at >= 10000
    fns["gate_on"]()
    assert fns["gate_on"].runtime.gate.decode_steps_off == 0
    import pytest

    for out in (tmp_path, tmp_path / "missing" / "h.json"):
        with pytest.raises(SystemExit) as exc:
            hook_overhead.main(["--steps", "1", "--repeat", "1", "--out", str(out)])
        assert exc.value.code == 2 and "--out" in capsys.readouterr().err
