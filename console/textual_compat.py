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
    holds the keys that follow until a text field has the focus (or ``HOLD_MAX_S`` passed), then
    replays them.

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

* **A growing log without a layout** (:func:`set_virtual_size`): ``virtual_size`` is a layout
  reactive, so each new line the log pane shows (its virtual height grows by one) laid out the
  whole screen again. While the scrollbars shown stay the same, only the view and its scrollbars
  need an update.

Internals used: ``Widget._scroll_update`` (scrollbar sizes, scroll clamping), ``Widget._border_title`` (what ``border_title`` stores), ``Screen._modal_binding_chain``, ``Widget._bindings``, ``Input.check_consume_key``,
``Input._restart_blink``, ``App._notifications`` / ``_unnotify`` / ``_refresh_notifications``,
``textual.notifications.Notify``. ``tests/test_textual_compat.py`` pins each behaviour.
"""

from __future__ import annotations

from typing import Any

from textual import events
from textual.geometry import Region, Size
from textual.notifications import Notification, Notify
from textual.widget import Widget
from textual.widgets import Input

#: the longest keys are held for a text field that does not get the focus (then they are replayed)
HOLD_MAX_S = 0.5
#: set on a key whose bindings were resolved on arrival (none applied): dropped if it bubbles back
_RESOLVED = "_specconsole_bindings_resolved"


class KeyOrderMixin:
    """For a ``textual.app.App`` subclass (list it first): bindings resolved in arrival order, and
    the key hold. Uses Textual 8.2's ``Screen._modal_binding_chain`` (the chain Textual's own
    ``App._check_bindings`` walks); tests/test_console_pilot.py pins the behaviour.
    """

    _held_keys: list[events.Key] | None = None
    _hold_generation = 0

    def hold_keys(self) -> None:
        """Hold the keys that arrive from now on until a text field has the focus (or ``HOLD_MAX_S``)."""
        if self._held_keys is None:
            self._held_keys = []
            self._hold_generation += 1
            generation = self._hold_generation
            self.set_timer(HOLD_MAX_S, lambda: self._release_if(generation))  # type: ignore[attr-defined]

    def release_held_keys(self) -> None:
        """Replay the held keys, in order, through the normal key path."""
        held, self._held_keys = self._held_keys, None
        for key in held or ():
            self.post_message(key)  # type: ignore[attr-defined]

    def _release_if(self, generation: int) -> None:
        if self._held_keys is not None and generation == self._hold_generation:
            self.release_held_keys()

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
        await super().on_event(event)  # type: ignore[misc]


class OrderedInput(Input):
    """``textual.widgets.Input`` that runs its own key bindings (``Input.BINDINGS`` and those of
    subclasses) in its key handler, so editing keys and typed characters apply in arrival order.

    App- and screen-level bindings are unchanged: priority bindings are checked by the app before
    the key reaches the input, other keys without a binding here bubble as before. A screen with a
    ``keys_frozen`` attribute gets it set to True at Enter (``submit``), and its inputs then drop
    keys until the screen sets it back (e.g. after refusing the value).
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
