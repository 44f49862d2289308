"""Base class of the widgets that render the console snapshot, and line-fitting helpers.

Nothing a widget shows may be cut off at 80x24: :func:`pack` puts short parts side by side
when they fit and under each other when they do not, and :func:`wrap` breaks a part that is
still too wide at spaces (hanging indent), so every character stays readable.
"""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual.geometry import Size
from textual.reactive import reactive
from textual.strip import Strip
from textual.widget import Widget

from console.state import ConsoleSnapshot


def render_key(rendered: object) -> object:
    """What :meth:`SnapshotWidget.render` gave, as a value that is equal when the output is the same."""
    if isinstance(rendered, Text):
        return (rendered.plain, tuple(rendered.spans), str(rendered.style), rendered.justify,
                rendered.overflow, rendered.no_wrap, rendered.end)
    return rendered


class SnapshotWidget(Widget):
    """A widget whose ``render()`` reads ``self.snapshot`` (bound to the main screen's snapshot).

    A new snapshot repaints the widget only when what it renders changed: most snapshots change
    nothing a given widget shows. A widget that names its inputs (:meth:`render_inputs`) repaints
    when they change, without being rendered first to compare; the others are rendered to compare.
    (Textual still repaints it itself on a resize or a theme change.)
    """

    #: paint the Rich text of :meth:`render` line by line (:func:`text_strips`) instead of through
    #: Textual's Content (a third of the cost, for the widgets that repaint every second); only for
    #: left-aligned text without wrapping, where both give the same cells
    DIRECT_LINES = False

    snapshot: reactive[ConsoleSnapshot] = reactive(ConsoleSnapshot, layout=False, repaint=False)
    _strips: tuple[Size, list[Strip]] | None = None  # DIRECT_LINES: (size, lines) of the last render
    _shown: object = None  # render_key() of the last repaint asked for
    _inputs: object = None  # (size, render_inputs()) when that was computed
    _styles_of: dict[str, Style] | None = None  # style_of() by component class

    def render_inputs(self, snapshot: ConsoleSnapshot) -> object:
        """The parts of ``snapshot`` that :meth:`render` reads, or None (then it is rendered to
        compare). Equal inputs at the same size: the widget is not rendered; other inputs: it is
        repainted (rendering it to compare would render it twice, as it changes every second)."""
        return None

    def _watch_snapshot(self, snapshot: ConsoleSnapshot) -> None:
        # runs before the subclass's watch_snapshot (Textual calls _watch_ then watch_)
        if not self.is_mounted or not self.size.width:
            self._shown = self._inputs = None
            self.refresh()
            return
        inputs = self.render_inputs(snapshot)
        if inputs is not None:
            inputs = (self.size, inputs)
            if inputs == self._inputs:
                return
            self._inputs = inputs
            self.refresh()
            return
        key = render_key(self.render())
        if key != self._shown:
            self._shown = key
            self.refresh()

    def style_of(self, name: str) -> Style:
        """Rich style of one of this widget's component classes (set by the theme)."""
        styles = self._styles_of
        if styles is None:
            styles = self._styles_of = {}
        style = styles.get(name)
        if style is None:
            # kept until the styles change: Textual's own cache of it is emptied by every repaint,
            # and working it out again walks the widget's ancestors
            style = styles[name] = self.get_component_rich_style(name, partial=True)
        return style

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._styles_of = None  # another theme (or CSS): other styles
        self._strips = None

    def refresh(self, *regions, repaint: bool = True, layout: bool = False, recompose: bool = False):
        if repaint:
            self._strips = None  # DIRECT_LINES: render again at the next paint
        return super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)

    def render_line(self, y: int) -> Strip:
        if not self.DIRECT_LINES:
            return super().render_line(y)
        size = self.size
        if self._strips is None or self._strips[0] != size:
            self._strips = (size, text_strips(self.render(), size.width, size.height, self.rich_style,
                                              self.app.console))
        lines = self._strips[1]
        return lines[y] if 0 <= y < len(lines) else Strip.blank(size.width, self.rich_style)


class LinesWidget(SnapshotWidget):
    """A snapshot widget whose height is the number of lines :meth:`lines` gives at its width;
    the layout is refreshed only when that number changes."""

    _height = -1
    _laid_out: tuple = ()  # (snapshot, width, lines) of the last lines() laid out

    def lines(self, width: int) -> list[Text]:  # pragma: no cover - overridden
        """The widget's lines, laid out ``width`` cells wide."""
        return []

    def lines_now(self, width: int) -> list[Text]:
        """:meth:`lines` for the current snapshot, computed once per snapshot and width (the
        height, the comparison and the repaint each need them)."""
        laid = self._laid_out
        if laid and laid[0] is self.snapshot and laid[1] == width:
            return laid[2]
        lines = self.lines(width)
        self._laid_out = (self.snapshot, width, lines)
        return lines

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._laid_out = ()  # the lines carry the theme's styles

    def get_content_height(self, container, viewport, width: int) -> int:
        return max(1, len(self.lines_now(width)))

    def watch_snapshot(self, snapshot: ConsoleSnapshot) -> None:
        height = len(self.lines_now(self.size.width)) if self.size.width else -1
        if height != self._height:
            self._height = height
            self.refresh(layout=True)

    def render(self) -> Text:
        text = Text("\n", no_wrap=True).join(self.lines_now(self.size.width))
        text.no_wrap = True
        return text


def text_strips(text: Text, width: int, height: int, base: Style, console) -> list[Strip]:
    """``text``'s first ``height`` lines as strips ``width`` cells wide over the widget's ``base``
    style: cut with an ellipsis where longer (the CSS ``text-overflow: ellipsis``), padded where
    shorter."""
    strips = []
    for line in text.split("\n", allow_blank=True)[:height]:
        if line.cell_len > width:
            line.truncate(width, overflow="ellipsis")
        strip = Strip(list(line.render(console)), line.cell_len).apply_style(base)
        if strip.cell_length < width:  # padded as Textual pads a line: the background alone
            strip = strip.extend_cell_length(width, Style(bgcolor=base.bgcolor))
        strips.append(strip)
    return strips


def wrap(text: Text, width: int, indent: int = 2) -> list[Text]:
    """``text`` broken at spaces into lines of at most ``width`` cells (continuations indented).

    A word longer than a line is split where the line ends. Styles are kept.
    """
    width = max(1, width)
    if text.cell_len <= width:
        return [text]
    plain = text.plain
    out: list[Text] = []
    start = 0
    first = True
    while start < len(plain):
        room = width if first else max(1, width - indent)
        if len(plain) - start <= room:
            end = len(plain)
        else:
            cut = plain.rfind(" ", start + 1, start + room + 1)
            end = cut if cut > start else start + room
        piece = text[start:end]
        piece.rstrip()
        if not first:
            piece = Text(" " * indent) + piece
        out.append(piece)
        start = end
        while start < len(plain) and plain[start] == " ":
            start += 1
        first = False
    return out


def pack(parts: list[Text], width: int, sep: str = "  ") -> list[Text]:
    """Lay ``parts`` out in lines of at most ``width`` cells: side by side while they fit.

    Empty parts are skipped; a part wider than ``width`` is wrapped with :func:`wrap`.
    """
    lines: list[Text] = []
    cur: Text | None = None
    for part in parts:
        if not part.plain:
            continue
        if cur is not None and cur.cell_len + len(sep) + part.cell_len <= width:
            cur = cur + Text(sep) + part
            continue
        if cur is not None:
            lines.append(cur)
        pieces = wrap(part, width)
        lines.extend(pieces[:-1])
        cur = pieces[-1]
    if cur is not None:
        lines.append(cur)
    return lines
