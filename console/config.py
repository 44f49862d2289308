"""What the app is asked to do (:class:`AppConfig`) and the ``specconsole.toml`` file.

``specconsole.toml`` is read from the working directory, else from the user config directory
(``$XDG_CONFIG_HOME/specconsole/`` or ``~/.config/specconsole/``)::

    [server]                      # plain `specconsole` launches this server
    args = ["--model-path", "M", "--speculative-algorithm", "EAGLE3",
            "--speculative-draft-model-path", "D", "--speculative-disable-batch-threshold", "32"]
    log_dir = "logs"              # optional (default: see default_log_dir())
    # attach = "http://10.0.0.5:30000"   # instead of args: watch this server
    # log = "/var/log/sglang.log"         # with attach: the log to follow
    # api_key = "..."

    # several servers instead of [server] (one row each in the server list):
    # [[servers]]
    # url = "http://10.0.0.5:30000"      # a server, or SGLang's router (its workers are listed)
    # log = "/var/log/sglang-a.log"      # optional: this server's log
    # api_key = "..."                    # optional

    [console]                     # defaults for every mode; command-line options win
    interval = 1.0                # seconds between polls
    theme = "dark"                # dark | light | ansi
    readonly = false
"""

from __future__ import annotations

import ipaddress
import os
import re
import tempfile

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CONFIG_NAME = "specconsole.toml"
DEFAULT_URL = "http://127.0.0.1:30000"


def _xdg_base(variable: str, default: Path) -> Path:
    """``$variable`` when it is an absolute path, else ``default``: the XDG Base Directory spec
    says a relative value is invalid and is to be ignored."""
    value = os.environ.get(variable) or ""
    return Path(value) if os.path.isabs(value) else default


def user_config_dir() -> Path:
    """``$XDG_CONFIG_HOME/specconsole`` or ``~/.config/specconsole`` (a relative
    ``$XDG_CONFIG_HOME`` is ignored)."""
    return _xdg_base("XDG_CONFIG_HOME", Path.home() / ".config") / "specconsole"


def default_log_dir() -> Path:
    """Where launch/demo write server logs: ``$XDG_STATE_HOME/specconsole/logs`` or
    ``~/.local/state/...`` (a relative ``$XDG_STATE_HOME`` is ignored)."""
    return _xdg_base("XDG_STATE_HOME", Path.home() / ".local" / "state") / "specconsole" / "logs"


def writable_dir_problem(path: Path, create: bool = True) -> tuple[str, str] | None:
    """Whether files can be written in ``path`` (``os.access`` says yes to root on /proc and /sys;
    only writing a file tells). None when they can, else ``(stage, reason)`` with stage ``"file"``
    (it is a file), ``"create"`` (it cannot be created) or ``"write"`` (no file can be written
    there), for the caller's own message. A missing ``path`` is created with ``create``; without
    it nothing is left behind: its nearest existing parent must be a directory a file (and so the
    missing folders) can be written in, and the caller creates ``path`` when it needs it."""
    if path.exists() and not path.is_dir():
        return "file", "it is a file"
    probe, stage = path, "write"
    if not path.exists() and not create:
        probe, stage = path.parent, "create"  # the nearest existing parent: the folders go there
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        if not probe.is_dir():
            return "create", f"{probe} is a file"
    try:
        probe.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return "create", str(exc.strerror or exc)
    try:
        with tempfile.NamedTemporaryFile(dir=probe, prefix=".specconsole-write-test-"):
            pass
    except OSError as exc:
        return stage, str(exc.strerror or exc)
    return None


def find_config(cwd: Path | None = None) -> Path | None:
    """The config file to use: ``./specconsole.toml``, else the user config dir's, else None.

    Raises:
        ConfigError: a candidate path exists but is not a file (a directory of that name).
    """
    for candidate in ((cwd or Path.cwd()) / CONFIG_NAME, user_config_dir() / CONFIG_NAME):
        if candidate.is_file():
            return candidate
        if candidate.exists():
            raise ConfigError(f"{candidate} is not a file; the config must be a TOML file")
    return None


class ConfigError(Exception):
    """The config file is unreadable or has wrong types."""


SECTION_KEYS = {"server", "console", "servers"}
SERVER_KEYS = {"args", "log_dir", "attach", "log", "api_key"}
CONSOLE_KEYS = {"interval", "theme", "readonly"}
#: keys of one ``[[servers]]`` entry
SERVERS_KEYS = {"url", "log", "api_key"}


SECRET_FLAGS = ("--api-key", "--admin-api-key")
REDACTED = "***"


def check_api_key(key: str, where: str = "--api-key") -> str:
    """``key`` if it can travel in an HTTP ``Authorization: Bearer`` header: non-empty, printable
    ASCII, no control characters, no leading or trailing blank (httpx refuses those deep inside a
    request; inner spaces are legal, and SGLang compares the key as a plain string).

    Raises:
        ConfigError: naming ``where`` and what is wrong, never the key itself (it is a secret).
    """
    if not isinstance(key, str) or not key:
        raise ConfigError(f"{where} must be a non-empty string")
    if not key.isascii():
        raise ConfigError(f"{where} has non-ASCII characters; an HTTP header cannot carry them")
    if any(not ch.isprintable() for ch in key) or key != key.strip():
        raise ConfigError(f"{where} has control characters or a leading/trailing blank (a stray newline?)")
    return key


def redact_args(args: list[str]) -> list[str]:
    """``args`` with the value of every ``--api-key``/``--admin-api-key`` replaced by ``***``, for
    anything the console shows or writes (log pane, crash dialog, log-file marker line)."""
    out = list(args)
    for i, a in enumerate(out):
        if a in SECRET_FLAGS and i + 1 < len(out):
            out[i + 1] = REDACTED
        elif a.startswith(tuple(f + "=" for f in SECRET_FLAGS)):
            out[i] = a.split("=", 1)[0] + "=" + REDACTED
    return out


#: [server] keys that must be non-empty strings when present
SERVER_STRING_KEYS = ("log_dir", "attach", "log", "api_key")


def load_config(path: Path) -> dict[str, Any]:
    """Parse and type-check a config file; returns ``{"server": {...}, "console": {...}, "path": str}``.

    Raises:
        ConfigError: unreadable or not UTF-8, not TOML, unknown tables/keys, a value of the wrong
            type (the message names the file and the key).
    """
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8-sig"))  # -sig: a BOM from some editors
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: {exc}") from exc
    server = data.get("server", {})
    console = data.get("console", {})
    if not isinstance(server, dict) or not isinstance(console, dict):
        raise ConfigError(f"{path}: [server] and [console] must be tables")
    args = server.get("args")
    if args is not None and (not isinstance(args, list) or not all(isinstance(a, str) for a in args)):
        raise ConfigError(f"{path}: server.args must be a list of strings")
    if args is not None and not args:
        raise ConfigError(f"{path}: server.args is empty; give the server arguments or remove the key")
    for table, got, known in (("", data, SECTION_KEYS), ("server", server, SERVER_KEYS),
                              ("console", console, CONSOLE_KEYS)):
        unknown = sorted(set(got) - known)
        if unknown:
            where = f"[{table}] " if table else ""
            raise ConfigError(f"{path}: unknown {where}key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    for key in SERVER_STRING_KEYS:
        if key in server and (not isinstance(server[key], str) or not server[key].strip()):
            raise ConfigError(f"{path}: server.{key} must be a non-empty string (got {server[key]!r})"
                              if key != "api_key" else f"{path}: server.api_key must be a non-empty string")
    if "api_key" in server:
        check_api_key(server["api_key"], f"{path}: server.api_key")
    for key, instead in (("api_key", "a launched server's key goes in server.args as --api-key"),
                         ("log", "a launched server's log is written by the console, into server.log_dir")):
        if key in server and "attach" not in server:
            raise ConfigError(f"{path}: server.{key} applies only with server.attach ({instead})")
    if server.get("args") and server.get("attach"):
        raise ConfigError(f"{path}: server.args (launch) and server.attach (watch) exclude each other; keep one")
    if "log_dir" in server and "attach" in server:
        raise ConfigError(f"{path}: server.log_dir applies only with server.args (an attached server "
                          "writes its own log: name it with server.log)")
    if "log_dir" in server and not server.get("args"):
        raise ConfigError(f"{path}: server.log_dir applies only with server.args (where the log of the "
                          "server the console launches goes): add server.args, or remove server.log_dir")
    for key, typ, expected in (("interval", (int, float), "a number of seconds, e.g. 1.0"),
                               ("theme", str, 'a theme name in quotes, e.g. "dark"'),
                               ("readonly", bool, "true or false")):
        if key in console and (not isinstance(console[key], typ) or isinstance(console[key], bool) != (typ is bool)):
            raise ConfigError(f"{path}: console.{key} has the wrong type: expected {expected}, "
                              f"got {console[key]!r}")
    servers = _load_servers(path, data.get("servers"))
    if servers and "server" in data:  # even an empty [server]: the file says two things
        raise ConfigError(f"{path}: [server] and [[servers]] exclude each other; keep one "
                          "([[servers]] lists the servers to watch)")
    return {"server": server, "console": console, "servers": servers, "path": str(path)}


def _load_servers(path: Path, servers: Any) -> list[dict[str, str]]:
    """Type-check the ``[[servers]]`` list (each: ``url``, optional ``log`` and ``api_key``)."""
    if servers is None:
        return []
    if not isinstance(servers, list) or not all(isinstance(s, dict) for s in servers):
        raise ConfigError(f"{path}: servers must be a list of tables: [[servers]] with url = \"...\"")
    if not servers:
        raise ConfigError(f"{path}: servers is empty; list at least one [[servers]] url")
    for i, entry in enumerate(servers, 1):
        unknown = sorted(set(entry) - SERVERS_KEYS)
        if unknown:
            raise ConfigError(f"{path}: unknown key(s) {', '.join(unknown)} in [[servers]] #{i}; "
                              f"known: {', '.join(sorted(SERVERS_KEYS))}")
        if "url" not in entry:
            raise ConfigError(f"{path}: [[servers]] #{i} has no url")
        for key in sorted(SERVERS_KEYS):
            if key in entry and (not isinstance(entry[key], str) or not entry[key].strip()):
                raise ConfigError(f"{path}: [[servers]] #{i} {key} must be a non-empty string"
                                  + ("" if key == "api_key" else f" (got {entry[key]!r})"))
        if "api_key" in entry:
            check_api_key(entry["api_key"], f"{path}: [[servers]] #{i} api_key")
    return servers


@dataclass(frozen=True)
class ServerTarget:
    """One server of several to watch (``attach URL URL ...`` or ``[[servers]]``).

    Attributes:
        url: the server's base URL (normalized).
        log_path: its log file to follow, or None.
        api_key: its bearer token, or None.
    """

    url: str
    log_path: Path | None = None
    api_key: str | None = None


@dataclass
class AppConfig:
    """Everything :class:`console.app.SpecConsoleApp` needs to run one session.

    Attributes:
        mode: ``launch`` (start and own a server), ``attach`` (watch one), ``demo`` (start the
            simulated server) or ``none`` (show how to start one; offers the demo).
        url: server base URL.
        api_key: bearer token for the server's API (SGLang ``--api-key``/``--admin-api-key``).
        log_path: log file to follow (launch/demo: the file the child writes).
        server_command: full argv of the child (launch/demo).
        log_dir: directory for launch/demo log files.
        readonly: no threshold changes.
        interval_s: seconds between polls (HTTP and NVML).
        theme: ``dark``, ``light`` or ``ansi``.
        stop_timeout_s: seconds between SIGTERM and SIGKILL when stopping the server group.
        nvml: ``real`` (nvidia-ml-py) or ``sim`` (simulated GPU, demo default without NVML).
        handle_signals: install SIGTERM/SIGHUP handlers (off under the test driver).
        demo_args: extra arguments for the demo server.
        config_path: the config file read (mode ``none``: it names no server), or None.
        servers: attach mode with several servers: every one (the first is ``url``); empty
            for one server (the console then runs exactly as with a single URL).
        notes: console lines written when the session starts (e.g. a router's workers found).
    """

    mode: str = "attach"
    url: str = DEFAULT_URL
    api_key: str | None = None
    log_path: Path | None = None
    server_command: list[str] | None = None
    log_dir: Path = field(default_factory=default_log_dir)
    readonly: bool = False
    interval_s: float = 1.0
    theme: str = "dark"
    stop_timeout_s: float = 10.0
    nvml: str = "real"
    handle_signals: bool = True
    demo_args: list[str] = field(default_factory=list)
    config_path: str | None = None
    servers: tuple[ServerTarget, ...] = ()
    notes: tuple[str, ...] = ()


_HOST_LABEL = re.compile(r"^(?!-)[A-Za-z0-9_-]{1,63}(?<!-)$")


def valid_host(host: str) -> bool:
    """True for an IP address or a DNS host name (letters, digits, ``-`` and ``.``; no spaces; not
    all digits in its last label, which only a malformed IPv4 address like ``999.1.1.1`` has)."""
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        pass
    name = host[:-1] if host.endswith(".") else host
    # an all-numeric last label is no DNS name (RFC 1123 2.1) but a malformed IPv4 address: 999.1.1.1
    return (0 < len(name) <= 253 and all(_HOST_LABEL.match(label) for label in name.split("."))
            and not name.split(".")[-1].isdigit())


def normalize_url(text: str) -> str:
    """The server base URL for ``text``: ``http://`` added when no scheme is given, no trailing slash.

    ``127.0.0.1:30000`` -> ``http://127.0.0.1:30000``. Raises ConfigError (with a message for
    the user) for another scheme, a missing or malformed host (``not a url``), a port that is
    not a number or out of range.
    """
    from urllib.parse import urlsplit

    raw = text.strip()
    example = "(e.g. http://127.0.0.1:30000)"
    url = raw if "://" in raw else "http://" + raw
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise ConfigError(f"server URL {raw!r} is not a URL ({exc}) {example}") from None
    if "@" in parts.netloc or parts.query or parts.fragment:
        # credentials in a URL end up on screen and in logs: refuse, and do not echo them
        raise ConfigError("server URL: no user:password@ and no ?query or #fragment; "
                          f"give the API key with --api-key / api_key {example}")
    if parts.scheme not in ("http", "https"):
        raise ConfigError(f"server URL {raw!r}: use http:// or https:// {example}")
    try:
        port = parts.port  # raises ValueError for a non-numeric or out-of-range port
    except ValueError:
        port_text = parts.netloc.rsplit(":", 1)[-1]
        if port_text.isdigit():
            raise ConfigError(f"server URL {raw!r}: port {port_text} is out of range (1-65535) {example}") from None
        raise ConfigError(f"server URL {raw!r}: the port is not a number {example}") from None
    if port == 0:
        raise ConfigError(f"server URL {raw!r}: port 0 is out of range (1-65535) {example}")
    if not parts.hostname:
        raise ConfigError(f"server URL {raw!r} has no host {example}")
    if any(ch.isspace() for ch in raw) or not valid_host(parts.hostname):
        raise ConfigError(f"server URL {raw!r}: {parts.hostname!r} is not a host name or IP address {example}")
    return url.rstrip("/")


def server_key(url: str) -> tuple:
    """What tells two normalized server URLs apart: scheme, host without case, port with the
    scheme's default filled in, path. ``http://LOCALHOST:80/`` and ``http://localhost`` are one server."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return (parts.scheme, (parts.hostname or "").lower(), parts.port or {"http": 80, "https": 443}.get(parts.scheme),
            parts.path.rstrip("/"))


def flag_value(args: list[str], flag: str) -> str | None:
    """The value of ``flag`` in server arguments (``--flag V`` or ``--flag=V``; the last one wins,
    as in argparse), or None."""
    value = None
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            value = args[i + 1]
        elif a.startswith(flag + "="):
            value = a.split("=", 1)[1]
    return value


def server_host_port(args: list[str]) -> tuple[str, int | None]:
    """``(host, port)`` a server started with ``args`` binds (``--host``/``--port``, the last one
    wins; SGLang's defaults 127.0.0.1 and 30000). ``port`` is None when it is not a number."""
    host, port = flag_value(args, "--host"), flag_value(args, "--port")
    host = "127.0.0.1" if host is None else host  # an empty value stays empty (and is refused)
    port = "30000" if port is None else port
    try:
        return host, int(port)
    except ValueError:
        return host, None


def url_from_server_args(args: list[str]) -> str:
    """Base URL a server started with ``args`` will answer on (``--host``/``--port``, SGLang defaults)."""
    host, port = server_host_port(args)
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port if port is not None else 30000}"


def api_key_from_server_args(args: list[str]) -> str | None:
    """``--admin-api-key`` (preferred: it guards /set_internal_state) or ``--api-key`` from server args."""
    return flag_value(args, "--admin-api-key") or flag_value(args, "--api-key")
