"""Several servers: ``attach URL1 URL2`` against two demo servers (Textual Pilot), the server
list model, the config file's ``[[servers]]``, the CLI, and SGLang's router (``/list_workers``)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from console import cli
from console import state as st
from console.app import SpecConsoleApp
from console.config import AppConfig, ConfigError, ServerTarget, load_config
from console.nvml_sim import SimDevice, SimulatedNvml
from console.servers import LogBuffer, ServerFocus, expand_routers, router_workers, server_row
from console.widgets.log_view import LogView
from console.widgets.server_list import ServerList
from server_patch.contract import MODE_AUTO
from console_support import DemoServer, free_port, screen_text, wait_for

SIZE = (100, 34)


def gate_of(server: DemoServer) -> dict:
    return server.get("/server_info")["internal_states"][0]["spec_gate"]


def ready(servers: list[DemoServer]):
    """Yield ``servers`` once every one answers; stop them all afterwards (a fixture's body)."""
    try:
        for s in servers:
            s.wait_ready()
        yield servers
    finally:
        for s in servers:
            s.stop()


@pytest.fixture
def two_servers(tmp_path):
    yield from ready([DemoServer(tmp_path, ["--load", "fixed:8"]), DemoServer(tmp_path, ["--load", "fixed:12"])])


def multi_cfg(servers, logs: bool = True, **kw) -> AppConfig:
    targets = tuple(ServerTarget(s.url, s.log if logs else None) for s in servers)
    return cli.multi_config(AppConfig(interval_s=0.2, handle_signals=False, **kw), targets)


def rows(app: SpecConsoleApp) -> list[str]:
    return app.main_screen.query_one(ServerList).plain_lines()


async def fill_all_dialog(pilot, app: SpecConsoleApp, threshold: str, hysteresis: str | None = None) -> None:
    """Type into the ``T`` dialog's fields and press Enter."""
    await pilot.pause(0.1)
    app.screen.query_one("#threshold-input").value = threshold
    if hysteresis is not None:
        app.screen.query_one("#hysteresis-input").value = hysteresis
    await pilot.press("enter")


def log_texts(app: SpecConsoleApp) -> str:
    return "\n".join(app.main_screen.query_one(LogView).visible_texts())


async def test_two_servers_list_focus_and_threshold_to_one_and_to_all(two_servers):
    a, b = two_servers
    app = SpecConsoleApp(multi_cfg(two_servers), nvml_module=SimulatedNvml(devices=[SimDevice()]))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: all(r.connected == "ok" and r.spec == "ON" for r in app.server_rows),
                       what="both rows connected")
        await wait_for(pilot, lambda: app.server_rows[1].batch == "12" and app.server_rows[0].batch == "8",
                       what="batch per server")
        text = rows(app)
        assert text[0].split()[:8] == ["server", "·", "[", "]", "·", "T", "conn", "SPEC"]
        assert text[1].startswith("▶ " + a.url.removeprefix("http://")) and "32·4" in text[1]
        assert text[2].startswith("  " + b.url.removeprefix("http://")) and "EAGLEWorkerV2" in text[2]
        assert a.url.removeprefix("http://") in screen_text(app)
        await wait_for(pilot, lambda: f"demo-{a.port}.log" in app._log_panel().border_title, what="log title")
        await wait_for(pilot, lambda: "spec_gate: worker=" in log_texts(app), what="server a's log")

        # focus the second server: the panels, the log pane and the keys follow
        await pilot.press("right_square_bracket")
        await wait_for(pilot, lambda: app.main_screen.snapshot.url == b.url, what="focus on b")
        assert rows(app)[2].startswith("▶ ") and app.session is app.sessions[1]
        await wait_for(pilot, lambda: "running 12" in screen_text(app), what="b's load panel")
        assert f"demo-{b.port}.log" in app._log_panel().border_title

        # a threshold change goes to the focused server only
        await pilot.press("plus")
        await wait_for(pilot, lambda: gate_of(b)["threshold"] == 33, what="b's threshold")
        await wait_for(pilot, lambda: app.server_rows[1].n_h == "33·4", what="b's row confirmed")
        assert gate_of(a)["threshold"] == 32
        assert f"#2 {b.url.removeprefix('http://')}: " in log_texts(app)

        # back and forth wraps
        await pilot.press("right_square_bracket")
        await wait_for(pilot, lambda: app.session is app.sessions[0], what="wrap to a")
        await pilot.press("left_square_bracket")
        await wait_for(pilot, lambda: app.session is app.sessions[1], what="back to b")

        # T: one threshold for all, after a confirm; each confirmed by its own spec_gate
        await pilot.press("T")
        await wait_for(pilot, lambda: app.screen.__class__.__name__ == "AllThresholdDialog", what="dialog")
        await fill_all_dialog(pilot, app, "40", "6")
        await wait_for(pilot, lambda: app.screen.__class__.__name__ == "ConfirmAllScreen", what="confirm")
        assert "to all 2 servers" in screen_text(app)
        await pilot.press("y")
        await wait_for(pilot, lambda: (gate_of(a)["threshold"], gate_of(b)["threshold"]) == (40, 40), what="both 40")
        assert gate_of(a)["hysteresis"] == gate_of(b)["hysteresis"] == 6
        await wait_for(pilot, lambda: [r.n_h for r in app.server_rows] == ["40·6", "40·6"], what="rows confirmed")
        logs = log_texts(app)
        for s in (a, b):
            assert f"{s.url.removeprefix('http://')}: " in logs


async def test_threshold_to_all_cancelled_sends_nothing(two_servers):
    a, b = two_servers
    app = SpecConsoleApp(multi_cfg(two_servers, logs=False), nvml_module=SimulatedNvml(devices=[SimDevice()]))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: all(r.spec == "ON" for r in app.server_rows), what="rows")
        assert "none for this server" in app._log_panel().border_title
        await pilot.press("T")
        await wait_for(pilot, lambda: app.screen.__class__.__name__ == "AllThresholdDialog", what="dialog")
        await fill_all_dialog(pilot, app, "20")
        await wait_for(pilot, lambda: app.screen.__class__.__name__ == "ConfirmAllScreen", what="confirm")
        await pilot.press("n")
        await pilot.pause(0.5)
        assert gate_of(a)["threshold"] == gate_of(b)["threshold"] == 32


@pytest.fixture
def small_and_large(tmp_path):
    """Two demo servers, max running requests 20 (threshold 16) and 96 (32), the small one first."""
    yield from ready([DemoServer(tmp_path, ["--load", "fixed:8", "--max-running-requests", "20",
                                            "--speculative-disable-batch-threshold", "16"]),
                      DemoServer(tmp_path, ["--load", "fixed:8"])])


async def send_to_all(app: SpecConsoleApp, pilot, threshold: str) -> None:
    """``T``, ``threshold`` in the dialog, Enter: waits for the confirm screen."""
    await wait_for(pilot, lambda: all(r.spec == "ON" for r in app.server_rows), what="rows")
    await pilot.press("T")
    await wait_for(pilot, lambda: app.screen.__class__.__name__ == "AllThresholdDialog", what="dialog")
    await fill_all_dialog(pilot, app, threshold)
    await wait_for(pilot, lambda: app.screen.__class__.__name__ == "ConfirmAllScreen", what="confirm")


async def test_threshold_to_all_allows_the_largest_limit_and_names_the_servers_that_will_refuse(small_and_large):
    """The small server focused: 30 for all is not refused by the dialog (the large one takes it);
    the confirm names the small one, which refuses."""
    small, large = small_and_large
    app = SpecConsoleApp(multi_cfg(small_and_large, logs=False), nvml_module=SimulatedNvml(devices=[SimDevice()]))
    async with app.run_test(size=SIZE) as pilot:
        await send_to_all(app, pilot, "30")
        assert app.screen.refusing == [f"#1 {small.url.removeprefix('http://')} (20)"]
        assert "will refuse it" in app.screen.text
        await pilot.press("y")
        await wait_for(pilot, lambda: gate_of(large)["threshold"] == 30, what="the large server changed")
        assert gate_of(small)["threshold"] == 16


async def test_auto_to_all_servers_is_confirmed_and_refused_by_none(small_and_large):
    """``T`` with ``auto``: no server's max running requests is compared with it (a new user's
    report: the dialog offered ``auto`` and the console then crashed comparing it with 20)."""
    small, large = small_and_large
    app = SpecConsoleApp(multi_cfg(small_and_large, logs=False), nvml_module=SimulatedNvml(devices=[SimDevice()]))
    async with app.run_test(size=SIZE) as pilot:
        await send_to_all(app, pilot, "auto")
        assert app.screen.refusing == []
        await pilot.press("y")
        await wait_for(pilot, lambda: gate_of(small)["mode"] == gate_of(large)["mode"] == MODE_AUTO,
                       what="both servers on the auto threshold")


async def test_an_unreachable_server_is_a_row_and_blanks_nothing(tmp_path):
    a = DemoServer(tmp_path, ["--load", "fixed:8"]).wait_ready()
    dead = f"http://127.0.0.1:{free_port()}"
    try:
        cfg = cli.multi_config(AppConfig(interval_s=0.2, handle_signals=False),
                               (ServerTarget(dead), ServerTarget(a.url)))
        app = SpecConsoleApp(cfg, nvml_module=SimulatedNvml(devices=[SimDevice()]))
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: app.server_rows[0].connected == "DOWN" and app.server_rows[1].spec == "ON",
                           what="a down row and a live one")
            await pilot.press("plus")  # the focused server is down: refused, nothing crashes
            await pilot.press("right_square_bracket")
            await wait_for(pilot, lambda: "SPEC ON" in screen_text(app), what="the live one in the panels")
            await pilot.press("T")
            await wait_for(pilot, lambda: app.screen.__class__.__name__ == "AllThresholdDialog", what="dialog")
            await fill_all_dialog(pilot, app, "24")
            await wait_for(pilot, lambda: app.screen.__class__.__name__ == "ConfirmAllScreen", what="confirm")
            await pilot.press("y")
            await wait_for(pilot, lambda: gate_of(a)["threshold"] == 24, what="the live server changed")
            await wait_for(pilot, lambda: "#1 127.0.0.1" in log_texts(app) and "not changed" in log_texts(app),
                           what="the dead one's outcome")
    finally:
        a.stop()


async def test_one_server_shows_no_server_list(tmp_path):
    a = DemoServer(tmp_path, ["--load", "fixed:8"]).wait_ready()
    try:
        app = SpecConsoleApp(AppConfig(url=a.url, interval_s=0.2, handle_signals=False),
                             nvml_module=SimulatedNvml(devices=[SimDevice()]))
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: "SPEC ON" in screen_text(app), what="panels")
            assert not app.multi and not app.main_screen.query(ServerList)
            await pilot.press("right_square_bracket", "T")
            await pilot.pause(0.2)
            assert app.screen is app.main_screen and app.session is app.sessions[0]
    finally:
        a.stop()


# -- the model, without a UI --------------------------------------------------------------------


def test_server_row_cells():
    snap = st.ConsoleSnapshot(url="http://h:1")
    row = server_row(snap)
    assert (row.url, row.connected, row.spec, row.n_h, row.batch, row.worker) == ("h:1", "…", "n/a", "n/a", "n/a", "n/a")
    down = st.ConsoleSnapshot(url="https://h:2", connection=st.ConnectionState(url="https://h:2", reachable=False))
    assert server_row(down).connected == "DOWN" and server_row(down).url == "https://h:2"


def test_focus_wraps_and_log_buffer_keeps_runs():
    f = ServerFocus(3)
    assert [f.move(1), f.move(1), f.move(1), f.move(-1)] == [1, 2, 0, 2]
    buf = LogBuffer(max_lines=5)
    buf.add([("info", "a"), ("info", "b")], [0, 1], 7, 2)
    buf.add([("console", "[console] x")])
    buf.add([("info", "c")], [2], 7, 3)
    buf.add([("info", "z")], [0], 8, 1)  # another file
    runs = buf.runs()
    assert [(len(r[0]), r[1], r[2], r[3]) for r in runs] == [(4, [0, 1, None, 2], 7, 3), (1, [0], 8, 1)]
    buf.add([("info", str(i)) for i in range(5)], list(range(1, 6)), 8, 6)
    assert buf.lines <= 5 + 1 and buf.batches[-1][3] == 6


# -- config file and CLI ------------------------------------------------------------------------


def test_config_file_servers(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    (tmp_path / "specconsole.toml").write_text(
        '[[servers]]\nurl = "10.0.0.5:30000"\nlog = "a.log"\n\n[[servers]]\nurl = "http://10.0.0.6:30000"\napi_key = "k"\n')
    cfg = cli.resolve([])
    assert cfg.mode == "attach" and cfg.url == "http://10.0.0.5:30000" and cfg.log_path == Path("a.log")
    assert [(t.url, t.log_path, t.api_key) for t in cfg.servers] == [
        ("http://10.0.0.5:30000", Path("a.log"), None), ("http://10.0.0.6:30000", None, "k")]


@pytest.mark.parametrize("text, error", [
    ('[[servers]]\nlog = "a"\n', "has no url"),
    ('[[servers]]\nurl = "h:1"\nport = 3\n', "unknown key(s) port"),
    ('servers = []\n', "servers is empty"),
    ('servers = "h:1"\n', "list of tables"),
    ('[server]\nattach = "h:1"\n[[servers]]\nurl = "h:2"\n', "exclude each other"),
    ('[server]\n[[servers]]\nurl = "h:2"\n', "exclude each other"),  # an empty [server] too (docs/console.md)
])
def test_config_file_servers_errors(tmp_path, text, error):
    path = tmp_path / "specconsole.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=error.replace("(", r"\(").replace(")", r"\)")):
        load_config(path)


def test_config_file_duplicate_server_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    (tmp_path / "specconsole.toml").write_text('[[servers]]\nurl = "h:1"\n[[servers]]\nurl = "http://h:1/"\n')
    with pytest.raises(SystemExit):
        cli.resolve([])
    assert "server http://h:1 is given twice" in capsys.readouterr().err


def test_cli_attach_several(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    cfg = cli.resolve(["attach", "h:1", "h:2", "--log", "a.log", "--log", "b.log", "--api-key", "k"])
    assert [(t.url, t.log_path, t.api_key) for t in cfg.servers] == [
        ("http://h:1", Path("a.log"), "k"), ("http://h:2", Path("b.log"), "k")]
    one = cli.resolve(["attach", "h:1", "--log", "a.log"])
    assert one.servers == () and one.log_path == Path("a.log") and one.url == "http://h:1"
    for argv, error in ((["attach", "h:1", "h:1/"], "attach: error: server http://h:1 is given twice"),
                        (["attach", "http://H:80", "h"], "server http://h is given twice (as http://H:80)"),
                        (["attach", "https://h", "https://h:443/"], "server https://h:443 is given twice (as https://h)"),
                        (["attach", "h:1", "h:2", "--log", "a.log"], "2 servers and 1 --log"),
                        (["attach", "h:1", "--log", "a", "--log", "b"], "one server takes one --log"),
                        (["attach", "h:1", "ftp://h:2"], "use http:// or https://")):
        with pytest.raises(SystemExit):
            cli.resolve(argv)
        assert error in capsys.readouterr().err
    two = cli.resolve(["attach", "http://h", "https://h"])  # other scheme, other server
    assert [t.url for t in two.servers] == ["http://h", "https://h"]


# -- SGLang's router ----------------------------------------------------------------------------


class _Router(BaseHTTPRequestHandler):
    answer: object = {"urls": []}
    seen_auth: list = []

    def do_GET(self):  # noqa: N802 - http.server's name
        type(self).seen_auth.append(self.headers.get("Authorization"))
        if self.path != "/list_workers":
            self.send_response(404)
            self.end_headers()
            return
        body = json.dumps(self.answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def router():
    handler = type("Router", (_Router,), {"answer": {"urls": []}, "seen_auth": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield handler, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_router_url_becomes_its_workers(router):
    handler, url = router
    handler.answer = {"urls": ["http://10.0.0.1:30000", "10.0.0.2:30000/", "not a url at all"]}
    assert router_workers(url, api_key="secret") == ["http://10.0.0.1:30000", "http://10.0.0.2:30000"]
    assert handler.seen_auth[-1] == "Bearer secret"
    cfg = expand_routers(AppConfig(url=url))
    assert [t.url for t in cfg.servers] == ["http://10.0.0.1:30000", "http://10.0.0.2:30000"]
    assert cfg.url == "http://10.0.0.1:30000" and "is SGLang's router" in cfg.notes[0]
    # a worker also given on its own is shown once
    both = cli.multi_config(AppConfig(), (ServerTarget(url), ServerTarget("http://10.0.0.2:30000")))
    assert [t.url for t in expand_routers(both).servers] == ["http://10.0.0.1:30000", "http://10.0.0.2:30000"]
    # ...and keeps its own --log whichever comes first (fresh-user find: the router first lost it)
    log = Path("/var/log/w2.log")
    for targets in ((ServerTarget(url), ServerTarget("http://10.0.0.2:30000", log)),
                    (ServerTarget("http://10.0.0.2:30000", log), ServerTarget(url))):
        got = {t.url: t.log_path for t in expand_routers(cli.multi_config(AppConfig(), targets)).servers}
        assert got == {"http://10.0.0.1:30000": None, "http://10.0.0.2:30000": log}
    handler.answer = {"urls": ["http://10.0.0.9:30000"]}  # one worker: the plain single-server config
    single = expand_routers(AppConfig(url=url))
    assert single.servers == () and single.url == "http://10.0.0.9:30000"


def test_router_without_workers_and_plain_servers_stay(router, tmp_path):
    handler, url = router
    handler.answer = {"urls": []}
    cfg = expand_routers(AppConfig(url=url))
    assert cfg.url == url and cfg.servers == () and "lists no workers" in cfg.notes[0]
    handler.answer = {"something": "else"}
    assert router_workers(url) is None
    dead = f"http://127.0.0.1:{free_port()}"
    assert router_workers(dead) is None
    assert expand_routers(AppConfig(url=dead)) == AppConfig(url=dead)
    demo = DemoServer(tmp_path).wait_ready()  # an SGLang-like server: 404 on /list_workers
    try:
        assert router_workers(demo.url) is None
    finally:
        demo.stop()


def test_router_entries_the_console_cannot_watch_are_left_out_and_said(router):
    """Fresh-user finds: an ftp:// worker was dropped without a word, and one null url made the whole
    router look like a plain server (HTTP 404)."""
    handler, url = router
    handler.answer = {"workers": [{"url": "http://10.0.0.1:30000"}, {"url": None}, {"url": "ftp://10.0.0.2:30000"},
                                  {"url": url}, "http://10.0.0.3:30000"]}
    workers = router_workers(url)
    assert workers == ["http://10.0.0.1:30000", "http://10.0.0.3:30000"]
    assert workers.left_out == ["None", "'ftp://10.0.0.2:30000'", repr(url)]  # the router itself too
    cfg = expand_routers(AppConfig(url=url))
    assert [t.url for t in cfg.servers] == ["http://10.0.0.1:30000", "http://10.0.0.3:30000"]
    assert any("listed 3 worker(s) the console cannot watch" in n and "ftp://10.0.0.2:30000" in n for n in cfg.notes)
    handler.answer = {"urls": [None, "ftp://x:1"]}
    cfg = expand_routers(AppConfig(url=url))
    assert cfg.url == url and "lists no workers the console can watch (left out: None, 'ftp://x:1')" in cfg.notes[0]
