"""Every use of Textual internals in one place (tested against the pinned Textual, 8.2).

Five workarounds, each with its reason:

* **Keys in typing order** (:class:`KeyOrderMixin`).

  Over a laggy ssh link (or a paste, or ``tmux send-keys``) several keys arrive in one read. Textual
  8.2 forwards each key to the focused widget as it arrives, but resolves key *bindings* only when
  the key has bubbled back up to the app -- after the keys behind it were already forwarded, and in
  whatever screen is on top by then. In the console that made ``/ - -`` (meant: search for ``--``)
  step the live threshold twice, and ``Enter t 5`` submit the dialog that ``t`` had opened in
  the meantime. The rules here:

  * While the focus is not on a text field, a key's binding (focused widget, its ancestors, the
    screen, the app unless a modal screen is up; Textual's own search order) runs when the key
    arrives, before the next key is looked at. A key with no binding is forwarded as before, and if
    it bubbles back up unconsumed it is dropped: its bindings were already resolved, and resolving
    them again later would hand it to whatever screen is on top by then.
  * In a text field (``Input``) the keys it takes -- typed text and its own editing keys -- are
    forwarded as before: they must reach the field in order, and the console's fields
    (:class:`OrderedInput`) run their editing keys in that order. Any other key
    (``Tab`` to the next field, ``Escape``) is resolved on arrival as above, so that the keys
    typed after a ``Tab`` land in the next field.
  * An action that moves the focus into a text field (the search prompt, the threshold dialog)
    holds the keys that follow until a text field has the focus, then replays them; Enter in a
    console field holds them until the submission is handled. A hold ends by itself only when
    what it waits for can no longer come (checked every ``HOLD_MAX_S``: the screen was closed, the
    focus went elsewhere) or after ``HOLD_CAP_S``; on a loaded machine the field may take the focus,
    or the submission be handled, seconds later, and a key replayed before that would be lost.

  Priority bindings (``ctrl+c``, ``ctrl+p``) keep Textual's handling: they run on arrival anyway.

* **Editing keys in order in a text field** (:class:`OrderedInput`).

  Textual 8.2 inserts a printable key in ``Input._on_key`` as soon as the key reaches the input, but
  an editing key (backspace, delete, home, end, enter, ...) is not handled there: it bubbles up to the
  app, whose binding check then runs the input's action. When several keys arrive in one read -- a
  fast typist over a laggy ssh link, a paste, ``tmux send-keys`` -- the characters behind a backspace
  overtake it: with ``32`` in the field, ``End BSpace BSpace 5`` left ``3`` (or nothing), not ``5``.
  For a threshold field that is a wrong number one Enter away, so the console's inputs run their own
  bindings in their key handler, in arrival order.

* **Few, collapsing toasts** (:class:`NoticeMixin`): an identical toast, or one with the same tag,
  replaces the one shown instead of stacking (pressing ``-`` 15 times against a limit shows one),
  at most MAX_TOASTS at once, and toasts of one kind can be taken down together. Textual's App
  stacks every ``notify``; this replaces its ``Notify`` handler and uses ``App._notifications``,
  ``_unnotify`` and ``_refresh_notifications``.

* **A border title repaints only the border** (:func:`set_border_title`): setting
  ``Widget.border_title`` repaints the whole widget, children and all, even to the same text. The
  log panel's title counts the lines held, which changes with every poll of the server (its access
  lines are held, hidden): that repainted the whole log pane once or twice a second.

* **A scrollbar painted from rows painted before** (:class:`RowScrollBar`,
  :func:`row_vertical_scrollbar`): a ``ScrollBar`` renders itself whole through a Rich renderable
  at every move of its thumb, i.e. once a second in the log pane while it follows the log; that
  cost about as much as the log view's own repaint, though the bar is a few kinds of row (track,
  thumb, the thumb's end glyphs) that were all painted before.

* **Lines painted without the styles cache** (:func:`plain_box`, :func:`widget_lines`): for a
  widget without border, outline, padding, tint, hatch or opacity, Textual's styles cache
  passes each content line through unchanged but makes a new strip of it on every repaint, so
  a line that only moved (the log pane scrolling one row a second) was filtered, cut into the
  screen's chops and turned into terminal text again. Its own lines, kept by the widget, go
  through Textual's per-strip caches instead.

* **An input thread that sleeps until a key comes** (:class:`CalmInputDriver`): Textual's
  ``LinuxDriver`` reads the terminal in a thread that wakes every 0.1 s, to see whether the app
  is quitting and to time out a lone Escape; ten wake-ups a second were about 0.1 points of the
  console's 2% CPU budget. This one waits for input, for the parser's own deadline (a lone
  Escape still arrives after Textual's 0.1 s) or for a byte on a pipe that
  ``disable_input`` writes (then it polls as Textual's does until the thread ends).

* **A growing log without a layout** (:func:`set_virtual_size`): ``virtual_size`` is a layout
  reactive, so each new line the log pane shows (its virtual height grows by one) laid out the
  whole screen again. While the scrollbars shown stay the same, only the view and its scrollbars
  need an update.

Internals used: ``LinuxDriver.run_input_thread`` (copied, with another wait),
``Parser._timeout_time``, what ``textual._styles_cache.StylesCache.render`` does with a plain box's lines,
``Widget._vertical_scrollbar`` and ``App._start_widget`` (how
``Widget.vertical_scrollbar`` makes its scrollbar), ``ScrollBarRender.render_bar`` and how its
``__rich_console__`` calls it, ``Widget._scroll_update`` (scrollbar sizes, scroll clamping), ``Widget._border_title`` (what ``border_title`` stores), ``Screen._modal_binding_chain``, ``Widget._bindings``, ``Input.check_consume_key``,
``Input._restart_blink``, ``App._notifications`` / ``_unnotify`` / ``_refresh_notifications``,
``textual.notifications.Notify``. ``tests/test_textual_compat.py`` pins each behaviour.
"""

from __future__ import annotations

import os
import selectors
from codecs import getincrementaldecoder
from typing import Any

from textual import events
from textual._loop import loop_last
from textual._time import get_time
from textual._xterm_parser import XTermParser
from textual.color import Color
from textual.geometry import Region, Size
from textual._parser import ParseError
from textual.notifications import Notification, Notify
from textual.screen import Screen
from textual.scrollbar import ScrollBar, ScrollBarRender
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Input

#: how often a key hold checks whether what it waits for can still come (a hold waiting for
#: nothing in particular ends after this)
HOLD_MAX_S = 0.5
#: the longest keys are held, whatever they wait for (then they are replayed)
HOLD_CAP_S = 10.0
#: set on a key whose bindings were resolved on arrival (none applied): dropped if it bubbles back
_RESOLVED = "_specconsole_bindings_resolved"


class KeyOrderMixin:
    """For a ``textual.app.App`` subclass (list it first): bindings resolved in arrival order, and
    the key hold. Uses Textual 8.2's ``Screen._modal_binding_chain`` (the chain Textual's own
    ``App._check_bindings`` walks); tests/test_console_pilot.py pins the behaviour.
    """

    _held_keys: list[events.Key] | None = None
    _hold_generation = 0
    _hold_for: Widget | None = None  # the screen or field the hold waits for
    _hold_submitted = False  # the hold waits for _hold_for's submission to be handled
    _hold_since = 0.0
    _releasing = False  # the held keys' replay is queued

    def hold_keys(self, waiting_for: Widget | None = None, *, submitted: bool = False) -> None:
        """Hold the keys that arrive from now on until a text field has the focus (the one in
        ``waiting_for``, a screen or a field, when given), or, with ``submitted``, until the
        submission of the field ``waiting_for`` is handled (:meth:`release_held_keys`). The hold
        also ends when what it waits for can no longer come, or after ``HOLD_CAP_S``."""
        if self._held_keys is None:
            self._held_keys = []
            self._hold_generation += 1
            self._hold_for, self._hold_submitted, self._hold_since = waiting_for, submitted, get_time()
            self._check_hold_later(self._hold_generation)

    def release_held_keys(self) -> None:
        """End the hold: the held keys, and any the app has queued behind them, are replayed in
        order through the normal key path, from the app's message queue (callable from anywhere)."""
        if self._held_keys is not None and not self._releasing:
            self._releasing = True
            self.call_later(self._replay_held_keys)  # type: ignore[attr-defined]

    async def _replay_held_keys(self) -> None:
        # Keys still in the app's queue when the release was asked for were held behind the ones
        # held before (this runs after them); posting the held keys again would put them behind
        # those. So they are handled here, in order, until one of them starts a new hold.
        held, self._held_keys, self._releasing, self._hold_for = self._held_keys or [], None, False, None
        for i, key in enumerate(held):
            if self._held_keys is not None:  # a replayed `t`, `/` or Enter holds the rest in turn
                self._held_keys.extend(held[i:])
                return
            await self.on_event(key)

    def _check_hold_later(self, generation: int) -> None:
        # the timer's callback runs outside the app's message queue: the check goes through it
        self.set_timer(HOLD_MAX_S, lambda: self.call_later(self._release_if, generation))  # type: ignore[attr-defined]

    def _release_if(self, generation: int) -> None:
        if self._held_keys is None or self._releasing or generation != self._hold_generation:
            return
        if self._hold_on_its_way() and get_time() - self._hold_since < HOLD_CAP_S:
            self._check_hold_later(generation)
        else:
            self.release_held_keys()

    def _hold_on_its_way(self) -> bool:
        """Whether what the hold waits for can still come: the submitting field still has the
        focus (its handler moves the focus or releases the keys), or the screen waited for is
        still open without a text field focused in it, or the field waited for is still mounted
        without the focus."""
        target, focused = self._hold_for, self.focused  # type: ignore[attr-defined]
        if target is None:
            return False
        if self._hold_submitted:
            return focused is target
        if isinstance(target, Screen):
            return target in self.screen_stack and not isinstance(focused, Input)  # type: ignore[attr-defined]
        return target.is_attached and focused is not target

    def on_descendant_focus(self, event: events.DescendantFocus) -> None:
        """A text field took the focus: the keys held for it can go."""
        if self._held_keys is not None and isinstance(event.widget, Input):
            self.release_held_keys()

    def bindings_on_arrival(self, key: str, character: str | None = None) -> list[tuple[Any, Any]] | None:
        """``(namespace, binding)`` pairs that ``key`` (typed as ``character``) would reach, in
        Textual's search order, when they are to be resolved on arrival; None when Textual's own
        handling applies (the focused text field takes the key, or it has a priority binding)."""
        focused = self.focused  # type: ignore[attr-defined]
        if isinstance(focused, Input) and (focused.check_consume_key(key, character)
                                           or key in focused._bindings.key_to_bindings):
            return None
        chain = self.screen._modal_binding_chain  # type: ignore[attr-defined]  # focused ... screen[, app]
        found = [(node, b) for node, bindings in chain for b in bindings.key_to_bindings.get(key, ())]
        if any(b.priority for _node, b in found):
            return None
        return found

    async def on_event(self, event: events.Event) -> None:
        if isinstance(event, events.Key):
            if event.is_forwarded:
                if getattr(event, _RESOLVED, False):
                    return  # came back up unconsumed; its bindings were resolved on arrival
            else:
                if self._held_keys is not None:
                    self._held_keys.append(event)
                    return
                found = self.bindings_on_arrival(event.key, event.character)
                if found is not None:
                    for namespace, binding in found:
                        if await self.run_action(binding.action, namespace):  # type: ignore[attr-defined]
                            return
                    setattr(event, _RESOLVED, True)
                elif event.key == "enter" and isinstance(self.focused, OrderedInput):  # type: ignore[attr-defined]
                    # the field submits: what follows in the burst waits until the submission is
                    # handled (the dialog or prompt closed, or its value refused), then goes where
                    # the focus is by then (:meth:`release_held_keys`)
                    field = self.focused  # type: ignore[attr-defined]
                    await super().on_event(event)  # type: ignore[misc]
                    self.hold_keys(field, submitted=True)
                    return
        await super().on_event(event)  # type: ignore[misc]


class OrderedInput(Input):
    """``textual.widgets.Input`` that runs its own key bindings (``Input.BINDINGS`` and those of
    subclasses) in its key handler, so editing keys and typed characters apply in arrival order.

    App- and screen-level bindings are unchanged: priority bindings are checked by the app before
    the key reaches the input, other keys without a binding here bubble as before. At Enter the app
    (``KeyOrderMixin``) holds the keys that follow until the submission is handled; the screen or
    panel that handles it calls ``release_held_keys``. A screen with a ``keys_frozen`` attribute
    gets it set to True at Enter (``submit``), and its inputs drop keys until the screen sets it
    back (a guard: the hold keeps them from reaching the input).
    """

    async def _on_key(self, event: events.Key) -> None:
        screen = self.screen
        if getattr(screen, "keys_frozen", False):  # submitted: keys typed after Enter are lost
            event.stop()
            event.prevent_default()
            return
        for binding in self._bindings.key_to_bindings.get(event.key, ()):
            event.stop()
            event.prevent_default()
            self._restart_blink()
            if binding.action == "submit" and hasattr(screen, "keys_frozen"):
                # the Submitted message is handled after the keys already queued here: freeze the
                # fields now, so the screen reads them as they were at Enter
                screen.keys_frozen = True
            await self.run_action(binding.action)
            return
        await super()._on_key(event)


#: toasts on screen at once (older ones go; identical ones replace each other)
MAX_TOASTS = 2


class NoticeMixin:
    """For a ``textual.app.App`` subclass: :meth:`notice` and the collapsing of toasts."""

    _tagged: dict[str, tuple[str, str]] | None = None  # toast identity -> (tag, kind)

    def notice(self, message: str, *, title: str = "", severity: str = "information",
               timeout: float = 4.0, tag: str = "", kind: str = "") -> None:
        """A toast (plain text). A ``tag`` replaces the shown toast of that tag instead of
        stacking; toasts of a ``kind`` can be removed together (:meth:`clear_notices`)."""
        if self._tagged is None:
            self._tagged = {}
        n = Notification(message, title, severity, timeout, markup=False)  # type: ignore[arg-type]
        if tag or kind:
            self._tagged[n.identity] = (tag, kind)
        self.post_message(Notify(n))  # type: ignore[attr-defined]

    def clear_notices(self, kind: str) -> None:
        """Remove the toasts of ``kind`` (e.g. ``connection`` after a reconnect)."""
        tagged = self._tagged or {}
        for n in list(self._notifications):  # type: ignore[attr-defined]
            if tagged.get(n.identity, ("", ""))[1] == kind:
                self._unnotify(n)  # type: ignore[attr-defined]

    def notice_messages(self) -> list[str]:
        """The messages of the toasts shown now."""
        return [n.message for n in self._notifications]  # type: ignore[attr-defined]

    def _on_notify(self, event: Notify) -> None:
        event.prevent_default()  # instead of App's handler, which stacks every toast
        tagged = self._tagged if self._tagged is not None else {}
        self._tagged = tagged
        shown = self._notifications  # type: ignore[attr-defined]
        new = event.notification
        tag = tagged.get(new.identity, ("", ""))[0]
        for old in list(shown):
            same_tag = bool(tag) and tagged.get(old.identity, ("", ""))[0] == tag
            if same_tag or (old.message == new.message and old.title == new.title):
                self._unnotify(old, refresh=False)  # type: ignore[attr-defined]
                tagged.pop(old.identity, None)
        shown.add(new)
        for old in list(shown)[:-MAX_TOASTS]:
            self._unnotify(old, refresh=False)  # type: ignore[attr-defined]
            tagged.pop(old.identity, None)
        if len(tagged) > 200:  # expired toasts
            live = {n.identity for n in shown}
            self._tagged = {k: v for k, v in tagged.items() if k in live}
        self._refresh_notifications()  # type: ignore[attr-defined]


def set_border_title(widget: Widget, title: str) -> None:
    """Set ``widget.border_title`` to ``title``, repainting only its top border line.

    Nothing happens when the title is already ``title``. Before the widget is laid out, or without
    a top border, it is set the ordinary way (a repaint of the whole widget).
    """
    if widget.border_title == title:
        return
    offset = widget.content_offset
    if not widget.is_mounted or not widget.outer_size.width or offset.y < 1 or not isinstance(title, str):
        widget.border_title = title
        return
    # what Textual's border_title descriptor stores (textual.widget._BorderTitle.__set__)
    widget._border_title = widget.render_str(title).expand_tabs(4).split()[0]
    widget.refresh(Region(-offset.x, -offset.y, widget.outer_size.width, 1))


def set_virtual_size(view: Widget, size: Size) -> None:
    """Set the scrolling widget ``view``'s ``virtual_size`` to ``size``, without a layout when it can.

    When the vertical scrollbar is shown before and after (the content is taller than the view
    both times) and the horizontal one is shown both times or neither, only the view and its
    scrollbars are updated (as the layout would: window sizes, scroll position clamped). Else, or
    before the view is laid out, it is set the ordinary way (a layout).
    """
    old = view.virtual_size
    if size == old:
        return
    region = view.scrollable_content_region
    width, height = region.width, region.height
    same_bars = (view.is_mounted and height > 0 and view.show_vertical_scrollbar
                 and old.height > height and size.height > height
                 and (old.width > width) == (size.width > width))
    if not same_bars:
        view.virtual_size = size
        return
    view.set_reactive(Widget.virtual_size, size)
    view._scroll_update(size)
    view.refresh()


class RowScrollBar(ScrollBar):
    """A vertical ``ScrollBar`` that paints each row with the strip Textual made before for a row
    drawn the same (the same segment of ``ScrollBarRender.render_bar``: the track above or below
    the thumb, the thumb, one of its end glyphs), at the same size and in the same colours.

    Textual renders the whole bar through its Rich renderable on every move of the thumb (once a
    second in the log pane while it follows the log); a bar whose rows were all seen before is
    assembled from those strips instead, which also lets Textual's per-strip caches (filters,
    the screen's chops, the terminal text) answer for it. Rows not seen yet: Textual's render.
    """

    _rows: dict | None = None  # render_bar segment -> strip painted for it
    _rows_key: object = None  # (size, colours) the rows are for

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._rows = None  # other colours

    def render_lines(self, crop: Region) -> list[Strip]:
        rendered = self.render()
        if type(rendered) is not ScrollBarRender or not rendered.vertical or not plain_box(self):
            return super().render_lines(crop)
        width, height = self.size
        rows = bar_segments(rendered, width, height, self.app.console)
        known = self._known_rows((self.size, rendered.style, self.rich_style, tuple(self.get_line_filters())))
        if not all(row in known for row in rows):
            whole = super().render_lines(self.size.region)
            if len(whole) != len(rows):  # (not a bar of one segment per row: Textual's way)
                return super().render_lines(crop)
            for row, strip in zip(rows, whole):
                known.setdefault(row, strip)
        strips = [known[rows[y]] for y in crop.line_range]
        x1, x2 = crop.column_span
        return strips if (x1, x2) == (0, width) else [strip.crop(x1, x2) for strip in strips]

    def _known_rows(self, key: object) -> dict:
        """The rows painted so far for ``key`` (size and colours); none after a change of it."""
        if self._rows is None or self._rows_key != key or len(self._rows) > 64:
            self._rows, self._rows_key = {}, key  # (a handful in practice: track, thumb, end glyphs)
        return self._rows


def bar_segments(rendered: ScrollBarRender, width: int, height: int, console) -> list:
    """The vertical bar's segment per row, as ``ScrollBarRender.__rich_console__`` makes them
    for a bar ``width`` x ``height`` cells (a segment: text and style, with its mouse actions)."""
    style = console.get_style(rendered.style)
    bar = rendered.render_bar(
        size=height, window_size=rendered.window_size, virtual_size=rendered.virtual_size,
        position=rendered.position, vertical=True, thickness=width,
        back_color=style.bgcolor or Color.parse("#555555"), bar_color=style.color or Color.parse("bright_magenta"),
    )
    return list(bar.segments)


def row_vertical_scrollbar(widget: Widget) -> ScrollBar:
    """``widget.vertical_scrollbar`` as a :class:`RowScrollBar` (for a ``vertical_scrollbar``
    property of the widget's class): made as Textual 8.2's ``Widget.vertical_scrollbar`` makes it."""
    if widget._vertical_scrollbar is None:
        bar = RowScrollBar(vertical=True, name="vertical", thickness=widget.scrollbar_size_vertical)
        widget._vertical_scrollbar = bar
        bar.display = False
        widget.app._start_widget(widget, bar)
    return widget._vertical_scrollbar


def plain_box(widget: Widget) -> bool:
    """True when Textual's styles cache would pass ``widget``'s content lines through unchanged:
    no border, outline, padding, tint, hatch, text opacity or opacity, and no link under the
    mouse (``Widget.render_lines`` restyles hovered links)."""
    styles = widget.styles
    return (not any(edge for edge, _ in styles.border) and not any(edge for edge, _ in styles.outline)
            and not any(styles.padding) and not styles.tint.a and styles.text_opacity == 1.0
            and not (styles.has_rule("hatch") and styles.hatch != "none") and widget.opacity == 1.0
            and not widget.hover_style._link_id)


def widget_lines(widget: Widget, crop: Region, line) -> list[Strip]:
    """``Widget.render_lines(crop)`` of a :func:`plain_box` widget whose content row ``y`` is
    ``line(y)`` (a strip exactly as wide as the widget): as the styles cache gives them (the
    app's line filters over the widget's background, cut to ``crop``'s columns), but without it:
    the same strip from ``line`` gives the same strips here (Textual caches them per strip)."""
    strips = [line(y) for y in crop.line_range]
    filters = widget.get_line_filters()
    if filters:
        background = widget.background_colors[1]
        for line_filter in filters:
            strips = [strip.apply_filter(line_filter, background) for strip in strips]
    x1, x2 = crop.column_span
    if (x1, x2) != (0, widget.size.width):
        strips = [strip.crop(x1, x2) for strip in strips]
    return strips


try:  # (not on Windows)
    from textual.drivers.linux_driver import LinuxDriver
except ImportError:  # pragma: no cover
    LinuxDriver = None  # type: ignore[assignment,misc]

if LinuxDriver is not None:

    class CalmInputDriver(LinuxDriver):  # type: ignore[valid-type,misc]
        """Textual 8.2's ``LinuxDriver`` whose input thread waits for a key instead of waking
        every 0.1 s (see the module docstring). Input, Escape timing and exit are Textual's."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._wake_read, self._wake_write = os.pipe()  # disable_input wakes the thread
            self._stopping = False

        def start_application_mode(self) -> None:
            self._stopping = False
            super().start_application_mode()

        def disable_input(self) -> None:
            self._stopping = True  # from now on the thread polls as Textual's does
            try:
                os.write(self._wake_write, b"\0")
            except OSError:
                pass
            super().disable_input()

        def close(self) -> None:
            super().close()
            for fd in (self._wake_read, self._wake_write):
                try:
                    os.close(fd)
                except OSError:
                    pass

        def input_wait(self, parser: XTermParser) -> float | None:
            """How long the input thread may wait for input: until the parser's deadline (a lone
            Escape, a sequence cut short), as long as it takes when none is due, 0.1 s (Textual's
            poll) once input is being disabled."""
            if self._stopping:
                return 0.1
            deadline = parser._timeout_time
            return None if deadline is None else max(0.0, deadline - get_time())

        def run_input_thread(self) -> None:
            """Wait for input and dispatch events (Textual 8.2's, but for the wait)."""
            selector = selectors.SelectSelector()
            selector.register(self.fileno, selectors.EVENT_READ)
            selector.register(self._wake_read, selectors.EVENT_READ)

            fileno = self.fileno
            wake = self._wake_read
            EVENT_READ = selectors.EVENT_READ

            parser = XTermParser(self._debug)
            feed = parser.feed
            tick = parser.tick

            utf8_decoder = getincrementaldecoder("utf-8")().decode
            decode = utf8_decoder
            read = os.read

            def process_selector_events(selector_events: list, final: bool = False) -> None:
                input_events = []
                for key, mask in selector_events:
                    if key.fd == wake:
                        os.read(wake, 64)
                    else:
                        input_events.append((key, mask))
                for last, (_selector_key, mask) in loop_last(input_events):
                    if mask & EVENT_READ:
                        unicode_data = decode(read(fileno, 1024 * 4), final=final and last)
                        if not unicode_data:
                            # This can occur if the stdin is piped
                            break
                        for event in feed(unicode_data):
                            self.process_message(event)
                for event in tick():
                    self.process_message(event)

            try:
                while not self.exit_event.is_set():
                    process_selector_events(selector.select(self.input_wait(parser)))
                selector.unregister(self.fileno)
                selector.unregister(wake)
                process_selector_events(selector.select(0.1), final=True)

            finally:
                selector.close()
                try:
                    for event in feed(""):
                        pass
                except (EOFError, ParseError):
                    pass


def calm_driver(driver_class: type) -> type:
    """:class:`CalmInputDriver` where Textual picked its ``LinuxDriver``, else ``driver_class``
    (Windows, a driver named by ``TEXTUAL_DRIVER``)."""
    if LinuxDriver is not None and driver_class is LinuxDriver:
        return CalmInputDriver
    return driver_class
