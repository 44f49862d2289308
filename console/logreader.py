"""Answers a :class:`console.logfilter.LogRequest` of the log pane from the log file.

Blocking file I/O (the session calls :func:`answer` in a thread, one request at a time); the
lines come back classified (:mod:`console.logparse`, the console's own poll lines as ``OWN``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from console import events as ev
from console import logfilter, logparse, logsearch
from console.logindex import LineIndex


def answer(request: logfilter.LogRequest, path: Path, index: LineIndex, is_own: Callable[[str], bool],
           cancelled: Callable[[], bool] = lambda: False) -> ev.LogFound | None:
    """Read what ``request`` asks from ``path`` through ``index`` (the follower's, now).

    Returns:
        The :class:`console.events.LogFound`; ``stale`` when ``index`` is of another file than
        the request's (replaced or truncated since); None when ``cancelled`` ended the read.
    """
    if index.file_id != request.file_id:
        return ev.LogFound(request, stale=True)
    fh = logsearch.open_indexed(path, index)
    if fh is None:
        return ev.LogFound(request, stale=True)
    keep = request.keeps(is_own)
    with fh:
        if request.kind == logfilter.FILTERED:
            result = logsearch.last_kept(fh, index, keep, request.ranges[0][1], request.limit, cancelled,
                                         request.might_keep())
            if result is None:
                return None
            lines, count = result
            return ev.LogFound(request, _kinds(lines, is_own), count=count)
        line = logsearch.find_line(fh, index, request.hits(is_own), request.ranges, request.direction, cancelled,
                                   request.might_hit())
        if line is None:
            return None if cancelled() else ev.LogFound(request)
        lines = logsearch.lines_around(fh, index, line, keep, request.limit, request.might_keep())
        return ev.LogFound(request, _kinds(lines, is_own), line=line)


def _kinds(lines: list[tuple[int, str]], is_own: Callable[[str], bool]) -> tuple[tuple[int, str, str], ...]:
    return tuple((no, logparse.OWN if is_own(text) else logparse.classify(text), text) for no, text in lines)
