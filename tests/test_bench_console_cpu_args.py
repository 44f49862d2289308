"""bench.console_cpu refuses bad arguments before it measures anything (a fresh user's finds)."""

from __future__ import annotations

import pytest

from bench import console_cpu


@pytest.mark.parametrize("argv, message", [
    (["--repeat", "0"], "--repeat must be >= 1"), (["--seconds", "0"], "--seconds must be > 0"),
    (["--interval", "0"], "--interval must be > 0"), (["--warmup", "-1"], "--warmup must be >= 0"),
    (["--gpus", "-1"], "--gpus must be 0-64"), (["--gpus", "100000"], "--gpus must be 0-64"), (["--keep-profile", "/tmp/kp"], "--keep-profile needs --profile"),
    (["--out", "/nonexistent-dir/x.json"], "no directory /nonexistent-dir"),
    (["--repea", "2"], "unrecognized arguments: --repea"),  # no abbreviations
])
def test_bad_arguments_are_refused_before_measuring(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        console_cpu.parse_args(argv)
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_the_defaults_parse():
    a = console_cpu.parse_args([])
    assert (a.repeat, a.seconds, a.interval) == (3, 30.0, 1.0)
