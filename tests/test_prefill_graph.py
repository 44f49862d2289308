"""server_patch.prefill_graph: the EAGLE target's prefills on SGLang's piecewise CUDA graph, with the
sampled check against the eager forward (CPU: fake runner; the GPU run is bench.gate_correctness)."""

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from server_patch import contract, prefill_graph


class Mode:
    def __init__(self, name):
        self.name = name

    def need_capture(self):
        return self.name != "NULL"


NULL, FULL = Mode("NULL"), Mode("FULL")


def output(logits, hidden):
    return SimpleNamespace(next_token_logits=logits, hidden_states=hidden)


class FakePCG:
    def __init__(self, graph_out):
        self.capture_hidden_mode = NULL
        self.graph_out = graph_out
        self.replayed = 0

    def replay(self, forward_batch, **kwargs):
        self.replayed += 1
        return self.graph_out


PiecewiseCudaGraphRunner = type("PiecewiseCudaGraphRunner", (FakePCG,), {})


class FakeModel:
    def __init__(self, eager_out):
        self.eager_out = eager_out
        self.calls = 0

    def forward(self, input_ids, positions, forward_batch, **kwargs):
        self.calls += 1
        return self.eager_out


def runner(graph_out, eager_out):
    attn = SimpleNamespace(init_forward_metadata=lambda fb: None)
    return SimpleNamespace(piecewise_cuda_graph_runner=PiecewiseCudaGraphRunner(graph_out),
                           model=FakeModel(eager_out), attn_backend=attn)


def batch(mode=FULL):
    return SimpleNamespace(capture_hidden_mode=mode, input_ids=None, positions=None)


def tensors(seed=0, tokens=5, reqs=2):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(reqs, 16, generator=g), torch.randn(tokens, 12, generator=g)


def test_a_replay_that_agrees_with_the_eager_forward_keeps_the_graph_and_the_samples_return_the_eager_result():
    logits, hidden = tensors()
    mr = runner(output(logits + 1e-3, hidden), output(logits, hidden))
    check = prefill_graph.PrefillGraphCheck(mr, lambda n: n <= 2, FULL, NULL)
    assert mr.piecewise_cuda_graph_runner.capture_hidden_mode is FULL
    outs = [mr.piecewise_cuda_graph_runner.replay(batch()) for _ in range(4)]
    assert (check.replays, check.checks, check.mismatches, check.state) == (4, 2, 0, prefill_graph.ON)
    assert mr.model.calls == 2 and outs[0] is mr.model.eager_out and outs[3] is mr.piecewise_cuda_graph_runner.graph_out


@pytest.mark.parametrize("graph, why", [
    (lambda l, h: output(l, None), "no hidden states"),
    (lambda l, h: output(l, torch.zeros_like(h)), "hidden states differ"),
    (lambda l, h: output(l.flip(0), h), "logits differ"),
    (lambda l, h: output(l, h[:-1]), "hidden states shape"),
])
def test_a_replay_without_or_with_other_hidden_states_or_logits_turns_the_graph_off_for_good(graph, why, caplog):
    logits, hidden = tensors()
    mr = runner(graph(logits, hidden), output(logits, hidden))
    check = prefill_graph.PrefillGraphCheck(mr, lambda n: True, FULL, NULL)
    assert mr.piecewise_cuda_graph_runner.replay(batch()) is mr.model.eager_out
    assert (check.state, check.mismatches, mr.piecewise_cuda_graph_runner.capture_hidden_mode) == (
        prefill_graph.OFF, 1, NULL)
    assert why in caplog.text and prefill_graph.DISAGREED in caplog.text
    mr.piecewise_cuda_graph_runner.replay(batch())  # (SGLang would not replay it any more; if it did:)
    assert (check.replays, check.checks) == (1, 1)


def test_a_mismatch_on_another_tp_rank_turns_the_graph_off_here_too(caplog):
    logits, hidden = tensors()
    mr = runner(output(logits, hidden), output(logits, hidden))
    asked = []
    check = prefill_graph.PrefillGraphCheck(mr, lambda n: True, FULL, NULL, any_rank=lambda f: asked.append(f) or True)
    mr.piecewise_cuda_graph_runner.replay(batch())
    assert asked == [False] and (check.state, check.mismatches) == (prefill_graph.OFF, 0)
    assert "on another TP rank" in caplog.text and mr.piecewise_cuda_graph_runner.capture_hidden_mode is NULL


def test_replays_that_ask_for_no_hidden_states_are_not_counted_or_checked():
    logits, hidden = tensors()
    mr = runner(output(logits, None), output(logits, hidden))
    check = prefill_graph.PrefillGraphCheck(mr, lambda n: True, FULL, NULL)
    mr.piecewise_cuda_graph_runner.replay(batch(NULL))
    assert (check.replays, check.checks, mr.model.calls) == (0, 0, 0)


def test_the_tolerance_is_relative_to_the_largest_magnitude():
    want = torch.tensor([[100.0, -50.0]])
    assert prefill_graph.mismatch(want + 1.5, None, want, None) is None  # 1.5 <= 0.02 * 100
    assert "logits differ by 2.5" in prefill_graph.mismatch(want + 2.5, None, want, None)


def test_why_the_graph_is_not_used():
    assert prefill_graph.unavailable_reason(SimpleNamespace(piecewise_cuda_graph_runner=None), {}) == (
        "no piecewise CUDA graph on the target (disabled or not captured)")
    mr = runner(None, None)
    assert prefill_graph.unavailable_reason(mr, {}) is None
    assert prefill_graph.unavailable_reason(mr, {prefill_graph.ENV_SWITCH: "0"}) == f"{prefill_graph.ENV_SWITCH}=0"
    other = SimpleNamespace(piecewise_cuda_graph_runner=FakePCG(None))
    assert "is not PiecewiseCudaGraphRunner" in prefill_graph.unavailable_reason(other, {})


def test_both_ways_report_the_spec_gate_fields_by_name():
    logits, hidden = tensors()
    mr = runner(output(logits, hidden), output(logits, hidden))
    check = prefill_graph.PrefillGraphCheck(mr, lambda n: n == 1, FULL, NULL)
    mr.piecewise_cuda_graph_runner.replay(batch())
    mr.piecewise_cuda_graph_runner.replay(batch())
    fields = ("target_prefill", "target_prefill_reason", "target_prefill_graph_replays", "target_prefill_checks",
              "target_prefill_mismatches")
    assert [getattr(check, f) for f in fields] == [prefill_graph.ON, None, 2, 1, 0]
    eager = prefill_graph.enable(SimpleNamespace(piecewise_cuda_graph_runner=None), lambda n: True)
    assert [getattr(eager, f) for f in fields] == [
        prefill_graph.OFF, "no piecewise CUDA graph on the target (disabled or not captured)", 0, 0, 0]
    assert set(fields) <= set(contract.SPEC_GATE_FIELDS)


def test_the_fields_are_in_the_contract_and_the_proof_is_exported():
    from server_patch import metrics

    for name in ("target_prefill", "target_prefill_reason", "target_prefill_graph_replays",
                 "target_prefill_checks", "target_prefill_mismatches"):
        assert name in contract.SPEC_GATE_FIELDS
    assert {"target_prefill_checks", "target_prefill_mismatches"} <= set(contract.RANK_FIELDS)
    assert metrics.PROOFS["target_prefill"] == ("target_prefill_checks", "target_prefill_mismatches")


def test_what_the_module_relies_on_is_in_sglang_0_5_12():
    """The mode check that rejects an EAGLE target's prefills, the runner's attribute and replay,
    that only the inner model is compiled (the logits processor stays eager), and the eager path
    the sampled check repeats (read as source: importing SGLang needs CUDA)."""
    root = Path(importlib.util.find_spec("sglang").submodule_search_locations[0]) / "srt"
    pcg = (root / "model_executor/piecewise_cuda_graph_runner.py").read_text()
    assert "if forward_batch.capture_hidden_mode != self.capture_hidden_mode:" in pcg
    assert "self.capture_hidden_mode = CaptureHiddenMode.NULL" in pcg
    assert "    def replay(\n" in pcg and "language_model.model" in pcg
    for worker in ("eagle_worker.py", "eagle_worker_v2.py"):
        assert "CaptureHiddenMode.FULL" in (root / "speculative" / worker).read_text()
    runner = (root / "model_executor/model_runner.py").read_text()
    fwd = runner[runner.index("    def forward_extend("):runner.index("    def forward_idle(")]
    assert "ret = self.piecewise_cuda_graph_runner.replay(forward_batch, **kwargs)" in fwd
    assert "self.attn_backend.init_forward_metadata(forward_batch)" in fwd
    assert "forward_batch.input_ids,\n                forward_batch.positions,\n                forward_batch," in fwd
