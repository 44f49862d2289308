"""Reading a log file by line number through its :class:`console.logindex.LineIndex`.

Blocking file I/O (the session runs these in a thread, one at a time). Memory stays bounded:
lines are streamed in ``READ_BYTES`` chunks and only the lines asked for are kept; a line longer
than ``MAX_LINE_BYTES`` is cut. Lines come out as the log pane shows them
(:func:`console.logfollow.decode`, tabs expanded), so a filter or search reads the same text
here as in the pane. Only indexed, complete lines are read (``index.lines``).

``maybe`` (:func:`console.logfilter.chunk_test`) lets a scan skip a chunk of lines without
decoding them when none of them can pass; ``cancelled`` (called every few thousand lines) ends a
long scan early: the session passes "a newer request is waiting".
"""

from __future__ import annotations

import os
from collections import deque
from typing import BinaryIO, Callable, Iterator

from console.logfollow import MAX_LINE_BYTES, decode
from console.logindex import LineIndex

#: bytes read per step
READ_BYTES = 1 << 20
#: lines between two calls of ``cancelled``
CHECK_EVERY = 4096

Line = tuple[int, str]
Maybe = Callable[[bytes], bool] | None


def _text(raw: bytes) -> str:
    return decode(raw[:MAX_LINE_BYTES]).expandtabs()


def open_indexed(path, index: LineIndex) -> BinaryIO | None:
    """The file ``index`` was built from, opened for reading; None when another file lives at
    ``path`` now (rotated away meanwhile: the line numbers would be of another file)."""
    try:
        fh = open(path, "rb")
    except OSError:
        return None
    st = os.fstat(fh.fileno())
    if (st.st_dev, st.st_ino) != (index.dev, index.ino):
        fh.close()
        return None
    return fh


def line_offset(fh: BinaryIO, index: LineIndex, line_no: int) -> int:
    """Byte offset where line ``line_no`` starts."""
    off, skip = index.locate(line_no)
    fh.seek(off)
    while skip:
        data = fh.read(READ_BYTES)
        if not data:
            break
        count = data.count(b"\n")
        if count < skip:
            skip -= count
            off += len(data)
            continue
        pos = -1
        for _ in range(skip):
            pos = data.find(b"\n", pos + 1)
        return off + pos + 1
    return off


def lines_forward(fh: BinaryIO, index: LineIndex, start: int, stop: int, maybe: Maybe = None) -> Iterator[Line]:
    """Lines ``start`` .. ``stop - 1`` as ``(number, text)``, first to last (without those of a
    chunk that ``maybe`` rules out)."""
    stop = min(stop, index.lines)
    if start >= stop:
        return
    fh.seek(line_offset(fh, index, max(0, start)))
    no, partial = max(0, start), b""
    while no < stop:
        data = fh.read(READ_BYTES)
        if not data:
            return
        data = partial + data
        parts = data.split(b"\n")
        partial = parts.pop()
        if maybe is not None and not maybe(data[: len(data) - len(partial)]):
            no += len(parts)
            partial = partial[: MAX_LINE_BYTES + 1]
            continue
        partial = partial[: MAX_LINE_BYTES + 1]  # a giant line: its start is what shows
        for raw in parts:
            if no >= stop:
                return
            yield no, _text(raw)
            no += 1


def lines_backward(fh: BinaryIO, index: LineIndex, start: int, stop: int, maybe: Maybe = None) -> Iterator[Line]:
    """Lines ``stop - 1`` down to ``start`` as ``(number, text)``, last to first (without those
    of a chunk that ``maybe`` rules out)."""
    stop, start = min(stop, index.lines), max(0, start)
    if start >= stop:
        return
    pos = line_offset(fh, index, stop) - 1  # the newline that ends line stop - 1 is left out
    no, tail = stop - 1, b""  # tail: the known end of line `no` (its start is further back)
    while no >= start:
        begin = max(index.base, pos - READ_BYTES)
        fh.seek(begin)
        data = fh.read(pos - begin) + tail
        parts = data.split(b"\n")
        tail = parts[0][: MAX_LINE_BYTES + 1]  # the line's start is what shows (prefix kept)
        if maybe is not None and len(parts) > 1 and not maybe(data[len(parts[0]):]):
            no -= len(parts) - 1
            parts = parts[:1]
        for raw in reversed(parts[1:]):
            if no < start:
                return
            yield no, _text(raw)
            no -= 1
        pos = begin
        if begin <= index.base:
            if no >= start:
                yield no, _text(tail)
            return


def find_line(fh: BinaryIO, index: LineIndex, hit: Callable[[str], bool], ranges, direction: int,
              cancelled: Callable[[], bool] = lambda: False, maybe: Maybe = None) -> int | None:
    """The first line in ``ranges`` (tried in order; forward from each range's start when
    ``direction`` is 1, backward from its end when -1) for which ``hit`` is true, else None."""
    for lo, hi in ranges:
        lines = (lines_forward(fh, index, lo, hi, maybe) if direction > 0
                 else lines_backward(fh, index, lo, hi, maybe))
        for i, (no, text) in enumerate(lines):
            if i % CHECK_EVERY == 0 and cancelled():
                return None
            if hit(text):
                return no
    return None


def lines_around(fh: BinaryIO, index: LineIndex, line_no: int, keep: Callable[[str], bool],
                 context: int, maybe: Maybe = None) -> list[Line]:
    """Line ``line_no`` with up to ``context`` lines that ``keep`` passes on each side, in order."""
    before: list[Line] = []
    for no, text in lines_backward(fh, index, 0, line_no, maybe):
        if keep(text):
            before.append((no, text))
            if len(before) >= context:
                break
    after: list[Line] = []
    for no, text in lines_forward(fh, index, line_no, index.lines):  # no skipping: line_no itself
        if no == line_no or keep(text):
            after.append((no, text))
            if len(after) > context:
                break
    return before[::-1] + after


def last_kept(fh: BinaryIO, index: LineIndex, keep: Callable[[str], bool], stop: int, limit: int,
              cancelled: Callable[[], bool] = lambda: False, maybe: Maybe = None) -> tuple[list[Line], int] | None:
    """The last ``limit`` lines before ``stop`` that ``keep`` passes, and how many pass
    (None when cancelled)."""
    kept: deque[Line] = deque(maxlen=limit)
    count = 0
    for i, (no, text) in enumerate(lines_forward(fh, index, 0, stop, maybe)):
        if i % CHECK_EVERY == 0 and cancelled():
            return None
        if keep(text):
            kept.append((no, text))
            count += 1
    return list(kept), count
