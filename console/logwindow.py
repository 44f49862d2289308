"""What the log pane holds, as plain data: its lines and the region read from the file.

Pure (no I/O, no UI): :class:`console.widgets.log_view.LogView` keeps these and renders them.
The pane holds the last lines of the file (the *tail*); lines above it are read on demand
(:class:`console.logfilter.LogRequest`) into a :class:`Region` shown instead of the tail.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence


@dataclass(frozen=True)
class LogEntry:
    """One log line, its kind (``logparse.VERIFY``, ``ERROR``, ...) and its number in the file
    (0 = first line; None: a console line, or a line of a file that was replaced)."""

    kind: str
    text: str
    no: int | None = None


@dataclass
class Region:
    """Lines read from the file, shown instead of the tail.

    ``live``: it reaches the end of the file and takes new lines that pass the filter (a
    whole-file filter); otherwise a search result around one line. ``first_no`` / ``last_no``:
    file line numbers it covers; ``not_held``: lines before ``first_no`` that pass the filter
    but are not held (beyond ``max_lines``).
    """

    entries: list[LogEntry]
    live: bool
    first_no: int
    last_no: int
    not_held: int = 0


def first_number(entries: Iterable[LogEntry], default: int | None = None) -> int | None:
    """The first line number among ``entries`` (console lines have none), else ``default``."""
    return next((e.no for e in entries if e.no is not None), default)


def position(entries: Sequence[LogEntry], entry: LogEntry) -> int | None:
    """Where ``entry`` is (or, in another list, where its line number would be), else None."""
    for i, e in enumerate(entries):
        if e is entry:
            return i
    if entry.no is None:
        return None
    return next((i for i, e in enumerate(entries) if e.no is not None and e.no >= entry.no), None)


def unheld_ranges(region: Region | None, tail_first: int, total: int, direction: int) -> tuple[tuple[int, int], ...]:
    """File line ranges ``[lo, hi)`` the pane does not hold, in the order a search going
    ``direction`` (1 down, -1 up) meets them after the last (first) line it holds.

    ``tail_first``: the number of the tail's first file line; ``total``: the file's lines. The
    tail reaches the end of the file, so past its last line the search goes on at the top.
    """
    if region is None:
        ranges: tuple[tuple[int, int], ...] = ((0, tail_first),)
    elif region.live:  # every line that passes the filter from first_no on is held
        ranges = ((0, region.first_no),) if region.not_held else ()
    else:
        after, above = (region.last_no + 1, total), (0, region.first_no)
        ranges = (after, above) if direction > 0 else (above, after)
    return tuple((lo, hi) for lo, hi in ranges if lo < hi)
