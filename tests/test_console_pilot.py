"""Textual Pilot tests of the whole console against the simulated server (no GPU, no terminal)."""

from __future__ import annotations

import sys

import httpx
import pytest
from textual import events

from console import state as st
from console.app import SpecConsoleApp
from console.modes import launch_config
from console.config import AppConfig
from console.nvml_sim import SimDevice, SimulatedNvml
from console.screens.crash import CrashScreen
from console.screens.no_server import NoServerScreen
from console.widgets.log_view import LogView
from console_support import FAST_DEMO, demo_cfg, free_port, notifications, screen_text, wait_for

SIZE = (100, 30)


def fake_gpus() -> SimulatedNvml:
    return SimulatedNvml(devices=[SimDevice(util_pct=37.0, temp_c=51.0, power_w=312.0)])


async def server_gate(url: str) -> dict:
    async with httpx.AsyncClient() as c:
        r = await c.get(url + "/server_info", timeout=2)
        return r.json()["internal_states"][0]["spec_gate"]


def log_texts(app: SpecConsoleApp) -> str:
    return "\n".join(app.main_screen.query_one(LogView).visible_texts())


async def open_threshold_dialog(pilot, app: SpecConsoleApp) -> None:
    """Press ``t`` and wait until the threshold dialog is the screen."""
    await pilot.press("t")
    await wait_for(pilot, lambda: app.screen.__class__.__name__ == "ThresholdDialog", what="dialog")


@pytest.fixture
def make_app(tmp_path):
    apps: list[SpecConsoleApp] = []

    def make(extra=None, cfg=None, **kw) -> SpecConsoleApp:
        app = SpecConsoleApp(cfg or demo_cfg(tmp_path, extra, **kw), nvml_module=fake_gpus())
        apps.append(app)
        return app

    yield make
    for app in apps:  # never leave a server behind, whatever the test did
        app.shutdown_server()


async def test_panels_show_values_from_the_server(make_app):
    app = make_app(["--load", "fixed:8"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.model.gate is not None and app.model.snapshot().running_batch == 8, what="spec_gate")
        await wait_for(pilot, lambda: app.model.worker_check().status == st.CHECK_VERIFIED, what="log cross-check")
        # the local (fake) GPUs can be on screen before the poll that brings the server's own
        await wait_for(pilot, lambda: "H200" in screen_text(app) and "from the server" in screen_text(app),
                       what="the server's GPU row")
        gate = await server_gate(app.cfg.url)
        text = screen_text(app)
        assert "SPEC ON" in text
        assert f"decode batch 8 < threshold {gate['threshold']}" in text  # spec_gate's last decode batch
        assert gate["worker_class"] == "EAGLEWorkerV2" and "EAGLEWorkerV2 ✓ log agrees" in text
        assert f"threshold {gate['threshold']} req" in text and f"hysteresis {gate['hysteresis']} req" in text
        assert "running 8  queue 0" in text and "tok/s" in text and "from /v1/loads" in text
        assert "SGLang 0.5.12" in text
        # the GPU row: the server's own report of its rank's GPU (the demo's is this machine's GPU 0,
        # which the fake NVML also sees: shown once, as the server's)
        assert "from the server: 1 rank on" in text and "TP0" in text and "1,980 MHz" in text
        # the log pane follows the server log, with the verifying lines (the pane's own read of the
        # file can lag the log facts the cross-check above used, under load)
        await wait_for(pilot, lambda: "spec_gate: worker=EAGLEWorkerV2" in log_texts(app), what="log pane lines")
        assert "Spec v2 is enabled by default" in log_texts(app)


async def test_plus_changes_threshold_on_server_shown_only_when_confirmed(make_app):
    app = make_app(["--load", "fixed:8", "--apply-delay", "1.0"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.model.gate is not None, what="spec_gate")
        assert app.model.gate.threshold == 32
        await pilot.press("plus")
        # accepted by the server, but spec_gate still says 32: shown as pending, not as the value
        await wait_for(pilot, lambda: app.model.pending is not None, what="accepted change")
        await pilot.pause(0.3)
        text = screen_text(app)
        assert "threshold 32 req → 33 pending" in text
        await wait_for(pilot, lambda: app.model.pending is None and app.model.gate.threshold == 33, what="confirmation")
        assert (await server_gate(app.cfg.url))["threshold"] == 33
        await pilot.pause(0.2)
        assert "threshold 33 req" in screen_text(app)
        logs = log_texts(app)
        assert "request threshold 32 -> 33" in logs
        assert "threshold 32 -> 33 confirmed by spec_gate" in logs
        await wait_for(pilot, lambda: "spec_gate: threshold 32 -> 33" in log_texts(app), what="server's log line")
        await pilot.press("minus")
        await wait_for(pilot, lambda: app.model.gate.threshold == 32 and app.model.pending is None, what="minus")


async def test_the_dialog_fields_hold_a_bounded_number_of_characters(make_app):
    """A fresh user's find: 5,000 characters typed one by one froze the console (each key cost the
    field's whole length in Textual's Input); the fields stop at FIELD_MAX_CHARS, still refused."""
    from console.screens.threshold_dialog import FIELD_MAX_CHARS

    app = make_app(["--load", "fixed:8"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.model.gate is not None, what="spec_gate")
        await open_threshold_dialog(pilot, app)
        await pilot.press(*"9" * (FIELD_MAX_CHARS + 20))
        field = app.screen.query_one("#threshold-input")
        assert len(field.value) == FIELD_MAX_CHARS
        await pilot.press("enter")
        await pilot.pause(0.2)
        assert "out of range" in str(app.screen.query_one("#threshold-error").render())
        assert app.model.pending is None


async def test_a_hysteresis_not_below_the_threshold_is_refused_in_the_dialog(make_app):
    """The README's rule (H < N) is checked before sending (the server's rejection of it, and
    how a rejection reason is shown, are unit-tested: test_rejection_and_refusals)."""
    app = make_app(["--load", "fixed:8"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.model.gate is not None, what="spec_gate")
        await open_threshold_dialog(pilot, app)
        await pilot.pause(0.1)
        help_label = app.screen.query_one("#threshold-help")  # not cut at the dialog's edge (it was)
        lines = str(help_label.render()).splitlines()
        assert lines == ["SPEC OFF at batch size >= N (N: 1..96 req, or auto)", "ON again below N - H (H: 0..N-1 req)"]
        assert help_label.content_region.height >= 2
        assert max(map(len, lines)) <= help_label.content_region.width
        hys = app.screen.query_one("#hysteresis-input")
        hys.value = "40"
        await pilot.press("enter")
        await pilot.pause(0.2)
        assert app.screen.__class__.__name__ == "ThresholdDialog"  # stays open to be corrected
        assert "hysteresis 40 refused: must be < threshold 32" in str(app.screen.query_one("#threshold-error").render())
        assert app.model.pending is None
        gate = await server_gate(app.cfg.url)
        assert (gate["threshold"], gate["hysteresis"]) == (32, 4)


async def test_threshold_typed_in_one_burst_is_the_one_sent(make_app):
    """Fresh-user finding: keys that arrive in one read (fast typing over ssh, tmux send-keys) lost
    their order in Textual's Input (32, End BSpace BSpace 2 0 Enter sent a wrong number)."""
    app = make_app(["--load", "fixed:8"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.model.gate is not None, what="spec_gate")
        await open_threshold_dialog(pilot, app)
        await pilot.pause(0.1)
        for key, char in [("end", None), ("backspace", None), ("backspace", None), ("2", "2"), ("0", "0"),
                          ("enter", None)]:
            app.post_message(events.Key(key, char))
        await wait_for(pilot, lambda: app.screen.__class__.__name__ != "ThresholdDialog", what="dialog closed")
        await wait_for(pilot, lambda: app.model.gate.threshold == 20, what="threshold 20 confirmed")
        assert (await server_gate(app.cfg.url))["threshold"] == 20


async def test_out_of_range_threshold_is_refused_before_sending(make_app):
    app = make_app(["--load", "fixed:8", "--max-running-requests", "32"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.model.gate is not None, what="spec_gate")
        # threshold 32 == max running requests 32: "+" would exceed it
        await pilot.press("plus")
        await pilot.pause(0.2)
        assert "refused: above max running requests 32" in (app.model.message or "")
        assert "refused" in screen_text(app)
        # the exact-value dialog refuses 0 and keeps the dialog open
        await open_threshold_dialog(pilot, app)
        app.screen.query_one("#threshold-input").value = "0"
        await pilot.press("enter")
        await pilot.pause(0.2)
        assert "must be >= 1" in str(app.screen.query_one("#threshold-error").render())
        # typed characters are not dropped: "2.5" stays "2.5" and is refused, visibly, unsent
        field = app.screen.query_one("#threshold-input")
        field.value = ""
        await pilot.press("2", "full_stop", "5")
        await pilot.pause(0.1)
        assert field.value == "2.5"
        assert "'2.5' is not a whole number" in str(app.screen.query_one("#threshold-error").render())
        await pilot.press("enter")
        await pilot.pause(0.2)
        assert app.screen.__class__.__name__ == "ThresholdDialog" and "'2.5' is not a whole number" in screen_text(app)
        await pilot.press("escape")
        server_log = app.cfg.log_path.read_text()
        assert "rejected" not in server_log  # nothing reached the server
        assert (await server_gate(app.cfg.url))["threshold"] == 32


async def test_the_hysteresis_field_says_at_once_what_it_refuses(make_app):
    """The hysteresis field's validator is wired (the threshold's is tested above): a word, ``auto``
    (a threshold's value only) and an absurdly long number are named as typed, before Enter."""
    from console.screens.threshold_dialog import HYSTERESIS_BOUND

    app = make_app(["--load", "fixed:8", "--max-running-requests", "32"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.model.gate is not None, what="spec_gate")
        await open_threshold_dialog(pilot, app)
        field = app.screen.query_one("#hysteresis-input")
        error = lambda: str(app.screen.query_one("#threshold-error").render())  # noqa: E731
        for typed, says in (("x", "hysteresis 'x' is not a whole number"),
                            ("auto", "hysteresis 'auto' is not a whole number"),
                            ("1234567890", f"hysteresis 1234567890 is out of range ({HYSTERESIS_BOUND})")):
            field.value = typed
            await pilot.pause(0.1)
            assert says in error(), (typed, error())
        field.value = "2"
        await pilot.pause(0.1)
        assert error() == ""
        await pilot.press("escape")


async def test_spec_state_flips_when_the_batch_crosses_the_threshold(make_app):
    app = make_app(["--load", "8,48", "--phase-seconds", "1.5"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: "SPEC ON" in screen_text(app), what="SPEC ON")
        await wait_for(pilot, lambda: "SPEC OFF" in screen_text(app), what="SPEC OFF")
        await wait_for(pilot, lambda: "SPEC ON" in screen_text(app), what="SPEC ON again")
        g = app.model.gate
        assert g.switches >= 2
        await wait_for(
            pilot,
            lambda: "spec_gate: speculation off (batch" in log_texts(app) and "spec_gate: speculation on (batch" in log_texts(app),
            what="switch lines in the log pane",
        )
        assert any(b >= 32 for b in app.model.batch_history) and any(b < 28 for b in app.model.batch_history)


async def test_server_crash_is_displayed_and_restart_offered(make_app):
    app = make_app(["--load", "fixed:8", "--crash-after", "0.6", "--exit-code", "3"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.model.gate is not None, what="spec_gate")
        pgid = app.proc.pgid
        await wait_for(pilot, lambda: isinstance(app.screen, CrashScreen), what="crash screen")
        await pilot.pause(0.2)
        text = screen_text(app)
        assert "exit code 3" in text
        assert "CUDA out of memory" in text  # last log lines
        assert "r restart" in text
        # ... without the console's own polls (the demo writes an access line per request)
        last = app.model.process.last_lines
        assert last and not any("/server_info" in line or "/v1/loads" in line for line in last), last
        # the crashed server's leftover scheduler process is stopped too
        await wait_for(pilot, lambda: app.proc.members() == [], what="group cleanup")
        await pilot.press("r")
        await wait_for(pilot, lambda: app.proc.pgid != pgid and app.model.process.phase == st.PHASE_READY,
                       what="restart")
        assert "restarting the server" in log_texts(app)


async def test_quit_stops_the_launched_server_process_group(tmp_path, monkeypatch, make_app):
    # launch mode, with the server command pointed at the simulated server (no GPU needed)
    monkeypatch.setenv("SPECCONSOLE_SERVER_CMD", f"{sys.executable} -m console.demo_server")
    port = free_port()
    base = AppConfig(log_dir=tmp_path, interval_s=0.2, handle_signals=False, stop_timeout_s=3.0)
    cfg = launch_config(base, ["--port", str(port), "--tp-size", "2", "--speculative-disable-batch-threshold", "16", *FAST_DEMO])
    assert cfg.url == f"http://127.0.0.1:{port}"
    app = make_app(cfg=cfg)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.model.gate is not None, what="spec_gate")
        pgid = app.proc.pgid
        assert len(app.proc.members()) >= 3  # the server and its two "scheduler" processes
        await pilot.press("q")
        await wait_for(pilot, lambda: app.proc.popen.returncode is not None, what="server exit")
    assert app.proc.members() == []
    from console.process import group_members

    assert group_members(pgid) == []


async def test_quit_kills_a_server_that_ignores_sigterm(make_app):
    app = make_app(["--load", "fixed:8", "--stubborn"], stop_timeout_s=0.5)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.model.gate is not None, what="spec_gate")
        await pilot.press("q")
        await wait_for(pilot, lambda: app.proc.popen.returncode is not None, what="server exit")
    assert app.proc.popen.returncode == -9  # SIGKILL after the timeout
    assert app.proc.members() == []


async def test_worker_mismatch_is_an_alarm(make_app):
    app = make_app(["--load", "fixed:8", "--worker-class", "EAGLEWorker"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.model.worker_check().status == st.CHECK_MISMATCH, what="mismatch")
        await pilot.pause(0.3)
        text = screen_text(app)
        assert "EAGLEWorker ✗ MISMATCH" in text
        assert "log says Spec v2" in text
        assert "WORKER MISMATCH" in log_texts(app)


async def test_v1_worker_is_verified_by_the_spec_v1_line(make_app):
    app = make_app(["--load", "fixed:8", "--disable-overlap-schedule"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.model.worker_check().status == st.CHECK_VERIFIED, what="verified")
        assert app.model.gate.worker_class == "EAGLEWorker"
        assert "Spec v1 is used" in log_texts(app)


async def test_readonly_refuses_threshold_keys(make_app):
    app = make_app(["--load", "fixed:8"], readonly=True)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.model.gate is not None, what="spec_gate")
        footer = screen_text(app).splitlines()[-1]
        assert "Quit" in footer and "Thr+1" not in footer and "Thr-1" not in footer and "Set" not in footer
        await pilot.press("plus", "t")
        await pilot.pause(0.5)
        assert app.model.pending is None and app.screen.__class__.__name__ == "MainScreen"
        assert (await server_gate(app.cfg.url))["threshold"] == 32
        assert "read-only" in screen_text(app)
        assert any("read-only" in n for n in notifications(app))  # said, not silently ignored


async def test_server_list_keys_with_one_server_say_why_they_do_nothing(make_app):
    app = make_app(["--load", "fixed:8"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.model.gate is not None, what="spec_gate")
        for key in ("left_square_bracket", "T"):
            app.clear_notifications()
            await pilot.press(key)
            await pilot.pause(0.3)
            assert app.screen.__class__.__name__ == "MainScreen"  # no dialog opened
            assert any("act on a server list" in n for n in notifications(app)), key


async def test_tab_away_from_the_log_prompt_closes_it_unapplied(make_app):
    """Fresh-user finding: x, 21, Tab, Escape left the prompt on screen with '21' and no label, and
    neither Escape nor c removed it."""
    app = make_app(["--load", "fixed:8"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.model.gate is not None, what="spec_gate")
        view = app.main_screen.query_one(LogView)
        prompt = app.main_screen.query_one("#log-prompt")
        await pilot.press("x", "2", "1")
        await pilot.pause(0.1)
        assert prompt.value == "21" and not prompt.has_class("-hidden")
        await pilot.press("tab")
        await pilot.pause(0.1)
        assert prompt.has_class("-hidden") and app.focused is not prompt
        assert view.exclude == ""  # not applied
        await pilot.press("x")  # opens again, empty, and works
        await pilot.pause(0.1)
        assert not prompt.has_class("-hidden") and app.focused is prompt and prompt.value == ""
        await pilot.press("escape")
        await pilot.pause(0.1)
        assert prompt.has_class("-hidden") and app.focused is view


async def test_attach_to_nothing_shows_unreachable_and_keeps_running(tmp_path):
    cfg = AppConfig(mode="attach", url=f"http://127.0.0.1:{free_port()}", interval_s=0.2, handle_signals=False)
    app = SpecConsoleApp(cfg, nvml_module=SimulatedNvml(init_error=12))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.model.connection.failures >= 3, what="failures")
        await wait_for(pilot, lambda: "unreachable for" in screen_text(app), what="unreachable text")
        text = screen_text(app)
        assert "connection refused" in text
        assert "retry every 0.8 s" in text or "retry every 1.6 s" in text  # backing off: the real interval
        assert "every 0.2 s" not in text
        assert "NVML unavailable" in text
        await pilot.press("plus")  # nothing to change: refused, saying why, nothing breaks
        await pilot.pause(0.2)
        assert "server unreachable (connection refused)" in (app.model.message or "")


async def test_log_filter_search_and_pause(make_app):
    app = make_app(["--load", "8,48", "--phase-seconds", "1"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: "spec_gate: speculation off" in log_texts(app), what="switch lines")
        view = app.main_screen.query_one(LogView)
        await pilot.press("f")
        await pilot.press(*"spec_gate")
        await pilot.press("enter")
        await pilot.pause(0.2)
        assert view.include == "spec_gate"
        assert view.shown and all("spec_gate" in t for t in view.visible_texts())
        await pilot.press("x")
        app.main_screen.query_one("#log-prompt").value = "worker="  # (typing is tested above)
        await pilot.press("enter")
        await pilot.pause(0.1)
        assert not any("worker=" in t for t in view.visible_texts())
        await pilot.press("c")
        await pilot.press("f")
        app.main_screen.query_one("#log-prompt").value = "|||"  # no terms: no filter, and none claimed
        await pilot.press("enter")
        await pilot.pause(0.1)
        assert view.include == "" and "only:" not in str(app.main_screen.query_one("#log-filters").render())
        assert any("'|||' has no terms" in n and "show filter cleared" in n for n in notifications(app))  # said
        await pilot.press("slash")
        app.main_screen.query_one("#log-prompt").value = "decode batch"
        await pilot.press("enter")
        await pilot.pause(0.2)
        assert view.search == "decode batch" and view.match_rows()
        assert view.follow is False  # jumping to a match pauses following
        title = str(app.main_screen.query_one("#log-panel").border_title)
        # "PAUSED (+2 new below)", or "PAUSED +2" where the title also says "polls hidden (o)"
        assert "PAUSED (+" in title and "new below)" in title or "PAUSED +" in title, title
        await pilot.press("p")
        assert view.follow is True
        assert app.focused is view
        await pilot.press("p")
        assert view.follow is False
        await pilot.press("end")  # the focused log view sees End first: it resumes following too
        assert view.follow is True
        await pilot.press("pageup")  # scrolling back pauses following...
        assert view.follow is False
        await pilot.press("G")  # ...G (or End) resumes it
        assert view.follow is True


async def test_startup_progress_then_ready(make_app):
    app = make_app(["--load", "fixed:8", "--startup-seconds", "2.5"])
    seen: set[str] = set()
    async with app.run_test(size=SIZE) as pilot:
        def progressed() -> bool:
            text = screen_text(app)
            for phase in (st.PHASE_LOADING, st.PHASE_GRAPHS):
                if f"starting: {phase}" in text:
                    seen.add(phase)
            p = app.model.process
            return p is not None and p.phase == st.PHASE_READY and app.model.gate is not None

        await wait_for(pilot, progressed, timeout=15, what="ready")
    assert seen, "no startup phase was shown"


async def test_no_server_screen_offers_the_demo(tmp_path):
    cfg = AppConfig(mode="none", url=f"http://127.0.0.1:{free_port()}", interval_s=0.2, handle_signals=False,
                    log_dir=tmp_path, demo_args=FAST_DEMO + ["--load", "fixed:8"], stop_timeout_s=3.0)
    app = SpecConsoleApp(cfg, nvml_module=fake_gpus())
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: isinstance(app.screen, NoServerScreen), what="no-server screen")
            await pilot.pause(0.2)
            text = screen_text(app)
            assert "No server found" in text and "d demo" in text.splitlines()[0]  # keys at the top
            assert "--speculative-disable-batch-threshold 32" in text  # the launch command is not cut
            assert "[server]" not in text
            await pilot.press("pagedown")  # the text scrolls with the keys
            await pilot.pause(0.2)
            text = screen_text(app)
            assert '"--speculative-disable-batch-threshold", "32"]' in text and "[server]" in text
            assert all(len(line.rstrip()) <= 80 for line in text.splitlines())
            await pilot.press("d")
            await wait_for(pilot, lambda: app.model.gate is not None, timeout=15, what="demo running")
            assert app.cfg.mode == "demo"
            await pilot.press("q")
    finally:
        app.shutdown_server()
    assert app.proc.members() == []


async def test_help_palette_and_theme_switch(make_app):
    app = make_app(["--load", "fixed:8"])
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: app.screen.__class__.__name__ == "HelpScreen", what="help")
        await pilot.pause(0.2)
        assert "Escape or ? closes" in "\n".join(screen_text(app).splitlines()[:6])  # the close hint is at the top
        await pilot.press("escape")
        assert app.has_class("theme-dark")
        app.apply_theme("light")
        await pilot.pause(0.1)
        assert app.has_class("theme-light") and not app.has_class("theme-dark") and app.theme == "textual-light"
        for key in ("ctrl+p", "colon"):  # both open the palette (README, help)
            await pilot.press(key)
            await wait_for(pilot, lambda: app.screen.__class__.__name__ == "CommandPalette", what=f"palette via {key}")
            if key == "ctrl+p":
                await pilot.press("escape")
                await wait_for(pilot, lambda: app.screen.__class__.__name__ == "MainScreen", what="palette closed")
        await pilot.press(*"ansi")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.has_class("theme-ansi"), what="ansi theme")
        assert app.theme == "ansi-dark"


async def test_the_palettes_screenshot_goes_to_the_working_directory_and_says_where(make_app, tmp_path, monkeypatch):
    """Fresh-user finding: the palette's Screenshot (Textual's: ~/Downloads, absent on that box) wrote
    nothing, and its notice showed only its title."""
    monkeypatch.chdir(tmp_path)
    app = make_app(["--load", "fixed:8"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.model.gate is not None, what="spec_gate")
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert titles.count("Screenshot") == 1  # ours, not Textual's beside it
        await pilot.press("colon")
        await wait_for(pilot, lambda: app.screen.__class__.__name__ == "CommandPalette", what="palette")
        await pilot.press(*"screenshot")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await wait_for(pilot, lambda: list(tmp_path.glob("*.svg")), what="the SVG")
        (svg,) = tmp_path.glob("*.svg")
        await wait_for(pilot, lambda: any(f"screenshot saved: {svg}" in n for n in notifications(app)), what="notice")
        def full(**kwargs):
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(app, "save_screenshot", full)
        app.action_save_screenshot()
        await wait_for(pilot, lambda: f"screenshot not saved: No space left on device ({tmp_path})" in notifications(app),
                       what="the refusal")


async def test_slow_server_and_slow_nvml_do_not_block_the_ui(tmp_path):
    import socket
    import threading

    # a "server" that accepts connections and never answers
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    port = sock.getsockname()[1]
    stop = threading.Event()

    class SlowNvml(SimulatedNvml):
        def nvmlDeviceGetCount(self):
            stop.wait(3.0)  # NVML stuck on a sick GPU
            return super().nvmlDeviceGetCount()

    cfg = AppConfig(mode="attach", url=f"http://127.0.0.1:{port}", interval_s=0.2, handle_signals=False)
    app = SpecConsoleApp(cfg, nvml_module=SlowNvml(), http_timeout_s=0.5)
    try:
        async with app.run_test(size=SIZE) as pilot:
            # an NVML read is stuck in its thread (waited for, not assumed after a fixed pause:
            # a loaded CI machine starts the worker later)...
            await wait_for(pilot, lambda: app._nvml_busy, timeout=2.5, what="NVML read stuck in its thread")
            await pilot.press("question_mark")  # ...and the UI still answers keys
            await wait_for(pilot, lambda: app.screen.__class__.__name__ == "HelpScreen", what="help")
            await pilot.press("escape")
            await wait_for(pilot, lambda: app.model.connection.last_error == "timed out", what="HTTP timeout")
            await wait_for(pilot, lambda: "not answering for" in screen_text(app), what="not answering text")
            stop.set()
    finally:
        stop.set()
        sock.close()


async def test_rapid_presses_each_step_the_pending_target(make_app):
    """20 presses at once, then 10 presses 30 ms apart: none is lost, one log line each."""
    app = make_app(["--load", "fixed:8", "--apply-delay", "0.6"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.model.gate is not None, what="spec_gate")
        for _ in range(20):  # all at once, as a terminal delivers a burst of key repeats
            app.post_message(events.Key("plus", "+"))
        # the latest target shows as pending at once, before the server has confirmed anything
        await wait_for(pilot, lambda: "threshold 32 req → 52 pending" in screen_text(app), timeout=3, what="pending 52")
        for _ in range(10):
            await pilot.press("minus")
            await pilot.pause(0.03)
        # pending 42 shows for the server's 0.6 s; on a loaded machine a poll can miss it, so the
        # confirmation below counts as well
        await wait_for(pilot, lambda: "→ 42 pending" in screen_text(app) or (
            app.model.pending is None and app.model.gate.threshold == 42), timeout=15, what="pending 42")
        await wait_for(pilot, lambda: app.model.pending is None and app.model.gate.threshold == 42,
                       what="confirmation of 42")
        assert (await server_gate(app.cfg.url))["threshold"] == 42
        await pilot.pause(0.2)
        requests = [t for t in log_texts(app).splitlines() if "request threshold" in t]
        assert len(requests) == 30, requests  # one line per press, no duplicates
        assert len(set(t.split("] ", 1)[1] for t in requests)) == 30
        assert [t.split("] ", 1)[1] for t in requests][:2] == ["request threshold 32 -> 33", "request threshold 33 -> 34"]
        assert [t.split("] ", 1)[1] for t in requests][-1] == "request threshold 43 -> 42"
        confirmed = [t for t in log_texts(app).splitlines() if "confirmed by spec_gate" in t]
        # one confirmation when the presses outrun the server's 0.6 s; on a loaded machine the
        # 30 ms gaps can stretch past it and an intermediate target is confirmed on the way
        assert confirmed and "threshold 32 -> " in confirmed[0] and "-> 42 confirmed" in confirmed[-1], confirmed
        assert not [t for t in log_texts(app).splitlines() if "accepted" in t and "[console" in t]
        server_log = app.cfg.log_path.read_text()  # every press reached the server, in order
        for t in range(32, 52):
            assert f"spec_gate: threshold {t} -> {t + 1}\n" in server_log
        for t in range(52, 42, -1):
            assert f"spec_gate: threshold {t} -> {t - 1}\n" in server_log


async def test_rapid_presses_stop_at_max_running_requests(make_app):
    app = make_app(["--load", "fixed:8", "--max-running-requests", "34", "--apply-delay", "0.3"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.model.gate is not None, what="spec_gate")
        for _ in range(5):
            app.post_message(events.Key("plus", "+"))
        await wait_for(pilot, lambda: app.model.pending is None and app.model.gate.threshold == 34,
                       what="threshold 34")
        assert "refused: above max running requests 34" in log_texts(app)
        server_log = app.cfg.log_path.read_text()
        assert "rejected" not in server_log  # nothing out of range reached the server
        assert "spec_gate: threshold 32 -> 33" in server_log and "spec_gate: threshold 33 -> 34" in server_log


async def test_restart_key_while_running_says_so_and_t_when_unreachable(make_app, tmp_path):
    app = make_app(["--load", "fixed:8"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.model.gate is not None, what="spec_gate")
        await pilot.press("r")
        await pilot.pause(0.1)
        assert any("still running" in n for n in notifications(app))
    cfg = AppConfig(mode="attach", url=f"http://127.0.0.1:{free_port()}", interval_s=0.2, handle_signals=False)
    app = SpecConsoleApp(cfg, nvml_module=fake_gpus())
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.model.connection.failures >= 1, what="failure")
        await pilot.press("t")
        await pilot.pause(0.1)
        assert "unreachable" in (app.model.message or "") and app.screen.__class__.__name__ == "MainScreen"


# -- second fresh-user test ------------------------------------------------------------------

async def test_a_server_already_on_the_port_is_never_taken_for_ours(make_app, tmp_path):
    """Item 1: the demo refuses to start on a port another server holds; nothing is sent there."""
    from console.modes import demo_config
    from console_support import DemoServer

    other = DemoServer(tmp_path, ["--load", "fixed:8", "--speculative-disable-batch-threshold", "50"]).wait_ready()
    try:
        base = AppConfig(log_dir=tmp_path / "logs", interval_s=0.2, handle_signals=False, stop_timeout_s=3.0)
        app = make_app(cfg=demo_config(base, port=other.port, extra=FAST_DEMO))
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: app.model.process is not None and app.model.process.error is not None,
                           what="refusal")
            assert app.model.process.error.startswith(f"port {other.port} is already in use by pid {other.proc.pid} (")
            why = app.model.process.last_lines[0]  # the full story, in the log pane too
            assert f"port {other.port} on 127.0.0.1 is already in use by an SGLang 0.5.12 server" in why
            assert "threshold 50" in why and "pass --port P" in why and why in log_texts(app)
            assert app.proc.popen is None  # no second server was started
            await pilot.press("plus")
            await pilot.pause(0.5)
            text = screen_text(app)
            assert "NOT STARTED" in text and "connected" not in text
            assert all(len(line) <= 80 for line in text.splitlines())
            assert "was not started: threshold not changed" in (app.model.message or "")
            assert app.model.sample is None  # the other server was never polled as ours
        assert other.get("/server_info")["internal_states"][0]["spec_gate"]["threshold"] == 50
    finally:
        other.stop()


async def test_a_server_that_takes_the_port_during_startup_or_after_a_crash_is_ignored(make_app, tmp_path):
    """Item 1: the port is free at the check, another server binds it while ours is still starting."""
    from console_support import DemoServer

    app = make_app(["--load", "fixed:8", "--startup-seconds", "1.5"])  # the other one binds first
    port = int(app.cfg.url.rsplit(":", 1)[1])
    other = None
    try:
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: app.proc is not None and app.proc.pid is not None, what="child started")
            other = DemoServer(tmp_path, ["--load", "fixed:8", "--speculative-disable-batch-threshold", "50"],
                               port=port).wait_ready()
            await wait_for(pilot, lambda: app.model.connection.foreign, what="foreign listener detected")
            # the status bar takes a second line for it: one more layout pass
            await wait_for(pilot, lambda: "NOT CONNECTED" in screen_text(app), timeout=2, what="the top line")
            assert f"NOT CONNECTED: port {port} is held by pid {other.proc.pid}" in screen_text(app)
            assert app.model.connection.last_error.endswith("not by the server this console started")
            assert "PORT TAKEN" in screen_text(app) and "connected │" not in screen_text(app)
            await pilot.press("plus")
            await pilot.pause(0.2)
            assert "another process holds the port" in (app.model.message or "")
            # ours cannot bind and exits; the console stops polling the port
            await wait_for(pilot, lambda: app.model.process.phase == st.PHASE_CRASHED, what="crash")
            assert "Address already in use" in "\n".join(app.model.process.last_lines) or \
                "could not bind" in "\n".join(app.model.process.last_lines)
            await pilot.press("escape")
            await pilot.pause(0.4)  # two poll intervals
            assert app.model.sample is None and "connected" not in screen_text(app)
        assert other.get("/server_info")["internal_states"][0]["spec_gate"]["threshold"] == 50
        assert "spec_gate: threshold" not in other.log.read_text()
    finally:
        if other is not None:
            other.stop()


async def test_repeated_refusals_do_not_pile_up_and_n_minus_h_1_is_warned(make_app):
    """Items 6 and 10: N=5, H=4, "-" 15 times fast at 80x24: one short notice, the screen stays readable."""
    app = make_app(["--load", "fixed:2", "--speculative-disable-batch-threshold", "5",
                    "--speculative-disable-hysteresis", "4"])
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.model.gate is not None, what="spec_gate")
        for _ in range(15):
            app.post_message(events.Key("minus", "-"))
        await wait_for(pilot, lambda: len([t for t in log_texts(app).splitlines() if "refused" in t]) >= 1,
                       what="the refusal in the log")
        await pilot.pause(0.3)
        # the log pane does not pile them up either (fresh-user finding: 14 identical lines)
        assert len([t for t in log_texts(app).splitlines() if "refused" in t]) == 1
        assert notifications(app) == ["threshold 4 refused: must be > hysteresis 4"]
        lines = screen_text(app).splitlines()
        assert "DEMO simulated" in lines[0] and "connected" in lines[0]  # the header is not covered
        assert "Load · requests" in lines[1] and "running 2" in lines[2]
        assert "N-H = 1: once off, never back on" in "\n".join(lines)


async def test_a_standing_alarm_is_above_the_last_outcome_on_a_short_panel(make_app):
    """Fresh-user finding: at 100x30 a refusal message pushed "N-H = 1" below the panel's fold."""
    app = make_app(["--load", "fixed:2", "--speculative-disable-batch-threshold", "40",
                    "--speculative-disable-hysteresis", "39"])
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: app.model.gate is not None, what="spec_gate")
        app.post_message(events.Key("minus", "-"))
        await wait_for(pilot, lambda: "refused" in (app.model.message or ""), what="the refusal")
        await pilot.pause(0.3)
        text = screen_text(app)
        assert "N-H = 1: once off, never back on" in text and "threshold 39 refused" in text
        assert text.index("N-H = 1") < text.index("threshold 39 refused")


async def test_notices_follow_the_server_after_a_freeze(tmp_path):
    """Item 8: a change the frozen server applied late is confirmed; "unreachable" notices go away."""
    import os
    import signal

    from console_support import DemoServer

    srv = DemoServer(tmp_path, ["--load", "fixed:8"]).wait_ready()
    cfg = AppConfig(mode="attach", url=srv.url, log_path=srv.log, interval_s=0.2, handle_signals=False)
    app = SpecConsoleApp(cfg, nvml_module=fake_gpus(), http_timeout_s=0.5)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: app.model.gate is not None, what="spec_gate")
            app.backoff.max_s = 0.4  # keep the test short: retry soon after the freeze
            os.killpg(srv.proc.pid, signal.SIGSTOP)
            await pilot.press("plus")  # sent, but no answer: the server is frozen
            await wait_for(pilot, lambda: "no answer from server" in (app.model.message or ""), what="timeout")
            await wait_for(pilot, lambda: app.model.connection.reachable is False, what="unreachable")
            await pilot.press("plus")  # refused while down
            await pilot.pause(0.1)
            assert "server not answering (timed out): threshold not changed" in notifications(app)
            os.killpg(srv.proc.pid, signal.SIGCONT)  # the frozen request is served now
            await wait_for(pilot, lambda: app.model.gate.threshold == 33 and app.model.connection.reachable,
                           what="late change visible")
            await wait_for(pilot, lambda: "confirmed" in (app.model.message or ""), what="late confirmation")
            await pilot.pause(0.2)
            top = "\n".join(screen_text(app).splitlines()[:10])  # header, Speculation and Load panels
            assert "threshold 32 -> 33 confirmed by spec_gate (applied, although the request was not answered as expected)" in log_texts(app)
            assert "threshold 33 req" in top and "confirmed" in top
            assert "not answering" not in top and "no answer from server" not in top
            assert not [n for n in notifications(app) if "not answering" in n]
    finally:
        try:
            os.killpg(srv.proc.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
        srv.stop()


async def test_tall_terminal_shows_every_speculation_detail_without_scrolling(make_app):
    """Fresh-user finding: at 220x60 the details still scrolled while the log had empty rows."""
    app = make_app(["--load", "fixed:8"])
    async with app.run_test(size=(220, 60)) as pilot:
        await wait_for(pilot, lambda: app.model.gate is not None, what="spec_gate")
        await pilot.pause(0.5)
        scroll = app.screen.query_one("#spec-scroll")
        assert scroll.max_scroll_y == 0, (scroll.virtual_size, scroll.size)


async def test_footer_drops_the_threshold_keys_while_a_text_box_has_focus(make_app):
    """Fresh-user finding: while typing a search the footer still offered + - t (they are text there)."""
    app = make_app(["--load", "fixed:8"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.model.gate is not None, what="spec_gate")
        await pilot.pause(0.2)
        assert "Thr+1" in screen_text(app)
        await pilot.press("slash")
        await pilot.pause(0.3)
        assert "Thr+1" not in screen_text(app) and "Set" not in screen_text(app).splitlines()[-1]
        await pilot.press("escape")
        await pilot.pause(0.3)
        assert "Thr+1" in screen_text(app)


class _OneLog:
    """A bare app holding one LogView of 500 lines (every ``every``-th with ``spec_gate``),
    paused with line ``top`` at the top of the view."""

    def __init__(self, every: int, top: int):
        from textual.app import App

        class OneLog(App):
            def compose(self):
                yield LogView(id="v")

        self.app, self.every, self.top = OneLog(), every, top

    async def __aenter__(self):
        self._ctx = self.app.run_test(size=(80, 20))
        pilot = await self._ctx.__aenter__()
        view = self.app.query_one(LogView)
        view.add_lines([f"line {i} {'spec_gate: x' if i % self.every == 0 else 'decode'}" for i in range(500)])
        await pilot.pause()
        view.follow = False
        view.scroll_to(y=self.top, animate=False, immediate=True)
        await pilot.pause()
        return pilot, view

    async def __aexit__(self, *exc):
        return await self._ctx.__aexit__(*exc)


def _top_line(view) -> str:
    return view.visible_texts()[int(view.scroll_offset.y)]


async def test_changing_the_filter_while_paused_keeps_the_line_at_the_top():
    """Paused in the middle of the log, a filter on and off again returns to the same line, not to
    line 1 (fresh-user pass 3: `f` then `c` jumped to the first line of the log)."""
    async with _OneLog(every=10, top=200) as (pilot, view):
        assert _top_line(view).startswith("line 200 ")
        view.include = "spec_gate"
        await pilot.pause()
        assert _top_line(view).startswith("line 200 ")  # line 200 matches: it stays on top
        view.scroll_to(y=25, animate=False, immediate=True)  # filtered row 25 = line 250
        await pilot.pause()
        view.include = ""
        await pilot.pause()
        assert _top_line(view).startswith("line 250 ")
        assert view.follow is False


async def test_a_filter_that_fits_one_screen_and_then_clear_returns_to_the_same_line():
    """Fresh-user pass 4: paused at line 300, a filter whose few lines fit on one screen, then
    clear: the view went to the first line of the log instead of line 300."""
    async with _OneLog(every=100, top=300) as (pilot, view):
        view.include = "spec_gate"  # 5 lines: all on one screen, the view starts at row 0
        await pilot.pause()
        assert len(view.visible_texts()) == 5
        view.include = ""
        await pilot.pause()
        assert _top_line(view).startswith("line 300 ")


def _burst(app: SpecConsoleApp, *keys: str) -> None:
    """Queue ``keys`` at the app at once, as one read from the terminal delivers them (ssh lag,
    a paste, ``tmux send-keys``): none is handled before all are queued."""
    for key in keys:
        char = key if len(key) == 1 else {"minus": "-", "plus": "+", "slash": "/", "question_mark": "?"}.get(key)
        app.post_message(events.Key(key, char))


async def test_keys_typed_after_slash_are_the_search_not_hotkeys(make_app):
    """Second fresh-user pass: `/ - - Enter` (a search for "--") stepped the live threshold twice."""
    app = make_app(["--load", "fixed:8"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.model.gate is not None, what="spec_gate")
        _burst(app, "slash", "minus", "minus", "enter")
        await wait_for(pilot, lambda: app.main_screen.query_one(LogView).search == "--", what="search --")
        await pilot.pause(0.3)
        assert app.model.pending is None and (await server_gate(app.cfg.url))["threshold"] == 32
        assert "request threshold" not in app.cfg.log_path.read_text()


async def test_a_burst_that_opens_the_dialog_and_tabs_sets_both_fields(make_app):
    """Second fresh-user pass: `t End BSpace BSpace 2 0 Tab End BSpace 3 Enter` applied N 23 (H 4)
    or cleared both fields; typed one key at a time it gives N 20, H 3."""
    app = make_app(["--load", "fixed:8"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.model.gate is not None, what="spec_gate")
        _burst(app, "t", "end", "backspace", "backspace", "2", "0", "tab", "end", "backspace", "3", "enter")
        await wait_for(pilot, lambda: (app.model.gate.threshold, app.model.gate.hysteresis) == (20, 3),
                       what="N 20, H 3 confirmed")
        gate = await server_gate(app.cfg.url)
        assert (gate["threshold"], gate["hysteresis"]) == (20, 3)


async def test_keys_after_the_dialogs_enter_in_one_burst_act_after_it_and_a_second_enter_is_harmless(make_app):
    """Third fresh-user pass: `t End BSpace BSpace 4 0 Tab 3 Enter 5 Enter` sent H 35 (the 5 typed
    into the field before the first Enter was handled) and the second Enter crashed the console
    (ScreenStackError), stopping the server it launched. A later pass (2026-12-04): `t ... 4 0 Enter
    + +` left N 40 (both + lost). The keys after the Enter now wait until it is handled, then act
    where the focus is: the main screen after a sent value, the field after a refused one."""
    app = make_app(["--load", "fixed:8"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.model.gate is not None, what="spec_gate")
        _burst(app, "t", "end", "backspace", "backspace", "4", "0", "tab", "end", "backspace", "3", "enter",
               "5", "enter", "escape")
        await wait_for(pilot, lambda: (app.model.gate.threshold, app.model.gate.hysteresis) == (40, 3),
                       what="N 40, H 3 confirmed")
        await pilot.pause(0.3)
        assert app.is_running and app.screen is app.main_screen
        gate = await server_gate(app.cfg.url)
        assert (gate["threshold"], gate["hysteresis"]) == (40, 3)
        # + + after the dialog's Enter step the value the dialog sent
        _burst(app, "t", "end", "backspace", "backspace", "2", "0", "enter", "plus", "plus")
        await wait_for(pilot, lambda: app.model.gate.threshold == 22, what="N 20 sent, then + + -> 22")
        assert app.screen is app.main_screen
        # a refused value keeps the dialog open, and the keys typed after its Enter edit the field
        _burst(app, "t", "end", "backspace", "backspace", "0", "enter", "backspace", "9", "enter")
        await wait_for(pilot, lambda: app.model.gate.threshold == 9, what="0 refused, then N 9 sent")
        assert app.screen is app.main_screen


async def test_a_hold_outlasts_a_slow_app_and_keeps_the_keys_in_order(make_app, monkeypatch):
    """A fresh-clone CI run on a loaded machine (2026-12-07): `t ... 2 0 Enter + +` left N 20.
    The hold's 0.5 s timer had replayed the + + while the dialog's submission was still queued
    (they reached the frozen field and were lost), and a replay posted the held keys behind
    those still queued. With the hold's check every millisecond (an app slower than the check),
    what the hold waits for is still on its way at every check, and the keys keep their order."""
    import console.textual_compat as compat

    monkeypatch.setattr(compat, "HOLD_MAX_S", 0.001)
    app = make_app(["--load", "fixed:8"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.model.gate is not None, what="spec_gate")
        _burst(app, "enter", "t", "5", "enter")
        await wait_for(pilot, lambda: app.model.gate.threshold == 5, what="N 5 sent")
        _burst(app, "t", "end", "backspace", "2", "0", "enter", "plus", "plus")
        await wait_for(pilot, lambda: app.model.gate.threshold == 22, what="N 20 sent, then + + -> 22")
        view = app.main_screen.query_one(LogView)
        _burst(app, "f", "D", "e", "c", "o", "d", "e", "enter", "p")
        await wait_for(pilot, lambda: view.include == "Decode" and not view.follow, what="filter set, then paused")
        assert app.is_running and app.screen is app.main_screen


async def test_keys_after_a_log_prompts_enter_in_one_burst_act_on_the_log(make_app):
    """Fresh-user pass of 2026-12-04: `f D e c o d e Enter p` set the filter and lost the p."""
    app = make_app(["--load", "fixed:8"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.model.gate is not None, what="spec_gate")
        view = app.main_screen.query_one(LogView)
        assert view.follow
        _burst(app, "f", "D", "e", "c", "o", "d", "e", "enter", "p")
        await wait_for(pilot, lambda: view.include == "Decode" and not view.follow, what="filter set, then paused")


async def test_hotkeys_in_a_burst_act_in_order_and_reach_the_screen_on_top(make_app):
    """`- - ?` then `q`: two steps, the help screen, and `q` closes the help (not the app); a held
    key is replayed even if no focus change comes."""
    app = make_app(["--load", "fixed:8"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.model.gate is not None, what="spec_gate")
        _burst(app, "minus", "minus", "question_mark", "q")
        await wait_for(pilot, lambda: app.model.gate.threshold == 30, what="threshold 30")
        await pilot.pause(0.3)
        assert app.is_running and app.screen is app.main_screen  # help opened and closed by q
        assert [b.action for _n, b in app.bindings_on_arrival("minus", "-")] == ["threshold_step(-1)", "readonly_notice"]
        app.hold_keys()
        _burst(app, "plus")
        await pilot.pause(0.1)
        assert app.model.pending is None  # held
        await wait_for(pilot, lambda: app.model.gate.threshold == 31, what="held + replayed after HOLD_MAX_S")
        await pilot.press("slash")
        await pilot.pause(0.2)
        # a text field has the focus: Textual's own handling for what it takes (typed text, its own
        # keys); a key it does not take is resolved on arrival (Tab: the screen's focus_next)
        assert app.bindings_on_arrival("minus", "-") is None and app.bindings_on_arrival("end") is None
        assert [b.action for _n, b in app.bindings_on_arrival("tab")] == ["app.focus_next"]


@pytest.mark.parametrize("burst,want", [
    # the third keyboard pass: an unconsumed Enter came back up after `t` had opened the dialog and
    # submitted it (sending 20 unconfirmed), or crashed the console (ScreenStackError)
    (["enter", "t", "end", "backspace", "backspace", "2", "0"], "dialog open, 20 typed"),
    (["enter", "t", "5", "enter"], "N 5 sent"),
    # a stray Backspace on the main screen came back up and deleted in the dialog's field
    (["backspace", "t", "end", "1"], "dialog open, 321 typed"),
])
async def test_a_key_nothing_binds_does_not_reach_the_screen_opened_after_it(make_app, burst, want):
    app = make_app(["--load", "fixed:8"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.model.gate is not None, what="spec_gate")
        _burst(app, *burst)
        await pilot.pause(0.8)
        if want == "N 5 sent":
            await wait_for(pilot, lambda: app.model.gate.threshold == 5, what="threshold 5")
            assert app.is_running and app.screen is app.main_screen
            return
        assert app.screen.__class__.__name__ == "ThresholdDialog"
        assert app.screen.query_one("#threshold-input").value == want.split()[2]
        assert app.model.pending is None and (await server_gate(app.cfg.url))["threshold"] == 32


async def test_tab_then_slash_in_a_burst_opens_a_working_prompt(make_app):
    """Third keyboard pass: `Tab / a b Enter` left an empty prompt without the focus (the Tab's
    focus change released the keys held for the prompt)."""
    app = make_app(["--load", "fixed:8"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.model.gate is not None, what="spec_gate")
        _burst(app, "tab", "slash", "a", "b", "enter")
        await wait_for(pilot, lambda: app.main_screen.query_one(LogView).search == "ab", what="search ab")


async def test_end_then_home_in_a_burst_ends_paused_at_the_top(make_app):
    """Third keyboard pass: `End Home` in one burst showed PAUSED but left the view at the bottom
    (End's second, deferred scroll to the end ran after Home)."""
    app = make_app(["--load", "fixed:8"])
    async with app.run_test(size=SIZE) as pilot:
        view = app.main_screen.query_one(LogView)
        await wait_for(pilot, lambda: len(view.shown) > 40, timeout=30, what="a log longer than the pane")
        view.focus()
        await pilot.press("home")
        _burst(app, "end", "home")
        await pilot.pause(0.8)  # Home's smooth scroll and End's deferred one, if any, have run
        # near the top, not at the bottom (a line or two down at most: new lines keep arriving)
        assert view.follow is False and view.scroll_y < view.max_scroll_y / 4, (view.scroll_y, view.max_scroll_y)


async def test_a_terminal_below_80x24_gets_one_notice_saying_so(make_app):
    """Fresh-user find: below 80x24 parts were cut off without a word."""
    app = make_app()
    async with app.run_test(size=(70, 20)) as pilot:
        await wait_for(pilot, lambda: any("needs 80x24" in n for n in notifications(app)), what="size notice")
        assert [n for n in notifications(app) if "needs 80x24" in n] == [
            "terminal 70x20: specconsole needs 80x24 or more; parts are cut off"]
        await pilot.resize_terminal(60, 15)  # smaller still: the one notice says the size now
        await pilot.pause()
        await pilot.pause()
        assert [n for n in notifications(app) if "needs 80x24" in n] == [
            "terminal 60x15: specconsole needs 80x24 or more; parts are cut off"]
        await pilot.resize_terminal(100, 30)  # big enough again: the notice goes at once, not after its 8 s
        await pilot.pause()
        assert not [n for n in notifications(app) if "needs 80x24" in n]


async def test_a_long_interval_still_sees_the_launched_server_become_ready_and_tails_its_log(make_app):
    """Fresh-user find: with --interval 3600 a launched (demo) server stayed "starting" for an hour,
    the log pane stopped, and + said "server unreachable (connection refused)"."""
    app = make_app(interval_s=3600.0)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.model.process is not None and app.model.process.phase == st.PHASE_READY
                       and app.model.sample is not None, what="ready and polled")
        await wait_for(pilot, lambda: "Decode batch" in log_texts(app), what="the log followed")
        seen = log_texts(app).count("Decode batch")
        await wait_for(pilot, lambda: log_texts(app).count("Decode batch") > seen, timeout=6.0,
                       what="new log lines within the log pane's own cadence")


def test_a_threshold_change_while_the_server_starts_says_it_is_starting():
    from console.model import ConsoleModel

    m = ConsoleModel()
    m.on_process(st.ProcessState(phase=st.PHASE_LOADING))
    m.on_failure("connection refused")
    assert m.check_request(33) == "the server is still starting (loading weights): threshold not changed"


async def test_the_demo_server_logs_every_request_as_sglang_does_and_o_shows_the_consoles_own(make_app):
    """Fresh-user find: the demo wrote no access lines, so `o` had nothing to hide or show there."""
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: "hidden (o" in str(app.main_screen.query_one("#log-panel").border_title),
                       what="the title says the polls are hidden")
        assert not any('"GET /server_info' in t for t in log_texts(app).splitlines())
        await pilot.press("o")
        await wait_for(pilot, lambda: '"GET /server_info HTTP/1.1" 200 OK' in log_texts(app), what="own polls shown")
