"""The mend of SGLang 0.5.12's triton draft-extend CUDA-graph metadata for v1 (server_patch/triton_draft_extend.py):
the queries packed per request, as SGLang's eager path lays them out, and nothing else touched."""

import types

import pytest
import torch

from server_patch import triton_draft_extend as tde

STEPS = 3  # num_steps + 1 = 4 rows per request in the graph


class Mode:
    def __init__(self, name):
        self.name = name

    def is_draft_extend(self, include_v2=False):
        return self.name == "DRAFT_EXTEND" or (include_v2 and self.name == "DRAFT_EXTEND_V2")

    def is_draft_extend_v2(self):
        return self.name == "DRAFT_EXTEND_V2"


def backend(bs_max=8):
    """A triton backend after SGLang's replay metadata: qo_indptr at the fixed stride of num_steps + 1."""
    qo = torch.zeros(bs_max + 1, dtype=torch.int64)  # TritonAttnBackend.qo_indptr is int64
    qo[: bs_max + 1] = torch.arange(0, bs_max * (STEPS + 1) + 1, STEPS + 1, dtype=torch.int64)
    return types.SimpleNamespace(qo_indptr=qo)


def replay(hook, b, bs, mode, accepted):
    spec = types.SimpleNamespace(num_accept_tokens=accepted)
    # as the graph runner calls it: keywords (eagle_draft_extend_cuda_graph_runner.py replay)
    hook(None, b, bs=bs, req_pool_indices=None, seq_lens=None, seq_lens_sum=0, encoder_lens=None,
         forward_mode=Mode(mode), spec_info=spec, seq_lens_cpu=None)


def test_v1_draft_extend_queries_are_packed_as_the_eager_path_packs_them():
    hook, b = tde.PackedQueries(), backend()
    accepted = torch.tensor([1, 4, 2, 3], dtype=torch.int32)
    replay(hook, b, 4, "DRAFT_EXTEND", accepted)
    # EagleDraftExtendInput.generate_attn_arg_prefill: qo_indptr[1:] = cumsum(num_accept_tokens)
    assert b.qo_indptr[:5].tolist() == [0, 1, 5, 7, 10]
    assert hook.mended == 1


def test_padded_requests_keep_the_runners_fill_and_the_rows_stay_within_the_graph():
    """The runner pads bs 3 to the captured 4 with num_accept_tokens = num_steps + 1 for the padding."""
    hook, b = tde.PackedQueries(), backend()
    accepted = torch.tensor([2, 1, 3, STEPS + 1], dtype=torch.int32)  # the runner's padded buffer slice
    replay(hook, b, 4, "DRAFT_EXTEND", accepted)
    assert b.qo_indptr[:5].tolist() == [0, 2, 3, 6, 10]
    assert int(b.qo_indptr[4]) <= 4 * (STEPS + 1)
    assert b.qo_indptr[5:].tolist() == [20, 24, 28, 32]  # beyond bs: SGLang's, untouched


@pytest.mark.parametrize("mode", ["DRAFT_EXTEND_V2", "DECODE", "TARGET_VERIFY"])
def test_other_modes_keep_sglangs_layout(mode):
    hook, b = tde.PackedQueries(), backend()
    before = b.qo_indptr.clone()
    replay(hook, b, 4, mode, torch.tensor([1, 1, 1, 1], dtype=torch.int32))
    assert torch.equal(b.qo_indptr, before) and hook.mended == 0


def test_a_draft_extend_without_accept_counts_is_left_alone():
    hook, b = tde.PackedQueries(), backend()
    before = b.qo_indptr.clone()
    hook(None, b, 4, None, None, 0, None, Mode("DRAFT_EXTEND"), None, None)  # positional, spec_info None
    assert torch.equal(b.qo_indptr, before)


def test_positional_arguments_are_read_at_sglangs_positions():
    hook, b = tde.PackedQueries(), backend()
    spec = types.SimpleNamespace(num_accept_tokens=torch.tensor([3, 1], dtype=torch.int32))
    hook(None, b, 2, None, None, 0, None, Mode("DRAFT_EXTEND"), spec, None)
    assert b.qo_indptr[:3].tolist() == [0, 3, 4]


def test_registered_in_child_processes_unless_switched_off(monkeypatch):
    got = []
    registry = types.SimpleNamespace(register=lambda target, hook, kind: got.append((target, kind)))
    kinds = types.SimpleNamespace(AFTER="AFTER")
    child = lambda: object()  # noqa: E731 - a scheduler process has a parent
    monkeypatch.delenv(tde.ENV_SWITCH, raising=False)
    assert tde.register(registry, kinds, child) and got == [(tde.TARGET, "AFTER")]
    assert not tde.register(registry, kinds, lambda: None) and len(got) == 1  # SGLang's main process
    monkeypatch.setenv(tde.ENV_SWITCH, "0")
    assert not tde.register(registry, kinds, child) and len(got) == 1


def test_fewer_accept_counts_than_the_batch_leave_sglangs_layout():
    """(SGLang 0.5.12's runner always hands over bs counts; a shorter tensor would make cumsum resize the view.)"""
    hook, b = tde.PackedQueries(), backend()
    before = b.qo_indptr.clone()
    replay(hook, b, 4, "DRAFT_EXTEND", torch.tensor([1, 2], dtype=torch.int32))
    assert torch.equal(b.qo_indptr, before) and hook.mended == 0


def test_the_views_sglang_kept_see_the_packed_layout():
    """The captured kernels and ``forward_metadata`` read ``self.qo_indptr[:bs + 1]``: written in place."""
    hook, b = tde.PackedQueries(), backend()
    view = b.qo_indptr[:5]
    replay(hook, b, 4, "DRAFT_EXTEND", torch.tensor([2, 2, 1, 4], dtype=torch.int32))
    assert view.tolist() == [0, 2, 4, 5, 9] and view.data_ptr() == b.qo_indptr.data_ptr()


@pytest.mark.parametrize("spec, backend_name, graphs, switch, patched, level", [
    ("v1", "triton", True, None, True, "INFO"),
    ("v1", "triton", True, "0", True, "WARNING"),
    ("v1", "triton", True, None, False, "ERROR"),
    ("v2", "triton", True, None, True, None),
    ("v1", "fa3", True, None, True, None),
    ("v1", "triton", False, None, False, None),  # no CUDA graphs: the eager path is right already
])
def test_the_start_up_line_says_whether_the_mend_is_applied(monkeypatch, spec, backend_name, graphs, switch,
                                                            patched, level):
    import logging

    if switch is None:
        monkeypatch.delenv(tde.ENV_SWITCH, raising=False)
    else:
        monkeypatch.setenv(tde.ENV_SWITCH, switch)
    line = tde.startup_line(spec, backend_name, graphs, lambda: {tde.TARGET} if patched else set())
    assert (None if line is None else logging.getLevelName(line[0])) == level
