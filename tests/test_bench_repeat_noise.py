"""bench.repeat_noise on the committed two-repeat runs (h100-2026-12-05's triton pair)."""

import json
import math
from pathlib import Path

import pytest

from bench import repeat_noise
from bench.errors import BenchError

RUN = Path(__file__).resolve().parents[1] / "bench/results/h100-2026-12-05/ab-triton"


def test_the_pooled_sigma_of_a_committed_run_is_the_spread_of_its_two_repeats():
    # off / none per repeat at 32 / 64 / 128 requests, as its README's table lists them
    pairs = [(0.9559, 0.979), (1.0002, 0.9917), (0.9505, 1.0065)]
    want = math.sqrt(sum((math.log(a) - math.log(b)) ** 2 / 2 for a, b in pairs) / len(pairs))
    spreads = repeat_noise.row_spreads(json.loads((RUN / "ab-summary.json").read_text()))
    assert [(n, s) for _, n, s in spreads] == [(2, 16.0)] * 3
    assert repeat_noise.pooled_sigma(spreads) == pytest.approx(want)
    # rows of 4 s (a quarter of the run's 16) are taken to be twice as noisy
    assert repeat_noise.pooled_sigma(spreads, row_seconds=4) == pytest.approx(2 * want)


def test_pass_chance_is_one_half_on_the_line_and_grows_with_repeats():
    assert repeat_noise.pass_chance(0.02, 0.97, 0.97, 1) == pytest.approx(0.5)
    one, four = (repeat_noise.pass_chance(0.02, 0.99, 0.97, n) for n in (1, 4))
    assert 0.5 < one < four < 1
    assert repeat_noise.pass_chance(0.02, 0.95, 0.97, 3) < 0.5


def test_runs_without_repeats_or_not_a_summary_are_refused_with_the_reason(tmp_path, capsys):
    single = tmp_path / "ab-summary.json"
    single.write_text(json.dumps({"argv": [], "summary": [{"concurrency": "4", "b_over_a": [0.98]}]}))
    assert repeat_noise.main([str(single)]) == 1
    assert "two or more repeats" in capsys.readouterr().err
    with pytest.raises(BenchError, match="summary"):
        repeat_noise.row_spreads({"rows": []})
    with pytest.raises(BenchError, match="> 0"):
        repeat_noise.row_spreads({"summary": [{"b_over_a": [0.9, 0.0]}]})
    assert repeat_noise.main([str(tmp_path / "missing.json")]) == 1
    assert "no such file" in capsys.readouterr().err


def test_the_cli_prints_the_chance_per_number_of_repeats(capsys):
    assert repeat_noise.main([str(RUN), "--true", "0.99", "--rows", "12", "--row-seconds", "10"]) == 0
    out = capsys.readouterr().out
    assert "3 row-sides" in out and "4 repeat(s)" in out and "(rows of 10 s)" in out
