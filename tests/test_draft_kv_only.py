"""The KV-only OFF draft extend (``server_patch/draft_kv_only.py``) on CPU stand-ins.

The stand-in draft model follows SGLang 0.5.12's ``LlamaForCausalLMEagle3`` forward line by line
(``models/llama_eagle3.py``; ``test_sglang_hook_targets`` pins those lines in the real source),
with an attention that stores K/V the way the triton backend's ``forward_decode`` does. The GPU
proof is the runtime check of ``KvOnlyRunner`` against SGLang's own full OFF draft-extend graph
(``bench.gate_correctness``: ``off_kv_only_proof_ok``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import types

import pytest
import torch
from torch import nn

from server_patch import draft_kv_only, off_state
from server_patch.off_state import OffStepRunner

H, HEADS, KV_HEADS, HEAD_DIM, VOCAB = 16, 4, 2, 4, 32


class RMSNorm(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.rand(n) + 0.5)

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class Pool:
    """Stands in for the draft's KV pool: one layer, ``set_kv_buffer`` as SGLang calls it."""

    def __init__(self, slots=64):
        self.k = torch.zeros(slots, KV_HEADS, HEAD_DIM)
        self.v = torch.zeros(slots, KV_HEADS, HEAD_DIM)
        self.calls = []

    def set_kv_buffer(self, layer, loc, k, v, k_scale=None, v_scale=None):
        self.calls.append((layer, k.shape, v.shape, k_scale, v_scale))
        self.k[loc], self.v[loc] = k, v

    def get_key_buffer(self, layer_id):
        return self.k

    def get_value_buffer(self, layer_id):
        return self.v


class Radix(nn.Module):
    """RadixAttention + the decode path: reshape K/V, store them, attend (here: a stand-in)."""

    tp_k_head_num = tp_v_head_num = KV_HEADS
    qk_head_dim = v_head_dim = HEAD_DIM
    layer_id = 0
    k_scale = v_scale = None
    sliding_window_size = -1

    def forward(self, q, k, v, forward_batch):
        k = k.view(-1, self.tp_k_head_num, self.qk_head_dim)
        v = v.view(-1, self.tp_v_head_num, self.v_head_dim)
        forward_batch.token_to_kv_pool.set_kv_buffer(self, forward_batch.out_cache_loc, k, v,
                                                     self.k_scale, self.v_scale)
        return q * 0.5


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv_proj = nn.Linear(2 * H, (HEADS + 2 * KV_HEADS) * HEAD_DIM, bias=False)
        self.o_proj = nn.Linear(HEADS * HEAD_DIM, H, bias=False)
        self.attn = Radix()

    def rotary_emb(self, positions, q, k):
        angle = positions.to(q.dtype).unsqueeze(-1) * 0.1
        return q * torch.cos(angle), k * torch.cos(angle) + torch.sin(angle)

    def forward_prepare_native(self, positions, hidden_states):
        qkv = self.qkv_proj(hidden_states)
        q, k, v = qkv.split([HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM], dim=-1)
        q, k = self.rotary_emb(positions, q, k)
        return q, k, v

    def forward(self, positions, hidden_states, forward_batch):
        q, k, v = self.forward_prepare_native(positions, hidden_states)
        return self.o_proj(self.attn(q, k, v, forward_batch))


class Layer(nn.Module):
    is_input_layer = True

    def __init__(self):
        super().__init__()
        self.self_attn = Attention()
        self.input_layernorm, self.hidden_norm = RMSNorm(H), RMSNorm(H)
        self.mlp = nn.Linear(H, H)

    def forward(self, positions, embeds, hidden_states, forward_batch):
        residual = hidden_states
        hidden_states = self.hidden_norm(hidden_states)
        embeds = self.input_layernorm(embeds)
        hidden_states = torch.cat([embeds, hidden_states], dim=-1)
        hidden_states = self.self_attn(positions=positions, hidden_states=hidden_states,
                                       forward_batch=forward_batch)
        return self.mlp(hidden_states + residual)


class Inner(nn.Module):
    is_mrope_enabled = False

    def __init__(self, fc_norm=False):
        super().__init__()
        self.embed_tokens = nn.Embedding(VOCAB, H)
        self.num_aux_hidden_states = 3
        self.fc = nn.Linear(3 * H, H, bias=False)
        self.fc_norm = nn.ModuleList([RMSNorm(H) for _ in range(3)]) if fc_norm else None
        self.layers = nn.ModuleList([Layer()])

    def forward(self, input_ids, positions, forward_batch):
        embeds = self.embed_tokens(input_ids)
        hidden_states = forward_batch.spec_info.hidden_states
        if hidden_states.shape[-1] != embeds.shape[-1]:
            if self.fc_norm is not None:
                chunks = hidden_states.chunk(self.num_aux_hidden_states, dim=-1)
                hidden_states = torch.cat([n(c) for n, c in zip(self.fc_norm, chunks)], dim=-1)
            hidden_states = self.fc(hidden_states)
        return self.layers[0](positions, embeds, hidden_states, forward_batch)


LlamaForCausalLMEagle3 = type("LlamaForCausalLMEagle3", (nn.Module,), {
    "__init__": lambda self, fc_norm=False: (nn.Module.__init__(self), setattr(self, "model", Inner(fc_norm)),
                                             setattr(self, "config", types.SimpleNamespace(draft_vocab_size=VOCAB)))[0],
    "forward": lambda self, input_ids, positions, forward_batch: self.model(input_ids, positions, forward_batch),
})


class Output:
    def __init__(self, next_token_logits, hidden_states):
        self.next_token_logits, self.hidden_states = next_token_logits, hidden_states


def forward_batch(hidden_width, tokens=5, logits=True):
    torch.manual_seed(1)
    return types.SimpleNamespace(
        spec_info=types.SimpleNamespace(hidden_states=torch.randn(tokens, hidden_width)),
        token_to_kv_pool=Pool(),
        out_cache_loc=torch.tensor([3, 9, 4, 20, 11][:tokens]),
        next_token_logits_buffer=torch.zeros(tokens, VOCAB) if logits else None,
    )


@pytest.mark.parametrize("fc_norm", [False, True])
@pytest.mark.parametrize("hidden_width", [3 * H, H], ids=["target-aux", "draft-own-hidden"])
def test_kv_only_forward_stores_exactly_the_kv_of_the_full_forward(fc_norm, hidden_width):
    torch.manual_seed(0)
    model = LlamaForCausalLMEagle3(fc_norm)
    ids, pos = torch.tensor([1, 7, 3, 30, 2]), torch.tensor([10, 11, 40, 7, 0])
    full_fb, kv_fb = forward_batch(hidden_width), forward_batch(hidden_width)
    with torch.no_grad():
        model(ids, pos, full_fb)
        out = draft_kv_only.kv_only_forward(model, Output)(ids, pos, kv_fb)
    assert torch.equal(kv_fb.token_to_kv_pool.k, full_fb.token_to_kv_pool.k)
    assert torch.equal(kv_fb.token_to_kv_pool.v, full_fb.token_to_kv_pool.v)
    assert kv_fb.token_to_kv_pool.k[[3, 9, 4, 20, 11]].abs().sum() > 0  # something was stored
    layer, k_shape, v_shape, k_scale, v_scale = kv_fb.token_to_kv_pool.calls[0]
    assert layer is model.model.layers[0].self_attn.attn
    assert k_shape == v_shape == (5, KV_HEADS, HEAD_DIM) and k_scale is v_scale is None
    # the shapes the draft-extend graph runner expects; content not meaningful
    assert out.next_token_logits is kv_fb.next_token_logits_buffer
    assert out.hidden_states.shape == (5, H)


def test_kv_only_forward_makes_logits_when_the_batch_has_no_buffer():
    model = LlamaForCausalLMEagle3()
    fb = forward_batch(3 * H, tokens=2, logits=False)
    with torch.no_grad():
        out = draft_kv_only.kv_only_forward(model, Output)(torch.tensor([1, 2]), torch.tensor([0, 1]), fb)
    assert out.next_token_logits.shape == (2, VOCAB) and out.next_token_logits.dtype == torch.float32


def test_supported_draft_models():
    model = LlamaForCausalLMEagle3()
    assert draft_kv_only.unsupported_reason(model) is None
    other = type("LlamaForCausalLMEagle", (nn.Module,), {})()
    assert "not LlamaForCausalLMEagle3" in draft_kv_only.unsupported_reason(other)
    two = LlamaForCausalLMEagle3()
    two.model.layers.append(Layer())
    assert "exactly one decoder layer" in draft_kv_only.unsupported_reason(two)
    mrope = LlamaForCausalLMEagle3()
    mrope.model.is_mrope_enabled = True
    assert "multimodal" in draft_kv_only.unsupported_reason(mrope)
    window = LlamaForCausalLMEagle3()
    window.model.layers[0].self_attn.attn.sliding_window_size = 512
    assert "sliding window" in draft_kv_only.unsupported_reason(window)
    scaled = LlamaForCausalLMEagle3()
    scaled.model.layers[0].self_attn.attn.k_scale = 0.5
    assert "scaled" in draft_kv_only.unsupported_reason(scaled)


def test_no_attention_backend_answers_what_the_graph_runner_asks():
    backend = draft_kv_only.NoAttentionBackend(7)
    assert backend.get_cuda_graph_seq_len_fill_value() == 7
    assert backend.init_cuda_graph_state(64, 64) is None
    assert backend.init_forward_metadata_replay_cuda_graph(bs=3, seq_lens=None) is None


# -- the runtime proof ------------------------------------------------------------------------


class GraphRunner:
    """A graph runner whose replay stores given K/V at the batch's slots."""

    def __init__(self, value):
        self.value = value
        self.replays = 0

    def replay(self, fb):
        self.replays += 1
        fb.token_to_kv_pool.k[fb.out_cache_loc] = self.value
        fb.token_to_kv_pool.v[fb.out_cache_loc] = -self.value
        return "out"


def kv_batch():
    return types.SimpleNamespace(token_to_kv_pool=Pool(), out_cache_loc=torch.tensor([2, 5]),
                                 spec_info=types.SimpleNamespace(num_correct_drafts=torch.zeros(2)))


class PaddingGraphRunner(GraphRunner):
    """Like SGLang's v2 replay of a padded batch: requires raw-size fields, leaves padded ones."""

    def replay(self, fb):
        assert fb.spec_info.num_correct_drafts.shape == (2,)
        fb.spec_info.num_correct_drafts = torch.zeros(4)
        return super().replay(fb)


def test_the_full_replay_of_a_check_sees_the_batch_as_the_kv_only_replay_did():
    kv, full = PaddingGraphRunner(1.0), PaddingGraphRunner(1.0)
    runner = draft_kv_only.KvOnlyRunner(kv, full, Radix(), sampled=lambda n: True)
    fb = kv_batch()
    kv.replay(fb)
    assert (runner.checks, runner.mismatches) == (1, 0)
    assert fb.spec_info.num_correct_drafts.shape == (4,)  # as the KV-only replay left it


def test_sampled_replays_are_checked_against_the_full_draft_extend():
    kv, full = GraphRunner(1.0), GraphRunner(1.0)
    runner = draft_kv_only.KvOnlyRunner(kv, full, Radix(), sampled=lambda n: n % 2 == 1)
    for _ in range(3):
        assert kv.replay(kv_batch()) == "out"
    assert (runner.count, runner.checks, runner.mismatches, runner.ok) == (3, 2, 0, True)
    assert full.replays == 2  # only on the sampled replays


def test_a_kv_mismatch_is_counted_and_turns_kv_only_off(caplog):
    kv, full = GraphRunner(1.0), GraphRunner(2.0)
    runner = draft_kv_only.KvOnlyRunner(kv, full, Radix(), sampled=lambda n: True)
    kv.replay(kv_batch())
    assert (runner.checks, runner.mismatches, runner.ok) == (1, 1, False)
    assert "differ from the full draft extend" in caplog.text


# -- OFF steps and the resume step in OffStepRunner ------------------------------------------


def make_runner(kv_ok=True, kv_replays=True):
    runner = OffStepRunner.__new__(OffStepRunner)
    runner.v2 = True
    runner.early_seq_lens = False
    runner._no_kv_only()
    runner._draft_owner = types.SimpleNamespace()
    runner.on_state, runner.off_state, runner.off_kv_state = "on", "off", "off-kv"
    runner.kv_only = types.SimpleNamespace(count=0, ok=kv_ok)
    runner.applied = []

    def apply(state):
        runner.applied.append(state)
        runner.current = state

    runner._apply = apply
    runner.off_target_graph = types.SimpleNamespace(count=0)
    runner.off_steps_cuda_graph = 0

    def forward(batch):
        runner.off_target_graph.count += 1
        if runner.current == "off-kv" and kv_replays:
            runner.kv_only.count += 1
        return types.SimpleNamespace()

    return runner, forward


def test_gated_off_steps_run_kv_only_and_leave_the_draft_stale_until_a_resume_step():
    runner, forward = make_runner()
    assert runner.off_draft_extend == draft_kv_only.KV_ONLY
    runner.run_off_step(forward, "b1")
    runner.run_off_step(forward, "b2")
    assert runner.applied == ["off-kv", "on", "off-kv", "on"] and runner.draft_stale
    runner.run_off_step(forward, "b3", resume=True)
    assert runner.applied[-2:] == ["off", "on"] and not runner.draft_stale
    assert (runner.off_steps_cuda_graph, runner.resume_steps) == (2, 1)


def test_after_a_failed_proof_off_steps_run_the_full_draft_extend():
    runner, forward = make_runner(kv_ok=False)
    assert runner.off_draft_extend == draft_kv_only.FULL
    runner.run_off_step(forward, "b1")
    assert runner.applied == ["off", "on"] and not runner.draft_stale


def test_a_kv_only_step_that_fell_back_to_the_eager_full_draft_leaves_it_fresh():
    runner, forward = make_runner(kv_replays=False)  # e.g. a batch larger than the graphs
    runner.run_off_step(forward, "b1")
    assert runner.applied == ["off-kv", "on"] and not runner.draft_stale


def test_without_kv_only_the_runner_reports_why(monkeypatch):
    runner = OffStepRunner.__new__(OffStepRunner)
    runner._no_kv_only(f"{draft_kv_only.ENV_SWITCH}=0")
    assert runner.off_draft_extend == draft_kv_only.FULL
    assert runner.off_draft_extend_reason == "SPECCONSOLE_OFF_DRAFT_KV_ONLY=0"
    monkeypatch.setenv(draft_kv_only.ENV_SWITCH, "0")
    assert not draft_kv_only.enabled_by_env()
    monkeypatch.setenv(draft_kv_only.ENV_SWITCH, "1")
    assert draft_kv_only.enabled_by_env()
    assert off_state.OFF_DRAFT_TOKENS == 1


def test_gate_correctness_proof_needs_checks_on_every_rank_and_no_mismatch():
    from bench.gate_correctness import _rank_proof

    def proof(checks, mismatches, active=True):
        rec = {}
        ranks = [{"off_kv_only_checks": c, "off_kv_only_mismatches": m} for c, m in zip(checks, mismatches)]
        _rank_proof(rec, {"ranks": ranks}, "off_kv_only", active=active)
        return rec["off_kv_only_proof_ok"]

    assert proof([92], [0]) is True
    assert proof([90, 0], [0, 0]) is False  # one rank never checked
    assert proof([90, 90], [0, 1]) is False
    assert proof([0], [0], active=False) is True  # full draft extend: nothing to prove


# -- TP ranks fall back together ---------------------------------------------------------------


def lockstep_any_rank(n):
    """``any_rank`` for ``n`` ranks run as threads, as the TP all-reduce combines them."""
    import threading

    barrier, flags = threading.Barrier(n), [False] * n

    def make(rank):
        def any_rank(flag):
            flags[rank] = bool(flag)
            barrier.wait()
            out = any(flags)
            barrier.wait()
            return out
        return any_rank

    return [make(r) for r in range(n)]


def test_a_kv_mismatch_on_one_rank_turns_kv_only_off_on_every_rank():
    import threading

    fulls = [GraphRunner(2.0), GraphRunner(1.0)]  # rank 0's full draft extend disagrees
    kvs = [GraphRunner(1.0), GraphRunner(1.0)]
    runners = [draft_kv_only.KvOnlyRunner(kv, full, Radix(), sampled=lambda n: True, any_rank=a)
               for kv, full, a in zip(kvs, fulls, lockstep_any_rank(2))]
    oks = [[], []]

    def rank(r):
        for _ in range(3):
            kvs[r].replay(kv_batch())
            oks[r].append(runners[r].ok)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert oks == [[False] * 3, [False] * 3]  # the same step on both ranks
    assert [r.mismatches for r in runners] == [3, 0] and [r.checks for r in runners] == [3, 3]


def test_kv_only_runs_on_every_rank_or_on_none():
    built_here, _ = make_runner()
    built_here.kv_only = draft_kv_only.KvOnlyRunner(GraphRunner(1.0), GraphRunner(1.0), Radix(), lambda n: False)
    built_here.any_rank = lambda flag: True  # another rank did not build it
    built_here._agree_on_kv_only()
    assert built_here.kv_only is None and built_here.off_draft_extend == draft_kv_only.FULL
    assert built_here.off_draft_extend_reason == "not built on another TP rank"
    everywhere, _ = make_runner()
    everywhere.kv_only = draft_kv_only.KvOnlyRunner(GraphRunner(1.0), GraphRunner(1.0), Radix(), lambda n: False)
    everywhere.any_rank = lambda flag: bool(flag)
    everywhere._agree_on_kv_only()
    assert everywhere.off_draft_extend == draft_kv_only.KV_ONLY


def _any_rank_worker(rank, flags, out):
    import os
    import types

    import torch.distributed as dist

    from server_patch.scheduler_hooks import any_tp_rank

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ["SPEC_GATE_TEST_PORT"])
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        any_rank = any_tp_rank(types.SimpleNamespace(tp_size=2, tp_cpu_group=dist.group.WORLD))
        out[rank] = [any_rank(f) for f in flags[rank]]
    finally:
        dist.destroy_process_group()


def test_any_tp_rank_is_an_all_reduce_on_the_tp_cpu_group(monkeypatch):
    import socket

    import torch.multiprocessing as mp

    from server_patch.scheduler_hooks import any_tp_rank

    assert any_tp_rank(types.SimpleNamespace(tp_size=1)) is bool
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        monkeypatch.setenv("SPEC_GATE_TEST_PORT", str(s.getsockname()[1]))
    flags = [[False, True, False], [False, False, False]]
    with mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(_any_rank_worker, args=(flags, out), nprocs=2, join=True)
        assert dict(out) == {0: [False, True, False], 1: [False, True, False]}


# -- the eager KV-only extend (no OFF draft-extend CUDA graph: v2 + fa3) ----------------------


class EagerModel:
    """A draft model whose class forward stores K/V the full way (``full_k`` per token)."""

    def __init__(self, full_k=1.0):
        self.full_k, self.full_calls = full_k, 0

    def forward(self, input_ids, positions, forward_batch):
        self.full_calls += 1
        n = len(input_ids)
        forward_batch.token_to_kv_pool.set_kv_buffer(None, forward_batch.out_cache_loc,
                                                     torch.full((n, KV_HEADS, HEAD_DIM), self.full_k),
                                                     torch.full((n, KV_HEADS, HEAD_DIM), self.full_k))
        return "full output"


def _kv_only_stand_in(input_ids, positions, forward_batch):
    n = len(input_ids)
    forward_batch.token_to_kv_pool.set_kv_buffer(None, forward_batch.out_cache_loc,
                                                 torch.ones(n, KV_HEADS, HEAD_DIM), torch.ones(n, KV_HEADS, HEAD_DIM))
    return "kv-only output"


def test_the_eager_kv_only_extend_replaces_the_forward_only_while_installed_and_proves_on_sampled_steps():
    model = EagerModel(full_k=1.0)
    eager = draft_kv_only.EagerKvOnly(model, Radix(), sampled=lambda n: n == 2, kv_forward=_kv_only_stand_in)
    ids, pos = torch.tensor([3, 4]), torch.tensor([7, 9])
    with eager.installed():
        assert model.forward(ids, pos, kv_batch()) == "kv-only output"
        assert model.forward(ids, pos, kv_batch()) == "kv-only output"  # checked: the full forward ran too
    assert (eager.count, eager.checks, eager.mismatches, eager.ok, model.full_calls) == (2, 1, 0, True, 1)
    assert model.forward(ids, pos, kv_batch()) == "full output"  # the class's forward again


def test_an_eager_kv_only_mismatch_turns_it_off(caplog):
    model = EagerModel(full_k=2.0)  # the full forward stores other K/V
    eager = draft_kv_only.EagerKvOnly(model, Radix(), sampled=lambda n: True, kv_forward=_kv_only_stand_in)
    with eager.installed():
        model.forward(torch.tensor([3]), torch.tensor([7]), kv_batch())
    assert (eager.checks, eager.mismatches, eager.ok) == (1, 1, False)
    assert "eager KV-only draft extend stored K/V that differ" in caplog.text


def test_an_off_step_runs_inside_the_eager_kv_only_forward_and_a_resume_step_does_not(monkeypatch):
    runner, forward = make_runner()
    model = EagerModel()
    runner.kv_only = draft_kv_only.EagerKvOnly(model, Radix(), sampled=lambda n: False, kv_forward=_kv_only_stand_in)
    runner.off_kv_state = runner.off_state
    seen = []

    def step(batch):
        seen.append(model.forward(torch.tensor([1]), torch.tensor([2]), kv_batch()))
        return types.SimpleNamespace()

    runner.run_off_step(step, "b1")
    assert seen == ["kv-only output"] and runner.draft_stale
    runner.run_off_step(step, "b2", resume=True)
    assert seen[-1] == "full output" and not runner.draft_stale


@pytest.mark.parametrize("env, eager", [(None, True), ("1", True), ("0", False)])
def test_without_a_draft_extend_graph_the_eager_kv_only_extend_runs_unless_switched_off(env, eager, monkeypatch):
    if env is None:
        monkeypatch.delenv(draft_kv_only.EAGER_ENV_SWITCH, raising=False)
    else:
        monkeypatch.setenv(draft_kv_only.EAGER_ENV_SWITCH, env)
    monkeypatch.setattr(draft_kv_only, "unsupported_reason", lambda model: None)
    runner = OffStepRunner.__new__(OffStepRunner)
    runner.v2 = True
    layer0 = types.SimpleNamespace(self_attn=types.SimpleNamespace(attn=Radix()))
    model = types.SimpleNamespace(model=types.SimpleNamespace(layers=[layer0]), forward=lambda *a: None)
    runner._draft_model = lambda: model
    runner.off_state = types.SimpleNamespace(cuda_graph_runner_for_draft_extend=None)
    # --disable-cuda-graph: no graph of any kind (with graphs on, the KV-only graph comes first: below)
    runner.worker = types.SimpleNamespace(server_args=types.SimpleNamespace(disable_cuda_graph=True))
    monkeypatch.setattr(draft_kv_only, "kv_only_forward", lambda m: _kv_only_stand_in)
    runner._init_kv_only()
    if eager:
        assert isinstance(runner.kv_only, draft_kv_only.EagerKvOnly) and runner.off_kv_state is runner.off_state
        assert runner.off_draft_extend == draft_kv_only.KV_ONLY and runner.off_draft_extend_reason is None
    else:
        assert runner.kv_only is None and runner.off_draft_extend == draft_kv_only.FULL
        assert draft_kv_only.EAGER_ENV_SWITCH in runner.off_draft_extend_reason


# -- the KV-only graph where SGLang captures no full OFF draft-extend graph (v2 on fa3) ----------


class NearGraphRunner(GraphRunner):
    """A reference that stores the K/V off by ``delta`` (another GEMM tiling's rounding, or worse)."""

    def __init__(self, value, delta):
        super().__init__(value)
        self.delta = delta

    def replay(self, fb):
        super().replay(fb)
        fb.token_to_kv_pool.k[fb.out_cache_loc] += self.delta
        return "ref"


def test_a_proof_within_rounding_passes_bf16_roundings_and_counts_them():
    kv = GraphRunner(1.0)
    runner = draft_kv_only.KvOnlyRunner(kv, NearGraphRunner(1.0, 2 ** -8), Radix(), sampled=lambda n: True,
                                        rounding=True)
    kv.replay(kv_batch())
    assert (runner.checks, runner.mismatches, runner.inexact, runner.ok) == (1, 0, 1, True)
    assert runner.max_abs_diff == pytest.approx(2 ** -8)
    exact = draft_kv_only.KvOnlyRunner(GraphRunner(1.0), GraphRunner(1.0), Radix(), lambda n: True, rounding=True)
    exact.runner.replay(kv_batch())
    assert (exact.checks, exact.inexact, exact.ok) == (1, 0, True)


def test_a_proof_within_rounding_still_fails_a_wrong_kv_and_a_bitwise_one_fails_a_rounding(caplog):
    kv = GraphRunner(1.0)
    runner = draft_kv_only.KvOnlyRunner(kv, NearGraphRunner(1.0, 0.5), Radix(), lambda n: True, rounding=True)
    kv.replay(kv_batch())
    assert (runner.mismatches, runner.inexact, runner.ok) == (1, 0, False)
    assert "max |diff| 0.5" in caplog.text
    bitwise = draft_kv_only.KvOnlyRunner(GraphRunner(1.0), NearGraphRunner(1.0, 2 ** -8), Radix(), lambda n: True)
    bitwise.runner.replay(kv_batch())
    assert (bitwise.mismatches, bitwise.ok) == (1, False)


def test_the_eager_reference_builds_the_metadata_runs_the_forward_and_leaves_the_batch_as_it_was():
    calls = []
    backend = types.SimpleNamespace(init_forward_metadata=lambda fb: calls.append(("metadata", fb.attn_backend)))

    def forward(fb, skip_attn_backend_init=False):
        calls.append(("forward", fb.attn_backend is backend, skip_attn_backend_init))
        fb.out_cache_loc, fb.spec_info.hidden_states = "changed", "changed"
        return "full output"

    loc, hidden = torch.tensor([2, 5]), torch.zeros(2, 3)
    fb = types.SimpleNamespace(out_cache_loc=loc, attn_backend="graph-path backend",
                               spec_info=types.SimpleNamespace(hidden_states=hidden))
    ref = draft_kv_only.EagerDraftExtend(types.SimpleNamespace(forward=forward), backend)
    assert ref.replay(fb) == "full output"
    assert calls == [("metadata", "graph-path backend"), ("forward", True, True)]
    assert fb.out_cache_loc is loc and fb.spec_info.hidden_states is hidden and fb.attn_backend == "graph-path backend"


@dataclasses.dataclass
class OffState:
    """The OFF runtime state's one field read here (``dataclasses.replace`` makes the KV-only one)."""

    cuda_graph_runner_for_draft_extend: object = None


def standalone_runner(monkeypatch, disable_cuda_graph=False, capture_fails=False, any_rank=bool):
    """An OffStepRunner for v2 without SGLang's OFF draft-extend graph, capture stubbed."""
    monkeypatch.setattr(draft_kv_only, "unsupported_reason", lambda model: None)
    monkeypatch.setattr(draft_kv_only, "kv_only_forward", lambda m: _kv_only_stand_in)
    monkeypatch.setattr(draft_kv_only, "sglang_draft_extend_runner_cls", lambda: GraphRunner)
    built = []

    def build(runner_cls, fill, worker_for_runner, model):
        if capture_fails:
            raise RuntimeError("capture failed on this backend")
        built.append((runner_cls, fill, worker_for_runner))
        return GraphRunner(1.0)

    monkeypatch.setattr(draft_kv_only, "build_kv_only_graph_runner", build)
    runner = OffStepRunner.__new__(OffStepRunner)
    runner.v2 = True
    runner.any_rank = any_rank
    layer0 = types.SimpleNamespace(self_attn=types.SimpleNamespace(attn=Radix()))
    model = types.SimpleNamespace(model=types.SimpleNamespace(layers=[layer0]), forward=lambda *a: None)
    runner._draft_model = lambda: model
    fa3 = types.SimpleNamespace(get_cuda_graph_seq_len_fill_value=lambda: 1, init_forward_metadata=lambda fb: None)
    draft_worker = types.SimpleNamespace(draft_runner=types.SimpleNamespace(attn_backend=fa3))

    @contextlib.contextmanager
    def override(steps, tokens):
        yield

    runner.worker = types.SimpleNamespace(server_args=types.SimpleNamespace(disable_cuda_graph=disable_cuda_graph),
                                          draft_worker=draft_worker, _override_worker_state=override)
    runner._build_context = contextlib.nullcontext
    runner.on_state = "on"
    runner._apply = lambda state: None
    runner.off_state = OffState()
    runner._init_kv_only()
    return runner, built, draft_worker


def test_without_sglangs_off_draft_extend_graph_the_kv_only_extend_gets_its_own_graph_when_asked(monkeypatch):
    monkeypatch.setenv(draft_kv_only.GRAPH_ENV_SWITCH, "1")
    runner, built, draft_worker = standalone_runner(monkeypatch)
    assert built == [(GraphRunner, 1, draft_worker)]  # SGLang's runner class, fa3's fill value
    assert isinstance(runner.kv_only, draft_kv_only.KvOnlyRunner) and runner.kv_only.rounding
    assert isinstance(runner.kv_only.full_runner, draft_kv_only.EagerDraftExtend)
    assert runner.off_kv_state.cuda_graph_runner_for_draft_extend is runner.kv_only.runner
    assert runner.off_state.cuda_graph_runner_for_draft_extend is None  # resume steps: the eager full extend
    assert (runner.off_draft_extend, runner.kv_only.runs) == (draft_kv_only.KV_ONLY, draft_kv_only.CUDA_GRAPH)


def test_on_v2_the_kv_only_graph_is_the_default_and_v1_asks_for_it(monkeypatch):
    monkeypatch.delenv(draft_kv_only.GRAPH_ENV_SWITCH, raising=False)
    runner, built, _ = standalone_runner(monkeypatch)
    assert runner.kv_only.runs == draft_kv_only.CUDA_GRAPH and len(built) == 1
    assert draft_kv_only.graph_enabled_by_env(True) and not draft_kv_only.graph_enabled_by_env(False)
    monkeypatch.setenv(draft_kv_only.GRAPH_ENV_SWITCH, "1")
    assert draft_kv_only.graph_enabled_by_env(False)


@pytest.mark.parametrize("why", ["switched off", "no cuda graphs", "capture failed"])
def test_the_kv_only_extend_runs_eagerly_when_its_own_graph_is_not_built(why, monkeypatch, caplog):
    monkeypatch.setenv(draft_kv_only.GRAPH_ENV_SWITCH, "0" if why == "switched off" else "1")
    runner, built, _ = standalone_runner(monkeypatch, disable_cuda_graph=why == "no cuda graphs",
                                         capture_fails=why == "capture failed")
    assert isinstance(runner.kv_only, draft_kv_only.EagerKvOnly) and runner.kv_only.runs == draft_kv_only.EAGER
    assert runner.off_draft_extend == draft_kv_only.KV_ONLY and runner.off_draft_extend_reason is None
    if why == "capture failed":
        assert "capture failed on this backend" in caplog.text and "eagerly instead" in caplog.text


# -- KV-only draft prefills while the gate is off (SPECCONSOLE_OFF_PREFILL_KV_ONLY=1) -----------


def test_a_kv_only_prefill_stores_the_full_forwards_kv_and_returns_one_row_per_request():
    torch.manual_seed(0)
    model = LlamaForCausalLMEagle3()
    ids, pos = torch.tensor([1, 7, 3, 30, 2]), torch.tensor([0, 1, 2, 0, 1])  # two prompts: 3 and 2 tokens
    full_fb, kv_fb = forward_batch(3 * H, logits=False), forward_batch(3 * H, logits=False)
    kv_fb.extend_seq_lens = torch.tensor([3, 2], dtype=torch.int32)
    with torch.no_grad():
        model(ids, pos, full_fb)
        out = draft_kv_only.kv_only_forward(model, Output, last_of_each_request=True)(ids, pos, kv_fb)
        every = draft_kv_only.kv_only_forward(model, Output)(ids, pos, forward_batch(3 * H, logits=False))
    assert torch.equal(kv_fb.token_to_kv_pool.k, full_fb.token_to_kv_pool.k)
    assert torch.equal(kv_fb.token_to_kv_pool.v, full_fb.token_to_kv_pool.v)
    # what a CaptureHiddenMode.LAST forward hands the EAGLE worker: one row per request (tokens 2 and 4)
    assert out.next_token_logits.shape == (2, VOCAB) and not out.next_token_logits.any()
    assert torch.equal(out.hidden_states, every.hidden_states[[2, 4]])


def prefill_runner(monkeypatch, env="1", reason=None, v2=True):
    if env is None:
        monkeypatch.delenv(draft_kv_only.PREFILL_ENV_SWITCH, raising=False)
    else:
        monkeypatch.setenv(draft_kv_only.PREFILL_ENV_SWITCH, env)
    monkeypatch.setattr(draft_kv_only, "unsupported_reason", lambda model: reason)
    runner = OffStepRunner.__new__(OffStepRunner)
    runner.v2 = v2
    runner.any_rank = bool
    runner._no_kv_only("not built in this test")
    model = EagerModel()
    model.model = types.SimpleNamespace(layers=[types.SimpleNamespace(self_attn=types.SimpleNamespace(attn=Radix()))])
    runner._draft_model = lambda: model
    monkeypatch.setattr(draft_kv_only, "kv_only_forward", lambda m, last_of_each_request=False: _kv_only_stand_in)
    runner._init_prefill_kv_only()
    return runner, model


def test_kv_only_prefills_are_the_default_on_v2_and_with_the_lean_v1_step_on_v1(monkeypatch):
    assert prefill_runner(monkeypatch, None)[0].prefill_kv_only is not None
    assert prefill_runner(monkeypatch, None, v2=False)[0].prefill_kv_only is not None  # lean v1: default
    monkeypatch.setenv("SPECCONSOLE_OFF_LEAN_V1", "0")  # measured together with the lean v1 step
    assert prefill_runner(monkeypatch, None, v2=False)[0].prefill_kv_only is None
    assert prefill_runner(monkeypatch, "1", v2=False)[0].prefill_kv_only is not None
    assert prefill_runner(monkeypatch, "0", v2=False)[0].prefill_kv_only is None
    assert prefill_runner(monkeypatch, "0")[0].prefill_kv_only is None


def test_a_prefill_while_off_runs_the_kv_only_draft_forward_and_leaves_the_draft_stale(monkeypatch):
    runner, model = prefill_runner(monkeypatch)
    seen = []

    def prefill(batch):  # the worker's forward: the target's, then the draft's prefill forward
        fb = kv_batch()
        seen.append(model.forward(torch.tensor([1, 2]), None, fb))
        return "prefill result"

    assert runner.run_prefill(prefill, "batch") == "prefill result"
    assert seen == ["kv-only output"] and runner.draft_stale and runner.kv_only_prefills == 1
    assert runner.prefill_kv_only.checks == 1 and runner.prefill_kv_only.ok  # the first prefills are checked
    assert model.forward.__func__ is EagerModel.forward  # the draft's own forward again afterwards


@pytest.mark.parametrize("kv_only_env", ["1", "0"])
def test_a_prefill_runs_as_sglang_runs_it_when_kv_only_prefills_are_not_asked_for_or_cannot(kv_only_env, monkeypatch):
    monkeypatch.setenv(draft_kv_only.ENV_SWITCH, kv_only_env)  # "0": no KV-only draft forward at all
    cases = (("0", None), ("1", "draft model X is not LlamaForCausalLMEagle3"))
    if kv_only_env == "0":
        cases += (("1", None),)
    for env, reason in cases:
        runner, model = prefill_runner(monkeypatch, env, reason)
        assert runner.prefill_kv_only is None
        assert runner.run_prefill(lambda b: model.forward(torch.tensor([1, 2]), None, kv_batch()), "batch") == "full output"
        assert not runner.draft_stale and runner.kv_only_prefills == 0


def test_a_failed_kv_only_prefill_proof_turns_kv_only_prefills_off(monkeypatch, caplog):
    runner, model = prefill_runner(monkeypatch)
    model.full_k = 5.0  # the full draft prefill stores other K/V than the KV-only one
    runner.run_prefill(lambda b: model.forward(torch.tensor([1, 2]), None, kv_batch()), "batch")
    assert runner.prefill_kv_only.mismatches == 1 and not runner.prefill_kv_only.ok
    assert "KV-only draft prefill" in caplog.text
    runner.draft_stale = False
    assert runner.run_prefill(lambda b: model.forward(torch.tensor([1, 2]), None, kv_batch()), "batch") == "full output"
    assert not runner.draft_stale and runner.kv_only_prefills == 1


class MmMode:
    def __init__(self, extend=True):
        self.extend = extend

    def is_extend(self):
        return self.extend

    def is_draft_extend(self, include_v2=False):
        return not self.extend


def test_a_multimodal_prefill_takes_its_embeddings_as_the_draft_model_does():
    # models/llama_eagle3.py: mm_input_embeds for all but the last token, whose embedding is the token's
    torch.manual_seed(0)
    model = LlamaForCausalLMEagle3()
    ids, pos = torch.tensor([1, 7, 3]), torch.tensor([0, 1, 2])
    mm = torch.randn(3, H)

    def fb():
        b = forward_batch(3 * H, tokens=3, logits=False)
        b.mm_input_embeds, b.forward_mode, b.contains_mm_inputs = mm, MmMode(), lambda: True
        return b

    plain, with_mm = forward_batch(3 * H, tokens=3, logits=False), fb()
    with torch.no_grad():
        draft_kv_only.kv_only_forward(model, Output)(ids, pos, plain)
        draft_kv_only.kv_only_forward(model, Output)(ids, pos, with_mm)
        inner = model.model
        expected = torch.cat([mm[:-1], inner.embed_tokens(ids[-1:])])
        _, k, _ = inner.layers[0].self_attn.forward_prepare_native(
            pos, torch.cat([inner.layers[0].input_layernorm(expected),
                            inner.layers[0].hidden_norm(inner.fc(fb().spec_info.hidden_states))], dim=-1))
    loc = [3, 9, 4]
    assert torch.equal(with_mm.token_to_kv_pool.k[loc], k.view(3, KV_HEADS, HEAD_DIM))
    assert not torch.equal(with_mm.token_to_kv_pool.k[loc], plain.token_to_kv_pool.k[loc])


# -- the lean post-processing of a KV-only OFF step's draft extend (v2, opt-in) -----------------


class LeanGraph:
    """SGLang's draft-extend graph runner as the lean path sees it: can_run's fields and replay."""

    require_mlp_tp_gather = require_mlp_sync = disable_padding = False
    max_bs = 8
    graphs = {}

    def __init__(self):
        self.replayed = []

    def replay(self, fb):
        self.replayed.append(fb)
        return types.SimpleNamespace(topk_p="graph topk_p", topk_index="graph topk_index",
                                     hidden_states="graph hidden")


def lean_setup(monkeypatch):
    calls = []

    class DraftInput:
        def __init__(self, **kw):
            self.kw = kw

        def prepare_for_extend_to_fill_draft_kvcache(self, batch, predict, num_draft_tokens, runner, graph):
            calls.append(("prepare", predict, num_draft_tokens, runner, graph))
            return types.SimpleNamespace(spec_info=types.SimpleNamespace(num_correct_drafts=None))

    monkeypatch.setattr(off_state, "_eagle_draft_input_cls", lambda: DraftInput)
    graph = LeanGraph()
    dw = types.SimpleNamespace(cuda_graph_runner_for_draft_extend=graph, plan_stream=None,
                               plan_stream_ctx=contextlib.nullcontext(), speculative_num_steps=0,
                               speculative_num_draft_tokens=1, draft_runner="draft runner")
    runner = OffStepRunner.__new__(OffStepRunner)
    runner.worker = types.SimpleNamespace(draft_worker=dw)
    runner.lean_draft_extend_steps = 0
    result = types.SimpleNamespace(logits_output=types.SimpleNamespace(hidden_states="target hidden"),
                                   next_token_ids="new tokens", accept_lens=torch.ones(3, dtype=torch.int32),
                                   next_draft_input=types.SimpleNamespace())
    return runner, graph, calls, result


def test_the_lean_draft_extend_takes_the_stale_top_k_from_the_graph_outputs(monkeypatch):
    runner, graph, calls, result = lean_setup(monkeypatch)
    originals = []
    lean = runner._lean_draft_extend_v2(lambda b, r: originals.append(b))
    lean(types.SimpleNamespace(seq_lens=torch.zeros(3)), result)
    assert calls == [("prepare", "new tokens", 1, "draft runner", graph)] and len(graph.replayed) == 1
    fb = graph.replayed[0]
    assert torch.equal(fb.spec_info.num_correct_drafts, torch.zeros(3, dtype=torch.int32))  # as SGLang sets them
    ndi = result.next_draft_input
    assert (ndi.topk_p, ndi.topk_index, ndi.hidden_states) == ("graph topk_p", "graph topk_index", "graph hidden")
    assert originals == [] and runner.lean_draft_extend_steps == 1
    # a batch larger than the graphs: SGLang's own draft extend (eager) runs
    lean(types.SimpleNamespace(seq_lens=torch.zeros(9)), result)
    assert len(originals) == 1 and runner.lean_draft_extend_steps == 1


def test_a_kv_only_off_step_takes_the_lean_draft_extend_only_when_asked_and_on_the_graph(monkeypatch):
    runner, forward = make_runner()
    owner = runner._draft_owner = type("DraftWorker", (), {"_draft_extend_for_decode": lambda self, b, r: "sglang's"})()
    runner.kv_only = draft_kv_only.KvOnlyRunner.__new__(draft_kv_only.KvOnlyRunner)
    runner.kv_only.count, runner.kv_only.ok = 0, True
    runner.worker = types.SimpleNamespace(draft_worker=owner)
    seen = []

    def step(batch):
        seen.append(owner._draft_extend_for_decode.__name__ if hasattr(owner._draft_extend_for_decode, "__name__") else "?")
        return forward(batch)

    runner.lean_draft_extend = True
    runner.run_off_step(step, "b1")
    runner.run_off_step(step, "b2", resume=True)  # the resume step: SGLang's full path
    runner.lean_draft_extend = False
    runner.run_off_step(step, "b3")
    assert seen == ["draft_extend_for_decode", "<lambda>", "<lambda>"]
    assert "_draft_extend_for_decode" not in vars(owner)  # the class's method again


def test_embeddings_the_runner_passes_are_used_as_the_draft_model_uses_them():
    # requests sent as input_embeds (or with embedding overrides): ModelRunner.forward_extend passes
    # input_embeds and LlamaModel.forward takes them instead of embedding the (made-up) token ids
    torch.manual_seed(0)
    model = LlamaForCausalLMEagle3()
    ids, pos = torch.tensor([1, 7, 3]), torch.tensor([0, 1, 2])
    given = torch.randn(3, H)
    by_kw, by_pos, by_ids = (forward_batch(3 * H, tokens=3, logits=False) for _ in range(3))
    other_ids = forward_batch(3 * H, tokens=3, logits=False)
    with torch.no_grad():
        fwd = draft_kv_only.kv_only_forward(model, Output)
        fwd(ids, pos, by_kw, input_embeds=given)
        fwd(ids, pos, by_pos, given)
        fwd(ids, pos, by_ids)
        fwd(torch.tensor([0, 0, 0]), pos, other_ids, input_embeds=given)
    loc = [3, 9, 4]
    assert torch.equal(by_kw.token_to_kv_pool.k[loc], by_pos.token_to_kv_pool.k[loc])
    assert torch.equal(by_kw.token_to_kv_pool.k[loc], other_ids.token_to_kv_pool.k[loc])  # the ids do not matter
    assert not torch.equal(by_kw.token_to_kv_pool.k[loc], by_ids.token_to_kv_pool.k[loc])


def test_the_rounding_tolerance_scales_with_each_tokens_largest_entry():
    proof = draft_kv_only.KvProof(Radix(), lambda n: True, rounding=True)
    ref = torch.tensor([[[20.0, 0.0]], [[1.0, 0.5]]])  # (tokens, heads, dims)
    near = ref.clone()
    near[0, 0, 1] = 0.08  # a near-zero entry of a large row carries the row's rounding: passes
    assert proof._agree((near, ref), (ref, ref)) and proof.inexact == 1
    wrong = ref.clone()
    wrong[1, 0, 1] = 1.5  # 1.0 off in a row whose largest entry is 1: fails
    assert not proof._agree((wrong, ref), (ref, ref))


def test_the_kv_only_graph_is_dropped_when_another_tp_rank_could_not_capture_it(monkeypatch, caplog):
    monkeypatch.setenv(draft_kv_only.GRAPH_ENV_SWITCH, "1")
    runner, built, _ = standalone_runner(monkeypatch, any_rank=lambda flag: True)  # some rank says "failed"
    assert len(built) == 1  # captured here ...
    assert isinstance(runner.kv_only, draft_kv_only.EagerKvOnly)  # ... but every rank runs it eagerly
    assert "not captured on another TP rank" in caplog.text


# -- the lean replay of the KV-only graph (draft_kv_only.lean_replay) ---------------------------


class LeanReplayRunner:
    """SGLang's draft-extend graph runner as lean_replay sees it: buffers, capture sizes, outputs."""

    def __init__(self, mode="DRAFT_EXTEND", gather=False):
        n = 8
        self.buffers = types.SimpleNamespace(
            input_ids=torch.full((n,), 7), out_cache_loc=torch.full((n,), 55), positions=torch.full((n,), 9),
            hidden_states=torch.zeros(n, 6), seq_lens=torch.full((n,), 3), req_pool_indices=torch.full((n,), 4))
        self.capture_bs, self.num_tokens_per_bs = [1, 2, 4, 8], 1
        self.forward_mode = types.SimpleNamespace(name=mode)
        self.require_mlp_tp_gather = gather
        self.deepep_adapter = types.SimpleNamespace(replay=lambda: None)
        self.output_buffers = {bs: Output(next_token_logits=torch.arange(bs * 2.0).view(bs, 2),
                                          hidden_states=torch.arange(bs * 3.0).view(bs, 3)) for bs in self.capture_bs}
        for out in self.output_buffers.values():
            out.topk_p, out.topk_index = out.hidden_states[:, :1], out.hidden_states[:, 1:2]
        self.replayed = []
        self.sglang_replays = 0

    def _replay(self, fb):
        self.replayed.append((self.bs, self.buffers.input_ids.clone(), self.buffers.out_cache_loc.clone(),
                              self.buffers.positions.clone()))

    def replay(self, fb):  # SGLang's own (DP attention keeps it)
        self.sglang_replays += 1
        return "sglang's replay"


def lean_fb(bs):
    return types.SimpleNamespace(batch_size=bs, input_ids=torch.arange(bs) + 100, out_cache_loc=torch.arange(bs) + 20,
                                 positions=torch.arange(bs) + 40,
                                 spec_info=types.SimpleNamespace(hidden_states=torch.ones(bs, 6)))


def test_the_lean_replay_fills_only_the_buffers_the_kv_only_graph_reads_and_zeroes_padded_slots():
    runner = LeanReplayRunner()
    out = draft_kv_only.lean_replay(runner)(lean_fb(3))  # padded to the graph of 4
    bs, ids, loc, pos = runner.replayed[0]
    assert bs == 4 and ids[:3].tolist() == [100, 101, 102] and loc.tolist()[:4] == [20, 21, 22, 0]
    assert pos.tolist()[:4] == [40, 41, 42, 0]  # the padded row writes the dummy slot 0 only
    assert runner.buffers.hidden_states[:3].eq(1).all() and runner.buffers.hidden_states[3:].eq(0).all()
    assert runner.buffers.seq_lens.eq(3).all() and runner.buffers.req_pool_indices.eq(4).all()  # untouched
    assert out.hidden_states.shape == (3, 3) and out.topk_p.shape == (3, 1) and out.next_token_logits.shape == (3, 2)
    fresh = LeanReplayRunner()
    full = draft_kv_only.lean_replay(fresh)(lean_fb(4))  # no padding: the graph's own output, nothing zeroed
    assert full is fresh.output_buffers[4] and fresh.replayed[0][2].tolist()[4:] == [55] * 4


def test_the_lean_replay_unpads_by_tokens_on_v2_and_leaves_dp_attention_to_sglang():
    v2 = LeanReplayRunner(mode="DRAFT_EXTEND_V2")
    assert draft_kv_only.lean_replay(v2)(lean_fb(3)).hidden_states.shape == (3, 3)
    dp = LeanReplayRunner(gather=True)
    assert draft_kv_only.lean_replay(dp)(lean_fb(3)) == "sglang's replay" and dp.replayed == []


def test_the_kv_only_graph_gets_the_lean_replay_when_asked_for(monkeypatch):
    class Runner(LeanReplayRunner):
        def __init__(self, worker, draft_extend_attn_backend, speculative_num_steps):
            super().__init__()
            worker.model.forward(None, None, None)  # the capture calls the (KV-only) model forward

    model = types.SimpleNamespace(forward=None)
    monkeypatch.setattr(draft_kv_only, "kv_only_forward", lambda m: (lambda *a: None))
    worker = types.SimpleNamespace(model=model)
    monkeypatch.delenv(draft_kv_only.LEAN_REPLAY_ENV_SWITCH, raising=False)
    assert draft_kv_only.build_kv_only_graph_runner(Runner, 1, worker, model).replay.__func__ is LeanReplayRunner.replay
    monkeypatch.setenv(draft_kv_only.LEAN_REPLAY_ENV_SWITCH, "1")
    assert "lean_replay" in draft_kv_only.build_kv_only_graph_runner(Runner, 1, worker, model).replay.__qualname__
