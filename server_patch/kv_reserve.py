"""KV cache slots reserved ahead for spec-v2 decode batches (SGLang 0.5.12), opt-in.

Why: before every decode step of a v2 server, ON or OFF, SGLang's
``EagleDraftInputV2Mixin.prepare_for_decode`` (``speculative/eagle_info_v2.py:88-179``) tops each
request up to ``kv_committed_len + 2 * alloc_len`` KV slots (``alloc_len`` = max(steps x topk,
draft tokens), 4 for 3 steps at topk 1). An OFF step uses one slot a request, an ON step its accept
length, so nearly every step allocates a few slots for every request: a Python loop, two tensors
built from lists, the allocator, two pageable host-to-device copies and the triton kernel
``assign_req_to_token_pool``, where a server without speculation writes one slot a request
(``alloc_for_decode``). py-spy put its self time at 7.7 ms of scheduler CPU per 1,000 output
tokens on an OFF server against ``alloc_for_decode``'s 2.1 without speculation (triton, 32
requests, ``bench/results/h100-2026-12-07g/README.md``), the largest single item of the OFF
step's CPU, on the H200 where the OFF scheduler is close to CPU-bound.

What changes (``SPECCONSOLE_KV_RESERVE=R``, R tokens a request): a step where some request is below
SGLang's bound tops every request of the batch up to ``R`` slots beyond it, by SGLang's own code
(``kv_committed_len`` is raised by R around the call, so its loop, allocator and kernel do the
work); a step where no request is below the bound skips the allocation and does the rest of
SGLang's function as it does it (the wait for the last verify, the per-request counters, the
``seq_lens`` host copy). All requests are topped up together so that the following steps all skip:
about R OFF steps, or R / accept length ON steps, until a prefilled request joins the batch.
The reserve is taken only while the pool, counting what the radix cache could evict, keeps another R
slots a request and a fifth of its size free after the top-up (else that step is SGLang's,
unchanged): in a fuller pool requests wait for memory, and slots held ahead would cost running
requests; it holds at most R x batch size slots
(2,048 at R = 16 and 128 requests), freed when a request finishes or is retracted (SGLang frees
``[committed, allocated)`` whatever its size, ``mem_cache/common.py:566-619``), and counts as
used for the scheduler's admission of new requests while held.

Not for: v1 (``EAGLEWorker`` allocates and frees inside each step), page size > 1, a
sliding-window KV cache, batches with penalties (SGLang's function accumulates them: that step
is SGLang's).

Measured (``bench/results/h100-2026-12-07h/``, H100, triton, R = 16): oracle-exact with every proof
clean (74 checks of its own); 89-90% of OFF decode steps and 80% of ON steps allocated nothing;
SGLang's function fell from 10.6 to 0.8 ms of scheduler CPU per 1,000 output tokens (+1.9 here) at
32 requests; OFF rows and steps unchanged on that GPU-bound H100 (0.992 / 0.992 of no speculation
at 32; per step +0.7%), ON at 4 requests +4-5% (one repeat). Opt-in until an H200 run shows it in
the rows.

Proof at run time (new state: slots a request holds beyond SGLang's bound): on the top-ups
``contract.sampled`` picks, every slot in ``req_to_token[req, kv_committed_len:kv_allocated_len]``
of every request must be a real slot (not the padding slot 0), owned by that request alone, and
not in the allocator's free lists (waits for the GPU). A failure on any TP rank turns the reserve
off for the server's life (logged as an error); the slots already held stay owned and are freed
as usual.
"""

from __future__ import annotations

import os
from typing import Any, Callable, List, Optional

from server_patch import host_copy, options
from server_patch.proof import SampledProof

ENV_SWITCH = "SPECCONSOLE_KV_RESERVE"
#: the SGLang method wrapped (AROUND)
TARGET = "sglang.srt.speculative.eagle_info_v2.EagleDraftInputV2Mixin.prepare_for_decode"
#: the largest reserve accepted (tokens a request): beyond it the held slots would matter to
#: admission long before the saved allocations do
MAX_TOKENS = 1024
#: the share of the pool that must stay free after a top-up: a fuller pool is where requests wait for
#: memory, and held slots then cost running requests (h100-2026-12-07h: at 90% usage, 61 against 62
#: running, -1.6% output tok/s at 64 requests)
FREE_SHARE = 0.2
ON = "on"
PROOF_FAILED = "proof failed"


class KvReserveConfigError(ValueError):
    """``SPECCONSOLE_KV_RESERVE`` is not a whole number of tokens in [0, MAX_TOKENS]."""


def tokens_from_env(environ=os.environ) -> Optional[int]:
    """The reserve asked for (tokens a request), or None when unset or 0.

    Raises:
        KvReserveConfigError: not a whole number in [0, MAX_TOKENS]."""
    try:
        tokens = options.whole_number(ENV_SWITCH, 0, 0, MAX_TOKENS, "tokens (0: off)", environ)
    except ValueError as exc:
        raise KvReserveConfigError(str(exc)) from None
    return tokens or None


def server_reason(spec_version: str, page_size: int) -> Optional[str]:
    """Why a gate server cannot reserve ahead, or None."""
    if spec_version != "v2":
        return "v1 allocates and frees inside each step"
    if page_size != 1:
        return f"page size {page_size} (only 1 is supported)"
    return None


class NoReserve:
    """The ``spec_gate`` fields of a server without the reserve: ``kv_reserve`` is why not (None: not asked for)."""

    kv_reserve_tokens = None
    kv_reserve_topups = kv_reserve_skipped_steps = kv_reserve_checks = kv_reserve_mismatches = 0

    def __init__(self, reason: Optional[str]) -> None:
        self.kv_reserve = reason


class KvReserve(SampledProof):
    """Wraps SGLang's spec-v2 ``prepare_for_decode`` (module docstring).

    Args:
        tokens: R, the slots a request holds beyond SGLang's bound after a top-up.
        alloc_len: SGLang's ``get_alloc_len_per_decode()`` (its bound is ``2 * alloc_len``).
        sampled, any_rank: ``contract.sampled``; the all-reduce of a flag (``SampledProof``).

    Counters: ``topups`` (steps that allocated with the reserve), ``skipped`` (steps that
    allocated nothing), ``fallbacks`` (steps left to SGLang: no room, penalties, sliding window,
    proof failed), ``checks``, ``mismatches``, ``ok``.
    """

    def __init__(self, tokens: int, alloc_len: int, sampled: Callable[[int], bool],
                 any_rank: Callable[[bool], bool] = bool):
        super().__init__(any_rank)
        self.tokens = tokens
        self.bound = 2 * alloc_len
        self.sampled = sampled
        self.topups = self.skipped = self.fallbacks = 0

    # -- the spec_gate fields (contract.SPEC_GATE_FIELDS), read by name as prefill_graph's

    @property
    def kv_reserve(self) -> str:
        return ON if self.ok else PROOF_FAILED

    @property
    def kv_reserve_tokens(self) -> int:
        return self.tokens

    @property
    def kv_reserve_topups(self) -> int:
        return self.topups

    @property
    def kv_reserve_skipped_steps(self) -> int:
        return self.skipped

    @property
    def kv_reserve_checks(self) -> int:
        return self.checks

    @property
    def kv_reserve_mismatches(self) -> int:
        return self.mismatches

    def prepare_for_decode(self, original: Callable, draft_input: Any, batch: Any) -> None:
        """SGLang's ``original(draft_input, batch)`` with the reserve; returns None as it does."""
        reqs = batch.reqs
        if not self.ok or not reqs or _sglang_only(batch):
            self.fallbacks += 1
            return original(draft_input, batch)
        bound = self.bound
        if all(r.kv_allocated_len >= r.kv_committed_len + bound for r in reqs):
            self.skipped += 1
            # what SGLang's function does besides allocating, in its order (it would allocate 0)
            batch.maybe_wait_verify_done()
            for r in reqs:
                r.decode_batch_idx += 1
                r.kv_committed_len += 1  # the pre-claimed bonus slot, as SGLang
            batch.seq_lens_cpu = batch.seq_lens.cpu()
            batch.seq_lens_sum = batch.seq_lens_cpu.sum().item()
            return None
        width = batch.req_to_token_pool.req_to_token.shape[1]
        extra = [max(0, min(self.tokens, width - r.kv_committed_len - bound)) for r in reqs]
        need = sum(max(0, r.kv_committed_len + e + bound - r.kv_allocated_len) for r, e in zip(reqs, extra))
        if not _room(batch.tree_cache, need + self.tokens * len(reqs), FREE_SHARE):
            self.fallbacks += 1
            return original(draft_input, batch)
        for r, e in zip(reqs, extra):
            r.kv_committed_len += e
        try:
            original(draft_input, batch)
        finally:
            for r, e in zip(reqs, extra):
                r.kv_committed_len -= e
        self.topups += 1
        if self.sampled(self.topups):
            self.verdict(owned_slots_problem(batch), "decode steps allocate as SGLang does from now on")
        return None


def _sglang_only(batch: Any) -> bool:
    """Steps whose preparation does more than allocate and count (left to SGLang's function)."""
    return bool(batch.sampling_info.penalizer_orchestrator.is_required or batch.tree_cache.supports_swa())


def _room(tree_cache: Any, tokens: int, free_share: float = 0.0) -> bool:
    """Has the pool ``tokens`` free slots, counting what the radix cache could evict, and after
    taking them still ``free_share`` of its size free?"""
    allocator = tree_cache.token_to_kv_pool_allocator
    evictable = tree_cache.evictable_size() if hasattr(tree_cache, "evictable_size") else 0
    keep = int(free_share * getattr(allocator, "size", 0))
    return allocator.available_size() + int(evictable) >= tokens + keep


def owned_slots_problem(batch: Any) -> Optional[str]:
    """What is wrong with the slots the batch's requests hold beyond their committed length
    (``req_to_token[req, kv_committed_len:kv_allocated_len]``), or None: each must be a real slot
    (> 0), held by one request only, and not in the allocator's free lists. Waits for the GPU."""
    import torch

    rows: List[int] = []
    cols: List[int] = []
    for r in batch.reqs:
        lo, hi = r.kv_committed_len, r.kv_allocated_len
        rows += [r.req_pool_idx] * (hi - lo)
        cols += range(lo, hi)
    if not rows:
        return None
    req_to_token = batch.req_to_token_pool.req_to_token
    device = req_to_token.device
    slots = req_to_token[host_copy.to_device(rows, device), host_copy.to_device(cols, device)].to(torch.int64)
    if bool((slots <= 0).any()):
        return f"a request holds the padding slot 0 or a negative slot among {len(rows)} reserved slots"
    if int(torch.unique(slots).numel()) != int(slots.numel()):
        return f"two requests (or two positions) hold the same slot among {len(rows)} reserved slots"
    allocator = batch.tree_cache.token_to_kv_pool_allocator
    for name in ("free_pages", "release_pages"):
        free = getattr(allocator, name, None)
        if free is not None and free.numel() and bool(torch.isin(slots, free.to(slots.device)).any()):
            return f"a reserved slot is also in the allocator's {name}"
    return None


_active: Optional[KvReserve] = None


def install(reserve: Optional[KvReserve]) -> None:
    """Make ``reserve`` the one :func:`around_prepare_for_decode` uses in this process (one
    scheduler a process); None restores SGLang's function."""
    global _active
    _active = reserve


def active() -> Optional[KvReserve]:
    return _active


def around_prepare_for_decode(original: Callable, draft_input: Any, batch: Any, *args: Any, **kwargs: Any):
    """The AROUND hook on ``EagleDraftInputV2Mixin.prepare_for_decode``: SGLang's own function
    unless a reserve was installed."""
    if _active is None or args or kwargs:
        return original(draft_input, batch, *args, **kwargs)
    return _active.prepare_for_decode(original, draft_input, batch)


def set_up(spec_version: str, server_args: Any, sampled: Callable[[int], bool],
           any_rank: Callable[[bool], bool] = bool, environ=os.environ) -> "KvReserve | NoReserve":
    """The reserve for this scheduler, installed for :func:`around_prepare_for_decode`, or
    :class:`NoReserve` with why not (None when not asked for); either one's ``kv_reserve*``
    attributes are the ``spec_gate`` fields.

    Raises:
        KvReserveConfigError: from :func:`tokens_from_env`."""
    tokens = tokens_from_env(environ)
    reason = None if tokens is None else server_reason(spec_version, getattr(server_args, "page_size", 1) or 1)
    if tokens is None or reason is not None:
        install(None)
        return NoReserve(reason)
    reserve = KvReserve(tokens, sglang_alloc_len(server_args), sampled, any_rank)
    install(reserve)
    return reserve


def sglang_alloc_len(server_args: Any) -> int:
    """SGLang's ``get_alloc_len_per_decode`` (``managers/utils.py:213``): slots a v2 step may use."""
    from sglang.srt.managers.utils import get_alloc_len_per_decode

    return get_alloc_len_per_decode(server_args)
