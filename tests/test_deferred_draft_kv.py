"""Deferred draft K/V of v2 OFF decode steps (``server_patch/deferred_draft_kv.py``): rows queued
per OFF step, stored in one flush with the last row per cache slot winning, flushed before every
forward that is not a deferred OFF step, and proven against the immediate KV-only extend. CPU tests:
a fake KV pool and a K/V function of (token, position, hidden) stand in for the draft model."""

from __future__ import annotations

import types

import pytest
import torch

from server_patch import deferred_draft_kv as dkv
from server_patch import off_state
from server_patch import scheduler_hooks as sh
from server_patch.off_state import OffStepRunner

SLOTS, HEADS, DIM, HIDDEN = 64, 2, 4, 6


class Pool:
    """A draft KV pool of one layer: K and V buffers (SLOTS, HEADS, DIM); writes are logged."""

    def __init__(self):
        self.k = torch.zeros(SLOTS, HEADS, DIM)
        self.v = torch.zeros(SLOTS, HEADS, DIM)
        self.writes = []

    def get_key_buffer(self, layer_id):
        return self.k

    def get_value_buffer(self, layer_id):
        return self.v


def kv_of(tokens, positions, hidden):
    """The draft's K/V of tokens (T,) at positions (T,) with hidden (T, HIDDEN): a function of
    each token's own inputs only, as EAGLE-3's first-layer K/V are."""
    base = tokens.float()[:, None] * 1000 + positions.float()[:, None] + hidden.float().sum(1, keepdim=True)
    k = (base[:, :, None] + torch.arange(HEADS * DIM).float().view(1, HEADS, DIM)).expand(-1, HEADS, DIM)
    return k, -k


def make_store(offset=0.0):
    def store(tokens, positions, hidden, pool, loc):
        k, v = kv_of(tokens, positions, hidden)
        pool.k[loc] = k + offset
        pool.v[loc] = v + offset
        pool.writes.append(loc.clone())
        return hidden

    return store


def immediate_write(pool, tokens, positions, slots, hidden):
    k, v = kv_of(tokens, positions, hidden)
    pool.k[slots] = k
    pool.v[slots] = v


def make_deferred(pool, capacity=16, store=None, sampled=lambda n: False, any_rank=bool):
    import contextlib

    return dkv.DeferredDraftKv(store or make_store(), pool, types.SimpleNamespace(layer_id=0), capacity,
                               contextlib.nullcontext, sampled, any_rank)


def rows(tokens, positions, slots):
    t = torch.tensor(tokens)
    return (t, torch.tensor(positions), torch.tensor(slots), torch.arange(len(tokens) * HIDDEN).float().view(-1, HIDDEN) + t[:, None])


def test_keep_last_per_slot_marks_the_last_row_of_each_slot():
    keep = dkv.keep_last_per_slot(torch.tensor([5, 3, 5, 7, 3, 9]))
    assert keep.tolist() == [False, False, True, True, True, True]
    assert dkv.keep_last_per_slot(torch.tensor([4])).tolist() == [True]


def test_a_flush_leaves_the_pool_as_immediate_writes_in_step_order_would_with_reused_slots():
    """Step 1: requests A (slot 10) and B (slot 11); A finishes, its slot 10 goes to B's next
    token at step 2 (and C's at 12). The later row wins slot 10, as immediate writes would."""
    steps = [rows([1, 2], [7, 3], [10, 11]), rows([3, 4], [4, 9], [10, 12]), rows([5], [5], [13])]
    reference = Pool()
    for step in steps:
        immediate_write(reference, step[0], step[1], step[2], step[3])
    pool = Pool()
    d = make_deferred(pool)
    assert d.takes(2, steps[0][3])
    for step in steps:
        d.append(*step)
    assert d.fill == 5 and pool.writes == []  # nothing stored yet
    d.flush()
    used = [10, 11, 12, 13]
    assert torch.equal(pool.k[used], reference.k[used]) and torch.equal(pool.v[used], reference.v[used])
    # the superseded row went to the padding slot, one forward stored all rows
    assert len(pool.writes) == 1 and pool.writes[0].tolist() == [0, 11, 10, 12, 13]
    assert (d.fill, d.rows, d.flushes, d.count) == (0, 5, 1, 3)
    d.flush()  # nothing pending: no forward
    assert len(pool.writes) == 1


def test_rows_that_do_not_fit_flush_first_and_more_rows_than_the_capacity_are_refused():
    pool = Pool()
    d = make_deferred(pool, capacity=4)
    first = rows([1, 2, 3], [0, 1, 2], [1, 2, 3])
    assert d.takes(3, first[3])
    d.append(*first)
    d.append(*rows([4, 5], [3, 4], [4, 5]))  # 3 + 2 > 4: the first step is stored, then queued
    assert pool.writes[0].tolist() == [1, 2, 3] and d.fill == 2
    assert not d.takes(5, first[3])
    with pytest.raises(ValueError, match="do not fit"):
        d.append(*rows([1, 2, 3, 4, 5], [0] * 5, [1, 2, 3, 4, 5]))


def test_append_before_the_buffers_exist_is_a_clear_error():
    d = make_deferred(Pool())
    with pytest.raises(ValueError, match="takes"):
        d.append(*rows([1], [0], [1]))


def test_the_proof_passes_when_the_flush_stores_what_the_immediate_extend_stored():
    pool = Pool()
    d = make_deferred(pool, sampled=lambda n: n == 2)
    step1, step2, step3 = rows([1, 2], [0, 0], [1, 2]), rows([3, 4], [1, 1], [3, 4]), rows([5], [2], [3])
    assert d.takes(2, step1[3])
    assert not d.wants_check()
    d.append(*step1)
    assert d.wants_check()
    immediate_write(pool, *step2)
    d.append(*step2, reference=d.snapshot(step2[2]))
    d.append(*step3)  # takes slot 3 after step 2: step 2's row there is not checked
    d.flush()
    assert (d.checks, d.mismatches, d.ok) == (1, 0, True)


def test_a_flush_that_stores_other_kv_fails_the_proof_on_every_rank_and_stops_deferral(caplog):
    pool = Pool()
    calls = []

    def any_rank(flag):
        calls.append(flag)
        return flag

    d = make_deferred(pool, store=make_store(offset=500.0), sampled=lambda n: True, any_rank=any_rank)
    step = rows([1, 2], [0, 0], [1, 2])
    assert d.takes(2, step[3])
    immediate_write(pool, *step)
    d.append(*step, reference=d.snapshot(step[2]))
    d.flush()
    assert (d.checks, d.mismatches, d.ok) == (1, 1, False)
    assert "deferred draft K/V" in caplog.text and "immediate KV-only extend" in caplog.text
    assert calls == [False, True]  # the allocation's agreement, then the proof's
    assert not d.takes(2, step[3])


def test_a_failed_buffer_allocation_stops_deferral_with_its_reason(monkeypatch):
    d = make_deferred(Pool())

    def no_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(torch, "empty", no_memory)
    assert not d.takes(2, torch.zeros(2, HIDDEN))
    assert not d.ok and "no GPU memory" in d.reason


def test_capacity_from_the_environment(monkeypatch):
    monkeypatch.delenv(dkv.TOKENS_ENV, raising=False)
    assert dkv.capacity_from_env() == dkv.DEFAULT_TOKENS
    monkeypatch.setenv(dkv.TOKENS_ENV, "512")
    assert dkv.capacity_from_env() == 512
    for bad in ("0", "-3", "lots"):
        monkeypatch.setenv(dkv.TOKENS_ENV, bad)
        with pytest.raises(ValueError, match=dkv.TOKENS_ENV):
            dkv.capacity_from_env()


def test_servers_whose_kv_pool_is_read_outside_the_forward_keep_immediate_writes():
    ns = types.SimpleNamespace
    assert dkv.server_reason(ns(enable_hierarchical_cache=False, disaggregation_mode="null")) is None
    assert "hierarchical" in dkv.server_reason(ns(enable_hierarchical_cache=True))
    assert "disaggregation" in dkv.server_reason(ns(disaggregation_mode="prefill"))


# -- the OFF step's draft extend (off_state.OffStepRunner._deferred_draft_extend_v2) ------------


def make_runner(pool, sampled=lambda n: False, capacity=16):
    runner = OffStepRunner.__new__(OffStepRunner)
    runner.deferred_kv = make_deferred(pool, capacity=capacity, sampled=sampled)
    return runner


def off_step(tokens, positions, slots, bs_hidden=None):
    t, p, s, h = rows(tokens, positions, slots)
    batch = types.SimpleNamespace(seq_lens=p, out_cache_loc=s)
    ndi = types.SimpleNamespace(topk_p=None, topk_index=None, hidden_states=None)
    result = types.SimpleNamespace(next_token_ids=t, logits_output=types.SimpleNamespace(hidden_states=h),
                                   next_draft_input=ndi)
    old = types.SimpleNamespace(topk_p=torch.ones(len(tokens), 1), topk_index=torch.zeros(len(tokens), 1),
                                hidden_states=torch.full((len(tokens), 3), 2.0))
    return batch, result, old


def test_an_off_step_queues_its_rows_and_keeps_its_stale_top_k_instead_of_a_draft_extend():
    pool = Pool()
    runner = make_runner(pool)
    immediate = []
    step = runner._deferred_draft_extend_v2(lambda b, r: immediate.append(b))
    batch, result, old = off_step([1, 2], [5, 6], [3, 4])
    runner._off_draft_input = old
    step(batch, result)
    assert immediate == [] and runner.deferred_kv.fill == 2
    ndi = result.next_draft_input
    assert ndi.topk_p is old.topk_p and ndi.topk_index is old.topk_index and ndi.hidden_states is old.hidden_states
    runner.flush_deferred_kv()
    k, _ = kv_of(torch.tensor([1, 2]), torch.tensor([5, 6]), result.logits_output.hidden_states)
    assert torch.equal(pool.k[[3, 4]], k)


def test_a_proof_step_also_runs_the_immediate_extend_and_is_checked_at_the_flush():
    pool = Pool()
    runner = make_runner(pool, sampled=lambda n: True)

    def immediate(batch, result):
        immediate_write(pool, result.next_token_ids, batch.seq_lens, batch.out_cache_loc,
                        result.logits_output.hidden_states)

    step = runner._deferred_draft_extend_v2(immediate)
    batch, result, old = off_step([1, 2], [5, 6], [3, 4])
    runner._off_draft_input = old
    step(batch, result)
    runner.flush_deferred_kv()
    assert (runner.deferred_kv.checks, runner.deferred_kv.mismatches) == (1, 0)


def test_a_step_that_cannot_be_deferred_flushes_the_pending_rows_then_writes_at_once():
    pool = Pool()
    runner = make_runner(pool, capacity=2)
    order = []
    step = runner._deferred_draft_extend_v2(lambda b, r: order.append("immediate"))
    batch, result, old = off_step([1, 2], [5, 6], [3, 4])
    runner._off_draft_input = old
    step(batch, result)
    big, big_result, big_old = off_step([1, 2, 3], [7, 8, 9], [3, 4, 5])
    runner._off_draft_input = big_old
    step(big, big_result)  # 3 rows > capacity 2
    assert len(pool.writes) == 1 and order == ["immediate"] and runner.deferred_kv.fill == 0


def test_off_deferred_draft_kv_says_on_or_why_not():
    runner = OffStepRunner.__new__(OffStepRunner)
    assert runner.off_deferred_draft_kv is None  # not asked for
    runner._deferred_kv_reason = "v1 (EAGLEWorker)"
    assert runner.off_deferred_draft_kv == "v1 (EAGLEWorker)"
    runner.deferred_kv = make_deferred(Pool())
    runner.v2, runner.kv_only = True, types.SimpleNamespace(ok=True)
    assert runner.off_deferred_draft_kv == "on"
    runner.deferred_kv.ok = False
    assert runner.off_deferred_draft_kv == "proof failed"


def test_run_off_step_flushes_before_a_resume_step_and_not_before_a_deferred_one(monkeypatch):
    runner = OffStepRunner.__new__(OffStepRunner)
    runner.v2 = True
    runner.early_seq_lens = False
    runner.kv_only = types.SimpleNamespace(ok=True, count=0)
    runner.deferred_kv = types.SimpleNamespace(fill=3, count=0, flush=lambda enter_context: flushed.append(enter_context))
    runner.lean_v1 = None
    runner.off_target_graph = types.SimpleNamespace(count=0)
    runner.resume_steps = runner.off_steps_cuda_graph = 0
    flushed = []

    def deferred_step(self, forward, batch, kv_only):
        runner.deferred_kv.count += 1  # the step's rows were queued
        return "result"

    monkeypatch.setattr(OffStepRunner, "_run_sglang_off_step", deferred_step)
    runner.run_off_step(None, "batch")
    assert flushed == [] and runner.draft_stale  # the resume step must refresh the top-k
    monkeypatch.setattr(OffStepRunner, "_run_sglang_off_step", lambda self, forward, batch, kv_only: "result")
    runner.run_off_step(None, "batch", resume=True)
    assert flushed == [True] and not runner.draft_stale


# -- the scheduler's forwards (scheduler_hooks.GateRuntime) -------------------------------------


def test_every_forward_but_a_gated_off_step_flushes_the_deferred_rows_first():
    from tests.test_scheduler_hooks import Batch, make_scheduler, step as gate_step

    sched, worker, rt = make_scheduler(threshold=4)
    flushes = []
    rt.runner.flush_deferred_kv = lambda: flushes.append(len(worker.forwarded))
    worker.forward_batch_generation(Batch(3, decode=False))  # a prefill, speculation on: flushed before it
    assert flushes == [0]
    gate_step(sched, Batch(5))  # OFF: no flush
    worker.forward_batch_generation(Batch(3, decode=False))  # a prefill while OFF: the runner's (run_prefill)
    assert flushes == [0] and len(rt.runner.prefill_batches) == 1
    gate_step(sched, Batch(2))  # ON (a resume step: the runner flushes it itself)
    gate_step(sched, Batch(2))  # ON: flushed before it
    assert flushes == [0, 4]


def test_the_runtime_reports_deferred_rows_flushes_and_counts_their_checks_with_the_kv_only_ones():
    runtime = sh.GateRuntime.__new__(sh.GateRuntime)
    runtime.runner = types.SimpleNamespace(
        kv_only=types.SimpleNamespace(checks=2, mismatches=0),
        deferred_kv=types.SimpleNamespace(checks=3, mismatches=1, rows=40, flushes=5))
    assert (runtime.off_kv_only_checks, runtime.off_kv_only_mismatches) == (5, 1)
    assert (runtime.off_deferred_draft_kv_rows, runtime.off_deferred_draft_kv_flushes) == (40, 5)
    assert off_state.deferred_draft_kv is dkv


# -- prefills while OFF (off_state.OffStepRunner.run_prefill with deferral) ---------------------


def test_prefill_rows_shift_each_request_left_with_its_drawn_token_last_at_its_positions():
    ids = torch.tensor([10, 11, 12, 20, 21])
    tokens, positions = off_state.prefill_rows(ids, torch.tensor([13, 22]), [0, 7], [3, 2])
    assert tokens.tolist() == [11, 12, 13, 21, 22]  # what _draft_extend_for_prefill writes
    assert positions.tolist() == [0, 1, 2, 7, 8]
    assert ids.tolist() == [10, 11, 12, 20, 21]  # the caller decides whether to write them back


def test_prefill_rows_copy_to_the_device_once(monkeypatch):
    """Each host-to-device copy is a pin and a launch on a scheduler that is launch-bound around
    prefills (h100-2026-12-07e: 2 pin_memory a prefill, 103 us): the drawn tokens' places and the
    positions go in one."""
    calls = []
    real = off_state.host_copy.to_device
    monkeypatch.setattr(off_state.host_copy, "to_device", lambda v, d, *a: calls.append(len(v)) or real(v, d, *a))
    tokens, positions = off_state.prefill_rows(torch.tensor([5, 6, 7, 8]), torch.tensor([9]), [12], [4])
    assert calls == [1 + 4] and tokens.tolist() == [6, 7, 8, 9] and positions.tolist() == [12, 13, 14, 15]


class DraftInput:
    """Stands in for SGLang's ``EagleDraftInput`` (its constructor and the idle input's helpers)."""

    def __init__(self, **fields):
        self.__dict__.update(fields)

    @classmethod
    def hidden_size_for(cls, worker):
        return 3

    @classmethod
    def dtype_for(cls, worker):
        return torch.bfloat16


def prefill_runner(pool, monkeypatch, sampled=lambda n: False, capacity=16):
    monkeypatch.setattr(off_state, "_eagle_draft_input_cls", lambda: DraftInput)
    runner = make_runner(pool, sampled=sampled, capacity=capacity)
    runner.v2, runner.topk = True, 1
    runner.worker = types.SimpleNamespace(draft_worker=types.SimpleNamespace())
    return runner


def prefill_batch():
    mode = types.SimpleNamespace(is_idle=lambda: False)
    return types.SimpleNamespace(input_ids=torch.tensor([10, 11, 12, 20, 21]), extend_prefix_lens=[0, 7],
                                 extend_seq_lens=[3, 2], out_cache_loc=torch.tensor([5, 6, 7, 8, 9]),
                                 seq_lens=torch.tensor([3, 9]), forward_mode=mode)


def test_a_prefill_while_off_queues_its_prompt_rows_and_returns_placeholder_top_k(monkeypatch):
    pool = Pool()
    runner = prefill_runner(pool, monkeypatch)
    immediate = []
    extend = runner._deferred_draft_extend_for_prefill(lambda *a: immediate.append(a))
    batch, hidden = prefill_batch(), torch.arange(30).float().view(5, 6)
    ndi = extend(batch, hidden, torch.tensor([13, 22]))
    assert immediate == [] and runner.deferred_kv.fill == 5 and pool.writes == []
    assert batch.input_ids.tolist() == [11, 12, 13, 21, 22] and batch.spec_info is ndi
    assert ndi.bonus_tokens.tolist() == [13, 22] and ndi.new_seq_lens is batch.seq_lens
    assert ndi.topk_p.shape == (2, 1) and ndi.topk_p.dtype == torch.float32
    assert ndi.topk_index.dtype == torch.int64 and ndi.hidden_states.shape == (2, 3)
    assert ndi.hidden_states.dtype == torch.bfloat16
    runner.flush_deferred_kv()
    k, _ = kv_of(torch.tensor([11, 12, 13, 21, 22]), torch.tensor([0, 1, 2, 7, 8]), hidden)
    assert torch.equal(pool.k[[5, 6, 7, 8, 9]], k)


def test_a_prefill_that_does_not_fit_flushes_and_runs_the_kv_only_draft_prefill(monkeypatch):
    pool = Pool()
    runner = prefill_runner(pool, monkeypatch, capacity=4)
    extend = runner._deferred_draft_extend_for_prefill(lambda *a: "immediate")
    assert extend(prefill_batch(), torch.zeros(5, 6), torch.tensor([13, 22])) == "immediate"
    assert runner.deferred_kv.fill == 0


def test_a_proof_prefill_runs_the_kv_only_draft_prefill_too_and_is_checked_at_the_flush(monkeypatch):
    pool = Pool()
    runner = prefill_runner(pool, monkeypatch, sampled=lambda n: True)

    def immediate(batch, hidden, next_ids, mm):
        tokens, positions = off_state.prefill_rows(batch.input_ids, next_ids, batch.extend_prefix_lens,
                                                   batch.extend_seq_lens)
        immediate_write(pool, tokens, positions, batch.out_cache_loc, hidden)
        return "kv-only prefill's draft input"

    extend = runner._deferred_draft_extend_for_prefill(immediate)
    assert extend(prefill_batch(), torch.arange(30).float().view(5, 6), torch.tensor([13, 22])) \
        == "kv-only prefill's draft input"
    runner.flush_deferred_kv()
    assert (runner.deferred_kv.checks, runner.deferred_kv.mismatches) == (1, 0)


def test_run_prefill_defers_without_flushing_first_and_leaves_the_draft_stale(monkeypatch):
    import contextlib

    pool = Pool()
    runner = prefill_runner(pool, monkeypatch)
    runner.kv_only_prefills, runner.draft_stale = 0, False
    runner.prefill_kv_only = types.SimpleNamespace(ok=True, count=0, installed=contextlib.nullcontext)

    class Owner:
        def _draft_extend_for_prefill(self, *a):
            return "immediate"

    runner._draft_owner = owner = Owner()
    step = rows([1], [4], [30])
    assert runner.deferred_kv.takes(1, step[3])
    runner.deferred_kv.append(*step)  # a pending OFF decode row

    def forward(batch):
        return owner._draft_extend_for_prefill(batch, torch.zeros(5, 6), torch.tensor([13, 22]))

    runner.run_prefill(forward, prefill_batch())
    assert pool.writes == [] and runner.deferred_kv.fill == 6  # queued behind the decode row
    assert runner.kv_only_prefills == 1 and runner.draft_stale
    assert "_draft_extend_for_prefill" not in vars(owner)  # SGLang's method is back


def test_a_flush_from_inside_sglangs_draft_stage_does_not_enter_the_draft_tp_context_again():
    """SGLang's ``draft_tp_context`` refuses to nest (``patch_tensor_parallel_group`` asserts): a
    flush on a full buffer runs inside the draft stage (an OFF step's or a prefill's), others not."""
    import contextlib

    entered = []

    @contextlib.contextmanager
    def context():
        assert not entered or entered[-1] == "out", "nested draft TP context"
        entered.append("in")
        yield
        entered.append("out")

    pool = Pool()
    d = dkv.DeferredDraftKv(make_store(), pool, types.SimpleNamespace(layer_id=0), 3, context, lambda n: False)
    first = rows([1, 2], [0, 1], [1, 2])
    assert d.takes(2, first[3])
    d.append(*first)
    d.append(*rows([3, 4], [2, 3], [3, 4]))  # full: flushed where it is, inside the draft stage
    assert len(pool.writes) == 1 and entered == []
    d.flush()  # from the scheduler's side
    assert len(pool.writes) == 2 and entered == ["in", "out"]
    runner = make_runner(pool)
    runner.deferred_kv = d
    d.append(*rows([5], [4], [5]))
    runner.flush_deferred_kv(inside_draft=True)
    assert entered == ["in", "out"] and d.fill == 0


def test_weight_updates_and_memory_release_store_the_deferred_rows_first():
    """Rows queued before a weight update are stored with the weights their hidden states came from."""
    from tests.test_scheduler_hooks import make_scheduler

    sched, worker, rt = make_scheduler(threshold=4)
    order = []
    rt.runner.flush_deferred_kv = lambda: order.append("flush")
    for hook in ("update_weights_from_distributed", "update_weights_from_tensor", "update_weights_from_ipc",
                 "release_memory_occupation"):
        assert (f"{sh.SCHEDULER}.{hook}", sh.around_weight_change, "AROUND") in sh.HOOKS
    assert sh.around_weight_change(lambda s, req: order.append(("update", req)) or "done", sched, "req") == "done"
    update = types.SimpleNamespace(recapture_cuda_graph=False)
    sh.around_update_weights_from_disk(lambda s, req: order.append("disk"), sched, update)
    assert order == ["flush", ("update", "req"), "flush", "disk"]
    plain = types.SimpleNamespace()  # a scheduler without the gate: nothing to flush
    assert sh.around_weight_change(lambda s, req: "plain", plain, "req") == "plain"


def test_requests_sent_as_embeddings_take_the_kv_only_draft_prefill(monkeypatch):
    pool = Pool()
    runner = prefill_runner(pool, monkeypatch)
    extend = runner._deferred_draft_extend_for_prefill(lambda *a: "immediate")
    for field in ("input_embeds", "replace_embeds"):
        batch = prefill_batch()
        setattr(batch, field, torch.zeros(5, 4))
        assert extend(batch, torch.zeros(5, 6), torch.tensor([13, 22])) == "immediate"
        assert runner.deferred_kv.fill == 0 and batch.input_ids.tolist() == [10, 11, 12, 20, 21]


def test_a_proof_step_whose_slots_were_all_taken_later_is_not_counted_as_a_check():
    pool = Pool()
    d = make_deferred(pool, sampled=lambda n: n == 1)
    step = rows([1], [0], [7])
    assert d.takes(1, step[3])
    immediate_write(pool, *step)
    d.append(*step, reference=d.snapshot(step[2]))
    d.append(*rows([2], [3], [7]))  # slot 7 handed to another request's token
    d.flush()
    assert (d.checks, d.mismatches, d.ok) == (0, 0, True)


def test_buffers_allocated_at_start_up_take_only_hidden_states_of_their_width_and_dtype():
    d = make_deferred(Pool())
    assert d.allocate(HIDDEN, torch.float32, "cpu")
    assert d.takes(2, torch.zeros(2, HIDDEN))
    assert not d.takes(2, torch.zeros(2, HIDDEN + 1))  # another width: stored at once instead
    assert not d.takes(2, torch.zeros(2, HIDDEN, dtype=torch.float64))
    assert d.ok


def test_the_runner_allocates_the_buffers_at_start_up_as_sglang_sizes_its_draft_extend_buffers(monkeypatch):
    monkeypatch.delenv(dkv.ENV_SWITCH, raising=False)
    monkeypatch.delenv(dkv.TOKENS_ENV, raising=False)
    monkeypatch.setattr(off_state, "_extend_hidden_layout", lambda draft_worker: (HIDDEN, torch.bfloat16))
    runner = OffStepRunner.__new__(OffStepRunner)
    runner.v2, runner.any_rank = True, bool
    runner.kv_only = types.SimpleNamespace(ok=True)
    layer = types.SimpleNamespace(layer_id=0)
    model = types.SimpleNamespace(model=types.SimpleNamespace(layers=[types.SimpleNamespace(
        self_attn=types.SimpleNamespace(attn=layer))]))
    runner._draft_model = lambda: model
    monkeypatch.setattr(off_state.draft_kv_only, "kv_store", lambda m: make_store())
    runner.worker = types.SimpleNamespace(
        device="cpu", server_args=types.SimpleNamespace(),
        draft_worker=types.SimpleNamespace(draft_runner=types.SimpleNamespace(token_to_kv_pool=Pool())))
    runner._draft_owner = runner.worker.draft_worker
    runner._init_deferred_kv()
    assert runner.off_deferred_draft_kv == "on"
    assert runner.deferred_kv._buffers[3].shape == (dkv.DEFAULT_TOKENS, HIDDEN)
    assert runner.deferred_kv._buffers[3].dtype == torch.bfloat16


# -- v1: the lean OFF step's rows (opt-in, SPECCONSOLE_OFF_DEFERRED_DRAFT_KV_V1=1) ----------------


def v1_runner(monkeypatch, lean_v1=True):
    """An OffStepRunner of a v1 worker, ``_init_deferred_kv`` not yet run."""
    monkeypatch.delenv(dkv.ENV_SWITCH, raising=False)
    monkeypatch.delenv(dkv.TOKENS_ENV, raising=False)
    monkeypatch.setattr(off_state, "_extend_hidden_layout", lambda owner: (HIDDEN, torch.float32))
    monkeypatch.setattr(off_state.draft_kv_only, "kv_store", lambda m: make_store())
    runner = OffStepRunner.__new__(OffStepRunner)
    runner.v2, runner.any_rank = False, bool
    runner.kv_only = types.SimpleNamespace(ok=True, count=0)
    layer = types.SimpleNamespace(layer_id=0)
    model = types.SimpleNamespace(model=types.SimpleNamespace(layers=[types.SimpleNamespace(
        self_attn=types.SimpleNamespace(attn=layer))]))
    pool = Pool()
    runner.worker = types.SimpleNamespace(device="cpu", server_args=types.SimpleNamespace(),
                                          draft_model_runner=types.SimpleNamespace(model=model, token_to_kv_pool=pool))
    runner._draft_owner = runner.worker
    runner.lean_v1 = types.SimpleNamespace(ok=True, deferred=None) if lean_v1 else None
    runner._lean_v1_reason = None if lean_v1 else "topk > 1"
    return runner, pool


def test_v1_defers_only_when_asked_and_only_with_lean_off_steps(monkeypatch):
    runner, _ = v1_runner(monkeypatch)
    monkeypatch.delenv(dkv.V1_ENV_SWITCH, raising=False)
    runner._init_deferred_kv()
    assert runner.deferred_kv is None and dkv.V1_ENV_SWITCH + "=1" in runner.off_deferred_draft_kv
    runner, _ = v1_runner(monkeypatch, lean_v1=False)
    monkeypatch.setenv(dkv.V1_ENV_SWITCH, "1")
    runner._init_deferred_kv()
    assert runner.deferred_kv is None and runner.off_deferred_draft_kv == "no lean v1 OFF steps (topk > 1)"


def test_v1_lean_steps_get_the_buffer_on_the_draft_models_kv_pool(monkeypatch):
    runner, pool = v1_runner(monkeypatch)
    monkeypatch.setenv(dkv.V1_ENV_SWITCH, "1")
    runner._init_deferred_kv()
    assert runner.lean_v1.deferred is runner.deferred_kv and runner.deferred_kv.pool is pool
    assert runner.off_deferred_draft_kv == "on"
    runner.lean_v1.ok = False  # lean steps off: nothing defers any more
    assert runner.off_deferred_draft_kv == "lean v1 OFF steps off (their proof failed)"


def test_v1_a_lean_step_defers_without_a_flush_and_sglangs_path_flushes_first(monkeypatch):
    runner, _ = v1_runner(monkeypatch)
    monkeypatch.setenv(dkv.V1_ENV_SWITCH, "1")
    runner._init_deferred_kv()
    flushed = []
    runner.deferred_kv.flush = lambda enter_context=True: flushed.append(enter_context)
    runner.deferred_kv.fill = 3  # pending rows
    runner.early_seq_lens = False
    runner.off_target_graph = types.SimpleNamespace(count=0)
    runner.resume_steps = runner.off_steps_cuda_graph = 0
    runner.on_state = runner.off_kv_state = "state"
    runner._apply = lambda state: None
    why = []

    def run(batch, verify_input):
        runner.deferred_kv.count += 1  # the lean step queued its rows
        return "lean result"

    runner.lean_v1.reason = lambda batch: why[0] if why else None
    runner.lean_v1.run = run
    assert runner.run_off_step(None, "batch") == "lean result"
    assert flushed == [] and runner.draft_stale
    why.append("logprobs")  # a batch the lean step does not take: SGLang's OFF path stores at once
    monkeypatch.setattr(OffStepRunner, "_run_sglang_off_step", lambda self, forward, batch, kv_only: "sglang result")
    assert runner.run_off_step(None, "batch") == "sglang result" and flushed == [True]


def test_v1_a_prefill_while_off_flushes_first_and_keeps_the_kv_only_draft_prefill(monkeypatch):
    import contextlib

    runner, _ = v1_runner(monkeypatch)
    monkeypatch.setenv(dkv.V1_ENV_SWITCH, "1")
    runner._init_deferred_kv()
    order = []
    runner.deferred_kv.fill = 2
    runner.deferred_kv.flush = lambda enter_context=True: order.append("flush")
    runner.kv_only_prefills, runner.draft_stale = 0, False
    kv = types.SimpleNamespace(ok=True, count=0, installed=contextlib.nullcontext)
    runner.prefill_kv_only = kv

    def forward(batch):
        order.append("prefill")
        kv.count += 1  # the KV-only draft prefill ran
        return "result"

    assert runner.run_prefill(forward, "batch") == "result"
    assert order == ["flush", "prefill"] and runner.draft_stale and "_draft_extend_for_prefill" not in vars(runner.worker)


class Recorder:
    """The calls ``DeferredDraftKv.defer`` makes, recorded in order."""

    defer = dkv.DeferredDraftKv.defer

    def __init__(self, takes=True, check=False):
        self.calls, self._takes, self._check = [], takes, check

    def takes(self, n, hidden):
        self.calls.append(("takes", n))
        return self._takes

    def wants_check(self):
        return self._check

    def snapshot(self, slots):
        self.calls.append(("snapshot", slots))
        return "reference"

    def append(self, tokens, positions, slots, hidden, reference=None):
        self.calls.append(("append", tokens, slots, reference))

    def flush(self, enter_context=True):
        self.calls.append(("flush", enter_context))


def _defer(d, eligible=True):
    def rows():
        d.calls.append("rows")
        return "tokens", "positions", "slots", "hidden"

    def immediate():
        d.calls.append("immediate")
        return "immediate result"

    def instead(queued):
        d.calls.append(("instead", queued[0]))
        return "stale input"

    return d.defer(3, "hidden", rows, immediate, instead, eligible=eligible)


def test_defer_queues_the_rows_and_returns_what_stands_in_for_the_immediate_write():
    d = Recorder()
    assert _defer(d) == "stale input"
    assert d.calls == [("takes", 3), "rows", ("instead", "tokens"), ("append", "tokens", "slots", None)]


def test_defer_on_a_proof_step_writes_at_once_and_queues_the_rows_with_that_write_as_reference():
    d = Recorder(check=True)
    assert _defer(d) == "immediate result"
    assert d.calls == [("takes", 3), "rows", "immediate", ("snapshot", "slots"),
                       ("append", "tokens", "slots", "reference")]


@pytest.mark.parametrize("takes, eligible", [(False, True), (True, False)])
def test_defer_flushes_inside_the_draft_context_then_writes_at_once_without_computing_rows(takes, eligible):
    d = Recorder(takes=takes)
    assert _defer(d, eligible=eligible) == "immediate result"
    assert "rows" not in d.calls and d.calls[-2:] == [("flush", False), "immediate"]
