"""The lean v1 OFF step (``server_patch/off_step_v1.py``) on CPU stand-ins of SGLang 0.5.12's v1 batch.

The stand-ins follow what the lean step reads and writes of ``ScheduleBatch``, ``Req``, the verify
input and the draft-extend graph runner; ``test_sglang_hook_targets`` pins the SGLang lines the step
repeats. The GPU proof is ``bench.gate_correctness`` on v1 with ``SPECCONSOLE_OFF_LEAN_V1=1``
(``off_lean_v1_proof_ok``, oracle-exact outputs on the KV-sensitive pair).
"""

from __future__ import annotations

import contextlib
import types

import pytest
import torch

from server_patch import draft_kv_only, off_state, off_step_v1
from server_patch.deferred_draft_kv import DeferredDraftKv
from server_patch.off_state import OffStepRunner

VOCAB, HIDDEN3 = 11, 6


class Mode:
    def __init__(self, name):
        self.name = name

    def is_decode(self):
        return self.name == "DECODE"


def extend_after_decode(accept_tokens, seq_lens, accept_lens):
    """``create_extend_after_decode_spec_info`` for one accepted token per request (its CUDA kernel:
    position ``seq_len - accept_len + i``, bonus = the last accepted token)."""
    return (seq_lens - accept_lens).to(torch.long), accept_tokens.to(torch.int32)


SGL = types.SimpleNamespace(
    ForwardMode=types.SimpleNamespace(TARGET_VERIFY=Mode("TARGET_VERIFY"), DECODE=Mode("DECODE")),
    CaptureHiddenMode=types.SimpleNamespace(LAST="LAST"),
    EagleDraftInput=lambda **kw: types.SimpleNamespace(**kw),
    EagleDraftExtendInput=lambda **kw: types.SimpleNamespace(**kw),
    GenerationBatchResult=lambda **kw: types.SimpleNamespace(**kw),
    get_tp_group=lambda: types.SimpleNamespace(world_size=1),
    extend_after_decode=extend_after_decode,
)


class Req:
    def __init__(self, max_new):
        self.output_ids, self.max_new = [], max_new
        self.decode_batch_idx = 0
        self.kv_committed_len = self.kv_allocated_len = 0
        self.require_reasoning = False
        self.return_hidden_states = False
        self.finished_reason = None

    def check_finished(self):
        if len(self.output_ids) >= self.max_new:
            self.finished_reason = "length"

    def finished(self):
        return self.finished_reason is not None


class VerifyInput:
    """The trivial verify input: ``prepare_for_verify`` allocates one slot per request and maps it at
    the request's position, as SGLang's does (``assign_req_to_token_pool``)."""

    def __init__(self, bonus, seq_lens, seq_lens_sum, topk, mask, seq_lens_cpu, wrong_map=False):
        self.bonus, self.seq_lens_cpu, self.wrong_map = bonus, seq_lens_cpu, wrong_map
        self.positions = seq_lens.to(torch.int64)  # an alias, as in SGLang

    def prepare_for_verify(self, batch, page_size):
        bs = batch.batch_size()
        batch.out_cache_loc = torch.arange(100, 100 + bs, dtype=torch.int64)
        batch.input_ids = self.bonus
        cols = batch.seq_lens + (1 if self.wrong_map else 0)
        batch.req_to_token_pool.req_to_token[batch.req_pool_indices, cols] = batch.out_cache_loc.to(torch.int32)


def make_batch(bs=3, seq=(5, 9, 7)):
    reqs = [Req(max_new=2 if i == 0 else 99) for i in range(bs)]
    info = types.SimpleNamespace(penalizer_orchestrator=types.SimpleNamespace(is_required=False), is_all_greedy=True)
    spec = types.SimpleNamespace(bonus_tokens=torch.tensor([4, 5, 6], dtype=torch.int32)[:bs],
                                 topk_p=torch.tensor([[0.1], [0.2], [0.3]])[:bs],
                                 topk_index=torch.tensor([[11], [12], [13]])[:bs],
                                 hidden_states=torch.arange(bs * 2, dtype=torch.float32).view(bs, 2))
    batch = types.SimpleNamespace(
        reqs=reqs, seq_lens=torch.tensor(seq[:bs], dtype=torch.int64), seq_lens_cpu=torch.tensor(seq[:bs]),
        sampling_info=info, return_logprob=False, has_grammar=False, return_hidden_states=False,
        forward_mode=Mode("DECODE"), spec_info=spec, req_pool_indices=torch.tensor([2, 0, 1][:bs]),
        req_to_token_pool=types.SimpleNamespace(req_to_token=torch.zeros(3, 32, dtype=torch.int32)),
        model_config=types.SimpleNamespace(think_end_id=None), out_cache_loc=None)
    batch.batch_size = lambda: len(batch.reqs)
    batch.maybe_evict_swa = lambda: None
    batch.get_model_worker_batch = lambda seq_lens_cpu_cache=None: ("mwb", batch.forward_mode.name)
    return batch


class Graph:
    """The KV-only draft-extend graph runner: records what each replay got."""

    def __init__(self):
        self.replayed = []

    def replay(self, fb):
        self.replayed.append({k: getattr(fb, k) for k in ("batch_size", "input_ids", "positions", "out_cache_loc",
                                                          "seq_lens", "seq_lens_sum", "req_pool_indices")}
                             | {"hidden": fb.spec_info.hidden_states, "pool": fb.token_to_kv_pool,
                                "accept_cpu": fb.spec_info.num_accept_tokens_cpu,
                                "accept": fb.spec_info.num_accept_tokens.tolist(),
                                "seq_lens_cpu": fb.seq_lens_cpu.clone(), "positions": fb.positions.clone()})


def make_worker(logits, seen):
    def forward(mwb, is_verify=False):
        seen.append((mwb, is_verify))
        return types.SimpleNamespace(logits_output=types.SimpleNamespace(next_token_logits=logits.clone(),
                                                                         hidden_states="target hidden"),
                                     can_run_cuda_graph=True)

    runner = types.SimpleNamespace(
        _preprocess_logits=lambda out, info: seen.append("preprocess"),
        sampler=lambda out, info, rl, tl, ti, positions: (seen.append(("sample", positions.clone())),
                                                          torch.argmax(out.next_token_logits, -1))[1])
    def idle(batch):
        batch.spec_info = "idle draft input"

    return types.SimpleNamespace(topk=1, page_size=1, speculative_num_steps=0, _draft_preprocess_idle=idle,
                                 target_worker=types.SimpleNamespace(forward_batch_generation=forward, model_runner=runner),
                                 draft_model_runner=types.SimpleNamespace(token_to_kv_pool="draft pool"))


def lean(monkeypatch, logits, sampled=lambda n: True, graph_takes=lambda bs: True):
    monkeypatch.setattr(off_step_v1, "_sglang", lambda: SGL)
    seen, graph = [], Graph()
    step = off_step_v1.LeanOffStepV1(make_worker(logits, seen), graph, graph_takes, contextlib.nullcontext, sampled)
    return step, graph, seen


def logits_for(tokens):
    out = torch.zeros(len(tokens), VOCAB)
    out[torch.arange(len(tokens)), torch.tensor(tokens)] = 5.0
    return out


def test_a_lean_step_draws_stores_the_draft_kv_at_the_verify_slot_and_does_the_verifys_bookkeeping(monkeypatch):
    step, graph, seen = lean(monkeypatch, logits_for([7, 2, 9]))
    batch = make_batch()
    result = step.run(batch, VerifyInput)
    # the target verify ran as SGLang's, then the draw of a server without speculation
    assert seen[0] == (("mwb", "TARGET_VERIFY"), True) and seen[1] == "preprocess"
    assert torch.equal(seen[2][1], torch.tensor([5, 9, 7]))  # sampler positions: the input token's
    # the draft's K/V: token = the draw, position = old seq_len, the verify's slot, the target hidden
    (fb,) = graph.replayed
    assert fb["input_ids"].tolist() == [7, 2, 9] and fb["positions"].tolist() == [5, 9, 7]
    assert fb["out_cache_loc"].tolist() == [100, 101, 102] and fb["hidden"] == "target hidden"
    assert fb["seq_lens"].tolist() == [6, 10, 8] and fb["seq_lens_cpu"].tolist() == [6, 10, 8]
    assert fb["seq_lens_sum"] == 24 and fb["pool"] == "draft pool" and fb["batch_size"] == 3
    assert fb["accept_cpu"] == [1, 1, 1] and fb["accept"] == [1, 1, 1]  # what fa3 / flashinfer metadata read
    # verify()'s bookkeeping for a 1-token accept
    assert [r.output_ids for r in batch.reqs] == [[7], [2], [9]]
    assert [r.kv_committed_len for r in batch.reqs] == [1, 1, 1] == [r.kv_allocated_len for r in batch.reqs]
    assert [r.decode_batch_idx for r in batch.reqs] == [1, 1, 1]
    assert batch.seq_lens.tolist() == [6, 10, 8] and batch.seq_lens_cpu.tolist() == [6, 10, 8]
    assert batch.forward_mode is SGL.ForwardMode.DECODE
    # the next draft input: the draw as bonus token, the rest stale (a resume step refreshes it)
    spec = batch.spec_info
    assert spec.bonus_tokens.dtype == torch.int32 and spec.bonus_tokens.tolist() == [7, 2, 9]
    assert spec.topk_index.tolist() == [[11], [12], [13]] and spec.hidden_states.tolist() == [[0, 1], [2, 3], [4, 5]]
    assert result.num_correct_drafts == 0 and result.num_correct_drafts_per_req_cpu == [0, 0, 0]
    assert result.next_token_ids.tolist() == [7, 2, 9] and result.can_run_cuda_graph is True
    assert (step.steps, step.checks, step.mismatches, step.ok) == (1, 1, 0, True)


def filter_v1(batch):
    """The scheduler's ``filter_batch(v1_spec_info_filtered=True)``: the draft input must already
    hold exactly the unfinished requests' rows (``EagleDraftInput.filter_batch`` raises otherwise)."""
    keep = [i for i, r in enumerate(batch.reqs) if not r.finished()]
    if len(keep) != len(batch.spec_info.topk_p):
        raise ValueError(f"length of new_indices: {len(keep)} != length of topk_p: {len(batch.spec_info.topk_p)}")
    batch.reqs = [batch.reqs[i] for i in keep]


def test_a_request_that_finishes_leaves_the_draft_input_of_the_others_in_order(monkeypatch):
    step, _, _ = lean(monkeypatch, logits_for([7, 2, 9]))
    batch = make_batch()
    batch.reqs[1].max_new = 1  # the middle request finishes on this token
    step.run(batch, VerifyInput)
    assert [r.finished() for r in batch.reqs] == [False, True, False]
    assert batch.reqs[1].kv_committed_len == 1  # its slot is still its own; freed when it is released
    spec = batch.spec_info
    assert spec.bonus_tokens.tolist() == [7, 9] and spec.topk_index.tolist() == [[11], [13]]
    assert spec.hidden_states.tolist() == [[0, 1], [4, 5]]
    filter_v1(batch)
    assert len(batch.reqs) == 2


def test_when_every_request_finishes_the_draft_input_is_sglangs_idle_one(monkeypatch):
    step, _, _ = lean(monkeypatch, logits_for([7, 2, 9]))
    batch = make_batch()
    for r in batch.reqs:
        r.max_new = 1
    step.run(batch, VerifyInput)
    assert batch.spec_info == "idle draft input"


def test_a_draft_kv_slot_that_is_not_the_requests_fails_the_proof_and_turns_lean_steps_off(monkeypatch, caplog):
    step, _, _ = lean(monkeypatch, logits_for([7, 2, 9]))
    step.run(make_batch(), lambda *a: VerifyInput(*a, wrong_map=True))
    assert (step.checks, step.mismatches, step.ok) == (1, 1, False)
    assert "cache slots are not the request's" in caplog.text
    assert step.reason(make_batch()) == "proof failed" and step.fallbacks["proof failed"] == 1


def test_draft_positions_other_than_sglangs_fail_the_proof(monkeypatch, caplog):
    step, _, _ = lean(monkeypatch, logits_for([7, 2, 9]))
    monkeypatch.setattr(off_step_v1, "_sglang", lambda: types.SimpleNamespace(
        **{**vars(SGL), "extend_after_decode": lambda t, s, a: (s.to(torch.long), t.to(torch.int32))}))
    step.run(make_batch(), VerifyInput)
    assert step.mismatches == 1 and "prepare_extend_after_decode" in caplog.text


def test_custom_logit_processors_skip_the_argmax_check_instead_of_failing_a_correct_step(monkeypatch):
    step, _, _ = lean(monkeypatch, logits_for([7, 2, 9]))
    step.worker.target_worker.model_runner.sampler = lambda *a: torch.tensor([7, 2, 8])  # the processor's pick
    batch = make_batch()
    batch.sampling_info.has_custom_logit_processor = True
    step.run(batch, VerifyInput)
    assert (step.checks, step.mismatches) == (1, 0)


def test_a_greedy_token_that_is_not_the_argmax_fails_the_proof(monkeypatch, caplog):
    step, _, seen = lean(monkeypatch, logits_for([7, 2, 9]))
    step.worker.target_worker.model_runner.sampler = lambda *a: torch.tensor([7, 2, 8])
    step.run(make_batch(), VerifyInput)
    assert step.mismatches == 1 and "argmax" in caplog.text


def test_only_sampled_steps_are_checked(monkeypatch):
    step, _, _ = lean(monkeypatch, logits_for([7, 2, 9]), sampled=lambda n: n == 2)
    for _ in range(3):
        step.run(make_batch(), VerifyInput)
    assert (step.steps, step.checks) == (3, 1)


def test_a_non_greedy_draw_is_broadcast_from_rank_0_at_tp_above_1(monkeypatch):
    step, _, _ = lean(monkeypatch, logits_for([7, 2, 9]))
    sent = []
    monkeypatch.setattr(off_step_v1, "_sglang", lambda: types.SimpleNamespace(
        **{**vars(SGL), "get_tp_group": lambda: types.SimpleNamespace(world_size=2, broadcast=lambda t, src: sent.append(src))}))
    batch = make_batch()
    batch.sampling_info.is_all_greedy = False
    step.run(batch, VerifyInput)
    assert sent == [0]


@pytest.mark.parametrize("field, value, why", [
    ("return_logprob", True, "logprobs"), ("has_grammar", True, "grammar"),
    ("return_hidden_states", True, "hidden states"), ("forward_mode", Mode("IDLE"), "not a decode batch"),
])
def test_a_batch_that_asks_for_more_takes_sglangs_path(field, value, why, monkeypatch):
    step, _, _ = lean(monkeypatch, logits_for([7, 2, 9]))
    batch = make_batch()
    setattr(batch, field, value)
    assert step.reason(batch) == why and step.fallbacks[why] == 1
    assert step.reason(make_batch()) is None


def test_a_batch_beyond_the_kv_only_graph_takes_sglangs_path(monkeypatch):
    step, _, _ = lean(monkeypatch, logits_for([7, 2, 9]), graph_takes=lambda bs: bs < 3)
    assert step.reason(make_batch()) == "batch size beyond the KV-only graph"
    assert step.reason(make_batch(bs=2)) is None


def worker_for_reasons(**changes):
    sa = types.SimpleNamespace(enable_dp_attention=False, pp_size=1, enable_mamba_extra_buffer=lambda: False)
    target = types.SimpleNamespace(hybrid_gdn_config=None, mamba2_config=None, hybrid_lightning_config=None)
    w = types.SimpleNamespace(topk=1, page_size=1, server_args=sa, adaptive_controller=None,
                              target_worker=types.SimpleNamespace(model_runner=target))
    for key, value in changes.items():
        obj, name = (sa, key[3:]) if key.startswith("sa_") else ((target, key[7:]) if key.startswith("target_") else (w, key))
        setattr(obj, name, value)
    return w


@pytest.mark.parametrize("changes, why", [
    ({}, None), ({"topk": 4}, "topk > 1"), ({"page_size": 16}, "page size > 1"),
    ({"sa_enable_dp_attention": True}, "DP attention"), ({"sa_pp_size": 2}, "pipeline parallelism"),
    ({"sa_enable_mamba_extra_buffer": lambda: True}, "Mamba extra buffer"),
    ({"target_mamba2_config": object()}, "hybrid / Mamba target model"),
    ({"adaptive_controller": object()}, "SGLang's adaptive speculation"),
])
def test_servers_that_can_never_take_a_lean_step(changes, why):
    assert off_step_v1.server_reason(worker_for_reasons(**changes)) == why


# -- OffStepRunner: when a lean step runs -----------------------------------------------------


def routing_runner(lean_reason=None):
    runner = OffStepRunner.__new__(OffStepRunner)
    runner.v2, runner.early_seq_lens = False, False
    runner._no_kv_only()
    runner._draft_owner = types.SimpleNamespace()
    runner.on_state, runner.off_state, runner.off_kv_state = "on", "off", "off-kv"
    runner.kv_only = types.SimpleNamespace(count=0, ok=True)
    runner.applied = []
    runner._apply = lambda state: runner.applied.append(state)
    runner.off_target_graph = types.SimpleNamespace(count=0)
    runner.off_steps_cuda_graph = 0
    calls = []

    class Lean:
        steps = 0

        def reason(self, batch):
            return lean_reason

        def run(self, batch, verify_input):
            calls.append(("lean", verify_input))
            runner.off_target_graph.count += 1
            runner.kv_only.count += 1
            return "lean result"

    runner.lean_v1 = Lean()

    def forward(batch):
        calls.append("sglang")
        return types.SimpleNamespace()

    return runner, forward, calls


def test_a_gated_off_step_takes_the_lean_path_under_the_kv_only_state_and_leaves_the_draft_stale():
    runner, forward, calls = routing_runner()
    assert runner.run_off_step(forward, "batch") == "lean result"
    assert calls == [("lean", off_state._trivial_verify_input)] and runner.applied == ["off-kv", "on"]
    assert runner.draft_stale and runner.off_steps_cuda_graph == 1


def test_a_resume_step_and_a_batch_the_lean_step_refuses_take_sglangs_path():
    runner, forward, calls = routing_runner()
    runner.run_off_step(forward, "batch", resume=True)
    assert calls == ["sglang"]
    runner, forward, calls = routing_runner(lean_reason="logprobs")
    runner.run_off_step(forward, "batch")
    assert calls == ["sglang"]


def test_without_kv_only_off_steps_no_lean_step_runs():
    runner, forward, calls = routing_runner()
    runner.kv_only.ok = False
    runner.run_off_step(forward, "batch")
    assert calls == ["sglang"]


class TritonAttnBackend:
    pass


class OffDecodeKernelBackend(TritonAttnBackend):
    """Like off_attention's subclass of SGLang's triton backend."""


class FlashAttentionBackend:
    pass


def init_runner(monkeypatch, env, v2=False, kv_only_cls=draft_kv_only.KvOnlyRunner, sampling_mode="plain-decode-sampler",
                backend=OffDecodeKernelBackend, reference="full graph"):
    if env is None:
        monkeypatch.delenv(off_step_v1.ENV_SWITCH, raising=False)
    else:
        monkeypatch.setenv(off_step_v1.ENV_SWITCH, env)
    runner = OffStepRunner.__new__(OffStepRunner)
    runner.v2 = v2
    runner.worker = worker_for_reasons()
    runner.kv_only = kv_only_cls.__new__(kv_only_cls) if kv_only_cls else None
    if runner.kv_only is not None:
        runner.kv_only.full_runner, runner.kv_only.ok = reference, True
    runner.off_kv_state = types.SimpleNamespace(cuda_graph_runner_for_draft_extend="kv graph")
    runner.off_state = types.SimpleNamespace(draft_extend_attn_backend=backend())
    runner.off_sampling = sampling_mode
    runner.any_rank = bool
    runner._init_lean_v1()
    return runner


def test_lean_v1_steps_are_built_by_default_on_v1_with_the_kv_only_graph(monkeypatch):
    assert init_runner(monkeypatch, None).off_lean_v1 == "on"
    assert init_runner(monkeypatch, "0").lean_v1 is None and init_runner(monkeypatch, "0").off_lean_v1 is None
    assert init_runner(monkeypatch, None, v2=True).off_lean_v1 is None
    assert init_runner(monkeypatch, "1", v2=True).off_lean_v1 is None
    built = init_runner(monkeypatch, "1")
    assert built.off_lean_v1 == "on" and built.lean_v1.draft_extend == "kv graph"
    built.kv_only.ok = False  # the KV-only proof failed since: OFF steps take SGLang's full path
    assert built.off_lean_v1 == "KV-only draft extend off (its proof failed)"
    built.kv_only.ok, built.lean_v1.ok = True, False
    assert built.off_lean_v1 == "proof failed"
    assert (built.lean_v1.steps, built.lean_v1.checks, built.lean_v1.mismatches) == (0, 0, 0)
    eager = init_runner(monkeypatch, "1", kv_only_cls=draft_kv_only.EagerKvOnly)
    assert eager.lean_v1 is None and eager.off_lean_v1 == "no KV-only draft-extend CUDA graph"
    speculative = init_runner(monkeypatch, "1", sampling_mode="speculative-verify")
    assert speculative.off_lean_v1 == "OFF steps draw with SGLang's verify sampling"
    fa3 = init_runner(monkeypatch, "1", backend=FlashAttentionBackend)
    assert fa3.lean_v1 is None and "proven on triton only" in fa3.off_lean_v1
    eager_reference = init_runner(monkeypatch, "1", reference=draft_kv_only.EagerDraftExtend.__new__(draft_kv_only.EagerDraftExtend))
    assert eager_reference.off_lean_v1 == "no full OFF draft-extend CUDA graph to prove against"


class Deferred:
    """``deferred_draft_kv.DeferredDraftKv`` as the lean step uses it: records the calls."""

    def __init__(self, takes=True, check=False):
        self.calls, self._takes, self._check = [], takes, check

    def takes(self, n, hidden):
        return self._takes

    def wants_check(self):
        return self._check

    def snapshot(self, slots):
        self.calls.append(("snapshot", slots.tolist()))
        return "reference"

    def append(self, tokens, positions, slots, hidden, reference=None):
        self.calls.append(("append", tokens.tolist(), positions.tolist(), slots.tolist(), hidden, reference))

    def flush(self, enter_context=True):
        self.calls.append(("flush", enter_context))

    defer = DeferredDraftKv.defer  # the real sequence over the recorded calls


def test_a_deferred_lean_step_queues_the_draft_kv_inputs_instead_of_replaying_the_graph(monkeypatch):
    step, graph, _ = lean(monkeypatch, logits_for([7, 2, 9]), sampled=lambda n: False)
    step.deferred = Deferred()
    batch = make_batch()
    step.run(batch, VerifyInput)
    assert graph.replayed == []
    assert step.deferred.calls == [("append", [7, 2, 9], [5, 9, 7], [100, 101, 102], "target hidden", None)]
    assert [r.output_ids for r in batch.reqs] == [[7], [2], [9]] and batch.seq_lens.tolist() == [6, 10, 8]


def test_a_deferred_proof_step_replays_too_and_queues_its_kv_as_the_reference(monkeypatch):
    step, graph, _ = lean(monkeypatch, logits_for([7, 2, 9]), sampled=lambda n: False)
    step.deferred = Deferred(check=True)
    step.run(make_batch(), VerifyInput)
    assert len(graph.replayed) == 1
    assert step.deferred.calls == [("snapshot", [100, 101, 102]),
                                   ("append", [7, 2, 9], [5, 9, 7], [100, 101, 102], "target hidden", "reference")]


def test_a_step_the_buffer_does_not_take_flushes_the_pending_rows_then_replays(monkeypatch):
    step, graph, _ = lean(monkeypatch, logits_for([7, 2, 9]), sampled=lambda n: False)
    step.deferred = Deferred(takes=False)
    step.run(make_batch(), VerifyInput)
    assert step.deferred.calls == [("flush", False)] and len(graph.replayed) == 1  # inside the draft context
