"""The OFF verify's attention metadata on SGLang 0.5.12's FlashAttention backend (fa3), fused; opt-in.

Why: an OFF step's target verify is a 1-token ``TARGET_VERIFY`` on its own CUDA graph. On fa3 the
graph's replay metadata for topk 1 (``FlashAttentionBackend.init_forward_metadata_replay_cuda_graph``,
``elif forward_mode.is_target_verify(): if self.topk <= 1:`` in 0.5.12) runs five small kernels
(``seq_lens + draft tokens``, a cumsum, a 2-D gather of the request-to-token map, a floor-divide,
copies) and a host sync for ``max``, where the decode branch calls one fused Triton kernel,
``normal_decode_set_metadata(..., seq_len_delta, ...)``, for the same three tensors. On the H200
the OFF decode step on fa3 cost 20.3 ms of scheduler CPU per 1,000 output tokens against a plain
decode step's 6.8, the largest single part SGLang's ``prepare_for_v2_verify`` (6.6), of which the
FlashAttention replay metadata was +3.9 (``bench/results/h200-2026-12-04b/README.md``).

What changes, only on the OFF state's target backend (ON steps never see it) and only for a
``TARGET_VERIFY`` replay with topk 1, one draft token, no encoder and no sliding-window KV pool:
``cache_seqlens_int32 = seq_lens + 1``, ``cu_seqlens_k[1:] = cumsum``, ``page_table[:, :pages] =
req_to_token[pool, strided[:pages]] // page_size`` come from ``normal_decode_set_metadata`` with
``seq_len_delta = 1``; ``max_seq_len_k`` as SGLang computes it. Everything else goes to SGLang.

Proof at run time: on the replays ``contract.sampled`` picks, SGLang's own method runs right after
into the same buffers and the three tensors must be equal bit for bit to what the fused kernel wrote;
a difference on any TP rank turns the fused path off for the server's life (logged as an error).
``SPECCONSOLE_OFF_FA3_FUSED_VERIFY_METADATA=1`` asks for it (opt-in until measured on the GPU).
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Optional

from server_patch import options
from server_patch.proof import SampledProof

logger = logging.getLogger("server_patch.spec_gate")

ENV_SWITCH = "SPECCONSOLE_OFF_FA3_FUSED_VERIFY_METADATA"
FUSED = "fused"


def unsupported_reason(backend: Any) -> Optional[str]:
    """Why ``backend`` (the OFF state's target attention backend) cannot take the fused metadata."""
    if type(backend).__name__ != "FlashAttentionBackend":
        return f"target attention {type(backend).__name__}, not FlashAttentionBackend"
    if getattr(backend, "topk", None) != 1:
        return "topk > 1"
    if getattr(backend, "speculative_num_draft_tokens", None) != 1:
        return "the OFF target backend does not verify exactly one token"
    if getattr(backend, "use_sliding_window_kv_pool", False) or getattr(backend, "has_swa", False):
        return "sliding-window attention"
    page = getattr(backend, "page_size", 1)
    if not isinstance(page, int) or page < 1 or page & (page - 1):
        return "page size not a power of two"
    return None


def _fused_kernel() -> Callable:
    from sglang.srt.layers.attention.flashattention_backend import normal_decode_set_metadata

    return normal_decode_set_metadata


class FusedVerifyMetadata(SampledProof):
    """Replaces ``init_forward_metadata_replay_cuda_graph`` on one backend instance (module docstring).
    Counters: ``replays`` (fused), ``checks``, ``mismatches`` (this rank's); ``ok`` False after a
    failed proof on any TP rank. ``kernel``: SGLang's ``normal_decode_set_metadata`` unless given."""

    def __init__(self, backend: Any, sampled: Callable[[int], bool], any_rank: Callable[[bool], bool] = bool,
                 kernel: Optional[Callable] = None):
        super().__init__(any_rank)
        self.backend = backend
        self.sampled = sampled
        self.kernel = kernel or _fused_kernel()
        self.replays = 0
        original = backend.init_forward_metadata_replay_cuda_graph  # the class's, bound
        runner = self

        def init_forward_metadata_replay_cuda_graph(bs, req_pool_indices, seq_lens, seq_lens_sum, encoder_lens,
                                                    forward_mode, spec_info, seq_lens_cpu, out_cache_loc=None):
            args = (bs, req_pool_indices, seq_lens, seq_lens_sum, encoder_lens, forward_mode, spec_info,
                    seq_lens_cpu, out_cache_loc)
            if not (runner.ok and encoder_lens is None and forward_mode.is_target_verify()):
                return original(*args)
            runner.replays += 1
            metadata, pages = runner._fused(bs, req_pool_indices, seq_lens, seq_lens_cpu)
            if runner.sampled(runner.replays):
                runner._prove(metadata, pages, lambda: original(*args))
            return None

        backend.init_forward_metadata_replay_cuda_graph = init_forward_metadata_replay_cuda_graph

    def _fused(self, bs: int, req_pool_indices: Any, seq_lens: Any, seq_lens_cpu: Any):
        """SGLang's topk-1 TARGET_VERIFY replay metadata with the fused kernel: ``(metadata, pages)``."""
        b = self.backend
        seq_lens, seq_lens_cpu, req_pool_indices = seq_lens[:bs], seq_lens_cpu[:bs], req_pool_indices[:bs]
        metadata = b.target_verify_metadata[bs]
        metadata.max_seq_len_k = seq_lens_cpu.max().item() + b.speculative_num_draft_tokens
        max_seq_pages = (metadata.max_seq_len_k + b.page_size - 1) // b.page_size
        self.kernel(metadata.cache_seqlens_int32, metadata.cu_seqlens_k, metadata.page_table, b.req_to_token,
                    req_pool_indices, b.decode_cuda_graph_metadata["strided_indices"], max_seq_pages, seq_lens,
                    b.speculative_num_draft_tokens, b.page_size, None, None)
        b.forward_metadata = metadata
        b.forward_metadata_spec_decode_expand = None
        return metadata, max_seq_pages

    def _prove(self, metadata: Any, pages: int, run_sglang: Callable[[], Any]) -> None:
        """SGLang's method into the same buffers; the three tensors must not change. Waits for the GPU."""
        import torch

        fused = (metadata.cache_seqlens_int32.clone(), metadata.cu_seqlens_k.clone(),
                 metadata.page_table[:, :pages].clone())
        run_sglang()
        sglang = (metadata.cache_seqlens_int32, metadata.cu_seqlens_k, metadata.page_table[:, :pages])
        differ = not all(torch.equal(a, b) for a, b in zip(fused, sglang))
        self.verdict(f"the fused OFF verify metadata differs from FlashAttention's own (check {self.checks + 1})"
                     if differ else None, "OFF verifies use FlashAttention's from now on")


def install(backend: Any, sampled: Callable[[int], bool], any_rank: Callable[[bool], bool] = bool):
    """``(FusedVerifyMetadata or None, status)``: built when asked for and supported on every TP
    rank; ``status`` is :data:`FUSED`, why not, or None when not asked for."""
    if not options.switch(ENV_SWITCH, False):
        return None, None
    reason = unsupported_reason(backend)
    if any_rank(reason is not None):  # every rank fused, or none (same kernels on every rank)
        reason = reason or "not supported on another TP rank"
        logger.info("spec_gate: OFF verify metadata stays FlashAttention's own: %s", reason)
        return None, reason
    return FusedVerifyMetadata(backend, sampled, any_rank), FUSED
