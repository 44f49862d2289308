"""bench.logprob_switch on CPU: the answer checks on scripted SGLang answers (the phases run on the GPU)."""

from __future__ import annotations

import pytest

from bench import logprob_switch as ls


def _answer(prompt, start, ids, *, top_first=None, out_lp_len=None):
    n = len(ids)
    out_lp = [(-0.1 * (i % 3), t, None) for i, t in enumerate(ids)][: out_lp_len if out_lp_len is not None else n]
    top = [[(-0.05, top_first if top_first is not None else t, None), (-2.0, t + 1, None), (-3.5, t + 2, None)]
           for t in ids]
    in_lp = [(None if j == 0 else -1.5, tok, None) for j, tok in enumerate(prompt[start:])]
    return {"output_ids": ids, "meta_info": {"output_token_logprobs": out_lp, "output_top_logprobs": top,
                                             "input_token_logprobs": in_lp}}


@pytest.mark.parametrize("start", [0, 5, 9])
def test_a_well_formed_answer_passes(start):
    prompt, ids = list(range(10)), list(range(100, 100 + ls.MAX_NEW))
    assert ls.check_answer(prompt, start, _answer(prompt, start, ids), greedy=True) == []


def test_each_kind_of_malformed_answer_is_named():
    prompt, ids = list(range(10)), list(range(100, 100 + ls.MAX_NEW))
    short = _answer(prompt, 0, ids, out_lp_len=ls.MAX_NEW - 1)
    assert any("output_token_logprobs has" in p for p in ls.check_answer(prompt, 0, short, greedy=False))
    not_argmax = _answer(prompt, 0, ids, top_first=7)
    assert any("not the first of its top" in p for p in ls.check_answer(prompt, 0, not_argmax, greedy=True))
    assert ls.check_answer(prompt, 0, not_argmax, greedy=False) == []  # sampled: any token may be chosen
    wrong_input = _answer(prompt, 0, ids)
    assert any("input_token_logprobs has 10 entries, want 5" in p for p in ls.check_answer(prompt, 5, wrong_input, greedy=True))
    nan = _answer(prompt, 0, ids)
    nan["meta_info"]["output_token_logprobs"][3] = (float("nan"), ids[3], None)
    assert "an output logprob is not finite and <= 0" in ls.check_answer(prompt, 0, nan, greedy=True)
    late_none = _answer(prompt, 5, ids)
    late_none["meta_info"]["input_token_logprobs"][2] = (None, 7, None)
    assert "an input logprob is not finite and <= 0" in ls.check_answer(prompt, 5, late_none, greedy=True)
    cut = _answer(prompt, 0, ids[:-2])
    assert f"{ls.MAX_NEW - 2} output tokens, asked {ls.MAX_NEW}" in ls.check_answer(prompt, 0, cut, greedy=True)


def test_logprob_differences_only_between_equal_outputs():
    prompt, ids = list(range(10)), list(range(100, 100 + ls.MAX_NEW))
    a, b = _answer(prompt, 0, ids), _answer(prompt, 0, ids)
    b["meta_info"]["output_token_logprobs"][2] = (-0.3, ids[2], None)
    assert ls.max_abs_diff([a], [b]) == pytest.approx(0.3 - 0.2)
    assert ls.max_abs_diff([a], [_answer(prompt, 0, ids[::-1])]) is None


def test_a_sampled_payload_carries_its_parameters_and_seed():
    body = ls.payload([1, 2, 3], 1, ls.SAMPLED, 42)
    assert body["sampling_params"]["sampling_seed"] == 42 and body["sampling_params"]["min_p"] == ls.SAMPLED["min_p"]
    assert body["return_logprob"] and body["top_logprobs_num"] == ls.TOP_N and body["logprob_start_len"] == 1
    assert ls.payload([1, 2, 3], 0, None, 1)["sampling_params"]["temperature"] == 0.0


def test_a_failing_flip_is_counted_and_the_flipping_goes_on(monkeypatch):
    import httpx

    from bench import server_harness as sh

    calls = []

    def set_gate(url, threshold=None, **kw):
        calls.append(threshold)
        if len(calls) == 2:
            raise httpx.ReadTimeout("timed out")

    monkeypatch.setattr(sh, "set_gate", set_gate)
    import time

    with sh.flipping_threshold("http://x", 64, every_s=0.001) as sent:
        deadline = time.monotonic() + 5
        while len(calls) < 5 and time.monotonic() < deadline:
            time.sleep(0.001)
    assert sent["errors"] == 1 and sent["first_error"] == "ReadTimeout: timed out"
    assert sent["flips"] == len(calls) - 1 and len(calls) >= 5
    assert calls[:4] == [1, 64, 64, 1]  # the failed change is sent again


def test_a_failed_answer_has_no_logprob_difference():
    assert ls.max_abs_diff([{"http_status": 500, "body": ""}], [{"http_status": 500, "body": ""}]) is None
