"""Editing keys that arrive in one burst apply in typing order (console/widgets/ordered_input.py)."""

from __future__ import annotations

import pytest
from textual import events
from textual.app import App
from textual.widgets import Input

from console.widgets.ordered_input import OrderedInput

# (key, character) as a terminal delivers them: 32 -> End, BSpace x2 -> "" -> 5 -> Home, Delete -> ""
# -> 8 -> Enter submits "8"
BURST = [("end", None), ("backspace", None), ("backspace", None), ("5", "5"),
         ("home", None), ("delete", None), ("8", "8"), ("enter", None)]


class _One(App):
    def __init__(self, cls: type[Input]) -> None:
        super().__init__()
        self.cls = cls
        self.submitted: list[str] = []

    def compose(self):
        yield self.cls("32", id="i")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.submitted.append(event.value)


async def _burst(cls: type[Input]) -> tuple[str, list[str]]:
    app = _One(cls)
    async with app.run_test() as pilot:
        await pilot.pause()
        for key, char in BURST:  # all queued before any is handled: one read from the terminal
            app.post_message(events.Key(key, char))
        await pilot.pause(0.3)
        return app.query_one("#i", Input).value, app.submitted


async def test_a_burst_of_editing_keys_applies_in_typing_order():
    assert await _burst(OrderedInput) == ("8", ["8"])


async def test_textual_input_reorders_the_same_burst():
    """Why OrderedInput exists; if Textual fixes this, OrderedInput can go (this test then fails)."""
    value, submitted = await _burst(Input)
    if (value, submitted) == ("8", ["8"]):
        pytest.fail("textual.widgets.Input now keeps the order: OrderedInput is no longer needed")
