"""GPU: the decode-kernel OFF verify computes the same attention as SGLang's verify kernel.

SGLang 0.5.12's real ``TritonAttnBackend`` (on a stand-in model runner: the backend reads only
sizes and the KV pool from it), one attention layer of 8B shape (32 query heads, 8 KV heads,
head dim 128, bf16), random keys/values. Reference: the unmodified backend's ``TARGET_VERIFY``
path at 1 draft token (extend kernel, all-ones custom mask). Under test: the same backend
converted by ``server_patch.off_attention`` — eager metadata, and the CUDA-graph capture +
replay metadata path the OFF graph runner uses. The synthetic model pair cannot show this
(its ``o_proj`` is zero), hence a kernel-level test.
"""

from __future__ import annotations

import types

import pytest

pytestmark = pytest.mark.gpu

HEADS, KV_HEADS, DIM, CTX, MAX_BS = 32, 8, 128, 1024, 128


class Pool:
    """The KV pool surface the triton backend uses: one layer, slot-indexed K and V."""

    def __init__(self, torch, slots):
        self.k = torch.randn(slots, KV_HEADS, DIM, dtype=torch.bfloat16, device="cuda")
        self.v = torch.randn(slots, KV_HEADS, DIM, dtype=torch.bfloat16, device="cuda")

    def get_key_buffer(self, layer_id):
        return self.k

    def get_value_buffer(self, layer_id):
        return self.v

    def set_kv_buffer(self, layer, loc, k, v, k_scale=None, v_scale=None):
        self.k[loc] = k.view(-1, KV_HEADS, DIM)
        self.v[loc] = v.view(-1, KV_HEADS, DIM)


@pytest.fixture(scope="module")
def sglang_triton():
    torch = pytest.importorskip("torch")
    tb = pytest.importorskip("sglang.srt.layers.attention.triton_backend")
    from sglang.srt.configs.model_config import AttentionArch
    from sglang.srt.layers.radix_attention import AttentionType
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    original = tb.get_attention_tp_size
    tb.get_attention_tp_size = lambda: 1  # no process groups in a unit test
    yield torch, tb, AttentionArch, AttentionType, ForwardMode
    tb.get_attention_tp_size = original


def _runner(torch, AttentionArch, pool, req_to_token, num_draft_tokens=1, num_steps=0):
    model_config = types.SimpleNamespace(
        attention_arch=AttentionArch.MHA, num_attention_heads=HEADS, get_num_kv_heads=lambda tp: KV_HEADS,
        v_head_dim=DIM, swa_v_head_dim=None, context_len=CTX, is_encoder_decoder=False)
    server_args = types.SimpleNamespace(
        speculative_num_draft_tokens=num_draft_tokens, speculative_num_steps=num_steps,
        triton_attention_num_kv_splits=8,
        enable_deterministic_inference=False, triton_attention_split_tile_size=None,
        disable_cuda_graph=False, chunked_prefill_size=8192)
    return types.SimpleNamespace(
        req_to_token_pool=types.SimpleNamespace(size=MAX_BS, req_to_token=req_to_token),
        sliding_window_size=None, token_to_kv_pool_allocator=None, server_args=server_args,
        model_config=model_config, hybrid_gdn_config=None, kimi_linear_config=None,
        linear_attn_model_spec=None, token_to_kv_pool=pool, device="cuda", gpu_id=0)


def _assert_converted_matches(sglang_triton, role, pool, req_to_token, fb, spec_info, qkv, layer, expected):
    """The converted backend (``role``) gives ``expected`` through the eager metadata and through
    CUDA-graph capture + replay metadata, and its key-index check passes once on each."""
    torch, tb, AttentionArch, _, _ = sglang_triton
    from server_patch import off_attention

    bs, rows, seq_lens = fb.batch_size, fb.req_pool_indices, fb.seq_lens
    eager = tb.TritonAttnBackend(_runner(torch, AttentionArch, pool, req_to_token))
    assert off_attention.use_decode_kernel(eager, role=role) == off_attention.DECODE_KERNEL
    eager.init_forward_metadata(fb)
    torch.testing.assert_close(eager.forward_extend(*qkv, layer, fb).float(), expected, atol=2e-2, rtol=2e-2)
    assert (eager.spec_gate_checks, eager.spec_gate_mismatches) == (1, 0)

    graph = tb.TritonAttnBackend(_runner(torch, AttentionArch, pool, req_to_token))
    off_attention.use_decode_kernel(graph, role=role)
    graph.init_cuda_graph_state(MAX_BS, MAX_BS)
    fill = graph.get_cuda_graph_seq_len_fill_value()
    graph.init_forward_metadata_capture_cuda_graph(
        bs, bs, torch.zeros(bs, dtype=torch.int64, device="cuda"),
        torch.full((bs,), fill, dtype=torch.int64, device="cuda"), None, fb.forward_mode, spec_info)
    graph._replay_forward_batch = fb
    graph.init_forward_metadata_replay_cuda_graph(
        bs, rows, seq_lens, int(seq_lens.sum()), None, fb.forward_mode, spec_info, seq_lens.cpu())
    torch.testing.assert_close(graph.forward_extend(*qkv, layer, fb).float(), expected, atol=2e-2, rtol=2e-2)
    assert (graph.spec_gate_checks, graph.spec_gate_mismatches) == (1, 0)


def _random_layer(torch, AttentionType, bs, seed):
    """A KV pool with random keys/values, shuffled slots, ``bs`` random requests with random
    prefix lengths, one attention layer, and q/k/v of one new token per request."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    slots = MAX_BS * CTX
    pool = Pool(torch, slots)
    req_to_token = torch.randperm(slots, device="cuda", generator=g).to(torch.int32).view(MAX_BS, CTX)
    rows = torch.randperm(MAX_BS, device="cuda", generator=g)[:bs]
    prefix = torch.randint(1, CTX - 1, (bs,), device="cuda", generator=g)
    layer = types.SimpleNamespace(
        tp_q_head_num=HEADS, qk_head_dim=DIM, v_head_dim=DIM, layer_id=0, k_scale=None, v_scale=None,
        scaling=DIM ** -0.5, logit_capping_method="tanh", logit_cap=0.0, xai_temperature_len=-1,
        sliding_window_size=-1, is_cross_attention=False, attn_type=AttentionType.DECODER)
    q = torch.randn(bs, HEADS * DIM, dtype=torch.bfloat16, device="cuda", generator=g)
    k = torch.randn(bs, KV_HEADS, DIM, dtype=torch.bfloat16, device="cuda", generator=g)  # as RadixAttention passes it
    v = torch.randn(bs, KV_HEADS, DIM, dtype=torch.bfloat16, device="cuda", generator=g)
    return pool, req_to_token, rows, prefix, layer, q, k, v


@pytest.mark.parametrize("bs", [1, 7, 64, 128])
def test_decode_kernel_verify_equals_the_verify_kernel(sglang_triton, bs):
    torch, tb, AttentionArch, AttentionType, ForwardMode = sglang_triton
    from server_patch import off_attention

    pool, req_to_token, rows, seq_lens, layer, q, k, v = _random_layer(torch, AttentionType, bs, seed=bs)
    out_cache_loc = req_to_token[rows, seq_lens].to(torch.int64)  # what both workers arrange
    spec_info = types.SimpleNamespace(
        custom_mask=torch.ones(int(seq_lens.sum()) + bs, dtype=torch.bool, device="cuda"))
    fb = types.SimpleNamespace(
        forward_mode=ForwardMode.TARGET_VERIFY, batch_size=bs, req_pool_indices=rows, seq_lens=seq_lens,
        seq_lens_sum=int(seq_lens.sum()), out_cache_loc=out_cache_loc, token_to_kv_pool=pool,
        spec_info=spec_info, extend_prefix_lens=None)

    reference = tb.TritonAttnBackend(_runner(torch, AttentionArch, pool, req_to_token))
    reference.init_forward_metadata(fb)
    expected = reference.forward_extend(q, k, v, layer, fb).float()

    _assert_converted_matches(sglang_triton, off_attention.TARGET, pool, req_to_token, fb, spec_info,
                              (q, k, v), layer, expected)


@pytest.mark.parametrize("bs", [1, 7, 128])
def test_decode_kernel_draft_extend_equals_the_prefix_extend(sglang_triton, bs):
    """The OFF draft extend (DRAFT_EXTEND_V2, 1 token per request, ``seq_lens`` including it)
    against SGLang's eager v2 path for the same batch (regular extend over the prefix + 1 token)."""
    torch, tb, AttentionArch, AttentionType, ForwardMode = sglang_triton
    from server_patch import off_attention

    pool, req_to_token, rows, prefix, layer, q, k, v = _random_layer(torch, AttentionType, bs, seed=1000 + bs)
    seq_lens = prefix + 1
    out_cache_loc = req_to_token[rows, prefix].to(torch.int64)
    fb = types.SimpleNamespace(
        forward_mode=ForwardMode.DRAFT_EXTEND_V2, batch_size=bs, req_pool_indices=rows, seq_lens=seq_lens,
        seq_lens_sum=int(seq_lens.sum()), out_cache_loc=out_cache_loc, token_to_kv_pool=pool, spec_info=None,
        extend_prefix_lens=prefix, extend_prefix_lens_cpu=prefix.tolist(),
        extend_seq_lens=torch.ones_like(prefix), extend_seq_lens_cpu=[1] * bs)

    reference = tb.TritonAttnBackend(_runner(torch, AttentionArch, pool, req_to_token))
    reference.init_forward_metadata(fb)  # DRAFT_EXTEND_V2 eager: the regular extend branch
    expected = reference.forward_extend(q, k, v, layer, fb).float()

    _assert_converted_matches(sglang_triton, off_attention.DRAFT_EXTEND, pool, req_to_token, fb, None,
                              (q, k, v), layer, expected)
