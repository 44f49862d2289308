"""The load panel: running batch size, queue length and tok/s, the batch chart, limits."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical

from console import fmt
from console import state as st
from console.widgets.base import SnapshotWidget
from console.widgets.batch_chart import BatchChart


def summary(s: st.ConsoleSnapshot) -> list[tuple[str, str]]:
    """``[(label, value), ...]`` for the summary line: batch, queue, generation throughput."""
    load = s.load
    return [
        ("batch ", fmt.num(s.running_batch, "req")),
        ("queue ", fmt.num(load.waiting_reqs if load else None, "req")),
        ("", fmt.num(load.gen_throughput if load else None, "tok/s")),
    ]


class LoadSummary(SnapshotWidget):
    """``batch 37 req  queue 0 req  5,980 tok/s`` (generation throughput)."""

    COMPONENT_CLASSES = {"load--label", "load--value"}

    def render(self) -> Text:
        text = Text(no_wrap=True, overflow="ellipsis")
        for i, (label, value) in enumerate(summary(self.snapshot)):
            if i:
                text.append("  ")
            text.append(label, self.style_of("load--label"))
            text.append(value, self.style_of("load--value"))
        return text


class LoadFooter(SnapshotWidget):
    """Limits and token usage; in demo mode, where the tok/s numbers come from."""

    COMPONENT_CLASSES = {"load--label", "load--value", "load--note"}

    def render(self) -> Text:
        s = self.snapshot
        text = Text(no_wrap=True, overflow="ellipsis")
        if s.simulated_note:
            text.append("sim: tok/s from measured H200 table", self.style_of("load--note"))
            return text
        text.append("max running ", self.style_of("load--label"))
        text.append(fmt.num(s.max_running_requests, "req"), self.style_of("load--value"))
        usage = s.load.token_usage if s.load else None
        text.append("  KV ", self.style_of("load--label"))
        text.append(fmt.num(usage * 100 if usage is not None else None, "%"), self.style_of("load--value"))
        return text


class LoadPanel(Vertical):
    """Bordered container: summary line, :class:`BatchChart`, footer line."""

    def compose(self) -> ComposeResult:
        yield LoadSummary(id="load-summary")
        yield BatchChart(id="batch-chart")
        yield LoadFooter(id="load-footer")
