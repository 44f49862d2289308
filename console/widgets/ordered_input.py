"""An ``Input`` whose editing keys take effect in the order they were typed.

Textual 8.2 inserts a printable key in ``Input._on_key`` as soon as the key reaches the input, but
an editing key (backspace, delete, home, end, enter, ...) is not handled there: it bubbles up to the
app, whose binding check then runs the input's action. When several keys arrive in one read -- a
fast typist over a laggy ssh link, a paste, ``tmux send-keys`` -- the characters behind a backspace
overtake it: with ``32`` in the field, ``End BSpace BSpace 5`` left ``3`` (or nothing), not ``5``.
For a threshold field that is a wrong number one Enter away, so the console's inputs run their own
bindings in their key handler, in arrival order.
"""

from __future__ import annotations

from textual import events
from textual.widgets import Input


class OrderedInput(Input):
    """``textual.widgets.Input`` that runs its own key bindings (``Input.BINDINGS`` and those of
    subclasses) in its key handler, so editing keys and typed characters apply in arrival order.

    App- and screen-level bindings are unchanged: priority bindings are checked by the app before
    the key reaches the input, other keys without a binding here bubble as before.
    """

    async def _on_key(self, event: events.Key) -> None:
        for binding in self._bindings.key_to_bindings.get(event.key, ()):
            event.stop()
            event.prevent_default()
            self._restart_blink()
            await self.run_action(binding.action)
            return
        await super()._on_key(event)
