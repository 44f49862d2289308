"""KV slots reserved ahead (``server_patch/kv_reserve.py``) around SGLang 0.5.12's own spec-v2
``prepare_for_decode`` (its source from the pinned package, run on CPU tensors with a stand-in
allocator): the same per-request counters and ``seq_lens`` host copy as SGLang's alone, every slot a
step writes allocated, no slot held twice or lost, far fewer allocating steps, SGLang's path where
there is no room, and the proof."""

from __future__ import annotations

import ast
import importlib.util
import random
import types
from pathlib import Path

import pytest
import torch

from server_patch import contract, kv_reserve

ALLOC_LEN = 4  # max(3 steps x topk 1, 4 draft tokens)
WIDTH = 4096  # req_to_token's row length (above any request of these runs)


def sglang_prepare_for_decode():
    """``EagleDraftInputV2Mixin.prepare_for_decode`` of SGLang 0.5.12 (``speculative/eagle_info_v2.py``),
    its in-function import replaced by names given here; importing the module needs triton/CUDA."""
    root = Path(list(importlib.util.find_spec("sglang").submodule_search_locations)[0])
    tree = ast.parse((root / "srt" / "speculative" / "eagle_info_v2.py").read_text())
    mixin = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "EagleDraftInputV2Mixin")
    fn = next(n for n in mixin.body if isinstance(n, ast.FunctionDef) and n.name == "prepare_for_decode")
    fn.body = [n for n in fn.body if not isinstance(n, ast.ImportFrom)]
    ns = {"torch": torch, "get_alloc_len_per_decode": lambda: ALLOC_LEN, "alloc_token_slots": alloc_token_slots,
          "assign_req_to_token_pool_func": assign_req_to_token_pool, "EagleDraftInput": object, "ScheduleBatch": object}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), "eagle_info_v2.py", "exec"), ns)  # noqa: S102 - SGLang's own
    return ns["prepare_for_decode"]


def alloc_token_slots(tree_cache, num_tokens):
    """SGLang's ``mem_cache.common.alloc_token_slots`` without eviction (nothing is cached here)."""
    out = tree_cache.token_to_kv_pool_allocator.alloc(num_tokens)
    if out is None:
        raise RuntimeError(f"Out of memory. Try to allocate {num_tokens} tokens.")
    return out


def assign_req_to_token_pool(req_pool_indices, req_to_token, start, end, out_cache_loc, bs):
    """The triton kernel ``assign_req_to_token_pool`` (``spec_utils.py``) on the CPU: row i gets the
    next ``end[i] - start[i]`` slots of ``out_cache_loc`` at columns ``[start[i], end[i])``."""
    offset = 0
    for i in range(bs):
        n = int(end[i] - start[i])
        req_to_token[int(req_pool_indices[i]), int(start[i]):int(end[i])] = out_cache_loc[offset:offset + n]
        offset += n


SGLANG = sglang_prepare_for_decode()


class Allocator:
    """SGLang's page-size-1 ``TokenToKVPoolAllocator`` (free slots 1..size; slot 0 is padding)."""

    page_size = 1

    def __init__(self, size):
        self.size = size
        self.free_pages = torch.arange(1, size + 1, dtype=torch.int64)
        self.release_pages = torch.empty((0,), dtype=torch.int64)
        self.allocs = 0  # calls that took slots

    def available_size(self):
        return len(self.free_pages) + len(self.release_pages)

    def alloc(self, n):
        if n > len(self.free_pages):
            return None
        self.allocs += n > 0
        out, self.free_pages = self.free_pages[:n], self.free_pages[n:]
        return out

    def free(self, slots):
        self.free_pages = torch.cat((self.free_pages, slots.to(torch.int64)))


class TreeCache:
    def __init__(self, allocator, swa=False):
        self.token_to_kv_pool_allocator = allocator
        self.swa = swa

    def supports_swa(self):
        return self.swa

    def evictable_size(self):
        return 0


class Req:
    def __init__(self, pool_idx, prompt_len):
        self.req_pool_idx = pool_idx
        self.kv_committed_len = self.kv_allocated_len = prompt_len  # after prefill (schedule_batch.py:1778)
        self.decode_batch_idx = 0
        self.seq_len = prompt_len  # the GPU's seq_lens (the verify's new_seq_lens)
        self.pending = None  # the accept length of the step whose result is not processed yet
        self.output_ids, self.origin_input_ids = [7], [5]  # read by SGLang's penalty accumulation


class Batch:
    """The parts of a ``ScheduleBatch`` SGLang's v2 ``prepare_for_decode`` reads or writes."""

    device = "cpu"

    def __init__(self, pool_size, penalties=False, swa=False):
        self.token_to_kv_pool_allocator = Allocator(pool_size)
        self.tree_cache = TreeCache(self.token_to_kv_pool_allocator, swa)
        self.req_to_token_pool = types.SimpleNamespace(req_to_token=torch.zeros((64, WIDTH), dtype=torch.int32))
        self.penalized = []  # output tokens SGLang's function accumulated into the penalties
        self.sampling_info = types.SimpleNamespace(penalizer_orchestrator=types.SimpleNamespace(
            is_required=penalties, cumulate_output_tokens=self.penalized.append))
        self.reqs = []
        self.waits = 0

    def batch_size(self):
        return len(self.reqs)

    def maybe_evict_swa(self):
        pass

    def maybe_wait_verify_done(self):
        self.waits += 1

    @property
    def req_pool_indices(self):
        return torch.tensor([r.req_pool_idx for r in self.reqs], dtype=torch.int64)

    @property
    def seq_lens(self):
        return torch.tensor([r.seq_len for r in self.reqs], dtype=torch.int64)

    def add(self, pool_idx, prompt_len):
        """A prefilled request joins (its prompt's slots, no over-allocation)."""
        r = Req(pool_idx, prompt_len)
        self.req_to_token_pool.req_to_token[pool_idx, :prompt_len] = self.token_to_kv_pool_allocator.alloc(prompt_len).to(torch.int32)
        self.reqs.append(r)

    def finish(self, r):
        """``release_kv_cache``: the request's result is processed, then all its slots are freed
        (committed ones to the radix cache or free, ``[committed, allocated)`` free)."""
        process(r)
        self.token_to_kv_pool_allocator.free(self.req_to_token_pool.req_to_token[r.req_pool_idx, :r.kv_allocated_len])
        self.reqs.remove(r)


def process(r):
    """``_resolve_spec_overlap_tokens`` for one request: committed += accept - 1 (SGLang's -1: the
    bonus slot prepare pre-claimed)."""
    if r.pending is not None:
        r.kv_committed_len += r.pending - 1
        r.pending = None


def run(prepare, steps=400, pool_size=60_000, seed=0, on_share=0.5, penalties=False, swa=False, check=None):
    """Steps of the overlap scheduler's order: prepare step N, run it (it writes KV at
    ``[seq_len, seq_len + k)``, k = 4 drafted tokens ON, 1 OFF), process step N - 1's result;
    requests join and finish on a seeded schedule. Returns the trace of what SGLang's caller sees
    and the batch."""
    rng = random.Random(seed)
    batch = Batch(pool_size, penalties, swa)
    free_idx = list(range(64))
    trace = []
    for _ in range(8):
        batch.add(free_idx.pop(), rng.randint(20, 200))
    for n in range(steps):
        prepare(batch)
        trace.append(([(r.req_pool_idx, r.kv_committed_len, r.decode_batch_idx) for r in batch.reqs],
                      batch.seq_lens_cpu.tolist(), batch.seq_lens_sum))
        on = rng.random() < on_share
        for r in batch.reqs:
            written = r.seq_len + (ALLOC_LEN if on else 1)
            assert written <= r.kv_allocated_len, f"step {n}: writes slot {written - 1} of {r.kv_allocated_len} allocated"
            accept = rng.randint(1, ALLOC_LEN) if on else 1
            r.seq_len += accept
            process(r)
            r.pending = accept
        if check is not None:
            check(batch)
        if rng.random() < 0.15 and batch.reqs:
            batch.finish(rng.choice(batch.reqs))
            free_idx.append(next(i for i in range(64) if i not in {r.req_pool_idx for r in batch.reqs} and i not in free_idx))
        if rng.random() < 0.2 and free_idx and len(batch.reqs) < 40:
            batch.add(free_idx.pop(), rng.randint(20, 200))
    return trace, batch


def no_slot_lost_or_shared(batch):
    """Every slot 1..size is either free or held by exactly one position of one live request."""
    held = torch.cat([batch.req_to_token_pool.req_to_token[r.req_pool_idx, :r.kv_allocated_len].to(torch.int64)
                      for r in batch.reqs] or [torch.empty(0, dtype=torch.int64)])
    alloc = batch.token_to_kv_pool_allocator
    every = torch.cat((held, alloc.free_pages, alloc.release_pages))
    assert torch.equal(torch.sort(every).values, torch.arange(1, alloc.size + 1))


def with_reserve(tokens=16, sampled=lambda n: True):
    reserve = kv_reserve.KvReserve(tokens, ALLOC_LEN, sampled)
    return reserve, lambda batch: reserve.prepare_for_decode(SGLANG, None, batch)


def test_the_reserve_keeps_sglangs_counters_and_seq_lens_and_allocates_far_less_often():
    reference, plain = run(lambda b: SGLANG(None, b))
    reserve, prepare = with_reserve(16)
    traced, batch = run(prepare, check=no_slot_lost_or_shared)
    assert traced == reference  # committed lengths, decode_batch_idx, seq_lens_cpu / _sum, step for step
    assert reserve.ok and reserve.mismatches == 0 and reserve.checks == reserve.topups
    assert reserve.skipped + reserve.topups == 400 and reserve.fallbacks == 0
    assert reserve.skipped > 2 * reserve.topups  # most steps allocate nothing
    assert batch.token_to_kv_pool_allocator.allocs < plain.token_to_kv_pool_allocator.allocs / 2
    assert batch.waits == plain.waits == 400  # the wait for the last verify is kept on every step


def test_off_steps_skip_about_the_reserve_between_top_ups():
    reserve, prepare = with_reserve(32)
    run(prepare, steps=300, on_share=0.0, seed=3)
    assert reserve.skipped / max(reserve.topups, 1) > 3


def test_every_request_gives_back_every_slot():
    reserve, prepare = with_reserve(16)
    _, batch = run(prepare, steps=200, seed=5)
    for r in list(batch.reqs):
        batch.finish(r)
    assert batch.token_to_kv_pool_allocator.available_size() == batch.token_to_kv_pool_allocator.size


def test_a_request_near_the_row_end_is_reserved_only_up_to_it():
    reserve, prepare = with_reserve(64)
    batch = Batch(10_000)
    batch.add(0, WIDTH - 2 * ALLOC_LEN - 10)
    prepare(batch)
    assert batch.reqs[0].kv_allocated_len == WIDTH


def test_without_room_the_step_is_sglangs():
    reserve, prepare = with_reserve(64)
    batch = Batch(100 + 200)  # 200 free: SGLang's 2 x 8, not the reserve's 2 x 72 and 2 x 64 more
    batch.add(0, 50)
    batch.add(1, 50)
    prepare(batch)
    assert reserve.fallbacks == 1 and [r.kv_allocated_len for r in batch.reqs] == [50 + 2 * ALLOC_LEN] * 2
    batch.token_to_kv_pool_allocator.free(torch.arange(301, 601))  # room again (slots a finished request held)
    batch.token_to_kv_pool_allocator.size = 600
    batch.reqs[0].kv_committed_len += ALLOC_LEN  # a step consumed its slack
    prepare(batch)
    assert reserve.topups == 1 and batch.reqs[0].kv_allocated_len == 51 + ALLOC_LEN + 2 * ALLOC_LEN + 64


def test_a_pool_more_than_four_fifths_full_after_the_top_up_gets_sglangs_step():
    """Where requests wait for memory, slots held ahead cost running requests (h100-2026-12-07h)."""
    reserve, prepare = with_reserve(16)
    batch = Batch(1_000)
    batch.add(0, 700)  # 300 free: the top-up (24) and another 16 leave 260, more than a fifth of 1,000
    prepare(batch)
    assert reserve.topups == 1
    batch.add(1, 200)  # 76 free now: SGLang's step
    prepare(batch)
    assert reserve.fallbacks == 1 and batch.reqs[1].kv_allocated_len == 200 + 2 * ALLOC_LEN


@pytest.mark.parametrize("kw", [{"penalties": True}, {"swa": True}])
def test_penalties_and_a_sliding_window_leave_the_step_to_sglang(kw):
    reserve, prepare = with_reserve(16)
    _, batch = run(prepare, steps=20, **kw)
    assert reserve.fallbacks == 20 and reserve.topups == reserve.skipped == 0
    assert len(batch.penalized) == (20 if kw.get("penalties") else 0)


@pytest.mark.parametrize("corrupt, why", [
    (lambda t, r, other: t.__setitem__((r.req_pool_idx, r.kv_allocated_len - 1), 0), "padding slot 0"),
    (lambda t, r, other: t.__setitem__((r.req_pool_idx, r.kv_allocated_len - 1),
                                       t[other.req_pool_idx, other.kv_allocated_len - 1]), "same slot"),
])
def test_the_proof_finds_a_slot_that_is_padding_or_held_twice_and_stops_the_reserve(corrupt, why, caplog):
    reserve, prepare = with_reserve(16)
    batch = Batch(10_000)
    batch.add(0, 50)
    batch.add(1, 60)
    prepare(batch)
    assert kv_reserve.owned_slots_problem(batch) is None
    corrupt(batch.req_to_token_pool.req_to_token, batch.reqs[0], batch.reqs[1])
    assert why in kv_reserve.owned_slots_problem(batch)
    batch.add(2, 70)  # a newcomer: the next step tops up, and is checked
    prepare(batch)
    assert not reserve.ok and reserve.kv_reserve == kv_reserve.PROOF_FAILED and reserve.mismatches == 1
    assert "allocate as SGLang does" in caplog.text
    before = reserve.fallbacks
    prepare(batch)
    assert reserve.fallbacks == before + 1  # SGLang's from now on


def test_the_proof_finds_a_reserved_slot_that_is_also_free():
    reserve, prepare = with_reserve(16)
    batch = Batch(10_000)
    batch.add(0, 50)
    prepare(batch)
    r = batch.reqs[0]
    batch.token_to_kv_pool_allocator.free(batch.req_to_token_pool.req_to_token[0, r.kv_allocated_len - 1:r.kv_allocated_len])
    assert "free_pages" in kv_reserve.owned_slots_problem(batch)


def test_the_proof_is_sampled_by_the_contracts_rule():
    reserve, prepare = with_reserve(16, contract.sampled)
    run(prepare, steps=400)
    assert reserve.checks == contract.sampled_count(reserve.topups)


@pytest.mark.parametrize("raw, tokens", [("", None), ("0", None), (" 16 ", 16), (str(kv_reserve.MAX_TOKENS), kv_reserve.MAX_TOKENS)])
def test_the_env_value(raw, tokens):
    assert kv_reserve.tokens_from_env({kv_reserve.ENV_SWITCH: raw}) == tokens
    assert kv_reserve.tokens_from_env({}) is None


@pytest.mark.parametrize("raw", ["abc", "-3", "1.5", str(kv_reserve.MAX_TOKENS + 1)])
def test_a_bad_env_value_is_named(raw):
    with pytest.raises(kv_reserve.KvReserveConfigError, match=f"SPECCONSOLE_KV_RESERVE='{raw}'.*whole number"):
        kv_reserve.tokens_from_env({kv_reserve.ENV_SWITCH: raw})


def test_set_up_installs_only_where_it_can_run_and_reports_the_spec_gate_fields(monkeypatch):
    monkeypatch.setattr(kv_reserve, "sglang_alloc_len", lambda server_args: ALLOC_LEN)
    args = types.SimpleNamespace(page_size=1)
    env = {kv_reserve.ENV_SWITCH: "16"}
    names = [n for n in contract.SPEC_GATE_FIELDS if n.startswith("kv_reserve")]
    try:
        off = kv_reserve.set_up("v2", args, contract.sampled, environ={})
        assert contract.fields_of(off) == {"kv_reserve": None, "kv_reserve_tokens": None, "kv_reserve_topups": 0,
                                           "kv_reserve_skipped_steps": 0, "kv_reserve_checks": 0,
                                           "kv_reserve_mismatches": 0}
        assert kv_reserve.active() is None
        reserve = kv_reserve.set_up("v2", args, contract.sampled, environ=env)
        assert reserve.tokens == 16 and reserve.bound == 2 * ALLOC_LEN and kv_reserve.active() is reserve
        assert set(contract.fields_of(reserve)) == set(names) and reserve.kv_reserve == kv_reserve.ON
        assert kv_reserve.set_up("v1", args, contract.sampled, environ=env).kv_reserve == \
            "v1 allocates and frees inside each step"
        assert kv_reserve.set_up("v2", types.SimpleNamespace(page_size=16), contract.sampled, environ=env).kv_reserve == \
            "page size 16 (only 1 is supported)"
        assert kv_reserve.active() is None
    finally:
        kv_reserve.install(None)


def test_the_hook_is_sglangs_function_unless_a_reserve_is_installed():
    batch = Batch(10_000)
    batch.add(0, 50)
    calls = []
    original = lambda d, b: calls.append(b)  # noqa: E731
    kv_reserve.install(None)
    kv_reserve.around_prepare_for_decode(original, None, batch)
    assert calls == [batch]
    reserve, _ = with_reserve(16)
    kv_reserve.install(reserve)
    try:
        kv_reserve.around_prepare_for_decode(lambda d, b: SGLANG(d, b), None, batch)
        assert reserve.topups == 1 and batch.reqs[0].kv_allocated_len == 50 + 2 * ALLOC_LEN + 16
    finally:
        kv_reserve.install(None)
