"""The overlap scheduler's future map on OFF steps (v2, SGLang 0.5.12), lean; opt-in.

Why: with the overlap scheduler a spec-v2 decode batch hands its draft state to the next step
through ``FutureMap`` (``managers/overlap_utils.py``): after every step ``store_to_map`` copies five
fields into ring buffers (top-k probabilities and indices, bonus tokens, new ``seq_lens``, the
draft's hidden state) and before the next ``resolve_future`` gathers the five back, where a server
without speculation stores and gathers the token ids only. An OFF step reads two of them (the
bonus tokens are its verify's input, the new ``seq_lens`` its lengths); its top-k and hidden state
are never read, and after a KV-only or deferred OFF step they are stale by design (the resume step
recomputes them before the first speculative step, ``draft_kv_only``). py-spy on the H200 put
``FutureMap`` at +2.3 ms of scheduler CPU per 1,000 output tokens over a server without
speculation (fa3, 64 requests, ``bench/results/h200-2026-12-04b/README.md``).

What changes, on decode batches of a v2 gate server only:

- ``resolve_future`` of a batch that runs as an OFF step (the gate decided OFF, or the resume
  step): bonus tokens and new ``seq_lens`` gathered as SGLang does; top-k and hidden state are
  views of the buffers' first rows (SGLang's shapes and dtypes, no kernel).
- ``store_to_map`` of an OFF result whose draft state is stale (not the resume step): bonus tokens
  and new ``seq_lens`` stored; the slots' other three fields keep what they held.

The rule this relies on: a slot left so is never resolved by a speculative step, because after a
stale OFF step the first decode batch that is not OFF is the resume step, a full OFF step that
stores all five fields for the next. Proof at run time: the slots left are kept in a bitmap on the
CPU; on the first speculative decode batch after each stretch of OFF steps that ``contract.sampled``
picks, the batch's future indices are looked up in it on the GPU (waits for the GPU). A hit is
logged as an error and turns the lean map off for the server's life on every TP rank; that step
then drafts from stale values, which costs accept length only (the target verifies every drafted
token, so outputs stay exact; the buffers are zeroed when SGLang allocates them, so a slot never
written holds token 0, not garbage that could index past the vocabulary).
``SPECCONSOLE_OFF_LEAN_FUTURE_MAP=1`` asks for it. It stays opt-in: on triton at 32 requests (H100,
h100-2026-12-07g) its OFF steps ran 1.008x / 0.999x the default's, line for line, pinned / unpinned.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Optional, Tuple

import numpy as np

from server_patch import host_copy, options
from server_patch.proof import SampledProof

logger = logging.getLogger("server_patch.spec_gate")

ENV_SWITCH = "SPECCONSOLE_OFF_LEAN_FUTURE_MAP"
ON = "on"
PROOF_FAILED = "proof failed"
#: the FutureMap members this module reads or replaces (SGLang 0.5.12)
NEEDS = ("resolve_future", "store_to_map", "store_to_map_for_new_batch", "is_empty_slice", "future_buffer_len",
         "buf_initialized", "spec_algo", "_lazy_init_buf")


def enabled_by_env() -> bool:
    """True when ``SPECCONSOLE_OFF_LEAN_FUTURE_MAP=1`` asks for the lean map."""
    return options.switch(ENV_SWITCH, False)


def unsupported_reason(future_map: Any) -> Optional[str]:
    """Why ``future_map`` (the scheduler's) cannot take the lean OFF path, or None."""
    if future_map is None:
        return "no future map (overlap scheduler off)"
    missing = [name for name in NEEDS if not hasattr(future_map, name)]
    if missing:
        return f"FutureMap has no {', '.join(missing)}"
    algo = future_map.spec_algo
    if algo is None or algo.is_none():
        return "not a speculative future map"
    return None


class LeanFutureMap(SampledProof):
    """Replaces ``resolve_future`` / ``store_to_map`` / ``store_to_map_for_new_batch`` on one live
    ``FutureMap`` (instance attributes; the class's methods do the rest).

    Args:
        future_map: the scheduler's ``FutureMap`` (speculative, v2).
        off_step: True while the decode batch about to run is an OFF step (the gate decided OFF or
            the resume step runs); asked in ``resolve_future``, before the worker runs.
        stale_off_result: ``stale_off_result(batch_result)`` is True for the result of an OFF step
            that left the draft's top-k and hidden state stale (not the resume step).
        sampled: ``contract.sampled``: which first speculative batches after OFF are checked.
        any_rank: as :class:`server_patch.proof.SampledProof`.

    Counters: ``lean_resolves`` / ``lean_stores`` (OFF steps that took the lean path), ``checks``,
    ``mismatches``, ``ok``. ``left``: (future_buffer_len,) bool, slots whose top-k and hidden state
    an OFF step left unwritten.
    """

    def __init__(self, future_map: Any, off_step: Callable[[], bool], stale_off_result: Callable[[Any], bool],
                 sampled: Callable[[int], bool], any_rank: Callable[[bool], bool] = bool):
        super().__init__(any_rank)
        self.future_map = future_map
        self.off_step = off_step
        self.stale_off_result = stale_off_result
        self.sampled = sampled
        self.left = np.zeros(future_map.future_buffer_len, dtype=bool)
        self.left_since_check = False  # slots were left since the last speculative batch
        self.first_speculative = 0  # speculative batches that followed stale OFF steps
        self.lean_resolves = 0
        self.lean_stores = 0
        self._resolve = future_map.resolve_future
        self._store = future_map.store_to_map
        self._store_new = future_map.store_to_map_for_new_batch
        future_map.resolve_future = self.resolve_future
        future_map.store_to_map = self.store_to_map
        future_map.store_to_map_for_new_batch = self.store_to_map_for_new_batch

    def resolve_future(self, model_worker_batch: Any) -> None:
        """SGLang's ``resolve_future``, lean for OFF steps; checks sampled first speculative steps."""
        fm = self.future_map
        draft_input = getattr(model_worker_batch, "spec_info", None)
        if (draft_input is None or not self.ok or not fm.buf_initialized
                or getattr(draft_input, "future_indices", None) is None
                or not model_worker_batch.forward_mode.is_decode()):
            return self._resolve(model_worker_batch)
        indices = draft_input.future_indices.indices
        if self.off_step():
            _record_stream(indices)  # as SGLang: the old draft input that held it is about to go
            draft_input.bonus_tokens = fm.bonus_tokens_buf[indices]
            draft_input.new_seq_lens = fm.new_seq_lens_buf[indices]
            bs = indices.shape[0]
            draft_input.topk_p = fm.topk_p_buf[:bs]  # views: SGLang's shapes, never read while OFF
            draft_input.topk_index = fm.topk_index_buf[:bs]
            if hasattr(fm, "hidden_states_buf"):  # allocated where SGLang's draft reads hidden states
                draft_input.hidden_states = fm.hidden_states_buf[:bs]
            self.lean_resolves += 1
            return None
        if self.left_since_check:
            self.left_since_check = False
            self.first_speculative += 1
            if self.sampled(self.first_speculative):
                self._prove(indices)
        return self._resolve(model_worker_batch)

    def store_to_map(self, future_indices: Any, batch_result: Any) -> None:
        """SGLang's ``store_to_map``; for a stale OFF result only the bonus tokens and ``seq_lens``."""
        fm = self.future_map
        interval = getattr(future_indices, "interval", None)
        if interval is None or not self.ok or not fm.buf_initialized or not self.stale_off_result(batch_result):
            return self._store(future_indices, batch_result)
        if fm.is_empty_slice(interval):
            return None
        ndi = batch_result.next_draft_input
        fm.bonus_tokens_buf[interval] = ndi.bonus_tokens
        fm.new_seq_lens_buf[interval] = ndi.new_seq_lens
        self.left[interval] = True
        self.left_since_check = True
        self.lean_stores += 1
        return None

    def store_to_map_for_new_batch(self, future_indices: Any, draft_input: Any) -> None:
        """SGLang's, and its slots count as written (every store of all five fields comes here).
        The first one allocates SGLang's buffers (``torch.empty``) as SGLang would, zeroed."""
        fm = self.future_map
        if not fm.buf_initialized:
            fm._lazy_init_buf(draft_input)
            for name in ("topk_p_buf", "topk_index_buf", "hidden_states_buf"):
                buf = getattr(fm, name, None)
                if buf is not None:
                    buf.zero_()
        self._store_new(future_indices, draft_input)
        interval = getattr(future_indices, "interval", None)
        if interval is not None:
            self.left[interval] = False

    def _prove(self, indices: Any) -> None:
        """Are any of a speculative batch's future indices (bs,) slots an OFF step left? Waits for the GPU."""
        import torch

        left = host_copy.to_device(self.left, indices.device, dtype=torch.bool)
        hit = bool(left[indices].any().item())
        self.verdict(f"a speculative step resolved future-map slots an OFF step left unwritten (check "
                     f"{self.checks + 1})" if hit else None,
                     "OFF steps store and resolve every future-map field from now on")

    @property
    def status(self) -> str:
        """``on`` while the proof holds, else ``proof failed``."""
        return ON if self.ok else PROOF_FAILED


def _record_stream(indices: Any) -> None:
    import torch

    if indices.is_cuda:
        indices.record_stream(torch.cuda.current_stream(indices.device))


def install(future_map: Any, spec_version: str, off_step: Callable[[], bool],
            stale_off_result: Callable[[Any], bool], sampled: Callable[[int], bool],
            any_rank: Callable[[bool], bool] = bool) -> Tuple[Optional[LeanFutureMap], Optional[str]]:
    """``(LeanFutureMap or None, status)``: built when asked for, on v2, and supported on every TP
    rank; ``status`` is ``on``, why not, or None when not asked for."""
    if not enabled_by_env():
        return None, None
    reason = "v1 has no future map" if spec_version != "v2" else unsupported_reason(future_map)
    if any_rank(reason is not None):  # every rank lean, or none (the ranks resolve alike)
        reason = reason or "not supported on another TP rank"
        logger.info("spec_gate: the future map stays SGLang's on OFF steps: %s", reason)
        return None, reason
    logger.info("spec_gate: OFF steps store and resolve only the bonus tokens and seq_lens of the future map")
    return LeanFutureMap(future_map, off_step, stale_off_result, sampled, any_rank), ON
