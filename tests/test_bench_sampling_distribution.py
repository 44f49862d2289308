"""bench.sampling_distribution on CPU: the chi-square test of homogeneity (the servers run on the GPU)."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from bench import sampling_distribution as sd


def _sample(weights, n, seed):
    rng = random.Random(seed)
    return Counter(rng.choices(range(len(weights)), weights=weights, k=n))


def test_two_samples_of_one_distribution_pass_and_of_two_fail():
    w = [40, 25, 15, 10, 5, 3, 1, 1]
    same = sd.chi_square(_sample(w, 1000, 1), _sample(w, 1000, 2))
    assert same["p_value"] > sd.ALPHA and same["df"] >= 4
    other = sd.chi_square(_sample(w, 1000, 1), _sample([25, 25, 15, 15, 10, 5, 3, 2], 1000, 3))
    assert other["p_value"] < 1e-6


def test_the_p_value_is_the_chi_square_survival_function():
    # df = 1, statistic 3.841 is the 5% point
    a, b = Counter({0: 60, 1: 40}), Counter({0: 46, 1: 54})
    r = sd.chi_square(a, b)
    assert r["df"] == 1 and r["p_value"] == pytest.approx(0.0477, abs=0.002)


def test_rare_categories_are_pooled_and_empty_samples_refused():
    r = sd.chi_square(Counter({0: 500, 1: 500, 7: 1}), Counter({0: 490, 1: 510, 9: 2}))
    assert r["cells"] == 2 and r["p_value"] > 0.5
    with pytest.raises(ValueError):
        sd.chi_square(Counter(), Counter({1: 3}))


def test_the_result_is_written_after_each_server_and_compared_once_all_have_drawn(tmp_path):
    out = tmp_path / "sampling.json"
    draws = [[1, i % 4] for i in range(200)]
    runs = {"none": {"server": "none", "unseeded": draws, "seeded": draws, "seconds": {"ready": 40.0}}}
    first = sd.write_result(out, [5, 6], runs)
    assert "off_plain_vs_none" not in first and json.loads(out.read_text())["servers"]["none"]["seconds"]["ready"] == 40.0
    runs["off-plain"] = {"server": "off-plain", "unseeded": draws, "seeded": draws}
    runs["off-speculative"] = {"server": "off-speculative", "error": "RuntimeError: stalled"}
    assert "off_plain_vs_none" not in sd.write_result(out, [5, 6], runs)  # a failed server: no comparison
    runs["off-speculative"] = {"server": "off-speculative", "unseeded": draws, "seeded": draws}
    done = sd.write_result(out, [5, 6], runs)
    assert done["off_plain_vs_none"]["seeded_equal_share"] == 1.0 and done["off_plain_vs_none"]["same_distribution"]
    assert "unseeded" not in json.loads(out.read_text())["servers"]["none"]


def test_draws_of_one_token_are_inconclusive_not_a_proof():
    one = {"unseeded": [[1, 7]] * 1000, "seeded": [[1, 7]] * 1000}
    r = sd.compare(one, one)
    assert r["same_distribution"] is None and "too peaked" in r["inconclusive"] and r["distinct_second_tokens"] == 1
