"""Who holds a TCP port: the check before ``launch`` / ``demo`` start a server, and the check
that the server answering on that port is the one the console started.

* :func:`port_problem` (before starting a child): connect to ``host:port`` and try to bind it
  the way a server does (``SO_REUSEADDR``). When the port is taken it says who is there
  (``/server_info`` if it answers, the listening process from ``/proc`` on Linux) and what to do.
* :func:`listener_pids` (while running, Linux only): the pids holding a listening socket on the
  port, read from ``/proc/net/tcp{,6}`` and ``/proc/<pid>/fd``. Only pids this user may inspect
  are found; an empty set means "unknown", never "nobody".

Blocking (sockets, a short HTTP request, ``/proc``): call from a thread in the UI.
"""

from __future__ import annotations

import errno
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from console.client import auth_headers

#: hosts that mean "every interface": the server is reached through 127.0.0.1
ANY_HOSTS = ("", "0.0.0.0", "::", "[::]")


def port_hint(mode: str) -> str:
    """What to do about a taken port, for a ``demo`` or ``launch`` session."""
    if mode == "demo":
        return "stop it, or pass --port P (specconsole demo --port P)"
    return "stop it, or give the server another port (specconsole launch -- ... --port P)"


def connect_host(host: str) -> str:
    """The address to connect to for a server bound to ``host``."""
    host = host.strip("[]") if host.startswith("[") else host
    if host in ANY_HOSTS:
        return "127.0.0.1"
    return host


def _accepts(host: str, port: int, timeout_s: float) -> bool | None:
    """True: a connection was accepted; None: the connect timed out (a listener whose accept queue
    is full does that); False: refused or unreachable."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except TimeoutError:
        return None
    except OSError:
        return False


def _bind_in_use(host: str, port: int) -> bool:
    """True when binding ``host:port`` (with SO_REUSEADDR, as servers do) fails with EADDRINUSE."""
    bind_host = host.strip("[]")
    try:
        infos = socket.getaddrinfo(bind_host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError:
        return False  # unknown host: the server will say so itself
    for family, socktype, proto, _, addr in infos[:2]:
        try:
            with socket.socket(family, socktype, proto) as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind(addr)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return True
    return False


def _listening_inodes(port: int) -> set[str] | None:
    """Socket inodes listening on ``port`` (any address); None without ``/proc/net/tcp``."""
    found: set[str] = set()
    seen_table = False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        seen_table = True
        for line in lines:
            f = line.split()
            # sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode ...
            if len(f) < 10 or f[3] != "0A":  # 0A = LISTEN
                continue
            try:
                if int(f[1].rsplit(":", 1)[1], 16) == port:
                    found.add(f[9])
            except (ValueError, IndexError):
                continue
    return found if seen_table else None


def listener_pids(port: int) -> set[int] | None:
    """Pids (of this user, or all when permitted) with a socket listening on ``port``.

    Returns None where ``/proc`` has no socket tables (not Linux); an empty set when nothing
    listens or the listener belongs to a process this user may not inspect.
    """
    inodes = _listening_inodes(port)
    if inodes is None:
        return None
    if not inodes:
        return set()
    targets = {f"socket:[{i}]" for i in inodes}
    pids: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fds = os.listdir(entry / "fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{entry.name}/fd/{fd}") in targets:
                    pids.add(int(entry.name))
                    break
            except OSError:
                continue
    return pids


def process_line(pid: int, max_len: int = 90) -> str:
    """``pid 1234 (python -m console.demo_server --port 39998 …)``, shortened to ``max_len``."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        cmd = ""
    if len(cmd) > max_len:
        cmd = cmd[: max_len - 1].rstrip() + "…"
    return f"pid {pid} ({cmd})" if cmd else f"pid {pid}"


def describe_server_info(info: Any) -> str:
    """A short description of a ``/server_info`` answer: version, demo or not, model, threshold."""
    if not isinstance(info, dict):
        return "an HTTP server whose /server_info is not a JSON object"
    version = info.get("version")
    what = f"an SGLang {version} server" if isinstance(version, str) else "a server that answers /server_info"
    details = []
    if info.get("simulated"):
        details.append("simulated demo server")
    if isinstance(info.get("model_path"), str):
        details.append(f"model {info['model_path']}")
    states = info.get("internal_states")
    if isinstance(states, list) and states and isinstance(states[0], dict):
        gate = states[0].get("spec_gate")
        if isinstance(gate, dict) and isinstance(gate.get("threshold"), int):
            details.append(f"threshold {gate['threshold']}")
    return what + (f" ({', '.join(details)})" if details else "")


def who_answers(host: str, port: int, api_key: str | None = None, timeout_s: float = 1.5) -> str:
    """What answers HTTP on ``host:port``, in a few words."""
    url = f"http://{host if ':' not in host else '[' + host + ']'}:{port}/server_info"
    headers = auth_headers(api_key)
    try:
        resp = httpx.get(url, timeout=timeout_s, headers=headers, trust_env=False)
    except httpx.TimeoutException:
        return "a process that accepts connections but does not answer HTTP in time"
    except httpx.HTTPError:
        return "a process that does not speak HTTP there (TLS? another protocol?)"
    if resp.status_code in (401, 403):
        return f"a server that wants an API key (HTTP {resp.status_code} on /server_info)"
    if resp.status_code != 200:
        return f"an HTTP server (HTTP {resp.status_code} on /server_info: not SGLang?)"
    try:
        return describe_server_info(resp.json())
    except ValueError:
        return "an HTTP server whose /server_info is not JSON"


@dataclass(frozen=True)
class PortTaken:
    """Why a server cannot be started on ``host:port``: who is there, and what to do."""

    host: str
    port: int
    who: str  #: e.g. "an SGLang 0.5.12 server (model M, threshold 50)"
    pids: tuple[int, ...]  #: listening processes found in /proc (may be empty)
    hint: str

    @property
    def message(self) -> str:
        """The full explanation (the CLI prints it; the log pane shows it)."""
        who = self.who
        if self.pids:
            who += ", " + ", ".join(process_line(p) for p in self.pids[:2])
        where = self.host.strip("[]") or "0.0.0.0"
        return f"port {self.port} on {where} is already in use by {who}. Not starting a second server there: {self.hint}"

    @property
    def watchable(self) -> bool:
        """Whether ``specconsole attach`` could watch what is there: it answered ``/server_info``
        (or asked for an API key), as :func:`who_answers` words it."""
        return self.who.startswith(("an SGLang ", "a server that answers /server_info", "a server that wants an API key"))

    @property
    def short(self) -> str:
        """One line for the top bar: the port and the listening process (or what answers)."""
        who = process_line(self.pids[0], 40) if self.pids else self.who
        return f"port {self.port} is already in use by {who}"


def check_port(host: str, port: int, *, hint: str, api_key: str | None = None,
               timeout_s: float = 0.5) -> PortTaken | None:
    """None when a server could bind ``host:port`` now; else who is there (see :class:`PortTaken`).

    Args:
        host: the server's ``--host`` (``0.0.0.0`` and ``::`` mean every interface).
        port: the server's ``--port``.
        hint: what the user can do about it, e.g. ``stop it or pass --port P``.
        api_key: sent to ``/server_info`` when asking who is there.
    """
    target = connect_host(host)
    accepts = _accepts(target, port, timeout_s)
    if not accepts and not _bind_in_use(host, port):
        return None
    who = (who_answers(target, port, api_key) if accepts
           else "a process that does not accept connections in time (its queue may be full)" if accepts is None
           else "a process listening on another address")
    pids = tuple(sorted(listener_pids(port) or ()))
    return PortTaken(host, port, who, pids, hint)


def port_problem(host: str, port: int, *, hint: str, api_key: str | None = None,
                 timeout_s: float = 0.5) -> str | None:
    """:func:`check_port`'s full message, or None when the port is free."""
    taken = check_port(host, port, hint=hint, api_key=api_key, timeout_s=timeout_s)
    return taken.message if taken else None
