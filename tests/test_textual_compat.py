"""console/textual_compat.py against the pinned Textual: the internals it uses exist, and each
workaround still does what it is for (the key-order behaviour in full is pinned in
tests/test_console_pilot.py and the tmux end-to-end test)."""

from __future__ import annotations

import pytest
from textual import events
from textual.app import App
from textual.widgets import Input

from importlib.metadata import version

from textual.screen import Screen

from console.textual_compat import MAX_TOASTS, KeyOrderMixin, NoticeMixin, OrderedInput

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


def test_the_textual_internals_used_exist_in_the_pinned_version():
    assert version("textual").startswith("8.2."), "console/textual_compat.py is tested with Textual 8.2"
    assert isinstance(getattr(Screen, "_modal_binding_chain", None), property)
    assert callable(getattr(Input, "check_consume_key", None)) and callable(getattr(Input, "_restart_blink", None))
    for name in ("_unnotify", "_refresh_notifications"):
        assert callable(getattr(App, name, None)), name
    from textual.drivers.linux_driver import LinuxDriver
    from textual.scrollbar import ScrollBarRender
    from textual.widget import Widget

    assert callable(getattr(LinuxDriver, "run_input_thread", None)) and callable(getattr(ScrollBarRender, "render_bar"))
    assert hasattr(Widget(), "_vertical_scrollbar") and callable(getattr(Widget, "_scroll_update", None))
    from textual._xterm_parser import XTermParser

    assert hasattr(XTermParser(False), "_timeout_time")  # the deadline CalmInputDriver waits for


def test_the_calm_input_driver_waits_for_a_key_for_the_parsers_deadline_or_polls_while_stopping(monkeypatch):
    from textual._xterm_parser import XTermParser
    from textual.drivers.linux_driver import LinuxDriver

    from console import textual_compat as tc
    from console.app import SpecConsoleApp

    assert tc.calm_driver(LinuxDriver) is tc.CalmInputDriver and tc.calm_driver(object) is object
    monkeypatch.delenv("TEXTUAL_DRIVER", raising=False)
    app = SpecConsoleApp.__new__(SpecConsoleApp)
    assert app.get_driver_class() is tc.CalmInputDriver  # (Linux: the CI and the GPU box)
    driver = tc.CalmInputDriver.__new__(tc.CalmInputDriver)
    driver._stopping = False
    parser = XTermParser(False)
    parser._timeout_time = None
    assert driver.input_wait(parser) is None  # nothing due: sleep until a key (Textual wakes every 0.1 s)
    monkeypatch.setattr(tc, "get_time", lambda: 100.0)
    parser._timeout_time = 100.05  # a lone Escape waits for the rest of a sequence until then
    assert driver.input_wait(parser) == pytest.approx(0.05)
    parser._timeout_time = 99.0
    assert driver.input_wait(parser) == 0.0
    driver._stopping = True
    assert driver.input_wait(parser) == 0.1  # disable_input: poll as Textual does until the thread ends


class _Toasts(NoticeMixin, App):
    pass


async def test_toasts_collapse_and_a_kind_is_cleared_together():
    app = _Toasts()
    async with app.run_test() as pilot:
        for _ in range(15):  # the same notice again and again: one toast
            app.notice("threshold 1 refused: must be >= 1")
        await pilot.pause()
        assert app.notice_messages() == ["threshold 1 refused: must be >= 1"]
        app.notice("sending threshold 33", tag="control")
        app.notice("threshold 33 confirmed", tag="control")  # same tag: replaces the previous one
        await pilot.pause()
        assert app.notice_messages()[-1] == "threshold 33 confirmed" and len(app.notice_messages()) <= MAX_TOASTS
        app.notice("server unreachable", kind="connection")
        await pilot.pause()
        app.clear_notices("connection")
        await pilot.pause()
        assert "server unreachable" not in app.notice_messages()


class _Keys(KeyOrderMixin, App):
    BINDINGS = [("x", "count", "count")]
    hits = 0

    def action_count(self) -> None:
        self.hits += 1


async def test_bindings_resolve_on_arrival_when_no_text_field_has_the_focus():
    app = _Keys()
    async with app.run_test() as pilot:
        assert [b.action for _node, b in app.bindings_on_arrival("x", "x")] == ["count"]
        for _ in range(3):
            app.post_message(events.Key("x", "x"))
        await pilot.pause()
        assert app.hits == 3


async def test_set_border_title_repaints_only_the_border_line():
    from textual.containers import Vertical
    from textual.widgets import Static

    from console.textual_compat import set_border_title

    class _Boxed(App):
        CSS = "#box { border: round white; height: 6; }"

        def compose(self):
            with Vertical(id="box"):
                yield Static("inside", id="inside")

    app = _Boxed()
    async with app.run_test(size=(40, 10)) as pilot:
        box = app.query_one("#box")
        set_border_title(box, "first")
        await pilot.pause()
        assert box.border_title == "first"
        set_border_title(box, "second")
        assert box._repaint_regions and all(r.height == 1 and r.y == 0 for r in box._repaint_regions)
        await pilot.pause()
        assert "second" in app.export_screenshot() and box.border_title == "second"
        set_border_title(box, "second")  # the same text: nothing to repaint
        assert not box._repaint_regions
