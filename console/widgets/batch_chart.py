"""Running batch size history as a bar chart with the threshold (and N - H) drawn across it."""

from __future__ import annotations

import math

from rich.text import Text

from console import fmt
from console.widgets.base import SnapshotWidget


def nice_max(value: float) -> int:
    """Round an axis maximum up to 1, 1.5, 2, 2.5, 3, 4, 5, 6, 8 or 10 times a power of ten (at least 4)."""
    value = max(4.0, value)
    exp = 10 ** math.floor(math.log10(value))
    for m in (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10):
        if value <= m * exp:
            return int(math.ceil(m * exp))
    return int(value)  # pragma: no cover


def chart_rows(
    history: tuple[int, ...], threshold: int | None, hysteresis: int | None, width: int, height: int
) -> tuple[list[str], list[list[tuple[str, str]]], int]:
    """Lay out the chart.

    Returns:
        ``(labels, cells, ymax)``: one axis label per row (top first), a grid of
        ``(kind, char)`` cells per row — kind ``""`` empty, ``"on"``/``"off"`` bars below /
        at-or-above the threshold, ``"thr"``/``"hys"`` the threshold / N - H line — and the
        axis maximum (req).
    """
    data = list(history)
    top = max([*data, threshold or 0, 1]) * 1.15
    ymax = nice_max(top)
    label_w = len(str(ymax)) + 1
    plot_w = max(1, width - label_w)
    data = data[-plot_w:]
    data = [None] * (plot_w - len(data)) + data  # type: ignore[list-item]

    def row_of(v: float) -> int:  # bottom-based row containing level v
        return min(height - 1, max(0, int(v / ymax * height)))

    thr_row = row_of(threshold) if threshold else None
    hys_row = None
    if threshold and hysteresis and height >= 5:
        r = row_of(threshold - hysteresis)
        hys_row = r if r != thr_row else None
    labels = []
    cells: list[list[tuple[str, str]]] = []
    for r in range(height):
        rb = height - 1 - r
        if rb == height - 1:
            lab = str(ymax)
        elif rb == thr_row:
            lab = str(threshold)
        elif rb == 0:
            lab = "0"
        else:
            lab = ""
        labels.append(lab.rjust(label_w - 1) + ("┤" if lab else "│"))
        row = []
        for v in data:
            fill = 0 if v is None else max(0, min(8, round(v / ymax * height * 8) - rb * 8))
            if v is not None and v > 0 and rb == 0 and fill == 0:
                fill = 1  # never hide a non-empty batch
            if fill > 0:
                kind = "off" if threshold and v >= threshold else "on"
                row.append((kind, fmt.BLOCKS[fill]))
            elif rb == thr_row:
                row.append(("thr", "─"))
            elif rb == hys_row:
                row.append(("hys", "┄"))
            else:
                row.append(("", " "))
        cells.append(row)
    return labels, cells, ymax


class BatchChart(SnapshotWidget):
    """Bars: running batch size (req) per poll, newest right; ``─`` threshold N, ``┄`` N - H."""

    COMPONENT_CLASSES = {
        "batch-chart--on",
        "batch-chart--off",
        "batch-chart--threshold",
        "batch-chart--hysteresis",
        "batch-chart--axis",
    }

    def render(self) -> Text:
        s = self.snapshot
        g = s.gate
        w, h = self.size.width, self.size.height
        if w < 6 or h < 1:
            return Text("")
        labels, cells, _ = chart_rows(
            s.batch_history, g.threshold if g else None, g.hysteresis if g else None, w, h
        )
        styles = {
            "on": self.style_of("batch-chart--on"),
            "off": self.style_of("batch-chart--off"),
            "thr": self.style_of("batch-chart--threshold"),
            "hys": self.style_of("batch-chart--hysteresis"),
        }
        axis = self.style_of("batch-chart--axis")
        text = Text(no_wrap=True)
        for i, (lab, row) in enumerate(zip(labels, cells)):
            text.append(lab, axis)
            for kind, char in row:
                text.append(char, styles.get(kind))
            if i < len(labels) - 1:
                text.append("\n")
        return text
