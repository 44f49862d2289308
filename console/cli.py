"""``specconsole``: parse the command line, pick the mode, run the app, clean up.

    specconsole [--readonly] [--interval S] [--theme dark|light|ansi]
    specconsole launch [--log-dir DIR] [--stop-timeout S] -- <sglang server args>
    specconsole attach URL [URL ...] [--log FILE ...] [--api-key KEY]
    specconsole demo [--log-dir DIR] [--port P] [--gpus sim|real] [-- <demo server args>]

Without a mode: launch the server of ``specconsole.toml`` (working directory, then the user
config directory) if there is one, else attach to ``http://127.0.0.1:30000`` if it answers,
else show how to start a server (and offer the demo).
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import replace
from pathlib import Path

import themes
from console import __version__
from console.config import (
    DEFAULT_URL,
    AppConfig,
    ConfigError,
    ServerTarget,
    api_key_from_server_args,
    check_api_key,
    default_log_dir,
    find_config,
    load_config,
    normalize_url,
    server_host_port,
    server_key,
    valid_host,
    writable_dir_problem,
)
from console.logfollow import file_kind
from console.modes import demo_config, launch_config
from console.state import PHASE_CRASHED
from server_patch import contract

#: escape sequences that switch off every mouse-tracking mode and bracketed paste, show the cursor
TERMINAL_RESET = "\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?1005l\x1b[?1006l\x1b[?1015l\x1b[?2004l\x1b[?25h"


LOG_DIR_HELP = "$XDG_STATE_HOME/specconsole/logs, else ~/.local/state/specconsole/logs"
MIN_INTERVAL_S, MAX_INTERVAL_S = 0.1, 3600.0  # poll period bounds (a longer one looks like a hang)


def _common() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    p.add_argument("--readonly", action=argparse.BooleanOptionalAction, default=argparse.SUPPRESS,
                   help="no threshold changes (--no-readonly: allow them, over the config file's readonly)")
    p.add_argument("--interval", type=float, default=argparse.SUPPRESS, metavar="SECONDS",
                   help="seconds between polls of the server and NVML (0.1-3600, default 1; the log pane follows at least every 2 s, a launched server is polled every second until ready)")
    p.add_argument("--theme", choices=list(themes.THEMES), default=argparse.SUPPRESS,
                   help="colour theme (default dark; ansi = 8 colours)")
    return p


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (server arguments go after ``--`` and are split off before parsing)."""
    common = _common()
    parser = argparse.ArgumentParser(
        allow_abbrev=False,
        prog="specconsole",
        parents=[common],
        description="Terminal console for SGLang EAGLE/EAGLE-3 with dynamic speculation disable.",
        epilog="No mode: launch the server of specconsole.toml, else attach to 127.0.0.1:30000, else explain.",
    )
    parser.add_argument("--version", action="version", version=f"specconsole {__version__}")
    sub = parser.add_subparsers(dest="mode", metavar="{launch,attach,demo}")
    launch = sub.add_parser(
        "launch", parents=[common], allow_abbrev=False, help="start a server and own it: specconsole launch -- <server args>",
        usage="specconsole launch [options] -- <server args>",
        description="Start python -m server_patch.launch_server <server args> in its own process group, "
                    "watch it, and stop the whole group on quit, SIGTERM or SIGHUP.",
        epilog="Everything after -- goes to the server, e.g. specconsole launch -- --model-path M "
               "--speculative-algorithm EAGLE3 --speculative-draft-model-path D "
               f"{contract.THRESHOLD_FLAG} 32",
    )
    launch.add_argument("--log-dir", type=_dir_path, default=None, metavar="DIR",
                        help="where the server log goes (default " + LOG_DIR_HELP + ")")
    launch.add_argument("--stop-timeout", type=float, default=10.0, metavar="SECONDS",
                        help="SIGTERM to SIGKILL delay when stopping the server group (default 10)")
    attach = sub.add_parser(
        "attach", parents=[common], allow_abbrev=False, help="watch a running server (never stops it)",
        description="Watch one or more running SGLang servers (or SGLang's router) over HTTP, and follow their "
                    "logs where --log names them; quitting never stops a server.")
    attach.add_argument("url", nargs="+",
                        help="e.g. http://127.0.0.1:30000 (http:// is added when no scheme is given); "
                             "several: a server list, one in focus ([ and ] move it); SGLang's router: its workers")
    attach.add_argument("--log", type=log_path, action="append", default=None,
                        help="the server's log file to follow (several servers: one --log per URL, in order)")
    attach.add_argument("--api-key", default=None, help="the server's --api-key / --admin-api-key (every server's)")
    demo = sub.add_parser(
        "demo", parents=[common], allow_abbrev=False, help="run against a built-in simulated server (no GPU needed)",
        usage="specconsole demo [options] [-- <demo server args>]",
        description="Start the simulated server (python -m console.demo_server) like a real one and watch it.",
        epilog="Arguments after -- go to the demo server, e.g. -- --load 8,48 --phase-seconds 5 "
               "(see python -m console.demo_server --help).",
    )
    demo.add_argument("--log-dir", type=_dir_path, default=None, metavar="DIR",
                      help="where the demo server's log goes (default " + LOG_DIR_HELP + ")")
    demo.add_argument("--port", type=int, default=None, help="port of the simulated server (default: a free one)")
    demo.add_argument("--gpus", choices=("sim", "real"), default="sim",
                      help="GPU panel: a simulated H200 (default) or this machine's GPUs via NVML (the demo server then reports no GPU of its own)")
    demo.add_argument("--stop-timeout", type=float, default=10.0, metavar="SECONDS",
                      help="SIGTERM to SIGKILL delay when stopping the demo server's group (default 10)")
    parser.mode_parsers = sub.choices  # resolve() reports a mode's errors with that mode's usage line
    return parser


def resolve(argv: list[str]) -> AppConfig:
    """Turn the command line (and the config file) into an :class:`AppConfig`. Exits on usage errors."""
    parser = build_parser()
    own, extra = argv, []
    if "--" in argv:
        i = argv.index("--")
        own, extra = argv[:i], argv[i + 1:]
    args, unknown = parser.parse_known_args(own)
    if unknown:  # with the mode's usage line, not the top-level one
        parser.mode_parsers.get(args.mode, parser).error(f"unrecognized arguments: {' '.join(unknown)}")

    file_cfg = None
    try:
        path = find_config()
        if path is not None:
            file_cfg = load_config(path)
    except ConfigError as exc:
        parser.error(str(exc))
    console_defaults = file_cfg["console"] if file_cfg else {}
    _check_file_values(parser, file_cfg)  # the file's own values, whatever the flags say
    interval = getattr(args, "interval", None)
    if interval is None:
        interval = console_defaults.get("interval", 1.0)
    elif not _interval_ok(interval):  # with the mode's usage, as argparse's own --interval errors
        parser.mode_parsers.get(args.mode, parser).error(f"--interval {_INTERVAL_RULE} (got {interval})")
    # --theme is one of argparse's choices and the file's theme was checked above
    base = AppConfig(
        readonly=getattr(args, "readonly", console_defaults.get("readonly", False)),
        interval_s=float(interval),
        theme=getattr(args, "theme", console_defaults.get("theme", themes.DEFAULT_THEME)),
    )

    mode_parser = parser.mode_parsers.get(args.mode, parser)
    stop_timeout = getattr(args, "stop_timeout", 0)
    if not math.isfinite(stop_timeout) or stop_timeout < 0:
        mode_parser.error(f"--stop-timeout must be a finite number of seconds >= 0 (got {stop_timeout:g})")
    if getattr(args, "port", None) is not None and not 1 <= args.port <= 65535:
        mode_parser.error(f"--port must be 1-65535 (got {args.port})")
    if args.mode == "launch":
        if not extra:
            mode_parser.error("launch needs the server arguments after --, e.g. specconsole launch -- --model-path M ...")
        base = replace(base, log_dir=args.log_dir or default_log_dir(), stop_timeout_s=args.stop_timeout)
        _check_log_dir_option(mode_parser, base.log_dir, args.log_dir)
        _check_server_api_key(mode_parser, extra)
        _check_server_address(mode_parser, extra)
        return launch_config(base, extra)
    if args.mode == "attach":
        if extra:
            mode_parser.error("attach takes no server arguments")
        urls = []
        for raw in args.url:
            try:
                urls.append(normalize_url(raw))
            except ConfigError as exc:
                mode_parser.error(str(exc))
        logs = args.log or []
        if len(urls) == 1 and len(logs) > 1:
            mode_parser.error("one server takes one --log")
        if len(urls) > 1 and logs and len(logs) != len(urls):
            mode_parser.error(f"{len(urls)} servers and {len(logs)} --log: give one --log per URL, "
                              "in the same order, or none")
        _check_api_key(mode_parser, args.api_key, "--api-key")
        for log in logs:
            check_log_file(mode_parser, log, "--log")
        if len(urls) == 1:
            return replace(base, mode="attach", url=urls[0], log_path=logs[0] if logs else None,
                           api_key=args.api_key)
        _check_duplicates(mode_parser, urls, "")  # the usage line already says attach
        targets = tuple(ServerTarget(u, logs[i] if logs else None, args.api_key) for i, u in enumerate(urls))
        return multi_config(base, targets)
    if args.mode == "demo":
        # --gpus real: this machine's GPUs, so the demo server reports none of its own
        base = replace(base, log_dir=args.log_dir or default_log_dir(), stop_timeout_s=args.stop_timeout,
                       nvml=args.gpus, demo_args=(["--no-rank-gpus"] if args.gpus == "real" else []) + extra)
        _check_log_dir_option(mode_parser, base.log_dir, args.log_dir)
        _check_server_api_key(mode_parser, extra)
        cfg = demo_config(base, port=args.port)
        _check_server_address(mode_parser, cfg.server_command or [], "demo server")
        return cfg
    if extra:
        parser.error("server arguments need a mode: specconsole launch -- <server args>")

    # no mode: config file, else a local server, else explain
    if file_cfg is not None and file_cfg.get("servers"):
        return _servers_from_file(parser, base, file_cfg)
    if file_cfg is not None:
        server = file_cfg["server"]
        log_dir = Path(server["log_dir"]).expanduser() if server.get("log_dir") else default_log_dir()
        if server.get("args"):
            _check_server_api_key(parser, server["args"], where=f"{file_cfg['path']}: server.args")
            _check_server_address(parser, server["args"], f"{file_cfg['path']}: server.args")
            _check_log_dir(parser, log_dir, f"{file_cfg['path']}: server.log_dir")
            return launch_config(replace(base, log_dir=log_dir), server["args"])
        if server.get("attach"):
            log = Path(server["log"]).expanduser() if server.get("log") else None
            check_log_file(parser, log, f"{file_cfg['path']}: server.log")
            try:
                url = normalize_url(str(server["attach"]))
            except ConfigError as exc:
                parser.error(f"{file_cfg['path']}: server.attach: {exc}")
            return replace(base, mode="attach", url=url, log_path=log, api_key=server.get("api_key"))
    from console.client import probe

    if probe(DEFAULT_URL):
        return replace(base, mode="attach", url=DEFAULT_URL)
    return replace(base, mode="none", url=DEFAULT_URL, config_path=file_cfg["path"] if file_cfg else None)


def multi_config(base: AppConfig, targets: tuple[ServerTarget, ...]) -> AppConfig:
    """Attach mode for ``targets``: one of them is a plain attach config (the first, for
    today's single-server path), several make the server list."""
    first = targets[0]
    return replace(base, mode="attach", url=first.url, log_path=first.log_path, api_key=first.api_key,
                   servers=targets if len(targets) > 1 else ())


def _check_duplicates(parser: argparse.ArgumentParser, urls: list[str], where: str) -> None:
    """Refuse a server given twice (exits): two rows of one server would fight over its gate."""
    seen: dict[tuple, str] = {}
    for url in urls:
        key = server_key(url)
        if key in seen:
            same = "" if seen[key] == url else f" (as {seen[key]})"
            parser.error(f"{where + ': ' if where else ''}server {url} is given twice{same}; list each server once")
        seen[key] = url


def _servers_from_file(parser: argparse.ArgumentParser, base: AppConfig, file_cfg: dict) -> AppConfig:
    """The config file's ``[[servers]]`` as an attach config (exits on a bad URL or log)."""
    path = file_cfg["path"]
    targets = []
    for i, entry in enumerate(file_cfg["servers"], 1):
        try:
            url = normalize_url(entry["url"])
        except ConfigError as exc:
            parser.error(f"{path}: [[servers]] #{i} url: {exc}")
        log = Path(entry["log"]).expanduser() if entry.get("log") else None
        check_log_file(parser, log, f"{path}: [[servers]] #{i} log")
        targets.append(ServerTarget(url, log, entry.get("api_key")))
    _check_duplicates(parser, [t.url for t in targets], f"{path}: [[servers]]")
    return multi_config(base, tuple(targets))


_INTERVAL_RULE = f"must be a number of seconds from {MIN_INTERVAL_S} to {MAX_INTERVAL_S:g}"


def _interval_ok(seconds: float) -> bool:
    """A poll period the console accepts (from ``--interval`` or the config file)."""
    return math.isfinite(seconds) and MIN_INTERVAL_S <= seconds <= MAX_INTERVAL_S


def _check_file_values(parser: argparse.ArgumentParser, file_cfg: dict | None) -> None:
    """Refuse a config file's out-of-range interval or unknown theme even when a command-line
    flag overrides it for this run (exits): a broken file is reported every time, not only on
    the runs that happen to use it."""
    if not file_cfg:
        return
    values, path = file_cfg["console"], file_cfg["path"]
    interval = values.get("interval")
    if interval is not None and not _interval_ok(interval):
        parser.error(f"{path}: console.interval {_INTERVAL_RULE} (got {interval})")
    theme = values.get("theme")
    if theme is not None and theme not in themes.THEMES:
        parser.error(f"{path}: console.theme: unknown theme {theme!r}; known: {', '.join(themes.THEMES)}")


def _check_server_address(parser: argparse.ArgumentParser, server_args: list[str], where: str = "server") -> None:
    """Refuse a ``--port``/``--host`` in the server arguments the console could not watch (exits):
    the console would otherwise poll a default or impossible address forever."""
    host, port = server_host_port(server_args)
    if port is None or not 1 <= port <= 65535:
        parser.error(f"{where} --port must be a number from 1 to 65535")
    if not valid_host(host):
        parser.error(f"{where} --host {host!r} is not a host name or IP address")


def _dir_path(text: str) -> Path:
    """``--log-dir``'s type: a path, refusing an empty one (``Path("")`` is the current directory,
    which nobody means by an empty value)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path: give a directory (--log-dir . for this one)")
    return Path(text)


def _check_log_dir_option(parser: argparse.ArgumentParser, path: Path, given: Path | None) -> None:
    """:func:`_check_log_dir` naming ``--log-dir`` when it was ``given``, else the default and
    where it came from."""
    if given is not None:
        _check_log_dir(parser, path, "--log-dir")
    else:
        _check_log_dir(parser, path, "default log directory", hint=(
            ". The default log directory is from $XDG_STATE_HOME (or ~/.local/state when unset); "
            "choose another with --log-dir"))


def _check_log_dir(parser: argparse.ArgumentParser, path: Path, where: str, hint: str = "") -> None:
    """Refuse a log directory the console cannot write the server log into (exits 2 before the
    screen opens); a missing one is left missing (the launch creates it: a refusal after this, e.g.
    no terminal, leaves nothing behind). ``hint`` ends the message."""
    problem = writable_dir_problem(path, create=False)
    if problem is None:
        return
    stage, reason = problem
    if stage == "file":
        parser.error(f"{where} {path} is a file, not a directory{hint}")
    if stage == "create":
        parser.error(f"{where} {path}: cannot create it ({reason}){hint}")
    parser.error(f"{where} {path}: cannot write a log file there ({reason}){hint}")


def log_path(text: str) -> Path:
    """argparse type of ``--log``: a path; an empty one is refused (``Path("")`` is the current
    directory, which read as "--log . is a directory")."""
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty: give the server's log file")
    return Path(text)


def check_log_file(parser: argparse.ArgumentParser, path: Path | None, where: str) -> None:
    """Refuse a log path that is a directory or not a regular file (a named pipe blocks the
    reader until a writer opens it, and quitting with it; a device such as /dev/zero never
    ends): exits. A missing file is fine (it may appear)."""
    if path is None:
        return
    if path.is_dir():
        parser.error(f"{where} {path} is a directory; give the server's log file")
    try:
        mode = path.stat().st_mode
    except OSError:
        return  # missing (or unreadable: the log pane says so when it tries)
    kind = file_kind(mode)
    if kind is not None:
        parser.error(f"{where} {path} is {kind}; give the server's log file (a regular file the server writes)")


def _check_api_key(parser: argparse.ArgumentParser, key: str | None, where: str) -> None:
    """Refuse an API key the console could not send (exits; the message never shows the key)."""
    if key is not None:
        try:
            check_api_key(key, where)
        except ConfigError as exc:
            parser.error(str(exc))


def _check_server_api_key(parser: argparse.ArgumentParser, server_args: list[str], where: str = "server") -> None:
    """Refuse a server ``--api-key``/``--admin-api-key`` the console could not send (exits)."""
    _check_api_key(parser, api_key_from_server_args(server_args), f"{where} --api-key/--admin-api-key")


def _stdout_is_terminal() -> bool:
    try:
        return sys.stdout.isatty()
    except (OSError, ValueError):
        return False


def reset_terminal() -> None:
    """Belt and braces after the app ends: mouse tracking off, cursor on (Textual does this too)."""
    try:
        if sys.stdout.isatty():
            sys.stdout.write(TERMINAL_RESET)
            sys.stdout.flush()
    except (OSError, ValueError):
        pass


def port_problem(cfg: AppConfig) -> str | None:
    """Launch/demo: why the server cannot be started on its port (something is there), or None."""
    if not cfg.server_command:
        return None
    from console.portcheck import check_port, port_hint

    host, port = server_host_port(cfg.server_command)
    if port is None:
        return None
    taken = check_port(host, port, hint=port_hint(cfg.mode), api_key=cfg.api_key)
    if taken is None:
        return None
    if taken.watchable:
        return taken.message + f". To watch that server instead: specconsole attach {cfg.url}"
    return taken.message


def main(argv: list[str] | None = None) -> int:
    """The ``specconsole`` entry point. Returns the process exit code."""
    cfg = resolve(list(sys.argv[1:] if argv is None else argv))
    if cfg.mode == "attach":
        from console.servers import expand_routers

        cfg = expand_routers(cfg)  # SGLang's router: watch its workers instead
    problem = port_problem(cfg)
    if problem:  # before the screen: the message stays in the terminal
        import shutil
        import textwrap

        width = max(40, min(100, shutil.get_terminal_size((100, 24)).columns - 1))
        print(textwrap.fill(f"specconsole: {problem}", width=width, subsequent_indent="  ",
                            break_on_hyphens=False), file=sys.stderr)
        return 1
    if not _stdout_is_terminal():  # a TUI writes escape codes: into a pipe or a file they are garbage
        print("specconsole: standard output is not a terminal (piped or redirected); run it in a terminal, "
              "or use python -m console.headless_check for a check without one", file=sys.stderr)
        return 2
    from console.app import SpecConsoleApp

    nvml_module = None
    if cfg.nvml == "sim":
        from console.nvml_sim import SimulatedNvml

        nvml_module = SimulatedNvml()
    app = SpecConsoleApp(cfg, nvml_module=nvml_module)
    code = 0
    try:
        code = app.run() or app.return_code or 0  # Textual sets return_code 1 after a crash
    finally:
        app.shutdown_server()
        reset_terminal()
    if app.proc is not None and app.cfg.log_path is not None:
        print(f"specconsole: server log: {app.cfg.log_path}")
    return exit_code(int(code), app.model.process)


#: the console ended normally, but the server it launched had crashed (scripts can tell)
EXIT_SERVER_CRASHED = 3


def exit_code(app_code: int, process) -> int:
    """The process exit code: the app's own (1 after a console crash), else EXIT_SERVER_CRASHED
    when the server this console started was down with a crash at quit, else 0."""
    if app_code:
        return app_code
    if process is not None and process.phase == PHASE_CRASHED:
        return EXIT_SERVER_CRASHED
    return 0


if __name__ == "__main__":
    sys.exit(main())
