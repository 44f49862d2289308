"""One screen update per poll interval (console.frames), and the repaint shortcuts of the widgets
that change every second (issue 15 item 8: the console's own CPU)."""

from __future__ import annotations

from dataclasses import replace

from rich.style import Style
from rich.text import Text

from console import events as ev
from console import logparse
from console import state as st
from console.frames import Frames
from console.widgets.base import text_strips
from console.widgets.gpu_panel import GpuTable
from console.widgets.log_panel import LogPanel
from console.widgets.log_view import LogView
from test_console_snapshots import feed, frozen_app


class FakeTimer:
    def __init__(self, delay, callback):
        self.delay, self.callback, self.stopped = delay, callback, False

    def stop(self):
        self.stopped = True


def _frames():
    shown: list = []
    timers: list[FakeTimer] = []

    def set_timer(delay, callback):
        timers.append(FakeTimer(delay, callback))
        return timers[-1]

    frames = Frames(lambda s: shown.append(("snapshot", s)), lambda e: shown.append(("lines", e)),
                    lambda: 1.0, set_timer)
    return frames, shown, timers


def test_snapshots_that_may_wait_are_shown_with_the_next_one_that_may_not():
    frames, shown, timers = _frames()
    nvml, poll = st.ConsoleSnapshot(url="nvml"), st.ConsoleSnapshot(url="poll")
    lines = ev.LogLines(((logparse.PLAIN, "a"),))
    frames.published(ev.Published(nvml, soon=True))
    frames.log_lines(lines)
    assert shown == [] and len(timers) == 1 and timers[0].delay == 1.0  # one deadline for both
    frames.published(ev.Published(poll))
    assert shown == [("lines", lines), ("snapshot", poll)]  # lines first, then the newest snapshot
    assert timers[0].stopped


def test_nothing_waits_longer_than_one_interval():
    frames, shown, timers = _frames()
    snap = st.ConsoleSnapshot(url="nvml")
    frames.published(ev.Published(snap, soon=True))
    frames.published(ev.Published(replace(snap, url="nvml2"), soon=True))
    assert len(timers) == 1  # the deadline is the first one's
    timers[0].callback()
    assert shown == [("snapshot", replace(snap, url="nvml2"))]
    frames.flush()
    assert len(shown) == 1  # nothing held: nothing shown again


def test_dropped_lines_are_not_shown():
    frames, shown, _ = _frames()
    frames.log_lines(ev.LogLines(((logparse.PLAIN, "old server"),)))
    frames.drop_lines()
    frames.flush()
    assert shown == []


async def test_nvml_and_log_lines_wait_for_the_polls_snapshot_and_the_title_comes_with_them():
    app = frozen_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        feed(app)
        await pilot.pause()
        base = app.main_screen.snapshot
        held = replace(base, url="http://held")
        app.on_session_event(ev.Published(held, soon=True))
        app.on_session_event(ev.LogLines(((logparse.PLAIN, "a new line"),), (), 0, 0))
        await pilot.pause()
        view = app.main_screen.query_one(LogView)
        assert app.main_screen.snapshot is base
        assert "a new line" not in view.visible_texts()
        polled = replace(base, url="http://polled")
        app.on_session_event(ev.Published(polled))  # the poll's: shown at once, with what was held
        assert app.main_screen.snapshot is polled
        assert view.visible_texts()[-1] == "a new line"
        panel = app.main_screen.query_one(LogPanel)
        assert f"{len(view.shown)}/" in str(panel.border_title)  # the title counts it already


async def test_held_things_are_shown_after_one_interval_without_a_poll():
    app = frozen_app()  # interval_s 1.0
    app.cfg.interval_s = 0.2
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        held = replace(app.main_screen.snapshot, url="http://held")
        app.on_session_event(ev.Published(held, soon=True))
        await pilot.pause()
        assert app.main_screen.snapshot is not held
        await pilot.pause(0.4)
        assert app.main_screen.snapshot is held


async def test_a_console_line_keeps_the_order_of_the_server_lines_held_before_it():
    app = frozen_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        app.on_session_event(ev.LogLines(((logparse.PLAIN, "server line"),), (), 0, 0))
        app.console_line("console says")
        texts = app.main_screen.query_one(LogView).visible_texts()
        assert texts[-2] == "server line" and texts[-1].endswith("console says")


async def test_log_lines_rendered_once_follow_the_search_and_the_theme():
    app = frozen_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        feed(app)
        await pilot.pause()
        view = app.main_screen.query_one(LogView)
        row = len(view.shown) - 1 - int(view.scroll_offset.y)
        plain = view.render_line(row)
        assert view._line_cache
        view.search = view.visible_texts()[-1].split()[0].strip("[]")[:4]
        await pilot.pause()
        assert list(view.render_line(row)) != list(plain)  # the match is highlighted
        view.search = ""
        await pilot.pause()
        assert list(view.render_line(row)) == list(plain)
        app.apply_theme("light")
        await pilot.pause()
        assert list(view.render_line(row)) != list(plain)  # other colours, not the dark theme's cache


async def test_gpu_table_height_follows_the_rows_not_the_readings():
    app = frozen_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        feed(app)
        await pilot.pause()
        table = app.main_screen.query_one(GpuTable)
        snap = app.main_screen.snapshot
        height = table._height
        rows = snap.gpus.rows
        app.on_session_event(ev.Published(replace(snap, gpus=replace(snap.gpus, rows=rows + rows[:1]))))
        await pilot.pause()
        assert table._height == height + 1
        hot = replace(rows[0], util_pct=99.0)
        app.on_session_event(ev.Published(replace(snap, gpus=replace(snap.gpus, rows=(hot,) + rows[1:]))))
        await pilot.pause()
        assert table._height == height
        assert "99%" in "".join(seg.text for y in range(table.size.height) for seg in table.render_line(y))


def test_text_strips_cut_with_an_ellipsis_and_pad_with_the_background():
    base = Style(color="white", bgcolor="black")
    strips = text_strips(Text("abcdef\nab"), 4, 5, base, _console())
    assert len(strips) == 2
    assert "".join(s.text for s in strips[0]) == "abc…"
    assert [s.text for s in strips[1]] == ["ab", "  "]
    assert list(strips[1])[1].style == Style(bgcolor="black")  # like Textual's own padding
    assert list(strips[1])[0].style == base


def _console():
    from rich.console import Console

    return Console(width=80)
