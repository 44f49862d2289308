"""Shown when a launched server exits on its own: exit code, last log lines (wrapped, scrollable), restart."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Label, Static

from console.process import describe_exit
from console.state import ProcessState


class CrashScreen(ModalScreen[str]):
    """Dismisses with ``"restart"``, ``"quit"`` or ``"close"`` (look at the log)."""

    BINDINGS = [
        Binding("r", "choose('restart')", "Restart server"),
        Binding("escape", "choose('close')", "Close (read the log)"),
        Binding("q", "choose('quit')", "Quit"),
    ]

    def __init__(self, process: ProcessState) -> None:
        super().__init__()
        self.process = process

    def compose(self) -> ComposeResult:
        p = self.process
        with Vertical(id="crash-body"):
            what = "exited on its own" if p.exit_code == 0 else "crashed"
            yield Label(f"The server {what}: {describe_exit(p.exit_code)}", id="crash-title")
            yield Label("r restart · Escape close and read the log · q quit · ↑ ↓ scroll", id="crash-keys")
            with VerticalScroll(id="crash-scroll"):
                yield Static(p.command, id="crash-command", markup=False)
                yield Label("Last log lines:", id="crash-label")
                yield Static("\n".join(p.last_lines[-10:]) or "(log is empty)", id="crash-lines", markup=False)

    def on_mount(self) -> None:
        self.query_one("#crash-scroll").focus()

    def action_choose(self, what: str) -> None:
        self.dismiss(what)
