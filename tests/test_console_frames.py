"""One screen update per poll interval (console.frames), and the repaint shortcuts of the widgets
that change every second (issue 15 item 8: the console's own CPU)."""

from __future__ import annotations

from dataclasses import replace

from rich.style import Style
from rich.text import Text

from textual.geometry import Region
from textual.scrollbar import ScrollBar

from console import events as ev
from console import logparse
from console import state as st
from console.client import parse_server_info
from console.frames import Frames
from console.nvml import NvmlReader
from console.nvml_sim import SimDevice, SimulatedNvml
from console.textual_compat import RowScrollBar
from console.widgets.base import line_segments, text_strips
from console.widgets.gpu_panel import GpuTable
from console.widgets.log_panel import LogPanel
from console.widgets.log_view import LogView
from console.widgets.spec_panel import SpecDetails
from test_console_snapshots import _gate, feed, frozen_app


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


# -- only what changed is repainted (issue 15 item 8) ------------------------------------------------


def _cells(app) -> list[list[tuple[str, str]]]:
    """The screen as (character, style) cells, from the widgets' current paint."""
    return [[(ch, str(seg.style or "")) for seg in strip for ch in seg.text]
            for strip in app.screen._compositor.render_strips()]


def _poll(app, reader, fake, i: int) -> None:
    """One second of a busy server: new GPU readings, a new batch size, step counts, a log line."""
    for d, dev in enumerate(fake.devices):
        dev.util_pct = float((i * 7 + d * 13) % 100)
        dev.power_w = 300 + (i * 11 + d) % 300
    app.model.on_gpus(reader.read())
    bs = 10 + (i * 5) % 50
    loads = {"loads": [{"dp_rank": 0, "num_running_reqs": bs, "num_waiting_reqs": 0, "gen_throughput": 3000.0 + i,
                        "max_running_requests": 96, "token_usage": 0.08}]}
    info = {"version": "0.5.12", "internal_states": [{"spec_gate": _gate(bs, bs < 32, 100 + i)}]}
    app.model.on_sample(parse_server_info(info, loads))
    line = f"[2026-11-30 12:02:{i % 60:02d} TP0] Decode batch, #running-req: {bs}, gen throughput (token/s): {3000 + i}.00"
    app.main_screen.query_one(LogView).add_lines([(logparse.classify(line), line)])


def _gpus():
    fake = SimulatedNvml([SimDevice(util_pct=0.0, temp_c=54, power_w=412) for _ in range(8)])
    reader = NvmlReader(fake)
    reader.simulated = False
    return fake, reader


async def _cells_after_polls(polls: int, publish_each: bool):
    """The screen's cells after ``polls`` polls, published after each one or once at the end."""
    app = frozen_app()
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause()
        feed(app)
        fake, reader = _gpus()
        for i in range(polls):
            _poll(app, reader, fake, i)
            if publish_each:
                app.publish()
                await pilot.pause()
        if not publish_each:
            app.publish()
            await pilot.pause()
        await pilot.pause(0.05)
        return _cells(app)


async def test_a_screen_repainted_row_by_row_equals_one_painted_at_once():
    """Widgets repaint only the rows that changed (and the log pane keeps the rows that scrolled):
    after many updates the screen is what a console that painted only the last one shows."""
    assert await _cells_after_polls(40, publish_each=False) == await _cells_after_polls(40, publish_each=True)


async def test_only_the_rows_that_changed_are_repainted():
    app = frozen_app()
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause()
        feed(app)
        await pilot.pause()
        await pilot.pause(0.05)  # the feed's repaints are done
        details = app.main_screen.query_one(SpecDetails)
        before = list(details._painted.strips)
        snap = app.main_screen.snapshot
        gate = replace(snap.gate, decode_steps_on=snap.gate.decode_steps_on + 50)
        app.on_session_event(ev.Published(replace(snap, gate=gate)))
        after = details._painted.strips
        changed = [y for y, (a, b) in enumerate(zip(before, after)) if a is not b]
        assert len(after) == len(before) and len(changed) == 1  # the steps line
        assert "steps on" in "".join(seg.text for seg in after[changed[0]])
        assert details._repaint_regions == {Region(0, changed[0], details.size.width, 1)}


async def test_the_log_scrollbar_is_painted_from_rows_painted_before():
    """A moving thumb: the bar is assembled from the strips of rows drawn before, and shows what
    Textual's own render of the bar shows."""
    app = frozen_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        feed(app)
        view = app.main_screen.query_one(LogView)
        bar = view.vertical_scrollbar
        assert isinstance(bar, RowScrollBar)
        for n in (200, 1, 1, 300, 1):  # the thumb shrinks and moves down
            view.add_lines([f"line {i}" for i in range(n)])
            await pilot.pause()
            await pilot.pause(0.02)
            assert bar.display and bar._rows
            region = bar.size.region
            mine = bar.render_lines(region)
            textual = ScrollBar.render_lines(bar, region)
            assert [list(s) for s in mine] == [list(s) for s in textual]
            assert all(any(s is known for known in bar._rows.values()) for s in mine)


def test_line_segments_are_the_segments_rich_renders():
    """The direct cut of a line into segments gives Rich's own segments (text and style)."""
    from rich.segment import Segment

    console = _console()
    base = Style(color="white", bgcolor="black")
    styles = [Style(color="red"), "bold", Style(bgcolor="blue"), None, ""]
    lines = []
    for n in range(60):
        line = Text(style=("", "bold", Style(color="green"))[n % 3])
        for k in range(n % 7):
            line.append("ab"[: (n + k) % 3], styles[(n + k) % len(styles)])
        if n % 5 == 0 and len(line.plain) > 2:
            line.stylize(Style(italic=True), 1, len(line.plain) - 1)  # overlapping spans
        lines.append(line)
    for line in lines:
        joined = Text("\n").join([line])  # what the widgets painted before: the line's style as a span
        (piece,) = joined.split("\n", allow_blank=True)
        want = list(Segment.apply_style(piece.render(console), base))
        assert [(s.text, s.style) for s in line_segments(line, base, console)] == [(s.text, s.style) for s in want]
