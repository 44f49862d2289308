"""The launched server's watchdog (console.supervisor): real processes, no GPU.

A fake server that ignores SIGTERM (and has a child of its own, as SGLang's scheduler is) is
started through :class:`console.process.ServerProcess`, the code path of ``launch`` and ``demo``,
by a "console" that is itself a child process of the test, so the test can ``kill -9`` it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from console.process import ServerProcess, group_members

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 0.5

#: a server that ignores SIGTERM, with a child that ignores it too; says "ready" once both do
STUBBORN = (
    "import signal, subprocess, sys, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "subprocess.Popen([sys.executable, '-c', 'import signal, time; "
    "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)'])\n"
    "time.sleep(0.3); print('ready', flush=True)\n"
    "time.sleep(120)\n"
)

#: the "console": starts the server as the console does, prints pids, then waits to be killed
CONSOLE = (
    "import json, sys, time\n"
    "from pathlib import Path\n"
    "from console.process import ServerProcess\n"
    "p = ServerProcess([sys.executable, '-c', sys.argv[1]], Path(sys.argv[2]), stop_timeout_s=float(sys.argv[3]))\n"
    "p.start()\n"
    "print(json.dumps({'pgid': p.pgid, 'supervisor': p.supervisor.pid}), flush=True)\n"
    "time.sleep(120)\n"
)


def _alive(pid: int) -> bool:
    """``pid`` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _until(cond, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def _wait_ready(log: Path, timeout_s: float = 15.0) -> None:
    """Until a line of the log is ``ready`` (the marker line quotes the code, not on a line of its own)."""
    assert _until(lambda: log.exists() and "ready" in log.read_text().splitlines(), timeout_s), log.read_text()


def test_killed_console_server_group_ends_despite_sigterm_being_ignored(tmp_path):
    log = tmp_path / "server.log"
    console = subprocess.Popen([sys.executable, "-c", CONSOLE, STUBBORN, str(log), str(TIMEOUT_S)],
                               stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        pids = json.loads(console.stdout.readline())
        pgid, sup = pids["pgid"], pids["supervisor"]
        _wait_ready(log)
        assert len(group_members(pgid)) == 2 and _alive(sup)
        time.sleep(0.5)  # SIGTERM alone would not do: PDEATHSIG's SIGTERM is ignored
        console.kill()  # kill -9: no cleanup in the console
        console.wait(timeout=5)
        assert _until(lambda: not group_members(pgid), TIMEOUT_S + 5.0), group_members(pgid)
        assert _until(lambda: not _alive(sup), 5.0)  # and the watchdog ends too
        text = log.read_text()
        # SIGTERM first, SIGKILL only once the stop timeout passed with the group still there
        # (the supervisor writes this line when its wait after SIGTERM ran out, not a timing here)
        assert "the console is gone" in text
        assert f"still runs {TIMEOUT_S:g} s after SIGTERM: SIGKILL" in text
    finally:
        if console.poll() is None:
            console.kill()
        for pid in group_members(pids["pgid"]) if "pids" in locals() else []:
            os.kill(pid, signal.SIGKILL)


def test_killed_console_polite_server_ends_at_sigterm(tmp_path):
    """A server that obeys SIGTERM is not SIGKILLed: the group is gone well before the timeout."""
    log = tmp_path / "server.log"
    polite = "import time; print('ready', flush=True); time.sleep(120)"
    console = subprocess.Popen([sys.executable, "-c", CONSOLE, polite, str(log), "30"],
                               stdout=subprocess.PIPE, text=True, cwd=ROOT)
    pids = json.loads(console.stdout.readline())
    _wait_ready(log)
    console.kill()
    console.wait(timeout=5)
    assert _until(lambda: not group_members(pids["pgid"]), 5.0)
    assert _until(lambda: not _alive(pids["supervisor"]), 5.0)
    assert "after SIGTERM: SIGKILL" not in log.read_text()


def test_normal_stop_ends_the_supervisor_without_its_signals(tmp_path):
    log = tmp_path / "server.log"
    p = ServerProcess([sys.executable, "-c", STUBBORN], log, stop_timeout_s=TIMEOUT_S)
    p.start()
    sup = p.supervisor
    assert sup is not None and os.getpgid(sup.pid) not in (p.pgid, os.getpgid(0))
    _wait_ready(log)
    assert p.stop() == -signal.SIGKILL  # the console's own clean stop, as before
    assert p.members() == [] and p.supervisor is None
    assert sup.returncode == 0 and not _alive(sup.pid)
    assert "the console is gone" not in log.read_text()


def test_restart_replaces_the_supervisor(tmp_path):
    log = tmp_path / "server.log"
    p = ServerProcess([sys.executable, "-c", "import sys; sys.exit(3)"], log, stop_timeout_s=TIMEOUT_S)
    p.start()
    first = p.supervisor
    assert _until(lambda: p.poll() == 3, 10.0)
    p.start()  # the console's r after a crash
    assert first.returncode == 0 and p.supervisor is not first
    p.stop()
    assert p.supervisor is None
    assert "the console is gone" not in log.read_text()
