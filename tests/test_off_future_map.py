"""The lean OFF path through the overlap scheduler's future map (``server_patch/off_future_map.py``)
on SGLang 0.5.12's own ``FutureMap`` (its class source from the pinned package, run on CPU tensors):
what an OFF step resolves and stores, the slots it leaves, the proof and the fallbacks."""

from __future__ import annotations

import ast
import importlib.util
import logging
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest
import torch

from server_patch import contract, off_future_map

BS, TOPK, HIDDEN = 3, 1, 8


def sglang_future_map_classes():
    """``FutureIndices`` and ``FutureMap`` from SGLang 0.5.12's ``managers/overlap_utils.py``
    (importing the module would import SGLang's CUDA-side utilities)."""
    root = Path(list(importlib.util.find_spec("sglang").submodule_search_locations)[0])
    tree = ast.parse((root / "srt" / "managers" / "overlap_utils.py").read_text())
    body = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name in ("FutureIndices", "FutureMap")]
    namespace = {"torch": torch, "dataclass": dataclass, "Optional": Optional, "spec_need_hidden_states": lambda: True,
                 "_resolve_future_token_ids": None, "__name__": __name__,
                 "EagleDraftInput": object, "ModelWorkerBatch": object, "GenerationBatchResult": object,
                 "SpeculativeAlgorithm": object}
    exec(compile(ast.Module(body=body, type_ignores=[]), "overlap_utils.py", "exec"), namespace)  # noqa: S102
    return namespace["FutureIndices"], namespace["FutureMap"]


FutureIndices, SGLangFutureMap = sglang_future_map_classes()


class CpuIndices(torch.Tensor):
    """Future indices on the CPU: SGLang's resolve hands them to the forward stream (``record_stream``)."""

    def record_stream(self, stream):
        pass


class FutureMap(SGLangFutureMap):
    """SGLang's, with indices that take SGLang's ``record_stream`` call on the CPU."""

    def alloc_future_indices(self, bs):
        out = super().alloc_future_indices(bs)
        out.indices = out.indices.as_subclass(CpuIndices)
        return out


class Eagle3:
    def is_none(self):
        return False


class Decode:
    def is_decode(self):
        return True


class Extend:
    def is_decode(self):
        return False


def draft_input(bs=BS, start=0.0, indices=None):
    """An ``EagleDraftInput``'s five FutureMap fields (+ its future indices), values from ``start``."""
    return types.SimpleNamespace(
        topk_p=torch.full((bs, TOPK), start + 0.5), topk_index=torch.full((bs, TOPK), int(start) + 7),
        bonus_tokens=torch.arange(bs) + int(start), new_seq_lens=torch.arange(bs) + 100 + int(start),
        hidden_states=torch.full((bs, HIDDEN), start), future_indices=indices)


class Gate:
    """What the predicates read: the gate's decision for the batch and the runner's stale flag."""

    def __init__(self):
        self.current_off = False
        self.draft_stale = False


@pytest.fixture
def lean(monkeypatch):
    monkeypatch.setenv(off_future_map.ENV_SWITCH, "1")
    fm = FutureMap(max_running_requests=4, chunked_prefill_size=8, context_len=16, device="cpu", spec_algo=Eagle3())
    gate = Gate()
    built, status = off_future_map.install(
        fm, "v2", off_step=lambda: gate.current_off or gate.draft_stale,
        stale_off_result=lambda r: getattr(r, "off", False) and not getattr(r, "resume", False) and gate.draft_stale,
        sampled=contract.sampled)
    assert status == "on" and built is not None
    return types.SimpleNamespace(fm=fm, gate=gate, map=built)


def step(t, start, off=False, resume=False, stale=False, bs=BS, batch_indices=None):
    """One decode step through the scheduler's calls: resolve the batch's futures (the indices the
    last step stored, unless ``batch_indices``), run (the worker's result), store the result's."""
    fm, gate = t.fm, t.gate
    gate.current_off = off
    gate.draft_stale = gate.draft_stale or resume  # the wrapper runs the resume step while stale
    batch = types.SimpleNamespace(spec_info=draft_input(bs, start=-1.0, indices=batch_indices or t.last),
                                  forward_mode=Decode())
    fm.resolve_future(batch)
    resolved = batch.spec_info
    gate.draft_stale = stale  # what the OFF step left (run_off_step)
    result = types.SimpleNamespace(next_draft_input=draft_input(bs, start=start), off=off or resume, resume=resume)
    t.last = fm.alloc_future_indices(bs)
    fm.store_to_map(t.last, result)
    return resolved


def first_store(t, start=0.0):
    """A prefill's store (all five fields; it also allocates SGLang's buffers)."""
    t.last = t.fm.alloc_future_indices(BS)
    t.fm.store_to_map(t.last, types.SimpleNamespace(next_draft_input=draft_input(start=start)))


def test_an_off_step_resolves_tokens_and_seq_lens_and_views_the_rest(lean):
    first_store(lean, start=5.0)
    resolved = step(lean, 6.0, off=True, stale=True)
    assert torch.equal(resolved.bonus_tokens, torch.arange(BS) + 5)  # gathered from the prefill's slots
    assert torch.equal(resolved.new_seq_lens, torch.arange(BS) + 105)
    fm = lean.fm
    for name, buf in (("topk_p", fm.topk_p_buf), ("topk_index", fm.topk_index_buf), ("hidden_states", fm.hidden_states_buf)):
        got = getattr(resolved, name)
        assert got.shape == (BS, *buf.shape[1:]) and got.dtype == buf.dtype
        assert got.data_ptr() == buf.data_ptr()  # a view of the buffer's first rows: no gather
    assert lean.map.lean_resolves == 1 and lean.map.lean_stores == 1


def test_a_stale_off_result_stores_tokens_and_seq_lens_and_leaves_the_other_fields(lean):
    first_store(lean)
    before = lean.fm.topk_p_buf.clone(), lean.fm.hidden_states_buf.clone()
    step(lean, 6.0, off=True, stale=True)
    intv = lean.last.interval
    assert torch.equal(lean.fm.bonus_tokens_buf[intv], torch.arange(BS) + 6)
    assert torch.equal(lean.fm.new_seq_lens_buf[intv], torch.arange(BS) + 106)
    assert torch.equal(lean.fm.topk_p_buf, before[0]) and torch.equal(lean.fm.hidden_states_buf, before[1])
    untouched = torch.ones(lean.fm.future_buffer_len, dtype=torch.bool)
    untouched[1:1 + 2 * BS] = False  # the prefill's slots and the OFF step's
    assert not lean.fm.topk_index_buf[untouched].any()  # zeroed at allocation: never garbage indices
    assert lean.map.left[intv].all() and lean.map.left.sum() == BS


def test_the_resume_step_stores_all_five_and_the_next_speculative_batch_is_checked_clean(lean):
    first_store(lean)
    step(lean, 6.0, off=True, stale=True)
    step(lean, 7.0, off=True, stale=True)
    step(lean, 8.0, resume=True, stale=False)  # full OFF step: stores every field, slots written
    resume_slots = lean.last.interval
    assert not lean.map.left[resume_slots].any()
    assert torch.equal(lean.fm.topk_p_buf[resume_slots], torch.full((BS, TOPK), 8.5))
    resolved = step(lean, 9.0)  # speculative: SGLang's full resolve, after the check
    assert torch.equal(resolved.topk_p, torch.full((BS, TOPK), 8.5))
    assert torch.equal(resolved.hidden_states, torch.full((BS, HIDDEN), 8.0))
    assert (lean.map.checks, lean.map.mismatches, lean.map.ok) == (1, 0, True)
    step(lean, 10.0)  # no OFF step since: nothing to check
    assert lean.map.checks == 1 and lean.map.lean_stores == 2 and lean.map.lean_resolves == 3


def test_a_speculative_batch_on_a_left_slot_fails_the_proof_and_the_map_is_sglangs_again(lean, caplog):
    first_store(lean)
    step(lean, 6.0, off=True, stale=True)
    lean.gate.draft_stale = False  # a bug: speculation without the resume step
    with caplog.at_level(logging.ERROR, logger="server_patch.spec_gate"):
        resolved = step(lean, 7.0)
    assert (lean.map.checks, lean.map.mismatches, lean.map.ok) == (1, 1, False)
    assert "resolved future-map slots an OFF step left unwritten" in caplog.text
    assert torch.equal(resolved.bonus_tokens, torch.arange(BS) + 6)  # SGLang's resolve all the same
    step(lean, 8.0, off=True, stale=True)  # from now on every field is stored and resolved
    assert lean.map.lean_stores == 1 and not lean.map.left[lean.last.interval].any()
    assert torch.equal(lean.fm.topk_p_buf[lean.last.interval], torch.full((BS, TOPK), 8.5))


def test_not_every_first_speculative_batch_is_checked(lean, monkeypatch):
    monkeypatch.setattr(lean.map, "sampled", lambda n: n == 2)
    first_store(lean)
    for start in (6.0, 20.0):
        step(lean, start, off=True, stale=True)
        step(lean, start + 1, resume=True)
        step(lean, start + 2)
    assert lean.map.first_speculative == 2 and lean.map.checks == 1


def test_prefill_batches_and_batches_without_futures_take_sglangs_resolve(lean):
    first_store(lean, start=5.0)
    lean.gate.current_off = True
    prefill = types.SimpleNamespace(spec_info=None, forward_mode=Extend())
    lean.fm.resolve_future(prefill)  # SGLang returns at once (no future for a prefill batch)
    extend = types.SimpleNamespace(spec_info=draft_input(indices=lean.last), forward_mode=Extend())
    lean.fm.resolve_future(extend)
    assert torch.equal(extend.spec_info.topk_p, torch.full((BS, TOPK), 5.5))  # gathered by SGLang
    assert lean.map.lean_resolves == 0


def test_before_sglangs_buffers_exist_everything_is_sglangs(lean):
    result = types.SimpleNamespace(next_draft_input=draft_input(start=3.0), off=True, resume=False)
    lean.gate.draft_stale = True
    indices = lean.fm.alloc_future_indices(BS)
    lean.fm.store_to_map(indices, result)  # the first store allocates the buffers (SGLang's lazy init)
    assert lean.fm.buf_initialized and lean.map.lean_stores == 0
    assert torch.equal(lean.fm.topk_p_buf[indices.interval], torch.full((BS, TOPK), 3.5))


@pytest.mark.parametrize("env, version, fm, want", [
    (None, "v2", "map", (False, None)),
    ("0", "v2", "map", (False, None)),
    ("1", "v1", "map", (False, "v1 has no future map")),
    ("1", "v2", None, (False, "no future map (overlap scheduler off)")),
    ("1", "v2", "bare", (False, "FutureMap has no resolve_future, store_to_map, store_to_map_for_new_batch, "
                                "is_empty_slice, future_buffer_len, buf_initialized, spec_algo, _lazy_init_buf")),
])
def test_install_where_asked_and_supported(monkeypatch, env, version, fm, want):
    if env is None:
        monkeypatch.delenv(off_future_map.ENV_SWITCH, raising=False)
    else:
        monkeypatch.setenv(off_future_map.ENV_SWITCH, env)
    future_map = {"map": FutureMap(4, 8, 16, "cpu", Eagle3()), None: None, "bare": object()}[fm]
    built, status = off_future_map.install(future_map, version, lambda: False, lambda r: False, contract.sampled)
    assert (built is not None, status) == want


def test_every_rank_lean_or_none(monkeypatch):
    monkeypatch.setenv(off_future_map.ENV_SWITCH, "1")
    built, status = off_future_map.install(FutureMap(4, 8, 16, "cpu", Eagle3()), "v2", lambda: False,
                                           lambda r: False, contract.sampled, any_rank=lambda flag: True)
    assert built is None and status == "not supported on another TP rank"


def test_a_non_speculative_future_map_is_refused():
    class NoSpec:
        def is_none(self):
            return True

    assert off_future_map.unsupported_reason(FutureMap(4, 8, 16, "cpu", NoSpec())) == "not a speculative future map"
