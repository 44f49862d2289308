"""Scrolling view of the server log with include/exclude filters, search and follow/pause.

The view holds the last ``max_lines`` lines (the *tail*) with their kind from
:func:`console.logparse.classify` and their line number in the file; it renders only the visible
lines (Textual's line API), so a long log stays cheap. Lines above the tail stay in the file: the
view asks for them with a :class:`ReadFile` message (a :class:`console.logfilter.LogRequest`
that the session reads in a thread) and shows the answer (:meth:`LogView.found`) as a *region*
in place of the tail:

* filter (rules in :mod:`console.logfilter`): on a file longer than the tail, the last
  ``max_lines`` lines of the whole file that pass it (a live region: new lines that pass are
  added). The console's own poll lines are hidden unless ``show_own``.
* search: matches are highlighted; :meth:`LogView.next_match` jumps between matching lines
  (and pauses following). Past the last (first) match held it searches the rest of the file,
  in file order, and shows the lines around the match found (a region that does not follow).
* follow: new lines scroll the view to the end; paused, the view stays and counts new lines.
  Up / PageUp / Home / mouse wheel up pause following; End (or the app's ``G``) resumes it and
  leaves a search region.
"""

from __future__ import annotations

import bisect
from dataclasses import replace
from typing import Any, Sequence

from rich.style import Style
from rich.text import Text
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.scrollbar import ScrollBar
from textual.strip import Strip

from console import logparse
from console.logfilter import FILTERED, FIND, LogRequest, filter_terms, line_visible
from console.logwindow import LogEntry, Region, first_number, position, unheld_ranges
from console.textual_compat import plain_box, row_vertical_scrollbar, set_virtual_size, widget_lines

__all__ = ["LogEntry", "LogView", "Region", "filter_terms", "line_visible"]

#: lines shown on each side of a match found outside the lines held
FIND_CONTEXT = 500
#: rendered lines kept (:meth:`LogView.render_line`); beyond it the cache starts again
LINE_CACHE = 2_000


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
    #: show the server's access-log lines of the console's own polls
    show_own: reactive[bool] = reactive(False)

    class StateChanged(Message):
        """Follow / filter / search / counts changed (the panel updates its title)."""

    class ReadFile(Message):
        """The view needs lines of the file that it does not hold (the app hands it to the session)."""

        def __init__(self, request: LogRequest) -> None:
            super().__init__()
            self.request = request

    def __init__(self, max_lines: int = 20_000, **kwargs) -> None:
        super().__init__(**kwargs)
        self.max_lines = max_lines
        self.generation = 0  # bumped by every filter/search change: older answers are dropped
        # rendered lines (uncropped) by (entry, search terms, is the current match, base style): a
        # line that scrolls up one row in follow mode is not styled and rendered again
        self._line_cache: dict[tuple, Strip] = {}
        self._reset_held()

    def _reset_held(self) -> None:
        """No line held, nothing of a file known, no file search or filter under way."""
        self.entries: list[LogEntry] = []  # the tail
        self.file_region: Region | None = None
        self.shown: list[int] = []  # indices into self.lines
        self.new_while_paused = 0
        self.file_id: int | None = None  # the file the line numbers are of (None: no file)
        self.total_lines = 0  # complete lines of that file
        self.own_lines = 0  # own poll lines seen (the title mentions them only then)
        self.searching: LogRequest | None = None  # a file search under way
        self.filtering: LogRequest | None = None  # a whole-file filter under way
        self._width = 0
        self._match_pos: int | None = None
        # while paused: the line that was on top before a filter change, kept while the view
        # cannot show it on top (until the operator scrolls), so clearing returns to it
        self._pin: LogEntry | None = None

    # -- what is shown -----------------------------------------------------------------------

    @property
    def lines(self) -> list[LogEntry]:
        """The lines the rows are taken from: the region if one is shown, else the tail."""
        return self.file_region.entries if self.file_region is not None else self.entries

    def tail_first_no(self) -> int:
        """File lines above the tail (the number of its first file line)."""
        first = first_number(self.entries)
        return first if first is not None else self.total_lines

    def keeps(self, entry: LogEntry) -> bool:
        """The filter: own poll lines only with ``show_own``, then include/exclude."""
        if entry.kind == logparse.OWN and not self.show_own:
            return False
        return line_visible(entry.text, self.include, self.exclude)

    def visible_texts(self) -> list[str]:
        """The texts currently shown after filtering (for tests and the headless check)."""
        return [self.lines[i].text for i in self.shown]

    # -- data ------------------------------------------------------------------------------

    def add_lines(self, lines: list[str] | list[tuple[str, str]], numbers: Sequence[int | None] = (),
                  file_id: int | None = None, total: int | None = None) -> None:
        """Append lines (plain strings are classified here; ``(kind, text)`` pairs are kept).

        ``numbers``: their line numbers in the file ``file_id`` (a new id: the file was replaced
        or truncated, the lines held lose their numbers); ``total``: that file's line count.
        """
        if file_id is not None and file_id != self.file_id:
            self._new_file(file_id)
        if total is not None:
            self.total_lines = total
        if not lines:
            return
        anchor = self._top_entry()  # before the top is cut
        shown_list, shown_len = self.shown, len(self.shown)
        new = []
        for n, item in enumerate(lines):
            kind, text = item if isinstance(item, tuple) else (logparse.classify(item), item)
            new.append(LogEntry(kind, text.expandtabs(), numbers[n] if n < len(numbers) else None))
        self.own_lines += sum(e.kind == logparse.OWN for e in new)
        self.entries += new
        cut = len(self.entries) > self.max_lines * 1.2
        if cut:
            del self.entries[: len(self.entries) - self.max_lines]
        region = self.file_region
        if region is not None and region.live:
            added = [e for e in new if self.keeps(e)]
            region.entries += added
            region.last_no = first_number(reversed(added), region.last_no)
            cut = len(region.entries) > self.max_lines * 1.2
            if cut:
                dropped = region.entries[: len(region.entries) - self.max_lines]
                del region.entries[: len(dropped)]
                region.not_held += sum(e.no is not None for e in dropped)
                region.first_no = first_number(region.entries, region.first_no)
            self._took(len(added), cut, len(region.entries) - len(added), anchor)
        elif region is not None:  # a search region: the new lines wait in the tail
            if not self.follow:
                self.new_while_paused += sum(self.keeps(e) for e in new)
        else:
            self._took(sum(self.keeps(e) for e in new), cut, len(self.entries) - len(new), anchor)
        if self.shown is not shown_list or len(self.shown) != shown_len:
            self.refresh()  # else every new line is filtered out (e.g. the console's own polls)
        self.post_message(self.StateChanged())

    def _took(self, shown: int, cut: bool, start: int, anchor: LogEntry | None) -> None:
        """The lines shown took ``shown`` new ones from ``start`` on (``cut``: their top was cut;
        ``anchor``: the line on top before)."""
        if cut:
            self._rebuild(anchor)
        else:
            for i in range(max(0, start), len(self.lines)):
                e = self.lines[i]
                if self.keeps(e):
                    self.shown.append(i)
                    self._width = max(self._width, len(e.text))
            self._update_size()
        if not self.follow:
            self.new_while_paused += shown
        else:
            self._to_end()

    def clear(self) -> None:
        """Drop every line held (another server's log takes the pane); filters and search stay."""
        self._reset_held()
        self.generation += 1  # answers about the old lines are dropped
        self._update_size()
        self.refresh()
        self.post_message(self.StateChanged())

    def _new_file(self, file_id: int) -> None:
        """Another file (rotated, truncated): the numbers held are of the old one."""
        if self.file_id is not None:
            anchor = self._top_entry()
            self.entries = [replace(e, no=None) if e.no is not None else e for e in self.entries]
            self.file_region = None
            self.searching = self.filtering = None
            self.generation += 1
            self._rebuild(anchor)
        self.file_id = file_id

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

    def _top_entry(self) -> LogEntry | None:
        """While paused: the line on top of the view (call before the lines change)."""
        top = int(self.scroll_offset.y)
        if self.follow or not 0 <= top < len(self.shown):
            return None
        return self.lines[self.shown[top]]

    def _rebuild(self, anchor: LogEntry | None) -> None:
        """Recompute the shown rows; paused, ``anchor`` (the line that was on top) stays on top."""
        # a filter change must not jump to line 1: the row number alone names another line once
        # the filter changes, so the line itself (or its number, in another list) is looked up
        if self._pin is not None and not self.follow:
            anchor = self._pin  # the view could not show it on top last time; nobody scrolled since
        self._pin = None
        lines = self.lines
        self.shown = [i for i, e in enumerate(lines) if self.keeps(e)]
        self._width = max((len(lines[i].text) for i in self.shown), default=0)
        self._match_pos = None
        self._update_size()
        at = position(lines, anchor) if anchor is not None else None
        if self.follow:
            self._to_end()
        elif at is not None:
            row = bisect.bisect_left(self.shown, at)  # that line, or the next one still shown
            last_top = max(0, len(self.shown) - max(1, self.scrollable_content_region.height))
            if row > last_top:  # too near the end to be on top (e.g. a filter that fits one screen)
                self._pin = anchor
                row = last_top
            self._scroll_row(row)
        self.refresh()

    def _scroll_row(self, y: int) -> None:
        # now, and again after the next layout: scroll_to clamps to the old size until then
        self.scroll_to(y=y, animate=False, immediate=True)
        self.call_after_refresh(self.scroll_to, y=y, animate=False, immediate=True)

    def _update_size(self) -> None:
        set_virtual_size(self, Size(self._width, len(self.shown)))  # no layout per new line

    # -- reactives -------------------------------------------------------------------------

    def watch_include(self) -> None:
        self._filter_changed()

    def watch_exclude(self) -> None:
        self._filter_changed()

    def watch_show_own(self) -> None:
        self._filter_changed()

    def _filter_changed(self) -> None:
        self.generation += 1
        self.searching = self.filtering = None
        anchor, self.file_region = self._top_entry(), None
        self._rebuild(anchor)
        self._filter_file()
        self.post_message(self.StateChanged())

    def _filter_file(self) -> None:
        """Ask for the whole file's lines that pass the filter, when the tail is not all of it."""
        above = self.tail_first_no()
        if not (filter_terms(self.include) or filter_terms(self.exclude)) or self.file_id is None or above <= 0:
            return
        self.filtering = self._request(FILTERED, ranges=((0, above),), limit=self.max_lines)
        self._ask(self.filtering)

    def _ask(self, request: LogRequest) -> None:
        # posted from the view's own task: a message made while the panel handles the prompt's
        # Submitted would name the panel as its sender, and Textual stops it there (not at the app)
        self.call_later(lambda: self.post_message(self.ReadFile(request)))

    def _request(self, kind: str, **kw: Any) -> LogRequest:
        assert self.file_id is not None
        return LogRequest(kind, self.file_id, self.generation, include=self.include, exclude=self.exclude,
                          search=self.search, show_own=self.show_own, **kw)

    def watch_search(self) -> None:
        self.generation += 1
        self.searching = None
        self._match_pos = None
        self.refresh()
        self.post_message(self.StateChanged())

    def watch_follow(self, follow: bool) -> None:
        if follow:
            self.new_while_paused = 0
            self.searching = None  # a search still under way is not wanted any more
            if self.file_region is not None and not self.file_region.live:  # back from a search region
                self.file_region = None
                self._rebuild(None)
                self._filter_file()
            self._to_end()
        self.post_message(self.StateChanged())

    # -- answers from the file ------------------------------------------------------------

    def found(self, answer: Any) -> bool:
        """Show a :class:`console.events.LogFound`. False when a search found nothing at all
        (the app says so); answers to an older request are dropped (True)."""
        req = answer.request
        if req is not self.searching and req is not self.filtering:
            return True  # asked before a filter/search change, or before End gave up on it
        if req.generation != self.generation or req.file_id != self.file_id or answer.stale:
            self.searching = self.filtering = None
            self.post_message(self.StateChanged())
            return True
        if req.kind == FILTERED:
            self._show_filtered(req, answer)
            return True
        self.searching = None
        if answer.line is None:  # nothing in the rest of the file: wrap around the lines held
            rows = self.match_rows()
            if not rows:
                self.post_message(self.StateChanged())
                return False
            self._jump(rows[0] if req.direction > 0 else rows[-1])
            return True
        entries = [LogEntry(kind, text, no) for no, kind, text in answer.lines]
        self.follow = False
        self.file_region = Region(entries, live=False, first_no=entries[0].no, last_no=entries[-1].no)
        self._rebuild(None)
        at = next(i for i, e in enumerate(entries) if e.no == answer.line)
        self._jump(bisect.bisect_left(self.shown, at))
        return True

    def _show_filtered(self, req: LogRequest, answer: Any) -> None:
        self.filtering = None
        if req.ranges[0][1] != self.tail_first_no():  # the tail moved on meanwhile: ask again
            self._filter_file()
            return
        held = [LogEntry(kind, text, no) for no, kind, text in answer.lines]
        tail = [e for e in self.entries if self.keeps(e)]
        first = held[0].no if held else first_number(tail, self.tail_first_no())
        anchor = self._top_entry()
        self.file_region = Region(held + tail, live=True, first_no=first, last_no=first_number(reversed(tail), first),
                             not_held=answer.count - len(held))
        self._rebuild(anchor)
        self.post_message(self.StateChanged())

    # -- search ----------------------------------------------------------------------------

    def match_rows(self) -> list[int]:
        """Rows (indices into the visible lines) that contain the search term."""
        terms = filter_terms(self.search)
        if not terms:
            return []
        lines = self.lines
        return [row for row, i in enumerate(self.shown) if any(t in lines[i].text.lower() for t in terms)]

    def unheld_ranges(self, direction: int) -> tuple[tuple[int, int], ...]:
        """File line ranges not held, in the order a search going ``direction`` meets them after
        the last (first) line held."""
        if self.file_id is None:
            return ()
        return unheld_ranges(self.file_region, self.tail_first_no(), self.total_lines, direction)

    def next_match(self, direction: int = 1) -> int | None:
        """Scroll to the next (``direction`` 1) or previous (-1) matching line; pauses following.

        Past the last (first) match held, the rest of the file is searched (``searching`` is set
        until :meth:`found` gets the answer).

        Returns:
            The row shown, or None when nothing matches here (or the file is being searched).
        """
        if not filter_terms(self.search):
            return None
        rows = self.match_rows()
        cur = self._match_pos if self._match_pos is not None else (int(self.scroll_y) + self.size.height - 1)
        if direction > 0:
            after = [r for r in rows if r > cur] if self._match_pos is not None else [r for r in rows if r >= int(self.scroll_y)]
            target = after[0] if after else None
        else:
            before = [r for r in rows if r < cur]
            target = before[-1] if before else None
        if target is None:
            ranges = self.unheld_ranges(direction)
            if ranges:
                self.follow = False
                self.searching = self._request(FIND, direction=direction, ranges=ranges, limit=FIND_CONTEXT)
                self._ask(self.searching)
                self.post_message(self.StateChanged())
                return None
            if not rows:
                return None
            target = rows[0] if direction > 0 else rows[-1]
        self._jump(target)
        return target

    def _jump(self, row: int) -> None:
        self.follow = False
        self._match_pos = row
        self._scroll_row(max(0, row - self.size.height // 2))
        self.refresh()
        self.post_message(self.StateChanged())

    # -- rendering -------------------------------------------------------------------------

    @property
    def vertical_scrollbar(self) -> ScrollBar:
        """The vertical scrollbar, painted from rows painted before (it moves once a second while
        the view follows the log: :class:`console.textual_compat.RowScrollBar`)."""
        return row_vertical_scrollbar(self)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._line_cache.clear()  # another theme: other styles

    _base: Style | None = None  # rich_style while render_lines runs

    def render_lines(self, crop):
        # the base style once per repaint, not once per line (it walks every ancestor's styles)
        self._base = self.rich_style
        try:
            if plain_box(self):  # a row that only scrolled keeps its strip (textual_compat)
                return widget_lines(self, crop, self.render_line)
            return super().render_lines(crop)
        finally:
            self._base = None

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        row = scroll_y + y
        width = self.size.width
        base = self._base if self._base is not None else self.rich_style
        if row >= len(self.shown):
            return Strip.blank(width, base)
        entry = self.lines[self.shown[row]]
        terms = tuple(filter_terms(self.search))
        key = (entry, terms, row == self._match_pos, base)
        strip = self._line_cache.get(key)
        if strip is None:
            if len(self._line_cache) >= LINE_CACHE:
                self._line_cache.clear()
            strip = self._line_cache[key] = self._render_entry(entry, terms, row == self._match_pos, base)
        return strip.crop_extend(scroll_x, scroll_x + width, base).apply_offsets(scroll_x, row)

    def _render_entry(self, entry: LogEntry, terms: tuple[str, ...], current: bool, base: Style) -> Strip:
        """One line, styled by its kind and the search (``current``: the match jumped to), uncropped."""
        text = Text(entry.text, no_wrap=True, style=base)
        if entry.kind not in (logparse.PLAIN, logparse.OWN):
            style = self.get_component_rich_style(f"log-view--{entry.kind}", partial=True)
            text.stylize(style)
        if entry.kind in (logparse.PLAIN, logparse.OWN, logparse.DECODE) and entry.text.startswith("["):
            end = entry.text.find("]")
            if end > 0:
                text.stylize(self.get_component_rich_style("log-view--prefix", partial=True), 0, end + 1)
        if terms:
            match = self.get_component_rich_style("log-view--match", partial=True)
            if current:
                match = match + Style(underline=True)
            low = entry.text.lower()
            for t in terms:
                pos = low.find(t)
                while pos >= 0:
                    text.stylize(match, pos, pos + len(t))
                    pos = low.find(t, pos + len(t))
        return Strip(text.render(self.app.console), text.cell_len)

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
