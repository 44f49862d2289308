"""The scheduler hooks driven with stand-in scheduler/worker objects (no SGLang, no GPU).

The GPU run (bench/gate_correctness.py) checks the same behaviour inside real SGLang; these pin
the decision flow: one decision per decode batch, OFF only for decode batches, metrics from ON
steps only, runtime updates all-or-nothing.
"""

import logging
import types

import pytest

from server_patch import options, scheduler_hooks as sh
from server_patch.contract import GateConfig
from server_patch.gate import SpecGate


class Mode:
    def __init__(self, decode):
        self.decode = decode
        self.name = "DECODE" if decode else "EXTEND"  # ForwardMode's enum names

    def is_decode(self):
        return self.decode


class Batch:
    def __init__(self, bs, decode=True):
        self.forward_mode = Mode(decode)
        self.reqs = [Req() for _ in range(bs)]

    def batch_size(self):
        return len(self.reqs)


class Req:
    def __init__(self):
        self.spec_verify_ct = 0
        self.spec_num_correct_drafts = 0
        self.spec_correct_drafts_histogram = []


class Result:
    pass


def make_worker(class_name):
    def forward_batch_generation(self, batch):
        self.forwarded.append(batch)
        for r in batch.reqs:  # what v1's verify() does to per-request counters
            r.spec_verify_ct += 1
            r.spec_correct_drafts_histogram.append(1)
        return Result()

    cls = type(class_name, (), {"forward_batch_generation": forward_batch_generation})
    w = cls()
    w.forwarded = []
    w.topk, w.speculative_num_steps, w.speculative_num_draft_tokens = 1, 3, 4
    return w


class Runner:
    def __init__(self, worker, version, any_rank=bool):
        self.off_batches = []
        self.has_off_cuda_graph = True
        self.off_steps_cuda_graph = 0
        counter = types.SimpleNamespace(count=0)
        self.off_target_graph = self.off_draft_extend_graph = self.on_target_graph = counter

        self.kv_only_steps = True  # gated OFF steps leave the draft's top-k stale (KV-only)
        self.draft_stale = False
        self.resume_batches = []
        self.prefill_batches = []

    def run_prefill(self, forward, batch):
        self.prefill_batches.append(batch)
        return forward(batch)

    def run_off_step(self, forward, batch, resume=False):
        if resume:
            self.resume_batches.append(batch)
        else:
            self.off_batches.append(batch)
            self.off_steps_cuda_graph += 1
        self.draft_stale = self.kv_only_steps and not resume
        return forward(batch)


def make_scheduler(class_name="EAGLEWorkerV2", threshold=4, hysteresis=0):
    worker = make_worker(class_name)
    sched = types.SimpleNamespace(
        draft_worker=worker,
        enable_overlap=class_name == "EAGLEWorkerV2",
        server_args=types.SimpleNamespace(speculative_algorithm="EAGLE3", cuda_graph_max_bs=64),
        tp_rank=0,
        tp_size=1,
        max_running_requests=64,
        spec_num_forward_ct=0,
        spec_num_accept_tokens=0,
        spec_total_num_forward_ct=0,
        spec_total_num_accept_tokens=0,
    )
    runtime = sh.GateRuntime(sched, SpecGate(GateConfig(threshold, hysteresis)), runner_factory=Runner)
    setattr(sched, sh.GATE_ATTR, runtime)
    return sched, worker, runtime


def step(sched, batch):
    sh.after_get_next_batch_to_run(batch, sched)
    return sched.draft_worker.forward_batch_generation(batch)


def test_decode_batches_at_or_above_threshold_run_the_off_step():
    sched, worker, rt = make_scheduler(threshold=4)
    small, big = Batch(3), Batch(4)
    r_small = step(sched, small)
    r_big = step(sched, big)
    assert rt.runner.off_batches == [big]
    assert worker.forwarded == [small, big]
    assert not getattr(r_small, sh.OFF_RESULT_ATTR, False)
    assert getattr(r_big, sh.OFF_RESULT_ATTR) is True
    assert rt.gate.decode_steps_on == 1 and rt.gate.decode_steps_off == 1


def test_after_kv_only_off_steps_one_full_off_step_refreshes_the_draft_before_speculation():
    sched, worker, rt = make_scheduler(threshold=4)
    off1, off2, back, on = Batch(5), Batch(6), Batch(2), Batch(2)
    results = [step(sched, b) for b in (off1, off2, back, on)]
    assert rt.runner.off_batches == [off1, off2]
    assert rt.runner.resume_batches == [back]  # the gate said ON; the draft was stale
    assert worker.forwarded == [off1, off2, back, on]
    # the refresh step is an OFF result (no accept-length metrics), the next one speculates
    assert [getattr(r, sh.OFF_RESULT_ATTR, False) for r in results] == [True, True, True, False]
    assert rt.gate.decode_steps_off == 2 and rt.gate.decode_steps_on == 2
    assert rt.runner.draft_stale is False


def test_no_refresh_step_when_off_steps_ran_the_full_draft_extend():
    sched, worker, rt = make_scheduler(threshold=4)
    rt.runner.kv_only_steps = False
    for b in (Batch(5), Batch(2), Batch(2)):
        step(sched, b)
    assert len(rt.runner.off_batches) == 1 and rt.runner.resume_batches == []


def test_a_stale_draft_is_not_refreshed_by_prefill_batches():
    sched, worker, rt = make_scheduler(threshold=4)
    step(sched, Batch(5))
    prefill = Batch(3, decode=False)
    worker.forward_batch_generation(prefill)
    assert rt.runner.resume_batches == [] and rt.runner.draft_stale
    step(sched, Batch(3))
    assert len(rt.runner.resume_batches) == 1


def test_prefill_batches_are_never_gated_and_a_decision_is_used_once():
    sched, worker, rt = make_scheduler(threshold=1)
    decode = Batch(2)
    sh.after_get_next_batch_to_run(decode, sched)
    assert rt.gate.current_off
    worker.forward_batch_generation(Batch(2, decode=False))  # an extend batch in between
    assert rt.runner.off_batches == []
    worker.forward_batch_generation(decode)
    worker.forward_batch_generation(Batch(2))  # no decision taken for this one: ON
    assert rt.runner.off_batches == [decode]
    sh.after_get_next_batch_to_run(None, sched)  # idle loop iteration
    assert rt.gate.decode_steps_off == 1


def test_v1_off_step_leaves_per_request_spec_counters_untouched():
    sched, worker, rt = make_scheduler("EAGLEWorker", threshold=1)
    batch = Batch(3)
    step(sched, batch)
    assert [r.spec_verify_ct for r in batch.reqs] == [0, 0, 0]
    assert [r.spec_correct_drafts_histogram for r in batch.reqs] == [[], [], []]


def sglang_resolve(self, result, batch):
    """``Scheduler._resolve_spec_overlap_tokens`` of SGLang 0.5.12, as it reads (the reference of
    ``resolve_off_tokens``; ``update_spec_correct_drafts_histogram`` appends here)."""
    next_token_ids = result.next_token_ids.tolist()
    accept_lens = result.accept_lens.tolist()
    result.num_correct_drafts = sum(accept_lens) - len(batch.reqs)
    result.num_correct_drafts_per_req_cpu = [x - 1 for x in accept_lens]
    self.model_worker.on_verify_complete_cpu(result.num_correct_drafts_per_req_cpu)
    predict_tokens = []
    stride = result.speculative_num_draft_tokens
    for i, req in enumerate(batch.reqs):
        predict_tokens.append(next_token_ids[i * stride: i * stride + accept_lens[i]])
        if req.is_retracted:
            continue
        if req.finished():
            req.kv_committed_len -= 1
            continue
        req.kv_committed_len += accept_lens[i] - 1
        req.spec_verify_ct += 1
        num_correct_drafts = result.num_correct_drafts_per_req_cpu[i]
        req.spec_num_correct_drafts += num_correct_drafts
        req.spec_correct_drafts_histogram.append(num_correct_drafts)
    return predict_tokens


def test_v2_overlap_off_results_resolve_as_sglang_does_without_the_speculative_counters():
    import torch

    sched, worker, rt = make_scheduler("EAGLEWorkerV2", threshold=1)
    sched.model_worker = types.SimpleNamespace(on_verify_complete_cpu=lambda per_req: seen.append(per_req))
    seen = []

    def reqs():
        out = []
        for retracted, finished in ((False, False), (False, True), (True, False)):
            r = Req()
            r.kv_committed_len, r.is_retracted = 10, retracted
            r.finished = (lambda f: lambda: f)(finished)
            out.append(r)
        return out

    def result(off):
        res = Result()
        res.next_token_ids, res.accept_lens = torch.tensor([5, 6, 7]), torch.tensor([1, 1, 1])
        res.speculative_num_draft_tokens = 1
        if off:
            setattr(res, sh.OFF_RESULT_ATTR, True)
        return res

    off_batch, ref_batch = Batch(0), Batch(0)
    off_batch.reqs, ref_batch.reqs = reqs(), reqs()
    off, ref = result(True), result(False)
    tokens = sh.around_resolve_spec_overlap_tokens(lambda *a: pytest.fail("SGLang's ran"), sched, off, off_batch)
    assert tokens == sglang_resolve(sched, ref, ref_batch) == [[5], [6], [7]]
    assert (off.num_correct_drafts, off.num_correct_drafts_per_req_cpu) == (0, [0, 0, 0]) == (
        ref.num_correct_drafts, ref.num_correct_drafts_per_req_cpu)
    assert [r.kv_committed_len for r in off_batch.reqs] == [r.kv_committed_len for r in ref_batch.reqs] == [10, 9, 10]
    assert [r.spec_verify_ct for r in off_batch.reqs] == [0, 0, 0]  # SGLang's would count a verify
    assert [r.spec_verify_ct for r in ref_batch.reqs] == [1, 0, 0]
    assert [r.spec_correct_drafts_histogram for r in off_batch.reqs] == [[], [], []]
    assert seen == [[0, 0, 0], [0, 0, 0]]
    on = result(False)  # an ON result: SGLang's own
    assert sh.around_resolve_spec_overlap_tokens(lambda s, r, b: "sglang", sched, on, off_batch) == "sglang"


def test_spec_metrics_count_on_steps_only():
    sched, worker, rt = make_scheduler(threshold=4)
    calls = []

    def update_spec_metrics(self, bs, num_correct_drafts):
        calls.append((bs, num_correct_drafts))

    def process(self, batch, result):
        self.update_spec_metrics(batch.batch_size(), 0 if getattr(result, sh.OFF_RESULT_ATTR, False) else 5)

    sched.update_spec_metrics = lambda bs, n: sh.around_update_spec_metrics(update_spec_metrics, sched, bs, n)
    on_batch, off_batch = Batch(2), Batch(6)
    sh.around_process_batch_result_decode(process, sched, on_batch, step(sched, on_batch))
    sh.around_process_batch_result_decode(process, sched, off_batch, step(sched, off_batch))
    assert calls == [(2, 5)]
    assert rt.gate.accept_length_recent == pytest.approx(7 / 2)
    assert rt.in_off_result is False


def test_decode_log_window_without_on_steps_reports_last_on_accept_length():
    sched, worker, rt = make_scheduler()
    rt.gate.record_accept(4, 8)  # accept length 3.0
    seen = {}

    def report(self, *args):
        seen["ratio"] = self.spec_num_accept_tokens / self.spec_num_forward_ct
        self.spec_total_num_accept_tokens += self.spec_num_accept_tokens
        self.spec_total_num_forward_ct += self.spec_num_forward_ct
        self.spec_num_accept_tokens = self.spec_num_forward_ct = 0

    sh.around_report_decode_stats(report, sched, True)
    assert seen["ratio"] == pytest.approx(3.0)
    assert (sched.spec_total_num_accept_tokens, sched.spec_total_num_forward_ct) == (0, 0)

    def report_not_logging(self, *args):
        return None

    sh.around_report_decode_stats(report_not_logging, sched, True)
    assert (sched.spec_num_accept_tokens, sched.spec_num_forward_ct) == (0, 0)


def replies(monkeypatch):
    out = []
    monkeypatch.setattr(sh, "_reply", lambda updated, args: out.append((updated, args)) or (updated, args))
    global_args = types.SimpleNamespace()
    monkeypatch.setattr(sh, "_global_server_args", lambda: global_args)
    return out, global_args


def req(**server_args):
    return types.SimpleNamespace(server_args=server_args)


def test_set_internal_state_applies_valid_updates(monkeypatch, caplog):
    out, global_args = replies(monkeypatch)
    sched, worker, rt = make_scheduler(threshold=32, hysteresis=4)
    caplog.set_level(logging.INFO, logger="server_patch.spec_gate")
    updated, args = sh.around_set_internal_state(None, sched, req(speculative_disable_batch_threshold=16))
    assert updated is True and args[sh.THRESHOLD_KEY] == 16 and args[sh.HYSTERESIS_KEY] == 4
    assert rt.gate.config == GateConfig(16, 4)
    assert global_args.speculative_disable_batch_threshold == 16
    assert "spec_gate: threshold 32 -> 16" in caplog.text


def test_set_internal_state_rejects_as_a_whole_with_the_reason(monkeypatch, caplog):
    out, _ = replies(monkeypatch)
    sched, worker, rt = make_scheduler(threshold=32, hysteresis=4)
    for bad, why in [
        (dict(speculative_disable_batch_threshold=0), "threshold must be >= 1"),
        (dict(speculative_disable_batch_threshold=65), "max running requests 64"),
        (dict(speculative_disable_batch_threshold=8, speculative_disable_hysteresis=8), "must be < threshold"),
        (dict(speculative_disable_batch_threshold="8"), "must be an integer"),
        (dict(speculative_disable_batch_threshold=8, pp_max_micro_batch_size=4), "cannot be mixed"),
    ]:
        updated, args = sh.around_set_internal_state(None, sched, req(**bad))
        assert updated is False and why in args[sh.REASON_KEY]
        assert args[sh.THRESHOLD_KEY] == 32
    assert rt.gate.config == GateConfig(32, 4)
    assert "spec_gate: rejected" in caplog.text


def test_set_internal_state_passes_other_keys_through_and_refuses_without_gate(monkeypatch):
    out, _ = replies(monkeypatch)
    sched, worker, rt = make_scheduler()
    assert sh.around_set_internal_state(lambda s, r: "original", sched, req(pp_max_micro_batch_size=4)) == "original"
    plain = types.SimpleNamespace()
    updated, args = sh.around_set_internal_state(None, plain, req(speculative_disable_batch_threshold=4))
    assert updated is False and "not enabled" in args[sh.REASON_KEY]


def test_internal_state_carries_spec_gate_for_the_console():
    sched, worker, rt = make_scheduler("EAGLEWorker", threshold=8)
    step(sched, Batch(9))
    result = types.SimpleNamespace(internal_state={})
    sh.after_get_internal_state(result, sched)
    gate = result.internal_state["spec_gate"]
    assert gate["worker_class"] == "EAGLEWorker" and gate["spec_version"] == "v1"
    assert gate["spec_enabled"] is False and gate["switches"] == 1
    assert gate["last_switch"] == {"step": 0, "direction": "off", "batch_size": 9}
    (rank,) = gate["ranks"]
    assert rank.pop("host") and rank.pop("node_rank") == 0 and set(rank.pop("gpu")) >= {"uuid", "error"}
    assert gate["ranks"] == [{"tp_rank": 0, "spec_enabled": False, "threshold": 8, "hysteresis": 0,
                              "switches": 1, "decode_steps_on": 0, "decode_steps_off": 1,
                              "off_attention_checks": 0, "off_attention_mismatches": 0,
                              "off_early_seq_lens_checks": 0, "off_early_seq_lens_mismatches": 0,
                              "off_kv_only_checks": 0, "off_kv_only_mismatches": 0,
                              "off_lean_v1_checks": 0, "off_lean_v1_mismatches": 0,
                              "off_lean_v2_verify_checks": 0, "off_lean_v2_verify_mismatches": 0,
                              "off_verify_metadata_checks": 0, "off_verify_metadata_mismatches": 0,
                              "off_lean_future_map_checks": 0, "off_lean_future_map_mismatches": 0,
                              "off_resume_steps": 0, "kv_reserve_checks": 0, "kv_reserve_mismatches": 0,
                              "target_prefill_checks": 0, "target_prefill_mismatches": 0,
                              "mode": "manual", "decisions_digest": 2}]
    # a runner that reports no OFF draft-extend kind is taken as the full one
    assert gate["off_draft_extend"] == "full" and gate["off_kv_only_graph_replays"] == 0


def test_hooks_are_pass_through_on_a_scheduler_without_gate():
    plain = types.SimpleNamespace(spec_num_forward_ct=0)
    batch = Batch(100)
    assert sh.after_get_next_batch_to_run(batch, plain) is None
    assert sh.around_process_batch_result_decode(lambda s, b, r: "done", plain, batch, Result()) == "done"
    assert sh.around_update_spec_metrics(lambda s, bs, n: "m", plain, 3, 1) == "m"
    assert sh.around_report_decode_stats(lambda s, *a: "r", plain, True) == "r"
    assert sh.after_get_internal_state(types.SimpleNamespace(internal_state={}), plain) is None


def test_init_model_worker_hook_does_nothing_without_the_env(monkeypatch):
    monkeypatch.delenv(options.ENV_VAR, raising=False)
    sched = types.SimpleNamespace()
    assert sh.after_init_model_worker(None, sched) is None
    assert not hasattr(sched, sh.GATE_ATTR)


def test_init_model_worker_hook_refuses_unsupported_setups(monkeypatch):
    monkeypatch.setenv(options.ENV_VAR, '{"threshold": 8, "hysteresis": 0}')
    monkeypatch.setattr(sh.compat, "sglang_version", lambda: "0.5.12")
    sched, worker, rt = make_scheduler()
    delattr(sched, sh.GATE_ATTR)
    sched.server_args.enable_dp_attention = True
    with pytest.raises(sh.compat.UnsupportedSetup, match="data-parallel attention"):
        sh.after_init_model_worker(None, sched)
    monkeypatch.setattr(sh.compat, "sglang_version", lambda: "0.5.23")
    with pytest.raises(sh.compat.UnsupportedSetup, match="found 0.5.23"):
        sh.after_init_model_worker(None, sched)


def test_a_weight_update_that_recaptures_cuda_graphs_is_refused_while_the_gate_runs(monkeypatch, caplog):
    import sys

    class Output:
        def __init__(self, success, message, num_paused_requests=0):
            self.success, self.message = success, message

    monkeypatch.setitem(sys.modules, "sglang.srt.managers.io_struct", types.SimpleNamespace(
        UpdateWeightFromDiskReqOutput=Output))
    sched, _, _ = make_scheduler()
    ran = []
    update = lambda s, req: ran.append(req) or "updated"  # noqa: E731
    out = sh.around_update_weights_from_disk(update, sched, types.SimpleNamespace(recapture_cuda_graph=True))
    assert (out.success, ran) == (False, []) and "recapture_cuda_graph" in out.message
    assert "refused a weight update" in caplog.text
    assert sh.around_update_weights_from_disk(update, sched, types.SimpleNamespace(recapture_cuda_graph=False)) == "updated"
    plain = types.SimpleNamespace()
    assert sh.around_update_weights_from_disk(update, plain, types.SimpleNamespace(recapture_cuda_graph=True)) == "updated"


def test_prefills_while_the_gate_is_off_go_through_the_runners_prefill_path_and_others_do_not():
    sched, worker, rt = make_scheduler(threshold=4)
    first = Batch(3, decode=False)
    worker.forward_batch_generation(first)  # speculation on: SGLang's prefill as it is
    step(sched, Batch(5))  # the gate turns off
    second = Batch(2, decode=False)
    assert isinstance(worker.forward_batch_generation(second), Result)
    assert rt.runner.prefill_batches == [second] and worker.forwarded[0] is first and worker.forwarded[-1] is second
    idle = Batch(0, decode=False)
    idle.forward_mode.name = "IDLE"
    worker.forward_batch_generation(idle)  # not a prefill
    assert rt.runner.prefill_batches == [second]


def test_the_lean_future_map_is_installed_after_init_overlap_and_asks_the_gate_and_the_runner(monkeypatch):
    """off_future_map's predicates: an OFF step is the gate's OFF decision for the batch about to run or the
    resume step (draft stale); a stale OFF result is an OFF step's, not the resume step's, that left it stale."""
    monkeypatch.setenv("SPECCONSOLE_OFF_LEAN_FUTURE_MAP", "1")
    sched, _, rt = make_scheduler(threshold=4)
    calls = []
    sched.future_map = types.SimpleNamespace(
        resolve_future=lambda b: calls.append("resolve"), store_to_map=lambda i, r: calls.append("store"),
        store_to_map_for_new_batch=lambda i, d: calls.append("store_new"), is_empty_slice=lambda s: False,
        future_buffer_len=16, buf_initialized=False, spec_algo=types.SimpleNamespace(is_none=lambda: False),
        _lazy_init_buf=lambda d: None)
    sh.after_init_overlap(None, sched)
    lean = rt.lean_future_map
    assert rt.off_lean_future_map == "on" and sched.future_map.resolve_future == lean.resolve_future
    assert rt.status(64)["off_lean_future_map"] == "on"
    sh.after_get_next_batch_to_run(Batch(4), sched)  # the gate decides OFF for this batch
    assert lean.off_step()
    off = sched.draft_worker.forward_batch_generation(Batch(4))
    assert rt.runner.draft_stale and lean.stale_off_result(off)
    sh.after_get_next_batch_to_run(Batch(2), sched)  # ON, but the draft is stale: the resume step runs
    assert lean.off_step()
    resume = sched.draft_worker.forward_batch_generation(Batch(2))
    assert not lean.stale_off_result(resume) and not rt.runner.draft_stale
    sh.after_get_next_batch_to_run(Batch(2), sched)
    assert not lean.off_step()


def test_no_lean_future_map_unless_asked(monkeypatch):
    monkeypatch.delenv("SPECCONSOLE_OFF_LEAN_FUTURE_MAP", raising=False)
    sched, _, rt = make_scheduler()
    sched.future_map = object()
    sh.after_init_overlap(None, sched)
    assert rt.lean_future_map is None and rt.off_lean_future_map is None
    assert rt.status(64)["off_lean_future_map"] is None
