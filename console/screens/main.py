"""The main screen: status bar, speculation + load panels, GPU panel, log panel, footer.

It owns the ``snapshot`` reactive and hands every new snapshot to the widgets. It also sets
size classes on itself so the CSS can use more space on bigger terminals: ``-tall`` (at least
34 rows), ``-taller`` (at least 56 rows: every speculation detail without scrolling) and
``-wide`` (at least 120 columns).
"""

from __future__ import annotations

from textual import events
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.notifications import Notification, Notify
from textual.reactive import reactive
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Footer

from console import gpu_sources
from console.state import ConsoleSnapshot
from console.widgets.base import SnapshotWidget
from console.widgets.gpu_panel import GpuTable
from console.widgets.load_panel import LoadPanel
from console.widgets.log_panel import LogPanel
from console.widgets.spec_panel import SpecPanel
from console.widgets.status_bar import StatusBar

TALL_ROWS = 34
TALLER_ROWS = 56
#: the smallest terminal the layout is made for (columns, rows); below it a notice says so
MIN_SIZE = (80, 24)
#: the load panel's title: its counts are requests (where each figure came from: its footer)
LOAD_TITLE = "Load · requests"
WIDE_COLS = 120


class MainScreen(Screen):
    """The operator's view (fits 80x24; grows with the terminal)."""

    AUTO_FOCUS = "#log-view"
    # repaint=False: the screen draws nothing of it; a repaint here was a full-screen update per
    # snapshot (the widgets repaint themselves, each only when what it shows changed)
    snapshot: reactive[ConsoleSnapshot] = reactive(ConsoleSnapshot, always_update=True, repaint=False)

    def compose(self) -> ComposeResult:
        yield StatusBar(id="status-bar")
        with Horizontal(id="top"):
            spec = SpecPanel(id="spec-panel", classes="panel")
            spec.border_title = "Speculation"
            yield spec
            load = LoadPanel(id="load-panel", classes="panel")
            load.border_title = LOAD_TITLE
            yield load
        gpus = VerticalScroll(GpuTable(id="gpu-table"), id="gpu-panel", classes="panel")
        gpus.border_title = "GPUs"  # focusable (Tab): arrow keys scroll when there are many GPUs
        yield gpus
        yield LogPanel(id="log-panel", classes="panel")
        yield Footer(show_command_palette=False)  # at 80 columns it would cover the last key; ? lists : and Ctrl+P

    def on_mount(self) -> None:
        self._apply_size(self.size.width, self.size.height)

    def on_resize(self, event: events.Resize) -> None:
        self._apply_size(event.size.width, event.size.height)

    _size_notice: Notification | None = None  # the below-80x24 notice shown now
    _noticed_size: tuple[int, int] | None = None  # the size it names

    def _apply_size(self, width: int, height: int) -> None:
        self.set_class(height >= TALL_ROWS, "-tall")
        self.set_class(height >= TALLER_ROWS, "-taller")
        self.set_class(width >= WIDE_COLS, "-wide")
        too_small = width < MIN_SIZE[0] or height < MIN_SIZE[1]
        if too_small and (width, height) != self._noticed_size:  # one notice, saying the size now
            self._withdraw_size_notice()
            self._noticed_size = (width, height)
            self._size_notice = Notification(f"terminal {width}x{height}: specconsole needs {MIN_SIZE[0]}x"
                                             f"{MIN_SIZE[1]} or more; parts are cut off", "", "warning", 8)
            self.app.post_message(Notify(self._size_notice))
        elif not too_small:  # big enough again: the notice is wrong now
            self._withdraw_size_notice()
            self._noticed_size = None

    def _withdraw_size_notice(self) -> None:
        notice, self._size_notice = self._size_notice, None
        if notice is None:
            return
        try:  # Textual has no public way to withdraw one notification (clear_notifications: all)
            self.app._unnotify(notice)
        except (AttributeError, KeyError):  # gone already (timed out), or another Textual
            pass

    _targets: tuple[int, list[SnapshotWidget], list[Widget], list[Widget]] | None = None

    def snapshot_targets(self) -> tuple[list[SnapshotWidget], list[Widget], list[Widget]]:
        """The snapshot widgets, the GPU panel and the load panel (lists: empty while the app
        takes the screen down). Looked up again only after a snapshot widget was mounted or
        unmounted: a DOM query per snapshot was a third of handing it out."""
        targets = self._targets
        if targets is None or targets[0] != SnapshotWidget.generation:
            # query(), not query_one(): a poll that lands while the app tears the screen down
            # finds no panels and updates nothing (query_one raised NoMatches there: a flaky test)
            targets = self._targets = (SnapshotWidget.generation, list(self.query(SnapshotWidget)),
                                       list(self.query("#gpu-panel")), list(self.query("#load-panel")))
        return targets[1], targets[2], targets[3]

    def watch_snapshot(self, snapshot: ConsoleSnapshot) -> None:
        widgets, gpu_panels, load_panels = self.snapshot_targets()
        for widget in widgets:
            widget.snapshot = snapshot
        # a border title set repaints the whole panel (even to the same text): only on a change
        title = gpu_sources.title(snapshot.gpus)
        for panel in gpu_panels:
            if panel.border_title != title:
                panel.border_title = title
        load_title = LOAD_TITLE + (" · stale" if snapshot.stale else "")
        for panel in load_panels:
            if panel.border_title != load_title:
                panel.border_title = load_title
