"""When the session reads the log (issue 15 item 8): once per poll interval, just before the poll's
snapshot, instead of every 0.25 s; on its own every interval when no poll comes; at once when an
operator searches or filters; every 0.25 s while a launched server starts."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from console import events as ev
from console import session as sess
from console import state as st
from console.config import AppConfig
from console.logfollow import GONE


def _session(tmp_path: Path, interval: float = 1.0, lines: int = 0):
    log = tmp_path / "server.log"
    log.write_text("".join(f"line {i}\n" for i in range(lines)))
    got: list = []
    s = sess.ConsoleSession(AppConfig(mode="attach", url="http://127.0.0.1:9", log_path=log, interval_s=interval),
                            got.append, nvml_module=object())
    return s, log, got


def _published(got) -> list[bool]:
    return [e.soon for e in got if isinstance(e, ev.Published)]


def test_the_log_loop_stands_by_while_polls_read_the_log(tmp_path):
    s, _, _ = _session(tmp_path)
    now = time.monotonic()
    s._log_read_at = now  # the poll just read it and polls again in one interval
    s._next_poll_at = now + 1.0
    due, at_once = s._log_due()
    assert due == now + 1.5 and not at_once  # half an interval after the poll: only a safety net
    s._next_poll_at = None  # no poll (no server, the child not running): every interval, shown at once
    assert s._log_due() == (now + 1.0, True)
    s._next_poll_at = now + 8.0  # backing off: the loop reads, the lines shown at once
    assert s._log_due() == (now + 1.0, True)
    s._next_poll_at = now + 1.7  # a poll within an interval of the read shows them: they may wait
    assert s._log_due() == (now + 1.0, False)


def test_a_starting_server_s_log_is_read_every_quarter_second(tmp_path):
    s, _, _ = _session(tmp_path)
    s.model.process = st.ProcessState(phase=st.PHASE_STARTING)
    now = time.monotonic()
    s._log_read_at, s._next_poll_at = now, now + 1.0
    due, at_once = s._log_due()
    assert abs(due - (now + sess.LOG_READ_S)) < 1e-9 and not at_once  # the poll shows them


async def test_without_polls_the_log_is_read_once_an_interval_and_shown_at_once(tmp_path):
    s, log, got = _session(tmp_path, interval=0.3, lines=2)
    s.follower = sess.LogFollower(log, on_scan=s._scan_fact)
    reads = []
    real = s._read_log

    def counted():
        reads.append(time.monotonic())
        return real()

    s._read_log = counted
    task = asyncio.get_running_loop().create_task(s._log_loop())
    try:
        await asyncio.sleep(1.0)
        with log.open("a") as f:
            f.write("new line\n")
        await asyncio.sleep(0.45)
    finally:
        task.cancel()
        s.follower.close()
    assert 3 <= len(reads) <= 6  # ~every 0.3 s, not every 0.25 s plus
    lines = [line for e in got if isinstance(e, ev.LogLines) for _, line in e.lines]
    assert "new line" in lines
    assert _published(got) and not any(_published(got))  # no poll to wait for: shown at once


async def test_an_operator_s_search_reads_the_log_at_once(tmp_path):
    s, log, got = _session(tmp_path, interval=5.0)
    s.follower = sess.LogFollower(log, on_scan=s._scan_fact)
    now = time.monotonic()
    s._log_read_at, s._next_poll_at = now, now + 5.0  # the next read would be in 7.5 s
    task = asyncio.get_running_loop().create_task(s._log_loop())
    try:
        await asyncio.sleep(0.1)
        with log.open("a") as f:
            f.write("wanted\n")
        s.read_log_soon()
        for _ in range(40):
            await asyncio.sleep(0.05)
            if any(isinstance(e, ev.LogLines) for e in got):
                break
    finally:
        task.cancel()
        s.follower.close()
    assert [line for e in got if isinstance(e, ev.LogLines) for _, line in e.lines] == ["wanted"]
    assert _published(got) == [False]  # with a snapshot shown at once (the held lines too)


async def test_the_poll_reads_the_log_before_its_snapshot(tmp_path):
    s, log, got = _session(tmp_path, interval=0.2, lines=1)
    s.follower = sess.LogFollower(log, on_scan=s._scan_fact)
    order = []

    class Client:
        local_addresses: list = []

        async def poll(self):
            order.append("poll")
            raise sess.ServerUnreachable("down")

    s.client = Client()
    real = s._read_log

    def read():
        order.append("read")
        return real()

    s._read_log = read
    task = asyncio.get_running_loop().create_task(s._poll_loop())
    try:
        await asyncio.sleep(0.05)
    finally:
        task.cancel()
        s.follower.close()
    assert order[:2] == ["poll", "read"]
    assert [type(e).__name__ for e in got][-2:] == ["LogLines", "Published"]
    assert _published(got)[-1] is False  # the poll's own snapshot, with the lines just read


async def test_a_log_path_replaced_by_a_directory_is_said_once_and_its_return_too(tmp_path):
    """A fresh user's find: the followed log replaced by a directory left the pane silent."""
    s, log, got = _session(tmp_path, lines=1)
    s.follower = sess.LogFollower(log, on_scan=s._scan_fact)
    await s._read_log_once()
    log.unlink()
    log.mkdir()
    await s._read_log_once()
    await s._read_log_once()
    log.rmdir()
    log.write_text("back\n")
    await s._read_log_once()
    said = [e.text for e in got if isinstance(e, ev.ConsoleLine)]
    assert said == [f"log {log}: is a directory; the pane follows it again once it is a readable file",
                    f"log {log}: readable again"]
    assert ("back" in {t for e in got if isinstance(e, ev.LogLines) for _, t in e.lines})


async def test_a_log_path_replaced_by_a_named_pipe_is_refused_without_waiting_for_a_writer(tmp_path):
    """A fresh user's find: opening a FIFO for reading waits for a writer, so the log thread hung
    (and with it polling and the console's exit)."""
    import os
    import threading

    s, log, got = _session(tmp_path, lines=1)
    s.follower = sess.LogFollower(log, on_scan=s._scan_fact)
    await s._read_log_once()
    log.unlink()
    os.mkfifo(log)
    done = threading.Event()

    def reads():
        for _ in range(2):
            s.follower.read_batch()
        done.set()

    threading.Thread(target=reads, daemon=True).start()
    assert done.wait(5), "reading a log path that became a named pipe blocked"
    assert s.follower.problem == "is not a regular file (a pipe or a device)"
    log.unlink()
    log.write_text("back\n")
    batch = s.follower.read_batch()
    assert s.follower.problem is None and batch.lines == ["back"]


async def test_a_followed_log_that_is_deleted_is_said_and_its_open_file_still_read(tmp_path):
    s, log, got = _session(tmp_path, lines=1)
    s.follower = sess.LogFollower(log, on_scan=s._scan_fact)
    await s._read_log_once()
    with open(log, "a") as writer:  # the server's own handle outlives the path (rm, or mv away)
        log.unlink()
        writer.write("after rm\n")
        writer.flush()
        await s._read_log_once()
    log.write_text("new file\n")
    await s._read_log_once()
    said = [e.text for e in got if isinstance(e, ev.ConsoleLine)]
    assert said == [f"log {log}: {GONE}; the pane follows it again once it is a readable file",
                    f"log {log}: readable again"]
    shown = [t for e in got if isinstance(e, ev.LogLines) for _, t in e.lines]
    assert "after rm" in shown and "new file" in shown


async def test_polling_goes_on_while_a_long_log_read_indexes_a_huge_file(tmp_path):
    """A fresh user's find: attaching with a 300 MB --log froze the screen for 37 s (the poll waited
    for the first read, which indexes the whole file)."""
    import threading

    s, log, got = _session(tmp_path, interval=0.1, lines=1)
    s.follower = sess.LogFollower(log, on_scan=s._scan_fact)
    polls = []
    release = threading.Event()

    class Client:
        local_addresses: list = []

        async def poll(self):
            polls.append(time.monotonic())
            raise sess.ServerUnreachable("down")

    s.client = Client()
    real = s._read_log

    def slow_read():
        release.wait(5)  # the long first read
        return real()

    s._read_log = slow_read
    task = asyncio.get_running_loop().create_task(s._poll_loop())
    try:
        await asyncio.sleep(1.5)
        assert len(polls) >= 3  # polled (and published) while the read went on
        assert len(_published(got)) >= 3
        release.set()
        await asyncio.sleep(0.5)
    finally:
        release.set()
        task.cancel()
        s.follower.close()
    assert "line 0" in {t for e in got if isinstance(e, ev.LogLines) for _, t in e.lines}


async def test_a_log_written_faster_than_shown_is_skipped_to_its_end_and_said_once(tmp_path, monkeypatch):
    """A fresh user's find: 300 MB appended at once were shown 1 MiB a read: the marker after them
    was still not on screen after 120 s, and the pane said "following"."""
    from console import logfollow

    monkeypatch.setattr(logfollow, "CATCH_UP_BYTES", 64 * 1024)
    monkeypatch.setattr(logfollow, "SKIP_PER_CALL", 256 * 1024)
    s, log, got = _session(tmp_path, lines=1)
    s.follower = sess.LogFollower(log, initial_tail_bytes=4096, on_scan=s._scan_fact)
    await s._read_log_once()
    filler = b"".join(b"filler %07d\n" % i for i in range(100_000))  # 1.5 MB
    with open(log, "ab") as f:
        f.write(filler + b"MARKER\n")
    for _ in range(10):
        await s._read_log_once()
    shown = [t for e in got if isinstance(e, ev.LogLines) for _, t in e.lines]
    assert shown[-1] == "MARKER" and len(shown) < 1000  # the end shown, not the 100,000 lines before it
    numbers = [n for e in got if isinstance(e, ev.LogLines) for n in e.numbers]
    assert numbers[-1] == 100_001  # line 0 was "line 0": numbering kept across the skip
    assert all(t.startswith(("line", "filler", "MARKER")) and len(t) in (6, 14) or t == "line 0" for t in shown)
    said = [e.text for e in got if isinstance(e, ev.ConsoleLine)]
    assert said == [f"log {log}: written faster than the pane shows it; skipping to its end "
                    "(search and filter still reach every line)"]
    assert s.follower.index.lines == 100_002


async def test_a_truncated_log_is_said_and_read_again_from_the_top(tmp_path):
    """A fresh user's find: a log truncated and written again just went on with the new lines, and
    nothing on screen said the file had started over (logrotate's copytruncate does this)."""
    s, log, got = _session(tmp_path, lines=3)
    s.follower = sess.LogFollower(log, initial_tail_bytes=4096, on_scan=s._scan_fact)
    await s._read_log_once()
    log.write_text("after the truncation\n")  # the same inode, shorter
    await s._read_log_once()
    await s._read_log_once()  # nothing new: said once
    log.write_text("again\n")  # a second truncation seconds later is said too (a second fresh user's find:
    await s._read_log_once()    # the console's 5 s dedupe of a repeated line swallowed it)
    rotated = tmp_path / "server.log.1"
    log.rename(rotated)
    log.write_text("a new file\n")
    await s._read_log_once()
    said = [e.text for e in got if isinstance(e, ev.ConsoleLine)]
    assert said == [f"log {log}: truncated or rewritten in place; reading it again from the top",
                    f"log {log}: truncated or rewritten in place (the 2nd time); reading it again from the top",
                    f"log {log}: a new file at the path (the old one rotated or replaced); following it"]
    shown = [t for e in got if isinstance(e, ev.LogLines) for _, t in e.lines]
    assert shown[-3:] == ["after the truncation", "again", "a new file"]
    s.follower.close()
