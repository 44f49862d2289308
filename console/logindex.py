"""Where each line of a log file starts, without keeping the lines: a block index.

For every ``BLOCK_BYTES`` of the file the index keeps how many newlines come before the block
(8 bytes per 64 KiB: a 250 MB log of 250,000 lines takes 30 KiB, a 10 GB one 1.2 MiB), so the start
of line N is found with one bisect and one read of at most one block. Counting newlines is
``bytes.count`` (C speed), so indexing runs at disk speed. toolong keeps one offset per line
instead; a block index keeps memory bounded by the file size / 64 Ki.

:class:`console.logfollow.LogFollower` feeds it every byte it reads, in order, and starts a new
index (a new ``file_id``) when the file is replaced or truncated. Reading lines by number is
:mod:`console.logsearch` (blocking: from a thread). No I/O here.
"""

from __future__ import annotations

import bisect
from array import array

#: bytes per index block: line N is found by reading at most this much before it
BLOCK_BYTES = 1 << 16


class LineIndex:
    """Newline counts per block of one file (one file: its device, inode and ``file_id``).

    ``base`` is the byte offset of line 0 (after NUL padding the follower skipped), ``end`` the
    first byte not indexed yet, ``lines`` the complete (newline-ended) lines in ``[base, end)``.
    """

    def __init__(self, file_id: int, dev: int = 0, ino: int = 0, base: int = 0) -> None:
        self.file_id, self.dev, self.ino = file_id, dev, ino
        self.base = self.end = base
        self.lines = 0
        # _counts[i]: newlines in [base, base + i * BLOCK_BYTES)
        self._counts = array("Q", [0])

    def skip_to(self, offset: int) -> None:
        """Start line 0 at ``offset`` (only while nothing is indexed: NUL padding skipped)."""
        if self.end != self.base:
            raise ValueError("skip_to on an index that has data")
        self.base = self.end = offset

    def feed(self, data: bytes) -> None:
        """Index ``data``: the bytes of the file at ``self.end`` onwards."""
        pos, size = 0, len(data)
        while pos < size:
            boundary = self.base + len(self._counts) * BLOCK_BYTES
            take = min(size - pos, boundary - self.end)
            self.lines += data.count(b"\n", pos, pos + take)
            self.end += take
            pos += take
            if self.end == boundary:
                self._counts.append(self.lines)

    def locate(self, line_no: int) -> tuple[int, int]:
        """Where to start reading for line ``line_no``: ``(byte offset, newlines to skip there)``.

        The offset is a block start (or ``base``); line ``line_no`` begins right after the given
        number of newlines from it. ``line_no`` may be ``lines`` (the line being written).
        """
        if line_no <= 0:
            return self.base, 0
        # the block holding newline number `line_no`: the last one with fewer newlines before it
        block = bisect.bisect_left(self._counts, line_no) - 1
        return self.base + block * BLOCK_BYTES, line_no - self._counts[block]

    @property
    def nbytes(self) -> int:
        """Memory the counts take, bytes."""
        return self._counts.itemsize * len(self._counts)
