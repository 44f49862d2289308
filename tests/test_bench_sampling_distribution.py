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


def _rec(second_tokens, seeded=True):
    d = {"unseeded": [[1, x] for x in second_tokens]}
    if seeded:
        d["seeded"] = [[1, x] for x in second_tokens]
    return d


def _server(name, draws_by_setting):
    return {"server": name, "seconds": {"ready": 40.0}, "draws": draws_by_setting}


def test_the_result_is_written_after_each_server_and_compared_once_all_have_drawn(tmp_path):
    out = tmp_path / "sampling.json"
    spread = [i % 4 for i in range(200)]
    runs = {"none": _server("none", {"spread": _rec(spread), "min-p": _rec([7] * 200, False)})}
    first = sd.write_result(out, [5, 6], runs)
    assert "comparisons" not in first and json.loads(out.read_text())["servers"]["none"]["seconds"]["ready"] == 40.0
    runs["off-plain"] = _server("off-plain", {"spread": _rec(spread), "min-p": _rec([7] * 200, False)})
    runs["off-speculative"] = {"server": "off-speculative", "error": "RuntimeError: stalled"}
    assert "comparisons" not in sd.write_result(out, [5, 6], runs)  # a failed server: no comparison
    runs["off-speculative"] = _server("off-speculative", {"spread": _rec(spread), "min-p": _rec([7, 8, 9, 3] * 50, False)})
    done = sd.write_result(out, [5, 6], runs)
    plain, spec = done["comparisons"]["spread"]["off-plain"], done["comparisons"]["min-p"]["off-speculative"]
    assert plain["seeded_equal_share"] == 1.0 and plain["same_distribution"]
    assert spec["same_distribution"] is False and spec["outside_none_support_share"] == 0.75
    assert done["off_plain_samples_as_none"] and done["off_speculative_differs_somewhere"]
    assert "draws" not in json.loads(out.read_text())["servers"]["none"]


def test_draws_of_one_token_are_inconclusive_not_a_proof():
    one = _rec([7] * 1000)
    r = sd.compare(one, one)
    assert r["same_distribution"] is None and "too peaked" in r["inconclusive"] and r["distinct_second_tokens"] == 1


def test_one_token_against_a_spread_is_a_difference_even_without_degrees_of_freedom():
    r = sd.compare(_rec([7] * 1000, False), _rec([7] * 960 + [3] * 40, False))
    assert r["same_distribution"] is None  # 4% outside: too few to tell
    r = sd.compare(_rec([7] * 1000, False), _rec([7] * 300 + list(range(100, 800)), False))
    assert r["same_distribution"] is False and r["outside_none_support_share"] == 0.7


def test_the_verdict_needs_the_control_where_plain_sampling_draws_one_token():
    same = {"same_distribution": True, "outside_none_support_share": 0.0}
    one = {"same_distribution": None, "outside_none_support_share": 0.0}
    differs = {"same_distribution": False, "outside_none_support_share": 0.7}
    v = sd.verdict({"spread": {"off-plain": same, "off-speculative": same},
                    "min-p": {"off-plain": one, "off-speculative": differs}})
    assert v == {"off_plain_samples_as_none": True, "off_speculative_differs_somewhere": True}
    v = sd.verdict({"spread": {"off-plain": same, "off-speculative": same},
                    "min-p": {"off-plain": one, "off-speculative": one}})
    assert not v["off_plain_samples_as_none"]  # nothing could have been told apart in min-p
    v = sd.verdict({"spread": {"off-plain": differs, "off-speculative": same}, "min-p": {"off-plain": one, "off-speculative": differs}})
    assert not v["off_plain_samples_as_none"]
