"""Base class of the widgets that render the console snapshot."""

from __future__ import annotations

from rich.style import Style
from textual.reactive import reactive
from textual.widget import Widget

from console.state import ConsoleSnapshot


class SnapshotWidget(Widget):
    """A widget whose ``render()`` reads ``self.snapshot`` (bound to the main screen's snapshot)."""

    snapshot: reactive[ConsoleSnapshot] = reactive(ConsoleSnapshot, layout=False)

    def style_of(self, name: str) -> Style:
        """Rich style of one of this widget's component classes (set by the theme)."""
        return self.get_component_rich_style(name, partial=True)
