"""Folds everything the data layer reads into one :class:`console.state.ConsoleSnapshot`.

UI-free and synchronous: the app feeds it server samples, poll failures, NVML reads, log
lines and process events, and renders :meth:`ConsoleModel.snapshot`. It also owns the
threshold-change protocol:

* every ``+``/``-`` steps the *target* (the latest value asked for, or spec_gate's value when
  nothing is pending) and is validated before anything is sent: [1, max running requests],
  above the hysteresis;
* the target is shown as pending at once; the absolute value is queued for
  ``POST /set_internal_state``. Every request is sent, one at a time in the order asked for, so
  the server (which applies each from its next decode batch and logs each) ends at the last
  value: last write wins. When the server does not answer, the rest of the queue is dropped;
* the change is reported as confirmed only when a poll *started after* the server accepted the
  latest target shows it in ``spec_gate``;
* a change that got no answer (timeout, server frozen) is remembered: when ``spec_gate`` later
  shows its values (the server applied it late) that is confirmed too, and when the server is
  back but shows the old values the message says so instead of "no answer".

Messages caused by the connection being down (a refused key press, ...) are cleared when the
server answers again.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import replace
from typing import Any, Callable

from console import gpu_sources, logparse
from console import state as st
from console.events import KIND_CONNECTION, KIND_NO_CROSSOVER, KIND_REJECTED, Outcome
from console.load_figures import LoadTracker
from server_patch import contract

#: seconds after which an accepted change that spec_gate still does not show is reported
CONFIRM_TIMEOUT_S = 15.0
#: seconds over which the switch rate (switches/min) is measured
SWITCH_WINDOW_S = 60.0
#: seconds a threshold-control message stays in the speculation panel (the log pane keeps it)
MESSAGE_TTL_S = 30.0
#: seconds a change without an answer is watched for (confirmed if spec_gate shows it later)
UNANSWERED_TTL_S = 600.0
#: seconds after the server answers again before an unanswered change is called "not applied"
UNANSWERED_GRACE_S = 3.0


def set_threshold(g: st.GateState | None) -> int | str | None:
    """The threshold a change compares with: ``"auto"`` while the auto threshold runs (its learned
    crossover moves by itself), else spec_gate's N."""
    if g is None:
        return None
    return contract.AUTO if g.mode == contract.MODE_AUTO else g.threshold


def validate_threshold(value: int, max_running_requests: int | None, hysteresis: int | None = None) -> str | None:
    """Client-side check before sending: None if ``value`` may be sent, else the refusal
    (``contract.threshold_problem``: [1, max running requests], and above ``hysteresis`` when given)."""
    problem = contract.threshold_problem(value, max_running_requests, hysteresis)
    return problem.refusal() if problem else None


def validate_hysteresis(value: int, threshold: int | None, max_running_requests: int | None = None) -> str | None:
    """Client-side check before sending: None if hysteresis ``value`` may be sent with
    ``threshold`` (None: the auto threshold), else the refusal (``contract.hysteresis_problem``:
    ``0 <= H < N``; with auto, ``H < max_running_requests`` where known)."""
    problem = contract.hysteresis_problem(value, threshold, max_running_requests)
    return problem.refusal() if problem else None


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
        self.load = LoadTracker()
        self.sample: st.ServerSample | None = None
        self.connection = st.ConnectionState(url=url)
        self.pending: st.PendingChange | None = None
        self.process: st.ProcessState | None = None
        self.gpus = st.GpuPanelState()
        self.batch_history: deque[int] = deque(maxlen=history)
        self.tput_history: deque[float] = deque(maxlen=history)
        self.gpu_history: dict[str, deque[float | None]] = {}  # gpu_sources.row_key -> utilization %
        self.switch_samples: deque[tuple[float, int]] = deque()
        self._history = history
        self.message: str | None = None
        self.message_level = "info"
        self.message_at = 0.0
        self.message_kind = ""
        self.poll_delay_s: float | None = None
        self._unanswered: st.PendingChange | None = None  # a change the server never answered
        self._unanswered_said = False  # "not applied" already said for it
        self._unanswered_back_at: float | None = None  # first poll that answered after it
        self._inflight: dict[str, int] | None = None  # change being POSTed
        self._queued: list[dict[str, int]] = []  # changes still to POST, oldest first
        self._accepted_at: float | None = None  # when the server accepted the latest target
        self._accepted_step: int | None = None  # the first decode batch it decides (the answer's decode_step)
        self._sample_at = 0.0  # when the poll behind the current sample started
        self._rejected_against: tuple[int | None, int | None] = (None, None)  # N/H when rejected
        self._gate_values: tuple[int | None, int | None] | None = None  # spec_gate's N/H at the last poll
        self._gate_steps: int | None = None  # spec_gate's decode steps (ON + OFF) at the last poll
        self._restarted = False  # the server was restarted since the last spec_gate poll
        # changes POSTed: (time, change, the keys of it spec_gate has shown since)
        self._sent: deque[tuple[float, dict[str, int], set[str]]] = deque(maxlen=256)

    # -- inputs ----------------------------------------------------------------------------

    def on_sample(self, sample: st.ServerSample, polled_at: float | None = None) -> Outcome:
        """A successful poll that started at ``polled_at`` (default: now).

        Returns the outcome for pending changes: log lines of the ones it confirms (or finds not
        applied), none when nothing changed.
        """
        self.sample = sample
        self._sample_at = self.clock() if polled_at is None else polled_at
        if self.connection.reachable is not True and self.message_kind == KIND_CONNECTION:
            self.set_message(None)  # e.g. "server unreachable: threshold not changed" is over
        if self.message_kind == KIND_REJECTED and sample.gate is not None and (
                (set_threshold(sample.gate), sample.gate.hysteresis) != self._rejected_against):
            self.set_message(None)  # the reason was about values that are no longer the server's
        if self.message_kind == KIND_NO_CROSSOVER and sample.gate is not None and sample.gate.threshold is not None:
            self.set_message(None)  # "no crossover yet" is over: the auto threshold has one now
        self.connection = st.ConnectionState(url=self.url, reachable=True)
        figures = self.load.update(sample, self._sample_at)
        self._record_gpus(gpu_sources.server_rows(sample.gate))
        if figures.running.value is not None:
            self.batch_history.append(int(figures.running.value))
        if figures.throughput.value is not None:
            self.tput_history.append(figures.throughput.value)
        if sample.gate is not None and sample.gate.switches is not None:
            now = self.clock()
            # a probe of the auto threshold switches twice by design: not thrash
            self.switch_samples.append((now, sample.gate.switches - 2 * (sample.gate.auto_probes or 0)))
            while self.switch_samples and now - self.switch_samples[0][0] > SWITCH_WINDOW_S:
                self.switch_samples.popleft()
        lines = self._check_external(sample.gate) + self._check_pending() + self._check_unanswered()
        return Outcome(ok=True, level=self.message_level if lines else "info",
                       panel=self.message if lines else None, log_lines=tuple(lines))

    def switch_rate(self) -> float | None:
        """On<->off switches per minute over the last SWITCH_WINDOW_S (None before 10 s of data)."""
        if len(self.switch_samples) < 2:
            return None
        (t0, s0), (t1, s1) = self.switch_samples[0], self.switch_samples[-1]
        if t1 - t0 < 10.0 or s1 < s0:
            return None
        return (s1 - s0) * 60.0 / (t1 - t0)

    def on_failure(self, reason: str, foreign: bool = False, since: float | None = None) -> None:
        """A failed poll (server down or slow); ``foreign``: another process answers on the port;
        ``since``: when the failed poll was sent (model clock, s): an outage that began with a
        timed-out request is counted from that request, not from the timeout."""
        c = self.connection
        self.connection = st.ConnectionState(
            url=self.url,
            reachable=False,
            down_since=c.down_since if c.down_since is not None else (since if since is not None else self.clock()),
            last_error=reason,
            failures=c.failures + 1,
            foreign=foreign,
        )

    def on_gpus(self, panel: st.GpuPanelState) -> None:
        """An NVML read of this machine's GPUs."""
        self.gpus = panel
        self._record_gpus(panel.rows)

    def _record_gpus(self, rows) -> None:
        for row in rows:
            hist = self.gpu_history.setdefault(gpu_sources.row_key(row), deque(maxlen=self._history))
            hist.append(None if row.lost else row.util_pct)

    def on_log_line(self, line: str) -> None:
        """A log line (facts about the worker and startup phase; the load of a decode line)."""
        self.facts.feed(line)
        stats = logparse.parse_decode(line)
        if stats is not None:
            self.load.on_decode_line(stats, self.clock())
        if self.process is not None and self.process.phase not in (st.PHASE_CRASHED, st.PHASE_STOPPING, st.PHASE_STOPPED):
            if self.process.phase != st.PHASE_READY:
                self.process = replace(self.process, phase=self.facts.phase)

    def on_process(self, process: st.ProcessState) -> None:
        """The launched server changed (started, ready, crashed, stopped)."""
        self.process = process

    def set_message(self, text: str | None, level: str = "info", kind: str = "") -> None:
        """The last threshold-control outcome, shown in the speculation panel for MESSAGE_TTL_S.

        ``kind`` ``connection``: caused by the server being unreachable (cleared when it answers).
        """
        self.message, self.message_level, self.message_at = text, level, self.clock()
        self.message_kind = kind if text else ""

    def refuse(self, why: str, kind: str = "") -> Outcome:
        """A request refused before sending: the panel shows ``why``; the outcome's kind is
        ``connection`` while the server is down (its notice goes when the server answers), else
        ``kind`` (e.g. KIND_NO_CROSSOVER: it goes when the auto threshold has a crossover)."""
        kind = KIND_CONNECTION if self.connection.reachable is not True else kind
        self.set_message(why, "error", kind)
        return Outcome(ok=False, level="warning", panel=why, log_lines=(why,), notice=why, kind=kind)

    # -- threshold protocol ----------------------------------------------------------------

    @property
    def gate(self) -> st.GateState | None:
        """The live spec_gate of the last sample (None: none yet / gate not enabled)."""
        return self.sample.gate if self.sample else None

    def target(self) -> tuple[int | None, int | None]:
        """(threshold, hysteresis) a new change starts from: the pending targets, else spec_gate's."""
        g, p = self.gate, self.pending
        t = set_threshold(g)
        h = g.hysteresis if g else None
        if p is not None:
            t = p.threshold if p.threshold is not None else t
            h = p.hysteresis if p.hysteresis is not None else h
        return t, h

    def base_threshold(self) -> int | None:
        """The threshold a +/- step starts from: the pending target, else spec_gate's."""
        return self.target()[0]

    def check_request(self, threshold: int | None = None, hysteresis: int | None = None) -> str | None:
        """None if a change may be sent now, else the reason it is refused (nothing is sent).

        With only ``threshold`` given (a +/- step) it must also stay above the hysteresis.
        """
        if self.readonly:
            return "read-only: threshold changes are disabled (--readonly)"
        p = self.process
        if p is not None and p.phase in (st.PHASE_CRASHED, st.PHASE_STOPPING, st.PHASE_STOPPED):
            what = "was not started" if p.error else "is not running"
            return f"the server this console started {what}: threshold not changed"
        c = self.connection
        if c.foreign:
            return "not sent: another process holds the port (see the top line): threshold not changed"
        if c.auth_refused:
            return f"{c.last_error}: threshold not changed"
        if p is not None and p.phase in st.STARTUP_PHASES and self.sample is None:
            return f"the server is still starting ({p.phase}): threshold not changed"
        if c.reachable is False:
            why = f" ({c.last_error})" if c.last_error else ""
            who = f"server {c.down_word}" if c.down_word in ("unreachable", "not answering") else c.down_word
            return f"{who}{why}: threshold not changed"
        if self.sample is None:
            return "no answer from the server yet: threshold not changed"
        if self.gate is None:
            return f"this server runs without the speculation gate ({contract.THRESHOLD_FLAG})"
        if self.gate.threshold is None and self.gate.mode != contract.MODE_AUTO:
            return ("spec_gate has no threshold (it does not follow specconsole's contract: a server "
                    "patched by another version?): threshold not changed")
        if threshold is not None and threshold != contract.AUTO:
            err = validate_threshold(threshold, self.snapshot_max_running(),
                                     self.target()[1] if hysteresis is None else None)
            if err:
                return err
        if hysteresis is not None:  # against this server's N (T sends one H to servers of other N)
            t = threshold if threshold is not None else self.target()[0]
            return validate_hysteresis(hysteresis, None if t == contract.AUTO else t, self.snapshot_max_running())
        return None

    def snapshot_max_running(self) -> int | None:
        """Upper bound for the threshold (req): spec_gate's max running requests, else /v1/loads'."""
        g = self.gate
        if g is not None and g.max_running_requests is not None:
            return g.max_running_requests
        if self.sample is not None and self.sample.load is not None:
            return self.sample.load.max_running_requests
        return None

    def step_threshold(self, delta: int) -> Outcome:
        """``+``/``-``: the target threshold +- ``delta``; see :meth:`request_change`. From the
        auto threshold it leaves auto for a manual N at the learned crossover +- ``delta``; from
        an N above max running requests (it never fires) ``-`` goes to max running requests."""
        err = self.check_request()
        if err:
            return self.refuse(err)
        base = self.base_threshold()
        if base == contract.AUTO:
            base = self.gate.threshold  # the learned crossover
            if base is None:
                return self.refuse("the auto threshold has not found a crossover yet: set N with t "
                                   "(threshold not changed)", KIND_NO_CROSSOVER)
            return self._leave_auto(base + delta)
        assert isinstance(base, int)  # check_request refuses a spec_gate without a threshold
        limit = self.snapshot_max_running()
        if delta < 0 and limit is not None and base + delta > limit >= 1:
            # N above max running requests never fires: a step down goes straight to the limit
            out = self.request_change(limit, None)
            if not out.ok:
                return out
            above = contract.Problem("threshold", base, "max_running", limit).reason
            return replace(out, notice=f"threshold {base} is {above}: - goes to {limit}")
        return self.request_change(base + delta, None)

    def toggle_auto(self) -> Outcome:
        """``a``: the auto threshold on, or off again to a manual N at its learned crossover."""
        err = self.check_request()
        if err:
            return self.refuse(err)
        if self.target()[0] != contract.AUTO:
            return self.request_change(contract.AUTO, None)
        crossing = self.gate.threshold
        if crossing is None:
            return self.refuse("the auto threshold has not found a crossover yet: set N with t "
                               "(auto stays on)", KIND_NO_CROSSOVER)
        return self._leave_auto(crossing)

    def _leave_auto(self, threshold: int) -> Outcome:
        """Leaving auto for a manual ``threshold``. H must stay below N: one at or above it comes
        down to (N - 1) // 2 in the same change, so that speculation can still come back on (below
        N - H; N - 1 would leave it off for good), and a notice says so, instead of a refusal."""
        hysteresis = self.target()[1]
        if hysteresis is None or hysteresis < threshold or threshold < 1:
            return self.request_change(threshold, None)
        lowered = (threshold - 1) // 2
        out = self.request_change(threshold, lowered)
        if not out.ok:
            return out
        return replace(out, notice=f"hysteresis {hysteresis} -> {lowered}: it must stay below threshold "
                                   f"{threshold} (speculation back on below {threshold - lowered})")

    def request_change(self, threshold: int | None, hysteresis: int | None) -> Outcome:
        """Validate a change and make it the new target (queued for sending: :meth:`next_to_send`).

        Returns:
            Accepted for sending: ``ok`` with one log line (e.g. ``request threshold 34 -> 35``);
            refused: not ``ok``, the reason as panel text, log line and notice.
        """
        err = self.check_request(threshold, hysteresis)
        if err:
            return self.refuse(err)
        if threshold is None and hysteresis is None:
            return self.refuse("nothing to change")
        g = self.gate
        assert g is not None
        cur_t, cur_h = self.target()
        # a value already the target is not sent (T sends both: "hysteresis 4 -> 4" said nothing)
        threshold = None if threshold == cur_t else threshold
        hysteresis = None if hysteresis == cur_h else hysteresis
        if threshold is None and hysteresis is None:  # e.g. T to a server already there
            return Outcome(ok=True, log_lines=(f"already {target_text(cur_t, cur_h, ', ')}: nothing sent",))
        parts = []
        if threshold is not None:
            parts.append(f"threshold {cur_t} -> {threshold}")
        if hysteresis is not None:
            parts.append(f"hysteresis {cur_h} -> {hysteresis}")
        p = self.pending
        self.pending = st.PendingChange(
            threshold=threshold if threshold is not None else (p.threshold if p else None),
            hysteresis=hysteresis if hysteresis is not None else (p.hysteresis if p else None),
            old_threshold=p.old_threshold if p else set_threshold(g),
            old_hysteresis=p.old_hysteresis if p else g.hysteresis,
            since=self.clock(),
        )
        self._accepted_at = None
        self._unanswered = None  # a newer change: the unanswered one no longer matters
        change = {}
        if threshold is not None:
            change["threshold"] = threshold
        if hysteresis is not None:
            change["hysteresis"] = hysteresis
        self._queued.append(change)
        self.set_message(f"sending {_targets(self.pending)}", "info")
        return Outcome(ok=True, panel=self.message, log_lines=("request " + ", ".join(parts),))

    def next_to_send(self) -> dict[str, int] | None:
        """The change to POST now (``{"threshold": .., "hysteresis": ..}``, either key), or None.

        None while a request is in flight: the caller sends the next one after the answer, so
        the server receives the changes in the order they were asked for.
        """
        if self._inflight is not None or not self._queued:
            return None
        self._inflight = self._queued.pop(0)
        self._sent.append((self.clock(), dict(self._inflight), set()))
        return dict(self._inflight)

    @property
    def sending(self) -> bool:
        """A change is in flight or queued."""
        return self._inflight is not None or bool(self._queued)

    def on_set_result(self, sent: dict[str, int], result: st.SetResult) -> Outcome:
        """The server answered the change ``sent``.

        An accepted change is not logged (the request line and the confirmation are); a
        rejected one is, with the server's reason, which is also the notice. When nothing newer
        is queued the target falls back to the values the server reports.
        """
        self._inflight = None
        asked = _describe(sent.get("threshold"), sent.get("hysteresis"))
        if not result.updated:
            reason = result.reason or "no reason given"
            self.set_message(f"rejected: {reason}", "error", KIND_REJECTED)
            gate = self.sample.gate if self.sample is not None else None
            self._rejected_against = ((result.threshold, result.hysteresis) if result.threshold is not None
                                      else (set_threshold(gate), gate.hysteresis) if gate is not None else (None, None))
            if not self._queued:
                self._fall_back(result.threshold, result.hysteresis)
            return Outcome(ok=False, level="error", panel=self.message,
                           log_lines=(f"{asked} rejected by server: {reason}",),
                           notice=result.reason or "rejected", notice_title="server rejected the change")
        if not self._queued and self.pending is not None:
            self.pending = replace(self.pending, accepted=True)
            self._accepted_at = self.clock()
            self._accepted_step = result.decode_step
            step = f" from decode step {result.decode_step:,}" if result.decode_step is not None else ""
            self.set_message(f"{_targets(self.pending)} accepted{step}, waiting for spec_gate", "info")
        lines = self._check_pending()
        return Outcome(ok=True, level=self.message_level, panel=self.message, log_lines=tuple(lines))

    def on_set_failure(self, sent: dict[str, int], reason: str, delivered: bool = True) -> Outcome:
        """No answer to the change ``sent`` (``delivered`` False: it was not sent at all); the
        queued changes are dropped; the outcome's one log line is also its notice."""
        self._inflight = None
        what = _describe(sent.get("threshold"), sent.get("hysteresis"))
        if delivered and st.answered_not_sglang(reason):  # it answered, but not with the contract's JSON
            sep = " " if reason.startswith("HTTP ") else ", but its "
            text = f"{what}: the server answered{sep}{reason}; not confirmed"
        elif delivered:
            text = f"{what}: no answer from server ({reason}); not confirmed"
        else:
            text = f"{what} not sent: {reason}"
        if self._queued:  # requested (logged) while this one was in flight: say which, so none reads as sent
            dropped = ", ".join(target_text(c.get("threshold"), c.get("hysteresis")) for c in self._queued)
            text += f"; {len(self._queued)} queued change(s) not sent ({dropped})"
            self._queued = []
        self.set_message(text, "error")
        p, g = self.pending, self.gate
        if delivered and (sent.get("threshold") is not None or sent.get("hysteresis") is not None):
            # unknown whether it applied: watched, confirmed if spec_gate shows it later
            self._unanswered = st.PendingChange(
                threshold=sent.get("threshold"), hysteresis=sent.get("hysteresis"),
                old_threshold=p.old_threshold if p else set_threshold(g),
                old_hysteresis=p.old_hysteresis if p else (g.hysteresis if g else None),
                since=self.clock(),
            )
            self._unanswered_said = False
            self._unanswered_back_at = None
        self.pending = None  # the next poll shows spec_gate's values
        return Outcome(ok=False, level="error", panel=text, log_lines=(text,), notice=text)

    def reset_changes(self) -> None:
        """Forget pending, queued and unanswered changes (server restarted)."""
        self.pending = None
        self._queued, self._inflight = [], None
        self._accepted_at = None
        self._unanswered = None
        self._restarted = True  # the next N/H change is the restart's, not someone else's

    def _check_external(self, gate: st.GateState | None) -> list[str]:
        """spec_gate's N or H changed to a value this console did not send (another console, curl):
        said as such, instead of leaving this console's last outcome standing under it."""
        if gate is None:
            return []
        now_values, before = (set_threshold(gate), gate.hysteresis), self._gate_values
        self._gate_values = now_values
        steps = (gate.decode_steps_on or 0) + (gate.decode_steps_off or 0)
        if self._gate_steps is not None and steps < self._gate_steps:
            self._restarted = True  # a new server process (restarted outside this console): counts went back
        self._gate_steps = steps
        restarted, self._restarted = self._restarted, False
        if before is None or now_values == before or self.pending is not None or self.sending:
            self._mark_shown(now_values)
            return []  # nothing to compare, no change, or this console's own change under way
        parts = []
        for key, old, new in (("threshold", before[0], now_values[0]), ("hysteresis", before[1], now_values[1])):
            # after a restart the server's launch values are the restart's even where this console
            # had sent the same value to the old process
            if old != new and (restarted or not self._sent_unshown(key, new)):
                parts.append(f"{key} changed to {new}")
        self._mark_shown(now_values)
        if not parts:
            return []
        if restarted:
            text = (" and ".join(parts) + " with the restart (the server's launch arguments; values set in "
                    "this console before it are not kept)")
            self.set_message(text, "info")
            return [text]
        text = " and ".join(parts) + " outside this console"
        self.set_message(text, "info")
        return [text]

    def _sent_recently(self, key: str, value: Any) -> bool:
        """Whether this console POSTed ``key`` = ``value`` within UNANSWERED_TTL_S."""
        now = self.clock()
        return any(c.get(key) == value for t, c, _ in self._sent if now - t <= UNANSWERED_TTL_S)

    def _sent_unshown(self, key: str, value: Any) -> bool:
        """Whether spec_gate showing ``key`` = ``value`` is this console's doing: a POST of that value
        within UNANSWERED_TTL_S that spec_gate has not shown since (:meth:`_mark_shown`), so the same
        value set again later by another client is said to be theirs."""
        now = self.clock()
        return any(now - t <= UNANSWERED_TTL_S and key not in shown and change.get(key) == value
                   for t, change, shown in self._sent)

    def _mark_shown(self, values: tuple) -> None:
        """This console's POSTs of the values spec_gate shows now (``(threshold, hysteresis)``) are accounted for."""
        for t, change, shown in self._sent:
            for key, value in zip(("threshold", "hysteresis"), values):
                if change.get(key) == value:
                    shown.add(key)

    def _check_unanswered(self) -> list[str]:
        """A change without an answer: confirmed when spec_gate shows it, else said once to be not applied."""
        u, g = self._unanswered, self.gate
        if u is None or g is None:
            return []
        now = self.clock()
        if now - u.since > UNANSWERED_TTL_S:
            self._unanswered = None
            return []
        parts = []
        if u.threshold is not None and u.threshold != u.old_threshold:
            parts.append(("threshold", u.old_threshold, u.threshold, set_threshold(g)))
        if u.hysteresis is not None and u.hysteresis != u.old_hysteresis:
            parts.append(("hysteresis", u.old_hysteresis, u.hysteresis, g.hysteresis))
        if not parts:
            self._unanswered = None
            return []
        if all(live == want for _, _, want, live in parts):
            self._unanswered = None
            text = ", ".join(_change(name, old, want) for name, old, want, _ in parts)
            text += " confirmed by spec_gate (applied, although the request was not answered as expected)"
            self.set_message(text, "ok")
            return [text]
        if self._unanswered_back_at is None:
            self._unanswered_back_at = self._sample_at  # the server answers again
        if not self._unanswered_said and self._sample_at - self._unanswered_back_at >= UNANSWERED_GRACE_S:
            self._unanswered_said = True
            shown = " ".join(f"{name} {live}" for name, _, _, live in parts)
            # a request the client gave up on may still reach the server: watched, confirmed if it lands
            text = (f"{_describe(u.threshold, u.hysteresis)} was not answered as expected and spec_gate shows "
                    f"{shown}: not applied so far (confirmed if it lands later)")
            self.set_message(text, "error")
            return [text]
        return []

    def _fall_back(self, threshold: int | None, hysteresis: int | None) -> None:
        """After a rejection: pending only what the server reports beyond spec_gate's values."""
        g, p = self.gate, self.pending
        t = threshold if g is not None and threshold is not None and threshold != set_threshold(g) else None
        h = hysteresis if g is not None and hysteresis is not None and hysteresis != g.hysteresis else None
        if p is None or (t is None and h is None):
            self.pending = None
            return
        self.pending = replace(p, threshold=t, hysteresis=h, accepted=True)
        self._accepted_at = self.clock()
        self._accepted_step = None

    def _check_pending(self) -> list[str]:
        p = self.pending
        g = self.gate
        if p is None or g is None or not p.accepted or self.sending or self._accepted_at is None:
            return []
        if self._sample_at <= self._accepted_at:
            return []  # this sample may predate the change
        ok = (p.threshold is None or set_threshold(g) == p.threshold) and (p.hysteresis is None or g.hysteresis == p.hysteresis)
        if ok:
            self.pending = None
            parts = []
            if p.threshold is not None:
                parts.append(_change("threshold", p.old_threshold, p.threshold))
            if p.hysteresis is not None:
                parts.append(_change("hysteresis", p.old_hysteresis, p.hysteresis))
            text = ", ".join(parts) + " confirmed by spec_gate"
            self.set_message(text, "ok")
            return [text]
        # Another client changed it since ours: once the server has decided a decode batch with
        # ours (the answer's decode_step), any other value; before, the sample may still predate
        # ours (a value set by another client just before it is then replaced by ours, not
        # "replaced" it). A server that gives no decode_step: a value neither before nor ours.
        decided = _decided(g)
        if self._accepted_step is not None:
            if decided is None or decided <= self._accepted_step:
                moved = []
            else:
                moved = [(name, live) for name, want, live in (
                    ("threshold", p.threshold, set_threshold(g)), ("hysteresis", p.hysteresis, g.hysteresis))
                    if want is not None and live != want and not self._sent_recently(name, live)]
        else:
            moved = [(name, live) for name, want, old, live in (
                ("threshold", p.threshold, p.old_threshold, set_threshold(g)),
                ("hysteresis", p.hysteresis, p.old_hysteresis, g.hysteresis))
                if want is not None and live not in (want, old) and not self._sent_recently(name, live)]
        if moved:
            self.pending = None
            text = (" and ".join(f"{name} changed to {live}" for name, live in moved)
                    + f" outside this console ({_describe(p.threshold, p.hysteresis)} was accepted, then replaced)")
            self.set_message(text, "info")
            return [text]
        if self.clock() - self._accepted_at > CONFIRM_TIMEOUT_S:
            self.pending = None
            text = f"{_describe(p.threshold, p.hysteresis)} accepted but spec_gate still shows threshold {set_threshold(g)} hysteresis {g.hysteresis}"
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
        gpus = gpu_sources.combine(self.gpus, s.gate if s else None)
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
            gpus=gpus,
            batch_history=tuple(self.batch_history),
            throughput_history=tuple(self.tput_history),
            gpu_util_history=tuple(tuple(self.gpu_history.get(gpu_sources.row_key(r), ())) for r in gpus.rows),
            simulated_note=(s.simulated_note or "simulated server") if s and s.simulated else None,
            log_path=self.log_path,
            message=self.message if self.clock() - self.message_at <= MESSAGE_TTL_S else None,
            message_level=self.message_level,
            switches_per_min=self.switch_rate(),
            poll_delay_s=self.poll_delay_s,
            now=self.clock(),
            figures=self.load.figures,
        )


def _change(name: str, old: int | None, new: int | None) -> str:
    """``threshold 32 -> 33``; presses that cancel out (33 -> 34 -> 33) say so instead of ``33 -> 33``."""
    if old == new:
        return f"{name} back to {new}"
    return f"{name} {old} -> {new}"


def target_text(threshold: int | None, hysteresis: int | None, sep: str = " ") -> str:
    """``threshold 40 hysteresis 4`` (only the values given, joined by ``sep``; "" for none)."""
    parts = []
    if threshold is not None:
        parts.append(f"threshold {threshold}")
    if hysteresis is not None:
        parts.append(f"hysteresis {hysteresis}")
    return sep.join(parts)


def _targets(p: st.PendingChange) -> str:
    return target_text(p.threshold, p.hysteresis) or "change"


def _decided(gate: st.GateState) -> int | None:
    """Decode batches the gate has decided (``decode_steps_on + decode_steps_off``), None if unknown."""
    if gate.decode_steps_on is None or gate.decode_steps_off is None:
        return None
    return gate.decode_steps_on + gate.decode_steps_off


def _describe(threshold: int | None, hysteresis: int | None) -> str:
    text = target_text(threshold, hysteresis)
    return "set " + text if text else "empty change"
