"""The console's session without a UI: it polls the server, reads NVML and the log, sends
threshold changes one at a time, and (launch/demo) supervises the server it started.

Everything runs as asyncio tasks on the caller's event loop; blocking reads (NVML, the log
file, ``/proc``) run in threads, one at a time each, so results arrive in order and a stuck
read never stalls the loop. Every input goes into :class:`console.model.ConsoleModel`; what the
UI needs to know goes to the ``sink`` as a typed event (:mod:`console.events`): snapshots, log
lines, the outcomes of threshold requests, crashes. The session never touches a widget.

Log lines arrive numbered and classified; the server's access-log lines of the console's own
polls are of kind ``OWN`` (:mod:`console.accesslog`: exact request lines from
:data:`console.client.OWN_REQUEST_LINES`, from the client's own addresses). The log pane's
requests for lines it does not hold (:meth:`ConsoleSession.read_log`) are read in a thread too.

Launch/demo: the server's port is checked before the child starts (a server already there is
never taken for ours), a sample counts only while the process listening on the port is the child,
and a crash is reported with the exit code and the last log lines (``restart`` starts it again).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from console import events as ev
from console import logfilter, logparse, logreader, portcheck
from console import state as st
from console.accesslog import OwnRequestTracker
from console.client import OWN_REQUEST_LINES, Backoff, ServerClient, ServerUnreachable
from console.config import AppConfig, redact_args, server_host_port
from console.logfollow import LogBatch, LogFollower
from console.model import ConsoleModel
from console.nvml import NvmlReader
from console.process import ServerProcess, describe_exit
from console.servers import ROUTER_PROBE_LINES

#: seconds between log-file reads while a launched server starts (its start-up lines tell when it
#: is ready); afterwards the log is read once per poll interval, just before the poll's snapshot
LOG_READ_S = 0.25
#: however long --interval is, the log pane follows the log at least this often (s), and a
#: starting server is polled at least this often (its readiness is not the operator's interval)
LOG_FOLLOW_MAX_S = 2.0
STARTUP_POLL_S = 1.0
#: seconds a poll waits for its log read before publishing without it (the first read of a log of
#: hundreds of MB indexes it for seconds: the screen froze for 37 s on 300 MB)
LOG_WITH_POLL_S = 0.5
#: seconds between checks of the server child, at least (else the poll interval, at most 1 s)
PROCESS_CHECK_S = 0.5
#: seconds between snapshots when nothing else happens (durations on screen keep counting)
CLOCK_S = 1.0
#: seconds before a loop that raised runs again
RESTART_AFTER_ERROR_S = 1.0


def _ordinal(n: int) -> str:
    """``2`` -> ``"2nd"``, ``11`` -> ``"11th"``, ``23`` -> ``"23rd"``."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


class ConsoleSession:
    """One console session (see the module docstring).

    Args:
        config: what to watch or run (:class:`console.config.AppConfig`).
        sink: called on the event loop with every event (:mod:`console.events`).
        nvml_module: a pynvml-compatible object instead of nvidia-ml-py (tests, the demo).
        http_timeout_s: per-request HTTP timeout in seconds.
    """

    def __init__(self, config: AppConfig, sink: Callable[[Any], None], nvml_module: Any = None,
                 http_timeout_s: float = 5.0) -> None:
        self.cfg = config
        self.sink = sink
        self.http_timeout_s = http_timeout_s
        self.model = ConsoleModel(mode=config.mode, url=config.url, readonly=config.readonly,
                                  interval_s=config.interval_s,
                                  log_path=str(config.log_path) if config.log_path else None)
        self.nvml = NvmlReader(module=nvml_module)
        self.backoff = Backoff(config.interval_s)
        self.client: ServerClient | None = None
        self.follower: LogFollower | None = None
        self._log_problem: str | None = None  # the follower's last problem told (a console line)
        self.proc: ServerProcess | None = None
        self.nvml_busy = False  # an NVML read is running in its thread
        self.quitting = False
        self._wake = asyncio.Event()
        self._tasks: set[asyncio.Task] = set()
        self._scanned: list[str] = []
        self._own = OwnRequestTracker(OWN_REQUEST_LINES, ROUTER_PROBE_LINES)
        self._log_request: logfilter.LogRequest | None = None  # the newest request not yet read
        self._log_reader: asyncio.Task | None = None
        self._last_check = st.CHECK_UNKNOWN
        self._port_owner_ok = False  # the port's listener was checked to be our child
        self._published_at = 0.0  # time.monotonic() of the last publish()
        self._log_lock = asyncio.Lock()  # one log read at a time (the poll's and the log loop's)
        self._log_skipping = False  # the last log read skipped ahead (LogBatch.skipped_bytes)
        self._log_restarts: dict[str, int] = {}  # times the log was truncated / rotated (_note_log_restart)
        self._log_wake = asyncio.Event()  # read_log_soon(): read the log now
        self._log_urgent = False  # the next read's lines are shown at once (an operator waits)
        self._log_read_at = 0.0  # time.monotonic() of the last log read
        self._next_poll_at: float | None = None  # when the poll loop polls (and reads the log) next

    # -- lifecycle -------------------------------------------------------------------------

    def _spawn_task(self, coro, name: str = "") -> asyncio.Task:
        """Run ``coro`` as a task of this session; an exception in it is reported, not lost."""
        task = asyncio.get_running_loop().create_task(self._reported(coro, name or coro.__name__))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _spawn_loop(self, factory, name: str) -> asyncio.Task:
        """Run the loop ``factory()`` as a task; after an exception it is reported and restarted
        (a bug in one answer's handling must not stop polling for the rest of the session)."""

        async def forever() -> None:
            while not self.quitting:
                if await self._reported(factory(), name):
                    return
                await asyncio.sleep(RESTART_AFTER_ERROR_S)

        return self._spawn_task(forever(), name)

    async def _reported(self, coro, name: str) -> bool:
        """Await ``coro``; True when it ended normally, False after an exception (reported)."""
        try:
            await coro
            return True
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - shown to the operator instead of vanishing
            text = f"internal error in {name}: {type(exc).__name__}: {exc}"
            self.console_line(text + " (please report it)")
            self.sink(ev.InternalError(name, text))
            return False

    def configure(self, config: AppConfig, nvml_module: Any = None) -> None:
        """Switch to another session config before :meth:`start` (the no-server screen's choice)."""
        self.cfg = config
        self.model.readonly = config.readonly
        self.backoff = Backoff(config.interval_s)
        if nvml_module is not None:
            self.nvml.close()
            self.nvml = NvmlReader(module=nvml_module)

    def start_gpus(self) -> None:
        """Start reading NVML every poll interval (also without a server)."""
        self._spawn_loop(self._gpu_loop, "the NVML reads")
        self._spawn_loop(self._clock_loop, "the clock")

    def start(self) -> None:
        """Start polling (and the server child in launch/demo mode)."""
        cfg = self.cfg
        m = self.model
        m.mode, m.url = cfg.mode, cfg.url
        m.log_path = str(cfg.log_path) if cfg.log_path else None
        m.connection = st.ConnectionState(url=cfg.url)
        self.client = ServerClient(cfg.url, api_key=cfg.api_key, timeout_s=self.http_timeout_s)
        if cfg.log_path is not None:
            self.follower = LogFollower(cfg.log_path, on_scan=self._scan_fact)
        if cfg.server_command:
            self.proc = ServerProcess(cfg.server_command, cfg.log_path or Path("server.log"),
                                      stop_timeout_s=cfg.stop_timeout_s)
            self._start_process()
        self.console_line(f"{cfg.mode}: {cfg.url}" + (f", log {cfg.log_path}" if cfg.log_path else ""))
        if cfg.mode == "attach" and cfg.log_path is not None and not cfg.log_path.exists():
            self.console_line(f"log {cfg.log_path}: no such file yet; it is followed once it appears")
        if self.follower is not None:
            self._spawn_loop(self._log_loop, "the log reader")
        if self.proc is not None:
            self._spawn_loop(self._process_loop, "the server watch")
        self._spawn_loop(self._poll_loop, "the poll loop")
        self.publish()

    async def close(self) -> None:
        """Cancel every task and close the HTTP client, NVML and the log file."""
        self.quitting = True
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.client is not None:
            await self.client.aclose()
        self.nvml.close()
        if self.follower is not None:
            self.follower.close()

    def stop_server(self) -> None:
        """Stop the server group if this session started one (blocking, idempotent, any thread)."""
        if self.proc is not None:
            self.proc.stop()

    def server_running(self) -> bool:
        """Launch/demo: the child or something of its process group still runs."""
        p = self.proc
        return p is not None and p.popen is not None and (p.poll() is None or bool(p.members()))

    async def quit(self) -> None:
        """Stop polling; in launch/demo mode stop the server's process group (SIGTERM, SIGKILL later)."""
        self.quitting = True
        if self.proc is not None and self.server_running():
            p = self.model.process or st.ProcessState()
            self.model.on_process(replace(p, phase=st.PHASE_STOPPING))
            self.publish()
            self.sink(ev.ServerStopping(self.cfg.stop_timeout_s))
            await asyncio.to_thread(self.proc.stop)

    # -- output ----------------------------------------------------------------------------

    def publish(self, soon: bool = False) -> None:
        """Hand the current snapshot to the sink (and report a new worker mismatch).

        ``soon``: it may wait for the screen's next update (:attr:`console.events.Published.soon`).
        """
        snap = self.model.snapshot()
        if snap.worker.status != self._last_check:
            if snap.worker.status == st.CHECK_MISMATCH:
                self.console_line("WORKER MISMATCH: " + snap.worker.detail)
                self.sink(ev.WorkerMismatch(snap.worker.detail))
            self._last_check = snap.worker.status
        self._published_at = time.monotonic()
        self.sink(ev.Published(snap, soon=soon))

    def console_line(self, text: str) -> None:
        """A console line for the log pane."""
        self.sink(ev.ConsoleLine(text))

    async def _clock_loop(self) -> None:
        """A snapshot every CLOCK_S s when nothing else published one (durations keep counting).

        While the polls and NVML reads publish every interval, this adds no screen update of its own.
        """
        while True:
            await asyncio.sleep(max(0.05, self._published_at + CLOCK_S - time.monotonic()))
            if time.monotonic() - self._published_at >= CLOCK_S * 0.99:
                self.publish()

    # -- threshold changes -----------------------------------------------------------------

    def step_threshold(self, delta: int) -> ev.Outcome:
        """``+``/``-``: the pending target (else spec_gate's threshold) +- ``delta`` req, sent at once."""
        return self._requested(self.model.step_threshold(delta))

    def toggle_auto(self) -> ev.Outcome:
        """``a``: the auto threshold on, or back to a manual N at its learned crossover."""
        return self._requested(self.model.toggle_auto())

    def request_change(self, threshold: int | str | None, hysteresis: int | None) -> ev.Outcome:
        """Validate a gate change, make it the pending target and send it (absolute values)."""
        return self._requested(self.model.request_change(threshold, hysteresis))

    def refuse(self, why: str) -> ev.Outcome:
        """A request refused before sending (e.g. a threshold key in --readonly)."""
        return self._requested(self.model.refuse(why))

    def _requested(self, outcome: ev.Outcome) -> ev.Outcome:
        self.sink(ev.ChangeOutcome(outcome))
        self.publish()
        if outcome.ok:
            self._send_next()
        return outcome

    def _send_next(self) -> None:
        """POST the next queued change unless one is in flight (answers keep the order)."""
        change = self.model.next_to_send()
        if change is not None:
            self._spawn_task(self._send_change(change))

    async def _send_change(self, change: dict[str, int]) -> None:
        assert self.client is not None
        not_sent = None
        if not self.child_alive():  # launch/demo: never send to whatever else holds the port
            not_sent = "the server this console started is not running"
        elif self.model.connection.foreign:
            not_sent = "another process holds the port"
        try:
            if not_sent:
                raise ServerUnreachable(not_sent)
            result = await self.client.set_gate(change.get("threshold"), change.get("hysteresis"))
        except ServerUnreachable as exc:
            outcome = self.model.on_set_failure(change, str(exc), delivered=not not_sent)
        else:
            outcome = self.model.on_set_result(change, result)
        self.sink(ev.ChangeOutcome(outcome))
        self.publish()
        self._send_next()
        self.poll_now()

    # -- the server child (launch / demo) ----------------------------------------------------

    def _server_port(self) -> tuple[str, int | None]:
        """(host, port) the child server binds, from its command line."""
        return server_host_port(self.cfg.server_command or [])

    def _start_process(self) -> None:
        """Start the child once its port is known to be free."""
        self._port_owner_ok = False
        self._spawn_task(self._start_checked())

    async def _start_checked(self) -> None:
        host, port = self._server_port()
        taken = None
        if port is not None:
            taken = await asyncio.to_thread(portcheck.check_port, host, port,
                                            hint=portcheck.port_hint(self.cfg.mode), api_key=self.cfg.api_key)
        if self.quitting:
            return
        if taken is not None:
            self._not_started(taken.short, taken.message, f"server not started: port {port} is in use (see the log)")
            return
        self._spawn()  # on the event loop's (main) thread: the parent-death signal is tied to it

    def _not_started(self, short: str, full: str | None = None, notice: str | None = None) -> None:
        """The child was not started: ``short`` on screen, ``full`` in the log pane, ``notice`` as a toast."""
        assert self.proc is not None
        self.model.on_process(st.ProcessState(phase=st.PHASE_CRASHED, exit_code=None, last_lines=(full or short,),
                                              command=" ".join(redact_args(self.proc.command)), error=short))
        self.console_line(f"server not started: {full or short}")
        self.sink(ev.ServerNotStarted(short, notice or f"server not started: {short}"))
        self.publish()

    def _spawn(self) -> None:
        assert self.proc is not None
        try:
            self.proc.start()
        except OSError as exc:
            self._not_started(f"could not start: {exc}")
            return
        self.model.on_process(st.ProcessState(
            phase=st.PHASE_STARTING, pid=self.proc.pid, started_at=self.proc.started_at,
            restarts=self.proc.starts - 1, command=" ".join(redact_args(self.proc.command)),
        ))
        self.console_line(f"started server pid {self.proc.pid} (process group {self.proc.pgid})")
        self.poll_now()
        self.publish()

    def child_alive(self) -> bool:
        """Launch/demo: the server child runs (started, not exited, not being stopped). Attach: True."""
        proc = self.proc
        if proc is None:
            return True
        return proc.popen is not None and not proc.stopping and proc.poll() is None

    async def _process_loop(self) -> None:
        while True:
            await asyncio.sleep(max(PROCESS_CHECK_S, min(self.cfg.interval_s, 1.0)))
            self.check_process()

    def check_process(self) -> None:
        """Notice a child that exited on its own: crashed, with its exit code and last log lines."""
        proc, p = self.proc, self.model.process
        if proc is None or p is None or proc.stopping or self.quitting:
            return
        if p.phase in (st.PHASE_CRASHED, st.PHASE_STOPPED):
            return
        code = proc.poll()
        if code is None:
            return
        own = self._own.snapshot(self._own_addresses()).matches  # the console's own polls say nothing here
        last = tuple([line for line in proc.last_lines(60) if not own(line)][-12:])
        self.model.on_process(replace(p, phase=st.PHASE_CRASHED, exit_code=code, last_lines=last))
        self.console_line(f"server exited on its own: {describe_exit(code)}; r restarts it")
        self.publish()
        self._spawn_task(self._reap_group())
        self.sink(ev.ServerCrashed(self.model.process))

    async def _reap_group(self) -> None:
        """After a crash: stop whatever the dead server left in its process group."""
        if self.proc is not None:
            left = await asyncio.to_thread(self.proc.members)
            if left:
                self.console_line(f"stopping {len(left)} leftover process(es) of the crashed server")
            await asyncio.to_thread(self.proc.stop)

    def restart_problem(self) -> str | None:
        """Why the server cannot be restarted now (attached, or still running), or None."""
        if self.proc is None:
            return "r restarts only a server this console started (launch / demo); this one is attached"
        if self.proc.poll() is None and self.proc.members():
            return ("the server is still running: r restarts it only after it has exited "
                    "(q stops it and quits)")
        return None

    def restart(self) -> None:
        """Start the server again after a crash (check :meth:`restart_problem` first)."""
        m = self.model
        m.sample = None
        m.load.reset()
        m.reset_changes()
        m.set_message(None)
        m.connection = st.ConnectionState(url=self.cfg.url)
        self.console_line("restarting the server")
        self._start_process()
        self.poll_now()
        self.publish()

    # -- HTTP ------------------------------------------------------------------------------

    async def _poll_loop(self) -> None:
        """Poll forever: /server_info + /v1/loads every interval, backing off while down.

        Launch/demo: only while the child runs, and a sample counts only when the process
        listening on the port is the child (or cannot be told apart): whatever else answers on
        that port (a server that was there first, or took the port after a crash) is never
        shown as the console's server.
        """
        assert self.client is not None
        while True:
            if not self.child_alive():
                # nothing of ours to poll (starting, crashed, stopped): never talk to the port
                if self.proc is not None and self.proc.popen is not None:
                    self.check_process()
                self._next_poll_at = None  # the log loop reads on its own meanwhile
                await self._sleep(self.cfg.interval_s)
                continue
            await self.poll_once()
            failures = self.model.connection.failures
            starting = self.model.process is not None and self.model.process.phase != st.PHASE_READY
            delay = min(self.cfg.interval_s, STARTUP_POLL_S) if starting else self.backoff.delay(failures)
            self.model.poll_delay_s = delay
            self._next_poll_at = time.monotonic() + delay
            if self.follower is not None and not self._log_lock.locked():
                # the log's new lines go with this snapshot (one screen update) when they come in
                # time; a long read (indexing a huge log) goes on alone, polling does not wait for it
                read = self._spawn_task(self._read_log_once(publish=False), "the log reader")
                await asyncio.wait({read}, timeout=LOG_WITH_POLL_S)
            self.publish()
            await self._sleep(delay)

    async def poll_once(self) -> None:
        """One poll of the server, folded into the model."""
        assert self.client is not None
        polled_at = self.model.clock()
        was_down = self.model.connection.reachable is not True
        try:
            sample = await self.client.poll()
        except ServerUnreachable as exc:
            self.model.on_failure(str(exc), since=polled_at)
            return
        foreign = await self._foreign_listener()
        if not self.child_alive():
            self.check_process()  # it exited while we asked: the answer is not its
        elif foreign:
            self._on_foreign(foreign)
        else:
            outcome = self.model.on_sample(sample, polled_at)
            if outcome.log_lines:
                self.sink(ev.ChangeOutcome(outcome))
            if was_down:
                self.sink(ev.Reconnected())
            p = self.model.process
            if p is not None and p.phase not in (st.PHASE_READY, st.PHASE_CRASHED, st.PHASE_STOPPING,
                                                 st.PHASE_STOPPED):
                self.model.on_process(replace(p, phase=st.PHASE_READY))

    async def _sleep(self, delay: float) -> None:
        """Wait ``delay`` seconds or until :meth:`poll_now`."""
        self._wake.clear()
        try:
            await asyncio.wait_for(self._wake.wait(), timeout=delay)
        except asyncio.TimeoutError:
            pass

    def poll_now(self) -> None:
        """Wake the poll loop now (after a change, or when the server became ready)."""
        self._wake.set()

    async def _foreign_listener(self) -> str | None:
        """Launch/demo: who holds the port if it is provably not the child, else None.

        Checked (Linux, ``/proc``) until the child is seen holding it once per start; a
        listener this user may not inspect (another user's, a container proxy) counts as ours.
        """
        if self.proc is None or self._port_owner_ok:
            return None
        _, port = self._server_port()
        if port is None:
            self._port_owner_ok = True
            return None
        owners = await asyncio.to_thread(portcheck.listener_pids, port)
        if not owners:  # not Linux, or a listener we may not inspect: cannot be told apart
            self._port_owner_ok = True
            return None
        if owners & set(self.proc.members()):
            self._port_owner_ok = True
            return None
        return f"port {port} is held by {portcheck.process_line(min(owners), 40)}, not by the server this console started"

    def _on_foreign(self, who: str) -> None:
        first = not self.model.connection.foreign
        self.model.on_failure(who, foreign=True)
        if first:
            self.console_line(who + ": not shown, nothing sent there")
            self.sink(ev.PortTaken(self._server_port()[1]))

    # -- NVML and the log --------------------------------------------------------------------

    async def _gpu_loop(self) -> None:
        while not self.quitting:
            self.nvml_busy = True
            try:
                panel = await asyncio.to_thread(self.nvml.read)
            finally:
                self.nvml_busy = False
            self.model.on_gpus(panel)
            self.publish(soon=True)  # shown with the next poll's snapshot (one screen update)
            await asyncio.sleep(self.cfg.interval_s)

    def _scan_fact(self, line: str) -> None:
        """Called from the log thread for lines above the initial tail: keep only fact lines."""
        if line.startswith(logparse.START_MARKER) or logparse.classify(line) == logparse.VERIFY:
            self._scanned.append(line)

    def _note_log_problem(self) -> None:
        """A console line when the followed log path stops (or starts again) being a file it can
        read: replaced by a directory, its permission taken away. The pane said nothing there."""
        problem = self.follower.problem if self.follower is not None else None
        if problem == self._log_problem:
            return
        path = self.follower.path if self.follower is not None else None
        if problem is not None:
            self.console_line(f"log {path}: {problem}; the pane follows it again once it is a readable file")
        else:
            self.console_line(f"log {path}: readable again")
        self._log_problem = problem

    def _note_log_skip(self, skipped: int) -> None:
        """A console line when the log grows faster than the pane shows it and the follower skips
        ahead (once per stretch of skipping)."""
        if skipped and not self._log_skipping and self.follower is not None:
            self.console_line(f"log {self.follower.path}: written faster than the pane shows it; skipping to "
                              f"its end (search and filter still reach every line)")
        self._log_skipping = bool(skipped)

    def _note_log_restart(self, batch: LogBatch) -> None:
        """A console line each time the followed log starts over: truncated or rewritten in place
        (read again from its top), or another file at its path (rotated or replaced). From the
        second on each says which time it is (the console dedupes a line repeated within seconds)."""
        if self.follower is None:
            return
        for happened, what in ((batch.rotated, "rotated"), (batch.truncated, "truncated")):
            if not happened:
                continue
            n = self._log_restarts[what] = self._log_restarts.get(what, 0) + 1
            nth = f" (the {_ordinal(n)} time)" if n > 1 else ""
            self.console_line(f"log {self.follower.path}: " + (
                f"a new file at the path{nth} (the old one rotated or replaced); following it" if what == "rotated"
                else f"truncated or rewritten in place{nth}; reading it again from the top"))

    def _own_addresses(self) -> list[str]:
        """The client addresses (``host:port``) the console's requests came from so far."""
        return list(self.client.local_addresses) if self.client is not None else []

    def _read_log(self) -> tuple[list[str], LogBatch, list[tuple[str, str]]]:
        assert self.follower is not None
        batch = self.follower.read_batch()
        scanned, self._scanned = self._scanned, []
        addrs = self._own_addresses()
        kinds = [logparse.OWN if self._own.is_own(line, addrs) else logparse.classify(line) for line in batch.lines]
        return scanned, batch, list(zip(kinds, batch.lines))

    def read_log_soon(self) -> None:
        """Read the log now and show its new lines at once (an operator searches or filters)."""
        self._log_urgent = True
        self._log_wake.set()

    def _log_due(self) -> tuple[float, bool]:
        """When the log loop reads next on its own, and whether that read shows its lines at once.

        While the poll loop polls, each poll reads the log just before its snapshot, so the loop
        only stands by (half an interval after the poll is due). With no poll coming within an
        interval (no server yet, backing off, the child not running) it reads every interval and
        shows the lines at once; while a launched server starts, every LOG_READ_S (its start-up
        lines tell when it is ready). However long ``--interval`` is, at least every
        LOG_FOLLOW_MAX_S (the pane tails the log).
        """
        interval = min(self.cfg.interval_s, LOG_FOLLOW_MAX_S)
        p = self.model.process
        starting = p is not None and p.phase in st.STARTUP_PHASES
        due = self._log_read_at + (min(interval, LOG_READ_S) if starting else interval)
        poll = self._next_poll_at
        if poll is not None and not starting and poll <= due + interval / 2:
            return max(due, poll + interval / 2), False  # the poll reads first: stand by
        return due, poll is None or poll > due + interval  # no poll to show the lines soon: at once

    async def _log_loop(self) -> None:
        while True:
            due, at_once = self._log_due()
            wait = due - time.monotonic()
            if wait > 0 and not self._log_wake.is_set():
                try:
                    await asyncio.wait_for(self._log_wake.wait(), timeout=wait)
                except asyncio.TimeoutError:
                    pass
                continue  # the poll may have read meanwhile: work out when again
            self._log_wake.clear()
            await self._read_log_once(soon=not at_once)

    async def _read_log_once(self, publish: bool = True, soon: bool = True) -> None:
        """Read the log's new lines (in a thread) and hand them on; ``publish``: with a snapshot
        (``soon``: one that may wait for the screen's next update). An operator's
        :meth:`read_log_soon` makes it one shown at once."""
        async with self._log_lock:
            self._log_read_at = time.monotonic()
            scanned, batch, lines = await asyncio.to_thread(self._read_log)
            self._note_log_problem()
            self._note_log_skip(batch.skipped_bytes)
            self._note_log_restart(batch)
            urgent, self._log_urgent = self._log_urgent, False
            if urgent:
                publish, soon = True, False
            if lines or scanned:
                self._on_log_lines(scanned, lines, batch, publish=publish, soon=soon)
            elif urgent:
                self.publish()  # the lines held for the screen's next update: now

    def _on_log_lines(self, scanned: list[str], lines: list[tuple[str, str]], batch: LogBatch,
                      publish: bool = True, soon: bool = True) -> None:
        for line in scanned:
            self.model.on_log_line(line)
        ready_before = self.model.facts.phase == st.PHASE_READY
        for _, line in lines:
            self.model.on_log_line(line)
        self.sink(ev.LogLines(tuple(lines), tuple(batch.numbers), batch.file_id, batch.total_lines))
        if not ready_before and self.model.facts.phase == st.PHASE_READY:
            self.poll_now()
        if publish:
            self.publish(soon=soon)

    # -- reading the whole log file (search and filter beyond the lines the pane holds) ------

    def read_log(self, request: logfilter.LogRequest) -> None:
        """Read what ``request`` asks from the log file in a thread; the answer comes as
        :class:`console.events.LogFound`. One read at a time: a newer request replaces one that
        waits, and ends a running one early."""
        if self.follower is None:
            return
        self._log_request = request
        if self._log_reader is None or self._log_reader.done():
            self._log_reader = self._spawn_task(self._log_reads())

    async def _log_reads(self) -> None:
        while self._log_request is not None:
            request, self._log_request = self._log_request, None
            found = await asyncio.to_thread(self._answer, request)
            if found is not None:
                self.sink(found)

    def _answer(self, request: logfilter.LogRequest) -> ev.LogFound | None:
        """Blocking (a thread): read the file for ``request``; None when a newer one waits."""
        assert self.follower is not None
        return logreader.answer(request, self.follower.path, self.follower.index,
                                self._own.snapshot(self._own_addresses()).matches,
                                cancelled=lambda: self._log_request is not None)

    async def server_answers(self, url: str) -> bool:
        """``GET url/health`` answers 200 (the no-server screen's retry)."""
        client = ServerClient(url, timeout_s=1.0)
        try:
            return await client.health()
        finally:
            await client.aclose()


def wall_clock() -> str:
    """Local time ``HH:MM:SS`` for console lines in the log pane."""
    return time.strftime("%H:%M:%S")
