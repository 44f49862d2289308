"""Running batch size history as a bar chart with the threshold (and N - H) drawn across it.

The axis is chosen so that the threshold line is exact and always visible:

* row ``r`` (0 = bottom) covers the batch sizes ``[r * step, (r + 1) * step)``, ``step = ymax / height``;
* when a threshold N is known, ``step = N / k`` for a whole number ``k`` (1 <= k <= height - 2
  on charts of 3 rows or more), so N is exactly the lower edge of row ``k``: the ``─`` row
  holds the batch sizes ``>= N`` (speculation OFF), every row below it the sizes ``< N``.
  Bars below N therefore never cover the ``─`` line; bars at or above N cross it in the OFF
  colour (a bar of exactly N still shows in that row). ``k`` is the largest value whose axis
  still holds the tallest visible bar, so small batches get as much height as possible;
* when even ``k = 1`` cannot hold the tallest bar (batch > height * N), bars are cut at the top
  of the chart and end in ``▲``;
* labels: ``0`` on the bottom row, N on the ``─`` row, N - H on the ``┄`` row (when it has a
  row of its own), the axis maximum on the top row, each only where no other label is. The
  ``┄`` (N - H) line sits in the row that contains N - H; bars that reach into that row cover it.
"""

from __future__ import annotations

import math
from itertools import groupby
from operator import itemgetter

from rich.text import Text

from console import fmt
from console.widgets.base import SnapshotWidget
from server_patch import contract

#: glyph that ends a bar cut at the top of the chart (batch size above the axis maximum)
CLIPPED = "▲"


def nice_max(value: float) -> int:
    """Round an axis maximum up to 1, 1.5, 2, 2.5, 3, 4, 5, 6, 8 or 10 times a power of ten (at least 4)."""
    value = max(4.0, value)
    exp = 10 ** math.floor(math.log10(value))
    for m in (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10):
        if value <= m * exp:
            return int(math.ceil(m * exp))
    return int(value)  # pragma: no cover


def axis(data_max: float, threshold: int | None, height: int) -> tuple[float, int | None]:
    """``(ymax, k)``: the axis maximum (req) and the row whose lower edge is the threshold.

    Without a threshold (or on a 1-row chart) ``k`` is None and ``ymax`` a round number above
    the data. With one, ``ymax = height * threshold / k`` (see the module docstring).
    """
    if not threshold or threshold < 1 or height < 2:
        return float(nice_max(max(data_max, 1) * 1.15)), None
    k_hi = height - 2 if height >= 3 else 1
    k = min(k_hi, int(height * threshold // max(data_max, 1)))
    k = max(1, k)
    return height * threshold / k, k


def chart_rows(
    history: tuple[int, ...], threshold: int | None, hysteresis: int | None, width: int, height: int
) -> tuple[list[str], list[list[tuple[str, str]]], float]:
    """Lay out the chart.

    Returns:
        ``(labels, cells, ymax)``: one axis label per row (top first, each ending in ``┤`` or
        ``│``), a grid of ``(kind, char)`` cells per row (top first) — kind ``""`` empty,
        ``"on"``/``"off"`` bars below / at-or-above the threshold, ``"thr"``/``"hys"`` the
        threshold / N - H line — and the axis maximum (req).
    """
    height = max(1, height)
    data = list(history)

    def layout(label_w: int):
        plot_w = max(1, width - label_w)
        window = data[-plot_w:]
        ymax, k = axis(max(window, default=0), threshold, height)
        step = ymax / height
        hys_row = None
        if k is not None and threshold and hysteresis and hysteresis > 0:
            r = int(contract.resume_below(threshold, hysteresis) // step)
            if 0 < r < k:  # a row of its own, above the bottom row (where every bar would cover it)
                hys_row = r
        by_row: dict[int, str] = {}
        if k is not None:
            by_row[k] = fmt.num(threshold)
        if hys_row is not None:
            by_row[hys_row] = fmt.num(contract.resume_below(threshold, hysteresis))
        by_row.setdefault(height - 1, fmt.num(ymax))
        by_row.setdefault(0, "0")
        return plot_w, window, ymax, k, hys_row, by_row

    label_w = 2
    for _ in range(4):  # the labels' width decides the plot width, which decides the axis
        plot_w, window, ymax, thr_row, hys_row, labels_by_row = layout(label_w)
        need = max(len(x) for x in labels_by_row.values()) + 1
        if need <= label_w:
            break
        label_w = need
    cells_data: list[int | None] = [None] * (plot_w - len(window)) + window  # type: ignore[list-item]
    step = ymax / height

    labels: list[str] = []
    for r in range(height):
        lab = labels_by_row.get(height - 1 - r, "")
        labels.append(lab.rjust(label_w - 1) + ("┤" if lab else "│"))
    # column by column (each batch size once: the history repeats sizes), then read out by rows
    columns: dict[int | None, tuple[tuple[str, str], ...]] = {}
    for v in cells_data:
        if v not in columns:
            columns[v] = _column(v, height, step, ymax, threshold, thr_row, hys_row)
    cells = [list(row) for row in zip(*(columns[v] for v in cells_data))]
    return labels, cells, ymax


def _column(v: int | None, height: int, step: float, ymax: float, threshold: int | None,
            thr_row: int | None, hys_row: int | None) -> tuple[tuple[str, str], ...]:
    """One batch size's ``(kind, char)`` cells, top row first (see :func:`chart_rows`)."""
    col: list[tuple[str, str]] = []
    for r in range(height):
        rb = height - 1 - r  # row counted from the bottom
        fill = 0
        if v is not None and v > 0:
            fill = max(0, min(8, round(v / step * 8) - rb * 8))
            if rb == 0 and fill == 0:
                fill = 1  # never hide a non-empty batch
            if thr_row is not None and rb == thr_row and v >= threshold and fill == 0:  # type: ignore[operator]
                fill = 1  # a batch of exactly N reaches the threshold row
            if thr_row is not None and v < threshold and rb >= thr_row:  # type: ignore[operator]
                fill = 0  # below N never enters the threshold row (rounding)
        if fill > 0:
            kind = "off" if threshold and v >= threshold else "on"  # type: ignore[operator]
            char = fmt.BLOCKS[fill]
            if rb == height - 1 and v > ymax:  # type: ignore[operator]
                char = CLIPPED
            col.append((kind, char))
        elif rb == thr_row:
            col.append(("thr", "─"))
        elif rb == hys_row:
            col.append(("hys", "┄"))
        else:
            col.append(("", " "))
    return tuple(col)


class BatchChart(SnapshotWidget):
    """Bars: running requests per poll, newest right; ``─`` threshold N, ``┄`` N - H."""

    DIRECT_LINES = True  # repainted every second

    COMPONENT_CLASSES = {
        "batch-chart--on",
        "batch-chart--off",
        "batch-chart--threshold",
        "batch-chart--hysteresis",
        "batch-chart--axis",
    }

    def render_inputs(self, snapshot) -> object:
        g = snapshot.gate
        return (snapshot.batch_history, g.threshold if g else None, g.hysteresis if g else None,
                g.mode if g else None)

    def render(self) -> Text:
        text = Text("\n", no_wrap=True).join(self.text_lines())
        text.no_wrap = True
        return text

    def text_lines(self) -> list[Text]:
        s = self.snapshot
        g = s.gate
        w, h = self.size.width, self.size.height
        if w < 6 or h < 1:
            return [Text("")]
        auto = g is not None and g.mode == contract.MODE_AUTO  # the learned crossover, no hysteresis
        labels, cells, _ = chart_rows(
            s.batch_history, g.threshold if g else None, None if auto or g is None else g.hysteresis, w, h
        )
        styles = {
            "on": self.style_of("batch-chart--on"),
            "off": self.style_of("batch-chart--off"),
            "thr": self.style_of("batch-chart--threshold"),
            "hys": self.style_of("batch-chart--hysteresis"),
        }
        axis_style = self.style_of("batch-chart--axis")
        lines = []
        for lab, row in zip(labels, cells):
            line = Text(no_wrap=True)
            line.append(lab, axis_style)
            for kind, chars in runs(row):  # one span per run: the chart repaints every second
                line.append(chars, styles.get(kind))
            lines.append(line)
        return lines


def runs(row: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """``(kind, char)`` cells as ``(kind, chars)`` runs of one kind each, in order."""
    return [(kind, "".join(c for _, c in cells)) for kind, cells in groupby(row, key=itemgetter(0))]
