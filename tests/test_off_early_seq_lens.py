"""The v2 OFF step publishes ``seq_lens + 1`` and an event recorded before its verify
(``server_patch/off_state.py``), so SGLang's overlap scheduler prepares the next batch while the
OFF verify runs instead of waiting for it. CPU tests with a fake worker and events."""

from __future__ import annotations

import types

import pytest
import torch

from server_patch import contract, off_state
from server_patch.off_state import OffStepRunner


class Event:
    """Stands in for ``torch.cuda.Event``: remembers when it was recorded."""

    log: list = []

    def record(self):
        Event.log.append(("record", self))


def make_runner(v2=True, monkeypatch=None, env=None):
    if monkeypatch is not None and env is not None:
        monkeypatch.setenv(off_state.EARLY_SEQ_LENS_ENV, env)
    runner = OffStepRunner.__new__(OffStepRunner)
    runner.v2 = v2
    runner._init_early_seq_lens()
    runner._no_kv_only("not built in this test")
    runner._new_event = lambda device: Event()
    runner._draft_owner = types.SimpleNamespace()
    runner.on_state, runner.off_state = "on", "off"
    runner.applied = []
    runner._apply = runner.applied.append
    runner.off_target_graph = types.SimpleNamespace(count=0)
    runner.off_steps_cuda_graph = 0
    return runner


def verify_forward(accept_lens=None, dtype=None):
    """A fake ``forward_batch_generation`` that returns what 0.5.12's ``verify`` builds:
    ``new_seq_lens = seq_lens + accept_lens`` and a ``verify_done`` event recorded after it."""

    def forward(batch):
        Event.log.append(("forward", batch))
        acc = torch.ones_like(batch.seq_lens) if accept_lens is None else accept_lens
        new = batch.seq_lens + acc
        if dtype is not None:
            new = new.to(dtype)
        ndi = types.SimpleNamespace(new_seq_lens=new, verify_done="post-verify event")
        return types.SimpleNamespace(next_draft_input=ndi)

    return forward


def batch(*lens):
    return types.SimpleNamespace(seq_lens=torch.tensor(lens, dtype=torch.int64))


def test_off_result_carries_seq_lens_plus_one_and_an_event_recorded_before_the_verify():
    Event.log.clear()
    runner = make_runner()
    b = batch(5, 9, 17)
    result = runner.run_off_step(verify_forward(), b)
    ndi = result.next_draft_input
    assert ndi.new_seq_lens.tolist() == [6, 10, 18]
    assert isinstance(ndi.verify_done, Event)
    # recorded before the worker's forward (the verify) was launched
    assert [kind for kind, _ in Event.log] == ["record", "forward"]
    assert (runner.early_seq_lens_steps, runner.early_seq_lens_checks, runner.early_seq_lens_mismatches) == (1, 1, 0)
    assert runner.applied == ["off", "on"]


def test_a_verify_that_accepted_more_than_the_bonus_token_keeps_sglangs_result():
    """Cannot happen with 1 draft token; if it did, the check refuses the early tensor."""
    runner = make_runner()
    b = batch(5, 9)
    result = runner.run_off_step(verify_forward(accept_lens=torch.tensor([1, 2])), b)
    ndi = result.next_draft_input
    assert ndi.new_seq_lens.tolist() == [6, 11] and ndi.verify_done == "post-verify event"
    assert runner.early_seq_lens_mismatches == 1
    # an assumption failed: the early path is off for good (unchecked steps could be wrong too)
    assert runner.early_seq_lens is False
    later = runner.run_off_step(verify_forward(), batch(5, 9))
    assert later.next_draft_input.verify_done == "post-verify event" and runner.early_seq_lens_steps == 1


def test_dtype_difference_falls_back_to_sglangs_tensor_and_event():
    runner = make_runner()
    result = runner.run_off_step(verify_forward(dtype=torch.int32), batch(3))
    assert result.next_draft_input.verify_done == "post-verify event"
    assert (runner.early_seq_lens_steps, runner.early_seq_lens_fallbacks) == (0, 1)


def test_check_is_sampled_after_the_first_steps():
    runner = make_runner()
    n = contract.PROOF_FIRST + 2 * contract.PROOF_EVERY
    for _ in range(n):
        result = runner.run_off_step(verify_forward(), batch(4))
        assert isinstance(result.next_draft_input.verify_done, Event)  # unchecked steps publish too
    assert runner.early_seq_lens_steps == n
    assert runner.early_seq_lens_checks == contract.PROOF_FIRST + 2


@pytest.mark.parametrize("v2, env", [(False, None), (True, "0")])
def test_v1_and_the_escape_hatch_leave_the_result_alone(monkeypatch, v2, env):
    runner = make_runner(v2=v2, monkeypatch=monkeypatch, env=env)
    result = runner.run_off_step(verify_forward(), batch(4))
    assert result.next_draft_input.verify_done == "post-verify event"
    assert runner.early_seq_lens is False and runner.early_seq_lens_steps == 0


def test_empty_batch_publishes_nothing():
    runner = make_runner()
    result = runner.run_off_step(verify_forward(), batch())
    assert result.next_draft_input.verify_done == "post-verify event"
    assert runner.early_seq_lens_steps == 0 and runner.early_seq_lens_fallbacks == 0


def test_another_ranks_failed_check_stops_the_early_seq_lens_here_too():
    runner = make_runner()
    runner.any_rank = lambda flag: True  # another TP rank's check differed at this OFF step
    result = runner.run_off_step(verify_forward(), batch(5, 9))
    assert runner.early_seq_lens is False and runner.early_seq_lens_mismatches == 0
    assert result.next_draft_input.verify_done == "post-verify event"  # SGLang's, not ours
