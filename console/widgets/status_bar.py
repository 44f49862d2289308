"""The bar at the top: mode, server URL, connection or startup state, version, poll interval
(the actual one: ``retry every 8 s`` while polling backs off from a server that is down).

One line when it fits. On a narrow terminal the ``specconsole`` title goes first; if the rest
still does not fit (e.g. a long "unreachable" reason) the server's state moves to a second line
instead of being cut off.
"""

from __future__ import annotations

from rich.text import Text

from console import fmt
from console import state as st
from console.widgets.base import SnapshotWidget, wrap

SEP = " │ "


def connection_text(s: st.ConsoleSnapshot) -> tuple[str, str]:
    """``(text, level)`` describing the server's state; level is ok / warn / error / dim."""
    p = s.process
    c = s.connection
    if p is not None:
        if p.phase == st.PHASE_CRASHED and p.error:
            return f"server not started: {p.error} · r retries", "error"
        if p.phase == st.PHASE_CRASHED:
            return f"server exited (code {p.exit_code}) · r restart", "error"
        if p.phase in (st.PHASE_STOPPING, st.PHASE_STOPPED):
            return f"server {p.phase}", "warn"
        if c.foreign and c.last_error:
            return f"NOT CONNECTED: {c.last_error}", "error"
        if p.phase != st.PHASE_READY and not s.sample_seen:
            since = fmt.duration(s.now - p.started_at) if p.started_at is not None else ""
            return f"starting: {p.phase} {since}".rstrip(), "warn"
    if c.auth_refused:
        return f"{c.last_error} ({fmt.duration(s.down_for_s)})", "error"
    if c.reachable is False:
        why = f" ({c.last_error})" if c.last_error else ""
        return f"{c.down_word} for {fmt.duration(s.down_for_s)}{why}", "error"
    if c.reachable is None:
        return "connecting…", "dim"
    return "connected", "ok"


def status_segments(s: st.ConsoleSnapshot) -> list[tuple[str, str | None]]:
    """``[(text, style name or None), ...]`` after the title: mode, url, connection, version, poll."""
    mode = s.mode.upper()
    if s.mode == "demo":
        mode = "DEMO simulated"
    if s.readonly:
        mode += " read-only"
    conn, level = connection_text(s)
    segs: list[tuple[str, str | None]] = [(mode, None), (s.url.removeprefix("http://"), None), (conn, level)]
    if s.version:
        segs.append((f"SGLang {s.version}", None))
    delay = s.poll_delay_s
    if delay is not None and delay > s.interval_s + 1e-9:  # backing off while the server is down
        segs.append((f"retry every {delay:g} s", "warn"))
    else:
        segs.append((f"every {s.interval_s:g} s", None))
    return segs


def status_lines(s: st.ConsoleSnapshot, width: int) -> tuple[bool, list[list[tuple[str, str | None]]]]:
    """``(show title, lines of segments)`` for a bar ``width`` cells wide (nothing is cut).

    One line with the title if it fits, else one line without it, else two lines: the server's
    state on a line of its own under the rest (a long state wraps onto further lines).
    """
    segs = status_segments(s)
    title_w = len(" specconsole ") + 1

    def line_width(items) -> int:
        return 1 + sum(len(t) for t, _ in items) + len(SEP) * (len(items) - 1)

    if title_w + line_width(segs) <= width:
        return True, [segs]
    if line_width(segs) <= width:
        return False, [segs]
    conn = segs[2]
    rest = segs[:2] + segs[3:]
    lines: list[list[tuple[str, str | None]]] = [[]]
    for seg in rest:
        if lines[-1] and line_width(lines[-1] + [seg]) > width:
            lines.append([])
        lines[-1].append(seg)
    text, level = conn
    room = max(10, width - 1)
    for piece in wrap(Text(text), room):
        lines.append([(piece.plain, level)])
    return False, lines


class StatusBar(SnapshotWidget):
    """Top line: ``specconsole │ DEMO │ 127.0.0.1:30000 │ connected │ SGLang 0.5.12 │ every 1 s``."""

    COMPONENT_CLASSES = {"status-bar--mode", "status-bar--ok", "status-bar--warn", "status-bar--error", "status-bar--dim"}

    def _fit_height(self) -> None:
        width = self.size.width or self.app.size.width
        _, lines = status_lines(self.snapshot, width)
        if self.styles.height is None or self.styles.height.value != len(lines):
            self.styles.height = len(lines)

    def watch_snapshot(self, snapshot: st.ConsoleSnapshot) -> None:
        self._fit_height()

    def on_resize(self) -> None:
        self._fit_height()

    def render(self) -> Text:
        s = self.snapshot
        title, lines = status_lines(s, self.size.width)
        text = Text(no_wrap=True, overflow="ellipsis")
        if title:
            text.append(" specconsole ", self.style_of("status-bar--mode"))
        for n, line in enumerate(lines):
            if n:
                text.append("\n")
            text.append(" ")
            for i, (seg, level) in enumerate(line):
                if i:
                    text.append(SEP)
                text.append(seg, self.style_of(f"status-bar--{level}") if level else None)
        return text
