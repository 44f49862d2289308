"""A simulated SGLang server for ``specconsole demo``, CI and anyone without a GPU.

Run it like a real server, in its own process, on its own port::

    python -m console.demo_server --port 30000 --speculative-disable-batch-threshold 32 \\
        --speculative-disable-hysteresis 4 [--log FILE]

It serves the README contract — ``GET /health``, ``GET /server_info`` (with
``internal_states[0].spec_gate``), ``GET /v1/loads?include=core,spec`` (SGLang 0.5.12 shape),
``POST /set_internal_state`` (same validation and answers, ``decode_step`` included; accepted
changes apply from the next simulated decode batch, each one in the order received and each
logged as ``spec_gate: threshold A -> B``; a body that is not a request at all — empty, not
JSON, not ``{"server_args": {...}}`` alone — is answered HTTP 400 in the same shape; an integer
too long for a batch size is "out of range") — and writes SGLang-format log lines
(startup progress, ``Spec v2 is enabled ...``, ``spec_gate:`` lines, ``Decode batch`` lines) to
``--log FILE`` or to stdout. Standard library only (``http.server``).

Simulation: the number of concurrent requests follows ``--load`` (levels, e.g. ``1,64,4,128``,
each reached by a ramp and then held for ``--phase-seconds``, cycling). The running batch size
is that, capped at ``--max-running-requests`` (the rest waits in the queue). The gate switches
speculation off when batch size >= threshold N and back on when batch size < N - H. Generation
throughput (tok/s) and accept length come from the measured H200 table
(:mod:`console.throughput`), interpolated by batch size: EAGLE-3 column while ON, no-speculation
column while OFF. ``spec_gate`` also carries the draft-warmth fields (accept length of the first
ON batch after an off->on switch and of the first 16; that first batch is simulated 0.1 below the
usual value) and the graph-replay counters (OFF steps replay the OFF target and draft-extend
graphs, ON steps the ON target graph, each while the batch fits ``--cuda-graph-max-bs``).

Like SGLang it starts helper processes (one sleeping "scheduler" per TP rank) in its process
group, so process-group handling can be tested without a GPU.

Test knobs: ``--startup-seconds``, ``--crash-after SECONDS`` (log a traceback, exit non-zero,
leave the scheduler processes behind as a real crash can), ``--exit-code``, ``--stubborn``
(ignore SIGTERM), ``--worker-class NAME`` (pretend the live object is NAME: with the default
startup line this is a worker mismatch), ``--log-spec-version v1|v2`` (override the startup line),
``--load``, ``--phase-seconds``, ``--tick``, ``--seed``, ``--apply-delay``. Unknown SGLang arguments are ignored.
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, TextIO
from urllib.parse import parse_qs, urlparse

from console import throughput
from server_patch import contract
from server_patch.contract import GateConfig, GateConfigError
from server_patch import auto_threshold
from server_patch.gate import SpecGate

SGLANG_VERSION = "0.5.12"
MAX_TOTAL_TOKENS = 803_947  # KV cache tokens (the recorded 8B-shaped server's)
NOTE = "simulated server; " + throughput.SOURCE_NOTE

_SCHEDULER_CODE = """
import os, sys, time
parent = os.getppid()
orphaned = None
while True:
    time.sleep(0.2)
    if os.getppid() != parent:
        orphaned = orphaned or time.monotonic()
        if time.monotonic() - orphaned > 60:   # CI safety net: never outlive a lost test by long
            sys.exit(0)
"""


def build_parser() -> argparse.ArgumentParser:
    """Argument parser: the SGLang options the simulation uses, plus the demo/test knobs."""
    p = argparse.ArgumentParser(prog="python -m console.demo_server", description=__doc__.split("\n\n")[0],
                                allow_abbrev=False)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--log", default=None, help="append log lines to FILE (default: stdout)")
    p.add_argument("--model-path", default="demo/synthetic-8b")
    p.add_argument("--speculative-algorithm", default="EAGLE3")
    p.add_argument("--speculative-draft-model-path", default="demo/synthetic-8b-eagle3")
    p.add_argument("--speculative-num-steps", type=int, default=3)
    p.add_argument("--speculative-eagle-topk", type=int, default=1)
    p.add_argument("--speculative-num-draft-tokens", type=int, default=4)
    p.add_argument(contract.THRESHOLD_FLAG, dest=contract.THRESHOLD_KEY, type=contract.threshold_arg, default=None)
    p.add_argument(contract.HYSTERESIS_FLAG, dest=contract.HYSTERESIS_KEY, type=int,
                   default=contract.DEFAULT_HYSTERESIS)
    p.add_argument("--max-running-requests", type=int, default=96)
    p.add_argument("--cuda-graph-max-bs", type=int, default=96)
    p.add_argument("--tp-size", "--tp", dest="tp_size", type=int, default=1)
    p.add_argument("--nnodes", type=int, default=1,
                   help="spread the TP ranks over this many simulated hosts (node 0 is this machine)")
    p.add_argument("--disable-overlap-schedule", action="store_true")
    p.add_argument("--no-rank-gpus", action="store_true",
                   help="report no GPU per TP rank (as a server without the plugin's NVML reading): the "
                        "console then shows this machine's GPUs (specconsole demo --gpus real)")
    p.add_argument("--api-key", default=None)
    p.add_argument("--enable-metrics", action="store_true",
                   help="serve /metrics and fill /v1/loads' gen_throughput, as SGLang does with it")
    # demo / test knobs
    p.add_argument("--load", default="1,64,4,128", help="concurrency levels (req), e.g. 1,64,4,128; one value (or fixed:N) = constant")
    p.add_argument("--phase-seconds", type=float, default=10.0, help="seconds per load level (ramp + hold)")
    p.add_argument("--jitter", type=float, default=1.0, help="+- requests of seeded noise on the load")
    p.add_argument("--tick", type=float, default=0.1, help="seconds per simulated decode batch")
    p.add_argument("--log-interval", type=float, default=1.0, help="seconds between 'Decode batch' log lines")
    p.add_argument("--startup-seconds", type=float, default=3.0)
    p.add_argument("--crash-after", type=float, default=None, help="crash SECONDS after ready")
    p.add_argument("--exit-code", type=int, default=1, help="exit code of --crash-after")
    p.add_argument("--stubborn", action="store_true", help="ignore SIGTERM (needs SIGKILL)")
    p.add_argument("--worker-class", default=None, help="pretend the live draft worker is this class")
    p.add_argument("--log-spec-version", choices=("v1", "v2"), default=None, help="override the startup Spec line")
    p.add_argument("--apply-delay", type=float, default=0.0,
                   help="seconds before an accepted gate change takes effect (a slow decode step)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--loads-error", type=int, default=None, metavar="STATUS",
                   help="answer /v1/loads with this HTTP status (500: SGLang 0.5.12 with --enable-metrics "
                        "on FastAPI >= 0.137, without the plugin's mend)")
    return p


class LogWriter:
    """Writes SGLang-format lines: ``[YYYY-mm-dd HH:MM:SS TPn] message`` (TP tag optional)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.lock = threading.Lock()

    def __call__(self, msg: str, tp: int | None = None) -> None:
        ts = time.strftime("%Y-%m-%d %H:%M:%S")
        tag = f" TP{tp}" if tp is not None else ""
        with self.lock:
            for i, line in enumerate(msg.split("\n")):
                self.stream.write((f"[{ts}{tag}] {line}" if i == 0 else line) + "\n")
            self.stream.flush()


def parse_levels(text: str) -> list[float]:
    """``"1,64,4,128"`` -> [1.0, 64.0, 4.0, 128.0]; ``"fixed:8"`` or ``"8"`` -> [8.0]."""
    text = text.split(":", 1)[1] if text.startswith("fixed:") else text
    levels = [float(x) for x in text.split(",") if x.strip()]  # ValueError for a non-number
    if not levels or any(not math.isfinite(x) or x < 0 for x in levels):
        raise ValueError(f"bad --load {text!r}")
    return levels


def load_at(levels: list[float], phase_s: float, t: float, ramp_frac: float = 0.4) -> float:
    """Concurrent requests at time ``t`` seconds: ramp to each level, hold it, next level, cycle."""
    if len(levels) == 1 or phase_s <= 0:
        return levels[0]
    k = int(t // phase_s)
    f = (t - k * phase_s) / phase_s
    cur = levels[k % len(levels)]
    prev = levels[(k - 1) % len(levels)] if k > 0 else cur
    if f < ramp_frac:
        return prev + (cur - prev) * f / ramp_frac
    return cur


class SimulatedRunner:
    """The counters of server_patch's OFF-step runner (``off_state.OffStepRunner``), kept one
    simulated decode step at a time: OFF steps replay the OFF target graph and the KV-only draft
    extend graph (the sampled proof replays the full draft-extend graph too), the first ON step
    after OFF steps is a resume step (a full OFF step), ON steps replay the ON target graph; all
    only while the batch fits ``--cuda-graph-max-bs``. Attributes are named as the spec_gate
    fields (``contract.SPEC_GATE_FIELDS``)."""

    off_cuda_graph = True
    off_target_attention = off_draft_extend_attention = "triton-decode-kernel"
    off_draft_extend = "kv-only"
    off_draft_extend_reason = None
    off_kv_only_runs = "cuda-graph"
    off_kv_only_inexact = 0  # the demo's proof is the triton one: against the full graph, bit for bit
    off_kv_only_prefills = 0  # prefills are not simulated
    off_lean_draft_extend_steps = 0  # not simulated (needs the KV-only graph's outputs)
    # the demo simulates the per-step KV-only draft extend: it reports what a server with the lean
    # v1 step, the lean v2 verify and deferred draft K/V switched off (=0) reports
    off_lean_v1 = None
    off_lean_v1_steps = 0
    off_lean_v1_checks = 0
    off_lean_v1_mismatches = 0
    off_verify_metadata = None  # fa3 only, opt-in (SPECCONSOLE_OFF_FA3_FUSED_VERIFY_METADATA=1)
    off_verify_metadata_checks = 0
    off_verify_metadata_mismatches = 0
    off_lean_future_map = None  # v2 overlap only, opt-in (SPECCONSOLE_OFF_LEAN_FUTURE_MAP=1)
    off_lean_future_map_steps = off_lean_future_map_checks = off_lean_future_map_mismatches = 0
    kv_reserve = kv_reserve_tokens = None  # v2 only, opt-in (SPECCONSOLE_KV_RESERVE=R)
    kv_reserve_topups = kv_reserve_skipped_steps = kv_reserve_checks = kv_reserve_mismatches = 0
    off_deferred_draft_kv = None
    off_lean_v2_verify = None
    off_lean_v2_verify_steps = off_lean_v2_verify_checks = off_lean_v2_verify_mismatches = 0
    off_deferred_draft_kv_rows = off_deferred_draft_kv_flushes = 0
    off_sampling = "plain-decode-sampler"  # server_patch's default at topk 1 (off_sampling.PLAIN)
    off_attention_mismatches = off_kv_only_mismatches = off_early_seq_lens_mismatches = 0
    # prefills are not simulated: the target prefill graph is reported as a real server starts it
    target_prefill = "piecewise-cuda-graph"
    target_prefill_reason = None
    target_prefill_graph_replays = target_prefill_checks = target_prefill_mismatches = 0

    def __init__(self, early_seq_lens: bool) -> None:
        self.off_early_seq_lens = early_seq_lens  # v2: the next batch is prepared during the OFF verify
        self.off_steps_cuda_graph = 0
        self.off_target_graph_replays = 0
        self.off_draft_extend_graph_replays = 0
        self.on_target_graph_replays = 0
        self.off_kv_only_graph_replays = 0
        self.off_resume_steps = 0
        self.draft_stale = False

    def step(self, on: bool, graph: bool) -> None:
        """One decode step with speculation ``on`` or off; ``graph``: the batch has a CUDA graph."""
        if not graph:
            return
        if on and self.draft_stale:  # the resume step: a full OFF step
            self.draft_stale = False
            self.off_resume_steps += 1
            self.off_target_graph_replays += 1
            self.off_draft_extend_graph_replays += 1
        elif on:
            self.on_target_graph_replays += 1
        else:
            self.off_steps_cuda_graph += 1
            self.off_target_graph_replays += 1
            self.off_kv_only_graph_replays += 1
            if contract.sampled(self.off_kv_only_graph_replays):
                self.off_draft_extend_graph_replays += 1  # the proof replays the full draft extend
            self.draft_stale = True

    @property
    def off_attention_checks(self) -> int:
        # each OFF backend checks its first calls, then every 256th: the target verify on every
        # OFF (and resume) step, the draft extend where the full draft-extend graph ran
        return (contract.sampled_count(self.off_target_graph_replays)
                + contract.sampled_count(self.off_draft_extend_graph_replays))

    @property
    def off_kv_only_checks(self) -> int:
        return contract.sampled_count(self.off_kv_only_graph_replays)

    @property
    def off_early_seq_lens_steps(self) -> int:
        return self.off_steps_cuda_graph if self.off_early_seq_lens else 0

    @property
    def off_early_seq_lens_checks(self) -> int:
        return contract.sampled_count(self.off_early_seq_lens_steps)


@dataclass
class Identity:
    """What a real server's spec_gate says about the server itself (worker, parameters, limits)."""

    worker_class: str
    spec_version: str
    overlap: bool
    speculative_algorithm: str
    topk: int
    num_steps: int
    num_draft_tokens: int
    max_running_requests: int
    cuda_graph_max_bs: int
    tp_size: int
    tp_rank: int = 0
    sglang_version: str = SGLANG_VERSION
    host: str = ""
    node_rank: int = 0
    gpu: Any = None


def _round(value: float | None) -> float | None:
    return round(value, 3) if value is not None else None


class Simulation:
    """State of the simulated server; all public methods are thread-safe.

    The gate is server_patch's own :class:`~server_patch.gate.SpecGate`, fed one simulated
    decode batch at a time; changes go through the contract's validation
    (:func:`server_patch.contract.parse_update`), as on a real server.
    """

    def __init__(self, args: argparse.Namespace, log: LogWriter) -> None:
        self.args = args
        self.log = log
        self.lock = threading.Lock()
        self.rng = random.Random(args.seed)
        self.levels = parse_levels(args.load)
        overlap = not args.disable_overlap_schedule
        worker_class = args.worker_class or ("EAGLEWorkerV2" if overlap else "EAGLEWorker")
        self.identity = Identity(
            worker_class=worker_class, spec_version="v2" if worker_class.endswith("V2") else "v1",
            overlap=overlap, speculative_algorithm=args.speculative_algorithm, topk=args.speculative_eagle_topk,
            num_steps=args.speculative_num_steps, num_draft_tokens=args.speculative_num_draft_tokens,
            max_running_requests=args.max_running_requests, cuda_graph_max_bs=args.cuda_graph_max_bs,
            tp_size=args.tp_size)
        threshold = getattr(args, contract.THRESHOLD_KEY)
        self.gate = (SpecGate(GateConfig(contract.parse_threshold(threshold), getattr(args, contract.HYSTERESIS_KEY)))
                     if threshold is not None else None)
        self.runner = SimulatedRunner(early_seq_lens=self.identity.spec_version == "v2")
        self.timer = auto_threshold.StepTimer()  # step times on the simulated clock
        self.clock_s = 0.0  # simulated GPU time (s)
        #: accepted changes not applied yet, in the order they were accepted
        self.pending: list[GateConfig] = []
        self.pending_at = 0.0
        self.step = 0  # decode batches so far
        self.steps_per_tick = 1
        self.batch = 0
        self.waiting = 0
        self.tput = 0.0
        #: SGLang's accept length of the last 40 decode batches: None when none of them speculated
        #: (/server_info's avg_spec_accept_length, /v1/loads' speculative block) ...
        self.accept_recent: float | None = None
        #: ... while the /metrics gauge keeps its last value (recorded on the H200, 2026-12-01)
        self.accept_gauge = 0.0
        self.accept_now: float | None = None
        self.token_usage = 0.0
        #: what SGLang's periodic figures show: the values at the last Decode batch line
        self.logged_tput = 0.0
        self.logged_batch = 0
        self.logged_waiting = 0
        self.decode_tokens = 0  # decode tokens so far (sglang:realtime_tokens_total{mode="decode"})
        self.t0 = time.monotonic()
        self.ready = False
        self.hostname = socket.gethostname()

    @property
    def overlap(self) -> bool:
        return self.identity.overlap

    @property
    def worker_class(self) -> str:
        return self.identity.worker_class

    @property
    def spec_version(self) -> str:
        return self.identity.spec_version

    @property
    def spec_on(self) -> bool:
        """Speculation on for the last decode batch (always, without the gate)."""
        return self.gate is None or self.gate.spec_enabled

    # -- simulation ------------------------------------------------------------------------

    def _log_ranks(self, line: str) -> None:
        for r in range(self.args.tp_size):  # every TP rank's scheduler logs it
            self.log(line, tp=r)

    def _decode_step(self) -> bool:
        """One decode batch of ``self.batch`` requests through the gate; True when it runs ON."""
        self.step += 1
        if self.gate is None:
            return True
        if self.gate.decode_steps % auto_threshold.SYNC_EVERY == 0:
            self.gate.refresh_table()  # as the scheduler hooks do (TP rank 0's table)
        switch = self.gate.decide(self.batch)
        if switch is not None:
            if not self.gate.probing:
                self._log_ranks(contract.switch_line(switch.direction, switch.batch_size, self.gate.config,
                                                     self.gate.estimate_text(switch.batch_size)))
        return self.gate.spec_enabled

    def tick(self, now: float) -> None:
        """Advance by one tick (``--tick`` seconds of decode batches) at wall time ``now`` (monotonic s)."""
        a = self.args
        with self.lock:
            if self.pending and now >= self.pending_at:
                self._apply_pending()
            target = load_at(self.levels, a.phase_seconds, now - self.t0)
            if a.jitter > 0 and target >= 2:
                target += self.rng.uniform(-a.jitter, a.jitter)
            target = max(0, int(round(target)))
            self.batch = min(target, a.max_running_requests)
            self.waiting = target - self.batch
            if self.batch == 0:
                self.tput = 0.0
                return
            on = self._decode_step()
            noise = 1.0 + self.rng.uniform(-0.02, 0.02)
            self.tput = throughput.gen_throughput(self.batch, on) * noise
            steps_per_s = self.tput / self.batch
            if on:
                self.accept_now = throughput.accept_length(self.batch) + self.rng.uniform(-0.03, 0.03)
                self.accept_recent = self.accept_gauge = self.accept_now
                steps_per_s /= self.accept_now
            else:
                self.accept_recent = None
            steps = max(1, int(round(steps_per_s * a.tick)))
            self.steps_per_tick = steps
            self.decode_tokens += int(round(self.tput * a.tick))
            graph = self.batch <= a.cuda_graph_max_bs
            for k in range(steps):
                if k:
                    on = self._decode_step()
                self._run_step(on, graph)
            self.token_usage = min(1.0, (self.batch + self.waiting * 0.2) * 384 / 812_345 * 8)

    def _run_step(self, on: bool, graph: bool) -> None:
        """The decode batch just decided, run ON (a speculative verify) or OFF; its step time
        (from the H200 table) and output tokens feed the gate's auto-threshold estimates."""
        resume = on and self.runner.draft_stale and graph
        self.runner.step(on, graph)
        if self.gate is None:
            return
        tokens = self.batch
        if on and self.accept_now is not None:
            accept = self.accept_now
            # the first ON batch after OFF steps: the OFF steps' draft extend kept the draft's KV
            # current, so it is only a little below the usual accept length
            if self.gate.steps_since_on == 0 and self.gate.switches:
                accept -= 0.1
            correct = max(0, round(self.batch * (accept - 1.0)))
            self.gate.record_accept(self.batch, correct)
            tokens += correct
        kind = "resume" if resume else "on" if on else "off"
        tput = throughput.gen_throughput(self.batch, on) * (1.0 + self.rng.uniform(-0.02, 0.02))
        self.clock_s += tokens / tput if tput > 0 else 0.0
        sample = self.timer.observe(self.step, kind, self.clock_s, self.batch, tokens)
        if sample is not None:
            self.gate.record_step(sample.batch_size, sample.on, sample.step_time_s, sample.tokens)

    def _apply_pending(self) -> None:
        """Apply the accepted changes one by one, in order, logging each (as every TP rank does)."""
        for new in self.pending:
            old = self.gate.update(new)
            for key in ("threshold", "hysteresis"):
                if getattr(old, key) != getattr(new, key):
                    self._log_ranks(contract.change_line(key, getattr(old, key), getattr(new, key)))
        self.pending = []

    def current_values(self) -> tuple[int | None, int | None]:
        """(threshold, hysteresis) in force after the accepted changes; (None, None) without the gate."""
        with self.lock:
            return self._current()

    def _effective_config(self) -> GateConfig | None:
        if self.gate is None:
            return None
        return self.pending[-1] if self.pending else self.gate.config

    def _current(self) -> tuple[int | str | None, int | None]:
        cfg = self._effective_config()
        return (None, None) if cfg is None else (contract.wire_threshold(cfg), cfg.hysteresis)

    def decode_line(self) -> str | None:
        """SGLang's periodic ``Decode batch`` line for the current state (None when idle)."""
        with self.lock:
            if self.batch == 0:
                return None
            on = self.spec_on
            al = self.accept_now if on and self.accept_now else 1.0
            rate = (al - 1.0) / max(1, self.args.speculative_num_steps)
            tokens = self.batch * 384
            graph = self.batch <= self.args.cuda_graph_max_bs
            self.logged_tput, self.logged_batch, self.logged_waiting = self.tput, self.batch, self.waiting
            return (
                f"Decode batch, #running-req: {self.batch}, #token: {tokens}, token usage: {self.token_usage:.2f}, "
                f"accept len: {al:.2f}, accept rate: {rate:.2f}, cuda graph: {graph}, "
                f"gen throughput (token/s): {self.tput:.2f}, #queue-req: {self.waiting}"
            )

    # -- HTTP views ------------------------------------------------------------------------

    def rank_gpu(self, rank: int) -> dict[str, Any]:
        """What TP rank ``rank``'s scheduler reports of its GPU (server_patch/rank_gpu.py's fields):
        node 0 is this machine (the UUIDs of console/nvml_sim.py's simulated GPUs), the other
        nodes are made-up hosts; utilization follows the load."""
        a = self.args
        per_node = max(1, a.tp_size // max(1, a.nnodes))
        node, local = divmod(rank, per_node)
        util = min(100.0, 20.0 + 0.7 * self.batch) if self.batch else 0.0
        return {
            "host": self.hostname if node == 0 else f"demo-node{node}", "node_rank": node, "gpu_id": local,
            "uuid": f"GPU-5e1f0000-0000-0000-{node:04d}-{local:012d}", "nvml_index": local, "name": "NVIDIA H200",
            "util_pct": util, "mem_used_mib": 70_963.0, "mem_total_mib": 143_771.0, "temp_c": 45.0 + util / 4,
            "power_w": 120.0 + 5.8 * util, "power_limit_w": 700.0, "sm_clock_mhz": 1980.0, "error": None,
            "read_ms": 0.4,
        }

    def spec_gate(self) -> dict[str, Any]:
        """``internal_states[i].spec_gate`` as a real server reports it (``contract.spec_gate_status``
        over the same kinds of sources: identity, the SpecGate, the OFF-step runner's counters)."""
        gpus = [self.rank_gpu(r) for r in range(self.args.tp_size)]
        self.identity.host, self.identity.node_rank = gpus[0]["host"], 0
        self.identity.gpu = None if self.args.no_rank_gpus else gpus[0]
        status = contract.spec_gate_status(self.identity, self.gate, self.runner)
        status["last_decode_batch_size"] = self.batch
        status["ranks"] = [{**contract.rank_entry(status), "tp_rank": r,
                            "gpu": None if self.args.no_rank_gpus else gpu, "host": gpu["host"],
                            "node_rank": gpu["node_rank"]} for r, gpu in enumerate(gpus)]
        return status

    def server_info(self) -> dict[str, Any]:
        """``GET /server_info``: server args, version, internal_states (+ ``simulated``, the demo's
        one key of its own). ``last_gen_throughput`` changes only with each ``Decode batch`` line
        and is not reset when idle, as SGLang 0.5.12's."""
        a = self.args
        with self.lock:
            state: dict[str, Any] = {"last_gen_throughput": round(self.logged_tput, 2),
                                     "enable_metrics": a.enable_metrics}
            if self.accept_recent is not None:
                state["avg_spec_accept_length"] = self.accept_recent
            if self.gate is not None:
                state["spec_gate"] = self.spec_gate()
            return {
                "model_path": a.model_path,
                "speculative_algorithm": a.speculative_algorithm,
                "speculative_draft_model_path": a.speculative_draft_model_path,
                "tp_size": a.tp_size,
                "max_running_requests": a.max_running_requests,
                "cuda_graph_max_bs": a.cuda_graph_max_bs,
                "enable_metrics": a.enable_metrics,
                "host": a.host,
                "port": a.port,
                "version": SGLANG_VERSION,
                "simulated": {"note": NOTE},
                "internal_states": [state],
            }

    def loads(self, include: set[str]) -> dict[str, Any]:
        """``GET /v1/loads?include=...`` in SGLang 0.5.12's shape (one DP rank): live running
        requests and queue; ``gen_throughput`` (the last ``Decode batch`` figure) only with
        ``--enable-metrics``, else 0.0, as SGLang fills it."""
        a = self.args
        with self.lock:
            used = int(self.token_usage * MAX_TOTAL_TOKENS)
            tput = round(self.logged_tput, 2) if a.enable_metrics else 0.0
            entry: dict[str, Any] = {
                "num_running_reqs": self.batch,
                "num_waiting_reqs": self.waiting,
                "num_used_tokens": used,
                "num_total_tokens": used,
                "max_total_num_tokens": MAX_TOTAL_TOKENS,
                "token_usage": round(self.token_usage, 4),
                "gen_throughput": tput,
                "cache_hit_rate": 0.0,
                "utilization": 0.0,
                "max_running_requests": a.max_running_requests,
                "num_total_reqs": self.batch + self.waiting,
            }
            if ("spec" in include or "all" in include) and self.accept_recent is not None:
                al = self.accept_recent
                entry["speculative"] = {
                    "accept_length": round(al, 3),
                    "accept_rate": round(max(0.0, al - 1.0) / max(1, a.speculative_num_steps), 3)
                    if a.enable_metrics else 0.0,
                }
            return {
                "timestamp": datetime.now(timezone.utc).isoformat(),
                "version": SGLANG_VERSION,
                "dp_rank_count": 1,
                "loads": [entry],
                "aggregate": {
                    "total_running_reqs": self.batch,
                    "total_waiting_reqs": self.waiting,
                    "total_reqs": self.batch + self.waiting,
                    "total_used_tokens": used,
                    "total_tokens": used,
                    "avg_token_usage": round(self.token_usage, 4),
                    "avg_throughput": tput,
                    "avg_utilization": 0.0,
                },
            }

    def metrics_text(self) -> str:
        """``GET /metrics`` (``--enable-metrics``): the series the console reads, in SGLang's names
        and labels (gauges from the last ``Decode batch`` line, the decode token counter live)."""
        labels = ('{engine_type="unified",model_name="%s",moe_ep_rank="0",pp_rank="0",tp_rank="0"}'
                  % self.args.model_path)
        decode = labels[:-1] + ',mode="decode"}'
        with self.lock:
            lines = [
                "# HELP sglang:num_running_reqs The number of running requests.",
                "# TYPE sglang:num_running_reqs gauge",
                f"sglang:num_running_reqs{labels} {float(self.logged_batch)}",
                "# HELP sglang:num_queue_reqs The number of requests in the waiting queue.",
                "# TYPE sglang:num_queue_reqs gauge",
                f"sglang:num_queue_reqs{labels} {float(self.logged_waiting)}",
                "# HELP sglang:gen_throughput The generation throughput (token/s).",
                "# TYPE sglang:gen_throughput gauge",
                f"sglang:gen_throughput{labels} {self.logged_tput}",
                "# HELP sglang:realtime_tokens_total Total number of tokens processed.",
                "# TYPE sglang:realtime_tokens_total counter",
                f"sglang:realtime_tokens_total{decode} {float(self.decode_tokens)}",
            ]
            lines += ["# HELP sglang:spec_accept_length The average acceptance length of speculative decoding.",
                      "# TYPE sglang:spec_accept_length gauge",
                      f"sglang:spec_accept_length{labels} {self.accept_gauge}"]
        return "\n".join(lines) + "\n"

    def body_error(self, body: Any) -> str | None:
        """Why ``body`` is not a ``/set_internal_state`` request at all (HTTP 400), or None."""
        if not isinstance(body, dict):
            return 'body must be a JSON object {"server_args": {...}}'
        extra = sorted(set(body) - {"server_args"})
        if extra:
            return f'unknown top-level keys {extra}: the body must be {{"server_args": {{...}}}} only'
        sa = body.get("server_args")
        if not isinstance(sa, dict) or not sa:
            return 'body must be {"server_args": {...}} with at least one key'
        return None

    def rejection(self, reason: str) -> dict[str, Any]:
        """The contract's rejection answer with the values in force."""
        thr, hys = self.current_values()
        return contract.set_answer(False, reason, thr, hys)

    def handle_post(self, raw: bytes) -> tuple[int, dict[str, Any]]:
        """``POST /set_internal_state`` from the raw body: ``(HTTP status, answer)``.

        A body that is not a request (empty, not JSON, not ``{"server_args": {...}}``, other
        top-level keys) is answered 400; a request with invalid values 200 with
        ``updated: false`` (the contract's answer); both in the contract's shape.
        """
        if not raw.strip():
            return 400, self.rejection('empty body: expected {"server_args": {...}}')
        try:
            body = json.loads(raw, parse_int=_parse_int)
        except (ValueError, RecursionError):
            return 400, self.rejection("body is not JSON")
        err = self.body_error(body)
        if err:
            return 400, self.rejection(err)
        return 200, self.set_internal_state(body)

    def set_internal_state(self, body: Any) -> dict[str, Any]:
        """``POST /set_internal_state``: validate per README; apply from the next decode batch.

        The answer of an accepted change carries ``decode_step``: the first decode batch the
        new values decide (the next one; with ``--apply-delay``, an estimate of the batch
        after the delay).
        """
        with self.lock:
            cur_t, cur_h = self._current()

            def reject(reason: str, args: Any) -> dict[str, Any]:
                if self.gate is not None:
                    self._log_ranks(contract.rejected_line(args, reason))
                return contract.set_answer(False, reason, cur_t, cur_h)

            if self.body_error(body):
                return reject(self.body_error(body) or "", body)
            sa = body["server_args"]
            if not set(sa) & set(contract.GATE_KEYS):
                return contract.set_answer(False, "demo server: only the speculation gate keys can be set",
                                           cur_t, cur_h)
            if self.gate is None:
                return reject(contract.NOT_ENABLED_REASON, sa)
            for key in contract.GATE_KEYS:
                if isinstance(sa.get(key), _BigInt):
                    return reject(f"{key.rsplit('_', 1)[-1]} {sa[key]!r} is out of range", sa)
            try:
                new = contract.parse_update(self._effective_config(), sa, self.args.max_running_requests)
            except GateConfigError as exc:
                return reject(str(exc), sa)
            delay = self.args.apply_delay
            self.pending_at = time.monotonic() + delay
            self.pending.append(new)
            ticks = math.ceil(delay / self.args.tick) if delay > 0 and self.args.tick > 0 else 0
            decode_step = self.step + ticks * self.steps_per_tick
            return contract.set_answer(True, None, contract.wire_threshold(new), new.hysteresis, decode_step)


class _BigInt:
    """A JSON integer too long to be a batch size (kept out of ``int()``: no 4300-digit error)."""

    def __init__(self, digits: str) -> None:
        self.digits = digits

    def __repr__(self) -> str:
        return f"<{len(self.digits.lstrip('-'))}-digit integer>"


def _parse_int(text: str) -> int | _BigInt:
    return int(text) if len(text.lstrip("-")) <= 18 else _BigInt(text)


class _DemoHTTPServer(ThreadingHTTPServer):
    """A client that went away mid-answer (it timed out while the demo was stopped) is no error of
    the server: its traceback in the log (and the crash dialog's last lines) read as a crash."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):  # BrokenPipeError, ConnectionResetError
            return
        super().handle_error(request, client_address)


def make_handler(sim: Simulation) -> type[BaseHTTPRequestHandler]:
    """The request handler class bound to ``sim``."""
    api_key = sim.args.api_key

    class Handler(BaseHTTPRequestHandler):
        server_version = "demo-sglang/" + SGLANG_VERSION
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - base class name
            pass  # errors and the like: SGLang's uvicorn writes only the access line below

        def log_request(self, code: Any = "-", size: Any = "-") -> None:
            """uvicorn's access line, as SGLang writes one per request (the console hides its
            own polls' lines: ``o``)."""
            try:
                status = int(code)
                phrase = HTTPStatus(status).phrase
            except ValueError:
                status, phrase = code, ""
            host, port = self.client_address[:2]
            sim.log(f'INFO:     {host}:{port} - "{self.requestline}" {status} {phrase}'.rstrip())

        def _send(self, code: int, obj: Any) -> None:
            data = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _send_text(self, code: int, text: str, ctype: str = "text/plain; charset=utf-8") -> None:
            data = text.encode()
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _authorized(self, path: str) -> bool:
            if not api_key or path == "/health":
                return True
            if self.headers.get("Authorization") == f"Bearer {api_key}":
                return True
            self._send(401, {"error": "Unauthorized"})
            return False

        def do_GET(self) -> None:  # noqa: N802 - http.server API
            url = urlparse(self.path)
            if not self._authorized(url.path):
                return
            if url.path in ("/health", "/health_generate"):
                self._send(200 if sim.ready else 503, {})
            elif url.path in ("/server_info", "/get_server_info"):
                self._send(200, sim.server_info())
            elif url.path == "/v1/loads" and sim.args.loads_error:
                self._send_text(sim.args.loads_error, "Internal Server Error")  # what uvicorn answers
            elif url.path == "/v1/loads":
                q = parse_qs(url.query)
                include = set(",".join(q.get("include", ["core"])).split(","))
                self._send(200, sim.loads(include))
            elif url.path == "/metrics" and sim.args.enable_metrics:
                self._send_text(200, sim.metrics_text(), "text/plain; version=0.0.4; charset=utf-8")
            else:
                self._send(404, {"detail": "Not Found"})

        def do_POST(self) -> None:  # noqa: N802
            url = urlparse(self.path)
            if not self._authorized(url.path):
                return
            try:
                length = max(0, int(self.headers.get("Content-Length") or 0))
            except ValueError:
                self.close_connection = True
                self._send(400, sim.rejection("bad Content-Length"))
                return
            raw = self.rfile.read(length) if length else b""
            if url.path != "/set_internal_state":
                self._send(404, {"detail": "Not Found"})
                return
            code, answer = sim.handle_post(raw)
            self._send(code, answer)

    return Handler


def _startup_lines(args: argparse.Namespace, sim: Simulation, log: LogWriter, pause) -> None:
    family = args.log_spec_version or ("v2" if sim.overlap else "v1")
    log(
        f"server_args=ServerArgs(model_path='{args.model_path}', speculative_algorithm='{args.speculative_algorithm}', "
        f"speculative_draft_model_path='{args.speculative_draft_model_path}', tp_size={args.tp_size}, "
        f"max_running_requests={args.max_running_requests}, cuda_graph_max_bs={args.cuda_graph_max_bs}, "
        f"{contract.THRESHOLD_KEY}={getattr(args, contract.THRESHOLD_KEY)}, "
        f"{contract.HYSTERESIS_KEY}={getattr(args, contract.HYSTERESIS_KEY)}, port={args.port})"
    )
    log(f"[demo] {NOTE}")
    if family == "v2":
        log("Spec v2 is enabled by default for eagle/eagle3/standalone speculative decoding.")
    else:
        log("Spec v1 is used for eagle/eagle3/standalone speculative decoding because overlap schedule is disabled.")
    pause(0.1)
    for r in range(args.tp_size):
        log("Init torch distributed begin.", tp=r)
    pause(0.1)
    log("Load weight begin. avail mem=139.21 GB", tp=0)
    pause(0.25)
    log("Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=124.10 GB, mem usage=15.11 GB.", tp=0)
    log("KV Cache is allocated. #tokens: 812345, K size: 49.58 GB, V size: 49.58 GB", tp=0)
    pause(0.1)
    log("Capture cuda graph begin. This can take up to several minutes. avail mem=22.10 GB", tp=0)
    pause(0.25)
    log("Capture cuda graph end. Time elapsed: 4.12 s. mem usage=1.20 GB. avail mem=20.90 GB.", tp=0)
    log("Capture draft cuda graph begin. This can take up to several minutes. avail mem=20.90 GB", tp=0)
    pause(0.1)
    log("Capture draft cuda graph end. Time elapsed: 1.05 s. mem usage=0.31 GB. avail mem=20.59 GB.", tp=0)
    if sim.gate is not None:
        sim._log_ranks(contract.worker_line(sim.worker_class, sim.spec_version, sim.overlap, sim.gate.config))
    log(
        f"max_total_num_tokens=812345, chunked_prefill_size=8192, max_prefill_tokens=16384, "
        f"max_running_requests={args.max_running_requests}, context_len=8192, available_gpu_mem=20.59 GB",
        tp=0,
    )
    pause(0.1)


MAX_LOAD = 100_000  # concurrent requests: far above any real server's --max-running-requests


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse what the real server (or a sane simulation) would refuse; exits via ``parser.error``.

    The gate's values are checked by the contract's startup rule (``GateConfig.validate``), as
    server_patch checks them.
    """
    n, h = getattr(args, contract.THRESHOLD_KEY), getattr(args, contract.HYSTERESIS_KEY)
    problem = contract.hysteresis_problem(h, None) if n in (None, contract.AUTO) else None
    if problem is not None:
        parser.error(f"{contract.HYSTERESIS_FLAG}: {problem.server_message()}")
    if n is not None:
        try:
            GateConfig(contract.parse_threshold(n), h).validate()
        except GateConfigError as exc:
            parser.error(f"{contract.THRESHOLD_FLAG} / {contract.HYSTERESIS_FLAG}: {exc}")
    if not 1 <= args.port <= 65535:
        parser.error(f"--port must be from 1 to 65535, got {args.port}")
    if args.crash_after is not None and not (math.isfinite(args.crash_after) and args.crash_after >= 0):
        parser.error(f"--crash-after must be >= 0 seconds, got {args.crash_after}")
    if args.loads_error is not None and not 400 <= args.loads_error <= 599:
        parser.error(f"--loads-error must be an HTTP error status from 400 to 599, got {args.loads_error}")
    if not 1 <= args.exit_code <= 255:
        parser.error(f"--exit-code must be from 1 to 255 (a process exit status), got {args.exit_code}")
    if args.nnodes < 1 or args.tp_size % args.nnodes:
        parser.error(f"--nnodes must divide --tp-size ({args.tp_size}), got {args.nnodes}")
    for name in ("max_running_requests", "cuda_graph_max_bs", "tp_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    for name, low, high in (("phase_seconds", 0.1, 86400), ("tick", 0.001, 10), ("log_interval", 0.01, 3600),
                            ("jitter", 0, 1e6), ("startup_seconds", 0, 3600), ("apply_delay", 0, 3600)):
        value = getattr(args, name)
        if not (math.isfinite(value) and low <= value <= high):
            parser.error(f"--{name.replace('_', '-')} must be from {low:g} to {high:g}, got {value}")
    try:
        if max(parse_levels(args.load)) > MAX_LOAD:
            raise ValueError
    except ValueError:
        parser.error(f"--load must be comma-separated request counts from 0 to {MAX_LOAD} (e.g. 1,64,4,128), "
                     f"got {args.load!r}")


def install_stop_signals(log: "LogWriter", stop: threading.Event, stubborn: bool = False) -> Callable[[int, Any], None]:
    """SIGTERM / SIGINT set ``stop`` (``stubborn``: SIGTERM is logged and ignored); returns the handler.

    The handler only writes the signal's number to a pipe; a thread reads it, logs and sets
    ``stop``. A handler that logged or set the event itself could deadlock: it runs on the main
    thread between two bytecodes, possibly while that thread holds the very lock it needs (the log
    writer's, while writing a Decode line; the event's, on waking from ``stop.wait``), and then the
    server never stops on SIGTERM (a console killed with ``kill -9`` left it running until the
    supervisor's SIGKILL).
    """
    read_end, write_end = os.pipe()

    def on_signal(signum: int, frame: Any) -> None:
        os.write(write_end, bytes([signum]))  # no lock taken: safe wherever the main thread is

    def handle() -> None:
        while True:
            data = os.read(read_end, 16)
            if not data:  # pragma: no cover - the write end is never closed
                return
            for signum in data:
                if stubborn and signum == signal.SIGTERM:
                    log("Received SIGTERM; ignoring it (demo --stubborn)")
                    continue
                log(f"Received signal {signal.Signals(signum).name}; shutting down")
                stop.set()

    threading.Thread(target=handle, name="signals", daemon=True).start()
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return on_signal


def did_you_mean(parser: argparse.ArgumentParser, unknown: list[str]) -> str:
    """`` (did you mean --load?)`` for unknown flags close to one the demo simulates (a typo would
    otherwise pass as an SGLang flag it ignores), else ``""``."""
    known = [o for a in parser._actions for o in a.option_strings if o.startswith("--")]
    hints = []
    for flag in (u.split("=", 1)[0] for u in unknown if u.startswith("--")):
        close = difflib.get_close_matches(flag, known, n=1, cutoff=0.75)
        if close and close[0] != flag:
            hints.append(f"{flag} -> {close[0]}")
    return f" (did you mean {', '.join(hints)}?)" if hints else ""


def main(argv: list[str] | None = None) -> int:
    """Run the simulated server until SIGTERM/SIGINT (or ``--crash-after``). Returns the exit code."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    check_args(parser, args)
    try:
        stream: TextIO = open(args.log, "a", buffering=1) if args.log else sys.stdout
    except OSError as exc:
        parser.error(f"--log {args.log}: cannot append to it ({exc.strerror or exc})")
    log = LogWriter(stream)
    sim = Simulation(args, log)
    stop = threading.Event()
    children: list[subprocess.Popen[bytes]] = []
    install_stop_signals(log, stop, stubborn=args.stubborn)

    total = max(0.0, args.startup_seconds)

    def pause(frac: float) -> None:
        stop.wait(total * frac)

    if unknown:
        log(f"[demo] ignoring SGLang arguments it does not simulate: {' '.join(unknown)}"
            + did_you_mean(parser, unknown))
    for _ in range(max(1, args.tp_size)):
        children.append(subprocess.Popen([sys.executable, "-c", _SCHEDULER_CODE], stdin=subprocess.DEVNULL))
    _startup_lines(args, sim, log, pause)
    try:
        httpd = _DemoHTTPServer((args.host, args.port), make_handler(sim))
    except OSError as exc:
        log(f"ERROR: could not bind {args.host}:{args.port}: {exc}")
        for c in children:
            c.kill()
        return 1
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()
    log(f"INFO:     Started server process [{os.getpid()}]")
    log(f"INFO:     Uvicorn running on http://{args.host}:{args.port} (Press CTRL+C to quit)")
    sim.t0 = time.monotonic()
    sim.ready = True
    log("The server is fired up and ready to roll!")

    ready_at = time.monotonic()
    next_log = ready_at + args.log_interval
    while not stop.is_set():
        now = time.monotonic()
        if args.crash_after is not None and now - ready_at >= args.crash_after:
            log(
                "Scheduler hit an exception: Traceback (most recent call last):\n"
                '  File "sglang/srt/managers/scheduler.py", line 2871, in run_scheduler_process\n'
                "    scheduler.event_loop_overlap()\n"
                '  File "sglang/srt/speculative/eagle_worker_v2.py", line 412, in forward_batch_generation\n'
                "    logits = self.draft_model_runner.forward(batch)\n"
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (simulated: demo --crash-after)",
                tp=0,
            )
            log("Received sigquit from a child process. It usually means the child failed.")
            stream.flush()
            os._exit(args.exit_code)  # leave the scheduler children behind, like a real crash can
        sim.tick(now)
        if now >= next_log:
            line = sim.decode_line()
            if line:
                log(line, tp=0)
            next_log = now + args.log_interval
        stop.wait(args.tick)

    httpd.shutdown()
    for c in children:
        c.terminate()
    for c in children:
        try:
            c.wait(timeout=5)
        except subprocess.TimeoutExpired:
            c.kill()
    log("Server stopped.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
