"""The log pane's filter and search rules, and what the pane asks the session to read from the file.

Pure (no I/O, no UI): the log view applies the rules to the lines it holds, the session's reader
thread (:mod:`console.logsearch`) to the lines of the whole file.

* filter: ``include`` / ``exclude`` are case-insensitive substrings; ``a|b`` means a or b.
  A line is shown when it matches include (or include is empty) and does not match exclude.
  The console's own poll lines are hidden unless ``show_own``.
* search: a line matches when it is shown and contains one of the search terms.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

#: LogRequest.kind: the last ``limit`` lines that pass the filter in lines [0, ranges[0][1]),
#: and how many pass there
FILTERED = "filtered"
#: LogRequest.kind: the first line that matches the search, trying ``ranges`` in order (each
#: from its start when ``direction`` is 1, from its end when -1), and ``limit`` shown lines on
#: each side of it
FIND = "find"


def filter_terms(pattern: str | None) -> list[str]:
    """The non-empty, lower-cased terms of a filter ``a|b``."""
    return [t.strip().lower() for t in (pattern or "").split("|") if t.strip()]


def line_visible(text: str, include: str | None, exclude: str | None) -> bool:
    """Filter rule: shown when it matches ``include`` (or none given) and not ``exclude``."""
    low = text.lower()
    inc, exc = filter_terms(include), filter_terms(exclude)
    if inc and not any(t in low for t in inc):
        return False
    if exc and any(t in low for t in exc):
        return False
    return True


def chunk_test(terms: list[str]) -> Callable[[bytes], bool] | None:
    """A quick test of raw file bytes: False only when no line in them can contain one of
    ``terms`` (so a reader skips them without decoding), or None when there is no such test.

    Exact for ASCII bytes: each term's longest space-free word must appear in them (lower-cased).
    Bytes that are not all ASCII always pass (``str.lower`` maps some non-ASCII letters to ASCII
    ones), and so does every chunk for a term with ``^`` (control bytes show as ``^X``), a
    non-ASCII term or one of spaces only (tabs show as spaces).
    """
    words = []
    for term in terms:
        parts = term.split()
        if not parts or "^" in term or not term.isascii():
            return None
        words.append(max(parts, key=len).encode())
    if not words:
        return None

    def test(data: bytes) -> bool:
        if not data.isascii():
            return True
        low = data.lower()
        return any(w in low for w in words)

    return test


@dataclass(frozen=True)
class LogRequest:
    """Lines the log view needs from the file (it holds only the last ``max_lines``).

    ``file_id``: the file (see :class:`console.logindex.LineIndex`) the line numbers are of;
    ``generation``: the view's filter/search generation when asked (a stale answer is dropped);
    ``ranges``: file line ranges ``[lo, hi)``; ``limit``: see :data:`FILTERED` / :data:`FIND`.
    """

    kind: str
    file_id: int
    generation: int
    include: str = ""
    exclude: str = ""
    search: str = ""
    show_own: bool = False
    direction: int = 1
    ranges: tuple[tuple[int, int], ...] = ()
    limit: int = 0

    def keeps(self, is_own: Callable[[str], bool]) -> Callable[[str], bool]:
        """The filter of this request as a test of one line's text (``is_own``: a poll line)."""
        inc, exc, show_own = self.include, self.exclude, self.show_own

        def keep(text: str) -> bool:
            return line_visible(text, inc, exc) and (show_own or not is_own(text))

        return keep

    def might_keep(self) -> Callable[[bytes], bool] | None:
        """:func:`chunk_test` for the filter (its include terms)."""
        return chunk_test(filter_terms(self.include))

    def might_hit(self) -> Callable[[bytes], bool] | None:
        """:func:`chunk_test` for the search (its terms)."""
        return chunk_test(filter_terms(self.search))

    def hits(self, is_own: Callable[[str], bool]) -> Callable[[str], bool]:
        """The search of this request: a line kept by the filter that contains a search term."""
        keep, terms = self.keeps(is_own), filter_terms(self.search)

        def hit(text: str) -> bool:
            low = text.lower()
            return any(t in low for t in terms) and keep(text)

        return hit
