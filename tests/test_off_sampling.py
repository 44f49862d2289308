"""server_patch.off_sampling on CPU: the stand-in of the tree-sampling kernel for a 1-node tree
(what it hands SGLang's Sampler and what it writes back), and that an OFF step runs inside the
plain-sampling context only when asked (the draws' distribution on the GPU: bench/results/h200-2026-12-03c/
(v2) and h200-2026-12-04/ (v1 topk 1))."""

from __future__ import annotations

import contextlib
import types

import pytest
import torch

from server_patch import off_sampling as osm
from server_patch import off_state


class FakeSampler:
    def __init__(self, tokens):
        self.tokens, self.calls = tokens, []

    def _sample_from_probs(self, probs, info, positions, simple):
        self.calls.append((probs.clone(), info, positions, simple))
        return self.tokens


def _info(**need):
    fields = dict(temperatures=torch.tensor([[0.5], [2.0]]), need_top_p_sampling=False,
                  need_top_k_sampling=False, need_min_p_sampling=False, has_custom_logit_processor=False)
    return types.SimpleNamespace(**{**fields, **need})


def _outputs(bs=2, steps=3):
    return dict(predicts=torch.zeros(bs, dtype=torch.int32),
                accept_index=torch.full((bs, steps + 1), -1, dtype=torch.int32),
                accept_token_num=torch.full((bs,), 7, dtype=torch.int32),
                retrive_index=torch.arange(bs, dtype=torch.long).unsqueeze(1),
                candidates=torch.zeros(bs, 1, dtype=torch.long), target_probs=None)


def test_the_root_token_comes_from_the_plain_sampler_on_the_temperature_softmax_of_the_noted_logits():
    logits = torch.tensor([[1.0, 2.0, 0.0], [0.0, 0.0, 3.0]])
    noted = osm.Noted(logits=logits, sampling_info=_info(need_min_p_sampling=True), positions=torch.tensor([5, 9]))
    sampler = FakeSampler(torch.tensor([1, 2]))
    out = _outputs()
    osm.sample_root(noted, sampler)(**out)
    probs, info, positions, simple = sampler.calls[0]
    assert torch.allclose(probs, torch.softmax(logits / noted.sampling_info.temperatures, dim=-1))
    assert info is noted.sampling_info and positions.tolist() == [5, 9] and simple is False
    assert out["predicts"].tolist() == [1, 2] and out["accept_token_num"].tolist() == [0, 0]
    assert out["accept_index"].tolist() == [[0, -1, -1, -1], [1, -1, -1, -1]]
    assert torch.equal(noted.logits, torch.tensor([[1.0, 2.0, 0.0], [0.0, 0.0, 3.0]]))  # left for logprobs


def test_custom_logit_processors_are_applied_only_where_the_verify_did_not_and_on_a_copy():
    logits = torch.zeros(2, 3)
    seen = []

    def custom(lg, info):
        lg[:, 0] += 100.0
        seen.append(info)

    info = _info()
    info.has_custom_logit_processor = True
    sampler = FakeSampler(torch.tensor([0, 0]))
    osm.sample_root(osm.Noted(logits, info, torch.tensor([1, 1]), custom_processors=True), sampler, custom)(**_outputs())
    assert seen == [info] and sampler.calls[0][0][0, 0] > 0.99 and torch.count_nonzero(logits) == 0
    sampler.calls.clear()
    osm.sample_root(osm.Noted(logits, info, torch.tensor([1, 1]), custom_processors=False), sampler, custom)(**_outputs())
    assert len(seen) == 1 and sampler.calls[0][3] is True  # v1: its verify applied them already


def test_a_tree_of_more_than_one_node_or_nothing_noted_is_refused():
    kernel = osm.sample_root(osm.Noted(torch.zeros(2, 3), _info(), torch.tensor([1, 1])), FakeSampler(torch.tensor([0, 0])))
    out = _outputs()
    out["retrive_index"] = torch.zeros(2, 4, dtype=torch.long)
    with pytest.raises(RuntimeError, match="1-node tree"):
        kernel(**out)
    with pytest.raises(RuntimeError, match="not noted"):
        osm.sample_root(osm.Noted(), FakeSampler(None))(**_outputs())


@pytest.mark.parametrize("env, v2, topk, plain", [(None, True, 1, True), (None, False, 1, True), (None, False, 4, False),
                                                 ("0", True, 1, False), ("1", True, 1, True), ("1", False, 4, True),
                                                 ("0", False, 1, False)])
def test_the_off_step_draws_in_the_plain_sampling_context_where_proven_and_when_asked(env, v2, topk, plain, monkeypatch):
    if env is None:
        monkeypatch.delenv(osm.ENV_SWITCH, raising=False)
    else:
        monkeypatch.setenv(osm.ENV_SWITCH, env)
    entered = []

    @contextlib.contextmanager
    def fake_plain(sampler, v2):
        entered.append((sampler, v2))
        yield osm.Noted()

    monkeypatch.setattr(osm, "plain_sampling", fake_plain)
    runner = off_state.OffStepRunner.__new__(off_state.OffStepRunner)
    runner.v2 = v2
    runner._init_early_seq_lens()
    runner.early_seq_lens = False
    runner._no_kv_only("not built in this test")
    runner.off_sampling = osm.mode(v2, topk)
    runner._draft_owner = types.SimpleNamespace()
    runner.on_state = runner.off_state = "state"
    runner._apply = lambda state: None
    runner.off_target_graph = types.SimpleNamespace(count=0)
    runner.off_steps_cuda_graph = 0
    sampler = object()
    runner.worker = types.SimpleNamespace(target_worker=types.SimpleNamespace(model_runner=types.SimpleNamespace(sampler=sampler)))
    inside = []
    runner.run_off_step(lambda batch: inside.append(len(entered)) or "result", types.SimpleNamespace(seq_lens=None))
    assert entered == ([(sampler, v2)] if plain else []) and inside == [1 if plain else 0]
