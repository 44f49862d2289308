"""The lean verify of v2 OFF steps (``server_patch/off_verify_v2.py``): for an all-greedy batch the
target's argmax is the drawn token and one token is accepted per request, with SGLang's own
preparation and target forward; other batches and a failed proof take SGLang's verify. CPU tests
with a fake ``EAGLEWorkerV2`` whose pieces record what ran."""

from __future__ import annotations

import contextlib
import types

import pytest
import torch

from server_patch import off_verify_v2 as lv


class Result:
    def __init__(self, **fields):
        self.__dict__.update(fields)


class Event:
    def record(self):
        self.recorded = True


@pytest.fixture(autouse=True)
def fake_sglang(monkeypatch):
    monkeypatch.setattr(lv, "_sglang", lambda: (Result, Result))
    monkeypatch.setattr(torch, "get_device_module", lambda device: types.SimpleNamespace(
        current_stream=lambda: types.SimpleNamespace(wait_stream=lambda s: None), Event=Event))


def make_worker(logits, log):
    target = types.SimpleNamespace(
        model_runner=types.SimpleNamespace(
            attn_backend=types.SimpleNamespace(
                update_verify_buffers_to_fill_after_draft=lambda vi, bs: log.append(("update", bs))),
            graph_runner=types.SimpleNamespace(bs=8)),
        forward_batch_generation=lambda **kw: log.append(("forward", kw["is_verify"])) or types.SimpleNamespace(
            logits_output=types.SimpleNamespace(next_token_logits=logits), routed_experts_output=None,
            indexer_topk_output=None))
    return types.SimpleNamespace(device="cpu", speculative_num_steps=0, speculative_num_draft_tokens=1,
                                 plan_stream=object(), plan_stream_ctx=contextlib.nullcontext(),
                                 req_to_token_pool="pool", target_worker=target)


class VerifyInput:
    """The 1-node verify input: SGLang's preparation and sampling, recorded."""

    def __init__(self, log, sample_tokens=None):
        self.log = log
        self.sample_tokens = sample_tokens

    def prepare_for_v2_verify(self, pool, batch, target_worker):
        self.log.append(("prepare", pool))
        return "forward batch", True

    def sample(self, batch, logits_output, vocab_mask):
        tokens = logits_output.next_token_logits.argmax(-1).to(torch.int32)
        if self.sample_tokens is not None:
            tokens = self.sample_tokens
        return tokens, torch.ones_like(tokens), None


def make_batch(log, greedy=True, **overrides):
    info = types.SimpleNamespace(is_all_greedy=greedy, acc_additive_penalties=None, acc_scaling_penalties=None,
                                 logit_bias=None)
    fields = dict(forward_mode=types.SimpleNamespace(is_idle=lambda: False), sampling_info=info,
                  has_grammar=False, return_logprob=False, seq_lens=torch.tensor([4, 9]),
                  spec_info=VerifyInput(log))
    fields.update(overrides)
    batch = types.SimpleNamespace(**fields)
    batch.seq_lens.record_stream = lambda stream: None
    return batch


def logits():
    return torch.tensor([[0.0, 3.0, 1.0], [5.0, 0.0, 1.0]])


def test_an_all_greedy_off_verify_draws_the_argmax_and_accepts_one_token_per_request():
    log = []
    lean = lv.LeanVerifyV2(make_worker(logits(), log), sampled=lambda n: True)
    out = lean.wrap(lambda b: pytest.fail("SGLang's verify ran"))(make_batch(log))
    assert out.next_token_ids.tolist() == [1, 0] and out.next_token_ids.dtype == torch.int32
    assert out.accept_lens.tolist() == [1, 1] and out.can_run_cuda_graph is True
    ndi = out.next_draft_input
    assert ndi.bonus_tokens is out.next_token_ids and ndi.new_seq_lens.tolist() == [5, 10]
    assert ndi.verify_done.recorded and out.speculative_num_draft_tokens == 1
    # SGLang's preparation, buffer update (graph batch size) and target verify forward, in order
    assert log == [("prepare", "pool"), ("update", 8), ("forward", True)]
    assert (lean.steps, lean.checks, lean.mismatches, lean.ok) == (1, 1, 0, True)


@pytest.mark.parametrize("change, reason", [
    ({"greedy": False}, "not all greedy"),
    ({"has_grammar": True}, "grammar"),
    ({"return_logprob": True}, "logprobs"),
])
def test_other_batches_take_sglangs_verify(change, reason):
    log = []
    lean = lv.LeanVerifyV2(make_worker(logits(), log), sampled=lambda n: False)
    greedy = change.pop("greedy", True)
    out = lean.wrap(lambda b: "sglang")(make_batch(log, greedy=greedy, **change))
    assert out == "sglang" and lean.fallbacks == {reason: 1} and lean.steps == 0


def test_penalties_and_logit_bias_take_sglangs_verify():
    batch = make_batch([])
    batch.sampling_info.acc_additive_penalties = torch.zeros(2, 3)
    assert lv.batch_reason(batch) == "penalties"
    batch.sampling_info.acc_additive_penalties = None
    batch.sampling_info.logit_bias = torch.zeros(2, 3)
    assert lv.batch_reason(batch) == "logit bias"


def test_a_proof_that_disagrees_with_sglangs_sampling_sends_every_rank_back_to_sglangs_verify(caplog):
    log = []
    flags = []
    lean = lv.LeanVerifyV2(make_worker(logits(), log), sampled=lambda n: True,
                           any_rank=lambda f: flags.append(f) or f)
    batch = make_batch(log, spec_info=VerifyInput(log, sample_tokens=torch.tensor([2, 0], dtype=torch.int32)))
    lean.wrap(lambda b: "sglang")(batch)
    assert (lean.checks, lean.mismatches, lean.ok) == (1, 1, False) and flags == [True]
    assert "lean v2 OFF verify" in caplog.text
    assert lean.wrap(lambda b: "sglang")(make_batch(log)) == "sglang"
    assert lean.fallbacks == {"proof failed": 1}


def test_hybrid_targets_keep_sglangs_verify():
    worker = types.SimpleNamespace(target_worker=types.SimpleNamespace(model_runner=types.SimpleNamespace(
        hybrid_gdn_config=object(), mamba2_config=None)))
    assert "Mamba" in lv.server_reason(worker)
    worker.target_worker.model_runner.hybrid_gdn_config = None
    assert lv.server_reason(worker) is None
