"""The Load panel's figures from whichever sources answer, each with its source.

A real SGLang 0.5.12 server does not give every figure everywhere (recorded on an H200,
``../shared/fixtures/sglang-0.5.12-h200/``):

* ``/v1/loads`` has the live running requests and queue, but its ``gen_throughput`` is 0.0
  unless the server runs with ``--enable-metrics`` -- and with it, on FastAPI >= 0.137, the
  endpoint answers HTTP 500 (mended by the plugin, ``server_patch/http_fixes.py``);
* ``/metrics`` (``--enable-metrics`` only): gauges refreshed every 40 decode batches, and the
  counter ``sglang:realtime_tokens_total{mode="decode"}`` (bumped every decode batch), whose rate
  over the last RATE_WINDOW_S is the decode throughput the clients get. Over one 1 s poll it
  swings with the prefill bursts of variable-length traffic (7,300-14,000 tok/s at 96 running
  requests on the H200, 2026-12-01); SGLang's own 40-batch figure mostly covers the stretches
  between prefills and read 13,500-14,700 there, while the clients got 8,750
  (``bench/results/console-real-terminal/2026-12-01``);
* ``/server_info``'s ``last_gen_throughput``: decode tokens over the last 40 decode batches'
  wall time, never reset when the server goes idle;
* the gate's ``spec_gate``: the last decode batch, and decode step counters that stop when no
  decode batch runs;
* the log's ``Decode batch`` lines (every 40 decode batches).

Rules: the most direct source wins; a figure no source gives is unknown (``n/a``), never 0;
0 tok/s is shown only when it is known (no decode batch ran since the last poll, or no request
runs).
"""

from __future__ import annotations

from collections import deque

from console import state as st
from console.logparse import DecodeStats

#: what SGLang's periodic figures average over (decode_log_interval, default 40)
WINDOW_40 = "40-batch avg"
#: a log decode line older than this (s) says nothing about now
LOG_FRESH_S = 30.0
#: polls closer than this (s) give no counter rate (too little time to divide by)
MIN_RATE_DT_S = 0.05
#: the decode token counter's rate is taken over this many seconds of polls
RATE_WINDOW_S = 5.0
WINDOW_RATE = f"{RATE_WINDOW_S:.0f} s avg"


class LoadTracker:
    """Turns successive samples (and log decode lines) into :class:`console.state.LoadFigures`."""

    def __init__(self) -> None:
        self._counter: deque[tuple[float, float]] = deque()  # (poll time s, decode tokens so far)
        self._steps: int | None = None  # spec_gate decode steps at the last poll
        self._log: tuple[float, DecodeStats] | None = None  # the last log decode line, when read
        self.figures = st.LoadFigures()

    def on_decode_line(self, stats: DecodeStats, at: float) -> None:
        """A ``Decode batch`` log line read at monotonic time ``at`` (s)."""
        self._log = (at, stats)

    def reset(self) -> None:
        """Forget earlier polls (the server restarted)."""
        self.__init__()

    def update(self, sample: st.ServerSample, at: float) -> st.LoadFigures:
        """The figures after a poll that started at monotonic time ``at`` (s)."""
        decoding = self._decoding(sample)
        log = self._log[1] if self._log is not None and at - self._log[0] <= LOG_FRESH_S else None
        running = self._running(sample, decoding, log)
        self.figures = st.LoadFigures(
            running=running,
            queue=self._queue(sample, log),
            throughput=self._throughput(sample, at, decoding, running, log),
        )
        return self.figures

    def _decoding(self, sample: st.ServerSample) -> bool | None:
        """Did a decode batch run since the last poll? (spec_gate's step counters; None: unknown)."""
        g = sample.gate
        if g is None or g.decode_steps_on is None or g.decode_steps_off is None:
            return None
        steps = g.decode_steps_on + g.decode_steps_off
        prev, self._steps = self._steps, steps
        if prev is None or steps < prev:  # the first poll, or the counters restarted
            return None
        return steps > prev

    @staticmethod
    def _running(sample: st.ServerSample, decoding: bool | None, log: DecodeStats | None) -> st.Figure:
        if sample.load is not None and sample.load.running_reqs is not None:
            return st.Figure(sample.load.running_reqs, st.SRC_LOADS)
        if sample.metrics is not None and sample.metrics.running_reqs is not None:
            return st.Figure(sample.metrics.running_reqs, st.SRC_METRICS, WINDOW_40)
        g = sample.gate
        if g is not None and g.last_decode_batch_size is not None:
            if decoding is False:
                return st.Figure(0, st.SRC_SPEC_GATE, "no decode batch since the last poll")
            return st.Figure(g.last_decode_batch_size, st.SRC_SPEC_GATE, "last decode batch")
        if log is not None:
            return st.Figure(log.running_reqs, st.SRC_LOG, WINDOW_40)
        return st.Figure()

    @staticmethod
    def _queue(sample: st.ServerSample, log: DecodeStats | None) -> st.Figure:
        if sample.load is not None and sample.load.waiting_reqs is not None:
            return st.Figure(sample.load.waiting_reqs, st.SRC_LOADS)
        if sample.metrics is not None and sample.metrics.queue_reqs is not None:
            return st.Figure(sample.metrics.queue_reqs, st.SRC_METRICS, WINDOW_40)
        if log is not None and log.queue_reqs is not None:
            return st.Figure(log.queue_reqs, st.SRC_LOG, WINDOW_40)
        return st.Figure()

    def _throughput(self, sample: st.ServerSample, at: float, decoding: bool | None, running: st.Figure,
                    log: DecodeStats | None) -> st.Figure:
        rate = self._counter_rate(sample, at)
        if rate is not None:
            return st.Figure(rate[0], st.SRC_METRICS, WINDOW_RATE if rate[1] else None)
        idle = decoding is False or (running.source in (st.SRC_LOADS, st.SRC_METRICS) and running.value == 0)
        if idle:
            return st.Figure(0.0, st.SRC_IDLE)
        loads_tput = sample.load.gen_throughput if sample.load is not None else None
        # SGLang fills it only with --enable-metrics (0.0 otherwise); unknown flag: only a filled one
        if loads_tput is not None and (sample.metrics_enabled or (sample.metrics_enabled is None and loads_tput > 0)):
            return st.Figure(loads_tput, st.SRC_LOADS, WINDOW_40)
        if sample.metrics is not None and sample.metrics.gen_throughput is not None:
            return st.Figure(sample.metrics.gen_throughput, st.SRC_METRICS, WINDOW_40)
        tput = sample.last_gen_throughput
        if tput is not None and tput > 0:  # 0.0 before the first 40 decode batches: not a figure
            return st.Figure(tput, st.SRC_SERVER_INFO, WINDOW_40)
        if log is not None:
            return st.Figure(log.gen_throughput, st.SRC_LOG, WINDOW_40)
        return st.Figure()

    def _counter_rate(self, sample: st.ServerSample, at: float) -> tuple[float, bool] | None:
        """(decode tok/s over the polls of the last RATE_WINDOW_S, whether it spans more than one
        poll interval), or None: no counter, the first poll, too soon, or the counter restarted."""
        total = sample.metrics.decode_tokens_total if sample.metrics is not None else None
        if total is None:
            return None
        polls = self._counter
        if polls and total < polls[-1][1]:
            polls.clear()  # the server restarted
        polls.append((at, total))
        while len(polls) > 2 and at - polls[1][0] >= RATE_WINDOW_S:
            polls.popleft()
        first_at, first_total = polls[0]
        if at - first_at < MIN_RATE_DT_S:
            return None
        return (total - first_total) / (at - first_at), len(polls) > 2
