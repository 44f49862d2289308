"""The Load panel's figures from whichever sources answer, each with its source.

A real SGLang 0.5.12 server does not give every figure everywhere (recorded on an H200,
``../shared/fixtures/sglang-0.5.12-h200/``):

* ``/v1/loads`` has the live running requests and queue, but its ``gen_throughput`` is 0.0
  unless the server runs with ``--enable-metrics`` -- and with it, on FastAPI >= 0.137, the
  endpoint answers HTTP 500 (mended by the plugin, ``server_patch/http_fixes.py``);
* ``/metrics`` (``--enable-metrics`` only): gauges refreshed every 40 decode batches, and the
  counter ``sglang:realtime_tokens_total{mode="decode"}``, whose rate between two polls is the
  exact decode throughput;
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

from console import state as st
from console.logparse import DecodeStats

#: what SGLang's periodic figures average over (decode_log_interval, default 40)
WINDOW_40 = "40-batch avg"
#: a log decode line older than this (s) says nothing about now
LOG_FRESH_S = 30.0
#: polls closer than this (s) give no counter rate (too little time to divide by)
MIN_RATE_DT_S = 0.05


class LoadTracker:
    """Turns successive samples (and log decode lines) into :class:`console.state.LoadFigures`."""

    def __init__(self) -> None:
        self._counter: tuple[float, float] | None = None  # (poll time s, decode tokens so far)
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
            return st.Figure(rate, st.SRC_METRICS)
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

    def _counter_rate(self, sample: st.ServerSample, at: float) -> float | None:
        total = sample.metrics.decode_tokens_total if sample.metrics is not None else None
        if total is None:
            return None
        prev, self._counter = self._counter, (at, total)
        if prev is None or at - prev[0] < MIN_RATE_DT_S or total < prev[1]:
            return None  # the first poll, too soon, or the counter restarted
        return (total - prev[1]) / (at - prev[0])
