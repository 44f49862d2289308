"""The speculation-OFF decode step for SGLang 0.5.12's two EAGLE workers.

An OFF step is a *degenerate speculation step* (the mechanism SGLang 0.5.23 ships as
``speculative_num_steps == 0``, ``sglang/srt/speculative/eagle_worker_v2.py:1469-1472,1678-1731``
in 0.5.23, backported here):

1. no drafting: the verify input is a 1-node tree rooted at the last committed (bonus) token;
2. target ``TARGET_VERIFY`` with 1 token per request, replaying a CUDA graph captured for
   exactly that shape at startup — functionally a plain decode step; on the triton backend its
   attention *is* the decode kernel (``off_attention``: the verify kernel made an OFF step cost
   4.7x a plain decode step at 128 requests on the H200);
3. a 1-token draft extend (its own CUDA graph), so the draft model's KV cache stays current and
   speculation resumes at full acceptance without re-prefill. For an EAGLE-3 draft it stores only
   the draft's K/V (``draft_kv_only``: no attention, MLP or ``lm_head``); the decode batch right
   after an off->on switch then runs one more OFF step with the full draft extend (its own CUDA
   graph too), which refreshes the draft's top-k and hidden state the first speculative step
   drafts from.

Both the ON and OFF states are sets of attention backends and graph runners
(``SpecRuntimeState``, built by the worker's own ``build_adaptive_runtime_state``). An OFF
step swaps the OFF set in, runs the worker's unchanged ``forward_batch_generation`` with the
draft stage replaced by the trivial verify input, and swaps the ON set back, so prefill and
ON steps never see an OFF backend and OFF steps never replay an ON graph.
``server_args.speculative_num_steps/num_draft_tokens`` are never changed, so the scheduler's
KV reservation (``check_decode_mem``, spec-v2 ``prepare_for_decode``) stays ON-sized.

Overlap (v2 only): SGLang 0.5.12's overlap scheduler schedules batch N+1 only after the CPU has
waited for batch N's ``verify_done`` event (``EagleDraftInput.prepare_for_decode`` ->
``ScheduleBatch.maybe_wait_verify_done``, then ``seq_lens.cpu()``), because N+1's ``seq_lens``
are N's ``new_seq_lens = seq_lens + accept_lens``. For an ON step that wait is unavoidable. An OFF
step accepts exactly the bonus token, so its ``new_seq_lens`` is ``seq_lens + 1`` before the
verify runs: the OFF step publishes that tensor, with an event recorded right after it, instead of
the post-verify one. The scheduler then prepares batch N+1 while N's target forward runs on the
GPU, as it does without speculation. Measured on the H200 before this (8B pair, 16-128 requests):
an OFF step cost 1.2-2.0 ms more than a plain decode step, mostly the CPU time from N's verify to
N+1's target launch (``bench/results/x2-2026-11-30b/off-step-decode-log.json``). Escape hatch: ``SPECCONSOLE_OFF_EARLY_SEQ_LENS=0``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from server_patch import (deferred_draft_kv, draft_kv_only, host_copy, off_attention, off_fa3, off_step_v1,
                          off_verify_v2, options)
from server_patch import off_sampling as sampling
from server_patch import proof
from server_patch.contract import sampled

logger = logging.getLogger(__name__)

OFF_STEPS = 0
OFF_DRAFT_TOKENS = 1

#: "1" (the default; "0" turns it off): on v2, a KV-only OFF step whose draft extend replays the KV-only graph takes the draft's
#: top-k and hidden state (stale by design: a resume step refreshes them before any ON step) from
#: the graph's outputs, which computed that top-k in the graph, instead of SGLang's eager
#: post-processing of the replay (index select, softmax, top-k: launches on a CPU-bound server,
#: ``bench/results/h200-2026-12-04/README.md``). Same values; oracle-exact on triton v2 with the
#: KV-sensitive pair (``bench/results/h200-2026-12-04b/gate-correctness-lean.json``), and its graph's
#: K/V bit for bit on fa3 under traffic (156 checks); no oracle run on fa3 yet.
LEAN_DRAFT_EXTEND_ENV = "SPECCONSOLE_OFF_LEAN_DRAFT_EXTEND"

#: "0" keeps SGLang's post-verify ``verify_done`` event on OFF results (the scheduler then waits
#: for the whole OFF verify before preparing the next batch); unset or "1": the early event.
#: The early ``new_seq_lens`` is compared with SGLang's own on the steps ``contract.sampled``
#: picks (a comparison waits for the OFF step to finish on the GPU).
EARLY_SEQ_LENS_ENV = "SPECCONSOLE_OFF_EARLY_SEQ_LENS"


def _new_event(device: torch.device):
    """A CUDA (or other accelerator) event, recorded later on the current stream."""
    return torch.get_device_module(device).Event()


class _ReplayCounter:
    """Wraps a graph runner instance's ``replay`` to count calls (proves which graph ran)."""

    def __init__(self, runner: Any, hand_batch_to: Any = None):
        """``hand_batch_to``: an attention backend that gets the replayed batch as
        ``_replay_forward_batch`` for the duration of the replay (the draft-extend graph runner
        does not hand it over itself; ``off_attention``'s key-index check reads it)."""
        self.count = 0
        if runner is None:
            return
        original = runner.replay

        def counted(forward_batch, *args, **kwargs):
            self.count += 1
            if hand_batch_to is None:
                return original(forward_batch, *args, **kwargs)
            hand_batch_to._replay_forward_batch = forward_batch
            try:
                return original(forward_batch, *args, **kwargs)
            finally:
                hand_batch_to._replay_forward_batch = None

        runner.replay = counted


@contextlib.contextmanager
def _replaced(obj: Any, name: str, value: Any):
    """``obj.name = value`` for the duration of the block. Restores the previous attribute; an
    attribute that ``obj`` only had through its class is deleted again, so the class's shows."""
    had_own = name in vars(obj)
    original = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        if had_own:
            setattr(obj, name, original)
        else:
            delattr(obj, name)


def _no_multistep_draft_backend_for_zero_steps():
    """0.5.12's ``DraftBackendFactory.create_decode_backend`` returns None only for steps == 1
    (``speculative/draft_utils.py:39-41``); 0.5.23 returns None for steps <= 1. With 0 steps no
    multi-step draft backend is needed, so return None while the OFF state is built."""
    from sglang.srt.speculative.draft_utils import DraftBackendFactory

    original = DraftBackendFactory.create_decode_backend

    def create_decode_backend(self):
        if self.speculative_num_steps <= 1:
            return None
        return original(self)

    return _replaced(DraftBackendFactory, "create_decode_backend", create_decode_backend)


class _TrivialTreeConstants:
    """The constant tensors of a 1-node verify tree, made once per device and sliced per step.

    A CPU-bound OFF step pays every launch (``bench/results/h200-2026-12-04b/README.md``: this
    function was +1.2 / +1.9 ms of scheduler CPU per 1,000 tokens on fa3 / v1, three fills and
    an allocation per step). SGLang's own chain verify caches them the same way
    (``speculative/dflash_utils.py`` in 0.5.12): its verify kernels only read them.
    """

    def __init__(self) -> None:
        self._buffers: Dict[Tuple[str, Any], torch.Tensor] = {}

    def _at_least(self, name: str, n: int, device: Any, make: Callable[[int], torch.Tensor]) -> torch.Tensor:
        """Buffer ``name`` on ``device``, made by ``make(capacity)`` again when shorter than ``n``
        (capacity: at least double the last, and 256 rows)."""
        buf = self._buffers.get((name, device))
        if buf is None or buf.shape[0] < n:
            buf = make(max(n, 256, 2 * buf.shape[0] if buf is not None else 0))
            self._buffers[(name, device)] = buf
        return buf

    def tree(self, bs: int, device: Any) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(retrieve_index, retrieve_next_token, retrieve_next_sibling)``: (bs, 1) int64 each,
        ``arange(bs)`` and -1 twice (read-only views of shared buffers)."""
        index = self._at_least("index", bs, device,
                               lambda cap: torch.arange(cap, dtype=torch.long, device=device).unsqueeze(1))
        minus_one = self._at_least("minus_one", bs, device,
                                   lambda cap: torch.full((cap, 1), -1, dtype=torch.long, device=device))
        return index[:bs], minus_one[:bs], minus_one[:bs]

    def all_true(self, n: int, device: Any) -> torch.Tensor:
        """An all-True bool mask of ``n`` entries (a read-only view of a shared buffer)."""
        mask = self._at_least("mask", max(n, 1 << 16), device,
                              lambda cap: torch.ones(cap, dtype=torch.bool, device=device))
        return mask[:n]


_TREE = _TrivialTreeConstants()


def _trivial_verify_input(
    bonus_tokens: torch.Tensor,
    seq_lens: torch.Tensor,
    seq_lens_sum: int,
    topk: int,
    mask_buffer: Optional[torch.Tensor],
    seq_lens_cpu: Optional[torch.Tensor],
):
    """A 1-node ``EagleVerifyInput`` rooted at each request's bonus token.

    Shapes: ``bonus_tokens`` (bs,), ``seq_lens`` (bs,). Every position of a 1-node tree is
    visible, so the custom mask (``seq_lens_sum * 1 + 1 * bs`` entries in SGLang's FULL_MASK
    layout) is all True. Mirrors 0.5.23 ``EAGLEWorkerV2._build_trivial_verify_input``; its
    constant tensors come from :class:`_TrivialTreeConstants` (SGLang's verify only reads them).
    """
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
    from sglang.srt.speculative.eagle_info import EagleVerifyInput

    bs = seq_lens.shape[0]
    device = seq_lens.device
    if mask_buffer is not None:
        # v2 writes the tree mask straight into the verify backend's graph buffer.
        mask_buffer.fill_(True)
        custom_mask = mask_buffer
    else:
        custom_mask = _TREE.all_true(seq_lens_sum + bs, device)
    retrieve_index, next_token, next_sibling = _TREE.tree(bs, device)
    return EagleVerifyInput(
        draft_token=bonus_tokens.to(torch.int64),
        custom_mask=custom_mask,
        positions=seq_lens.to(torch.int64),
        retrieve_index=retrieve_index,
        retrieve_next_token=next_token,
        retrieve_next_sibling=next_sibling,
        retrieve_cum_len=None,
        spec_steps=OFF_STEPS,
        topk=topk,
        draft_token_num=OFF_DRAFT_TOKENS,
        capture_hidden_mode=CaptureHiddenMode.FULL,
        seq_lens_sum=seq_lens_sum,
        seq_lens_cpu=seq_lens_cpu,
    )


class OffStepRunner:
    """Owns the ON and OFF runtime states of one live EAGLE worker and runs OFF decode steps.

    Args:
        worker: the scheduler's ``draft_worker`` — an ``EAGLEWorker`` (v1) or ``EAGLEWorkerV2`` (v2).
        spec_version: ``"v1"`` or ``"v2"`` (from :func:`server_patch.compat.classify_worker`).

        any_rank: ``any_rank(flag)`` is True when some TP rank passed True (an all-reduce on the
            TP CPU group at TP > 1, ``bool`` at TP 1). Every choice that changes which kernels and
            collectives an OFF step runs (KV-only or full draft extend: built, proof failed) goes
            through it, so all ranks choose alike.

    Building captures the OFF CUDA graphs (target ``TARGET_VERIFY`` at 1 token/request and the
    1-token draft extend) when CUDA graphs are enabled; that takes GPU memory after the KV cache
    was sized (SGLang's adaptive speculation does the same).
    """

    any_rank: Callable[[bool], bool] = bool  # TP 1 (and a runner built without __init__)
    #: how OFF steps draw non-greedy tokens (``server_patch/off_sampling.py``, :func:`off_sampling.mode`):
    #: the target runner's own Sampler (by default, but on v1 with topk > 1) or SGLang's speculative verify
    off_sampling: str = sampling.SPECULATIVE
    #: the lean v1 OFF step (``off_step_v1``; None: not built) and why not (None: not asked for)
    lean_v1: Optional[off_step_v1.LeanOffStepV1] = None
    _lean_v1_reason: Optional[str] = None
    #: ``off_fa3``: the fused OFF verify metadata (None: not built) and spec_gate's word for it
    fa3_verify_metadata: Optional[off_fa3.FusedVerifyMetadata] = None
    off_verify_metadata: Optional[str] = None
    #: ``deferred_draft_kv`` (v2): pending draft K/V of OFF steps (None: not built) and why not
    deferred_kv: Optional[deferred_draft_kv.DeferredDraftKv] = None
    _deferred_kv_reason: Optional[str] = None
    _off_draft_input: Any = None  # the OFF step's draft input (its stale top-k and hidden state)
    #: ``off_verify_v2`` (v2): the lean verify of all-greedy OFF batches (None: not built) and why not
    lean_v2_verify: Optional[off_verify_v2.LeanVerifyV2] = None
    _lean_v2_verify_reason: Optional[str] = None

    def __init__(self, worker: Any, spec_version: str, any_rank: Callable[[bool], bool] = bool):
        self.worker = worker
        self.any_rank = any_rank
        self.v2 = spec_version == "v2"
        self.topk = worker.topk
        self.on_state = self._current_state()
        target_runner = worker.target_worker.model_runner
        self.off_target_attention = off_attention.EXTEND_KERNEL
        self.off_draft_extend_attention = off_attention.EXTEND_KERNEL
        with self._build_context(), _no_multistep_draft_backend_for_zero_steps(), \
                self._decode_kernel_for_off_target(target_runner), self._decode_kernel_for_off_draft_extend():
            self.off_state = worker.build_adaptive_runtime_state(OFF_STEPS, OFF_DRAFT_TOKENS)
        self._apply(self.on_state)  # build leaves ON fields in place; be explicit
        self.off_target_graph = _ReplayCounter(self.off_state.target_graph_runner)
        self.off_draft_extend_graph = _ReplayCounter(
            self.off_state.cuda_graph_runner_for_draft_extend,
            hand_batch_to=self.off_state.draft_extend_attn_backend,
        )
        self.on_target_graph = _ReplayCounter(self.on_state.target_graph_runner)
        self.off_steps_cuda_graph = 0  # OFF steps whose target verify replayed the OFF graph
        self._draft_owner = worker.draft_worker if self.v2 else worker
        self._init_kv_only()
        self._agree_on_kv_only()
        self._init_prefill_kv_only()
        self._init_early_seq_lens()
        self.lean_draft_extend = self.v2 and options.switch(LEAN_DRAFT_EXTEND_ENV, True)
        self.lean_draft_extend_steps = 0  # OFF steps that took the lean post-processing
        self.off_sampling = sampling.mode(self.v2, self.topk)
        self._init_lean_v1()
        self._init_deferred_kv()
        self._init_lean_v2_verify()
        # fa3: the OFF verify's replay metadata with the decode path's fused kernel (off_fa3, opt-in)
        self.fa3_verify_metadata, self.off_verify_metadata = off_fa3.install(
            self.off_state.target_attn_backend, sampled, self.any_rank)

    def _init_lean_v1(self) -> None:
        """The lean v1 OFF step (``off_step_v1``, default on, ``SPECCONSOLE_OFF_LEAN_V1=0`` off):
        ``lean_v1`` (None when not built) and ``off_lean_v1`` (``on``, or why not; None when switched off)."""
        self.lean_v1: Optional[off_step_v1.LeanOffStepV1] = None
        self._lean_v1_reason: Optional[str] = None
        if self.v2 or not off_step_v1.enabled_by_env():
            return
        reason = off_step_v1.server_reason(self.worker)
        if reason is None and not isinstance(self.kv_only, draft_kv_only.KvOnlyRunner):
            reason = "no KV-only draft-extend CUDA graph"
        if reason is None and isinstance(self.kv_only.full_runner, draft_kv_only.EagerDraftExtend):
            reason = "no full OFF draft-extend CUDA graph to prove against"
        if reason is None:
            reason = off_step_v1.backend_reason(self.off_state.draft_extend_attn_backend)
        if reason is None and self.off_sampling != sampling.PLAIN:
            reason = "OFF steps draw with SGLang's verify sampling"
        if reason is not None:
            self._lean_v1_reason = reason
            logger.info("spec_gate: no lean v1 OFF steps: %s", reason)
            return
        graph = self.off_kv_state.cuda_graph_runner_for_draft_extend
        self.lean_v1 = off_step_v1.LeanOffStepV1(self.worker, graph, lambda bs: _graph_takes(graph, bs),
                                                 self._build_context, sampled, self.any_rank)

    @property
    def off_lean_v1(self) -> Optional[str]:
        """``on`` while lean v1 OFF steps run; else why not (a proof failed since, or the reason it
        was never built); None on v2 and where ``SPECCONSOLE_OFF_LEAN_V1=0`` switched it off."""
        if self.lean_v1 is None:
            return self._lean_v1_reason
        if not self.lean_v1.ok:
            return "proof failed"
        if self.off_draft_extend != draft_kv_only.KV_ONLY:
            return "KV-only draft extend off (its proof failed)"
        return "on"

    def _init_deferred_kv(self) -> None:
        """Deferred draft K/V on KV-only OFF steps (``deferred_draft_kv``: v2 default on,
        ``SPECCONSOLE_OFF_DEFERRED_DRAFT_KV=0`` off; v1's lean steps opt-in with
        ``SPECCONSOLE_OFF_DEFERRED_DRAFT_KV_V1=1``): ``deferred_kv`` (None when not built) and
        ``off_deferred_draft_kv`` (``on``, or why not; None when switched off)."""
        if not deferred_draft_kv.enabled_by_env():
            return
        reason = deferred_draft_kv.server_reason(self.worker.server_args)
        if reason is None and not self.v2:
            if not deferred_draft_kv.enabled_for_v1_by_env():
                reason = f"v1 (EAGLEWorker): {deferred_draft_kv.V1_ENV_SWITCH}=1 asks for it"
            elif self.lean_v1 is None:
                reason = f"no lean v1 OFF steps ({self._lean_v1_reason})"
        if reason is None and self.kv_only is None:
            reason = f"no KV-only draft extend ({self.off_draft_extend_reason})"
        capacity = 0
        if reason is None:
            try:
                capacity = deferred_draft_kv.capacity_from_env()
            except ValueError as exc:
                reason = str(exc)
        if reason is not None:
            self._deferred_kv_reason = reason
            logger.info("spec_gate: OFF steps store the draft's K/V at once: %s", reason)
            return
        model = self._draft_model()
        self.deferred_kv = deferred_draft_kv.DeferredDraftKv(
            draft_kv_only.kv_store(model), self._draft_runner().token_to_kv_pool,
            model.model.layers[0].self_attn.attn, capacity, self._build_context, sampled, self.any_rank)
        if not self.v2:
            self.lean_v1.deferred = self.deferred_kv
        # the buffers now, not at the first OFF step: a server without the memory says so at start-up
        width, dtype = _extend_hidden_layout(self._draft_owner)
        if width is not None and not self.deferred_kv.allocate(width, dtype, self.worker.device):
            logger.warning("spec_gate: OFF steps store the draft's K/V at once: %s", self.deferred_kv.reason)
            return
        logger.info("spec_gate: OFF steps defer the draft's K/V (up to %d tokens)", capacity)

    @property
    def off_deferred_draft_kv(self) -> Optional[str]:
        """``on`` while OFF steps defer the draft's K/V; else why not (a proof or the buffer's
        allocation failed since, or why it was never built); None when not asked for."""
        d = self.deferred_kv
        if d is None:
            return self._deferred_kv_reason
        if not d.ok:
            return d.reason or "proof failed"
        if self.off_draft_extend != draft_kv_only.KV_ONLY:
            return "KV-only draft extend off (its proof failed)"
        if not self.v2 and not self.lean_v1.ok:
            return "lean v1 OFF steps off (their proof failed)"
        return "on"

    def _init_lean_v2_verify(self) -> None:
        """The lean verify of v2 OFF steps (``off_verify_v2``, default on, ``SPECCONSOLE_OFF_LEAN_V2_VERIFY=0`` off)."""
        if not off_verify_v2.enabled_by_env():
            return
        reason = off_verify_v2.server_reason(self.worker) if self.v2 else "v1 (EAGLEWorker)"
        if reason is not None:
            self._lean_v2_verify_reason = reason
            logger.info("spec_gate: OFF steps keep SGLang's verify: %s", reason)
            return
        self.lean_v2_verify = off_verify_v2.LeanVerifyV2(self.worker, sampled, self.any_rank)

    @property
    def off_lean_v2_verify(self) -> Optional[str]:
        """``on`` while v2 OFF steps of all-greedy batches take the lean verify; else why not
        (``proof failed``, or why it was never built); None when not asked for."""
        if self.lean_v2_verify is None:
            return self._lean_v2_verify_reason
        return "on" if self.lean_v2_verify.ok else "proof failed"

    def flush_deferred_kv(self, inside_draft: bool = False) -> None:
        """Store every pending deferred draft K/V row now (before any forward that is not a
        deferred OFF step: ``scheduler_hooks``, :meth:`run_off_step`). ``inside_draft``: called
        from within SGLang's draft stage, which already holds the draft TP context."""
        if self.deferred_kv is not None and self.deferred_kv.fill:
            self.deferred_kv.flush(enter_context=not inside_draft)

    def _init_kv_only(self) -> None:
        """The KV-only OFF draft extend (``draft_kv_only``): a second OFF state whose draft-extend
        graphs only store the draft's K/V. ``off_draft_extend`` says which one OFF steps run and
        ``off_draft_extend_reason`` why not KV-only."""
        self._no_kv_only()
        full = self.off_state.cuda_graph_runner_for_draft_extend
        model = self._draft_model()
        reason = None
        if not draft_kv_only.enabled_by_env():
            reason = f"{draft_kv_only.ENV_SWITCH}=0"
        else:
            reason = draft_kv_only.unsupported_reason(model)
        if reason is None and full is None:
            if self._init_standalone_kv_only_graph(model):
                return
            if draft_kv_only.eager_enabled_by_env():
                layer = model.model.layers[0].self_attn.attn
                self.kv_only = draft_kv_only.EagerKvOnly(model, layer, sampled, self.any_rank)
                self.off_kv_state = self.off_state  # the same (eager) draft extend, KV-only forward
                return
            reason = f"no OFF draft-extend CUDA graph and {draft_kv_only.EAGER_ENV_SWITCH}=0 (no eager KV-only extend)"
        if reason is not None:
            self.off_draft_extend_reason = reason
            return
        fill = full.draft_extend_attn_backend.get_cuda_graph_seq_len_fill_value()
        graph = self._capture_kv_only_graph(type(full), fill, model)
        if graph is None:  # the full OFF step still works: run it (the reason is set)
            return
        layer = model.model.layers[0].self_attn.attn
        self.kv_only = draft_kv_only.KvOnlyRunner(graph, full, layer, sampled, self.any_rank)
        self.off_kv_state = dataclasses.replace(self.off_state, cuda_graph_runner_for_draft_extend=graph)

    def _capture_kv_only_graph(self, runner_cls: type, fill: int, model: Any):
        """The KV-only draft-extend graph runner (``draft_kv_only.build_kv_only_graph_runner``),
        captured under the workers' own capture-time override (steps 0, 1 draft token) as the OFF
        state is; None when the capture failed (``off_draft_extend_reason`` says why)."""
        try:
            with self._build_context(), self.worker._override_worker_state(OFF_STEPS, OFF_DRAFT_TOKENS):
                return draft_kv_only.build_kv_only_graph_runner(
                    runner_cls, fill, self.worker.draft_worker if self.v2 else self.worker, model)
        except Exception as exc:
            logger.warning("spec_gate: KV-only OFF draft extend graph not captured (%s: %s)",
                           type(exc).__name__, exc)
            self.off_draft_extend_reason = f"capture failed: {type(exc).__name__}: {exc}"
            return None
        finally:
            self._apply(self.on_state)

    def _init_standalone_kv_only_graph(self, model: Any) -> bool:
        """Where SGLang captured no OFF draft-extend graph although CUDA graphs are on (v2 on fa3
        and every backend but triton) and ``SPECCONSOLE_OFF_DRAFT_KV_ONLY_GRAPH`` asks for it (unset: v2),
        the KV-only extend gets its own graph all the same (it calls no attention); its proof's
        reference is SGLang's eager full draft extend, within bf16 rounding (``draft_kv_only``
        module docstring). False: not built (not asked for, graphs off, or the capture failed:
        the eager KV-only extend is next)."""
        if getattr(self.worker.server_args, "disable_cuda_graph", False) or not draft_kv_only.graph_enabled_by_env(self.v2):
            return False
        draft_runner = self._draft_runner()
        graph = self._capture_kv_only_graph(draft_kv_only.sglang_draft_extend_runner_cls(),
                                            draft_runner.attn_backend.get_cuda_graph_seq_len_fill_value(), model)
        # the graph on every TP rank or on none: a graph replay and an eager forward issue their
        # collectives differently (every rank gets here alike: same env, arguments, backends)
        if self.any_rank(graph is None) and graph is not None:
            logger.warning("spec_gate: the KV-only graph was not captured on another TP rank")
            graph = None
        if graph is None:
            logger.warning("spec_gate: OFF steps run the KV-only draft extend eagerly instead")
            self.off_draft_extend_reason = None
            return False
        # the eager path's backend (v2: the draft runner's own; v1: the draft-extend one)
        backend = draft_runner.attn_backend if self.v2 else (self.off_state.draft_extend_attn_backend
                                                            or draft_runner.attn_backend)
        reference = draft_kv_only.EagerDraftExtend(draft_runner, backend)
        layer = model.model.layers[0].self_attn.attn
        self.kv_only = draft_kv_only.KvOnlyRunner(graph, reference, layer, sampled, self.any_rank, rounding=True)
        self.off_kv_state = dataclasses.replace(self.off_state, cuda_graph_runner_for_draft_extend=graph)
        return True

    def _init_prefill_kv_only(self) -> None:
        """KV-only draft prefills while the gate is off (``SPECCONSOLE_OFF_PREFILL_KV_ONLY``, unset: v2 only): an
        :class:`draft_kv_only.EagerKvOnly` over the draft's prefill forward, its output cut to each
        request's last token (``prefill_kv_only``; None when not asked for or the draft cannot)."""
        self.prefill_kv_only: Optional[draft_kv_only.EagerKvOnly] = None
        self.kv_only_prefills = 0  # prefills whose draft extend stored only K/V
        # v1: with the lean v1 step (default; measured together on the H200)
        if (not draft_kv_only.prefill_enabled_by_env(self.v2 or off_step_v1.enabled_by_env())
                or not draft_kv_only.enabled_by_env()):
            return  # not asked for, or every KV-only draft forward switched off (the escape hatch)
        model = self._draft_model()
        reason = draft_kv_only.unsupported_reason(model)
        if reason is not None:
            logger.info("spec_gate: draft prefills stay full while OFF: %s", reason)
            return
        layer = model.model.layers[0].self_attn.attn
        self.prefill_kv_only = draft_kv_only.EagerKvOnly(
            model, layer, sampled, self.any_rank, what="KV-only draft prefill",
            kv_forward=draft_kv_only.kv_only_forward(model, last_of_each_request=True))

    def run_prefill(self, forward: Callable, batch: Any):
        """Run a prefill batch (``forward``: the worker's original ``forward_batch_generation``)
        while the gate is off: with the KV-only draft prefill where it is built and its proof
        holds, its rows deferred where deferral runs (``deferred_draft_kv``: then the pending rows
        need no flush first, nothing here reads the draft's KV cache), which leaves the draft stale
        (the next ON decode batch runs the resume step first); else as SGLang runs it."""
        kv = getattr(self, "prefill_kv_only", None)
        deferred = self.deferred_kv if (self.v2 and kv is not None and kv.ok and self.deferred_kv is not None
                                        and self.deferred_kv.ok) else None  # v1: flushed, then immediate
        if deferred is None:
            self.flush_deferred_kv()
        if kv is None or not kv.ok:
            return forward(batch)
        before, appended = kv.count, deferred.count if deferred is not None else 0
        owner = self._draft_owner if deferred is not None else None
        if deferred is not None:
            immediate = type(owner)._draft_extend_for_prefill.__get__(owner)
            owner._draft_extend_for_prefill = self._deferred_draft_extend_for_prefill(immediate)
        try:
            with kv.installed():
                result = forward(batch)
        finally:
            if deferred is not None:
                del owner._draft_extend_for_prefill
        if kv.count > before or (deferred is not None and deferred.count > appended):
            self.kv_only_prefills += 1  # the draft's own forward ran (not a graph of it): K/V only
            self.draft_stale = True
        return result

    def _deferred_draft_extend_for_prefill(self, immediate: Callable) -> Callable:
        """A replacement for ``EagleDraftWorker._draft_extend_for_prefill`` (``eagle_worker_v2.py``
        in 0.5.12) while the gate is off: the prompt's draft K/V rows are queued
        (``deferred_draft_kv``) with the inputs SGLang's draft prefill would use (each request's
        tokens shifted left by one with its drawn token last, written back into ``input_ids`` as
        SGLang does; positions ``prefix_len ..``; the prefill's cache slots; the target's hidden
        states (T, D)), and the next draft input gets placeholder top-k and hidden state of
        SGLang's shapes (stale by design, as after a KV-only prefill: the resume step refreshes
        them). On proof prefills, and where the rows cannot be deferred (multimodal embeddings,
        requests sent as embeddings or with embedding overrides, more rows than the buffer),
        ``immediate`` (the KV-only draft prefill) runs."""
        runner = self
        deferred = self.deferred_kv

        def draft_extend_for_prefill(batch: Any, target_hidden_states: Any, next_token_ids: Any,
                                     mm_input_embeds: Any = None):
            n = target_hidden_states.shape[0] if target_hidden_states is not None else 0
            # embeddings given as such (or overridden) reach the draft's forward, not its embed_tokens
            given = any(getattr(batch, f, None) is not None for f in ("input_embeds", "replace_embeds"))

            def rows():
                tokens, positions = prefill_rows(batch.input_ids, next_token_ids, batch.extend_prefix_lens,
                                                 batch.extend_seq_lens)  # before immediate() shifts input_ids
                return tokens, positions, batch.out_cache_loc, target_hidden_states

            def instead(queued):
                batch.input_ids.copy_(queued[0])  # SGLang's draft prefill leaves them shifted
                return runner._placeholder_draft_input(batch, target_hidden_states, next_token_ids)

            return deferred.defer(
                n, target_hidden_states, rows,
                immediate=lambda: immediate(batch, target_hidden_states, next_token_ids, mm_input_embeds),
                instead=instead,
                eligible=mm_input_embeds is None and not given and not batch.forward_mode.is_idle())

        return draft_extend_for_prefill

    def _placeholder_draft_input(self, batch: Any, target_hidden_states: Any, next_token_ids: Any):
        """The next draft input of a deferred draft prefill: SGLang's fields (bonus tokens, the new
        ``seq_lens``, 1 token per request) and zero top-k / hidden state of the shapes and dtypes
        SGLang's draft prefill returns: ``topk_p`` (R, topk) float32, ``topk_index`` (R, topk)
        int64, ``hidden_states`` (R, draft hidden) in the draft's dtype (``EagleDraftInput``'s
        ``hidden_size_for`` / ``dtype_for``, as SGLang's idle input)."""
        cls = _eagle_draft_input_cls()
        dw = self.worker.draft_worker
        r = next_token_ids.shape[0]
        device = next_token_ids.device
        ndi = cls(hidden_states=target_hidden_states, bonus_tokens=next_token_ids, new_seq_lens=batch.seq_lens,
                  num_tokens_per_req=1, num_tokens_for_logprob_per_req=1)
        batch.spec_info = ndi
        size, dtype = cls.hidden_size_for(dw), cls.dtype_for(dw)
        ndi.topk_p = torch.zeros((r, self.topk), dtype=torch.float32, device=device)
        ndi.topk_index = torch.zeros((r, self.topk), dtype=torch.int64, device=device)
        ndi.hidden_states = torch.zeros((r, size), dtype=dtype, device=device) if size is not None else None
        return ndi

    def _agree_on_kv_only(self) -> None:
        """KV-only OFF steps on every TP rank or on none (a capture can fail on one rank only)."""
        built = self.kv_only is not None
        if self.any_rank(not built) and built:
            logger.warning("spec_gate: the KV-only OFF draft extend was not built on another TP "
                           "rank; OFF steps run the full draft extend on every rank")
            self._no_kv_only("not built on another TP rank")

    def _no_kv_only(self, reason: Optional[str] = None) -> None:
        """The fields of a runner without KV-only OFF steps (``reason``: why not)."""
        self.kv_only: Optional[draft_kv_only.KvOnlyRunner] = None
        self.off_kv_state = None
        self.draft_stale = False  # a KV-only step ran since the draft's top-k/hidden were fresh
        self.resume_steps = 0  # full OFF steps run on the way back to speculation
        self.off_draft_extend_reason = reason

    def _draft_runner(self):
        """The draft's SGLang ``ModelRunner`` (v2: the draft worker's, v1: the worker's)."""
        return self.worker.draft_worker.draft_runner if self.v2 else self.worker.draft_model_runner

    def _draft_model(self):
        return self._draft_runner().model

    @property
    def off_draft_extend(self) -> str:
        """``kv-only`` while KV-only OFF steps run (proof intact), else ``full``."""
        if self.kv_only is not None and self.kv_only.ok:
            return draft_kv_only.KV_ONLY
        return draft_kv_only.FULL

    def _init_early_seq_lens(self) -> None:
        self.early_seq_lens = self.v2 and options.switch(EARLY_SEQ_LENS_ENV, True)
        self.early_seq_lens_steps = 0  # OFF results that carried the early seq_lens and event
        self.early_seq_lens_fallbacks = 0  # OFF results left as SGLang made them (shape/dtype differ)
        self.early_seq_lens_checks = 0
        self.early_seq_lens_mismatches = 0
        self._new_event = _new_event

    @property
    def has_off_cuda_graph(self) -> bool:
        return self.off_state.target_graph_runner is not None

    def _off_backends(self):
        return (self.off_state.target_attn_backend, getattr(self.off_state, "draft_extend_attn_backend", None))

    @property
    def off_attention_checks(self) -> int:
        """Sampled OFF-step attention calls (target verify + draft extend) whose decode-kernel key
        indices were checked (see ``off_attention``)."""
        return sum(getattr(b, "spec_gate_checks", 0) for b in self._off_backends())

    @property
    def off_attention_mismatches(self) -> int:
        return sum(getattr(b, "spec_gate_mismatches", 0) for b in self._off_backends())

    # -- runtime-state plumbing ------------------------------------------------------

    def _decode_kernel_for_off_draft_extend(self):
        """Same for the OFF draft-extend backend, which the worker's ``init_attention_backend``
        gets from ``DraftBackendFactory.create_draft_extend_backend`` during the build."""
        from sglang.srt.speculative.draft_utils import DraftBackendFactory

        original = DraftBackendFactory.create_draft_extend_backend
        runner = self

        def create_draft_extend_backend(factory):
            backend = original(factory)
            if backend is not None:
                runner.off_draft_extend_attention = off_attention.use_decode_kernel(
                    backend, role=off_attention.DRAFT_EXTEND)
            return backend

        return _replaced(DraftBackendFactory, "create_draft_extend_backend", create_draft_extend_backend)

    def _decode_kernel_for_off_target(self, target_runner):
        """While the OFF state is built, the target backend that ``build_adaptive_runtime_state``
        asks ``_get_attention_backend`` for is converted (before its CUDA graphs are captured)
        to serve the 1-token verify with the decode kernel, where the backend allows it."""
        original = target_runner._get_attention_backend
        runner = self

        def get_attention_backend(*args, **kwargs):
            backend = original(*args, **kwargs)
            runner.off_target_attention = off_attention.use_decode_kernel(backend)
            return backend

        return _replaced(target_runner, "_get_attention_backend", get_attention_backend)

    def _build_context(self):
        from sglang.srt.layers.moe.utils import (
            speculative_moe_a2a_backend_context,
            speculative_moe_backend_context,
        )

        w = self.worker
        stack = contextlib.ExitStack()
        if self.v2:
            dw = w.draft_worker
            stack.enter_context(dw.draft_tp_context(dw.draft_runner.tp_group))
        else:
            stack.enter_context(w.draft_tp_context(w.draft_model_runner.tp_group))
        stack.enter_context(speculative_moe_backend_context())
        stack.enter_context(speculative_moe_a2a_backend_context())
        return stack

    def _current_state(self):
        from sglang.srt.speculative.adaptive_runtime_state import SpecRuntimeState

        w = self.worker
        dw = w.draft_worker if self.v2 else w
        target_runner = w.target_worker.model_runner
        return SpecRuntimeState(
            speculative_num_steps=w.speculative_num_steps,
            speculative_num_draft_tokens=w.speculative_num_draft_tokens,
            draft_attn_backend=dw.draft_attn_backend,
            cuda_graph_runner=dw.cuda_graph_runner,
            target_attn_backend=target_runner.attn_backend,
            target_graph_runner=target_runner.graph_runner,
            draft_extend_attn_backend=dw.draft_extend_attn_backend,
            cuda_graph_runner_for_draft_extend=dw.cuda_graph_runner_for_draft_extend,
        )

    def _apply(self, state) -> None:
        """Point the worker at ``state``'s backends and graphs. Same fields as the workers' own
        ``apply_runtime_state`` (v1 ``eagle_worker.py:315-346``, v2 ``eagle_worker_v2.py:888-924``)
        minus its per-switch log line and minus the ``server_args`` sync (KV reservation stays ON)."""
        w = self.worker
        w.speculative_num_steps = state.speculative_num_steps
        w.speculative_num_draft_tokens = state.speculative_num_draft_tokens
        if self.v2:
            dw = w.draft_worker
            dw.speculative_num_steps = state.speculative_num_steps
            dw.speculative_num_draft_tokens = state.speculative_num_draft_tokens
            dw.draft_runner.draft_attn_backend = state.draft_attn_backend
        else:
            dw = w
            w.draft_model_runner.draft_attn_backend = state.draft_attn_backend
        dw.draft_attn_backend = state.draft_attn_backend
        dw.cuda_graph_runner = state.cuda_graph_runner
        dw.draft_extend_attn_backend = state.draft_extend_attn_backend
        dw.cuda_graph_runner_for_draft_extend = state.cuda_graph_runner_for_draft_extend
        target_runner = w.target_worker.model_runner
        target_runner.attn_backend = state.target_attn_backend
        target_runner.graph_runner = state.target_graph_runner

    # -- the OFF step ----------------------------------------------------------------

    def _off_draft_v1(self, batch):
        """Replacement for ``EAGLEWorker.draft`` during an OFF step (``eagle_worker.py:701-795``):
        the bookkeeping of ``_draft_preprocess_decode`` without allocating draft slots."""
        off_step_v1.draft_preprocess(batch, int(torch.sum(batch.seq_lens).item()))
        return _trivial_verify_input(
            batch.spec_info.bonus_tokens,
            batch.seq_lens,
            batch.seq_lens_sum,
            self.topk,
            mask_buffer=None,
            seq_lens_cpu=batch.seq_lens_cpu,
        )

    def _off_draft_v2(self, model_worker_batch):
        """Replacement for ``EagleDraftWorker.draft`` during an OFF step (``eagle_worker_v2.py:339-416``)."""
        draft_input = model_worker_batch.spec_info
        self._off_draft_input = draft_input
        mask_buf, _ = (
            self.worker.target_worker.model_runner.attn_backend.get_verify_buffers_to_fill_after_draft()
        )
        return _trivial_verify_input(
            draft_input.bonus_tokens,
            model_worker_batch.seq_lens,
            model_worker_batch.seq_lens_sum,
            self.topk,
            mask_buffer=mask_buf,
            seq_lens_cpu=None,
        )

    def run_off_step(self, forward: Callable, batch: Any, resume: bool = False):
        """Run one decode batch with speculation off: ``forward`` is the worker's original
        ``forward_batch_generation``; returns its ``GenerationBatchResult``.

        ``resume=False``: a gated OFF step, with the KV-only draft extend when available.
        ``resume=True``: the full OFF step that refreshes the draft's top-k and hidden state
        before speculation resumes after KV-only steps (not counted in ``off_steps_cuda_graph``).
        """
        early = self._early_seq_lens(batch) if self.early_seq_lens else None
        kv_only = not resume and self.off_draft_extend == draft_kv_only.KV_ONLY
        lean_v1 = kv_only and self.lean_v1 is not None and self.lean_v1.reason(batch) is None
        if not (kv_only and self.deferred_kv is not None and (self.v2 or lean_v1)):
            self.flush_deferred_kv()  # this step stores draft K/V at once, after the pending rows
        kv_replays = self.kv_only.count if self.kv_only is not None else 0
        deferred_steps = self.deferred_kv.count if self.deferred_kv is not None else 0
        replays_before = self.off_target_graph.count
        if lean_v1:
            self._apply(self.off_kv_state)
            try:
                result = self.lean_v1.run(batch, _trivial_verify_input)
            finally:
                self._apply(self.on_state)
        else:
            result = self._run_sglang_off_step(forward, batch, kv_only)
        if resume:
            self.resume_steps += 1
        elif self.off_target_graph.count > replays_before:
            self.off_steps_cuda_graph += 1
        # Stale only when the KV-only graph really ran or the step's K/V were deferred (an eager
        # fallback runs the full draft).
        self.draft_stale = kv_only and (self.kv_only.count > kv_replays or (
            self.deferred_kv is not None and self.deferred_kv.count > deferred_steps))
        if early is not None:
            self._publish_early_seq_lens(result, *early)
        return result

    def _run_sglang_off_step(self, forward: Callable, batch: Any, kv_only: bool):
        """The OFF step through the worker's own ``forward_batch_generation`` (``forward``), with the
        draft stage replaced by the trivial verify input, under the OFF (or KV-only OFF) state."""
        owner = self._draft_owner
        self._apply(self.off_kv_state if kv_only else self.off_state)
        owner.draft = self._off_draft_v2 if self.v2 else self._off_draft_v1
        draws = (sampling.plain_sampling(self.worker.target_worker.model_runner.sampler, self.v2)
                 if self.off_sampling == sampling.PLAIN else contextlib.nullcontext())
        eager_kv = (self.kv_only.installed() if kv_only and isinstance(self.kv_only, draft_kv_only.EagerKvOnly)
                    else contextlib.nullcontext())
        lean = kv_only and getattr(self, "lean_draft_extend", False) and isinstance(self.kv_only, draft_kv_only.KvOnlyRunner)
        deferred = kv_only and self.v2 and self.deferred_kv is not None
        lean_verify = self.v2 and self.lean_v2_verify is not None
        if lean_verify:
            self.worker.verify = self.lean_v2_verify.wrap(type(self.worker).verify.__get__(self.worker))
        if lean or deferred:
            step = type(owner)._draft_extend_for_decode.__get__(owner)
            if lean:
                step = self._lean_draft_extend_v2(step)
            owner._draft_extend_for_decode = self._deferred_draft_extend_v2(step) if deferred else step
        try:
            with draws, eager_kv:
                result = forward(batch)
        finally:
            del owner.draft  # back to the class's draft()
            self._off_draft_input = None
            if lean or deferred:
                del owner._draft_extend_for_decode
            if lean_verify:
                del self.worker.verify  # back to the class's verify()
            self._apply(self.on_state)
        return result

    def _deferred_draft_extend_v2(self, immediate: Callable) -> Callable:
        """A replacement for ``EagleDraftWorker._draft_extend_for_decode`` on a v2 KV-only OFF step
        that queues the step's draft K/V rows (``deferred_draft_kv``) instead of storing them:
        the drawn tokens, the verify's positions (``seq_lens``) and cache slots (``out_cache_loc``),
        the target's hidden states (bs, D); the next draft input keeps the step's own stale top-k
        and hidden state (as after every KV-only step: the resume step refreshes them). On proof
        steps, and where the rows cannot be deferred, ``immediate`` (the KV-only extend) runs."""
        runner = self
        deferred = self.deferred_kv

        def draft_extend_for_decode(batch: Any, batch_result: Any) -> None:
            hidden = batch_result.logits_output.hidden_states
            old = runner._off_draft_input

            def instead(queued):  # the next draft input keeps the step's stale top-k and hidden state
                ndi = batch_result.next_draft_input
                ndi.topk_p, ndi.topk_index, ndi.hidden_states = old.topk_p, old.topk_index, old.hidden_states

            deferred.defer(
                batch.seq_lens.numel(), hidden,
                lambda: (batch_result.next_token_ids, batch.seq_lens, batch.out_cache_loc, hidden),
                immediate=lambda: immediate(batch, batch_result),  # also sets the next draft input's stale fields
                instead=instead,
                eligible=hidden is not None and old is not None and getattr(old, "topk_p", None) is not None)

        return draft_extend_for_decode

    def _lean_draft_extend_v2(self, original: Callable) -> Callable:
        """A replacement for ``EagleDraftWorker._draft_extend_for_decode`` (``eagle_worker_v2.py``
        in 0.5.12) for a KV-only OFF step: the same preparation and graph replay, then the draft's
        top-k and hidden state for ``next_draft_input`` straight from the replay's outputs (the
        graph computed ``fast_topk(softmax(logits))`` of its logits; an OFF step's ``accept_lens``
        are all 1 and its draft tokens 1, so SGLang's index select is the identity and its eager
        softmax/top-k recompute the same values). Falls back to ``original`` where the graph cannot
        take the batch. Shapes: ``topk_p`` / ``topk_index`` (bs, topk), ``hidden_states`` (bs, hidden)."""
        dw = self.worker.draft_worker
        runner = self

        def draft_extend_for_decode(batch: Any, batch_result: Any) -> None:
            graph = dw.cuda_graph_runner_for_draft_extend
            if not _graph_takes(graph, batch.seq_lens.numel()):
                return original(batch, batch_result)
            draft_input = _eagle_draft_input_cls()(hidden_states=batch_result.logits_output.hidden_states,
                                          num_tokens_per_req=dw.speculative_num_steps + 1,
                                          num_tokens_for_logprob_per_req=dw.speculative_num_steps + 1)
            with dw.plan_stream_ctx:
                forward_batch = draft_input.prepare_for_extend_to_fill_draft_kvcache(
                    batch, batch_result.next_token_ids, dw.speculative_num_draft_tokens, dw.draft_runner, graph)
            if dw.plan_stream:
                torch.get_device_module(dw.device).current_stream().wait_stream(dw.plan_stream)
            if forward_batch.spec_info.num_correct_drafts is None:
                forward_batch.spec_info.num_correct_drafts = batch_result.accept_lens - 1
                forward_batch.spec_info.num_accept_tokens = batch_result.accept_lens
            out = graph.replay(forward_batch)
            ndi = batch_result.next_draft_input
            ndi.topk_p, ndi.topk_index, ndi.hidden_states = out.topk_p, out.topk_index, out.hidden_states
            runner.lean_draft_extend_steps += 1

        return draft_extend_for_decode

    # -- the early next-batch seq_lens (v2; see the module docstring) ------------------

    def _early_seq_lens(self, batch: Any):
        """``(seq_lens + 1, event recorded after it)`` on the current (forward) stream, before the
        OFF verify is launched; None for an empty batch. Shapes: ``seq_lens`` (bs,)."""
        seq_lens = getattr(batch, "seq_lens", None)
        if seq_lens is None or seq_lens.numel() == 0:
            return None
        new_seq_lens = seq_lens + 1
        done = self._new_event(new_seq_lens.device)
        done.record()
        return new_seq_lens, done

    def _publish_early_seq_lens(self, result: Any, new_seq_lens: torch.Tensor, done: Any) -> None:
        """Put the early ``new_seq_lens`` and its event on the OFF result's ``next_draft_input``
        (which the scheduler reads: ``scheduler.py`` ``run_batch``, then ``maybe_wait_verify_done``).
        Left as SGLang made it when its tensor differs in shape or dtype."""
        ndi = getattr(result, "next_draft_input", None)
        sglang_lens = getattr(ndi, "new_seq_lens", None)
        if (sglang_lens is None or sglang_lens.shape != new_seq_lens.shape
                or sglang_lens.dtype != new_seq_lens.dtype):
            self.early_seq_lens_fallbacks += 1
            return
        self.early_seq_lens_steps += 1
        n = self.early_seq_lens_steps
        if sampled(n):
            self.early_seq_lens_checks += 1
            proof.note_check()
            differ = not torch.equal(sglang_lens, new_seq_lens)  # waits for this OFF step's verify
            if differ:
                self.early_seq_lens_mismatches += 1
                logger.error("spec_gate: OFF step %d: seq_lens + 1 differs from the verify's "
                             "new_seq_lens; keeping SGLang's, and OFF steps wait for the verify "
                             "from now on, on every TP rank", n)
            # An assumption about SGLang failed; unchecked steps could be wrong too: stop, on
            # every rank (the checks fall on the same OFF steps everywhere)
            if self.any_rank(differ):
                self.early_seq_lens = False
                return
        ndi.new_seq_lens = new_seq_lens
        ndi.verify_done = done


def prefill_rows(input_ids: torch.Tensor, next_token_ids: torch.Tensor, prefix_lens: List[int],
                 extend_lens: List[int]) -> Tuple[torch.Tensor, torch.Tensor]:
    """The draft prefill's inputs for a prefill of R requests, T tokens in all: ``(tokens,
    positions)`` (T,) each. ``tokens``: each request's ``input_ids`` shifted left by one with its
    drawn token (``next_token_ids`` (R,)) last, as ``_draft_extend_for_prefill`` builds them
    (``eagle_worker_v2.py`` in 0.5.12; an EAGLE draft sees at each position the token after it);
    ``positions``: ``prefix_len .. prefix_len + extend_len - 1`` per request, as ``ForwardBatch``
    computes them for an EXTEND batch. ``prefix_lens`` / ``extend_lens``: CPU lists (R,)."""
    import numpy as np

    device = input_ids.device
    tokens = torch.empty_like(input_ids)
    tokens[:-1] = input_ids[1:]
    last = np.cumsum(np.asarray(extend_lens, dtype=np.int64)) - 1
    positions = np.concatenate([np.arange(p, p + e, dtype=np.int64) for p, e in zip(prefix_lens, extend_lens)])
    # one pinned copy for both (a pageable copy here would wait for the target prefill just launched,
    # host_copy; each copy is a pin and a launch on a scheduler that is launch-bound around prefills)
    both = host_copy.to_device(np.concatenate([last, positions]), device)
    tokens[both[:len(last)]] = next_token_ids.to(input_ids.dtype)
    return tokens, both[len(last):]


def _extend_hidden_layout(draft_worker: Any) -> Tuple[Optional[int], Any]:
    """``(width, dtype)`` of the target hidden states a draft extend reads, as SGLang sizes its
    draft-extend graph buffers (``EagleDraftExtendInput.hidden_size_for`` / ``dtype_for``:
    ``num_aux * target_hidden`` for EAGLE-3); ``(None, None)`` where SGLang cannot say."""
    from sglang.srt.speculative.eagle_info import EagleDraftExtendInput

    try:
        return EagleDraftExtendInput.hidden_size_for(draft_worker), EagleDraftExtendInput.dtype_for(draft_worker)
    except AttributeError:
        return None, None


def _eagle_draft_input_cls() -> type:
    from sglang.srt.speculative.eagle_info import EagleDraftInput

    return EagleDraftInput


def _graph_takes(graph: Any, bs: int) -> bool:
    """Whether SGLang's draft-extend graph runner ``graph`` replays a batch of ``bs`` requests
    (its ``can_run`` without DP gathering: ``eagle_draft_extend_cuda_graph_runner.py``)."""
    if graph is None or getattr(graph, "require_mlp_tp_gather", False) or getattr(graph, "require_mlp_sync", False):
        return False
    return bs in graph.graphs if graph.disable_padding else bs <= graph.max_bs


def snapshot_req_spec_counters(reqs: List[Any]):
    """Per-request speculative counters, to undo what an OFF step's verify adds to them."""
    return [
        (r, r.spec_verify_ct, r.spec_num_correct_drafts, list(r.spec_correct_drafts_histogram))
        for r in reqs
    ]


def restore_req_spec_counters(saved) -> None:
    for r, verify_ct, correct, hist in saved:
        r.spec_verify_ct = verify_ct
        r.spec_num_correct_drafts = correct
        r.spec_correct_drafts_histogram = hist
