"""Scrolling view of the server log with include/exclude filters, search and follow/pause.

Lines are kept (up to ``max_lines``) with their kind from :func:`console.logparse.classify`;
the view renders only the visible lines (Textual's line API), so a long log stays cheap.

* filter: ``include`` / ``exclude`` are case-insensitive substrings; ``a|b`` means a or b.
  A line is shown when it matches include (or include is empty) and does not match exclude.
* search: matches are highlighted; :meth:`LogView.next_match` jumps between matching lines
  (and pauses following).
* follow: new lines scroll the view to the end; paused, the view stays and counts new lines.
  Up / PageUp / Home / mouse wheel up pause following; End (or the app's ``G``) resumes it.
"""

from __future__ import annotations

import bisect

from dataclasses import dataclass

from rich.style import Style
from rich.text import Text
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from console import logparse


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


@dataclass(frozen=True)
class LogEntry:
    """One log line and its kind (``logparse.VERIFY``, ``ERROR``, ...)."""

    kind: str
    text: str


class LogView(ScrollView, can_focus=True):
    """The log lines. Keys are bound on the app (see ``console.app``)."""

    COMPONENT_CLASSES = {
        "log-view--prefix",
        "log-view--verify",
        "log-view--switch",
        "log-view--gate",
        "log-view--rejected",
        "log-view--error",
        "log-view--warning",
        "log-view--decode",
        "log-view--console",
        "log-view--match",
    }

    follow: reactive[bool] = reactive(True)
    include: reactive[str] = reactive("")
    exclude: reactive[str] = reactive("")
    search: reactive[str] = reactive("")

    class StateChanged(Message):
        """Follow / filter / search / counts changed (the panel updates its title)."""

    def __init__(self, max_lines: int = 20_000, **kwargs) -> None:
        super().__init__(**kwargs)
        self.max_lines = max_lines
        self.entries: list[LogEntry] = []
        self.shown: list[int] = []
        self.new_while_paused = 0
        self._width = 0
        self._match_pos: int | None = None
        # entry index, while paused: the line that was on top before a filter change, kept while
        # the view cannot show it on top (until the operator scrolls), so clearing returns to it
        self._pin: int | None = None

    # -- data ------------------------------------------------------------------------------

    def add_lines(self, lines: list[str] | list[tuple[str, str]]) -> None:
        """Append lines (plain strings are classified here; ``(kind, text)`` pairs are kept)."""
        if not lines:
            return
        start = len(self.entries)
        for item in lines:
            if isinstance(item, tuple):
                kind, text = item
            else:
                kind, text = logparse.classify(item), item
            self.entries.append(LogEntry(kind, text.expandtabs()))
        if len(self.entries) > self.max_lines * 1.2:
            del self.entries[: len(self.entries) - self.max_lines]
            self._rebuild()
        else:
            shown = 0
            for i in range(start, len(self.entries)):
                e = self.entries[i]
                if line_visible(e.text, self.include, self.exclude):
                    self.shown.append(i)
                    self._width = max(self._width, len(e.text))
                    shown += 1
            if not self.follow:
                self.new_while_paused += shown
            self._update_size()
        if self.follow:
            self._to_end()
        self.refresh()
        self.post_message(self.StateChanged())

    def _to_end(self) -> None:
        """Scroll to the last line now and again after the next layout (sizes may be stale)."""
        self.scroll_end(animate=False, immediate=True, x_axis=False)
        self.call_after_refresh(self._end_if_following)

    def _end_if_following(self) -> None:
        # not when a Home/Up/PgUp came in between (End Home in one burst ended at the bottom)
        if self.follow:
            self.scroll_end(animate=False, immediate=True, x_axis=False)

    def on_resize(self) -> None:
        if self.follow:
            self._to_end()

    def _rebuild(self) -> None:
        # paused: keep the log line at the top of the view at the top (a filter change must not
        # jump to line 1: the row number alone names another line once the filter changes)
        top = int(self.scroll_offset.y)
        anchor = self.shown[top] if not self.follow and 0 <= top < len(self.shown) else None
        if self._pin is not None and not self.follow:
            anchor = self._pin  # the view could not show it on top last time; nobody scrolled since
        self._pin = None
        self.shown = [i for i, e in enumerate(self.entries) if line_visible(e.text, self.include, self.exclude)]
        self._width = max((len(self.entries[i].text) for i in self.shown), default=0)
        self._match_pos = None
        self._update_size()
        if self.follow:
            self._to_end()
        elif anchor is not None:
            row = bisect.bisect_left(self.shown, anchor)  # that line, or the next one still shown
            last_top = max(0, len(self.shown) - max(1, self.scrollable_content_region.height))
            if row > last_top:  # too near the end to be on top (e.g. a filter that fits one screen)
                self._pin = anchor
                row = last_top
            # now, and again after the next layout: scroll_to clamps to the old size until then
            self.scroll_to(y=row, animate=False, immediate=True)
            self.call_after_refresh(self.scroll_to, y=row, animate=False, immediate=True)
        self.refresh()

    def _update_size(self) -> None:
        self.virtual_size = Size(self._width, len(self.shown))

    def visible_texts(self) -> list[str]:
        """The texts currently shown after filtering (for tests and the headless check)."""
        return [self.entries[i].text for i in self.shown]

    # -- reactives -------------------------------------------------------------------------

    def watch_include(self) -> None:
        self._rebuild()
        self.post_message(self.StateChanged())

    def watch_exclude(self) -> None:
        self._rebuild()
        self.post_message(self.StateChanged())

    def watch_search(self) -> None:
        self._match_pos = None
        self.refresh()
        self.post_message(self.StateChanged())

    def watch_follow(self, follow: bool) -> None:
        if follow:
            self.new_while_paused = 0
            self._to_end()
        self.post_message(self.StateChanged())

    # -- search ----------------------------------------------------------------------------

    def match_rows(self) -> list[int]:
        """Rows (indices into the visible lines) that contain the search term."""
        terms = filter_terms(self.search)
        if not terms:
            return []
        return [row for row, i in enumerate(self.shown) if any(t in self.entries[i].text.lower() for t in terms)]

    def next_match(self, direction: int = 1) -> int | None:
        """Scroll to the next (``direction`` 1) or previous (-1) matching line; pauses following.

        Returns:
            The row shown, or None when nothing matches.
        """
        rows = self.match_rows()
        if not rows:
            return None
        self.follow = False
        cur = self._match_pos if self._match_pos is not None else (int(self.scroll_y) + self.size.height - 1)
        if direction > 0:
            after = [r for r in rows if r > cur] if self._match_pos is not None else [r for r in rows if r >= int(self.scroll_y)]
            target = after[0] if after else rows[0]
        else:
            before = [r for r in rows if r < cur]
            target = before[-1] if before else rows[-1]
        self._match_pos = target
        self.scroll_to(y=max(0, target - self.size.height // 2), animate=False)
        self.refresh()
        self.post_message(self.StateChanged())
        return target

    # -- rendering -------------------------------------------------------------------------

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        row = scroll_y + y
        width = self.size.width
        base = self.rich_style
        if row >= len(self.shown):
            return Strip.blank(width, base)
        entry = self.entries[self.shown[row]]
        text = Text(entry.text, no_wrap=True, style=base)
        if entry.kind != logparse.PLAIN:
            style = self.get_component_rich_style(f"log-view--{entry.kind}", partial=True)
            text.stylize(style)
        if entry.kind in (logparse.PLAIN, logparse.DECODE) and entry.text.startswith("["):
            end = entry.text.find("]")
            if end > 0:
                text.stylize(self.get_component_rich_style("log-view--prefix", partial=True), 0, end + 1)
        terms = filter_terms(self.search)
        if terms:
            match = self.get_component_rich_style("log-view--match", partial=True)
            if row == self._match_pos:
                match = match + Style(underline=True)
            low = entry.text.lower()
            for t in terms:
                pos = low.find(t)
                while pos >= 0:
                    text.stylize(match, pos, pos + len(t))
                    pos = low.find(t, pos + len(t))
        strip = Strip(text.render(self.app.console), text.cell_len)
        return strip.crop_extend(scroll_x, scroll_x + width, base).apply_offsets(scroll_x, row)

    def on_mouse_scroll_up(self) -> None:
        self._pin = None
        self.follow = False

    def on_mouse_scroll_down(self) -> None:
        self._pin = None

    # keys (ScrollableContainer's bindings): scrolling back pauses following, End resumes it.
    # The focused view sees End before the app does, so the app's "End: follow" lives here too.

    def action_scroll_end(self) -> None:
        self._pin = None
        self.follow = True

    def action_scroll_home(self) -> None:
        self._pin = None
        self.follow = False
        super().action_scroll_home()

    def action_scroll_up(self) -> None:
        self._pin = None
        self.follow = False
        super().action_scroll_up()

    def action_page_up(self) -> None:
        self._pin = None
        self.follow = False
        super().action_page_up()

    def action_scroll_down(self) -> None:
        self._pin = None
        super().action_scroll_down()

    def action_page_down(self) -> None:
        self._pin = None
        super().action_page_down()
