"""The server child of ``specconsole launch`` / ``demo``: its own process group, its log file, its end.

The child runs in a new session (``start_new_session=True``), so it and everything it spawns
(SGLang's scheduler / detokenizer processes, one per TP rank) share one process group whose id
is the child's pid, and the terminal's SIGINT/SIGHUP do not reach them directly. Stopping sends
SIGTERM to the whole group, waits, then SIGKILLs whatever is left, so no scheduler process
(and no GPU memory) stays behind. Output (stdout + stderr) goes to a log file that the console
follows like any other server log.

If the console itself dies without cleaning up (SIGKILL, OOM killer), the kernel stops the
child: on Linux it is started with a parent-death signal (``prctl(PR_SET_PDEATHSIG, SIGTERM)``),
so it gets SIGTERM when the console's process ends (SGLang's own scheduler processes follow their
parent the same way). Elsewhere this is a no-op. A server that ignores that SIGTERM (or hangs
in it) is ended anyway: next to the server runs :mod:`console.supervisor`, which notices the
console's death (a pipe closes) and SIGTERMs the group, then SIGKILLs it after the stop timeout.

Linux: group membership is read from ``/proc``; elsewhere ``killpg(pgid, 0)`` is used.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from typing import Callable
from pathlib import Path

from console.config import redact_args
from console.logparse import START_MARKER

#: what :meth:`ServerProcess.end_supervisor` writes (:data:`console.supervisor.STOP_WORD`)
STOP_WORD = b"stop"

#: command that starts the real server; ``SPECCONSOLE_SERVER_CMD`` replaces it (tests point it
#: at ``python -m console.demo_server``)
SERVER_CMD_ENV = "SPECCONSOLE_SERVER_CMD"


def default_server_command() -> list[str]:
    """``python -m server_patch.launch_server``, or the shell-split ``$SPECCONSOLE_SERVER_CMD``."""
    override = os.environ.get(SERVER_CMD_ENV)
    if override:
        return shlex.split(override)
    return [sys.executable, "-m", "server_patch.launch_server"]


def demo_server_command() -> list[str]:
    """The built-in simulated server, started exactly like a real one."""
    return [sys.executable, "-m", "console.demo_server"]


def supervisor_command(pgid: int, timeout_s: float) -> list[str]:
    """argv of the watchdog (:mod:`console.supervisor`) for the server group ``pgid``."""
    return [sys.executable, "-m", "console.supervisor", "--pgid", str(pgid), "--timeout", repr(float(timeout_s))]


def _supervisor_env(env: dict[str, str] | None) -> dict[str, str]:
    """``env`` (or ours) with this ``console`` package first on PYTHONPATH: the watchdog runs our code."""
    out = dict(os.environ if env is None else env)
    root = str(Path(__file__).resolve().parents[1])
    out["PYTHONPATH"] = os.pathsep.join([root] + ([out["PYTHONPATH"]] if out.get("PYTHONPATH") else []))
    return out


#: prctl option: signal sent to this process when its parent dies (linux/prctl.h)
PR_SET_PDEATHSIG = 1


def parent_death_signal(sig: int = signal.SIGTERM):
    """A ``preexec_fn`` that asks the kernel to send ``sig`` to the child when the console dies.

    Linux only (``prctl(PR_SET_PDEATHSIG)`` through ctypes); None elsewhere or when libc cannot
    be loaded, so the caller passes no ``preexec_fn`` at all. The signal is tied to the thread
    that starts the child: start children from the main thread. If the console died between
    fork and prctl, the child signals itself.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):  # pragma: no cover - no usable libc
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:  # the console is already gone
            os.kill(os.getpid(), sig)

    return preexec


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) pids whose process group is ``pgid``.

    Zombies are left out: they hold no memory, and in a container without an init that
    reaps, orphaned zombies never go away.
    """
    proc = Path("/proc")
    if not proc.is_dir():  # pragma: no cover - non-Linux fallback
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return []
        return [pgid]
    members = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...; comm may contain spaces/parens -> split after last ')'
        rest = stat[stat.rfind(")") + 2:].split()
        if len(rest) < 3:
            continue
        state, pgrp = rest[0], int(rest[2])
        if pgrp == pgid and state not in ("Z", "X"):
            members.append(int(entry.name))
    return members


#: seconds to wait for a group to vanish after SIGKILL
KILL_WAIT_S = 5.0


def signal_group(pgid: int, sig: int) -> None:
    """``killpg(pgid, sig)``; a group already gone (or not ours) is not an error."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def wait_group_empty(pgid: int, deadline: float, reap: Callable[[], object] = lambda: None) -> bool:
    """Wait until group ``pgid`` has no live member or ``time.monotonic()`` passes ``deadline``;
    True when empty. ``reap`` runs before every look (the parent reaps its child there, so the
    leader does not linger as a zombie)."""
    while True:
        reap()
        if not group_members(pgid):
            reap()
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def end_group(pgid: int, timeout_s: float, reap: Callable[[], object] = lambda: None,
              on_kill: Callable[[], object] = lambda: None) -> bool:
    """Stop process group ``pgid``: SIGTERM, wait up to ``timeout_s`` s, then (``on_kill`` first)
    SIGKILL and wait up to KILL_WAIT_S s. Nothing is sent to a group without live members.

    Returns:
        True when the group is empty at the end.
    """
    if not group_members(pgid):
        return True
    signal_group(pgid, signal.SIGTERM)
    if wait_group_empty(pgid, time.monotonic() + timeout_s, reap):
        return True
    on_kill()
    signal_group(pgid, signal.SIGKILL)
    return wait_group_empty(pgid, time.monotonic() + KILL_WAIT_S, reap)


def tail_lines(path: Path, n: int = 20, max_bytes: int = 64 * 1024) -> list[str]:
    """The last ``n`` lines of a text file (reads at most ``max_bytes`` from its end)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except OSError:
        return []
    lines = data.decode("utf-8", "replace").splitlines()
    return lines[-n:]


def describe_exit(code: int | None) -> str:
    """``exit code 1`` or ``killed by SIGKILL (exit code -9)``."""
    if code is None:
        return "exit code unknown"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name} (exit code {code})"
    return f"exit code {code}"


class ServerProcess:
    """One server child and its process group.

    Args:
        command: argv of the server (e.g. ``default_server_command() + server_args``).
        log_path: file that receives the child's stdout+stderr (appended; created with parents).
        env: environment for the child (None: inherit).
        stop_timeout_s: seconds between SIGTERM to the group and SIGKILL.

    Not thread-safe except :meth:`stop`, which may be called from any thread (and more than
    once; later calls wait for the first).
    """

    def __init__(
        self,
        command: list[str],
        log_path: Path,
        env: dict[str, str] | None = None,
        stop_timeout_s: float = 10.0,
    ) -> None:
        self.command = list(command)
        self.log_path = Path(log_path)
        self.env = env
        self.stop_timeout_s = stop_timeout_s
        self.popen: subprocess.Popen[bytes] | None = None
        self.started_at: float | None = None
        self.starts = 0
        self.stopping = False
        self._stop_lock = threading.Lock()
        #: the watchdog of the current run (:mod:`console.supervisor`) and the pipe it watches
        self.supervisor: subprocess.Popen[bytes] | None = None
        self._supervisor_pipe: int | None = None

    @property
    def pid(self) -> int | None:
        """The child's pid (also its process group id), None before :meth:`start`."""
        return self.popen.pid if self.popen else None

    @property
    def pgid(self) -> int | None:
        """The process group id of the child and everything it spawned."""
        return self.pid

    def start(self) -> None:
        """Start (or restart) the child in its own session, appending output to the log file.

        Writes a ``[specconsole] starting server: <cmd>`` marker line first, so log readers
        know a new run begins. Then starts the run's :mod:`console.supervisor` (a watchdog that
        ends the group if the console dies). Raises OSError when the command cannot be started.
        """
        self.end_supervisor()  # a restart: the previous run's watchdog has nothing left to watch
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"{START_MARKER} {shlex.join(redact_args(self.command))}\n".encode())
            log.flush()
            self.popen = subprocess.Popen(
                self.command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=self.env,
                close_fds=True,
                preexec_fn=parent_death_signal(),
            )
            self._start_supervisor(log)
        self.started_at = time.monotonic()
        self.starts += 1
        self.stopping = False

    def _start_supervisor(self, log) -> None:
        """Start the watchdog of the group just started; its stdin is a pipe only we can write.

        Best effort: if it cannot start, the parent-death signal is still there.
        """
        assert self.popen is not None
        read_end, write_end = os.pipe()  # both non-inheritable (PEP 446): no other child gets them
        try:
            self.supervisor = subprocess.Popen(
                supervisor_command(self.popen.pid, self.stop_timeout_s),
                stdin=read_end,
                stdout=log,
                stderr=log,
                start_new_session=True,  # neither in the server's group nor the terminal's
                close_fds=True,
                env=_supervisor_env(self.env),
            )
        except OSError:  # pragma: no cover - the interpreter vanished?
            os.close(write_end)
            self.supervisor = None
        else:
            self._supervisor_pipe = write_end
        finally:
            os.close(read_end)

    def end_supervisor(self) -> None:
        """Tell the watchdog the console has the group in hand (``stop``), and reap it. Idempotent."""
        fd, self._supervisor_pipe = self._supervisor_pipe, None
        if fd is not None:
            try:
                os.write(fd, STOP_WORD)
            except OSError:  # it is already gone
                pass
            os.close(fd)
        sup, self.supervisor = self.supervisor, None
        if sup is not None:
            try:
                sup.wait(timeout=5.0)
            except subprocess.TimeoutExpired:  # pragma: no cover - stuck in startup
                sup.kill()
                sup.wait()

    def poll(self) -> int | None:
        """The child's exit code (negative: killed by that signal), None while it runs."""
        return self.popen.poll() if self.popen else None

    def members(self) -> list[int]:
        """Live pids left in the child's process group (empty when everything is gone)."""
        return group_members(self.pgid) if self.pgid else []

    def stop(self, timeout_s: float | None = None) -> int | None:
        """Stop the whole group: SIGTERM, wait up to ``timeout_s`` (default ``stop_timeout_s``), SIGKILL.

        Also cleans up after a crash: if the leader already exited, its leftover children
        are stopped the same way. Idempotent.

        Returns:
            The child's exit code, or None if it was never started.
        """
        if self.popen is None:
            return None
        timeout_s = self.stop_timeout_s if timeout_s is None else timeout_s
        with self._stop_lock:
            self.stopping = True
            if self.pgid:
                end_group(self.pgid, timeout_s, reap=self.poll)
            try:
                return self.popen.wait(timeout=5.0)
            except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL not delivered?
                return None
            finally:
                self.end_supervisor()

    def last_lines(self, n: int = 12) -> list[str]:
        """The last ``n`` lines of the log file (for the crash screen)."""
        return tail_lines(self.log_path, n)
