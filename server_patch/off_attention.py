"""Decode-kernel attention for the OFF step's one-token target verify (triton backend).

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

Proof at run time: on sampled OFF steps (``CHECK_FIRST`` steps, then every ``CHECK_EVERY``th)
the backend checks that invariant, ``req_to_token[r, seq_len] == out_cache_loc`` for every
request, *before* the attention kernels run, and counts checks and mismatches (reported in
``spec_gate`` as ``off_attention_checks`` / ``off_attention_mismatches``; a mismatch is also
logged as an error). The synthetic test pair cannot show a wrong attention index (its
``o_proj`` is zero), so this check is what proves it on the GPU.

Only a plain ``TritonAttnBackend`` with 1 draft token, no sliding window, no MLA, no
encoder-decoder and no deterministic mode is converted; anything else keeps the verify kernel.
"""

from __future__ import annotations

import logging
import types
from typing import Any, Optional

logger = logging.getLogger("server_patch.spec_gate")

DECODE_KERNEL = "triton-decode-kernel"
VERIFY_KERNEL = "verify-kernel"
CHECK_FIRST = 64
CHECK_EVERY = 256

_SUBCLASSES: dict = {}


def decode_kernel_reason(backend: Any, triton_cls: Optional[type] = None) -> Optional[str]:
    """Why ``backend`` cannot serve a 1-token verify with the decode kernel, or None if it can.

    Args:
        backend: an OFF-state target attention backend (built with 1 draft token).
        triton_cls: the ``TritonAttnBackend`` class (looked up in SGLang when omitted).
    """
    if triton_cls is None:
        from sglang.srt.layers.attention.triton_backend import TritonAttnBackend as triton_cls
    if type(backend) is not triton_cls:
        return f"backend {type(backend).__name__} is not TritonAttnBackend"
    if getattr(backend, "num_draft_tokens", None) != 1:
        return f"num_draft_tokens={getattr(backend, 'num_draft_tokens', None)} (needs 1)"
    if backend.sliding_window_size is not None and backend.sliding_window_size > 0:
        return "sliding-window attention"
    if backend.use_mla:
        return "MLA"
    if getattr(backend, "enable_deterministic", False):
        return "deterministic inference"
    return None


def decode_kernel_subclass(base: type, decode_mode: Any) -> type:
    """A subclass of ``base`` (SGLang's ``TritonAttnBackend``) whose ``TARGET_VERIFY`` metadata
    and attention are the DECODE ones over ``seq_lens + 1``; every other mode is unchanged.

    Args:
        base: the backend class.
        decode_mode: ``ForwardMode.DECODE``.
    Shapes: in ``TARGET_VERIFY`` at 1 token, ``seq_lens`` (bs,) are prefix lengths (the verify
    token excluded), ``q/k/v`` have one row per request, ``out_cache_loc`` (bs,).
    """
    key = (base, decode_mode)
    if key in _SUBCLASSES:
        return _SUBCLASSES[key]

    class DecodeKernelVerifyBackend(base):
        spec_gate_checks = 0
        spec_gate_mismatches = 0
        spec_gate_calls = 0

        def _spec_gate_check(self, forward_batch: Any) -> None:
            """Sampled proof of ``req_to_token[r, seq_len] == out_cache_loc`` (syncs when it runs)."""
            self.spec_gate_calls += 1
            n = self.spec_gate_calls
            if forward_batch is None or (n > CHECK_FIRST and n % CHECK_EVERY):
                return
            bs = forward_batch.batch_size
            rows = forward_batch.req_pool_indices[:bs]
            cols = forward_batch.seq_lens[:bs].to(rows.dtype)
            own = self.req_to_token[rows, cols].to(forward_batch.out_cache_loc.dtype)
            ok = bool((own == forward_batch.out_cache_loc[:bs]).all().item())
            self.spec_gate_checks += 1
            if not ok:
                self.spec_gate_mismatches += 1
                logger.error(
                    "spec_gate: OFF attention index check failed (req_to_token[r, seq_len] != "
                    "out_cache_loc) at OFF metadata call %d; the decode-kernel OFF step read wrong keys", n)

        def init_forward_metadata(self, forward_batch):
            if not forward_batch.forward_mode.is_target_verify():
                return super().init_forward_metadata(forward_batch)
            self._spec_gate_check(forward_batch)
            seq_lens = forward_batch.seq_lens + 1
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
            if not forward_mode.is_target_verify():
                return super().init_forward_metadata_capture_cuda_graph(
                    bs, num_tokens, req_pool_indices, seq_lens, encoder_lens, forward_mode, spec_info)
            return super().init_forward_metadata_capture_cuda_graph(
                bs, num_tokens, req_pool_indices, seq_lens + 1, encoder_lens, decode_mode, None)

        def init_forward_metadata_replay_cuda_graph(self, bs, req_pool_indices, seq_lens, seq_lens_sum,
                                                    encoder_lens, forward_mode, spec_info, seq_lens_cpu):
            if not forward_mode.is_target_verify():
                return super().init_forward_metadata_replay_cuda_graph(
                    bs, req_pool_indices, seq_lens, seq_lens_sum, encoder_lens, forward_mode, spec_info,
                    seq_lens_cpu)
            # CudaGraphRunner.replay_prepare hands the live batch over this attribute (0.5.12
            # model_executor/cuda_graph_runner.py:1296); padded rows are not checked.
            self._spec_gate_check(getattr(self, "_replay_forward_batch", None))
            return super().init_forward_metadata_replay_cuda_graph(
                bs, req_pool_indices, seq_lens + 1, seq_lens_sum + bs, encoder_lens, decode_mode, None,
                None if seq_lens_cpu is None else seq_lens_cpu + 1)

        def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True, **kwargs):
            if forward_batch.forward_mode.is_target_verify():
                # writes k/v at out_cache_loc first, then attends over seq_lens + 1 keys
                return self.forward_decode(q, k, v, layer, forward_batch, save_kv_cache=save_kv_cache, **kwargs)
            return super().forward_extend(q, k, v, layer, forward_batch, save_kv_cache=save_kv_cache, **kwargs)

    DecodeKernelVerifyBackend.__name__ = f"DecodeKernelVerify{base.__name__}"
    DecodeKernelVerifyBackend.__qualname__ = DecodeKernelVerifyBackend.__name__
    _SUBCLASSES[key] = DecodeKernelVerifyBackend
    return DecodeKernelVerifyBackend


def use_decode_kernel(backend: Any, triton_cls: Optional[type] = None, decode_mode: Any = None) -> str:
    """Make an OFF-state target backend serve its 1-token verify with the decode kernel, in place.

    Must run before the OFF CUDA graphs are captured (the graph records the kernels).
    Returns ``DECODE_KERNEL`` when converted, else ``VERIFY_KERNEL`` (the backend unchanged;
    the reason is logged).
    """
    if triton_cls is None or decode_mode is None:
        from sglang.srt.layers.attention.triton_backend import TritonAttnBackend
        from sglang.srt.model_executor.forward_batch_info import ForwardMode

        triton_cls = triton_cls or TritonAttnBackend
        decode_mode = decode_mode if decode_mode is not None else ForwardMode.DECODE
    reason = decode_kernel_reason(backend, triton_cls)
    if reason is not None:
        logger.info("spec_gate: OFF step target attention keeps the verify kernel (%s)", reason)
        return VERIFY_KERNEL
    backend.__class__ = decode_kernel_subclass(type(backend), decode_mode)
    return DECODE_KERNEL
