"""The log panel: :class:`LogView` plus a one-line prompt for search / include / exclude.

The border title says follow/pause, which lines are held (``last 20,000 of 249,780`` when the
file is longer than what the pane keeps, ``lines 1,201-2,201 of 249,780`` around a search match
found further up) and whether the console's own poll lines are hidden; the active filters and
search are on an indicator line of their own above the lines (it wraps instead of being cut
off, so they stay visible at 80 columns, up to three rows), shown only while one is set.
"""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import Input, Static

from console.widgets.log_view import LogView, filter_terms

#: the title's note while the console's own poll lines are hidden / shown (the key: app.py's ``o``)
OWN_HIDDEN = "console polls hidden (o shows)"
OWN_SHOWN = "console polls shown (o hides)"
#: the same, where the title is short of room (80 columns)
OWN_HIDDEN_SHORT = "polls hidden (o)"
OWN_SHOWN_SHORT = "polls shown (o)"
from console.textual_compat import OrderedInput, set_border_title

PROMPTS = {
    "search": "search (n / N next / previous match, empty clears)",
    "include": "show only lines containing (a|b = a or b, empty clears)",
    "exclude": "hide lines containing (a|b = a or b, empty clears)",
}


class LogPrompt(OrderedInput):
    """The prompt; Escape closes it without applying, and so does moving the focus away (Tab, a
    click elsewhere), which leaves the focus where it went."""

    BINDINGS = [Binding("escape", "close", "Cancel", show=True)]

    def action_close(self) -> None:
        if isinstance(self.parent, LogPanel):
            self.parent.close_prompt()

    def on_blur(self) -> None:
        # not when a dialog opens over the screen (a crash notice): the prompt and its text stay
        if isinstance(self.parent, LogPanel) and self.parent.prompt_kind is not None and self.app.screen is self.screen:
            self.parent.close_prompt(refocus=False)


class LogPanel(Vertical):
    """Bordered container; its border title shows follow/pause, filters and search."""

    def __init__(self, title: str = "Log", **kwargs) -> None:
        super().__init__(**kwargs)
        self.base_title = title
        self.prompt_kind: str | None = None
        self._filter_text: str | None = None  # what the filter line shows

    def compose(self) -> ComposeResult:
        yield Static("", id="log-filters", classes="-hidden", markup=False)
        yield LogView(id="log-view")
        yield LogPrompt(id="log-prompt", classes="-hidden")

    @property
    def view(self) -> LogView:
        """The panel's :class:`LogView`."""
        return self.query_one(LogView)

    def on_mount(self) -> None:
        self.call_after_refresh(self.update_title)

    def open_prompt(self, kind: str) -> LogPrompt:
        """Show the prompt for ``kind`` (``search``, ``include`` or ``exclude``), prefilled; returns it
        (it takes the focus once Textual has handled the focus change)."""
        prompt = self.query_one(LogPrompt)
        self.prompt_kind = kind
        prompt.placeholder = PROMPTS[kind]
        prompt.value = getattr(self.view, kind)
        prompt.remove_class("-hidden")
        prompt.focus()
        return prompt

    def close_prompt(self, refocus: bool = True) -> None:
        """Hide the prompt and (``refocus``) give focus back to the log."""
        self.prompt_kind = None
        prompt = self.query_one(LogPrompt)
        prompt.add_class("-hidden")
        if refocus:
            self.view.focus()

    @on(Input.Submitted, "#log-prompt")
    def _submitted(self, event: Input.Submitted) -> None:
        kind = self.prompt_kind
        value = event.value.strip()
        self.close_prompt()
        release = getattr(self.app, "release_held_keys", None)
        if release is not None:  # the keys typed after Enter: after this, where the focus is then (the log)
            self.app.call_later(release)
        if kind is None:
            return
        if kind in ("include", "exclude") and not filter_terms(value):
            if value:  # "|||" has no terms: no filter, and the filter line must not claim one
                self.app.notify(f"{value!r} has no terms (a|b = a or b): {'show' if kind == 'include' else 'hide'} "
                                f"filter cleared", severity="warning", timeout=4)
            value = ""
        setattr(self.view, kind, value)
        if kind == "search" and value:
            self.view.next_match(1)

    @on(LogView.StateChanged)
    def update_title(self) -> None:
        """Border title ``Log · following · 120/480 lines``; the filter line shows the rest."""
        views = self.query(LogView)
        if not views:
            return
        v = views.first()
        width = self.content_region.width or self.app.size.width
        set_border_title(self, log_title(self.base_title, v, width - 2))  # the border line only
        indicator = self.query_one("#log-filters", Static)
        line = filter_line(v.include, v.exclude, v.search, len(v.match_rows()) if v.search else 0, width,
                           whole_file=bool(v.unheld_ranges(1)))
        if line != self._filter_text:
            self._filter_text = line
            indicator.update(line)
        indicator.set_class(not line, "-hidden")


def log_title(base: str, v: LogView, width: int | None = None) -> str:
    """``Log server.log · following · 120/480 lines · console polls hidden (o shows)``; when that
    is wider than ``width``, shorter words (``polls hidden (o)``) so the counts stay in view."""
    for short in (False, True):
        parts = [base]
        if v.follow:
            parts.append("following")
        else:
            parts.append(f"PAUSED +{v.new_while_paused:,}" if short else f"PAUSED (+{v.new_while_paused:,} new below)")
        parts.append(lines_held(v, short))
        if v.searching is not None:
            parts.append("searching…" if short else "searching the whole file…")
        elif v.filtering is not None:
            parts.append("filtering…" if short else "filtering the whole file…")
        if v.own_lines:
            if v.show_own:
                parts.append(OWN_SHOWN_SHORT if short else OWN_SHOWN)
            else:
                parts.append(OWN_HIDDEN_SHORT if short else OWN_HIDDEN)
        title = " · ".join(parts)
        if width is None or len(title) <= width:
            break
    return title


def own_lines_notice(v: LogView) -> str:
    """What ``o`` did, for its notice: the title's note, and whether the log holds any such line (a
    demo server writes no access log, so nothing on screen would change)."""
    state = OWN_SHOWN if v.show_own else OWN_HIDDEN
    return state if v.own_lines else f"{state}; this log has none of them yet"


def lines_held(v: LogView, short: bool = False) -> str:
    """``120/480 lines``: shown / held, and what is held when it is not the whole file:
    ``20,000/20,000 lines · last 20,000 of 249,780``, ``lines 1,201–2,201 of 249,780`` (a
    search region); a whole-file filter counts the file (``312/249,780 lines``). ``short``: the
    held part alone (``last 20,000 of 249,780``), or no `` lines``."""
    shown, region, total = len(v.shown), v.file_region, v.total_lines
    if region is None:
        above = v.tail_first_no()
        if above <= 0:
            return f"{shown:,}/{len(v.entries):,}" + ("" if short else " lines")
        held = f"last {total - above:,} of {total:,}"
        return held if short else f"{shown:,}/{len(v.entries):,} lines · {held}"
    if not region.live:
        lines = f"lines {region.first_no + 1:,}–{region.last_no + 1:,} of {total:,}"
        return lines if short else lines + " (End: back to the end)"
    if region.not_held:
        return f"{shown:,}/{total:,} lines (last {shown:,} of {shown + region.not_held:,} that pass)"
    return f"{shown:,}/{total:,} lines"


#: rows of the filter line (``#log-filters`` max-height in app.tcss): longer terms are shortened
FILTER_ROWS = 3


def filter_line(include: str, exclude: str, search: str, matches: int, width: int | None = None,
                whole_file: bool = False) -> str:
    """``only: a|b · hide: c · search: d (3 matches) · c clears``, or "" when none is set.

    ``whole_file``: the file has lines the pane does not hold; the count is of the lines held
    and n / N search the rest (``3 matches here, n / N search the whole file``). ``· c clears``
    only when it still fits ``width`` (the rest wraps rather than being cut). A line too long for
    the :data:`FILTER_ROWS` rows (a long term wraps to a row of its own, so it must fit the rows
    after the first) has its longest terms shortened with ``…`` so the match count stays in view.
    """
    if not (include or exclude or search):
        return ""

    def build(inc: str, exc: str, sea: str) -> str:
        parts = []
        if inc:
            parts.append(f"only: {inc}")
        if exc:
            parts.append(f"hide: {exc}")
        if sea:
            counted = f"{matches} match{'' if matches == 1 else 'es'}"
            parts.append(f"search: {sea} ({counted} here, n / N search the whole file)" if whole_file
                         else f"search: {sea} ({counted})")
        return " · ".join(parts)

    line = build(include, exclude, search)
    # a long term wraps to a row of its own: it must fit the rows after the first
    budget = (FILTER_ROWS - 1) * (width - 2) - 8 if width else 0
    if width is not None and budget > 0 and len(line) > budget:
        terms = [include, exclude, search]
        while len(build(*terms)) > budget:
            i = max(range(3), key=lambda k: len(terms[k]))
            if len(terms[i]) <= 8:
                break
            over = len(build(*terms)) - budget
            terms[i] = terms[i][:max(7, len(terms[i]) - over - 1)] + "…"
        line = build(*terms)
    if width is None or len(line) + len(" · c clears") <= width:
        line += " · c clears"
    return line
