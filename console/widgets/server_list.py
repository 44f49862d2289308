"""The server list (several servers only): one row per server, the focused one marked ``▶``.

Rows come from :func:`console.servers.server_row`; the app calls :meth:`ServerList.show` with
every server's latest snapshot, and the widget re-renders only when the text changed.
"""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from console.servers import HEADERS, ServerRow

#: column widths (URL, connected, SPEC, N·H, batch, tok/s, accept); the worker takes the rest
WIDTHS = (19, 4, 4, 9, 5, 6, 6)
#: the columns right-aligned (batch, tok/s, accept)
NUMERIC = (4, 5, 6)


def _cells(row: ServerRow) -> list[str]:
    return [row.url, row.connected, row.spec, row.n_h, row.batch, row.tok_s, row.accept]


def format_row(row: ServerRow, marker: str = " ") -> str:
    """One line: the marker, then the cells padded (and cut with ``…``) to their columns."""
    parts = []
    for i, (cell, width) in enumerate(zip(_cells(row), WIDTHS)):
        text = cell if len(cell) <= width else cell[: width - 1] + "…"
        parts.append(text.rjust(width) if i in NUMERIC else text.ljust(width))
    return f"{marker} " + " ".join(parts) + " " + row.worker


class ServerList(Static):
    """Header line plus a row per server; ``▶`` and bold mark the focused one."""

    def __init__(self, **kwargs) -> None:
        super().__init__("", markup=False, **kwargs)
        self.rows: list[ServerRow] = []
        self.focus_index = 0
        self._shown: tuple | None = None

    def show(self, rows: list[ServerRow], focus_index: int) -> None:
        """Render ``rows`` with ``focus_index`` focused (nothing happens when nothing changed)."""
        key = (tuple(rows), focus_index)
        if key == self._shown:
            return
        self._shown = key
        self.rows, self.focus_index = list(rows), focus_index
        text = Text(no_wrap=True, overflow="ellipsis")
        for i, (line, style) in enumerate(self._lines()):
            if i:
                text.append("\n")
            text.append(line, style=style)
        self.update(text)

    def _lines(self) -> list[tuple[str, str]]:
        """(text, style) of the header and of each row."""
        out = [(format_row(HEADERS), "bold")]
        for i, row in enumerate(self.rows):
            focused = i == self.focus_index
            style = "bold reverse" if focused else ("red" if row.connected == "DOWN" else "")
            out.append((format_row(row, "▶" if focused else " "), style))
        return out

    def plain_lines(self) -> list[str]:
        """The rows as plain text (tests)."""
        return [line for line, _ in self._lines()]
