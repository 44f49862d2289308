"""The GPU panel: one row per GPU, or a clear state when NVML cannot be used.

Columns: index, name, utilization (%) with its recent history, memory used/total (GiB),
temperature (°C), power/limit (W), SM clock (MHz). Missing fields are ``n/a``; a lost GPU
says ``GPU lost``; a MIG-enabled GPU is marked ``MIG`` (NVML gives no utilization there).
When NVML cannot be used the panel says why, wrapped to the panel's width.
"""

from __future__ import annotations

from rich.text import Text

from console import fmt
from console import state as st
from console.widgets.base import SnapshotWidget, pack

#: temperature (°C) from which the value is highlighted
HOT_C = 80.0


def _cols(width: int, idx: int = 2) -> dict[str, int]:
    """Column widths for a panel ``width`` cells wide (history column takes the slack); ``idx``:
    the first column's width (4 for a server's ``TP12``)."""
    cols = {"idx": idx, "name": 8, "util": 5, "mem": 16, "temp": 5, "power": 10, "clock": 9, "hist": 8}
    fixed = sum(cols.values()) + len(cols) - 1
    slack = width - fixed
    if slack > 0:
        cols["name"] += min(slack, 6)
        slack -= min(slack, 6)
        cols["hist"] += slack
    elif slack < 0:
        cols["hist"] = max(0, cols["hist"] + slack)
    return cols


def render_rows(s: st.ConsoleSnapshot, width: int, styles: dict) -> Text:
    """The panel's content as Rich text (``styles``: header, value, na, hot, lost, warn, hist)."""
    return Text("\n", no_wrap=True, overflow="ellipsis").join(row_lines(s, width, styles))


def row_lines(s: st.ConsoleSnapshot, width: int, styles: dict) -> list[Text]:
    """:func:`render_rows` as its lines: the header, then one line per GPU (and host lines)."""
    g = s.gpus
    if g.status != st.GPU_OK:
        label = {
            st.GPU_STARTING: "reading NVML…",
            st.GPU_NO_LIBRARY: "NVML unavailable",
            st.GPU_DRIVER_MISMATCH: "NVML driver/library mismatch",
            st.GPU_NO_DRIVER: "NVIDIA driver not loaded",
            st.GPU_NO_PERMISSION: "NVML: no permission",
            st.GPU_NONE: "no GPUs",
            st.GPU_ERROR: "NVML error",
        }.get(g.status, g.status)
        parts = [Text(label, styles["warn"])]
        if g.message and g.message != label:
            parts.append(Text(f"· {g.message}", styles["na"]))
        parts.append(Text("(the rest of the console keeps working)", styles["na"]))
        return pack(parts[:-1], max(10, width), sep=" ") + [parts[-1]]
    served = any(r.host is not None for r in g.rows)
    c = _cols(width, idx=4 if served else 2)
    header = [("TP" if served else "#", "idx"), ("name", "name"), ("util", "util"), ("memory", "mem"),
              ("temp", "temp"), ("power", "power"), ("SM clock", "clock"), ("history", "hist")]
    parts = []
    for title, key in header:
        if c[key] <= 0:
            continue
        parts.append(title[: c[key]].rjust(c[key]) if key in ("util", "mem", "temp", "power", "clock") else title[: c[key]].ljust(c[key]))
    lines = [Text(" ".join(parts), styles["header"])]
    hists = s.gpu_util_history
    hosts = {r.host for r in g.rows if r.host is not None}
    group = None
    for i, row in enumerate(g.rows):
        # a line naming the host (and node) where the rows' host changes, when there is more than
        # one, and before this machine's own GPUs under the server's
        label = (f"{row.host} (node {fmt.num(row.node_rank)})" if row.host is not None and len(hosts) > 1
                 else "this machine" if row.host is None and served else None)
        if label is not None and label != group:
            lines.append(Text(label, styles["header"]))
        group = label
        lines.append(_row_line(row, hists[i] if i < len(hists) else (), c, styles))
    return lines


def _row_line(row: st.GpuRow, hist: tuple, c: dict[str, int], styles: dict) -> Text:
    """One GPU's line (``hist``: its utilization history; ``c``: the column widths)."""
    text = Text()
    idx = f"TP{row.tp_rank}" if row.host is not None else str(row.index)
    text.append(idx.ljust(c["idx"]) + " ", styles["value"])
    name = (row.name or fmt.NA) + (" MIG" if row.mig else "")
    text.append(name[: c["name"]].ljust(c["name"]) + " ", styles["value"] if row.name else styles["na"])
    if row.lost:
        text.append("GPU lost (fell off the bus?) — NVML GPU_IS_LOST", styles["lost"])
        return text
    if row.error:
        text.append(f"NVML on the server: {row.error}", styles["warn"])
        return text
    cells = [
        ("util", fmt.num(row.util_pct, "%"), row.util_pct is None),
        ("mem", fmt.mem_gib(row.mem_used_mib, row.mem_total_mib), row.mem_used_mib is None),
        ("temp", fmt.num(row.temp_c, "°C"), row.temp_c is None),
        ("power", fmt.pair(row.power_w, row.power_limit_w, "W"), row.power_w is None),
        ("clock", fmt.num(row.sm_clock_mhz, "MHz"), row.sm_clock_mhz is None),
    ]
    for key, value, missing in cells:
        w = c[key]
        if w <= 0:
            continue
        style = styles["na"] if missing else styles["value"]
        if key == "temp" and row.temp_c is not None and row.temp_c >= HOT_C:
            style = styles["hot"]
        text.append(value.rjust(w)[-w:] + " ", style)
    if c["hist"] > 0:
        text.append(fmt.sparkline(hist, c["hist"], top=100.0), styles["hist"])
    return text


class GpuTable(SnapshotWidget):
    """The rows (height grows with the number of GPUs; the panel scrolls when short of room)."""

    DIRECT_LINES = True  # repainted every second

    COMPONENT_CLASSES = {"gpu--header", "gpu--value", "gpu--na", "gpu--hot", "gpu--lost", "gpu--warn", "gpu--hist"}

    def _styles(self) -> dict:
        return {k: self.style_of(f"gpu--{k}") for k in ("header", "value", "na", "hot", "lost", "warn", "hist")}

    def render(self) -> Text:
        return render_rows(self.snapshot, self.size.width, self._styles())

    def text_lines(self) -> list[Text]:
        return row_lines(self.snapshot, self.size.width, self._styles())

    def get_content_height(self, container, viewport, width: int) -> int:
        # one line per GPU plus the header; a NVML problem wraps its message
        return max(1, len(render_rows(self.snapshot, width, _PLAIN).plain.split("\n")))

    _height = -1
    _height_of: object = None  # the inputs _height was computed from

    def render_inputs(self, snapshot: st.ConsoleSnapshot) -> object:
        return (snapshot.gpus, snapshot.gpu_util_history)

    def watch_snapshot(self, snapshot: st.ConsoleSnapshot) -> None:
        # the number of lines depends on the rows and their hosts, not on the readings (which
        # change every second): render_rows() to count them only when those change
        g = snapshot.gpus
        inputs = (self.size.width, g.status, g.message if g.status != st.GPU_OK else None,
                  tuple((r.host, r.node_rank) for r in g.rows))
        if inputs == self._height_of:
            return
        self._height_of = inputs
        height = self.get_content_height(None, None, self.size.width) if self.size.width else -1
        if height != self._height:  # re-layout only when the number of lines changes
            self._height = height
            self.refresh(layout=True)


_PLAIN = {k: None for k in ("header", "value", "na", "hot", "lost", "warn", "hist")}
