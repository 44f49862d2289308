"""A lean OFF decode step for SGLang 0.5.12's ``EAGLEWorker`` (v1, no overlap scheduler), opt-in.

Why: on v1 an OFF step runs SGLang's whole speculative decode path for a 1-node tree
(``EAGLEWorker.forward_batch_generation``: ``verify`` then ``forward_draft_extend_after_decode``,
``speculative/eagle_worker.py`` and ``eagle_info.py`` in 0.5.12). That path waits for the GPU three
times in the middle of the step (``accept_index.tolist()``, a boolean-mask index, ``.cpu()``), then
builds the draft extend's ``ForwardBatch`` and runs ``prepare_extend_after_decode`` while the GPU
idles, and a v1 server has no overlap scheduler to hide any of it: on the H200 an OFF step cost
12.49 ms against a plain decode step's 11.01 at 64 requests, +1.3 ms of it GPU idle
(``bench/results/h200-2026-12-04/README.md``).

What this step does instead, for a batch where nothing else is asked of it (:func:`batch_reason`):

1. the bookkeeping of SGLang's ``_draft_preprocess_decode`` (as ``OffStepRunner._off_draft_v1``),
   with ``seq_lens_sum`` from ``seq_lens_cpu`` (no sync);
2. SGLang's own verify preparation and target forward (``prepare_for_verify``,
   ``get_model_worker_batch``, ``forward_batch_generation(..., is_verify=True)``: the OFF target
   graph);
3. the token drawn by the target runner's own ``Sampler`` as a server without speculation draws
   (``ModelRunner._preprocess_logits`` then ``sampler``: penalties, logit bias, custom processors,
   min_p, seeds; argmax when all greedy, as SGLang's greedy verify); at TP > 1 a non-greedy draw is
   broadcast from rank 0 as SGLang's verify broadcasts its own;
4. the draft's K/V for the new token on the KV-only draft-extend graph, launched right away with the
   inputs SGLang's draft extend would build (token = the draw, position = the old ``seq_lens``,
   cache slot = the verify's, hidden state = the target's at that position), through the
   ``KvOnlyRunner`` wrapper, so its sampled proof against the full draft extend still runs; or,
   opt-in, queued with those inputs (``deferred_draft_kv``: one forward for many steps later);
5. one wait for the GPU (``tolist`` of the tokens), then the per-request loop of SGLang's
   ``EagleVerifyInput.verify`` for a 1-token accept (``output_ids``, reasoning tokens,
   ``check_finished``, ``kv_committed_len``), with nothing to free: a 1-node tree's one slot is
   always accepted.

The next ``spec_info`` carries the draw as its bonus token and the previous step's top-k and hidden
state, stale, as after every KV-only OFF step (the resume step refreshes them before any ON step).
Per-request speculative counters are not touched (SGLang's verify would add a verify to them).

Proof at run time (new state: the draft extend's inputs are assembled here, not by SGLang): on the
steps ``contract.sampled`` picks, the draft's positions must be what SGLang's own kernel for
``prepare_extend_after_decode`` computes from the new ``seq_lens`` (a ``seq_lens`` advanced by other
than one shows there), the
request-to-token map at each request's position must hold the slot the draft's K/V went to (what the
request's later attention reads), ``seq_lens`` and its CPU copy (both advanced here, not by SGLang)
must agree, and an all-greedy batch's tokens must be the argmax of the target's logits (after
penalties and logit bias; not checked where the Sampler applies custom logit processors).
A failure on any TP rank turns lean steps off for the server's life (logged as an error).

Falls back to the SGLang path (``OffStepRunner.run_off_step`` as before) for: logprobs, grammar,
hidden states asked for, an idle batch, no KV-only graph for the batch size or its proof failed;
and for the whole server: topk > 1, page size > 1, DP attention, pipeline parallelism, a
hybrid/Mamba target, SGLang's adaptive speculation, a draft-extend attention backend other than
triton (the only one this was written against), no full OFF draft-extend graph to prove against.
A request that finishes on the step drops out of the next draft input, as SGLang's verify drops it
(the scheduler's ``filter_batch(v1_spec_info_filtered=True)`` expects exactly the unfinished rows).
"""

from __future__ import annotations

import collections
import types
from typing import Any, Callable, Dict, Optional

from server_patch import host_copy, options
from server_patch.proof import SampledProof

#: unset or "1": v1 OFF steps take the lean path where they can, and v1 prefills while OFF the
#: KV-only draft prefill (``draft_kv_only``), as measured together; "0": SGLang's OFF path. Oracle-exact
#: with exact recovery on the KV-sensitive pair (100 checks over 9,391 lean steps, 0 mismatches,
#: ``bench/results/h200-2026-12-04d/``) once SGLang's triton draft-extend graph was mended
#: (``triton_draft_extend``); 0.94-0.97x of a v1 server without speculation (``h200-2026-12-04b``)
ENV_SWITCH = "SPECCONSOLE_OFF_LEAN_V1"


def enabled_by_env() -> bool:
    """False when ``SPECCONSOLE_OFF_LEAN_V1=0`` keeps SGLang's OFF path on v1 (lean steps and the v1
    KV-only prefill are the default)."""
    return options.switch(ENV_SWITCH, True)


def draft_preprocess(batch: Any, seq_lens_sum: int) -> None:
    """The bookkeeping of ``EAGLEWorker._draft_preprocess_decode`` (``eagle_worker.py`` in 0.5.12)
    for an OFF step, without allocating draft slots: SWA eviction, each request's decode index, the
    penalizers' output-token count (the bonus token), ``seq_lens_sum`` (given: SGLang's own path
    sums the GPU ``seq_lens``, which waits for the GPU; the lean step sums ``seq_lens_cpu``)."""
    import torch

    batch.maybe_evict_swa()
    for req in batch.reqs:
        req.decode_batch_idx += 1
    if batch.sampling_info.penalizer_orchestrator.is_required:
        batch.sampling_info.penalizer_orchestrator.cumulate_output_tokens(batch.spec_info.bonus_tokens.to(torch.int64))
    batch.seq_lens_sum = seq_lens_sum
    batch.return_hidden_states = False


def server_reason(worker: Any) -> Optional[str]:
    """Why a v1 worker (``EAGLEWorker``) can never take a lean OFF step, or None if it can."""
    if worker.topk != 1:
        return "topk > 1"
    if getattr(worker, "page_size", 1) != 1:
        return "page size > 1"
    sa = worker.server_args
    if getattr(sa, "enable_dp_attention", False):
        return "DP attention"
    if getattr(sa, "pp_size", 1) != 1:
        return "pipeline parallelism"
    extra = getattr(sa, "enable_mamba_extra_buffer", None)
    if callable(extra) and extra():
        return "Mamba extra buffer"
    target = worker.target_worker.model_runner
    if any(getattr(target, n, None) is not None for n in ("hybrid_gdn_config", "mamba2_config", "hybrid_lightning_config")):
        return "hybrid / Mamba target model"
    if getattr(worker, "adaptive_controller", None) is not None:
        return "SGLang's adaptive speculation"
    return None


def backend_reason(draft_extend_backend: Any) -> Optional[str]:
    """Why the OFF draft extend's attention backend rules lean steps out, or None: proven with the
    triton backend only (its draft-extend replay reads nothing of ``spec_info``; fa3's reads
    ``num_accept_tokens_cpu``, flashinfer's calls ``generate_attn_arg_prefill``: untested here)."""
    names = [c.__name__ for c in type(draft_extend_backend).__mro__]
    if "TritonAttnBackend" not in names:
        return f"draft-extend attention {type(draft_extend_backend).__name__} (lean steps proven on triton only)"
    return None


def batch_reason(batch: Any) -> Optional[str]:
    """Why this decode batch takes SGLang's OFF path instead of the lean one, or None."""
    if not batch.forward_mode.is_decode():
        return "not a decode batch"
    if batch.return_logprob:
        return "logprobs"
    if batch.has_grammar:
        return "grammar"
    if batch.return_hidden_states or any(getattr(r, "return_hidden_states", False) for r in batch.reqs):
        return "hidden states"
    spec = batch.spec_info
    if spec is None or getattr(spec, "bonus_tokens", None) is None or getattr(spec, "topk_p", None) is None:
        return "no draft input"
    return None


def _sglang() -> types.SimpleNamespace:
    """The SGLang names a lean step uses (imported on the GPU machine only; tests replace this)."""
    from sglang.srt.distributed import get_tp_group
    from sglang.srt.managers.scheduler import GenerationBatchResult
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardMode
    from sglang.srt.speculative.eagle_info import EagleDraftExtendInput, EagleDraftInput
    from sglang.srt.speculative.spec_utils import create_extend_after_decode_spec_info
    from sglang.srt.utils import next_power_of_2

    def extend_after_decode(accept_tokens, seq_lens, accept_lens):
        """What ``EagleDraftExtendInput.prepare_extend_after_decode`` computes: ``(positions, bonus_tokens)``."""
        import torch

        positions = torch.empty_like(accept_tokens, dtype=torch.long)
        bonus = torch.empty_like(accept_lens, dtype=torch.int32)
        create_extend_after_decode_spec_info[(len(seq_lens),)](
            accept_tokens, seq_lens, accept_lens, positions, bonus, next_power_of_2(max(1, len(seq_lens))))
        return positions, bonus

    return types.SimpleNamespace(get_tp_group=get_tp_group, GenerationBatchResult=GenerationBatchResult,
                                 CaptureHiddenMode=CaptureHiddenMode, ForwardMode=ForwardMode,
                                 EagleDraftInput=EagleDraftInput, EagleDraftExtendInput=EagleDraftExtendInput,
                                 extend_after_decode=extend_after_decode)


class LeanOffStepV1(SampledProof):
    """Runs lean v1 OFF steps (module docstring) and keeps their counters: ``steps``, ``checks``,
    ``mismatches`` (this rank's), ``fallbacks`` (per reason), ``ok`` (False after a failed proof on
    any rank).

    Args:
        worker: the live ``EAGLEWorker``.
        draft_extend: the KV-only draft-extend graph runner (its ``replay`` wrapped by
            ``draft_kv_only.KvOnlyRunner``), as the OFF state's ``cuda_graph_runner_for_draft_extend``.
        graph_takes: ``graph_takes(bs)``: whether ``draft_extend`` replays a batch of ``bs``.
        context: a fresh context manager per call for the draft's TP/MoE contexts (SGLang enters
            them around its draft extend).
        sampled, any_rank: as ``OffStepRunner`` (``contract.sampled``; all-reduce of a flag).
    """

    def __init__(self, worker: Any, draft_extend: Any, graph_takes: Callable[[int], bool],
                 context: Callable[[], Any], sampled: Callable[[int], bool],
                 any_rank: Callable[[bool], bool] = bool):
        super().__init__(any_rank)
        self.worker = worker
        self.draft_extend = draft_extend
        self.graph_takes = graph_takes
        self.context = context
        self.sampled = sampled
        self.steps = 0
        self.fallbacks: Dict[str, int] = collections.Counter()
        self._zeros = self._ones = None  # (max bs,) int32, sliced per step
        #: ``deferred_draft_kv.DeferredDraftKv`` where the step's draft K/V wait (opt-in), else None
        self.deferred: Optional[Any] = None

    def reason(self, batch: Any) -> Optional[str]:
        """Why ``batch`` cannot take the lean step now (counted in ``fallbacks``), or None."""
        why = "proof failed" if not self.ok else batch_reason(batch)
        if why is None and not self.graph_takes(batch.batch_size()):
            why = "batch size beyond the KV-only graph"
        if why is not None:
            self.fallbacks[why] += 1
        return why

    def _accepts(self, bs: int, device: Any):
        """``(num_correct_drafts, num_accept_tokens)`` of a 1-token accept: zeros and ones, (bs,) int32."""
        import torch

        if self._zeros is None or self._zeros.numel() < bs or self._zeros.device != device:
            n = max(bs, 256)
            self._zeros = torch.zeros(n, dtype=torch.int32, device=device)
            self._ones = torch.ones(n, dtype=torch.int32, device=device)
        return self._zeros[:bs], self._ones[:bs]

    def run(self, batch: Any, trivial_verify_input: Callable[..., Any]):
        """One lean OFF step of the decode ``batch`` (the OFF runtime state with the KV-only graph is
        applied by the caller); returns SGLang's ``GenerationBatchResult``. ``trivial_verify_input``:
        ``off_state._trivial_verify_input``. Shapes: tokens (bs,) int64, hidden (bs, 3 * hidden)."""
        import torch

        sgl = _sglang()
        w = self.worker
        old = batch.spec_info
        bs = batch.batch_size()
        # 1. _draft_preprocess_decode's bookkeeping, without its seq_lens sync
        draft_preprocess(batch, int(batch.seq_lens_cpu.sum()))
        sampling_info = batch.sampling_info
        verify = trivial_verify_input(old.bonus_tokens, batch.seq_lens, batch.seq_lens_sum, w.topk, None,
                                      batch.seq_lens_cpu)
        batch.spec_info = verify
        # 2. EAGLEWorker.verify up to the target forward
        verify.prepare_for_verify(batch, w.page_size)
        verify.num_tokens_per_req = w.speculative_num_steps + 1
        batch.forward_mode = sgl.ForwardMode.TARGET_VERIFY
        model_worker_batch = batch.get_model_worker_batch(seq_lens_cpu_cache=verify.seq_lens_cpu)
        target = w.target_worker.forward_batch_generation(model_worker_batch, is_verify=True)
        logits_output = target.logits_output
        # the verify's positions alias seq_lens (int64 .to is the identity), which grow below
        positions = batch.seq_lens.clone()
        # 3. the draw of a server without speculation
        runner = w.target_worker.model_runner
        check = self.sampled(self.steps + 1)
        greedy = bool(sampling_info.is_all_greedy)
        runner._preprocess_logits(logits_output, sampling_info)
        # the Sampler applies custom logit processors (and NaN replacement) itself, after this
        plain = not (getattr(sampling_info, "has_custom_logit_processor", False)
                     or getattr(runner.sampler, "use_nan_detection", False))
        argmax = torch.argmax(logits_output.next_token_logits, dim=-1) if check and greedy and plain else None
        tokens = runner.sampler(logits_output, sampling_info, False, None, None, positions)
        if not greedy:
            group = sgl.get_tp_group()
            if group.world_size > 1:
                group.broadcast(tokens, src=0)
        # 4. the draft's K/V for the new token (inputs as prepare_extend_after_decode builds them)
        batch.seq_lens.add_(1)
        batch.seq_lens_cpu.add_(1)
        correct, accepted = self._accepts(bs, tokens.device)
        draft_runner = w.draft_model_runner
        forward_batch = types.SimpleNamespace(
            batch_size=bs, input_ids=tokens, seq_lens=batch.seq_lens, seq_lens_cpu=batch.seq_lens_cpu,
            seq_lens_sum=batch.seq_lens_sum + bs, extend_seq_lens=None, extend_seq_lens_cpu=None,
            out_cache_loc=batch.out_cache_loc, positions=positions,
            req_pool_indices=batch.req_pool_indices, token_to_kv_pool=draft_runner.token_to_kv_pool,
            global_num_tokens_cpu=None,
            spec_info=sgl.EagleDraftExtendInput(
                hidden_states=logits_output.hidden_states, num_correct_drafts=correct, num_accept_tokens=accepted,
                num_accept_tokens_cpu=[1] * bs, input_ids=tokens, seq_lens=batch.seq_lens,
                seq_lens_cpu=batch.seq_lens_cpu, req_pool_indices=batch.req_pool_indices, positions=positions,
                capture_hidden_mode=sgl.CaptureHiddenMode.LAST))
        self._store_draft_kv(forward_batch, tokens, positions, batch.out_cache_loc, logits_output.hidden_states)
        # 5. one wait, then verify()'s per-request loop for a 1-token accept
        tokens_cpu = tokens.tolist()
        think_end_id = batch.model_config.think_end_id
        for req, token in zip(batch.reqs, tokens_cpu):
            req.output_ids.append(token)
            if req.require_reasoning and think_end_id is not None:
                req.update_reasoning_tokens(token, think_end_id)
            req.check_finished()
            req.kv_committed_len += 1
            req.kv_allocated_len = req.kv_committed_len
        batch.forward_mode = sgl.ForwardMode.DECODE
        self._next_draft_input(batch, old, tokens, sgl)
        self.steps += 1
        if check:
            self._prove(batch, positions, tokens, argmax, sgl)
        return sgl.GenerationBatchResult(logits_output=logits_output, next_token_ids=tokens, num_correct_drafts=0,
                                         num_correct_drafts_per_req_cpu=[0] * bs,
                                         can_run_cuda_graph=target.can_run_cuda_graph)

    def _store_draft_kv(self, forward_batch: Any, tokens: Any, positions: Any, slots: Any, hidden: Any) -> None:
        """The step's draft K/V: queued in :attr:`deferred` where it takes them (on its proof steps
        the graph replays too and its K/V are the reference), else the KV-only graph's replay now,
        after the pending rows (a replayed slot may be one a pending row still targets). Shapes:
        ``tokens`` / ``positions`` / ``slots`` (bs,), ``hidden`` (bs, D)."""
        deferred = self.deferred
        with self.context():  # the draft's TP context also around a flush the deferral may run
            if deferred is None:
                self.draft_extend.replay(forward_batch)
                return
            deferred.defer(tokens.shape[0], hidden, lambda: (tokens, positions, slots, hidden),
                           immediate=lambda: self.draft_extend.replay(forward_batch),
                           instead=lambda rows: None, eligible=hidden is not None)

    def _next_draft_input(self, batch: Any, old: Any, tokens: Any, sgl: Any) -> None:
        """``batch.spec_info`` for the next step: the draw as bonus token, the rest stale. Only the
        unfinished requests' rows, in order, as SGLang's verify leaves it (the scheduler's
        ``filter_batch(v1_spec_info_filtered=True)`` counts on that); none left: SGLang's idle input."""
        import torch

        keep = [i for i, req in enumerate(batch.reqs) if not req.finished()]
        if not keep:
            self.worker._draft_preprocess_idle(batch)
            return
        bonus, hidden, topk_p, topk_index = tokens.to(torch.int32), old.hidden_states, old.topk_p, old.topk_index
        if len(keep) < len(batch.reqs):
            rows = host_copy.to_device(keep, tokens.device)
            bonus, topk_p, topk_index = bonus[rows], topk_p[rows], topk_index[rows]
            hidden = hidden[rows] if hidden is not None else None
        batch.spec_info = sgl.EagleDraftInput(bonus_tokens=bonus, hidden_states=hidden, topk_p=topk_p,
                                              topk_index=topk_index, capture_hidden_mode=sgl.CaptureHiddenMode.LAST)

    def _prove(self, batch: Any, positions: Any, tokens: Any, argmax: Any, sgl: Any) -> None:
        """The sampled check of one lean step (module docstring); waits for the GPU."""
        import torch

        slots = batch.req_to_token_pool.req_to_token[batch.req_pool_indices, positions]
        bad = []
        if not torch.equal(slots.to(torch.int64), batch.out_cache_loc.to(torch.int64)):
            bad.append("the draft K/V's cache slots are not the request's slots at its position")
        if not torch.equal(batch.seq_lens.cpu(), batch.seq_lens_cpu.to(batch.seq_lens.dtype)):
            bad.append("seq_lens on the GPU and its CPU copy differ")
        ones = torch.ones_like(batch.seq_lens, dtype=torch.int32)
        # its bonus token is the step's token by construction (one accepted token): only positions tell
        want_positions, _ = sgl.extend_after_decode(tokens, batch.seq_lens, ones)
        if not torch.equal(want_positions, positions.to(want_positions.dtype)):
            bad.append("the draft's positions are not what SGLang's prepare_extend_after_decode computes")
        if argmax is not None and not torch.equal(tokens.to(torch.int64), argmax.to(torch.int64)):
            bad.append("a greedy token is not the argmax of the target's logits")
        self.verdict(f"lean v1 OFF step {self.steps}: " + "; ".join(bad) if bad else None,
                     "OFF steps take SGLang's path from now on")
