"""The Textual app: key bindings, screens, and how each session event shows.

The session (:class:`console.session.ConsoleSession`, no UI) polls the server, reads NVML and the
log, sends threshold changes and supervises a launched server; it hands every result to
:meth:`SpecConsoleApp.on_session_event` as a typed event (:mod:`console.events`). Here a snapshot
goes to :class:`console.screens.main.MainScreen` (whose widgets only render it), log lines to the
log pane, an outcome's notice to a toast, a crash to the crash screen.
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

from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widgets import Input

import themes
from console import events as ev
from console import logparse
from console.commands import console_commands
from console.config import AppConfig
from console.frames import Frames
from console.modes import demo_config
from console.multi_app import MultiServerMixin
from console.screens.crash import CrashScreen
from console.screens.help import HelpScreen
from console.screens.main import MainScreen
from console.screens.no_server import NoServerScreen
from console.screens.threshold_dialog import ThresholdDialog, ThresholdRequest
from console.session import wall_clock
from console.textual_compat import KeyOrderMixin, NoticeMixin, calm_driver
from console.widgets.log_panel import LogPanel, own_lines_notice
from console.widgets.log_view import LogView

HERE = Path(__file__).resolve().parent

REPEAT_QUIET_S = 5.0  # seconds in which the same console line is written once


class SpecConsoleApp(KeyOrderMixin, NoticeMixin, MultiServerMixin, App[int]):
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
        Binding("a", "threshold_auto", "Auto"),
        # --readonly: the keys above are hidden (check_action) and these say why instead
        Binding("plus,equals_sign,minus,t,a", "readonly_notice", "Read-only", show=False),
        # several servers (attach URL URL ...): focus the previous / next, one threshold for all
        Binding("left_square_bracket", "focus_server(-1)", "Prev server", show=False, key_display="["),
        Binding("right_square_bracket", "focus_server(1)", "Next server", show=False, key_display="]"),
        Binding("T", "threshold_all", "Set all", show=False),
        Binding("slash", "log_prompt('search')", "Search", key_display="/"),
        Binding("n", "next_match(1)", "Next match", show=False),
        Binding("N", "next_match(-1)", "Previous match", show=False),
        Binding("f", "log_prompt('include')", "Filter"),
        Binding("x", "log_prompt('exclude')", "Hide", show=False),
        Binding("c", "clear_log_filters", "Clear filters", show=False),
        Binding("o", "toggle_own_lines", "Polls", show=False),  # the log title says "(o shows)"
        Binding("p", "toggle_follow", "Pause"),
        Binding("G,end", "follow", "Follow", show=False),  # the log view maps its own End to follow too
        Binding("r", "restart", "Restart", show=False),
        # Textual adds its Ctrl+P binding only when no binding names the palette action: bind both
        Binding("ctrl+p", "command_palette", "Palette", show=False, priority=True),
        Binding("colon", "command_palette", "Palette", show=False),
    ]

    def __init__(self, config: AppConfig, nvml_module: Any = None, http_timeout_s: float = 5.0) -> None:
        super().__init__()
        self.theme_name = config.theme
        self.init_sessions(config, nvml_module, http_timeout_s)  # one session, or one per server
        self._quitting = False
        self._signalled = False
        self._event_loop: asyncio.AbstractEventLoop | None = None
        self._last_console_line: tuple[str | None, float] = (None, 0.0)  # (text, monotonic time)
        # one screen update per poll: NVML reads and log lines wait for the poll's snapshot
        self.frames = Frames(self._show_snapshot, self._show_log_lines, lambda: self.cfg.interval_s,
                             self.set_timer)

    # the session's parts, for the screens, the headless check and tests
    cfg = property(lambda self: self.session.cfg)
    model = property(lambda self: self.session.model)
    proc = property(lambda self: self.session.proc)
    backoff = property(lambda self: self.session.backoff)
    _nvml_busy = property(lambda self: self.session.nvml_busy)

    def get_default_screen(self) -> Screen:
        return MainScreen(id="main")

    def get_driver_class(self):
        """Textual's driver, but on Linux / macOS one whose input thread sleeps until a key comes
        (:class:`console.textual_compat.CalmInputDriver`: Textual's wakes ten times a second)."""
        return calm_driver(super().get_driver_class())

    @property
    def main_screen(self) -> MainScreen:
        """The main screen (the bottom of the screen stack)."""
        return self.screen_stack[0]  # type: ignore[return-value]

    def on_mount(self) -> None:
        self.apply_theme(self.cfg.theme)
        if self.cfg.handle_signals:
            self._install_signal_handlers()
        self.start_gpu_reads()
        self.call_after_refresh(self._begin)

    def start_gpu_reads(self) -> None:
        """Read NVML every poll interval (also while no server is configured)."""
        self.session.start_gpus()
        self.start_other_gpu_reads()

    def _begin(self) -> None:
        if self.cfg.mode == "none":
            self._show_no_server()
        else:
            self.start_session()

    def start_session(self) -> None:
        """Start the session (polling; the server child in launch/demo mode)."""
        log_panel = self.main_screen.query_one(LogPanel)
        log_panel.base_title = self.log_title()
        log_panel.update_title()
        for note in self.cfg.notes:
            self.console_line(note)
        self.session.start()
        self.start_servers()  # several servers: the list, and every other session

    def publish(self) -> None:
        """Show the current snapshot now."""
        self.session.publish()

    def apply_theme(self, name: str) -> None:
        """Switch to theme ``name`` (``dark``, ``light``, ``ansi``): its class plus its Textual base theme."""
        info = themes.get(name)
        for t in themes.THEMES.values():
            self.remove_class(t.css_class)
        self.add_class(info.css_class)
        self.theme = info.textual_theme
        self.theme_name = name
        self.refresh_css()

    # -- session events ----------------------------------------------------------------------

    def on_session_event(self, event: Any) -> None:
        """Show one event of the session (see :mod:`console.events`)."""
        if isinstance(event, ev.Published):
            self.frames.published(event)
        elif isinstance(event, ev.ConsoleLine):
            self.console_line(event.text)
        elif isinstance(event, ev.LogLines):
            self.frames.log_lines(event)
        elif isinstance(event, ev.LogFound):
            self.frames.flush()  # the answer is about the lines held: all of them
            if not self._log_view().found(event):
                self.notify("no match in the whole file", timeout=2)
        elif isinstance(event, ev.ChangeOutcome):
            self.show_outcome(event.outcome)
        elif isinstance(event, ev.ServerNotStarted):
            self.notice(event.notice, severity="error", timeout=10)
        elif isinstance(event, ev.ServerCrashed):
            self.push_screen(CrashScreen(event.process), self._after_crash)
        elif isinstance(event, ev.PortTaken):
            self.notice(f"port {event.port} is held by another process: not shown, nothing sent",
                        severity="error", timeout=10)
        elif isinstance(event, ev.ServerStopping):
            self.notify("stopping the server: SIGTERM to its process group, SIGKILL after "
                        f"{event.timeout_s:g} s", timeout=30)
        elif isinstance(event, ev.Reconnected):
            self.clear_notices(ev.KIND_CONNECTION)
        elif isinstance(event, ev.WorkerMismatch):
            self.notify(event.detail, title="worker class mismatch", severity="error", timeout=10)
        elif isinstance(event, ev.InternalError):
            self.notice(event.text, title="specconsole bug", severity="error", timeout=10, tag=event.where)

    def _show_snapshot(self, snapshot: Any) -> None:
        try:
            self.main_screen.snapshot = snapshot
        except IndexError:  # pragma: no cover - no screen yet
            pass

    def _show_log_lines(self, event: ev.LogLines) -> None:
        try:
            view, panel = self._log_view(), self._log_panel()
        except (IndexError, NoMatches):  # held lines shown while the app takes its screens down
            return
        view.add_lines(list(event.lines), event.numbers, event.file_id or None, event.total_lines)
        # its title now, in this screen update (the view's StateChanged comes after it: a second one)
        panel.update_title()

    def wall_clock(self) -> str:
        """Local time ``HH:MM:SS`` for console lines in the log pane."""
        return wall_clock()

    def _log_view(self) -> LogView:
        return self.main_screen.query_one(LogView)

    def _log_panel(self) -> LogPanel:
        return self.main_screen.query_one(LogPanel)

    def console_line(self, text: str) -> None:
        """Write a console message into the log pane (styled as a console line). The same text
        again within REPEAT_QUIET_S of the last one is not repeated (a held key, a double press)."""
        now = time.monotonic()
        last_text, last_at = self._last_console_line
        self._last_console_line = (text, now)
        if text == last_text and now - last_at < REPEAT_QUIET_S:
            return
        lines = [(logparse.CONSOLE, f"[console {self.wall_clock()}] {part}") for part in text.split("\n")]
        self.record_console_lines(lines)
        try:
            self.frames.flush()  # the server's lines held come first: the pane keeps arrival order
            self._log_view().add_lines(lines)
        except Exception:  # noqa: BLE001 - screen not composed yet
            pass

    # -- screens -----------------------------------------------------------------------------

    def _show_no_server(self) -> None:
        from console.config import user_config_dir

        self.push_screen(NoServerScreen(self.cfg.url, str(user_config_dir()), self.cfg.config_path),
                         self._after_no_server)

    async def _after_no_server(self, choice: str | None) -> None:
        if choice == "demo":
            demo = demo_config(self.cfg)
            sim = None
            if demo.nvml == "sim":
                from console.nvml_sim import SimulatedNvml

                sim = SimulatedNvml()
            self.session.configure(demo, nvml_module=sim)
            self.start_session()
        elif choice == "retry":
            if await self.session.server_answers(self.cfg.url):
                self.session.configure(replace(self.cfg, mode="attach"))
                self.start_session()
            else:
                self.notify(f"nothing answers on {self.cfg.url}", severity="warning")
                self._show_no_server()
        else:
            self.exit(0)

    def _after_crash(self, choice: str | None) -> None:
        if choice == "restart":
            self.action_restart()
        elif choice == "quit":
            self.run_worker(self.action_quit(), exclusive=True, group="quit")

    def _after_dialog(self, req: ThresholdRequest | None) -> None:
        if req is not None:
            self.session.request_change(req.threshold, req.hysteresis)

    # -- actions -----------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if isinstance(self.screen, NoServerScreen) and action not in ("quit", "help", "command_palette"):
            return False
        if action in ("focus_server", "threshold_all"):
            return not isinstance(self.focused, Input)  # one server: they say why they do nothing
        if action in ("threshold_step", "threshold_dialog", "threshold_auto"):
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
        self.session.refuse(self.model.check_request() or "read-only: threshold changes are disabled (--readonly)")

    async def action_quit(self) -> None:
        """Quit; in launch/demo mode stop the server's process group first."""
        if self._quitting:
            return
        self._quitting = True
        await self.session.quit()
        await self.quit_servers()
        self.exit(0)

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_threshold_step(self, delta: int) -> None:
        """``+``/``-``: the pending target (else spec_gate's threshold) +- 1 req, sent at once."""
        self.session.step_threshold(delta)

    def action_threshold_auto(self) -> None:
        """``a``: the auto threshold on, or back to a manual N at its learned crossover."""
        self.session.toggle_auto()

    def action_threshold_dialog(self) -> None:
        err = self.model.check_request()
        if err:
            self.session.refuse(err)
            return
        threshold, hysteresis = self.model.target()
        dialog = ThresholdDialog(threshold, hysteresis, self.model.snapshot_max_running())
        self.push_screen(dialog, self._after_dialog)
        self.hold_keys(dialog)  # the keys typed after `t` are for the dialog's field, once it has the focus

    def action_log_prompt(self, kind: str) -> None:
        prompt = self._log_panel().open_prompt(kind)
        self.hold_keys(prompt)  # the keys typed after `/` are the search text, not hotkeys
        self.session.read_log_soon()  # the pane holds the log's newest lines when the operator types

    def action_next_match(self, direction: int) -> None:
        view = self._log_panel().view
        if view.next_match(direction) is None and view.searching is None:
            self.notify("no match" if view.search else "no search (press /)", timeout=2)

    def on_log_view_read_file(self, message: LogView.ReadFile) -> None:
        """The log pane needs lines of the file it does not hold: the session reads them."""
        self.session.read_log_soon()  # and the newest lines, shown at once
        self.session.read_log(message.request)

    def action_toggle_own_lines(self) -> None:
        """``o``: show / hide the server's access-log lines of the console's own polls."""
        v = self._log_panel().view
        v.show_own = not v.show_own
        self.notice(own_lines_notice(v), tag="own-lines")

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
        why = self.session.restart_problem()
        if why:
            self.notify(why, severity="warning")
            return
        if isinstance(self.screen, CrashScreen):
            self.screen.dismiss("close")
        self.session.restart()

    def action_set_theme(self, name: str) -> None:
        self.apply_theme(name)

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        for cmd in super().get_system_commands(screen):
            if cmd.title.lower().startswith(("theme", "screenshot")):
                continue  # our themes replace Textual's theme picker; our screenshot says where it went
            yield cmd
        yield from console_commands(self)

    def action_save_screenshot(self) -> None:
        """An SVG of the screen in the working directory, its path (or why it could not be written)
        in a one-line notice. Textual's own command writes to ~/Downloads, which an ssh box often
        lacks, and its notice showed only its title there."""
        where = "the working directory"
        try:
            where = os.getcwd()
            path = self.save_screenshot(path=where)
        except OSError as exc:
            self.notify(f"screenshot not saved: {exc.strerror or exc} ({where})", severity="error", timeout=8)
            return
        self.notify(f"screenshot saved: {path}", timeout=8)

    # -- signals and shutdown ----------------------------------------------------------------

    def _install_signal_handlers(self) -> None:
        loop = self._event_loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):  # SIGINT: `kill -INT` (Ctrl+C is a key here)
            try:
                loop.add_signal_handler(sig, self._on_signal, sig)
            except (NotImplementedError, RuntimeError, ValueError):  # pragma: no cover
                pass

    def _on_signal(self, sig: int) -> None:
        """SIGTERM / SIGHUP (ssh drop) / SIGINT: stop the server group, then exit with 128 + the
        signal (or force it).

        After SIGHUP the terminal is gone: there is nothing to restore and Textual may block
        writing to it, so the process ends right after the server group is stopped. After
        SIGTERM the app gets a few seconds to leave the terminal clean.
        """
        if self._signalled:
            return
        self._signalled = True
        grace_s = 0.3 if sig == signal.SIGHUP else 5.0
        loop = self._event_loop

        def stop_then_exit() -> None:
            self.session.stop_server()
            if loop is not None and not loop.is_closed():
                try:
                    loop.call_soon_threadsafe(self.exit, 128 + sig)
                except RuntimeError:  # the loop closed meanwhile
                    pass
            time.sleep(grace_s)  # the main thread normally ends the process before this
            os._exit(128 + sig)

        threading.Thread(target=stop_then_exit, name="specconsole-signal", daemon=True).start()

    async def on_unmount(self) -> None:
        await self.close_servers()

    def shutdown_server(self) -> None:
        """Stop the server group if this app started one (idempotent; used by the CLI's finally)."""
        self.session.stop_server()
