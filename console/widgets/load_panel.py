"""The load panel: running requests, queue length and tok/s (``/v1/loads``), the chart, limits.

The numbers here are SGLang's own load report (``/v1/loads``): the running requests can differ
a little from the Speculation panel's *decode batch* (``spec_gate``'s last decode batch), which
is what the threshold is compared with. While the server is down the last values stay on
screen greyed, and the panel title says ``stale``. Lines that do not fit the width go under each other.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical

from console import fmt
from console import state as st
from console.widgets.base import LinesWidget, pack
from console.widgets.batch_chart import BatchChart


def summary(s: st.ConsoleSnapshot) -> list[tuple[str, str]]:
    """``[(label, value), ...]`` for the summary line: running requests, queue (both req, as the
    panel title says), decode throughput (``n/a`` where no source gives it, never a made-up 0)."""
    f = s.figures
    return [
        ("running ", fmt.num(f.running.value)),
        ("queue ", fmt.num(f.queue.value)),
        ("", fmt.num(f.throughput.value, "tok/s")),
    ]


#: short names of the sources for a narrow panel
_SHORT = {st.SRC_LOADS: "loads", st.SRC_METRICS: "metrics", st.SRC_SERVER_INFO: "info", st.SRC_SPEC_GATE: "gate"}


def sources(s: st.ConsoleSnapshot, width: int | None = None) -> str:
    """Where the figures came from, e.g. ``from /v1/loads · tok/s /metrics`` or
    ``from spec_gate · tok/s server_info (40-batch avg)``, the longest form that fits ``width``
    (None: the longest); "" before any figure."""
    run, tput = s.figures.running, s.figures.throughput
    if run.source is None and tput.source is None:
        return ""

    def form(short: bool, window: bool) -> str:
        name = (lambda x: _SHORT.get(x, x)) if short else (lambda x: x)
        parts = [f"from {name(run.source)}"] if run.source is not None else []
        tail = f"tok/s {name(tput.source)}" if tput.source not in (None, run.source) else ""
        if window and tput.window:
            tail = f"{tail or 'tok/s'} ({tput.window})"
        return " · ".join(parts + ([tail] if tail else []))

    forms = [form(False, True), form(False, False), form(True, False)]
    return next((x for x in forms if width is None or len(x) <= width), forms[-1])


def summary_lines(s: st.ConsoleSnapshot, width: int, label, value, stale) -> list[Text]:
    """The summary laid out ``width`` cells wide; stale values (server down) greyed and marked."""
    parts = []
    if s.stale:  # the panel title says "stale" too
        label = value = stale
    for lab, val in summary(s):
        t = Text()
        t.append(lab, label)
        t.append(val, value)
        parts.append(t)
    return pack(parts, width)


def footer_lines(s: st.ConsoleSnapshot, width: int, label, value, note, stale=None) -> list[Text]:
    """Limits and token usage (greyed with ``stale`` while the server is down); in demo mode,
    where the tok/s numbers come from."""
    if s.simulated_note:
        words = "simulated: " + s.simulated_note.removeprefix("simulated server; ")
        src = [Text(sources(s, width), note)] if sources(s) else []
        lines = pack([Text(words, note), *src], width)
        if len(lines) > 3 and words.endswith(")") and " (" in words:
            # keep the panel's chart tall enough: the source file reference is in the help and README
            lines = pack([Text(words[: words.rindex(" (")], note), *src], width)
        return lines
    parts = []
    if s.stale and stale is not None:
        label = value = stale
    for lab, val in (("max running ", fmt.num(s.max_running_requests, "req")),
                     ("KV ", fmt.num(s.load.token_usage * 100 if s.load and s.load.token_usage is not None else None, "%"))):
        t = Text()
        t.append(lab, label)
        t.append(val, value)
        parts.append(t)
    src = sources(s, width)
    if src:
        parts.append(Text(src, note))
    return pack(parts, width)


class LoadSummary(LinesWidget):
    """``running 37  queue 0  5,980 tok/s`` (requests, from ``/v1/loads``)."""

    DIRECT_LINES = True  # the figures change every second

    COMPONENT_CLASSES = {"load--label", "load--value", "load--stale"}

    def lines(self, width: int) -> list[Text]:
        return summary_lines(self.snapshot, width, self.style_of("load--label"), self.style_of("load--value"),
                             self.style_of("load--stale"))


class LoadFooter(LinesWidget):
    """Limits and token usage; in demo mode, where the tok/s numbers come from."""

    COMPONENT_CLASSES = {"load--label", "load--value", "load--note", "load--stale"}

    def lines(self, width: int) -> list[Text]:
        return footer_lines(self.snapshot, width, self.style_of("load--label"), self.style_of("load--value"),
                            self.style_of("load--note"), self.style_of("load--stale"))


class LoadPanel(Vertical):
    """Bordered container: summary line, :class:`BatchChart`, footer line."""

    def compose(self) -> ComposeResult:
        yield LoadSummary(id="load-summary")
        yield BatchChart(id="batch-chart")
        yield LoadFooter(id="load-footer")
