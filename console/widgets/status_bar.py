"""The one-line bar at the top: mode, server URL, connection or startup state, version."""

from __future__ import annotations

from rich.text import Text

from console import fmt
from console import state as st
from console.widgets.base import SnapshotWidget


def connection_text(s: st.ConsoleSnapshot) -> tuple[str, str]:
    """``(text, level)`` describing the server's state; level is ok / warn / error / dim."""
    p = s.process
    if p is not None:
        if p.phase == st.PHASE_CRASHED:
            return f"server exited (code {p.exit_code}) · r restart", "error"
        if p.phase in (st.PHASE_STOPPING, st.PHASE_STOPPED):
            return f"server {p.phase}", "warn"
        if p.phase != st.PHASE_READY and not s.sample_seen:
            since = fmt.duration(s.now - p.started_at) if p.started_at is not None else ""
            return f"starting: {p.phase} {since}".rstrip(), "warn"
    c = s.connection
    if c.reachable is False:
        why = f" ({c.last_error})" if c.last_error else ""
        return f"unreachable for {fmt.duration(s.down_for_s)}{why}", "error"
    if c.reachable is None:
        return "connecting…", "dim"
    return "connected", "ok"


class StatusBar(SnapshotWidget):
    """Top line: ``specconsole │ DEMO │ http://… │ connected │ SGLang 0.5.12 │ poll 1 s``."""

    COMPONENT_CLASSES = {"status-bar--mode", "status-bar--ok", "status-bar--warn", "status-bar--error", "status-bar--dim"}

    def render(self) -> Text:
        s = self.snapshot
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append(" specconsole ", self.style_of("status-bar--mode"))
        mode = s.mode.upper()
        if s.mode == "demo":
            mode = "DEMO simulated"
        if s.readonly:
            mode += " read-only"
        url = s.url.removeprefix("http://")
        text.append(f" {mode} │ {url} │ ")
        conn, level = connection_text(s)
        text.append(conn, self.style_of(f"status-bar--{level}"))
        if s.version:
            text.append(f" │ SGLang {s.version}")
        text.append(f" │ every {s.interval_s:g} s")
        return text
