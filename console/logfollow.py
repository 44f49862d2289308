"""Follows a growing server log file like ``tail -F``, without loading it whole.

:meth:`LogFollower.read_new` returns the complete lines appended since the last call; it
handles a file that does not exist yet (launch mode before the child writes), truncation
(``size < position``: start over) and rotation (a new inode at the path: reopen from its
start). A partial last line is kept until its newline arrives.

On the first read of an existing file only the last ``initial_tail_bytes`` are returned as
lines, but the whole file is scanned once (streamed) so that startup lines far above the tail
(``Spec v2 is enabled...``, ``spec_gate: worker=...``) still reach :class:`console.logparse.LogFacts`.

Blocking file I/O: the app calls :meth:`read_new` from a thread worker.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

#: at most this many bytes are read per call, so one call never stalls on a huge backlog
READ_CHUNK = 1 << 20
#: a "line" longer than this (a binary file, a runaway print) is passed on in pieces, so the
#: partial line never holds more than this in memory
MAX_LINE_BYTES = 1 << 20

#: control characters (not tab) shown in caret notation, as ``less`` does: a binary file or an
#: escape sequence must not reach the terminal (or Textual's layout) raw
_CARET = {c: "^" + chr(c + 64) for c in range(32) if c != 9} | {127: "^?"}


#: characters of a line that are kept (a log line is a few hundred); the rest is counted, so the
#: pane, the line classifier and search never work on megabytes of one line
MAX_LINE_CHARS = 8192


def visible(line: str) -> str:
    """``line`` with control characters other than tab in caret notation (ESC -> ``^[``), cut to
    ``MAX_LINE_CHARS`` characters (``… [N more characters]``)."""
    if len(line) > MAX_LINE_CHARS:
        line = f"{line[:MAX_LINE_CHARS]}… [{len(line) - MAX_LINE_CHARS:,} more characters]"
    return line.translate(_CARET)


class LogFollower:
    """Tail one log file.

    Args:
        path: the log file.
        initial_tail_bytes: on the first read of an existing file, how much of its end becomes
            lines (the rest is only scanned with ``on_scan``).
        on_scan: called with every line of the skipped head (to collect facts), or None.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        initial_tail_bytes: int = 256 * 1024,
        on_scan: Callable[[str], None] | None = None,
    ) -> None:
        self.path = Path(path)
        self.initial_tail_bytes = initial_tail_bytes
        self.on_scan = on_scan
        self._fh = None
        self._inode: int | None = None
        self._pos = 0
        self._partial = b""
        self._first = True

    def _open(self) -> bool:
        try:
            fh = open(self.path, "rb")
        except OSError:
            return False
        st = os.fstat(fh.fileno())
        self._fh, self._inode, self._pos, self._partial = fh, st.st_ino, 0, b""
        if self._first:
            self._first = False
            start = max(0, st.st_size - self.initial_tail_bytes)
            if start > 0:
                self._scan_head(fh, start)
                fh.seek(start)
                fh.readline()  # drop the cut line ...
                # ... unless nothing follows it: a last line longer than the tail is shown cut
                self._pos = fh.tell() if fh.tell() < st.st_size else start
        return True

    def _scan_head(self, fh, end: int) -> None:
        if self.on_scan is None:
            return
        fh.seek(0)
        done = 0
        for raw in fh:
            done += len(raw)
            self.on_scan(raw.decode("utf-8", "replace").rstrip("\r\n"))
            if done >= end:
                break

    def close(self) -> None:
        """Close the file (a later :meth:`read_new` reopens it)."""
        if self._fh is not None:
            self._fh.close()
        self._fh = None

    def read_new(self) -> list[str]:
        """Complete lines appended since the last call (without newlines). Never raises on I/O errors."""
        try:
            return self._read_new()
        except OSError:
            self.close()
            return []

    def _read_new(self) -> list[str]:
        if self._fh is None and not self._open():
            return []
        # rotation: a different file now lives at the path
        try:
            st = os.stat(self.path)
        except OSError:
            st = None
        if st is not None and st.st_ino != self._inode:
            rest = self._drain()
            self.close()
            self._first = False
            if not self._open():
                return rest
            return rest + self._drain()
        if st is not None and st.st_size < self._pos:  # truncated
            self._fh.seek(0)
            self._pos, self._partial = 0, b""
        return self._drain()

    def _drain(self) -> list[str]:
        assert self._fh is not None
        self._fh.seek(self._pos)
        data = self._fh.read(READ_CHUNK)
        if not data:
            return []
        self._pos += len(data)
        data = self._partial + data
        parts = data.split(b"\n")
        self._partial = parts.pop()
        if len(self._partial) > MAX_LINE_BYTES:
            parts.append(self._partial)
            self._partial = b""
        return [visible(p.decode("utf-8", "replace").rstrip("\r")) for p in parts]
