"""Hooks on SGLang 0.5.12's ``Scheduler`` (one scheduler process per TP rank).

Where each decision lives (see ``sglang/srt/managers/scheduler.py`` 0.5.12):

- ``init_model_worker`` (AFTER): the draft worker exists; classify it, refuse what is
  unsupported, capture the OFF graphs, wrap the live worker's ``forward_batch_generation``.
- ``init_overlap`` (AFTER): the overlap scheduler's ``FutureMap`` exists; the lean OFF path
  through it (``off_future_map``, opt-in) is installed.
- ``get_next_batch_to_run`` (AFTER): the decode batch is final here (after retraction and
  ``prepare_for_decode``); the gate decides ON/OFF for exactly this batch.
- ``process_batch_result_decode`` / ``update_spec_metrics`` / ``_resolve_spec_overlap_tokens``
  / ``report_decode_stats``: accept-length metrics count speculative (ON) steps only.
- ``set_internal_state`` (AROUND) / ``get_internal_state`` (AFTER): runtime threshold changes
  and the ``spec_gate`` status of the HTTP contract.

Every hook is a pass-through on a scheduler without a gate (``_spec_gate`` unset).
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Dict, List, Optional

from server_patch import (auto_threshold, auto_trace, compat, contract, kv_reserve, metrics, off_future_map, options,
                          prefill_graph, proof, rank_gpu, sampling_warmup, triton_draft_extend)
from server_patch.contract import (
    DECODE_STEP_KEY,
    GATE_KEYS,
    HYSTERESIS_KEY,
    REASON_KEY,
    THRESHOLD_KEY,
    GateConfigError,
    parse_update,
)
from server_patch.gate import SpecGate, switch_log_line
from server_patch.off_state import (
    OffStepRunner,
    restore_req_spec_counters,
    snapshot_req_spec_counters,
)

logger = logging.getLogger("server_patch.spec_gate")

SCHEDULER = "sglang.srt.managers.scheduler.Scheduler"
GATE_ATTR = "_spec_gate"
OFF_RESULT_ATTR = "_spec_gate_off"
RESUME_RESULT_ATTR = "_spec_gate_resume"  # the full OFF step before the first ON step after OFF


def any_tp_rank(scheduler: Any) -> Callable[[bool], bool]:
    """``any_rank(flag)``: True on every TP rank when some rank passed True -- an all-reduce
    (MAX) of one int on the scheduler's TP CPU group (gloo), as SGLang's own CPU-side agreements
    use it; ``bool`` at TP 1. Every rank must call it at the same point (it blocks until all do)."""
    if (getattr(scheduler, "tp_size", 1) or 1) <= 1:
        return bool
    import torch
    import torch.distributed as dist

    group = scheduler.tp_cpu_group

    def any_rank(flag: bool) -> bool:
        t = torch.tensor([1 if flag else 0], dtype=torch.int32)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
        return bool(t.item())

    return any_rank


class GateRuntime:
    """Everything one scheduler knows about its gate: policy, OFF-step runner, identity."""

    def __init__(self, scheduler: Any, gate: SpecGate, runner_factory=OffStepRunner):
        worker = scheduler.draft_worker
        self.worker_class, self.spec_version = compat.classify_worker(worker)
        self.gate = gate
        self.overlap = bool(scheduler.enable_overlap)
        self.sglang_version = compat.sglang_version()
        sa = scheduler.server_args
        self.speculative_algorithm = sa.speculative_algorithm
        self.topk = worker.topk
        self.num_steps = worker.speculative_num_steps
        self.num_draft_tokens = worker.speculative_num_draft_tokens
        self.cuda_graph_max_bs = sa.cuda_graph_max_bs
        self.tp_rank = scheduler.tp_rank
        self.tp_size = scheduler.tp_size
        self.runner = runner_factory(worker, self.spec_version, any_rank=any_tp_rank(scheduler))
        self.in_off_result = False  # set while an OFF step's result is processed
        self.max_running_requests: Optional[int] = None  # the scheduler's, set by status()
        self.step_tokens: Optional[int] = None  # output tokens of the ON batch being processed
        self.step_timer = auto_threshold.StepTimer()
        self.trace = auto_trace.open_for(self.tp_rank)  # opt-in: every decode result, for bench.auto_trace
        self._table_rebuilt = False  # sync_table ran since the last decode result (for the trace)
        self._checks_at_result = proof.checks_run()  # sampled proof checks run by the last decode result
        self._scheduler = scheduler
        # how the target's prefills run, set after init (prefill_graph: its spec_gate fields)
        self.prefill_graph: Any = prefill_graph.EagerPrefill("not set up")
        self.sampling_warmup_s: Optional[float] = None  # sampling_warmup: seconds, None = not warmed
        # off_future_map (v2 overlap, opt-in): the lean OFF path through the FutureMap, and its status
        self.lean_future_map: Optional[off_future_map.LeanFutureMap] = None
        self._lean_future_map_status: Optional[str] = None
        # kv_reserve (v2, opt-in): KV slots reserved ahead in SGLang's prepare_for_decode (its spec_gate fields), set after init
        self.reserve: Any = kv_reserve.NoReserve(None)
        self.rank_gpu = rank_gpu.for_scheduler(scheduler)
        self.metrics = metrics.GateMetrics.for_scheduler(scheduler)
        self._wrap_worker(worker)

    def _wrap_worker(self, worker: Any) -> None:
        forward = worker.forward_batch_generation  # bound method of the class
        runtime = self

        def forward_batch_generation(batch, *args, **kwargs):
            if not batch.forward_mode.is_decode():
                # a prefill while speculation is off: its draft extend may store K/V only, or defer
                # them (the runner flushes the deferred rows where it does not)
                if getattr(batch.forward_mode, "name", None) == "EXTEND" and not runtime.gate.spec_enabled:
                    return runtime.runner.run_prefill(lambda b: forward(b, *args, **kwargs), batch)
                runtime.flush_deferred_kv()
                return forward(batch, *args, **kwargs)
            off = runtime.gate.current_off
            runtime.gate.current_off = False  # one decision, one batch
            # After KV-only OFF steps the draft's top-k and hidden state are stale: one full OFF
            # step refreshes them before the first speculative step (draft_kv_only).
            resume = not off and getattr(runtime.runner, "draft_stale", False)
            if off or resume:
                saved = None if runtime.spec_version == "v2" else snapshot_req_spec_counters(batch.reqs)
                result = runtime.runner.run_off_step(forward, batch, resume=resume)
                if saved is not None:  # v1 counts per-request verifies inside verify()
                    restore_req_spec_counters(saved)
                setattr(result, OFF_RESULT_ATTR, True)
                if resume:
                    setattr(result, RESUME_RESULT_ATTR, True)
                return result
            runtime.flush_deferred_kv()
            return forward(batch, *args, **kwargs)

        worker.forward_batch_generation = forward_batch_generation

    def flush_deferred_kv(self) -> None:
        """The draft K/V that OFF steps deferred, stored before a forward that is not such a step
        (``deferred_draft_kv``: a prefill or an ON step reads or writes the draft's KV cache)."""
        flush = getattr(self.runner, "flush_deferred_kv", None)
        if flush is not None:
            flush()

    # -- the auto threshold's inputs (server_patch/auto_threshold.py) -------------------------

    def on_decode_result(self, batch: Any, result: Any) -> None:
        """A decode batch's result was just processed: feed its step time (auto_threshold.StepTimer)
        and output tokens (ON: verified requests + accepted drafts; OFF: one per request)."""
        kind = ("resume" if getattr(result, RESUME_RESULT_ATTR, False)
                else "off" if getattr(result, OFF_RESULT_ATTR, False) else "on")
        bs = batch.batch_size()
        tokens = self.step_tokens if kind == "on" else bs
        checks = proof.checks_run()  # a check since the previous result: this period is not the step's own
        clean, self._checks_at_result = checks == self._checks_at_result, checks
        now, forward_iter = time.perf_counter(), getattr(batch, "forward_iter", None)
        if self.trace is not None:
            self.trace.add(forward_iter, now, kind, bs, auto_trace.context_tokens(batch), tokens, clean,
                           self._table_rebuilt)
        self._table_rebuilt = False
        self.gate.record_period(forward_iter, kind, now, bs, clean)
        sample = self.step_timer.observe(forward_iter, kind, now, bs, tokens, clean=clean)
        if sample is not None and sample.tokens is not None:
            self.gate.record_step(sample.batch_size, sample.on, sample.step_time_s, sample.tokens)

    def sync_table(self) -> None:
        """Every SYNC_EVERY decode steps: TP rank 0 rebuilds the auto threshold's table from its
        estimates and, at TP > 1, broadcasts it on the TP CPU group (as the scheduler broadcasts
        requests), so every rank decides from the same table. Called at the same decode step on
        every rank (every rank runs the same batches)."""
        sched = self._scheduler
        self._table_rebuilt = True
        if self.tp_size <= 1:
            self.gate.refresh_table()
            return
        from sglang.srt.utils import broadcast_pyobj

        wire = [self.gate.refresh_table()] if self.tp_rank == 0 else []
        wire = broadcast_pyobj(wire, sched.tp_group.rank, sched.tp_cpu_group, src=sched.tp_group.ranks[0])
        self.gate.set_table(wire[0])

    # -- this rank's GPU (server_patch/rank_gpu.py) ----------------------------------------

    @property
    def gpu(self) -> Dict[str, Any]:
        return self.rank_gpu.report()

    @property
    def host(self) -> str:
        return self.rank_gpu.identity["host"]

    @property
    def node_rank(self) -> int:
        return self.rank_gpu.identity["node_rank"]

    # -- spec_gate fields that live on the runner under other names (contract.SPEC_GATE_FIELDS)

    @property
    def off_cuda_graph(self) -> bool:
        return self.runner.has_off_cuda_graph

    @property
    def off_target_graph_replays(self) -> int:
        return self.runner.off_target_graph.count

    @property
    def off_draft_extend_graph_replays(self) -> int:
        return self.runner.off_draft_extend_graph.count

    @property
    def on_target_graph_replays(self) -> int:
        return self.runner.on_target_graph.count

    @property
    def off_draft_extend(self) -> str:
        """``kv-only`` (draft K/V only, server_patch/draft_kv_only.py) or ``full``."""
        return getattr(self.runner, "off_draft_extend", "full")

    @property
    def off_kv_only_graph_replays(self) -> int:
        return _kv(self.runner, "count")

    @property
    def off_kv_only_checks(self) -> int:
        """Sampled checks of the KV-only OFF draft extend, the KV-only draft prefill and the
        deferred draft K/V."""
        return sum(_kv(self.runner, "checks", which) for which in KV_PROOFS)

    @property
    def off_kv_only_mismatches(self) -> int:
        return sum(_kv(self.runner, "mismatches", which) for which in KV_PROOFS)

    @property
    def off_lean_v2_verify_steps(self) -> int:
        return _kv(self.runner, "steps", "lean_v2_verify")

    @property
    def off_lean_v2_verify_checks(self) -> int:
        return _kv(self.runner, "checks", "lean_v2_verify")

    @property
    def off_lean_v2_verify_mismatches(self) -> int:
        return _kv(self.runner, "mismatches", "lean_v2_verify")

    @property
    def off_deferred_draft_kv_rows(self) -> int:
        return _kv(self.runner, "rows", "deferred_kv")

    @property
    def off_deferred_draft_kv_flushes(self) -> int:
        return _kv(self.runner, "flushes", "deferred_kv")

    @property
    def off_kv_only_prefills(self) -> int:
        return getattr(self.runner, "kv_only_prefills", 0)

    @property
    def off_lean_draft_extend_steps(self) -> int:
        return getattr(self.runner, "lean_draft_extend_steps", 0)

    @property
    def off_lean_v1_steps(self) -> int:
        return _kv(self.runner, "steps", "lean_v1")

    @property
    def off_lean_v1_checks(self) -> int:
        return _kv(self.runner, "checks", "lean_v1")

    @property
    def off_lean_v1_mismatches(self) -> int:
        return _kv(self.runner, "mismatches", "lean_v1")

    @property
    def off_verify_metadata_checks(self) -> int:
        return _kv(self.runner, "checks", "fa3_verify_metadata")

    @property
    def off_verify_metadata_mismatches(self) -> int:
        return _kv(self.runner, "mismatches", "fa3_verify_metadata")

    @property
    def off_lean_future_map(self) -> Optional[str]:
        """``on``, ``proof failed``, why not built, or None when not asked for (off_future_map)."""
        lean = self.lean_future_map
        return lean.status if lean is not None else self._lean_future_map_status

    @property
    def off_lean_future_map_steps(self) -> int:
        return getattr(self.lean_future_map, "lean_stores", 0)

    @property
    def off_lean_future_map_checks(self) -> int:
        return getattr(self.lean_future_map, "checks", 0)

    @property
    def off_lean_future_map_mismatches(self) -> int:
        return getattr(self.lean_future_map, "mismatches", 0)

    def install_lean_future_map(self, future_map: Any) -> None:
        """The lean OFF path through the overlap scheduler's ``future_map`` (``off_future_map``),
        where asked for: OFF steps are the decode batches the worker wrapper runs through the
        runner (the gate's OFF decision, or the resume step while the draft is stale)."""
        runner = self.runner

        def off_step() -> bool:
            return bool(self.gate.current_off or getattr(runner, "draft_stale", False))

        def stale_off_result(result: Any) -> bool:
            return bool(getattr(result, OFF_RESULT_ATTR, False) and not getattr(result, RESUME_RESULT_ATTR, False)
                        and getattr(runner, "draft_stale", False))

        self.lean_future_map, self._lean_future_map_status = off_future_map.install(
            future_map, self.spec_version, off_step, stale_off_result, contract.sampled,
            getattr(runner, "any_rank", bool))

    @property
    def off_kv_only_runs(self) -> Optional[str]:
        """``cuda-graph`` or ``eager`` (how the KV-only draft extend runs), None without one."""
        return _kv(self.runner, "runs", default=None)

    @property
    def off_kv_only_inexact(self) -> int:
        return _kv(self.runner, "inexact")

    @property
    def off_resume_steps(self) -> int:
        return getattr(self.runner, "resume_steps", 0)

    @property
    def off_early_seq_lens(self) -> bool:
        return getattr(self.runner, "early_seq_lens", False)

    @property
    def off_early_seq_lens_steps(self) -> int:
        return getattr(self.runner, "early_seq_lens_steps", 0)

    @property
    def off_early_seq_lens_checks(self) -> int:
        return getattr(self.runner, "early_seq_lens_checks", 0)

    @property
    def off_early_seq_lens_mismatches(self) -> int:
        return getattr(self.runner, "early_seq_lens_mismatches", 0)

    def status(self, max_running_requests: Optional[int]) -> Dict[str, Any]:
        """This rank's ``spec_gate`` dict (the README's contract), without ``ranks``."""
        self.max_running_requests = max_running_requests
        return contract.spec_gate_status(*self._sources())

    def value(self, name: str) -> Any:
        """One spec_gate field of this rank (as :meth:`status` finds it)."""
        return next(getattr(s, name) for s in self._sources() if hasattr(s, name))

    def _sources(self) -> tuple:
        return self, self.gate, self.runner, self.prefill_graph, self.reserve, _RunnerDefaults


class _RunnerDefaults:
    """What a runner without the triton OFF-step attention reports (other attention backends)."""

    off_target_attention = None
    off_draft_extend_attention = None
    off_draft_extend_reason = None
    off_sampling = "speculative-verify"
    off_attention_checks = 0
    off_attention_mismatches = 0
    off_lean_v1 = None  # v2, or v1 with SPECCONSOLE_OFF_LEAN_V1=0
    off_verify_metadata = None  # not fa3, or SPECCONSOLE_OFF_FA3_FUSED_VERIFY_METADATA not 1
    off_deferred_draft_kv = None  # SPECCONSOLE_OFF_DEFERRED_DRAFT_KV=0
    off_lean_v2_verify = None  # SPECCONSOLE_OFF_LEAN_V2_VERIFY=0


#: the runner's proofs of the draft's K/V (``off_kv_only_checks`` / ``_mismatches`` sum them): the
#: KV-only OFF draft extend, the KV-only draft prefill, the deferred draft K/V
KV_PROOFS = ("kv_only", "prefill_kv_only", "deferred_kv")


def _kv(runner: Any, counter: str, which: str = "kv_only", default: Any = 0) -> Any:
    """``runner.<which>.<counter>`` (a proof's counter: the KV-only extend's, the KV-only
    prefill's, the lean v1 step's, the fused fa3 metadata's), ``default`` without that proof."""
    kv = getattr(runner, which, None)
    return getattr(kv, counter, default) if kv is not None else default


def _runtime(scheduler: Any) -> Optional[GateRuntime]:
    return getattr(scheduler, GATE_ATTR, None)


def _refuse(message: str) -> None:
    # Raised inside Scheduler.__init__, so SGLang's launcher reports the scheduler's failure
    # and the server does not start; never a silent no-op.
    logger.error(message)
    raise compat.UnsupportedSetup(message)


# -- hooks -------------------------------------------------------------------------------


def after_init_model_worker(result, scheduler, *args, **kwargs):
    try:
        config = options.config_from_env()
    except GateConfigError as exc:
        _refuse(f"spec_gate: {exc}")
    if config is None:
        return None
    try:
        compat.check_sglang_version(compat.sglang_version())
        compat.check_server_args(scheduler.server_args)
        if getattr(scheduler, "draft_worker", None) is None:
            raise compat.UnsupportedSetup("speculation gate refused: no speculative draft worker")
        target_runner = scheduler.draft_worker.target_worker.model_runner
        reason = compat.target_model_reason(target_runner)
        if reason is not None:
            raise compat.UnsupportedSetup(f"speculation gate refused: {reason}")
    except compat.UnsupportedSetup as exc:
        _refuse(str(exc))
    auto_prefill = options.switch(auto_threshold.PREFILL_ENV_SWITCH, False)
    runtime = GateRuntime(scheduler, SpecGate(config, auto_prefill=auto_prefill))
    setattr(scheduler, GATE_ATTR, runtime)
    if auto_prefill and config.auto:
        logger.info("spec_gate: the auto threshold charges each mode its measured prefills (%s=1)",
                    auto_threshold.PREFILL_ENV_SWITCH)
    runtime.prefill_graph = prefill_graph.enable(target_runner, contract.sampled,
                                                 getattr(runtime.runner, "any_rank", bool))
    try:
        runtime.reserve = kv_reserve.set_up(runtime.spec_version, scheduler.server_args, contract.sampled,
                                            getattr(runtime.runner, "any_rank", bool))
    except kv_reserve.KvReserveConfigError as exc:
        _refuse(f"spec_gate: {exc}")
    if isinstance(runtime.reserve, kv_reserve.KvReserve):
        logger.info("spec_gate: KV reserve: %d tokens a request beyond SGLang's spec-v2 allocation, topped up together",
                    runtime.reserve.tokens)
    elif runtime.reserve.kv_reserve is not None:
        logger.info("spec_gate: KV reserve not used: %s", runtime.reserve.kv_reserve)
    gpu_id = getattr(target_runner, "gpu_id", None)
    runtime.sampling_warmup_s = sampling_warmup.warm_verify_sampling("cuda" if gpu_id is None else f"cuda:{gpu_id}")
    runtime.rank_gpu.start()
    logger.info(contract.worker_line(runtime.worker_class, runtime.spec_version, runtime.overlap, config))
    kv_reason = getattr(runtime.runner, "off_draft_extend_reason", None)
    deferred = getattr(runtime.runner, "off_deferred_draft_kv", None) == "on"
    lean_verify = getattr(runtime.runner, "off_lean_v2_verify", None) == "on"
    logger.info(
        "spec_gate: OFF step = 1-token verify (%s, sampling: %s%s) + 1-token draft extend (%s, %s), "
        "CUDA graphs %s, next batch prepared %s",
        getattr(runtime.runner, "off_target_attention", None),
        getattr(runtime.runner, "off_sampling", _RunnerDefaults.off_sampling),
        ", greedy batches: argmax" if lean_verify else "",
        getattr(runtime.runner, "off_draft_extend", "full")
        + (f": {kv_reason}" if kv_reason else "") + (", K/V deferred" if deferred else ""),
        getattr(runtime.runner, "off_draft_extend_attention", None),
        "on" if runtime.runner.has_off_cuda_graph else "off",
        "during the verify" if getattr(runtime.runner, "early_seq_lens", False) else "after the verify",
    )
    if not runtime.runner.has_off_cuda_graph:
        logger.warning("spec_gate: CUDA graphs are disabled; OFF steps run eagerly")
    _log_triton_draft_extend_mend(runtime.spec_version, scheduler.server_args)
    # max_running_requests is final once init_model_worker returns (scheduler.py:727-741).
    if not config.auto:
        for warning in contract.capacity_warnings(
            config.threshold, scheduler.max_running_requests, runtime.cuda_graph_max_bs
        ):
            logger.warning("spec_gate: %s", warning.long)
    coverage = contract.graph_coverage_warning(scheduler.max_running_requests, runtime.cuda_graph_max_bs)
    if coverage is not None and runtime.runner.has_off_cuda_graph:
        logger.warning("spec_gate: %s", coverage.long)
    return None


def _log_triton_draft_extend_mend(spec_version: str, server_args: Any) -> None:
    """The start-up line about the mend of v1's triton draft extend (``triton_draft_extend``), where it applies."""
    def patched():
        from sglang.srt.plugins.hook_registry import HookRegistry

        return HookRegistry._patched

    backend = getattr(server_args, "decode_attention_backend", None) or getattr(server_args, "attention_backend", None)
    line = triton_draft_extend.startup_line(spec_version, backend, not getattr(server_args, "disable_cuda_graph", False),
                                            patched)
    if line is not None:
        logger.log(*line)


def after_init_overlap(result, scheduler, *args, **kwargs):
    runtime = _runtime(scheduler)
    if runtime is not None:
        runtime.install_lean_future_map(getattr(scheduler, "future_map", None))
    return None


def after_get_next_batch_to_run(ret, scheduler, *args, **kwargs):
    runtime = _runtime(scheduler)
    if runtime is None:
        return None
    gate = runtime.gate
    gate.current_off = False
    if ret is not None and ret.forward_mode.is_decode():
        if gate.decode_steps % auto_threshold.SYNC_EVERY == 0:
            runtime.sync_table()
            runtime.metrics.update(runtime)
        switch = gate.decide(ret.batch_size())
        if switch is not None:
            if gate.probe_switch:  # probes (bounded, ~2% of decode steps) stay out of the INFO log
                logger.debug(switch_log_line(switch, gate.config, "probe" if gate.probing else "probe ended"))
            else:
                logger.info(switch_log_line(switch, gate.config, gate.estimate_text(switch.batch_size)))
    return None


def around_process_batch_result_decode(original, scheduler, batch, result, *args, **kwargs):
    runtime = _runtime(scheduler)
    if runtime is None:
        return original(scheduler, batch, result, *args, **kwargs)
    runtime.in_off_result = bool(getattr(result, OFF_RESULT_ATTR, False))
    runtime.step_tokens = None
    try:
        return original(scheduler, batch, result, *args, **kwargs)
    finally:
        runtime.in_off_result = False
        runtime.on_decode_result(batch, result)


def around_update_spec_metrics(original, scheduler, bs, num_correct_drafts, *args, **kwargs):
    runtime = _runtime(scheduler)
    if runtime is not None:
        if runtime.in_off_result:
            return None  # an OFF step proposes no drafts; it is not a speculative step
        runtime.gate.record_accept(bs, num_correct_drafts)
        runtime.step_tokens = bs + num_correct_drafts
    return original(scheduler, bs, num_correct_drafts, *args, **kwargs)


def around_resolve_spec_overlap_tokens(original, scheduler, result, batch, *args, **kwargs):
    """An OFF result (v2 overlap): :func:`resolve_off_tokens`, SGLang's resolution without the
    per-request speculative counters an OFF step must not add to; others as SGLang resolves them."""
    runtime = _runtime(scheduler)
    if runtime is None or not getattr(result, OFF_RESULT_ATTR, False):
        return original(scheduler, result, batch, *args, **kwargs)
    return resolve_off_tokens(scheduler, result, batch)


def resolve_off_tokens(scheduler: Any, result: Any, batch: Any) -> List[List[int]]:
    """``Scheduler._resolve_spec_overlap_tokens`` (``scheduler_output_processor_mixin.py`` in
    0.5.12) for an OFF result: the same token lists, ``num_correct_drafts`` and committed KV
    lengths, without the per-request verify count, accepted-draft count and histogram (an OFF step
    is not a speculative step: SGLang's version would add to them, and restoring them cost a copy of
    every request's histogram per step, on a server that is CPU-bound there). Shapes:
    ``result.next_token_ids`` (bs * stride,) and ``accept_lens`` (bs,), on the CPU."""
    next_token_ids = result.next_token_ids.tolist()
    accept_lens = result.accept_lens.tolist()
    result.num_correct_drafts = sum(accept_lens) - len(batch.reqs)
    result.num_correct_drafts_per_req_cpu = [x - 1 for x in accept_lens]
    scheduler.model_worker.on_verify_complete_cpu(result.num_correct_drafts_per_req_cpu)
    stride = result.speculative_num_draft_tokens
    predict_tokens = []
    for i, req in enumerate(batch.reqs):
        predict_tokens.append(next_token_ids[i * stride: i * stride + accept_lens[i]])
        if req.is_retracted:
            continue
        # -1: prepare_for_decode pre-claimed the bonus slot
        req.kv_committed_len += -1 if req.finished() else accept_lens[i] - 1
    return predict_tokens


def around_report_decode_stats(original, scheduler, *args, **kwargs):
    """SGLang divides by the window's speculative forward count (``scheduler_metrics_mixin.py:681``).
    A window of OFF steps only has none; report the most recent ON accept length instead of
    dividing by zero or diluting it with OFF steps, and keep the lifetime totals clean."""
    runtime = _runtime(scheduler)
    if runtime is None or scheduler.spec_num_forward_ct > 0:
        return original(scheduler, *args, **kwargs)
    window = runtime.gate.recent_accept_window() or (1, 1)
    scheduler.spec_num_accept_tokens, scheduler.spec_num_forward_ct = window
    try:
        return original(scheduler, *args, **kwargs)
    finally:
        if scheduler.spec_num_forward_ct == window[1]:
            scheduler.spec_num_accept_tokens = scheduler.spec_num_forward_ct = 0  # not logged
        else:  # logged and folded into the lifetime totals: take the stand-in back out
            scheduler.spec_total_num_accept_tokens -= window[0]
            scheduler.spec_total_num_forward_ct -= window[1]


def _reply(updated: bool, server_args: Dict[str, Any]):
    """SGLang's ``SetInternalStateReqOutput`` (imported late: this module loads without SGLang)."""
    from sglang.srt.managers.io_struct import SetInternalStateReqOutput

    return SetInternalStateReqOutput(updated=updated, server_args=server_args)


def _global_server_args():
    from sglang.srt.server_args import get_global_server_args

    return get_global_server_args()


#: why a weight update that recaptures CUDA graphs is refused while the gate runs
RECAPTURE_REFUSED = (
    "spec_gate: refused a weight update with recapture_cuda_graph: the gate keeps the target's "
    "CUDA-graph runner of startup for its ON steps and its own OFF graphs, so recaptured graphs "
    "would be replaced by the old ones; update without recapture_cuda_graph (weights are copied "
    "in place, the graphs stay valid) or restart the server")


def around_update_weights_from_disk(original, scheduler, recv_req, *args, **kwargs):
    """Refuse ``recapture_cuda_graph`` (every TP rank refuses alike: the same request), answering
    as SGLang answers a failed update; any other weight update runs as SGLang's."""
    runtime = _runtime(scheduler)
    if runtime is None or not getattr(recv_req, "recapture_cuda_graph", False):
        return around_weight_change(original, scheduler, recv_req, *args, **kwargs)
    from sglang.srt.managers.io_struct import UpdateWeightFromDiskReqOutput

    logger.error(RECAPTURE_REFUSED)
    return UpdateWeightFromDiskReqOutput(False, RECAPTURE_REFUSED, 0)


def around_weight_change(original, scheduler, *args, **kwargs):
    """Before SGLang changes the weights or releases GPU memory: the draft K/V that OFF steps
    deferred are stored with the weights their hidden states came from (``deferred_draft_kv``)."""
    runtime = _runtime(scheduler)
    if runtime is not None:
        runtime.flush_deferred_kv()
    return original(scheduler, *args, **kwargs)


def around_set_internal_state(original, scheduler, recv_req, *args, **kwargs):
    update = dict(recv_req.server_args or {})
    if not any(k in update for k in GATE_KEYS):
        return original(scheduler, recv_req, *args, **kwargs)
    runtime = _runtime(scheduler)
    if runtime is None:
        return _reply(
            False,
            {REASON_KEY: contract.NOT_ENABLED_REASON},
        )
    gate = runtime.gate
    try:
        new = parse_update(gate.config, update, scheduler.max_running_requests)
    except GateConfigError as exc:
        logger.warning(contract.rejected_line(update, exc))
        return _reply(
            False,
            {
                REASON_KEY: str(exc),
                THRESHOLD_KEY: contract.wire_threshold(gate.config),
                HYSTERESIS_KEY: gate.config.hysteresis,
            },
        )
    old = gate.update(new)
    if old.threshold != new.threshold:
        logger.info(contract.change_line("threshold", old.threshold, new.threshold))
    if old.hysteresis != new.hysteresis:
        logger.info(contract.change_line("hysteresis", old.hysteresis, new.hysteresis))
    global_args = _global_server_args()
    setattr(global_args, THRESHOLD_KEY, contract.wire_threshold(new))
    setattr(global_args, HYSTERESIS_KEY, new.hysteresis)
    runtime.metrics.update(runtime)
    return _reply(
        True,
        {
            REASON_KEY: None,
            THRESHOLD_KEY: contract.wire_threshold(new),
            HYSTERESIS_KEY: new.hysteresis,
            DECODE_STEP_KEY: gate.decode_steps,  # the new config decides from this step on
        },
    )


def after_get_internal_state(result, scheduler, *args, **kwargs):
    runtime = _runtime(scheduler)
    if runtime is None:
        return None
    status = runtime.status(scheduler.max_running_requests)
    runtime.metrics.update(runtime)
    mine = contract.rank_entry(status)
    ranks = [mine]
    if scheduler.tp_size > 1:
        # Control requests are broadcast to every TP rank (scheduler.py:1750-1765), so every
        # rank runs this handler at the same point: a CPU all-gather is safe here.
        import torch.distributed as dist

        ranks = [None] * scheduler.tp_size
        dist.all_gather_object(ranks, mine, group=scheduler.tp_cpu_group)
    status["ranks"] = ranks
    result.internal_state["spec_gate"] = status
    return None


def register(registry, hook_type) -> None:
    """Register every scheduler hook with SGLang's ``HookRegistry`` (``hook_type`` = its ``HookType``)."""
    for target, hook, kind in HOOKS:
        registry.register(target, hook, getattr(hook_type, kind))


HOOKS = [
    (f"{SCHEDULER}.init_model_worker", after_init_model_worker, "AFTER"),
    (f"{SCHEDULER}.init_overlap", after_init_overlap, "AFTER"),
    (f"{SCHEDULER}.get_next_batch_to_run", after_get_next_batch_to_run, "AFTER"),
    (f"{SCHEDULER}.process_batch_result_decode", around_process_batch_result_decode, "AROUND"),
    (f"{SCHEDULER}.update_spec_metrics", around_update_spec_metrics, "AROUND"),
    (f"{SCHEDULER}._resolve_spec_overlap_tokens", around_resolve_spec_overlap_tokens, "AROUND"),
    (f"{SCHEDULER}.report_decode_stats", around_report_decode_stats, "AROUND"),
    (f"{SCHEDULER}.set_internal_state", around_set_internal_state, "AROUND"),
    (f"{SCHEDULER}.get_internal_state", after_get_internal_state, "AFTER"),
    (f"{SCHEDULER}.update_weights_from_disk", around_update_weights_from_disk, "AROUND"),
    (f"{SCHEDULER}.update_weights_from_distributed", around_weight_change, "AROUND"),
    (f"{SCHEDULER}.update_weights_from_tensor", around_weight_change, "AROUND"),
    (f"{SCHEDULER}.update_weights_from_ipc", around_weight_change, "AROUND"),
    (f"{SCHEDULER}.release_memory_occupation", around_weight_change, "AROUND"),
    (kv_reserve.TARGET, kv_reserve.around_prepare_for_decode, "AROUND"),
]
