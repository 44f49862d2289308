"""Folds everything the data layer reads into one :class:`console.state.ConsoleSnapshot`.

UI-free and synchronous: the app feeds it server samples, poll failures, NVML reads, log
lines and process events, and renders :meth:`ConsoleModel.snapshot`. It also owns the
threshold-change protocol: validate before sending, remember what the server accepted, and
report the change only once ``spec_gate`` shows it.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import replace
from typing import Callable

from console import logparse
from console import state as st

#: seconds after which an accepted change that spec_gate still does not show is reported
CONFIRM_TIMEOUT_S = 15.0
#: seconds over which the switch rate (switches/min) is measured
SWITCH_WINDOW_S = 60.0
#: seconds a threshold-control message stays in the speculation panel (the log pane keeps it)
MESSAGE_TTL_S = 30.0


def validate_threshold(value: int, max_running_requests: int | None) -> str | None:
    """Client-side check before sending: None if ``value`` may be sent, else why not.

    The threshold must lie in [1, max running requests] (a threshold above the scheduler's
    max running requests can never fire).
    """
    if value < 1:
        return f"threshold {value} refused: must be >= 1"
    if max_running_requests is not None and value > max_running_requests:
        return f"threshold {value} refused: above max running requests {max_running_requests}"
    return None


class ConsoleModel:
    """Mutable aggregator; one per app.

    Args:
        mode: ``launch`` / ``attach`` / ``demo`` / ``none``.
        url: server base URL.
        readonly: threshold changes disabled.
        interval_s: poll interval in seconds (shown on screen).
        log_path: followed log file, or None.
        history: samples kept for the sparklines.
        clock: monotonic clock in seconds (injectable).
    """

    def __init__(
        self,
        mode: str = "attach",
        url: str = "",
        readonly: bool = False,
        interval_s: float = 1.0,
        log_path: str | None = None,
        history: int = 240,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.mode = mode
        self.url = url
        self.readonly = readonly
        self.interval_s = interval_s
        self.log_path = log_path
        self.clock = clock
        self.facts = logparse.LogFacts()
        self.sample: st.ServerSample | None = None
        self.connection = st.ConnectionState(url=url)
        self.pending: st.PendingChange | None = None
        self.process: st.ProcessState | None = None
        self.gpus = st.GpuPanelState()
        self.batch_history: deque[int] = deque(maxlen=history)
        self.tput_history: deque[float] = deque(maxlen=history)
        self.gpu_history: list[deque[float | None]] = []
        self.switch_samples: deque[tuple[float, int]] = deque()
        self._history = history
        self.message: str | None = None
        self.message_level = "info"
        self.message_at = 0.0

    # -- inputs ----------------------------------------------------------------------------

    def on_sample(self, sample: st.ServerSample) -> list[str]:
        """A successful poll. Returns console messages for the log pane (confirmations)."""
        self.sample = sample
        self.connection = st.ConnectionState(url=self.url, reachable=True)
        bs = None
        if sample.load is not None and sample.load.running_reqs is not None:
            bs = sample.load.running_reqs
        elif sample.gate is not None:
            bs = sample.gate.last_decode_batch_size
        if bs is not None:
            self.batch_history.append(bs)
        if sample.load is not None and sample.load.gen_throughput is not None:
            self.tput_history.append(sample.load.gen_throughput)
        if sample.gate is not None and sample.gate.switches is not None:
            now = self.clock()
            self.switch_samples.append((now, sample.gate.switches))
            while self.switch_samples and now - self.switch_samples[0][0] > SWITCH_WINDOW_S:
                self.switch_samples.popleft()
        return self._check_pending()

    def switch_rate(self) -> float | None:
        """On<->off switches per minute over the last SWITCH_WINDOW_S (None before 10 s of data)."""
        if len(self.switch_samples) < 2:
            return None
        (t0, s0), (t1, s1) = self.switch_samples[0], self.switch_samples[-1]
        if t1 - t0 < 10.0 or s1 < s0:
            return None
        return (s1 - s0) * 60.0 / (t1 - t0)

    def on_failure(self, reason: str) -> None:
        """A failed poll (server down or slow)."""
        c = self.connection
        self.connection = st.ConnectionState(
            url=self.url,
            reachable=False,
            down_since=c.down_since if c.down_since is not None else self.clock(),
            last_error=reason,
            failures=c.failures + 1,
        )

    def on_gpus(self, panel: st.GpuPanelState) -> None:
        """An NVML read."""
        self.gpus = panel
        while len(self.gpu_history) < len(panel.rows):
            self.gpu_history.append(deque(maxlen=self._history))
        del self.gpu_history[len(panel.rows):]
        for row, hist in zip(panel.rows, self.gpu_history):
            hist.append(None if row.lost else row.util_pct)

    def on_log_line(self, line: str) -> None:
        """A log line (facts about the worker and startup phase)."""
        self.facts.feed(line)
        if self.process is not None and self.process.phase not in (st.PHASE_CRASHED, st.PHASE_STOPPING, st.PHASE_STOPPED):
            if self.process.phase != st.PHASE_READY:
                self.process = replace(self.process, phase=self.facts.phase)

    def on_process(self, process: st.ProcessState) -> None:
        """The launched server changed (started, ready, crashed, stopped)."""
        self.process = process

    def set_message(self, text: str | None, level: str = "info") -> None:
        """The last threshold-control outcome, shown in the speculation panel for MESSAGE_TTL_S."""
        self.message, self.message_level, self.message_at = text, level, self.clock()

    # -- threshold protocol ----------------------------------------------------------------

    @property
    def gate(self) -> st.GateState | None:
        """The live spec_gate of the last sample (None: none yet / gate not enabled)."""
        return self.sample.gate if self.sample else None

    def base_threshold(self) -> int | None:
        """The threshold a +/- step starts from: the pending value, else spec_gate's."""
        if self.pending is not None and self.pending.threshold is not None:
            return self.pending.threshold
        return self.gate.threshold if self.gate else None

    def check_request(self, threshold: int | None) -> str | None:
        """None if a change to ``threshold`` may be sent, else the reason it is refused."""
        if self.readonly:
            return "read-only: threshold changes are disabled (--readonly)"
        if self.gate is None:
            return "no spec_gate on this server: nothing to change"
        if threshold is None:
            return None
        max_running = self.snapshot_max_running()
        return validate_threshold(threshold, max_running)

    def snapshot_max_running(self) -> int | None:
        """Upper bound for the threshold (req): spec_gate's max running requests, else /v1/loads'."""
        g = self.gate
        if g is not None and g.max_running_requests is not None:
            return g.max_running_requests
        if self.sample is not None and self.sample.load is not None:
            return self.sample.load.max_running_requests
        return None

    def on_set_result(self, result: st.SetResult, threshold: int | None, hysteresis: int | None) -> str:
        """The server answered a change; returns the log-pane message."""
        g = self.gate
        old_t = g.threshold if g else None
        old_h = g.hysteresis if g else None
        asked = _describe(threshold, hysteresis)
        if not result.updated:
            reason = result.reason or "no reason given"
            self.set_message(f"rejected: {reason}", "error")
            return f"{asked} rejected by server: {reason}"
        self.pending = st.PendingChange(threshold, hysteresis, old_t, old_h, self.clock())
        text = f"{asked} accepted; waiting for spec_gate to confirm"
        self.set_message(f"{asked} accepted, waiting for spec_gate", "info")
        confirmed = self._check_pending()
        return text + ("\n" + "\n".join(confirmed) if confirmed else "")

    def _check_pending(self) -> list[str]:
        p = self.pending
        g = self.gate
        if p is None or g is None:
            return []
        ok = (p.threshold is None or g.threshold == p.threshold) and (p.hysteresis is None or g.hysteresis == p.hysteresis)
        if ok:
            self.pending = None
            parts = []
            if p.threshold is not None:
                parts.append(f"threshold {p.old_threshold} -> {p.threshold}")
            if p.hysteresis is not None:
                parts.append(f"hysteresis {p.old_hysteresis} -> {p.hysteresis}")
            text = ", ".join(parts) + " confirmed by spec_gate"
            self.set_message(text, "ok")
            return [text]
        if self.clock() - p.since > CONFIRM_TIMEOUT_S:
            self.pending = None
            text = f"{_describe(p.threshold, p.hysteresis)} accepted but spec_gate still shows threshold {g.threshold} hysteresis {g.hysteresis}"
            self.set_message(text, "error")
            return [text]
        return []

    # -- output ----------------------------------------------------------------------------

    def worker_check(self) -> st.WorkerCheck:
        """Cross-check of the live worker class against the log (see :func:`logparse.check_worker`)."""
        return logparse.check_worker(self.gate, self.facts, have_log=self.log_path is not None)

    def snapshot(self) -> st.ConsoleSnapshot:
        """The current immutable snapshot."""
        s = self.sample
        return st.ConsoleSnapshot(
            mode=self.mode,
            url=self.url,
            readonly=self.readonly,
            interval_s=self.interval_s,
            version=s.version if s else None,
            sample_seen=s is not None,
            gate=s.gate if s else None,
            load=s.load if s else None,
            connection=self.connection,
            worker=self.worker_check(),
            pending=self.pending,
            process=self.process,
            gpus=self.gpus,
            batch_history=tuple(self.batch_history),
            throughput_history=tuple(self.tput_history),
            gpu_util_history=tuple(tuple(h) for h in self.gpu_history),
            simulated_note=(s.simulated_note or "simulated server") if s and s.simulated else None,
            log_path=self.log_path,
            message=self.message if self.clock() - self.message_at <= MESSAGE_TTL_S else None,
            message_level=self.message_level,
            switches_per_min=self.switch_rate(),
            now=self.clock(),
        )


def _describe(threshold: int | None, hysteresis: int | None) -> str:
    parts = []
    if threshold is not None:
        parts.append(f"threshold {threshold}")
    if hysteresis is not None:
        parts.append(f"hysteresis {hysteresis}")
    return "set " + " ".join(parts) if parts else "empty change"
