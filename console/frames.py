"""One screen update per poll interval: what the session sends for the screen, held for it.

The session publishes several times a second (a poll, an NVML read, log reads, the clock), and
each update of the screen is a compositor pass and a terminal write, whatever little changed. So
snapshots and log lines that may wait (``Published.soon``, every :class:`console.events.LogLines`)
are held here and shown together with the next snapshot that is shown at once: the poll's, once
per interval, or one caused by an operator's key. Nothing held waits longer than ``delay()``
seconds (the poll interval): then it is shown on its own (no server to poll, a slow poll).
"""

from __future__ import annotations

from typing import Any, Callable

from console import events as ev
from console.state import ConsoleSnapshot


class Frames:
    """Holds snapshots and log lines until the screen's next update.

    Args:
        show_snapshot: shows a snapshot on the screen.
        show_lines: adds a :class:`console.events.LogLines` to the log pane.
        delay: the longest anything may be held, in seconds (the poll interval).
        set_timer: ``set_timer(seconds, callback)`` returning an object with ``stop()``
            (Textual's ``App.set_timer``).
    """

    def __init__(self, show_snapshot: Callable[[ConsoleSnapshot], None], show_lines: Callable[[ev.LogLines], None],
                 delay: Callable[[], float], set_timer: Callable[[float, Callable[[], None]], Any]) -> None:
        self._show_snapshot = show_snapshot
        self._show_lines = show_lines
        self._delay = delay
        self._set_timer = set_timer
        self.snapshot: ConsoleSnapshot | None = None  # held, not shown yet
        self.lines: list[ev.LogLines] = []  # held, in arrival order
        self._timer: Any = None

    def published(self, event: ev.Published) -> None:
        """A snapshot: shown now (with everything held), or held when it may wait (``soon``)."""
        self.snapshot = event.snapshot
        if event.soon:
            self._arm()
        else:
            self.flush()

    def log_lines(self, event: ev.LogLines) -> None:
        """Log lines: held for the next update."""
        self.lines.append(event)
        self._arm()

    def flush(self) -> None:
        """Show everything held now: the log lines first (in order), then the newest snapshot."""
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        lines, self.lines = self.lines, []
        for batch in lines:
            self._show_lines(batch)
        snapshot, self.snapshot = self.snapshot, None
        if snapshot is not None:
            self._show_snapshot(snapshot)

    def drop_lines(self) -> None:
        """Forget the log lines held (the log pane is about to show another server's)."""
        self.lines = []

    def _arm(self) -> None:
        if self._timer is None:  # the first thing held sets the deadline for all of them
            self._timer = self._set_timer(self._delay(), self._expired)

    def _expired(self) -> None:
        self._timer = None
        self.flush()
