"""End to end in a real terminal: ``specconsole demo`` inside tmux at 80x24, keys in, screen out.

Uses a private tmux server (``tmux -L <name>``) so it neither sees nor disturbs other sessions,
and kills it at the end. Skipped only when tmux is not installed.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from console_support import free_port

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")


def _specconsole() -> str:
    exe = Path(sys.executable).parent / "specconsole"
    return str(exe) if exe.exists() else f"{sys.executable} -m console"


class Tmux:
    def __init__(self, name: str) -> None:
        self.socket = name

    def run(self, *args: str, check: bool = True) -> str:
        out = subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=20)
        if check and out.returncode != 0:
            raise AssertionError(f"tmux {args}: {out.stderr}")
        return out.stdout

    def start(self, session: str, command: str) -> None:
        self.run("-f", "/dev/null", "new-session", "-d", "-s", session, "-x", "80", "-y", "24", command)

    def screen(self, session: str) -> str:
        return self.run("capture-pane", "-p", "-t", session)

    def fmt(self, session: str, variable: str) -> str:
        return self.run("display-message", "-p", "-t", session, f"#{{{variable}}}").strip()

    def keys(self, session: str, *keys: str) -> None:
        self.run("send-keys", "-t", session, *keys)

    def wait(self, session: str, cond, timeout: float = 20.0, what: str = "") -> str:
        deadline = time.monotonic() + timeout
        text = ""
        while time.monotonic() < deadline:
            text = self.screen(session)
            if cond(text):
                return text
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what}; screen:\n{text}")

    def kill_server(self) -> None:
        self.run("kill-server", check=False)


def demo_server_pids(port: int) -> list[int]:
    """Live processes of the simulated server started with ``--port port`` (and its scheduler children)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and b"console.demo_server" in cmd and str(port).encode() in cmd:
            pids.append(int(entry.name))
    return pids


def _wait_gone(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and demo_server_pids(port):
        time.sleep(0.1)
    assert demo_server_pids(port) == []


_SOCKETS = itertools.count()


@pytest.fixture
def tmux():
    # a socket per test: with one per pytest process, a test's new-session could reach the tmux
    # server the previous test's kill-server was still shutting down ("server exited unexpectedly")
    t = Tmux(f"specconsole-test-{os.getpid()}-{next(_SOCKETS)}")
    yield t
    t.kill_server()


def _command(tmp_path: Path, port: int) -> str:
    return (
        f"cd {tmp_path} && TERM=xterm-256color {_specconsole()} demo --log-dir {tmp_path} --port {port} --interval 0.3 "
        f"-- --startup-seconds 0.3 --load fixed:8 --jitter 0 --log-interval 0.3; echo EXITED $?; sleep 60"
    )


def test_demo_in_tmux_keys_and_clean_exit(tmux, tmp_path):
    port = free_port()
    s = "demo"
    tmux.start(s, _command(tmp_path, port))
    text = tmux.wait(s, lambda t: "SPEC ON" in t and "EAGLEWorkerV2" in t and "H200" in t, what="main screen")
    lines = text.splitlines()
    assert len(lines) <= 24 and all(len(line) <= 80 for line in lines)
    assert "DEMO simulated" in text and "every 0.3 s" in text and "threshold 32 req  hysteresis 4 req" in text
    assert "running 8  queue 0" in text and "decode batch 8 < threshold 32" in text
    assert "measured on an H200," in text and "synthetic 8B pair, SGLang 0.5.12" in text
    assert "…" not in text  # nothing on the main screen is cut off at 80x24
    assert tmux.fmt(s, "mouse_any_flag") == "1" and tmux.fmt(s, "alternate_on") == "1"

    tmux.keys(s, "+", "+", "+", "+", "+")  # a burst: every press counts
    tmux.wait(s, lambda t: "threshold 37 req" in t, what="threshold 37 confirmed")
    tmux.keys(s, "-", "-", "-", "-")
    tmux.wait(s, lambda t: "threshold 33 req" in t, what="threshold 33 confirmed")
    tmux.keys(s, "?")
    tmux.wait(s, lambda t: "specconsole — keys" in t, what="help screen")
    tmux.keys(s, "Escape")
    tmux.wait(s, lambda t: "specconsole — keys" not in t and "SPEC ON" in t, what="help closed")
    tmux.keys(s, "t")
    tmux.wait(s, lambda t: "threshold N (req)" in t, what="threshold dialog")
    time.sleep(0.5)  # let the dialog take focus
    for key in ("C-u", "0", "Enter"):
        tmux.keys(s, key)
        time.sleep(0.2)
    tmux.wait(s, lambda t: "must be >= 1" in t, what="local refusal")
    tmux.keys(s, "Escape")
    tmux.wait(s, lambda t: "threshold N (req)" not in t, what="dialog closed")

    tmux.keys(s, "q")
    text = tmux.wait(s, lambda t: "EXITED 0" in t, what="exit")
    assert "specconsole: server log:" in text
    # terminal left clean: no mouse tracking, main screen back
    assert tmux.fmt(s, "mouse_any_flag") == "0"
    assert tmux.fmt(s, "alternate_on") == "0"
    _wait_gone(port, timeout=5)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def test_ssh_drop_sighup_stops_the_server_and_exits_promptly(tmux, tmp_path):
    port = free_port()
    s = "hup"
    tmux.start(s, _command(tmp_path, port))
    tmux.wait(s, lambda t: "SPEC ON" in t, what="main screen")
    assert demo_server_pids(port)  # the server and its scheduler process run
    shell = int(tmux.fmt(s, "pane_pid"))
    console = [p for p in _children(shell) if b"demo" in Path(f"/proc/{p}/cmdline").read_bytes()]
    assert console, "specconsole process not found"
    t0 = time.monotonic()
    tmux.run("kill-session", "-t", s)  # the pty goes away: SIGHUP, like an ssh drop
    _wait_gone(port)
    while _alive(console[0]) and time.monotonic() - t0 < 10:
        time.sleep(0.05)
    took = time.monotonic() - t0
    assert not _alive(console[0])
    assert took < 2.5, f"specconsole took {took:.1f} s to exit after SIGHUP"


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(entry.name))
            except (OSError, ValueError, IndexError):
                pass
    return out


@pytest.mark.parametrize("sig, code", [(15, 143), (2, 130)])  # SIGTERM; SIGINT (was: exit 0)
def test_sigterm_or_sigint_stops_the_server_and_restores_the_terminal(tmux, tmp_path, sig, code):
    port = free_port()
    s = f"term{sig}"
    tmux.start(s, _command(tmp_path, port))
    tmux.wait(s, lambda t: "SPEC ON" in t, what="main screen")
    shell = int(tmux.fmt(s, "pane_pid"))
    console_pids = [p for p in _children(shell) if b"demo" in Path(f"/proc/{p}/cmdline").read_bytes()]
    assert console_pids, "specconsole process not found"
    os.kill(console_pids[0], sig)
    text = tmux.wait(s, lambda t: "EXITED" in t, what=f"exit after signal {sig}")
    assert f"EXITED {code}" in text  # 128 + the signal
    assert tmux.fmt(s, "mouse_any_flag") == "0" and tmux.fmt(s, "alternate_on") == "0"
    _wait_gone(port, timeout=5)


def test_sigkill_of_the_console_stops_the_launched_server(tmux, tmp_path):
    """``kill -9`` of specconsole (no cleanup runs): the kernel's parent-death signal stops the server."""
    from console.process import group_members

    port = free_port()
    s = "kill9"
    server_cmd = f"{sys.executable} -m console.demo_server"
    tmux.start(s, (
        f"cd {tmp_path} && SPECCONSOLE_SERVER_CMD='{server_cmd}' TERM=xterm-256color {_specconsole()} launch "
        f"--log-dir {tmp_path} --interval 0.3 -- --port {port} --speculative-disable-batch-threshold 32 "
        f"--startup-seconds 0.3 --load fixed:8 --tp-size 2; sleep 60"
    ))
    tmux.wait(s, lambda t: "SPEC ON" in t and "LAUNCH" in t, what="main screen")
    shell = int(tmux.fmt(s, "pane_pid"))
    (console,) = [p for p in _children(shell) if b"launch" in Path(f"/proc/{p}/cmdline").read_bytes()]
    (server,) = [p for p in _children(console) if b"console.demo_server" in Path(f"/proc/{p}/cmdline").read_bytes()]
    assert len(group_members(server)) >= 3  # the server and its two "scheduler" processes, one group
    try:
        os.kill(console, 9)
        deadline = time.monotonic() + 5
        while group_members(server) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert group_members(server) == [], "the launched server outlived the SIGKILLed console"
        _wait_gone(port, timeout=1)
    finally:
        if group_members(server):  # never leave it behind when the test fails
            os.killpg(server, 9)
