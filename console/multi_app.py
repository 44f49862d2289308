"""Several servers in one console (``attach URL URL ...``, ``[[servers]]``): the app's part.

One :class:`console.session.ConsoleSession` runs per server. The focused one is
``app.session``: it feeds the panels, the log pane and the threshold keys, exactly as a single
server does. Every session's snapshots feed the server list (:class:`ServerList`, shown only
with several servers). ``[`` / ``]`` move the focus; ``T`` sets one threshold for all servers
after a confirm, and each server's change is confirmed by its own ``spec_gate``.

Console lines and threshold outcomes of every server go to the log pane, prefixed with the
server; each server's log lines are kept (:class:`console.servers.LogBuffer`) and shown again
when it gets the focus. This machine's GPUs are read once, by the first server's session.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Any

from console import events as ev
from console.config import AppConfig
from console.servers import LogBuffer, ServerFocus, SharedGpus, server_row, short_url
from console.session import ConsoleSession
from console.state import ConsoleSnapshot
from console.widgets.server_list import ServerList

#: toast tag of the threshold-control notices (each replaces the previous one; ``control:i`` per
#: server when there are several)
CONTROL = "control"
#: toast severity of an outcome's level
SEVERITY = {"info": "information", "ok": "information", "warning": "warning", "error": "error"}


#: what [ ] T answer with one server (they act on a server list)
ONE_SERVER_NOTICE = "one server: [ ] and T act on a server list (specconsole attach URL URL ...)"


class MultiServerMixin:
    """For :class:`console.app.SpecConsoleApp`: the server list, the focus and ``T``.

    With one server ``sessions`` is ``[session]``, ``multi`` is False and nothing here changes
    what the console shows or does.
    """

    sessions: list[ConsoleSession]
    log_buffers: list[LogBuffer]

    def init_sessions(self, config: AppConfig, nvml_module: Any, http_timeout_s: float) -> None:
        """Create the session (one server) or one per server of ``config.servers``."""
        if len(config.servers) < 2:
            self.session = ConsoleSession(config, self.on_session_event, nvml_module=nvml_module,
                                          http_timeout_s=http_timeout_s)
            self.sessions = [self.session]
            self.log_buffers = []
            self.server_focus = ServerFocus(1)
            self.server_rows = []
            return
        self.sessions = []
        for i, target in enumerate(config.servers):
            cfg = replace(config, url=target.url, log_path=target.log_path, api_key=target.api_key)
            session = ConsoleSession(cfg, partial(self.on_server_event, i),
                                     nvml_module=nvml_module if i == 0 else None, http_timeout_s=http_timeout_s)
            if i:
                session.nvml.close()
                session.nvml = SharedGpus(self.sessions[0].model)  # type: ignore[assignment]
            self.sessions.append(session)
        self.session = self.sessions[0]
        self.log_buffers = [LogBuffer() for _ in self.sessions]
        self.server_focus = ServerFocus(len(self.sessions))
        self.server_rows = [server_row(ConsoleSnapshot(url=s.cfg.url)) for s in self.sessions]

    @property
    def multi(self) -> bool:
        """More than one server is watched."""
        return len(self.sessions) > 1

    def server_label(self, i: int) -> str:
        """``#2 10.0.0.5:30000``: how lines and toasts name server ``i``."""
        return f"#{i + 1} {short_url(self.sessions[i].cfg.url)}"

    # -- start and stop ----------------------------------------------------------------------

    def start_servers(self) -> None:
        """Several servers: show the server list and start every session but the focused one
        (the app starts that one)."""
        if not self.multi:
            return
        screen = self.main_screen  # type: ignore[attr-defined]
        screen.mount(ServerList(id="server-list"), before="#top")
        for session in self.sessions[1:]:
            session.start()
        self._show_rows()

    def start_other_gpu_reads(self) -> None:
        """The NVML loops of the other sessions (they show the first session's read)."""
        for session in self.sessions[1:]:
            session.start_gpus()

    async def quit_servers(self) -> None:
        """Stop polling every server but the focused one (the app quits that one; attached
        servers are never stopped)."""
        for session in self.sessions:
            if session is not self.session:
                await session.quit()

    async def close_servers(self) -> None:
        """Close every session."""
        for session in self.sessions:
            await session.close()

    # -- events ------------------------------------------------------------------------------

    def on_server_event(self, i: int, event: Any) -> None:
        """An event of server ``i``'s session: its row, and the panels when it is in focus."""
        focused = i == self.server_focus.index
        label = self.server_label(i)
        if isinstance(event, ev.Published):
            self.server_rows[i] = server_row(event.snapshot)
            self._show_rows()
            if focused:
                self.on_session_event(event)  # type: ignore[attr-defined]
        elif isinstance(event, ev.ConsoleLine):
            self.console_line(f"{label}: {event.text}")  # type: ignore[attr-defined]
        elif isinstance(event, ev.LogLines):
            self.log_buffers[i].add(event.lines, event.numbers, event.file_id or None, event.total_lines)
            if focused:
                self.on_session_event(event)  # type: ignore[attr-defined]
        elif isinstance(event, ev.ChangeOutcome):
            self.show_outcome(event.outcome, i)
        elif isinstance(event, ev.Reconnected):
            self.clear_notices(f"{ev.KIND_CONNECTION}:{i}")  # type: ignore[attr-defined]
        elif isinstance(event, ev.WorkerMismatch):
            self.notify(event.detail, title=f"worker class mismatch · {label}",  # type: ignore[attr-defined]
                        severity="error", timeout=10)
        elif isinstance(event, ev.InternalError):
            self.notice(f"{label}: {event.text}", title="specconsole bug",  # type: ignore[attr-defined]
                        severity="error", timeout=10, tag=f"{event.where}:{i}")
        elif focused:  # log search answers (and, never in attach mode, process events)
            self.on_session_event(event)  # type: ignore[attr-defined]

    def show_outcome(self, outcome: ev.Outcome, server: int | None = None) -> None:
        """A threshold change's outcome: its log lines and its toast (the notice policy). With
        ``server`` (several servers) both name it, and each server's toast replaces only its own."""
        label = None if server is None else self.server_label(server)
        for line in outcome.log_lines:
            self.console_line(line if label is None else f"{label}: {line}")  # type: ignore[attr-defined]
        if not outcome.notice:
            return
        if label is None:
            title, tag, kind = outcome.notice_title, CONTROL, outcome.kind
        else:
            title = label + (f" · {outcome.notice_title}" if outcome.notice_title else "")
            tag, kind = f"{CONTROL}:{server}", f"{outcome.kind}:{server}" if outcome.kind else ""
        self.notice(outcome.notice, title=title, severity=SEVERITY[outcome.level],  # type: ignore[attr-defined]
                    tag=tag, kind=kind)

    def record_console_lines(self, lines: list[tuple[str, str]]) -> None:
        """Console lines belong to every server's log pane (kept for the focus switch)."""
        for buf in self.log_buffers:
            buf.add(lines)

    def _show_rows(self) -> None:
        for widget in self.main_screen.query(ServerList):  # type: ignore[attr-defined]
            widget.show(self.server_rows, self.server_focus.index)

    # -- focus -------------------------------------------------------------------------------

    def log_title(self) -> str:
        """The log pane's title for the focused server."""
        log = self.cfg.log_path  # type: ignore[attr-defined]
        if log is not None:
            return f"Log {log.name}"
        return "Log (none for this server: --log per URL)" if self.multi else "Log (none: attach --log FILE)"

    def action_focus_server(self, delta: int) -> None:
        """``[`` / ``]``: the previous / next server takes the panels and the log pane."""
        if not self.multi:
            self.notify(ONE_SERVER_NOTICE, timeout=3)  # type: ignore[attr-defined]
            return
        i = self.server_focus.move(delta)
        self.session = self.sessions[i]
        panel = self._log_panel()  # type: ignore[attr-defined]
        view = panel.view
        self.frames.drop_lines()  # type: ignore[attr-defined]  # the old server's (its buffer has them)
        view.clear()
        for lines, numbers, file_id, total in self.log_buffers[i].runs():
            view.add_lines(lines, numbers, file_id, total)
        panel.base_title = self.log_title()
        panel.update_title()
        self._show_rows()
        self.session.publish()

    # -- one threshold for every server -----------------------------------------------------

    def action_threshold_all(self) -> None:
        """``T``: the threshold dialog for all servers, then a confirm, then each server's change."""
        if not self.multi:
            self.notify(ONE_SERVER_NOTICE, timeout=3)  # type: ignore[attr-defined]
            return
        if self.cfg.readonly:  # type: ignore[attr-defined]
            self.session.refuse("read-only: threshold changes are disabled (--readonly)")
            return
        from console.screens.threshold_all import AllThresholdDialog

        threshold, hysteresis = self.model.target()  # type: ignore[attr-defined]
        # the dialog refuses only what every server would: each server checks its own limit
        limits = [m for m in (s.model.snapshot_max_running() for s in self.sessions) if m is not None]
        dialog = AllThresholdDialog(threshold, hysteresis, max(limits) if limits else None, len(self.sessions))
        self.push_screen(dialog, self._after_all_dialog)  # type: ignore[attr-defined]
        self.hold_keys(dialog)  # type: ignore[attr-defined]

    def _after_all_dialog(self, req: Any) -> None:
        if req is None:
            return
        from console.screens.threshold_all import ConfirmAllScreen

        too_small = [f"{self.server_label(i)} ({m})" for i, m in
                     enumerate(s.model.snapshot_max_running() for s in self.sessions)
                     if m is not None and isinstance(req.threshold, int) and req.threshold > m]  # "auto" fits any server
        self.push_screen(ConfirmAllScreen(req, [short_url(s.cfg.url) for s in self.sessions], too_small),  # type: ignore[attr-defined]
                         partial(self._after_confirm_all, req))

    def _after_confirm_all(self, req: Any, yes: bool | None) -> None:
        if not yes:
            self.notify("not sent: no server was changed", timeout=3)  # type: ignore[attr-defined]
            return
        from console.screens.threshold_all import describe

        self.console_line(f"{describe(req)} to all {len(self.sessions)} servers")  # type: ignore[attr-defined]
        sent = [s.request_change(req.threshold, req.hysteresis).ok for s in self.sessions]
        if not all(sent):
            refused = [self.server_label(i) for i, ok in enumerate(sent) if not ok]
            self.console_line(f"refused before sending by {', '.join(refused)} "
                              f"(see {'its line' if len(refused) == 1 else 'their lines'})")  # type: ignore[attr-defined]
