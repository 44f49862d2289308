"""Headless end-to-end check of the console against a server (made for the GPU machine).

Runs the real app under Textual's test driver (no terminal needed), waits for ``spec_gate``,
presses ``+``, waits until ``spec_gate`` confirms the new threshold, presses ``-`` to restore
it, and writes to ``--out DIR``:

* ``before.svg`` / ``after.svg`` — screenshots of the main screen (``--size``, default 160x50);
* ``observed.json`` — what the console saw: GPU rows, worker class and its log cross-check,
  spec_enabled, threshold before/after (+ whether confirmed and restored), load, log tail.

Usage::

    python -m console.headless_check --url http://127.0.0.1:30000 --log /path/server.log --out DIR
    python -m console.headless_check --demo --out DIR                 # simulated server
    python -m console.headless_check --launch --out DIR -- <server args>   # start, check, stop

Exit code 0 when the threshold change was confirmed (and restored), 1 otherwise, 2 on usage errors.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import math
import signal
import sys
import time
from pathlib import Path
from typing import Any, Callable

from console import state as st
from console.cli import MAX_INTERVAL_S, MIN_INTERVAL_S, check_log_file, log_path
from console.config import AppConfig, ConfigError, default_log_dir, normalize_url, writable_dir_problem
from server_patch import contract

MIN_COLS, MIN_ROWS = 80, 24  # the README's smallest supported terminal
MAX_COLS, MAX_ROWS = 1000, 500  # a screenshot larger than any terminal (99999x99999 ate GBs)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m console.headless_check", description=__doc__.split("\n\n")[0],
                                allow_abbrev=False)
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--url", help="attach to this server")
    target.add_argument("--demo", action="store_true", help="start the simulated server")
    target.add_argument("--launch", action="store_true", help="start the server given after --")
    p.add_argument("--log", type=log_path, default=None, help="server log to follow (attach)")
    p.add_argument("--api-key", default=None)
    p.add_argument("--out", required=True, help="directory for the SVGs and observed.json (created)")
    p.add_argument("--size", default="160x50", help="terminal size COLSxROWS (default 160x50)")
    p.add_argument("--timeout", type=float, default=60.0,
                   help="seconds to wait for each step (launch: for readiness too; default 60)")
    p.add_argument("--interval", type=float, default=0.5, help="poll interval, seconds")
    p.add_argument("--log-dir", type=Path, default=None, help="launch/demo: where the server log goes")
    p.add_argument("--no-restore", action="store_true", help="leave the threshold at +1")
    p.add_argument("--gpus", choices=("real", "sim"), default=None,
                   help="NVML or a simulated GPU (default: sim with --demo, else real)")
    return p


async def _wait(pilot: Any, cond: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        await pilot.pause(0.1)
    return cond()


#: seconds an answer must stay the same final one (not SGLang, no spec_gate, a spec_gate without a
#: threshold) before the check stops waiting for the gate: more than a poll, far less than --timeout
FINAL_ANSWER_S = 5.0


#: without max_running_requests, a threshold above this cannot be a decode batch size
MAX_PLAUSIBLE_THRESHOLD = 1 << 20


def final_answer(model: Any) -> str | None:
    """Why the server's current answer can never show a usable gate, or None while one may come
    (no answer yet, still starting). ``model``: the app's :class:`console.model.ConsoleModel`."""
    c, g, p = model.connection, model.gate, getattr(model, "process", None)
    if p is not None and p.phase in (st.PHASE_CRASHED, st.PHASE_STOPPED):
        last = f"; last log line: {p.last_lines[-1]}" if p.last_lines else ""
        if p.error:
            return f"the server was not started: {p.error}"
        return f"the server exited (code {p.exit_code}){last}"
    if g is not None and g.threshold is None:
        return ("the server's spec_gate has no usable threshold (missing or not an integer: it does "
                "not follow specconsole's contract)")
    if g is not None and g.threshold > (g.max_running_requests or MAX_PLAUSIBLE_THRESHOLD):
        # valid (the server only warns), but this check's + step would be refused before sending
        limit = (f"its max running requests {g.max_running_requests}" if g.max_running_requests
                 else "any batch size")
        return (f"the server's spec_gate threshold {g.threshold} is above {limit}: speculation never "
                "turns off there and this check's + step would be refused (start the server with "
                "--max-running-requests above the threshold)")
    if c.reachable and model.sample is not None and g is None:
        return f"the server answers but has no spec_gate (started without {contract.THRESHOLD_FLAG}?)"
    if c.reachable is False and (st.answered_not_sglang(c.last_error)
                                 or (c.last_error or "").startswith(("protocol error", "TLS error"))):
        return c.last_error  # something listens there, only not as an SGLang server would answer
    return None


async def _wait_for_gate(pilot: Any, model: Any, timeout: float) -> tuple[bool, str | None]:
    """Wait up to ``timeout`` s for a spec_gate with a threshold; give up early when the answer
    has been a final one (:func:`final_answer`) for ``FINAL_ANSWER_S``. Returns (seen, why not)."""
    def usable(why: str | None) -> bool:
        return why is None and model.gate is not None and model.gate.threshold is not None

    deadline = time.monotonic() + timeout
    final_since = None
    while time.monotonic() < deadline:
        why = final_answer(model)
        if usable(why):
            return True, None
        now = time.monotonic()
        if why is None:
            final_since = None
        elif final_since is None:
            final_since = now
        elif now - final_since >= FINAL_ANSWER_S:
            return False, why
        await pilot.pause(0.1)
    why = final_answer(model)
    return usable(why), why


def _gate_dict(g: st.GateState | None) -> dict[str, Any] | None:
    return dataclasses.asdict(g) if g is not None else None


def observe(app: Any) -> dict[str, Any]:
    """The values the console shows right now, as JSON-ready data."""
    snap: st.ConsoleSnapshot = app.model.snapshot()
    g = snap.gate
    from console.widgets.log_view import LogView

    try:
        log_tail = app.main_screen.query_one(LogView).visible_texts()[-40:]
    except Exception:  # noqa: BLE001
        log_tail = []
    return {
        "mode": snap.mode,
        "url": snap.url,
        "version": snap.version,
        "reachable": snap.connection.reachable,
        "last_error": snap.connection.last_error,
        "worker_class": g.worker_class if g else None,
        "spec_version": g.spec_version if g else None,
        "overlap": g.overlap if g else None,
        "worker_check": dataclasses.asdict(snap.worker),
        "spec_enabled": g.spec_enabled if g else None,
        "threshold": g.threshold if g else None,
        "hysteresis": g.hysteresis if g else None,
        "max_running_requests": snap.max_running_requests,
        "running_batch": snap.running_batch,
        "load": dataclasses.asdict(snap.load) if snap.load else None,
        "gate": _gate_dict(g),
        "gpus": {
            "status": snap.gpus.status,
            "message": snap.gpus.message,
            "driver_version": snap.gpus.driver_version,
            "simulated": snap.gpus.simulated,
            "rows": [dataclasses.asdict(r) for r in snap.gpus.rows],
        },
        "process": dataclasses.asdict(snap.process) if snap.process else None,
        "message": snap.message,
        "log_tail": log_tail,
    }


async def run_check(
    cfg: AppConfig,
    out: Path,
    size: tuple[int, int] = (160, 50),
    timeout: float = 60.0,
    restore: bool = True,
    nvml_module: Any = None,
    ready_timeout: float | None = None,
    progress: Callable[[str], None] = lambda s: None,
) -> dict[str, Any]:
    """Run the check; returns (and writes to ``out/observed.json``) the observations.

    Args:
        cfg: the session (attach/demo/launch) to run; signal handlers are disabled.
        out: output directory (created).
        size: terminal (columns, rows).
        timeout: seconds per step.
        restore: press ``-`` afterwards to put the threshold back.
        nvml_module: pynvml replacement (None: nvidia-ml-py).
        ready_timeout: seconds to wait for the first spec_gate (default ``timeout``).
    """
    from console.app import SpecConsoleApp

    out.mkdir(parents=True, exist_ok=True)
    cfg = dataclasses.replace(cfg, handle_signals=False)
    app = SpecConsoleApp(cfg, nvml_module=nvml_module)
    result: dict[str, Any] = {"ok": False, "steps": []}

    def step(name: str, ok: bool, **extra: Any) -> None:
        result["steps"].append({"step": name, "ok": ok, **extra})
        progress(f"{name}: {'ok' if ok else 'FAILED'}" + (f" ({extra['why']})" if not ok and extra.get("why") else ""))

    # SIGTERM / SIGHUP (e.g. `timeout`): cancel the check, so that the server it started is
    # stopped and observed.json still says what was seen (the default action would do neither)
    loop, task = asyncio.get_running_loop(), asyncio.current_task()
    handled = []
    for sig in (signal.SIGTERM, signal.SIGHUP):
        try:
            loop.add_signal_handler(sig, lambda s=sig: (result.__setitem__("interrupted", s.name), task.cancel()))
            handled.append(sig)
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread / platform
            pass

    try:
        async with app.run_test(size=size) as pilot:
            got_gate, final_why = await _wait_for_gate(pilot, app.model, ready_timeout or timeout)
            await _wait(pilot, lambda: app.model.gpus.status != st.GPU_STARTING, 5.0)
            await _wait(pilot, lambda: app.model.worker_check().status != st.CHECK_UNVERIFIED or cfg.log_path is None, 5.0)
            result["before"] = observe(app)
            wc = result["before"]["worker_check"]
            if cfg.log_path is not None and wc.get("status") != st.CHECK_VERIFIED:
                # not a failure (the live class is known), but a --log that proves nothing must show
                progress(f"note: worker class not cross-checked with {cfg.log_path}: "
                         f"{wc.get('status')}{' (' + wc['detail'] + ')' if wc.get('detail') else ''}")
            why = None
            if not got_gate:  # say why on the terminal, not only in observed.json
                before_obs = result["before"]
                why = final_why or before_obs.get("last_error") or "no answer from the server"
            step("spec_gate seen", got_gate, **({"why": why} if why else {}))
            _screenshot(app, out / "before.svg", result)
            if got_gate:
                before = app.model.gate.threshold
                target = before + 1
                max_running = app.model.snapshot_max_running()
                if max_running is not None and target > max_running:
                    target = before - 1  # at the upper bound: step down instead
                    await pilot.press("minus")
                else:
                    await pilot.press("plus")
                confirmed = await _wait(
                    pilot, lambda: app.model.gate is not None and app.model.gate.threshold == target and app.model.pending is None,
                    timeout,
                )
                await pilot.pause(0.3)
                step("threshold change confirmed by spec_gate", confirmed, before=before, requested=target,
                     after=app.model.gate.threshold if app.model.gate else None, message=app.model.message)
                result["after"] = observe(app)
                _screenshot(app, out / "after.svg", result)  # never keeps the threshold from being restored
                result["threshold_before"] = before
                result["threshold_requested"] = target
                result["threshold_after"] = result["after"]["threshold"]
                result["confirmed"] = confirmed
                restored = None
                if restore and confirmed:
                    await pilot.press("minus" if target > before else "plus")
                    restored = await _wait(
                        pilot, lambda: app.model.gate is not None and app.model.gate.threshold == before and app.model.pending is None,
                        timeout,
                    )
                    step("threshold restored", restored)
                result["restored"] = restored
                result["ok"] = bool(confirmed and (restored is not False) and not result.get("screenshot_errors"))
            if app.proc is not None:
                pgid = app.proc.pgid
                await app.action_quit()
                left = app.proc.members()
                step("server process group stopped", not left, pgid=pgid, left=left)
                result["ok"] = result["ok"] and not left
    finally:
        for sig in handled:
            loop.remove_signal_handler(sig)
        app.shutdown_server()
        (out / "observed.json").write_text(json.dumps(result, indent=2, default=str))
    return result


def _screenshot(app: Any, path: Path, result: dict[str, Any]) -> None:
    """Save an SVG of the screen; a failure is recorded in ``result`` and fails the check, but
    does not stop it (the threshold must still be put back)."""
    try:
        app.save_screenshot(str(path))
    except OSError as exc:
        result.setdefault("screenshot_errors", []).append(f"{path}: {exc}")


def _check_out_dir(parser: argparse.ArgumentParser, out: Path, raw: str) -> None:
    """Refuse an --out the check could not write its files into (exits 2 before starting)."""
    if not raw.strip():
        parser.error("--out is empty; give a directory for the SVGs and observed.json")
    problem = writable_dir_problem(out)
    if problem is not None and problem[0] == "file":
        parser.error(f"--out {out} is a file; give a directory for the SVGs and observed.json")
    if problem is not None:
        parser.error(f"--out {out}: cannot write there ({problem[1]})")
    for name in ("observed.json", "before.svg", "after.svg"):
        if (out / name).is_dir():
            parser.error(f"--out {out}: {name} there is a directory")


def main(argv: list[str] | None = None) -> int:
    """CLI entry: ``python -m console.headless_check ...``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    server_args: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, server_args = argv[:i], argv[i + 1:]
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        cols, rows = (int(x) for x in args.size.lower().split("x"))
    except ValueError:
        parser.error(f"--size must look like 160x50 (got {args.size!r})")
    if not (MIN_COLS <= cols <= MAX_COLS and MIN_ROWS <= rows <= MAX_ROWS):
        parser.error(f"--size must be from {MIN_COLS}x{MIN_ROWS} (the console's documented minimum) to "
                     f"{MAX_COLS}x{MAX_ROWS} (got {args.size})")
    if not math.isfinite(args.timeout) or args.timeout <= 0:
        parser.error(f"--timeout must be a number of seconds > 0 (got {args.timeout:g})")
    if not math.isfinite(args.interval) or not MIN_INTERVAL_S <= args.interval <= MAX_INTERVAL_S:
        parser.error(f"--interval must be a number of seconds from {MIN_INTERVAL_S} to {MAX_INTERVAL_S:g} "
                     f"(got {args.interval:g})")
    if args.url is not None:  # "" too: it is a bad URL, not a missing --launch
        try:  # the same check as `specconsole attach`: a typo fails now, not after --timeout
            args.url = normalize_url(args.url)
        except ConfigError as exc:
            parser.error(str(exc))
    check_log_file(parser, args.log, "--log")  # as `specconsole attach --log` does
    _check_out_dir(parser, Path(args.out), args.out)  # a str until here: Path("") would read as "."
    args.out = Path(args.out)
    if args.gpus is None:
        args.gpus = "sim" if args.demo else "real"
    base = AppConfig(interval_s=args.interval, log_dir=args.log_dir or default_log_dir(), nvml=args.gpus)
    from console.modes import demo_config, launch_config

    if args.url is not None:
        cfg = dataclasses.replace(base, mode="attach", url=args.url, log_path=args.log, api_key=args.api_key)
    elif args.demo:
        cfg = demo_config(base, extra=server_args or ["--startup-seconds", "0.5"])
    else:
        if not server_args:
            print("--launch needs the server arguments after --", file=sys.stderr)
            return 2
        cfg = launch_config(base, server_args)
    nvml_module = None
    if args.gpus == "sim":
        from console.nvml_sim import SimulatedNvml

        nvml_module = SimulatedNvml(seed=0)
    ready_timeout = max(args.timeout, 600.0) if args.launch else args.timeout
    try:
        result = asyncio.run(run_check(
            cfg, args.out, size=(cols, rows), timeout=args.timeout, restore=not args.no_restore,
            nvml_module=nvml_module, ready_timeout=ready_timeout, progress=lambda s: print(s, flush=True),
        ))
    except asyncio.CancelledError:  # SIGTERM / SIGHUP: the server is stopped, observed.json written
        print(f"interrupted; wrote {args.out / 'observed.json'}")
        return 1
    written = [args.out / n for n in ("observed.json", "before.svg", "after.svg") if (args.out / n).exists()]
    print("wrote " + ", ".join(map(str, written)))
    print("OK" if result["ok"] else "FAILED")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
