"""bench.grammar_switch on CPU: which tokens the regex allows and each run's record on scripted
answers (the phases run on the GPU; xgrammar 0.2.0's view of the synthetic tokenizer was checked
by hand on CPU: exactly these tokens, EOS after a complete word)."""

from __future__ import annotations

from bench import grammar_switch as gs


def test_the_regex_allows_the_words_that_start_with_w1():
    assert [i for i in range(200) if gs.allowed(i, 200)] == [1, *range(10, 20), *range(100, 200)]
    assert not gs.allowed(200, 200) and not gs.allowed(-1, 200)
    assert gs.payload([1, 2])["sampling_params"]["regex"] == gs.REGEX


def test_a_run_is_compared_with_the_on_run_token_for_token():
    on = [{"output_ids": [1, 15, 100], "took_s": 0.1}, {"output_ids": [19], "took_s": 0.2}]
    same = [dict(a) for a in on]
    assert gs.check_run(same, 256, on) == {"requests": 2, "errors": 0, "disallowed": 0, "empty": 0,
                                           "differ_from_on": 0, "slowest_request_s": 0.2, "mean_output_tokens": 2.0}
    other = [{"output_ids": [1, 15, 101], "took_s": 0.1}, {"output_ids": [2], "took_s": 31.0},
             {"http_status": 500, "body": "x", "took_s": 0.0}]
    rec = gs.check_run(other, 256, on + [{"output_ids": []}])
    assert (rec["differ_from_on"], rec["disallowed"], rec["errors"], rec["slowest_request_s"]) == (3, 1, 1, 31.0)
    assert gs.check_run(on, 256)["differ_from_on"] is None
