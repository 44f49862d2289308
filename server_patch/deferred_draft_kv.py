"""Deferred draft K/V for OFF decode steps: the draft's K/V of many OFF steps in one forward.

Why: a KV-only OFF step (``draft_kv_only``) still prepares and launches a draft extend every decode
step (SGLang's ``prepare_for_extend_to_fill_draft_kvcache``: a ``ForwardBatch``, a graph replay
with its buffer copies). The OFF server is CPU-bound (it launches, the GPU waits), and on the H200
that draft extend was 5.6 of the OFF decode step's 20.3 ms of scheduler CPU per 1,000 output tokens
against a plain decode step's ~7 (py-spy, fa3, 64 requests, ``bench/results/h200-2026-12-04b/``).
An EAGLE-3 draft's K/V at a position depend on that position's own inputs only (the token, the
target's aux hidden state, the position: ``draft_kv_only``), so they can be computed later, for
any number of tokens of any requests at once. What an OFF step leaves here instead is four copies
into preallocated buffers (the drawn token, the position, the cache slot, the target's hidden
state); :meth:`DeferredDraftKv.flush` stores all pending K/V in one eager forward.

When the K/V must be there: before anything else runs on the draft's KV cache, i.e. before every
forward that is not a deferred OFF step (a prefill while ON, an ON or resume step, an OFF step on
SGLang's path), before a weight update or a memory release (``scheduler_hooks``), and when the
buffer is full (the caller: ``off_state.OffStepRunner``). A prefill while OFF needs no flush first:
nothing in it reads the draft's KV cache, and its rows queue behind the pending ones. Everything runs on the
forward stream, so a flush precedes in stream order every later write or read of the same slots.

Slots freed and handed out again while rows wait (a request finished and its slot went to another
request's next token): the later row wins. The flush keeps, per cache slot, the last row written
for it (a stable sort; the rest write the KV pool's padding slot 0, which SGLang reserves for
dummy writes), which is what immediate writes in step order would have left. A finished request's
rows are still written: its tokens may sit in the radix cache, whose K/V later prefix hits read.

Proof at run time (new state: the pending rows): on the steps ``contract.sampled`` picks, the OFF
step also runs the immediate KV-only extend (itself proven against SGLang's full draft extend) and
snapshots the K/V it stored; after the flush that writes those rows, the K/V there must equal the
snapshot within bf16 rounding (the flush's GEMMs run at another batch size:
``draft_kv_only.ROUNDING_RTOL``), except where a later row took the slot. A mismatch on any TP rank
stops deferral for the server's life (logged as an error); OFF steps keep the immediate extend.

On by default (``SPECCONSOLE_OFF_DEFERRED_DRAFT_KV=0`` stores the K/V at once). On the H200
(``bench/results/h200-2026-12-04d/``, ``-04e/``): oracle-exact with exact recovery on the
KV-sensitive pair (v2 triton, 178 checks, 0 mismatches, 189,424 rows in 508 flushes), and under
traffic on fa3 182 checks, 0 mismatches (1.5 M rows in 191 flushes); forced off with it and the lean
v2 verify ran 0.976 / 0.971 / 0.941x of a server without speculation at 32 / 64 / 128 requests, both
servers up in one run (without them, another run: 0.908 / 0.879 / 0.925x). Not run at TP > 1.
v1 (``EAGLEWorker``, no overlap scheduler): its lean OFF step (``off_step_v1``) replays the KV-only
draft-extend graph every step, on the critical path of a server that overlaps nothing;
``SPECCONSOLE_OFF_DEFERRED_DRAFT_KV_V1=1`` has it queue the rows instead (opt-in: on an H200 it
was exact, 0 mismatches in 219 checks, and not faster: 0.911 / 0.867 / 0.897x of no speculation at
32 / 64 / 128 requests against 0.965 / 0.990 / 0.878x with the replay, the same run;
``bench/results/h200-2026-12-06``). v1's prefills while OFF keep the immediate KV-only draft
prefill and flush the pending rows first (a prefill's slots may be ones a pending row still
targets).
``SPECCONSOLE_OFF_DEFERRED_DRAFT_KV_TOKENS`` sizes the buffer (tokens, default 8192: 8192 x 3 x
4096 x 2 bytes = 192 MiB of GPU memory for an 8B target's aux hidden states), allocated at
start-up (a server without that memory says so in its log and ``off_deferred_draft_kv``).
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Callable, List, Optional, Tuple

from server_patch import options
from server_patch.draft_kv_only import KvProof

logger = logging.getLogger("server_patch.spec_gate")

ENV_SWITCH = "SPECCONSOLE_OFF_DEFERRED_DRAFT_KV"
#: "1": v1's lean OFF steps (``off_step_v1``) defer too; opt-in until measured on a GPU
V1_ENV_SWITCH = "SPECCONSOLE_OFF_DEFERRED_DRAFT_KV_V1"
TOKENS_ENV = "SPECCONSOLE_OFF_DEFERRED_DRAFT_KV_TOKENS"
DEFAULT_TOKENS = 8192
#: the KV pool's reserved slot for dummy writes (SGLang's ``token_to_kv_pool`` allocates from 1)
PADDING_SLOT = 0


def enabled_by_env() -> bool:
    """False when ``SPECCONSOLE_OFF_DEFERRED_DRAFT_KV=0`` asks v2 OFF steps and prefills to store the
    draft's K/V at once (deferral is the default)."""
    return options.switch(ENV_SWITCH, True)


def enabled_for_v1_by_env() -> bool:
    """True when ``SPECCONSOLE_OFF_DEFERRED_DRAFT_KV_V1=1`` asks v1's lean OFF steps
    (``off_step_v1``) to defer their draft K/V as well (off by default: not yet run on a GPU)."""
    return options.switch(V1_ENV_SWITCH, False)


def capacity_from_env() -> int:
    """Pending rows the buffer holds (``SPECCONSOLE_OFF_DEFERRED_DRAFT_KV_TOKENS``, default 8192).

    Raises:
        ValueError: the variable is set to something other than a whole number >= 1.
    """
    return options.whole_number(TOKENS_ENV, DEFAULT_TOKENS, 1)


def server_reason(server_args: Any) -> Optional[str]:
    """Why a server's draft K/V cannot wait (something reads the KV pool outside the forward
    passes), or None: hierarchical cache (host copies of the pool), PD disaggregation (KV
    transfers)."""
    if getattr(server_args, "enable_hierarchical_cache", False):
        return "hierarchical cache (host copies of the KV pool)"
    if getattr(server_args, "disaggregation_mode", "null") not in (None, "null"):
        return "PD disaggregation (KV transfers)"
    return None


def keep_last_per_slot(slots: Any) -> Any:
    """For rows in write order with cache slots ``slots`` (N,) int64: a bool mask (N,) that is True
    on the last row of each slot. No wait for the GPU (a stable sort and a scatter)."""
    import torch

    n = slots.shape[0]
    ordered, order = torch.sort(slots, stable=True)
    last = torch.ones(n, dtype=torch.bool, device=slots.device)
    if n > 1:
        last[:-1] = ordered[1:] != ordered[:-1]
    keep = torch.empty_like(last)
    keep[order] = last
    return keep


class DeferredDraftKv(KvProof):
    """Pending draft K/V rows of OFF decode steps and their flush (module docstring).

    Args:
        store: ``store(input_ids, positions, hidden, token_to_kv_pool, out_cache_loc)``
            (``draft_kv_only.kv_store`` of the draft model): computes and stores K/V for T tokens.
        token_to_kv_pool: the draft's KV pool (``get_key_buffer``/``get_value_buffer``).
        layer: the draft's attention layer (its ``layer_id`` indexes the pool).
        capacity: pending rows at most (tokens).
        context: a fresh context manager per call for the draft's TP/MoE contexts.
        sampled, any_rank: as ``draft_kv_only.KvProof``.

    Counters: ``count`` (OFF steps whose rows were appended), ``rows`` and ``flushes`` (written),
    ``checks``, ``mismatches``, ``inexact``, ``ok`` (``KvProof``).
    """

    what = "deferred draft K/V"
    reason: Optional[str] = None  # why deferral stopped other than a failed proof
    reference = "the immediate KV-only extend's"
    fallback = "OFF steps store the draft's K/V at once from now on"

    def __init__(self, store: Callable[..., Any], token_to_kv_pool: Any, layer: Any, capacity: int,
                 context: Callable[[], Any], sampled: Callable[[int], bool],
                 any_rank: Callable[[bool], bool] = bool):
        super().__init__(layer, sampled, any_rank, rounding=True)
        self.store = store
        self.pool = token_to_kv_pool
        self.capacity = capacity
        self.context = context
        self.fill = 0
        self.rows = 0
        self.flushes = 0
        self._buffers: Optional[Tuple[Any, Any, Any, Any]] = None  # tokens, positions, slots, hidden
        self._snapshots: List[Tuple[int, int, Any, Any]] = []  # (first row, rows, K, V) to prove

    def takes(self, n: int, hidden: Any) -> bool:
        """Whether a step of ``n`` rows with hidden states ``hidden`` (bs, D) can be deferred: proof
        intact, ``n`` within the capacity, and buffers of D's width and dtype (:meth:`allocate`d
        at start-up, or here at the first call where start-up could not say the width)."""
        if not self.ok or not 0 < n <= self.capacity:
            return False
        if self._buffers is None:
            self.allocate(hidden.shape[-1], hidden.dtype, hidden.device)
            if not self.ok:
                return False
        held = self._buffers[3]
        return hidden.shape[-1] == held.shape[-1] and hidden.dtype == held.dtype

    def allocate(self, width: int, dtype: Any, device: Any) -> bool:
        """The buffers for ``capacity`` rows of hidden states (``width`` wide, ``dtype``), on every
        TP rank or on none (an all-reduce: call it at the same point on every rank); a failed
        allocation stops deferral and ``reason`` says so. Returns ``ok``."""
        import torch

        failed = False
        try:
            self._buffers = (torch.empty(self.capacity, dtype=torch.int64, device=device),
                             torch.empty(self.capacity, dtype=torch.int64, device=device),
                             torch.empty(self.capacity, dtype=torch.int64, device=device),
                             torch.empty((self.capacity, width), dtype=dtype, device=device))
        except torch.OutOfMemoryError as exc:
            failed = True
            logger.warning("spec_gate: no GPU memory for %d deferred draft K/V rows (%s)", self.capacity, exc)
        if self.any_rank(failed):
            self._buffers = None
            self.ok = False
            self.reason = f"no GPU memory for {self.capacity} tokens of hidden states"
        return self.ok

    def defer(self, n: int, hidden: Any, rows: Callable[[], Tuple[Any, Any, Any, Any]],
              immediate: Callable[[], Any], instead: Callable[[Tuple[Any, Any, Any, Any]], Any],
              eligible: bool = True) -> Any:
        """One step's draft K/V, deferred where it can be: the one sequence every caller follows
        (an OFF decode step on v2 or v1, a prefill while OFF on v2).

        Where ``eligible`` and :meth:`takes` ``(n, hidden)``: ``rows()`` gives ``(tokens,
        positions, slots, hidden)`` ((n,) (n,) (n,) (n, D)), which are queued; on a proof step
        (:meth:`wants_check`) ``immediate()`` runs first and its K/V at ``slots`` are the
        reference, else ``instead(rows)`` stands in for it (the caller's stale next draft input).
        Otherwise the pending rows are flushed first (an immediate write may target a slot a
        pending row still targets) and ``immediate()`` runs. Callers run inside SGLang's draft TP
        context (the flush does not enter it again). Returns what ``immediate`` or ``instead``
        returned."""
        if not eligible or not self.takes(n, hidden):
            self.flush(enter_context=False)
            return immediate()
        queued = rows()  # after takes(): the rows are computed only where they are queued
        reference = None
        if self.wants_check():
            result = immediate()
            reference = self.snapshot(queued[2])
        else:
            result = instead(queued)
        self.append(*queued, reference=reference)
        return result

    def wants_check(self) -> bool:
        """Whether the next appended step is a proof step (run the immediate extend, then
        :meth:`snapshot`, then :meth:`append`)."""
        return self.sampled(self.count + 1)

    def snapshot(self, slots: Any) -> Tuple[Any, Any]:
        """Copies of the draft's K and V at ``slots`` (N,) as the immediate extend stored them."""
        layer_id = self.layer.layer_id
        return (self.pool.get_key_buffer(layer_id)[slots].clone(),
                self.pool.get_value_buffer(layer_id)[slots].clone())

    def append(self, tokens: Any, positions: Any, slots: Any, hidden: Any,
               reference: Optional[Tuple[Any, Any]] = None) -> None:
        """Queue one OFF step's rows: ``tokens`` (the drawn tokens), ``positions``, ``slots`` (the
        cache slots the draft's K/V go to) (bs,), ``hidden`` (bs, D) the target's hidden states at
        those positions. Flushes first when the rows would not fit. ``reference``: the step's
        :meth:`snapshot` on a proof step.

        Raises:
            ValueError: more rows than the capacity, or no buffers (callers check :meth:`takes`).
        """
        n = tokens.shape[0]
        if n > self.capacity:
            raise ValueError(f"{n} rows do not fit a deferred draft K/V buffer of {self.capacity}")
        if self._buffers is None:
            raise ValueError("append before takes(): no buffers")
        if self.fill + n > self.capacity:
            self.flush(enter_context=False)  # callers run inside SGLang's draft TP context
        for buffer, rows in zip(self._buffers, (tokens, positions, slots, hidden)):
            buffer[self.fill:self.fill + n].copy_(rows, non_blocking=True)
        if reference is not None:
            self._snapshots.append((self.fill, n) + tuple(reference))
        self.fill += n
        self.count += 1

    def flush(self, enter_context: bool = True) -> None:
        """Store the K/V of every pending row (one eager forward, last row per slot), then prove
        the sampled steps' rows (waits for the GPU then). ``enter_context``: False where the caller
        already runs inside SGLang's draft TP context (``draft_tp_context`` refuses to nest)."""
        if self.fill == 0:
            return
        n = self.fill
        tokens, positions, slots, hidden = (b[:n] for b in self._buffers)
        import torch

        keep = keep_last_per_slot(slots)
        loc = torch.where(keep, slots, torch.full_like(slots, PADDING_SLOT))
        with self.context() if enter_context else contextlib.nullcontext():
            self.store(tokens, positions, hidden, self.pool, loc)
        self.fill = 0
        self.rows += n
        self.flushes += 1
        snapshots, self._snapshots = self._snapshots, []
        for first, count, k_ref, v_ref in snapshots:
            self._prove_rows(slots[first:first + count], keep[first:first + count], k_ref, v_ref)

    def _prove_rows(self, slots: Any, keep: Any, k_ref: Any, v_ref: Any) -> None:
        """The K/V now at ``slots`` against the immediate extend's (``k_ref``/``v_ref``), where
        ``keep`` (no later row took the slot)."""
        layer_id = self.layer.layer_id
        k_now = self.pool.get_key_buffer(layer_id)[slots]
        v_now = self.pool.get_value_buffer(layer_id)[slots]
        rows = keep.nonzero().squeeze(1)  # waits for the GPU (a proof step only)
        if rows.numel() == 0:  # every slot taken by a later row: nothing of this step to compare
            return
        self.judge((k_now[rows], v_now[rows]), (k_ref[rows], v_ref[rows]))
