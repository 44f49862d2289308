"""bench.console_cpu refuses bad arguments before it measures anything (a fresh user's finds)."""

from __future__ import annotations

import pytest

from bench import console_cpu


@pytest.mark.parametrize("argv, message", [
    (["--repeat", "0"], "--repeat must be >= 1"), (["--seconds", "0"], "--seconds must be > 0"),
    (["--interval", "0"], "--interval is the console's poll period, 0.1 to 3600 s"),
    (["--interval", "0.05"], "--interval is the console's poll period"), (["--warmup", "-1"], "--warmup must be >= 0"),
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


def test_an_existing_out_is_replaced_only_when_it_is_an_earlier_record_of_this_tool(tmp_path, capsys):
    """Fresh-user find: ``--out /etc/passwd`` measured and then replaced the file. Only a JSON record
    this tool wrote (its ``command``) is replaced now; anything else existing is refused first."""
    precious = tmp_path / "passwd"
    precious.write_text("root:x:0:0:root:/root:/bin/bash\n")
    other_json = tmp_path / "other.json"
    other_json.write_text('{"command": "python -m bench.throughput run"}')
    link = tmp_path / "link.json"
    link.symlink_to(precious)
    for path in (precious, other_json, link, tmp_path):
        with pytest.raises(SystemExit) as exc:
            console_cpu.parse_args(["--out", str(path)])
        assert exc.value.code == 2 and "is not an earlier record of this tool" in capsys.readouterr().err
    assert precious.read_text().startswith("root:x:0:0")
    earlier = tmp_path / "before.json"
    earlier.write_text('{"command": "python -m bench.console_cpu --seconds 30", "pct_of_core": [1.8]}')
    assert console_cpu.parse_args(["--out", str(earlier)]).out == earlier
    assert console_cpu.parse_args(["--out", str(tmp_path / "new.json")]).out == tmp_path / "new.json"
