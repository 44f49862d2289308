"""Base class of the widgets that render the console snapshot, and line-fitting helpers.

Nothing a widget shows may be cut off at 80x24: :func:`pack` puts short parts side by side
when they fit and under each other when they do not, and :func:`wrap` breaks a part that is
still too wide at spaces (hanging indent), so every character stays readable.
"""

from __future__ import annotations

from typing import NamedTuple

from rich.segment import Segment
from rich.style import Style
from rich.text import Span, Text
from textual.geometry import Region, Size
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


class Painted(NamedTuple):
    """A :data:`SnapshotWidget.DIRECT_LINES` widget's lines as painted: the size and base style
    they are for, each line's strip (in order) and the strips by :func:`line_key`."""

    size: Size
    base: Style
    strips: list[Strip]
    by_key: dict[tuple, Strip]
    blank: Strip  # below the last line


class SnapshotWidget(Widget):
    """A widget whose ``render()`` reads ``self.snapshot`` (bound to the main screen's snapshot).

    A new snapshot repaints the widget only when what it renders changed: most snapshots change
    nothing a given widget shows. A widget that names its inputs (:meth:`render_inputs`) repaints
    when they change, without being rendered first to compare; the others are rendered to compare.
    (Textual still repaints it itself on a resize or a theme change.)
    """

    #: paint the Rich text of :meth:`text_lines` line by line (:func:`line_strip`) instead of
    #: through Textual's Content (a third of the cost, for the widgets that repaint every second),
    #: and repaint only the lines that changed (a line unchanged keeps its strip: the screen update
    #: neither renders nor writes it again); only for left-aligned text without wrapping, where
    #: both give the same cells
    DIRECT_LINES = False
    #: DIRECT_LINES: lines centred (the CSS ``text-align: center``), else left-aligned
    CENTER = False

    snapshot: reactive[ConsoleSnapshot] = reactive(ConsoleSnapshot, layout=False, repaint=False)
    #: bumped whenever one is mounted or unmounted: the main screen looks its list of them up again
    generation = 0
    _painted: Painted | None = None  # DIRECT_LINES: the lines of the last paint
    _shown: object = None  # render_key() of the last repaint asked for
    _inputs: object = None  # (size, render_inputs()) when that was computed
    _styles_of: dict[str, Style] | None = None  # style_of() by component class

    def on_mount(self) -> None:
        SnapshotWidget.generation += 1

    def on_unmount(self) -> None:
        SnapshotWidget.generation += 1

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
            if self.DIRECT_LINES:
                self._repaint_lines()
            else:
                self.refresh()
            return
        if self.DIRECT_LINES:  # rendered once, compared line by line
            self._repaint_lines()
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
        self._painted = None

    def refresh(self, *regions, repaint: bool = True, layout: bool = False, recompose: bool = False):
        if repaint and not regions:
            self._painted = None  # DIRECT_LINES: all of it again at the next paint (resize, theme...)
        return super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)

    def text_lines(self) -> list[Text]:
        """DIRECT_LINES: the widget's lines at its current size (:meth:`render` cut at its newlines)."""
        return self.render().split("\n", allow_blank=True)

    def _paint(self) -> Painted:
        """Paint :meth:`text_lines` at the current size; a line unchanged since the last paint
        keeps its strip."""
        size = self.size
        base = self.rich_style
        old = self._painted
        reuse = old.by_key if old is not None and old.size.width == size.width and old.base == base else {}
        pad = Style(bgcolor=base.bgcolor)
        console = self.app.console
        strips: list[Strip] = []
        by_key: dict[tuple, Strip] = {}
        for line in self.text_lines()[: size.height]:
            key = line_key(line)
            strip = reuse.get(key)
            if strip is None:
                strip = line_strip(line, size.width, base, console, pad, self.CENTER)
            strips.append(strip)
            by_key[key] = strip
        self._painted = Painted(size, base, strips, by_key, Strip.blank(size.width, base))
        return self._painted

    def _repaint_lines(self) -> None:
        """DIRECT_LINES: paint now and repaint only the rows whose strip changed (all of them when
        the size or the base style changed)."""
        old = self._painted
        new = self._paint()
        if old is None or old.size != new.size or old.base != new.base:
            Widget.refresh(self)  # (not self.refresh: that would drop the paint just made)
            return
        width = new.size.width
        rows = [y for y in range(max(len(old.strips), len(new.strips)))
                if y >= len(old.strips) or y >= len(new.strips) or old.strips[y] is not new.strips[y]]
        if rows:
            Widget.refresh(self, *_row_regions(rows, width))

    def render_line(self, y: int) -> Strip:
        if not self.DIRECT_LINES:
            return super().render_line(y)
        painted = self._painted
        if painted is None or painted.size != self.size:
            painted = self._paint()
        return painted.strips[y] if 0 <= y < len(painted.strips) else painted.blank


def _row_regions(rows: list[int], width: int) -> list[Region]:
    """The sorted ``rows`` as regions ``width`` cells wide, consecutive rows in one region."""
    regions: list[Region] = []
    start = prev = rows[0]
    for y in rows[1:] + [-1]:
        if y != prev + 1:
            regions.append(Region(0, start, width, prev - start + 1))
            start = y
        prev = y
    return regions


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

    def text_lines(self) -> list[Text]:
        return self.lines_now(self.size.width)


def line_key(line: Text) -> tuple:
    """A line's text and styles: equal for lines that paint the same."""
    return (line.plain, tuple(line.spans), line.style)


def line_strip(line: Text, width: int, base: Style, console, pad: Style | None = None, center: bool = False) -> Strip:
    """One line as a strip ``width`` cells wide over the widget's ``base`` style: cut with an
    ellipsis where longer (the CSS ``text-overflow: ellipsis``), padded where shorter (with
    ``pad``, by default the background alone, as Textual pads a line; ``center``: on both sides,
    the odd cell on the right, as ``text-align: center``). ``line`` is not changed."""
    if line.cell_len > width:
        line = line.copy()
        line.truncate(width, overflow="ellipsis")
    cells = line.cell_len
    segments = line_segments(line, base, console)
    if cells < width:
        pad = pad if pad is not None else Style(bgcolor=base.bgcolor)
        left = (width - cells) // 2 if center else 0
        if left:
            segments.insert(0, Segment(" " * left, pad))
        segments.append(Segment(" " * (width - cells - left), pad))
    return Strip(segments, max(cells, width))


def line_segments(line: Text, base: Style, console) -> list[Segment]:
    """``line.render(console)`` over ``base`` (as ``Strip.apply_style`` puts it), with the line's
    own style applied as :meth:`Text.join` would (``render`` drops it from a line without spans).

    Lines whose spans do not overlap (what ``Text.append`` makes) are cut here directly, into
    the same segments ``render`` gives: its general span stacking was most of a repaint's cost.
    """
    plain, spans = line.plain, line.spans
    own = console.get_style(line.style, default=Style.null()) if line.style else None
    if not base:  # (apply_style leaves the styles alone then: not worth a fast path)
        if own is not None:
            line = Text(plain, spans=[Span(0, len(plain), own), *spans])
        return list(line.render(console))
    if not spans:
        if own is not None and not plain:
            return []  # (a style span over nothing: no segment)
        return [Segment(plain, base + own if own is not None else base)]
    pos = 0
    for span in spans:
        if span.start < pos or span.end < span.start:
            return list(Segment.apply_style(line.render(console), base))  # overlapping: Rich's own way
        pos = span.end
    if pos > len(plain):
        return list(Segment.apply_style(line.render(console), base))
    gap = base + own if own is not None else base
    styles: dict[object, Style] = {}
    out: list[Segment] = []
    pos = 0
    for start, end, style in spans:
        if end == start:
            continue
        if start > pos:
            out.append(Segment(plain[pos:start], gap))
        final = styles.get(style)
        if final is None:
            rich = console.get_style(style, default=Style.null())
            final = styles[style] = base + (own + rich if own is not None else rich)
        out.append(Segment(plain[start:end], final))
        pos = end
    if pos < len(plain):
        out.append(Segment(plain[pos:], gap))
    return out


def text_strips(text: Text, width: int, height: int, base: Style, console) -> list[Strip]:
    """``text``'s first ``height`` lines as strips ``width`` cells wide (:func:`line_strip`)."""
    pad = Style(bgcolor=base.bgcolor)
    return [line_strip(line, width, base, console, pad) for line in text.split("\n", allow_blank=True)[:height]]


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
