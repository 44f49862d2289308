"""Decode-kernel attention for the OFF step's one-token verify and draft extend (triton backend).

Why: an OFF step verifies exactly one token per request (``TARGET_VERIFY`` at 1 token,
see ``off_state``). SGLang 0.5.12's triton backend serves every ``TARGET_VERIFY`` batch with
its *extend* kernel and a custom mask (``layers/attention/triton_backend.py:360-413`` and
``forward_extend``, 890-1010): one CTA per (request, query head) walks the whole prefix with
a query tile sized for many rows, of which one is used. Measured on an H200 with the 8B-shaped
synthetic pair (``bench/results/x2-2026-11-30``), that made an OFF step cost 41.7 ms at 128
running requests against 8.8 ms for a plain decode step of a server without speculation.

A one-token verify is, for attention, exactly a decode step: the query at position
``seq_len`` attends to the prefix ``req_to_token[r, :seq_len]`` plus its own key, and its own
key lives at ``req_to_token[r, seq_len]`` (both 0.5.12 workers write the verify slots into
``req_to_token`` before the forward: v1 ``EagleVerifyInput.prepare_for_verify``, v2
``assign_extend_cache_locs`` reads them from there). So the OFF target backend here is the
same ``TritonAttnBackend`` instance with its ``TARGET_VERIFY`` paths answered by the backend's
own DECODE paths over ``seq_lens + 1`` (split-KV decode kernel, the one a non-speculative
server uses). Nothing else of the verify changes: same CUDA-graph runner and shapes, same
hidden-state capture, same logits.

Proof at run time: on sampled OFF steps (``contract.sampled``: the first 64, then every 256th)
the backend checks that invariant, ``req_to_token[r, seq_len] == out_cache_loc`` for every
request, *before* the attention kernels run, and counts checks and mismatches (reported in
``spec_gate`` as ``off_attention_checks`` / ``off_attention_mismatches``; a mismatch is also
logged as an error). The synthetic test pair cannot show a wrong attention index (its
``o_proj`` is zero), so this check is what proves it on the GPU.

The OFF step's 1-token draft extend (one layer of the draft model) had the same problem on the
same extend kernel, and gets the same treatment: its query (the new token) attends to
``req_to_token[r, :seq_len]``, where the draft extend's ``seq_lens`` already include the new
token (v1: after ``verify`` added the accepted token; v2:
``prepare_for_extend_to_fill_draft_kvcache`` adds ``num_draft_tokens`` = 1), so the own-key
invariant there is ``req_to_token[r, seq_len - 1] == out_cache_loc``. (SGLang's triton
draft-extend CUDA-graph path passes those full lengths as the *prefix* and adds the extend
keys again, counting the new token's key twice; the decode kernel counts it once, as the
eager v2 path does. The draft's KV cache writes are the same either way.)

Only a plain ``TritonAttnBackend`` with one token per request (1 draft token / 0 draft steps),
no sliding window, no MLA and no deterministic mode is converted; anything else keeps the
extend kernel.
"""

from __future__ import annotations

import logging
import os
import types
from typing import Any, Optional

from server_patch import proof
from server_patch.contract import sampled

logger = logging.getLogger("server_patch.spec_gate")

DECODE_KERNEL = "triton-decode-kernel"
EXTEND_KERNEL = "extend-kernel"
#: "0" keeps SGLang's extend kernel for both OFF-step forwards, "target" converts only the target
#: verify (escape hatches; they cost OFF-step speed); unset or "1": both
ENV_SWITCH = "SPECCONSOLE_OFF_DECODE_KERNEL"

_SUBCLASSES: dict = {}


TARGET = "target"
DRAFT_EXTEND = "draft_extend"


def decode_kernel_reason(backend: Any, triton_cls: Optional[type] = None, role: str = TARGET) -> Optional[str]:
    """Why ``backend`` cannot serve its OFF-step attention with the decode kernel, or None if it can.

    Args:
        backend: an OFF-state attention backend: the target's (``role=TARGET``, built with 1 draft
            token) or the draft extend's (``role=DRAFT_EXTEND``, built with 0 draft steps).
        triton_cls: the ``TritonAttnBackend`` class (looked up in SGLang when omitted).
    """
    switch = os.environ.get(ENV_SWITCH, "1")
    if switch == "0" or (switch == "target" and role != TARGET):
        return f"disabled by {ENV_SWITCH}={switch}"
    if triton_cls is None:
        from sglang.srt.layers.attention.triton_backend import TritonAttnBackend as triton_cls
    if type(backend) is not triton_cls:
        return f"backend {type(backend).__name__} is not TritonAttnBackend"
    if role == TARGET and getattr(backend, "num_draft_tokens", None) != 1:
        return f"num_draft_tokens={getattr(backend, 'num_draft_tokens', None)} (needs 1)"
    if role == DRAFT_EXTEND and getattr(backend, "speculative_num_steps", None) != 0:
        return f"speculative_num_steps={getattr(backend, 'speculative_num_steps', None)} (needs 0)"
    if backend.sliding_window_size is not None and backend.sliding_window_size > 0:
        return "sliding-window attention"
    if backend.use_mla:
        return "MLA"
    if getattr(backend, "enable_deterministic", False):
        return "deterministic inference"
    return None


def decode_kernel_subclass(base: type, decode_mode: Any) -> type:
    """A subclass of ``base`` (SGLang's ``TritonAttnBackend``) whose OFF-step modes use the
    DECODE metadata and kernel; every other mode is unchanged.

    The instance's ``spec_gate_role`` picks the mode: ``TARGET`` converts ``TARGET_VERIFY``
    (keys ``seq_lens + 1``: verify ``seq_lens`` exclude the verify token), ``DRAFT_EXTEND``
    converts ``DRAFT_EXTEND``/``DRAFT_EXTEND_V2`` with one token per request (keys ``seq_lens``:
    they include the new token).

    Args:
        base: the backend class.
        decode_mode: ``ForwardMode.DECODE``.
    Shapes: ``seq_lens`` (bs,), ``q/k/v`` one row per request, ``out_cache_loc`` (bs,).
    """
    key = (base, decode_mode)
    if key in _SUBCLASSES:
        return _SUBCLASSES[key]

    class DecodeKernelOffBackend(base):
        spec_gate_role = TARGET
        spec_gate_checks = 0
        spec_gate_mismatches = 0
        spec_gate_calls = 0

        def _spec_gate_mode(self, forward_mode) -> bool:
            if self.spec_gate_role == TARGET:
                return forward_mode.is_target_verify()
            return forward_mode.is_draft_extend(include_v2=True)

        def _spec_gate_extra_keys(self) -> int:
            return 1 if self.spec_gate_role == TARGET else 0

        def _spec_gate_check(self, forward_batch: Any) -> None:
            """Sampled proof that the new token's own key is the last key the decode kernel reads,
            ``req_to_token[r, keys - 1] == out_cache_loc`` (syncs when it runs)."""
            self.spec_gate_calls += 1
            n = self.spec_gate_calls
            if forward_batch is None or not sampled(n):
                return
            bs = forward_batch.batch_size
            rows = forward_batch.req_pool_indices[:bs]
            cols = (forward_batch.seq_lens[:bs] + self._spec_gate_extra_keys() - 1).to(rows.dtype)
            own = self.req_to_token[rows, cols].to(forward_batch.out_cache_loc.dtype)
            ok = bool((own == forward_batch.out_cache_loc[:bs]).all().item())
            self.spec_gate_checks += 1
            proof.note_check()
            if not ok:
                self.spec_gate_mismatches += 1
                logger.error(
                    "spec_gate: OFF %s attention index check failed (the new token's key is not the "
                    "last key read) at OFF metadata call %d", self.spec_gate_role, n)

        def _one_token_per_request(self, forward_batch) -> bool:
            return forward_batch.out_cache_loc.shape[0] == forward_batch.batch_size

        def init_forward_metadata(self, forward_batch):
            if not (self._spec_gate_mode(forward_batch.forward_mode) and self._one_token_per_request(forward_batch)):
                return super().init_forward_metadata(forward_batch)
            self._spec_gate_check(forward_batch)
            seq_lens = forward_batch.seq_lens + self._spec_gate_extra_keys()
            as_decode = types.SimpleNamespace(
                batch_size=forward_batch.batch_size,
                forward_mode=decode_mode,
                spec_info=None,
                seq_lens=seq_lens,
                # the exact sum sizes kv_indices (a smaller one would let the index kernel write
                # past it); one sync, eager OFF steps only (batches above the CUDA-graph sizes)
                seq_lens_sum=int(seq_lens.sum().item()),
                req_pool_indices=forward_batch.req_pool_indices,
            )
            return super().init_forward_metadata(as_decode)

        def init_forward_metadata_capture_cuda_graph(self, bs, num_tokens, req_pool_indices, seq_lens,
                                                     encoder_lens, forward_mode, spec_info):
            if not (self._spec_gate_mode(forward_mode) and num_tokens == bs):
                return super().init_forward_metadata_capture_cuda_graph(
                    bs, num_tokens, req_pool_indices, seq_lens, encoder_lens, forward_mode, spec_info)
            return super().init_forward_metadata_capture_cuda_graph(
                bs, num_tokens, req_pool_indices, seq_lens + self._spec_gate_extra_keys(), encoder_lens,
                decode_mode, None)

        def init_forward_metadata_replay_cuda_graph(self, bs, req_pool_indices, seq_lens, seq_lens_sum,
                                                    encoder_lens, forward_mode, spec_info, seq_lens_cpu):
            if not self._spec_gate_mode(forward_mode):
                return super().init_forward_metadata_replay_cuda_graph(
                    bs, req_pool_indices, seq_lens, seq_lens_sum, encoder_lens, forward_mode, spec_info,
                    seq_lens_cpu)
            # The graph runners hand the live batch over this attribute (target: 0.5.12
            # model_executor/cuda_graph_runner.py:1296; draft extend: OffStepRunner sets it);
            # padded rows are not checked.
            self._spec_gate_check(getattr(self, "_replay_forward_batch", None))
            extra = self._spec_gate_extra_keys()
            return super().init_forward_metadata_replay_cuda_graph(
                bs, req_pool_indices, seq_lens + extra, seq_lens_sum + extra * bs, encoder_lens, decode_mode,
                None, None if seq_lens_cpu is None else seq_lens_cpu + extra)

        def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True, **kwargs):
            if self._spec_gate_mode(forward_batch.forward_mode) and q.shape[0] == forward_batch.batch_size:
                # writes k/v at out_cache_loc first, then attends over the keys set up above
                return self.forward_decode(q, k, v, layer, forward_batch, save_kv_cache=save_kv_cache, **kwargs)
            return super().forward_extend(q, k, v, layer, forward_batch, save_kv_cache=save_kv_cache, **kwargs)

    DecodeKernelOffBackend.__name__ = f"DecodeKernelOff{base.__name__}"
    DecodeKernelOffBackend.__qualname__ = DecodeKernelOffBackend.__name__
    _SUBCLASSES[key] = DecodeKernelOffBackend
    return DecodeKernelOffBackend


def use_decode_kernel(backend: Any, triton_cls: Optional[type] = None, decode_mode: Any = None,
                      role: str = TARGET) -> str:
    """Make an OFF-state backend (``role``: ``TARGET`` or ``DRAFT_EXTEND``) serve its one-token
    attention with the decode kernel, in place.

    Must run before the OFF CUDA graphs are captured (the graph records the kernels).
    Returns ``DECODE_KERNEL`` when converted, else ``EXTEND_KERNEL`` (the backend unchanged;
    the reason is logged).
    """
    if triton_cls is None or decode_mode is None:
        from sglang.srt.layers.attention.triton_backend import TritonAttnBackend
        from sglang.srt.model_executor.forward_batch_info import ForwardMode

        triton_cls = triton_cls or TritonAttnBackend
        decode_mode = decode_mode if decode_mode is not None else ForwardMode.DECODE
    reason = decode_kernel_reason(backend, triton_cls, role)
    if reason is not None:
        logger.info("spec_gate: OFF step %s attention keeps the extend kernel (%s)", role, reason)
        return EXTEND_KERNEL
    backend.__class__ = decode_kernel_subclass(type(backend), decode_mode)
    backend.spec_gate_role = role
    return DECODE_KERNEL
