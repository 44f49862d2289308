"""Follows a growing server log file like ``tail -F``, without loading it whole.

:meth:`LogFollower.read_batch` returns the complete lines appended since the last call, with
their line numbers in the file. It handles a file that does not exist yet (launch mode before
the child writes), rotation (another file at the path: a new inode; the old one is read to its
end first), truncation (``size < position``) and a file rewritten in place past its old size
(the ``FINGERPRINT_BYTES`` just before the read position changed): both start over at the top,
and a run of NUL bytes there (``copytruncate`` with a writer that does not append leaves a hole
up to its old offset) is skipped. A partial last line is kept until its newline arrives.

On the first read of an existing file only the last ``initial_tail_bytes`` become lines, but
the whole file is streamed once: into the line index (:class:`console.logindex.LineIndex`, so
search and filter can reach every line later) and, with ``on_scan``, line by line so that
startup lines far above the tail (``Spec v2 is enabled...``, ``spec_gate: worker=...``) still
reach :class:`console.logparse.LogFacts`.

Blocking file I/O: the session calls :meth:`read_batch` from a thread.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from console import fmt
from console.logindex import LineIndex

#: at most this many bytes are read per call, so one call never stalls on a huge backlog
READ_CHUNK = 1 << 20
#: a "line" longer than this (a binary file, a runaway print) is passed on in pieces, so the
#: partial line never holds more than this in memory
MAX_LINE_BYTES = 1 << 20
#: bytes just before the read position that are kept and compared on every read: when they
#: changed, the file was rewritten (truncated and written again past the old size)
FINGERPRINT_BYTES = 64
#: NUL padding skipped per call at most (a hole on a file system without SEEK_DATA)
NUL_SKIP_MAX = 64 * READ_CHUNK
#: unread bytes beyond which the follower skips to the file's end as ``tail`` does (indexing what it
#: skips, so search and filter still reach it): one READ_CHUNK a read fell minutes behind a log
#: written at tens of MB/s, showing old lines as "following"
CATCH_UP_BYTES = 16 * READ_CHUNK
#: bytes indexed per call while skipping (~2 s at the index's ~36 MB/s; the call runs in a thread)
SKIP_PER_CALL = 64 * READ_CHUNK
#: :attr:`LogFollower.problem` while the followed file's path is gone (renamed or deleted)
GONE = "was renamed or deleted (the pane shows what is still written to the file it had open)"

def file_kind(mode: int) -> str | None:
    """What a file of ``mode`` (``os.stat``'s ``st_mode``) is when it is not a regular file: ``a
    directory``, ``a named pipe``, ``a socket``, ``a device`` or ``not a regular file``; None for a
    regular file. Reading a named pipe waits for a writer, a device such as /dev/zero never ends:
    followers and readers of a log take regular files only."""
    if stat.S_ISREG(mode):
        return None
    return ("a directory" if stat.S_ISDIR(mode) else "a named pipe" if stat.S_ISFIFO(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "not a regular file")


#: characters of a line that are kept (a log line is a few hundred); the rest is counted, so the
#: pane, the line classifier and search never work on megabytes of one line
MAX_LINE_CHARS = 8192


def visible(line: str) -> str:
    """``line`` with control characters other than tab in caret notation (ESC -> ``^[``), cut to
    ``MAX_LINE_CHARS`` characters (``… [N more characters]``)."""
    if len(line) > MAX_LINE_CHARS:
        line = f"{line[:MAX_LINE_CHARS]}… [{len(line) - MAX_LINE_CHARS:,} more characters]"
    return fmt.printable(line)


def decode(raw: bytes) -> str:
    """One raw line (no newline) as the log pane shows it (UTF-8, ``\\r`` dropped, :func:`visible`);
    NUL bytes before its text are dropped (a hole or padding a truncation left: 8,192 ``^@`` hid the
    text after them)."""
    return visible(raw.lstrip(b"\0").decode("utf-8", "replace").rstrip("\r"))


@dataclass
class LogBatch:
    """Lines read by one call: ``numbers[i]`` is the line number of ``lines[i]`` in the file of
    ``file_id`` (0 = first line; None for the last lines of a file that was replaced meanwhile);
    ``total_lines``: complete lines of that file indexed so far."""

    lines: list[str] = field(default_factory=list)
    numbers: list[int | None] = field(default_factory=list)
    file_id: int = 0
    total_lines: int = 0
    #: bytes indexed but not turned into lines: the log grew faster than it is shown (CATCH_UP_BYTES)
    skipped_bytes: int = 0
    #: the file was truncated (or rewritten in place) since the last read: read again from its top
    truncated: bool = False
    #: another file lives at the path since the last read (rotated or replaced): its lines follow the old one's
    rotated: bool = False


class LogFollower:
    """Tail one log file.

    Args:
        path: the log file.
        initial_tail_bytes: on the first read of an existing file, how much of its end becomes
            lines (the rest is only indexed and scanned with ``on_scan``).
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
        self._dev_ino: tuple[int, int] | None = None
        self._pos = 0
        self._partial = b""
        self._first = True
        self._fingerprint = b""  # the bytes just before _pos
        self._skip_nul = False  # after a truncation: NUL padding at the top is dropped
        self._drop_partial = False  # after a skip ahead: the line it cut into is not shown
        self._file_ids = 0
        #: the line index of the file now followed (a new object for every new file)
        self.index = LineIndex(0)
        #: why the path cannot be opened now (a directory, a pipe, no permission) or is gone while
        #: its file is followed (:data:`GONE`); None while it can, or before any file appeared (a
        #: log not written yet is normal)
        self.problem: str | None = None

    def _new_index(self, st: os.stat_result) -> None:
        self._file_ids += 1
        self.index = LineIndex(self._file_ids, st.st_dev, st.st_ino)

    def _open(self) -> bool:
        try:
            # non-blocking: opening a named pipe for reading otherwise waits for a writer (the
            # log thread, and with it the console's exit, would hang); regular files only
            fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        except FileNotFoundError:
            self.problem = None
            return False
        except OSError as exc:  # no permission, a loop of symlinks
            self.problem = (exc.strerror or str(exc)).lower()
            return False
        st = os.fstat(fd)  # a directory opens read-only too: told apart here
        kind = file_kind(st.st_mode)
        if kind is not None:
            os.close(fd)
            self.problem = "is a directory" if kind == "a directory" else "is not a regular file (a pipe or a device)"
            return False
        os.set_blocking(fd, True)
        fh = os.fdopen(fd, "rb")
        self.problem = None
        self._fh, self._dev_ino, self._pos, self._partial = fh, (st.st_dev, st.st_ino), 0, b""
        self._fingerprint = b""
        self._new_index(st)
        if self._first:
            self._first = False
            start = max(0, st.st_size - self.initial_tail_bytes)
            if start > 0:
                fh.seek(start)
                fh.readline()  # drop the cut line ...
                # ... unless nothing follows it: a last line longer than the tail is shown cut
                self._pos = fh.tell() if fh.tell() < st.st_size else start
                self._scan_head(fh, self._pos)
        return True

    def _scan_head(self, fh, end: int) -> None:
        """Index bytes [0, end) and hand their complete lines to on_scan."""
        fh.seek(0)
        done, partial = 0, b""
        while done < end:
            data = fh.read(min(READ_CHUNK, end - done))
            if not data:
                break
            done += len(data)
            self.index.feed(data)
            self._fingerprint = (self._fingerprint + data)[-FINGERPRINT_BYTES:]
            if self.on_scan is None:
                continue
            parts = (partial + data).split(b"\n")
            partial = parts.pop()[:MAX_LINE_BYTES]  # a giant line: its start is enough for facts
            for raw in parts:
                self.on_scan(raw.decode("utf-8", "replace").rstrip("\r"))

    def close(self) -> None:
        """Close the file (a later read reopens it)."""
        if self._fh is not None:
            self._fh.close()
        self._fh = None

    def read_new(self) -> list[str]:
        """Complete lines appended since the last call (without newlines). Never raises on I/O errors."""
        return self.read_batch().lines

    def read_batch(self) -> LogBatch:
        """Like :meth:`read_new`, with the lines' numbers and the file's id and line count."""
        batch = LogBatch()
        try:
            self._read_new(batch)
        except OSError:
            self.close()
        batch.file_id, batch.total_lines = self.index.file_id, self.index.lines
        return batch

    def _read_new(self, batch: LogBatch) -> None:
        if self._fh is None and not self._open():
            return
        was_gone = self.problem == GONE  # a file back at a path that was gone is "readable again", not a rotation
        try:
            st = os.stat(self.path)
            self.problem = None
        except FileNotFoundError:
            st = None
            self.problem = GONE
        except OSError:
            st = None
        if st is not None and (st.st_dev, st.st_ino) != self._dev_ino:
            # rotation: a different file now lives at the path; the old one's last lines first
            self._drain(batch)
            batch.numbers = [None] * len(batch.lines)  # that file is gone: they have no number
            self.close()
            self._first = False
            if self._open():
                batch.rotated = not was_gone
                self._drain(batch)
            return
        if st is not None and (st.st_size < self._pos or not self._same_bytes()):
            self._restart()  # truncated (and maybe written again past the old size)
            batch.truncated = True
        self._drain(batch)

    def _same_bytes(self) -> bool:
        """The bytes before the read position are still the ones read there."""
        if not self._fingerprint:
            return True
        n = len(self._fingerprint)
        return os.pread(self._fh.fileno(), n, self._pos - n) == self._fingerprint

    def _restart(self) -> None:
        self._pos, self._partial, self._fingerprint, self._skip_nul = 0, b"", b"", True
        self._new_index(os.fstat(self._fh.fileno()))

    def _skip_padding(self) -> None:
        """Move past NUL bytes at the read position (a hole left by copytruncate)."""
        fd = self._fh.fileno()
        try:  # a real hole: jump over it (rounded down to a block: NULs may remain)
            self._pos = max(self._pos, os.lseek(fd, self._pos, os.SEEK_DATA))
        except (OSError, AttributeError):  # ENXIO: only a hole (or nothing) ahead; no SEEK_DATA
            pass
        skipped = 0
        while skipped < NUL_SKIP_MAX:
            data = os.pread(fd, READ_CHUNK, self._pos)
            if not data:
                return
            kept = data.lstrip(b"\0")
            self._pos += len(data) - len(kept)
            skipped += len(data) - len(kept)
            if kept:
                self._skip_nul = False
                self._fingerprint = b""
                self.index.skip_to(self._pos)
                return

    def _consume(self, data: bytes) -> None:
        """``data``, read at the read position, is indexed and passed: the position and the
        fingerprint move past it."""
        self.index.feed(data)
        self._fingerprint = (self._fingerprint + data)[-FINGERPRINT_BYTES:]
        self._pos += len(data)

    def _skip_ahead(self, batch: LogBatch, target: int) -> bool:
        """Index the bytes from the read position towards ``target`` without making lines, at most
        SKIP_PER_CALL; True while more remain."""
        end = min(target, self._pos + SKIP_PER_CALL)
        self._fh.seek(self._pos)
        while self._pos < end:
            data = self._fh.read(min(4 * READ_CHUNK, end - self._pos))
            if not data:
                break
            self._consume(data)
            batch.skipped_bytes += len(data)
        # the line the skip ends in is not shown (unless it ended at a newline)
        self._partial, self._drop_partial = b"", not self._fingerprint.endswith(b"\n")
        return self._pos < target

    def _drain(self, batch: LogBatch) -> None:
        assert self._fh is not None
        if self._skip_nul:
            self._skip_padding()
            if self._skip_nul:
                return
        size = os.fstat(self._fh.fileno()).st_size
        if size - self._pos > CATCH_UP_BYTES and self._skip_ahead(batch, size - self.initial_tail_bytes):
            return  # more to skip: the next call goes on (one call stays bounded)
        self._fh.seek(self._pos)
        data = self._fh.read(READ_CHUNK)
        if not data:
            return
        first_no = self.index.lines  # the number of the line in progress
        self._consume(data)
        data = self._partial + data
        parts = data.split(b"\n")
        self._partial = parts.pop()
        if self._drop_partial:  # the rest of the line the skip cut into
            if not parts:
                self._partial = b""
                return
            parts.pop(0)
            first_no += 1
            self._drop_partial = False
        numbers = list(range(first_no, first_no + len(parts)))
        if len(self._partial) > MAX_LINE_BYTES:
            parts.append(self._partial)  # a piece: its line goes on with the same number
            numbers.append(first_no + len(numbers))
            self._partial = b""
        batch.lines += [decode(p) for p in parts]
        batch.numbers += numbers
