"""The log panel: :class:`LogView` plus a one-line prompt for search / include / exclude.

The border title says follow/pause and the line count; the active filters and search are on
an indicator line of their own above the lines (it wraps instead of being cut off, so they
stay visible at 80 columns), shown only while one is set.
"""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import Input, Static

from console.widgets.log_view import LogView, filter_terms
from console.textual_compat import OrderedInput

PROMPTS = {
    "search": "search (n / N next / previous match, empty clears)",
    "include": "show only lines containing (a|b = a or b, empty clears)",
    "exclude": "hide lines containing (a|b = a or b, empty clears)",
}


class LogPrompt(OrderedInput):
    """The prompt; Escape closes it without applying."""

    BINDINGS = [Binding("escape", "close", "Cancel", show=True)]

    def action_close(self) -> None:
        if isinstance(self.parent, LogPanel):
            self.parent.close_prompt()


class LogPanel(Vertical):
    """Bordered container; its border title shows follow/pause, filters and search."""

    def __init__(self, title: str = "Log", **kwargs) -> None:
        super().__init__(**kwargs)
        self.base_title = title
        self.prompt_kind: str | None = None

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

    def open_prompt(self, kind: str) -> None:
        """Show the prompt for ``kind`` (``search``, ``include`` or ``exclude``), prefilled."""
        prompt = self.query_one(LogPrompt)
        self.prompt_kind = kind
        prompt.placeholder = PROMPTS[kind]
        prompt.value = getattr(self.view, kind)
        prompt.remove_class("-hidden")
        prompt.focus()

    def close_prompt(self) -> None:
        """Hide the prompt and give focus back to the log."""
        self.prompt_kind = None
        prompt = self.query_one(LogPrompt)
        prompt.add_class("-hidden")
        self.view.focus()

    @on(Input.Submitted, "#log-prompt")
    def _submitted(self, event: Input.Submitted) -> None:
        kind = self.prompt_kind
        value = event.value.strip()
        self.close_prompt()
        if kind is None:
            return
        if kind in ("include", "exclude") and not filter_terms(value):
            value = ""  # "|||" has no terms: no filter, and the filter line must not claim one
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
        parts = [self.base_title]
        parts.append("following" if v.follow else f"PAUSED (+{v.new_while_paused} new below)")
        parts.append(f"{len(v.shown)}/{len(v.entries)} lines")
        self.border_title = " · ".join(parts)
        indicator = self.query_one("#log-filters", Static)
        width = self.content_region.width or self.app.size.width
        line = filter_line(v.include, v.exclude, v.search, len(v.match_rows()) if v.search else 0, width)
        indicator.update(line)
        indicator.set_class(not line, "-hidden")


def filter_line(include: str, exclude: str, search: str, matches: int, width: int | None = None) -> str:
    """``only: a|b · hide: c · search: d (3 matches) · c clears``, or "" when none is set.

    ``· c clears`` only when it still fits ``width`` (the rest wraps rather than being cut).
    """
    parts = []
    if include:
        parts.append(f"only: {include}")
    if exclude:
        parts.append(f"hide: {exclude}")
    if search:
        parts.append(f"search: {search} ({matches} match{'' if matches == 1 else 'es'})")
    if not parts:
        return ""
    line = " · ".join(parts)
    if width is None or len(line) + len(" · c clears") <= width:
        line += " · c clears"
    return line
