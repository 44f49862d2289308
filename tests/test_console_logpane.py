"""The log pane against real logs: the console's own poll lines, the whole file beyond the lines
the pane holds, and log rotation edge cases of the follower.

The access-log lines are those of a real SGLang 0.5.12 server that ``specconsole launch``
polled (fixture ``server-gate-under-console.log.gz``, see its README); the console's client
used local port 44022 there.
"""

from __future__ import annotations

import gzip
import http.server
import os
import random
import threading
import time
from pathlib import Path

import httpx
import pytest

from console import accesslog, client, logfilter, logindex, logparse, logsearch
from console.app import SpecConsoleApp
from console.config import AppConfig
from console.logfollow import LogFollower
from console.nvml_sim import SimulatedNvml
from console.session import ConsoleSession
from console.widgets.log_panel import OWN_HIDDEN, OWN_SHOWN, log_title
from console.widgets.log_view import LogView
from console_support import free_port, wait_for

#: the recorded real answers: the repository's copy, else the shared one
FIXTURES = next((p for p in (Path(__file__).parent / "fixtures" / "sglang-0.5.12-h200",
                             Path("/work/shared/fixtures/sglang-0.5.12-h200")) if p.is_dir()),
                Path("/work/shared/fixtures/sglang-0.5.12-h200"))
UNDER_CONSOLE = FIXTURES / "server-gate-under-console.log.gz"
CONSOLE_ADDR = "127.0.0.1:44022"
needs_fixture = pytest.mark.skipif(not UNDER_CONSOLE.exists(), reason="real SGLang fixtures not here")


def real_log_lines() -> list[str]:
    # bytes split at "\n" only, as the follower does: its progress bars hold "\r"s
    return gzip.decompress(UNDER_CONSOLE.read_bytes()).decode().split("\n")[:-1]


# -- the console's own requests ----------------------------------------------------------------

@pytest.mark.parametrize("metrics", [False, True], ids=["plain", "enable-metrics"])
async def test_the_own_request_lines_are_exactly_what_the_client_sends(metrics):
    sent: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(f"{request.method} {request.url.raw_path.decode()} HTTP/1.1")
        if request.url.path == "/server_info":
            return httpx.Response(200, json={"internal_states": [{"enable_metrics": metrics}]})
        if request.url.path == "/metrics":
            return httpx.Response(200, text="")
        return httpx.Response(200, json={"loads": []})

    c = client.ServerClient("http://127.0.0.1:1", transport=httpx.MockTransport(answer))
    await c.poll()
    await c.aclose()
    assert set(sent) <= set(client.OWN_REQUEST_LINES) and len(sent) == (3 if metrics else 2)
    # ... and exactly how the real server's access log prints them (fixture lines 91-92)
    assert client.OWN_REQUEST_LINES == ("GET /server_info HTTP/1.1", "GET /v1/loads?include=core%2Cspec HTTP/1.1",
                                        "GET /metrics HTTP/1.1")


async def test_the_client_knows_the_address_the_server_sees():
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):  # noqa: N802 - http.server's name
            seen.append("%s:%d" % self.client_address)  # as uvicorn prints scope["client"]
            body = b'{"internal_states": [{}]}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        c = client.ServerClient(f"http://127.0.0.1:{server.server_port}")
        await c.poll()
        await c.aclose()
    finally:
        server.shutdown()
        server.server_close()
    assert seen and set(seen) <= set(c.local_addresses)


@needs_fixture
def test_own_polls_in_the_real_log_are_recognised_exactly():
    lines = real_log_lines()
    tracker = accesslog.OwnRequestTracker(client.OWN_REQUEST_LINES)
    own = [line for line in lines if tracker.is_own(line, [CONSOLE_ADDR])]
    # every /server_info and /v1/loads poll of the console: 210 polls of two requests
    assert len(own) == 420
    assert all(f"INFO:     {CONSOLE_ADDR} - " in line and line.endswith('" 200 OK') for line in own)
    # (this server ran without --enable-metrics: the console did not poll /metrics)
    assert {accesslog.access_line(line).request for line in own} == set(client.OWN_REQUEST_LINES[:2])
    kept = [line for line in lines if line not in set(own)]
    requests = [a for a in map(accesslog.access_line, kept) if a is not None]
    # other clients stay: the load generator's /server_info from other ports, /generate, /health,
    # /model_info, and the console's own threshold changes (POST /set_internal_state)
    others = [a for a in requests if a.request == "GET /server_info HTTP/1.1"]
    assert len(others) == 32 and CONSOLE_ADDR not in {a.client for a in others}
    assert sum(a.request == "POST /generate HTTP/1.1" for a in requests) == 1977
    assert sum(a.request == "POST /set_internal_state HTTP/1.1" for a in requests) == 3
    assert any(a.request == "GET /health HTTP/1.1" for a in requests)
    assert any("Decode batch" in line for line in kept) and any("spec_gate:" in line for line in kept)

    # the server sees the console through NAT or a proxy (no line from its own address): the
    # exact request lines alone decide
    nat = accesslog.OwnRequestTracker(client.OWN_REQUEST_LINES)
    assert sum(nat.is_own(line, ["10.0.0.7:5555"]) for line in lines) == 420 + 32
    # a failing poll stays visible, and a near miss is not a poll
    failing = '[2026-12-01 20:00:39] INFO:     127.0.0.1:44022 - "GET /v1/loads?include=core%2Cspec HTTP/1.1" 500 Internal Server Error'
    assert not tracker.is_own(failing, [CONSOLE_ADDR])
    assert not tracker.is_own(failing.replace("%2C", ",").replace("500 Internal Server Error", "200 OK"), [CONSOLE_ADDR])


@needs_fixture
def test_the_router_probe_answered_404_is_the_consoles_own_from_any_address_other_answers_stay():
    """attach asks every URL whether it is SGLang's router (GET /workers, then /list_workers): a
    server answers 404, and those two lines are the console's own (a fresh user saw them in the
    pane titled "console polls hidden"); any other answer to them stays visible."""
    from console.servers import ROUTER_PROBE_LINES

    tracker = accesslog.OwnRequestTracker(client.OWN_REQUEST_LINES, ROUTER_PROBE_LINES)
    # a real SGLang 0.5.12 404 line (its GET /metrics without --enable-metrics), the path the probe's
    real_404 = next(line for line in (FIXTURES / "server-no-spec.log").read_text().splitlines()
                    if '"GET /metrics HTTP/1.1" 404 Not Found' in line)
    probe = real_404.replace("/metrics", "/workers")
    assert tracker.is_own(probe, [CONSOLE_ADDR])
    assert tracker.is_own(probe.replace("/workers", "/list_workers"), [CONSOLE_ADDR])
    assert not tracker.is_own(probe.replace("404 Not Found", "500 Internal Server Error"), [CONSOLE_ADDR])
    assert tracker.snapshot([CONSOLE_ADDR]).matches(probe)
    assert not accesslog.OwnRequestTracker(client.OWN_REQUEST_LINES).is_own(probe, [CONSOLE_ADDR])


def attach_app(tmp_path: Path, log: Path) -> SpecConsoleApp:
    cfg = AppConfig(mode="attach", url=f"http://127.0.0.1:{free_port()}", interval_s=0.5, handle_signals=False,
                    log_path=log)
    return SpecConsoleApp(cfg, nvml_module=SimulatedNvml(init_error=12))


def title(app: SpecConsoleApp) -> str:
    return str(app.main_screen.query_one("#log-panel").border_title)


@needs_fixture
async def test_the_log_pane_hides_the_console_polls_of_a_real_log_and_o_shows_them(tmp_path, monkeypatch):
    log = tmp_path / "server.log"
    log.write_bytes(gzip.decompress(UNDER_CONSOLE.read_bytes()))
    # the console that polled this server used 127.0.0.1:44022
    monkeypatch.setattr(ConsoleSession, "_own_addresses", lambda self: [CONSOLE_ADDR])
    app = attach_app(tmp_path, log)
    async with app.run_test(size=(120, 40)) as pilot:
        view = app.main_screen.query_one(LogView)
        await wait_for(pilot, lambda: view.own_lines > 0 and OWN_HIDDEN in title(app), what="log lines")
        texts = view.visible_texts()
        assert not any(f"{CONSOLE_ADDR} - \"GET /" in t for t in texts)
        assert any('"GET /server_info HTTP/1.1"' in t for t in texts)  # other clients' polls stay
        assert any('"POST /set_internal_state HTTP/1.1"' in t for t in texts)
        assert any("spec_gate:" in t for t in texts) and any("Decode batch" in t for t in texts)
        assert OWN_HIDDEN in title(app)
        # at 80 columns the words get shorter so that the counts stay in view
        assert log_title("Log server.log", view, 76).endswith(" · polls hidden (o)")
        assert len(log_title("Log server.log", view, 76)) <= 76
        await pilot.press("o")
        await wait_for(pilot, lambda: OWN_SHOWN in title(app), what="the title after o")
        assert OWN_SHOWN in app.notice_messages()
        assert sum(f"{CONSOLE_ADDR} - \"GET /" in t for t in view.visible_texts()) == view.own_lines
        # the fixture's head (above the 256 KiB read at start) is in the file, and the title says so
        assert f" of {len(real_log_lines()):,}" in title(app) and "lines · last " in title(app)
        await pilot.press("o")
        await pilot.pause(0.1)
        assert not any(f"{CONSOLE_ADDR} - \"GET /" in t for t in view.visible_texts())


# -- the whole file ----------------------------------------------------------------------------

def big_log(path: Path, n: int = 250_000, marks: dict[int, str] | None = None) -> list[str]:
    """A generated log of ``n`` SGLang-like lines (``marks``: line number -> text of that line)."""
    marks = marks or {}
    lines = []
    for i in range(n):
        lines.append(marks.get(i) or f"[2026-12-01 20:{i // 60 % 60:02d}:{i % 60:02d} TP0] Decode batch, "
                     f"#running-req: {i % 97}, #token: 4608, token usage: 0.05, gen throughput (token/s): 2142.00, "
                     f"#queue-req: 0 (line {i})")
    path.write_text("\n".join(lines) + "\n")
    return lines


def test_the_line_index_is_small_and_finds_every_line(tmp_path, monkeypatch):
    path = tmp_path / "big.log"
    lines = big_log(path)
    f = LogFollower(path)
    batch = f.read_batch()
    index = f.index
    assert index.lines == batch.total_lines == 250_000
    assert batch.numbers == list(range(250_000 - len(batch.lines), 250_000))
    assert index.nbytes < 8 * 1024  # 36 MB of log: about 560 block counts, not 250,000 offsets
    fh = logsearch.open_indexed(path, index)
    with fh:
        for start in (0, 1, 65_535, 123_456, 249_999):
            assert next(logsearch.lines_forward(fh, index, start, start + 1)) == (start, lines[start])
            assert next(logsearch.lines_backward(fh, index, 0, start + 1)) == (start, lines[start])

    # small blocks and reads: every range forward and backward, against a plain split
    monkeypatch.setattr(logindex, "BLOCK_BYTES", 64)
    monkeypatch.setattr(logsearch, "READ_BYTES", 50)
    rnd = random.Random(7)
    for _ in range(200):
        small = ["".join(rnd.choice("ab\t") for _ in range(rnd.randint(0, 130))) for _ in range(rnd.randint(0, 50))]
        path.write_text("".join(s + "\n" for s in small) + "partial")
        f = LogFollower(path, initial_tail_bytes=rnd.choice([10, 100, 10**6]))
        f.read_batch()
        assert f.index.lines == len(small)
        with logsearch.open_indexed(path, f.index) as fh:
            lo = rnd.randint(0, len(small))
            hi = rnd.randint(lo, len(small) + 2)
            want = [(i, small[i].expandtabs()) for i in range(lo, min(hi, len(small)))]
            assert list(logsearch.lines_forward(fh, f.index, lo, hi)) == want
            assert list(logsearch.lines_backward(fh, f.index, lo, hi)) == want[::-1]
            # skipping chunks that cannot match loses no line that matches
            term = rnd.choice(["abba", "b a", "AAB"])
            maybe = logfilter.chunk_test([term.lower()])
            hits = [(i, t) for i, t in want if term.lower() in t.lower()]
            assert [x for x in logsearch.lines_forward(fh, f.index, lo, hi, maybe) if term.lower() in x[1].lower()] == hits
            assert [x for x in logsearch.lines_backward(fh, f.index, lo, hi, maybe)
                    if term.lower() in x[1].lower()] == hits[::-1]


async def test_search_and_filter_reach_the_whole_file(tmp_path):
    """250,000 lines: the pane holds the last few thousand; ``/`` + n finds a line near the top
    (and shows the lines around it), End goes back, N finds the last match above the tail,
    and a filter shows its lines from the whole file."""
    log = tmp_path / "big.log"
    gate = {i: f"[2026-12-01 20:00:00 TP0] spec_gate: speculation off (batch {i % 90 + 33} >= 32)"
            for i in range(5_000, 250_000, 10_000)}
    lines = big_log(log, marks={1_234: "[2026-12-01 19:00:00] needle one", 99_999: "[2026-12-01 19:30:00] needle two",
                                **gate})
    app = attach_app(tmp_path, log)
    async with app.run_test(size=(120, 40)) as pilot:
        view = app.main_screen.query_one(LogView)
        await wait_for(pilot, lambda: view.total_lines == 250_000 and view.entries, what="the log")
        held = 250_000 - view.tail_first_no()
        assert held < 5_000
        await wait_for(pilot, lambda: f"lines · last {held:,} of 250,000" in title(app), what="the title")

        await pilot.press("slash", *"needle", "enter")
        await wait_for(pilot, lambda: view.file_region is not None, what="the first match")
        assert view.follow is False
        assert lines[1_234] in view.visible_texts()
        assert view.lines[view.shown[view._match_pos]].text == lines[1_234]
        await wait_for(pilot, lambda: "lines 735–1,735 of 250,000" in title(app), what="the region's title")
        await pilot.press("n")  # the next match is outside this region too
        await wait_for(pilot, lambda: view.lines[view.shown[view._match_pos]].text == lines[99_999], what="match 2")
        await pilot.press("n")  # none further down: wraps to the first one
        await wait_for(pilot, lambda: view.lines[view.shown[view._match_pos]].text == lines[1_234], what="wrap")
        await pilot.press("end")
        assert view.file_region is None and view.follow is True
        await wait_for(pilot, lambda: f"lines · last {held:,} of 250,000" in title(app), what="the tail's title")
        await pilot.press("N")  # backwards from the tail: the last match above it
        await wait_for(pilot, lambda: view.file_region is not None and view._match_pos is not None
                       and view.lines[view.shown[view._match_pos]].text == lines[99_999], what="match 2 back")

        await pilot.press("c", "end", "f", *"spec_gate", "enter")
        await wait_for(pilot, lambda: view.file_region is not None and view.file_region.live, what="whole-file filter")
        assert view.visible_texts() == [gate[i] for i in sorted(gate)]
        await wait_for(pilot, lambda: "25/250,000 lines" in title(app), what="the filter's title")
        with open(log, "a") as fh:  # a new line that passes comes in at the end
            fh.write("[2026-12-01 21:00:00 TP0] spec_gate: speculation on (batch 3 < 30)\n")
        await wait_for(pilot, lambda: len(view.visible_texts()) == 26, what="the new line")
        await pilot.press("c")
        await pilot.pause(0.1)
        assert view.file_region is None and len(view.visible_texts()) == len(view.entries)


# -- rotation edge cases -----------------------------------------------------------------------

def test_a_file_rewritten_past_its_old_size_is_read_from_its_top(tmp_path):
    path = tmp_path / "server.log"
    path.write_text("old line one\nold line two\n")
    f = LogFollower(path)
    assert f.read_new() == ["old line one", "old line two"]
    first = f.index.file_id
    # between two reads: truncated (same inode) and written again past the old size
    ino = path.stat().st_ino
    path.write_text("new 1\nnew 2\nnew line three is longer\n")
    assert path.stat().st_ino == ino and path.stat().st_size > len("old line one\nold line two\n")
    batch = f.read_batch()
    assert batch.lines == ["new 1", "new 2", "new line three is longer"]  # none lost, none cut
    assert batch.numbers == [0, 1, 2] and batch.file_id != first
    with open(path, "a") as fh:
        fh.write("appended\n")
    assert f.read_new() == ["appended"]


def test_a_file_replaced_by_another_of_the_same_size_is_read_from_its_top(tmp_path):
    path = tmp_path / "server.log"
    path.write_text("aaaa\n")
    f = LogFollower(path)
    assert f.read_new() == ["aaaa"]
    other = tmp_path / "next.log"
    other.write_text("bbbb\ncccc\n")
    os.replace(other, path)  # a new inode at the path
    assert f.read_new() == ["bbbb", "cccc"]


@pytest.mark.parametrize("read_between", [True, False], ids=["read-after-truncate", "truncate-and-write-between-reads"])
def test_copytruncate_with_a_writer_that_does_not_append_shows_no_nul_line(tmp_path, read_between):
    path = tmp_path / "server.log"
    writer = os.open(path, os.O_WRONLY | os.O_CREAT)  # no O_APPEND: it writes at its own offset
    try:
        os.write(writer, b"[t] line 1\n[t] line 2\n" * 100)
        f = LogFollower(path)
        assert len(f.read_new()) == 200
        os.truncate(path, 0)  # logrotate's copytruncate (the copy went elsewhere)
        if read_between:
            assert f.read_new() == []
        os.write(writer, b"[t] after rotation\n")  # at the old offset: a hole of NULs before it
        assert path.read_bytes().startswith(b"\0")
        assert f.read_new() == ["[t] after rotation"]
        os.write(writer, b"[t] next\n")
        batch = f.read_batch()
        assert batch.lines == ["[t] next"] and batch.numbers == [1]
    finally:
        os.close(writer)


def test_the_fingerprint_does_not_fire_on_plain_appends(tmp_path):
    path = tmp_path / "server.log"
    f = LogFollower(path)
    got = []
    with open(path, "w") as fh:
        for i in range(300):
            fh.write(f"[t] {i}\n" + ("x" * (i % 7)))
            fh.flush()
            got += f.read_new()
    assert f.index.file_id == 1 and len(got) == 300 and got[-1] == "xxxx[t] 299"


async def test_a_truncated_file_gets_new_line_numbers_in_the_pane():
    """The pane drops the numbers of the lines held when the file was replaced or truncated, so a
    search never reads the new file at the old file's line numbers."""
    from textual.app import App

    class OneLog(App):
        def compose(self):
            yield LogView()

    app = OneLog()
    async with app.run_test(size=(80, 20)):
        view = app.query_one(LogView)
        view.add_lines([(logparse.PLAIN, "a"), (logparse.PLAIN, "b")], numbers=[0, 1], file_id=1, total=2)
        view.add_lines([(logparse.PLAIN, "c")], numbers=[0], file_id=2, total=1)
        assert [e.no for e in view.entries] == [None, None, 0]
        assert view.tail_first_no() == 0 and view.visible_texts() == ["a", "b", "c"]


def test_o_says_what_it_did_also_when_the_log_has_no_console_polls():
    """Fresh-user finding: in the demo (no access log) `o` changed nothing visible."""
    from types import SimpleNamespace

    from console.widgets.log_panel import OWN_HIDDEN, OWN_SHOWN, own_lines_notice

    assert own_lines_notice(SimpleNamespace(show_own=True, own_lines=0)) == f"{OWN_SHOWN}; this log has none of them yet"
    assert own_lines_notice(SimpleNamespace(show_own=False, own_lines=3)) == OWN_HIDDEN


async def test_a_very_long_search_leaves_the_log_lines_in_view(tmp_path):
    """Fresh-user finding: a 4,000-character `/` query wrapped over the whole log pane."""
    log = tmp_path / "server.log"
    log.write_text("".join(f"line {i}\n" for i in range(200)))
    app = attach_app(tmp_path, log)
    async with app.run_test(size=(80, 24)) as pilot:
        view = app.main_screen.query_one(LogView)
        await wait_for(pilot, lambda: view.visible_texts(), what="log lines")
        view.search = "x" * 4000
        await pilot.pause(0.3)
        indicator = app.main_screen.query_one("#log-filters")
        assert indicator.size.height <= 3 and view.size.height >= 2
        from console_support import screen_text

        screen = screen_text(app)  # shortened where it is too long: the count stays in view
        assert "… (0 matches)" in screen, screen[-900:]


def test_the_demo_servers_access_lines_have_the_shape_of_real_sglangs(tmp_path):
    """The demo's uvicorn access line (so `o` works against it) against a recorded SGLang 0.5.12 one."""
    import re

    from console.accesslog import access_line
    from console_support import DemoServer

    real = next(line for line in (FIXTURES / "server-no-spec.log").read_text().splitlines()
                if '"GET /server_info HTTP/1.1" 200' in line)
    demo = DemoServer(tmp_path).wait_ready()
    try:
        demo.get("/server_info")
        wait_until = time.monotonic() + 5
        while time.monotonic() < wait_until and '"GET /server_info' not in demo.log.read_text():
            time.sleep(0.05)
        ours = next(line for line in demo.log.read_text().splitlines() if '"GET /server_info HTTP/1.1"' in line)
    finally:
        demo.stop()

    def shape(line: str) -> str:  # the timestamp and the client port differ, the rest is the format
        return re.sub(r"127\.0\.0\.1:\d+", "ADDR", re.sub(r"^\[[^\]]*\]", "[TS]", line))

    assert shape(ours) == shape(real) == '[TS] INFO:     ADDR - "GET /server_info HTTP/1.1" 200 OK'
    assert access_line(ours) is not None and access_line(ours).status == 200
