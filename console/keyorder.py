"""Keys typed in one burst act in the order typed, wherever they land.

Over a laggy ssh link (or a paste, or ``tmux send-keys``) several keys arrive in one read. Textual
8.2 forwards each key to the focused widget as it arrives, but runs the app's own bindings only
when the key has bubbled back up to the app, after the keys behind it were already forwarded.
In the console that made ``/ - -`` (meant: search for ``--``) step the live threshold twice: the
search prompt was not focused yet when the ``-`` keys were forwarded, and they came back up as
the app's ``-`` binding. Two rules fix the order:

* an app hotkey runs when the app receives the key (before the next key is looked at), when no
  focused widget or screen binds or consumes that key and no modal screen is up -- exactly the
  keys that would have bubbled up to the same binding anyway;
* an action that moves the focus to where the next keys must go (a prompt, a dialog) holds the
  keys that follow until that focus has happened (or ``HOLD_MAX_S`` passed), then replays them.

Focus moves inside a screen that are bound to keys (``Tab`` in the threshold dialog) are
priority bindings of that screen, so they also run on arrival.
"""

from __future__ import annotations

from typing import Any

from textual import events

#: the longest keys are held for a focus that does not come (then they are replayed anyway)
HOLD_MAX_S = 0.5


class KeyOrderMixin:
    """For a ``textual.app.App`` subclass (list it first): in-order hotkeys and the key hold.

    Uses Textual's binding chain (``Screen._modal_binding_chain``, Textual 8.2), which already
    drops the bindings a focused ``Input`` consumes (printable keys); ``tests/test_key_order.py``
    pins the behaviour.
    """

    _held_keys: list[events.Key] | None = None
    _hold_generation = 0

    def hold_keys(self) -> None:
        """Hold the keys that arrive from now on until the focus moves (or ``HOLD_MAX_S``)."""
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
        """A widget took the focus: the keys held for it can go."""
        if self._held_keys is not None:
            self.release_held_keys()

    def app_hotkey_bindings(self, key: str, character: str | None = None) -> list[Any]:
        """The app's own non-priority bindings for ``key`` that a key press would reach, or []
        when a modal screen is up or the focused widget, an ancestor or the screen binds or
        consumes the key (they get it first, as without this module). ``character`` is the
        key's text (``-`` for ``minus``): an ``Input`` consumes every printable one."""
        focused = self.focused  # type: ignore[attr-defined]
        if focused is not None and focused.check_consume_key(key, character):
            return []  # typed text (Textual's own chain filter misses "minus", "plus", "slash")
        chain = self.screen._modal_binding_chain  # type: ignore[attr-defined]  # focused ... screen, app
        if not chain or chain[-1][0] is not self:
            return []  # a modal screen: only its own bindings apply
        for _node, bindings in chain[:-1]:
            if bindings.key_to_bindings.get(key):
                return []
        return [b for b in chain[-1][1].key_to_bindings.get(key, ()) if not b.priority]

    async def on_event(self, event: events.Event) -> None:
        if isinstance(event, events.Key) and not event.is_forwarded:
            if self._held_keys is not None:
                self._held_keys.append(event)
                return
            for binding in self.app_hotkey_bindings(event.key, event.character):
                if await self.run_action(binding.action):  # type: ignore[attr-defined]
                    return  # done in arrival order; not forwarded to bubble back later
        await super().on_event(event)  # type: ignore[misc]
