"""The Textual app: wires the data layer to the screens.

* HTTP polling runs in an async worker (httpx, timeouts, backoff while the server is down);
  NVML reads and log-file reads run in thread workers started by timers (one at a time each),
  so the UI never waits on the network, NVML or the disk.
* Every input goes into :class:`console.model.ConsoleModel`; the resulting snapshot is handed to
  :class:`console.screens.main.MainScreen`, whose widgets only render it.
* In launch/demo mode the app owns the server's process group (:class:`console.process.ServerProcess`):
  it shows startup progress, detects a crash (exit code + last log lines, ``r`` restarts) and
  stops the whole group on quit, SIGTERM and SIGHUP.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterable

from textual import work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.notifications import Notification, Notify
from textual.screen import Screen
from textual.widgets import Input

import themes
from console import logparse, portcheck
from console import state as st
from console.client import Backoff, ServerClient, ServerUnreachable
from console.config import AppConfig, redact_args, server_host_port
from console.keyorder import KeyOrderMixin
from console.logfollow import LogFollower
from console.model import ConsoleModel
from console.nvml import NvmlReader
from console.process import ServerProcess
from console.screens.crash import CrashScreen, describe_exit
from console.screens.help import HelpScreen
from console.screens.main import MainScreen
from console.screens.no_server import NoServerScreen
from console.screens.threshold_dialog import ThresholdDialog, ThresholdRequest
from console.widgets.log_panel import LogPanel
from console.widgets.log_view import LogView

HERE = Path(__file__).resolve().parent

#: seconds between log-file reads
LOG_READ_S = 0.25
REPEAT_QUIET_S = 5.0  # seconds in which the same console line is written once
#: seconds between checks of the server child
PROCESS_CHECK_S = 0.5
#: toasts on screen at once (older ones go; identical ones replace each other)
MAX_TOASTS = 2
#: seconds a console notice (toast) stays
NOTICE_TIMEOUT_S = 4.0
#: toast tag of the threshold-control notices (each replaces the previous one)
CONTROL = "control"


class SpecConsoleApp(KeyOrderMixin, App[int]):
    """specconsole. ``App.run()`` returns 0 (or the exit code asked for) and leaves the terminal clean.

    Args:
        config: what to run (see :class:`console.config.AppConfig`).
        nvml_module: a pynvml-compatible object to use instead of nvidia-ml-py (tests, demo).
        http_timeout_s: per-request HTTP timeout in seconds.
    """

    TITLE = "specconsole"
    CSS_PATH = [HERE / "app.tcss", *themes.css_paths()]
    ENABLE_COMMAND_PALETTE = True

    BINDINGS = [
        Binding("q", "quit", "Quit"),
        Binding("ctrl+c", "quit", "Quit", show=False, priority=True),
        Binding("question_mark", "help", "Help", key_display="?"),
        Binding("plus,equals_sign", "threshold_step(1)", "Thr+1", key_display="+"),
        Binding("minus", "threshold_step(-1)", "Thr-1", key_display="-"),
        Binding("t", "threshold_dialog", "Set"),
        # --readonly: the keys above are hidden (check_action) and these say why instead
        Binding("plus,equals_sign,minus,t", "readonly_notice", "Read-only", show=False),
        Binding("slash", "log_prompt('search')", "Search", key_display="/"),
        Binding("n", "next_match(1)", "Next match", show=False),
        Binding("N", "next_match(-1)", "Previous match", show=False),
        Binding("f", "log_prompt('include')", "Filter"),
        Binding("x", "log_prompt('exclude')", "Hide", show=False),
        Binding("c", "clear_log_filters", "Clear filters", show=False),
        Binding("p", "toggle_follow", "Pause"),
        Binding("G,end", "follow", "Follow", show=False),  # the log view maps its own End to follow too
        Binding("r", "restart", "Restart", show=False),
        # Textual adds its Ctrl+P binding only when no binding names the palette action: bind both
        Binding("ctrl+p", "command_palette", "Palette", show=False, priority=True),
        Binding("colon", "command_palette", "Palette", show=False),
    ]

    def __init__(self, config: AppConfig, nvml_module: Any = None, http_timeout_s: float = 5.0) -> None:
        super().__init__()
        self.cfg = config
        self.http_timeout_s = http_timeout_s
        self.theme_name = config.theme
        self.model = ConsoleModel(
            mode=config.mode, url=config.url, readonly=config.readonly, interval_s=config.interval_s,
            log_path=str(config.log_path) if config.log_path else None,
        )
        self.nvml = NvmlReader(module=nvml_module)
        self.client: ServerClient | None = None
        self.backoff = Backoff(config.interval_s)
        self.follower: LogFollower | None = None
        self.proc: ServerProcess | None = None
        self._wake = asyncio.Event()
        self._nvml_busy = False
        self._log_busy = False
        self._quitting = False
        self._signalled = False
        self._session = False
        self._last_check = st.CHECK_UNKNOWN
        self._crash_shown = False
        self._event_loop: asyncio.AbstractEventLoop | None = None
        self._tagged: dict[str, tuple[str, str]] = {}  # toast identity -> (tag, message kind)
        self._port_owner_ok = False  # the port's listener was checked to be our child
        self._last_console_line: tuple[str | None, float] = (None, 0.0)  # (text, monotonic time)

    # -- setup -----------------------------------------------------------------------------

    def get_default_screen(self) -> Screen:
        return MainScreen(id="main")

    @property
    def main_screen(self) -> MainScreen:
        """The main screen (the bottom of the screen stack)."""
        return self.screen_stack[0]  # type: ignore[return-value]

    def on_mount(self) -> None:
        self.apply_theme(self.cfg.theme)
        if self.cfg.handle_signals:
            self._install_signal_handlers()
        self.set_interval(self.cfg.interval_s, self._read_gpus_tick)
        self._read_gpus_tick()
        self.set_interval(1.0, self.publish)
        self.call_after_refresh(self._begin)

    def _begin(self) -> None:
        if self.cfg.mode == "none":
            self._show_no_server()
        else:
            self.start_session()

    def apply_theme(self, name: str) -> None:
        """Switch to theme ``name`` (``dark``, ``light``, ``ansi``): its class plus its Textual base theme."""
        info = themes.get(name)
        for t in themes.THEMES.values():
            self.remove_class(t.css_class)
        self.add_class(info.css_class)
        self.theme = info.textual_theme
        self.theme_name = name
        self.refresh_css()

    def _install_signal_handlers(self) -> None:
        loop = self._event_loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGHUP):
            try:
                loop.add_signal_handler(sig, self._on_signal, sig)
            except (NotImplementedError, RuntimeError, ValueError):  # pragma: no cover
                pass

    def _on_signal(self, sig: int) -> None:
        """SIGTERM / SIGHUP (ssh drop): stop the server group, then exit (or force it).

        After SIGHUP the terminal is gone: there is nothing to restore and Textual may block
        writing to it, so the process ends right after the server group is stopped. After
        SIGTERM the app gets a few seconds to leave the terminal clean.
        """
        if self._signalled:
            return
        self._signalled = True
        grace_s = 0.3 if sig == signal.SIGHUP else 5.0

        def stop_then_exit() -> None:
            if self.proc is not None:
                self.proc.stop()
            try:
                self.loop_call(self.exit, 128 + sig)
            except Exception:  # noqa: BLE001 - app already gone
                pass
            time.sleep(grace_s)  # the main thread normally ends the process before this
            os._exit(128 + sig)

        threading.Thread(target=stop_then_exit, name="specconsole-signal", daemon=True).start()

    def loop_call(self, fn, *args) -> None:
        """Run ``fn(*args)`` on the app's event loop without waiting for it (any thread)."""
        loop = self._event_loop
        if loop is None or loop.is_closed():
            return
        loop.call_soon_threadsafe(fn, *args)

    def start_session(self) -> None:
        """Start polling (and the server child in launch/demo mode)."""
        cfg = self.cfg
        self._session = True
        self.model.mode, self.model.url = cfg.mode, cfg.url
        self.model.log_path = str(cfg.log_path) if cfg.log_path else None
        self.model.connection = st.ConnectionState(url=cfg.url)
        self.client = ServerClient(cfg.url, api_key=cfg.api_key, timeout_s=self.http_timeout_s)
        log_panel = self.main_screen.query_one(LogPanel)
        if cfg.log_path is not None:
            log_panel.base_title = f"Log {cfg.log_path.name}"
            self.follower = LogFollower(cfg.log_path, on_scan=self._scan_fact)
            self._scanned: list[str] = []
        else:
            log_panel.base_title = "Log (none: attach --log FILE)"
        log_panel.update_title()
        if cfg.server_command:
            self.proc = ServerProcess(cfg.server_command, cfg.log_path or Path("server.log"), stop_timeout_s=cfg.stop_timeout_s)
            self._start_process()
        self.console_line(f"{cfg.mode}: {cfg.url}" + (f", log {cfg.log_path}" if cfg.log_path else ""))
        if cfg.mode == "attach" and cfg.log_path is not None and not cfg.log_path.exists():
            self.console_line(f"log {cfg.log_path}: no such file yet; it is followed once it appears")
        if cfg.log_path is not None:
            self.set_interval(LOG_READ_S, self._read_log_tick)
        if self.proc is not None:
            self.set_interval(PROCESS_CHECK_S, self._check_process)
        self._poll_loop()
        self.publish()

    def _server_port(self) -> tuple[str, int | None]:
        """(host, port) the child server binds, from its command line."""
        return server_host_port(self.cfg.server_command or [])

    def _start_process(self) -> None:
        """Start the child once its port is known to be free (a server already there is never taken for ours)."""
        self._port_owner_ok = False
        self._start_checked()

    @work(exclusive=True, group="start", exit_on_error=False)
    async def _start_checked(self) -> None:
        host, port = self._server_port()
        taken = None
        if port is not None:
            taken = await asyncio.to_thread(
                portcheck.check_port, host, port, hint=portcheck.port_hint(self.cfg.mode), api_key=self.cfg.api_key)
        if self._quitting:
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
        self.notice(notice or f"server not started: {short}", severity="error", timeout=10)
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

    def _show_no_server(self) -> None:
        from console.config import user_config_dir

        self.push_screen(NoServerScreen(self.cfg.url, str(user_config_dir()), self.cfg.config_path),
                         self._after_no_server)

    async def _after_no_server(self, choice: str | None) -> None:
        if choice == "demo":
            from console.cli import demo_config

            demo = demo_config(self.cfg)
            self.cfg = demo
            self.model.readonly = demo.readonly
            if demo.nvml == "sim":
                from console.nvml_sim import SimulatedNvml

                self.nvml = NvmlReader(module=SimulatedNvml())
            self.start_session()
        elif choice == "retry":
            client = ServerClient(self.cfg.url, timeout_s=1.0)
            ok = await client.health()
            await client.aclose()
            if ok:
                self.cfg = replace(self.cfg, mode="attach")
                self.start_session()
            else:
                self.notify(f"nothing answers on {self.cfg.url}", severity="warning")
                self._show_no_server()
        else:
            self.exit(0)

    # -- output ----------------------------------------------------------------------------

    def publish(self) -> None:
        """Hand the current snapshot to the main screen (and react to a new worker mismatch)."""
        snap = self.model.snapshot()
        if snap.worker.status != self._last_check:
            if snap.worker.status == st.CHECK_MISMATCH:
                self.console_line("WORKER MISMATCH: " + snap.worker.detail)
                self.notify(snap.worker.detail, title="worker class mismatch", severity="error", timeout=10)
            self._last_check = snap.worker.status
        try:
            self.main_screen.snapshot = snap
        except IndexError:  # pragma: no cover - no screen yet
            pass

    def wall_clock(self) -> str:
        """Local time ``HH:MM:SS`` for console lines in the log pane."""
        return time.strftime("%H:%M:%S")

    def console_line(self, text: str) -> None:
        """Write a console message into the log pane (styled as a console line). The same text
        again within REPEAT_QUIET_S of the last one is not repeated (a held key, a double press)."""
        now = time.monotonic()
        last_text, last_at = self._last_console_line
        self._last_console_line = (text, now)
        if text == last_text and now - last_at < REPEAT_QUIET_S:
            return
        stamp = self.wall_clock()
        lines = [(logparse.CONSOLE, f"[console {stamp}] {part}") for part in text.split("\n")]
        try:
            self.main_screen.query_one(LogView).add_lines(lines)
        except Exception:  # noqa: BLE001 - screen not composed yet
            pass

    # -- HTTP ------------------------------------------------------------------------------

    @work(exclusive=True, group="poll", exit_on_error=False)
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
                    self._check_process()
                await self._sleep(self.cfg.interval_s)
                continue
            polled_at = self.model.clock()
            was_down = self.model.connection.reachable is not True
            try:
                sample = await self.client.poll()
            except ServerUnreachable as exc:
                self.model.on_failure(str(exc))
            else:
                foreign = await self._foreign_listener()
                if not self.child_alive():
                    self._check_process()  # it exited while we asked: the answer is not its
                elif foreign:
                    self._on_foreign(foreign)
                else:
                    for msg in self.model.on_sample(sample, polled_at):
                        self.console_line(msg)
                    if was_down:
                        self._clear_tagged(model_kind="connection")
                    p = self.model.process
                    if p is not None and p.phase not in (st.PHASE_READY, st.PHASE_CRASHED, st.PHASE_STOPPING, st.PHASE_STOPPED):
                        self.model.on_process(replace(p, phase=st.PHASE_READY))
            failures = self.model.connection.failures
            starting = self.model.process is not None and self.model.process.phase != st.PHASE_READY
            delay = self.cfg.interval_s if starting else self.backoff.delay(failures)
            self.model.poll_delay_s = delay
            self.publish()
            await self._sleep(delay)

    async def _sleep(self, delay: float) -> None:
        """Wait ``delay`` seconds or until :meth:`poll_now`."""
        self._wake.clear()
        try:
            await asyncio.wait_for(self._wake.wait(), timeout=delay)
        except asyncio.TimeoutError:
            pass

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
            _, port = self._server_port()
            self.notice(f"port {port} is held by another process: not shown, nothing sent",
                        severity="error", timeout=10)

    def poll_now(self) -> None:
        """Wake the poll loop now (after a change, or when the server became ready)."""
        self._wake.set()

    # -- NVML ------------------------------------------------------------------------------

    def _read_gpus_tick(self) -> None:
        if not self._nvml_busy and not self._quitting:
            self._nvml_busy = True
            self._read_gpus()

    @work(thread=True, group="nvml", exit_on_error=False)
    def _read_gpus(self) -> None:
        try:
            panel = self.nvml.read()
            self._from_thread(self._on_gpus, panel)
        finally:
            self._nvml_busy = False  # only now may the next read start: results stay in order

    def _on_gpus(self, panel: st.GpuPanelState) -> None:
        self.model.on_gpus(panel)
        self.publish()

    def _from_thread(self, fn, *args) -> None:
        try:
            self.call_from_thread(fn, *args)
        except Exception:  # noqa: BLE001 - app shutting down
            pass

    # -- log -------------------------------------------------------------------------------

    def _scan_fact(self, line: str) -> None:
        """Called from the log thread for lines above the initial tail: keep only fact lines."""
        if line.startswith(logparse.START_MARKER) or logparse.classify(line) == logparse.VERIFY:
            self._scanned.append(line)

    def _read_log_tick(self) -> None:
        if not self._log_busy and self.follower is not None:
            self._log_busy = True
            self._read_log()

    @work(thread=True, group="log", exit_on_error=False)
    def _read_log(self) -> None:
        try:
            assert self.follower is not None
            lines = self.follower.read_new()
            scanned, self._scanned = self._scanned, []
            classified = [(logparse.classify(line), line) for line in lines]
            if lines or scanned:
                self._from_thread(self._on_log_lines, scanned, classified)
        finally:
            self._log_busy = False  # lines are delivered in file order

    def _on_log_lines(self, scanned: list[str], lines: list[tuple[str, str]]) -> None:
        for line in scanned:
            self.model.on_log_line(line)
        ready_before = self.model.facts.phase == st.PHASE_READY
        for _, line in lines:
            self.model.on_log_line(line)
        self.main_screen.query_one(LogView).add_lines(lines)
        if not ready_before and self.model.facts.phase == st.PHASE_READY:
            self.poll_now()
        self.publish()

    # -- server process --------------------------------------------------------------------

    def _check_process(self) -> None:
        proc, p = self.proc, self.model.process
        if proc is None or p is None or proc.stopping or self._quitting:
            return
        if p.phase in (st.PHASE_CRASHED, st.PHASE_STOPPED):
            return
        code = proc.poll()
        if code is None:
            return
        last = tuple(proc.last_lines(12))
        self.model.on_process(replace(p, phase=st.PHASE_CRASHED, exit_code=code, last_lines=last))
        self.console_line(f"server exited on its own: {describe_exit(code)}; r restarts it")
        self.publish()
        self._reap_group()
        self.push_screen(CrashScreen(self.model.process), self._after_crash)

    @work(thread=True, group="reap", exit_on_error=False)
    def _reap_group(self) -> None:
        """After a crash: stop whatever the dead server left in its process group."""
        if self.proc is not None:
            left = self.proc.members()
            if left:
                self._from_thread(self.console_line, f"stopping {len(left)} leftover process(es) of the crashed server")
            self.proc.stop()

    def _after_crash(self, choice: str | None) -> None:
        if choice == "restart":
            self.action_restart()
        elif choice == "quit":
            self.run_worker(self.action_quit(), exclusive=True, group="quit")

    # -- actions ---------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if isinstance(self.screen, NoServerScreen) and action not in ("quit", "help", "command_palette"):
            return False
        if action in ("threshold_step", "threshold_dialog"):
            if isinstance(self.focused, Input):
                return False  # typing into a search/filter box: + - t are text, not threshold keys
            # hidden in --readonly (the footer does not offer them); readonly_notice answers the keys
            return self.cfg.mode != "none" and not self.cfg.readonly
        if action == "readonly_notice":
            return self.cfg.mode != "none" and self.cfg.readonly
        if action == "restart":
            return self.cfg.mode != "none"
        return True

    def action_readonly_notice(self) -> None:
        """A threshold key in --readonly: say why nothing happens."""
        self._refuse(self.model.check_request() or "read-only: threshold changes are disabled (--readonly)")

    async def action_quit(self) -> None:
        """Quit; in launch/demo mode stop the server's process group first."""
        if self._quitting:
            return
        self._quitting = True
        if self.proc is not None and self.proc.popen is not None and (self.proc.poll() is None or self.proc.members()):
            p = self.model.process or st.ProcessState()
            self.model.on_process(replace(p, phase=st.PHASE_STOPPING))
            self.publish()
            self.notify("stopping the server: SIGTERM to its process group, SIGKILL after "
                        f"{self.cfg.stop_timeout_s:g} s", timeout=30)
            await asyncio.to_thread(self.proc.stop)
        self.exit(0)

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_threshold_step(self, delta: int) -> None:
        """``+``/``-``: the pending target (else spec_gate's threshold) +- 1 req, sent at once."""
        ok, text = self.model.step_threshold(delta)
        self._after_request(ok, text)

    def action_threshold_dialog(self) -> None:
        err = self.model.check_request()
        if err:
            self._refuse(err)
            return
        threshold, hysteresis = self.model.target()
        self.push_screen(
            ThresholdDialog(threshold, hysteresis, self.model.snapshot_max_running()),
            self._after_dialog,
        )
        self.hold_keys()  # the keys typed after `t` are for the dialog's field, once it has the focus

    def _after_dialog(self, req: ThresholdRequest | None) -> None:
        if req is not None:
            self.request_change(req.threshold, req.hysteresis)

    def _refuse(self, why: str) -> None:
        kind = self.model.refuse(why)
        self.console_line(why)
        self.notice(why, severity="warning", tag=CONTROL, kind=kind)
        self.publish()

    # -- notices (toasts) ------------------------------------------------------------------

    def notice(self, message: str, *, title: str = "", severity: str = "information",
               timeout: float = NOTICE_TIMEOUT_S, tag: str = "", kind: str = "") -> None:
        """A toast (plain text). A ``tag`` replaces the shown toast of that tag instead of
        stacking (``control``: threshold-control notices); ``kind`` ``connection`` is removed
        as soon as the server answers again."""
        n = Notification(message, title, severity, timeout, markup=False)  # type: ignore[arg-type]
        if tag or kind:
            self._tagged[n.identity] = (tag, kind)
        self.post_message(Notify(n))

    def _clear_tagged(self, model_kind: str) -> None:
        """Remove the toasts of ``model_kind`` (e.g. ``connection`` after a reconnect)."""
        for n in list(self._notifications):
            if self._tagged.get(n.identity, ("", ""))[1] == model_kind:
                self._unnotify(n)

    def _on_notify(self, event: Notify) -> None:
        """Collapse toasts: an identical one, or one of the same tag, replaces the old one
        (presses repeated fast do not stack up over the screen); at most MAX_TOASTS at once."""
        event.prevent_default()  # instead of App's handler, which stacks every toast
        new = event.notification
        tag = self._tagged.get(new.identity, ("", ""))[0]
        for old in list(self._notifications):
            same_tag = bool(tag) and self._tagged.get(old.identity, ("", ""))[0] == tag
            if same_tag or (old.message == new.message and old.title == new.title):
                self._unnotify(old, refresh=False)
                self._tagged.pop(old.identity, None)
        self._notifications.add(new)
        for old in list(self._notifications)[:-MAX_TOASTS]:
            self._unnotify(old, refresh=False)
            self._tagged.pop(old.identity, None)
        if len(self._tagged) > 200:  # expired toasts
            live = {n.identity for n in self._notifications}
            self._tagged = {k: v for k, v in self._tagged.items() if k in live}
        self._refresh_notifications()

    def request_change(self, threshold: int | None, hysteresis: int | None) -> None:
        """Validate a gate change, make it the pending target and send it (absolute values)."""
        ok, text = self.model.request_change(threshold, hysteresis)
        self._after_request(ok, text)

    def _after_request(self, ok: bool, text: str) -> None:
        if not ok:
            self._refuse(text)
            return
        self.console_line(text)  # one line per request
        self.publish()
        self._send_next()

    def _send_next(self) -> None:
        """POST the next queued change unless one is in flight (answers keep the order)."""
        change = self.model.next_to_send()
        if change is not None:
            self._send_change(change)

    @work(group="set", exit_on_error=False)
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
            lines = self.model.on_set_failure(change, str(exc), delivered=not not_sent)
            self.notice(lines[0], severity="error", tag=CONTROL)
        else:
            lines = self.model.on_set_result(change, result)
            if not result.updated:
                self.notice(result.reason or "rejected", title="server rejected the change",
                            severity="error", tag=CONTROL)
        for line in lines:
            self.console_line(line)
        self.publish()
        self._send_next()
        self.poll_now()

    def _log_panel(self) -> LogPanel:
        return self.main_screen.query_one(LogPanel)

    def action_log_prompt(self, kind: str) -> None:
        self.hold_keys()  # the keys typed after `/` are the search text, not hotkeys
        self._log_panel().open_prompt(kind)

    def action_next_match(self, direction: int) -> None:
        if self._log_panel().view.next_match(direction) is None:
            self.notify("no match" if self._log_panel().view.search else "no search (press /)", timeout=2)

    def action_clear_log_filters(self) -> None:
        v = self._log_panel().view
        v.include = v.exclude = v.search = ""

    def action_toggle_follow(self) -> None:
        v = self._log_panel().view
        v.follow = not v.follow

    def action_follow(self) -> None:
        self._log_panel().view.follow = True

    def action_restart(self) -> None:
        """Restart the server after a crash (launch/demo)."""
        if self.proc is None:
            self.notify("r restarts only a server this console started (launch / demo); "
                        "this one is attached", severity="warning")
            return
        if self.proc.poll() is None and self.proc.members():
            self.notify("the server is still running: r restarts it only after it has exited "
                        "(q stops it and quits)", severity="warning")
            return
        if isinstance(self.screen, CrashScreen):
            self.screen.dismiss("close")
        self.model.sample = None
        self.model.reset_changes()
        self.model.set_message(None)
        self.model.connection = st.ConnectionState(url=self.cfg.url)
        self.console_line("restarting the server")
        self._start_process()
        self.poll_now()
        self.publish()

    def action_set_theme(self, name: str) -> None:
        self.apply_theme(name)

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        from console.commands import console_commands

        for cmd in super().get_system_commands(screen):
            if cmd.title.lower().startswith("theme"):
                continue  # our themes replace Textual's theme picker
            yield cmd
        yield from console_commands(self)

    # -- shutdown --------------------------------------------------------------------------

    async def on_unmount(self) -> None:
        self._quitting = True
        if self.client is not None:
            await self.client.aclose()
        self.nvml.close()
        if self.follower is not None:
            self.follower.close()

    def shutdown_server(self) -> None:
        """Stop the server group if this app started one (idempotent; used by the CLI's finally)."""
        if self.proc is not None:
            self.proc.stop()
