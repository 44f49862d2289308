"""The fused OFF verify metadata on fa3 (``server_patch/off_fa3.py``) on a CPU stand-in of SGLang
0.5.12's ``FlashAttentionBackend``: the replaced method, what it computes, its proof and fallbacks.
``test_sglang_hook_targets`` pins the SGLang lines it repeats; the GPU proof is its run-time check."""

from __future__ import annotations

import logging
import types

import pytest
import torch

from server_patch import off_fa3


class Mode:
    def __init__(self, name):
        self.name = name

    def is_target_verify(self):
        return self.name == "TARGET_VERIFY"


def sglang_topk1_verify(backend, bs, req_pool_indices, seq_lens, seq_lens_cpu):
    """What FlashAttention's TARGET_VERIFY topk-1 replay branch computes (0.5.12), in torch."""
    m = backend.target_verify_metadata[bs]
    m.cache_seqlens_int32.copy_(seq_lens[:bs] + backend.speculative_num_draft_tokens)
    m.max_seq_len_k = seq_lens_cpu[:bs].max().item() + backend.speculative_num_draft_tokens
    m.cu_seqlens_k[1:].copy_(torch.cumsum(m.cache_seqlens_int32, dim=0, dtype=torch.int32))
    pages = (m.max_seq_len_k + backend.page_size - 1) // backend.page_size
    idx = backend.req_to_token[req_pool_indices[:bs, None], backend.decode_cuda_graph_metadata["strided_indices"][:pages]]
    m.page_table[:, :pages].copy_(idx // backend.page_size)
    backend.forward_metadata = m


def fused_kernel(cache_seqlens, cu_seqlens_k, page_table, req_to_token, req_pool_indices, strided, pages, seq_lens,
                 delta, page_size, swa_page_table, pool):
    """normal_decode_set_metadata's documented effect (its Triton kernel on the GPU)."""
    cache_seqlens.copy_(seq_lens + delta)
    cu_seqlens_k[1:].copy_(torch.cumsum(cache_seqlens, dim=0, dtype=torch.int32))
    page_table[:, :pages].copy_(req_to_token[req_pool_indices[:, None], strided[:pages]] // page_size)


class FlashAttentionBackend:
    def __init__(self, topk=1, draft_tokens=1, page_size=1, swa=False):
        self.topk, self.speculative_num_draft_tokens, self.page_size = topk, draft_tokens, page_size
        self.use_sliding_window_kv_pool = self.has_swa = swa
        self.req_to_token = torch.arange(4 * 16, dtype=torch.int32).view(4, 16)
        self.decode_cuda_graph_metadata = {"strided_indices": torch.arange(0, 16, page_size)}
        self.target_verify_metadata = {bs: types.SimpleNamespace(
            cache_seqlens_int32=torch.zeros(bs, dtype=torch.int32), cu_seqlens_k=torch.zeros(bs + 1, dtype=torch.int32),
            page_table=torch.zeros(bs, 16, dtype=torch.int32), max_seq_len_k=0) for bs in (1, 2, 4)}
        self.sglang_calls = []

    def init_forward_metadata_replay_cuda_graph(self, bs, req_pool_indices, seq_lens, seq_lens_sum, encoder_lens,
                                                forward_mode, spec_info, seq_lens_cpu, out_cache_loc=None):
        self.sglang_calls.append(forward_mode.name)
        if forward_mode.is_target_verify():
            sglang_topk1_verify(self, bs, req_pool_indices, seq_lens, seq_lens_cpu)


def replay(backend, mode="TARGET_VERIFY", encoder_lens=None):
    seq_lens = torch.tensor([5, 9], dtype=torch.int64)
    backend.init_forward_metadata_replay_cuda_graph(2, torch.tensor([2, 0]), seq_lens, 14, encoder_lens, Mode(mode),
                                                    None, seq_lens.clone())
    return backend.target_verify_metadata[2]


def test_the_fused_metadata_is_what_flashattention_computes_and_its_proof_holds():
    want = replay(FlashAttentionBackend())
    backend = FlashAttentionBackend()
    fused = off_fa3.FusedVerifyMetadata(backend, sampled=lambda n: n == 1, kernel=fused_kernel)
    got = replay(backend)
    assert got.cache_seqlens_int32.tolist() == [6, 10] and got.cu_seqlens_k.tolist() == [0, 6, 16]
    assert torch.equal(got.page_table, want.page_table) and got.max_seq_len_k == want.max_seq_len_k == 10
    assert backend.forward_metadata is got
    assert backend.sglang_calls == ["TARGET_VERIFY"]  # the first replay is checked: SGLang's ran after it
    replay(backend)
    assert (fused.replays, fused.checks, fused.mismatches, fused.ok) == (2, 1, 0, True)
    assert backend.sglang_calls == ["TARGET_VERIFY"]  # the second: fused only


def test_other_modes_and_encoders_go_to_flashattention():
    backend = FlashAttentionBackend()
    fused = off_fa3.FusedVerifyMetadata(backend, sampled=lambda n: False, kernel=fused_kernel)
    replay(backend, mode="DECODE")
    replay(backend, encoder_lens=torch.tensor([3]))
    assert backend.sglang_calls == ["DECODE", "TARGET_VERIFY"] and fused.replays == 0


def test_a_difference_turns_the_fused_path_off_for_good(caplog):
    backend = FlashAttentionBackend()

    def wrong(cache_seqlens, *args):
        fused_kernel(cache_seqlens, *args)
        cache_seqlens.add_(1)

    fused = off_fa3.FusedVerifyMetadata(backend, sampled=lambda n: True, kernel=wrong)
    with caplog.at_level(logging.ERROR):
        replay(backend)
    assert (fused.checks, fused.mismatches, fused.ok) == (1, 1, False)
    assert "differs from FlashAttention's own" in caplog.text
    assert replay(backend).cache_seqlens_int32.tolist() == [6, 10]  # FlashAttention's own from now on
    assert fused.replays == 1


@pytest.mark.parametrize("backend, why", [
    (types.SimpleNamespace(), "not FlashAttentionBackend"), (FlashAttentionBackend(topk=4), "topk > 1"),
    (FlashAttentionBackend(draft_tokens=4), "exactly one token"), (FlashAttentionBackend(swa=True), "sliding-window"),
    (FlashAttentionBackend(page_size=3), "power of two"), (FlashAttentionBackend(), None),
])
def test_what_the_fused_path_supports(backend, why):
    reason = off_fa3.unsupported_reason(backend)
    assert (reason is None) if why is None else (why in reason)


def test_it_is_built_only_when_asked_for_and_on_every_rank(monkeypatch):
    monkeypatch.setattr(off_fa3, "_fused_kernel", lambda: fused_kernel)
    monkeypatch.delenv(off_fa3.ENV_SWITCH, raising=False)
    assert off_fa3.install(FlashAttentionBackend(), sampled=bool) == (None, None)
    monkeypatch.setenv(off_fa3.ENV_SWITCH, "1")
    built, status = off_fa3.install(FlashAttentionBackend(), sampled=bool)
    assert status == off_fa3.FUSED and built is not None
    assert off_fa3.install(FlashAttentionBackend(), sampled=bool, any_rank=lambda flag: True) == (
        None, "not supported on another TP rank")
    assert off_fa3.install(FlashAttentionBackend(topk=4), sampled=bool)[1] == "topk > 1"
