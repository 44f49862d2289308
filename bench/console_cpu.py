"""The console's own CPU cost: ``specconsole demo`` with 8 simulated GPUs in a pseudo-terminal.

The console (``python -m bench.console_cpu --child``: ``console.cli.main(["demo", ...])`` with the
simulated NVML holding ``--gpus`` H200s instead of one) runs in a pseudo-terminal of ``--size``
(``TERM=xterm-256color``; a reader thread feeds its output to a ``pyte`` screen, as an ssh
terminal would read it: :class:`bench.console_terminal.Terminal`). Once the screen shows the
demo server connected and ``--warmup`` s more have passed, the console process's CPU time
(``utime + stime`` of ``/proc/PID/stat``: all its threads, not the demo server, not the
supervisor) is read over ``--seconds``; that over the wall time is the "% of a core". Each
repeat is a fresh console and demo server; ``q`` ends it (its exit is checked).

``--profile`` adds one more run under cProfile (every thread of the console: the event loop and
the worker threads of NVML and log reads) and groups the functions' own time by where their code
lives: rendering (textual, rich), the console's widgets and screens, polling (httpx, httpcore, h11,
anyio, ``console.client``), log parsing (``console.log*``, ``console.accesslog``), NVML, the session
and model, the event loop (asyncio, selectors), other. cProfile slows Python down, so its total
is not the cost; the shares are what it is for.

Usage (from the repository root)::

    python -m bench.console_cpu [--size 160x50] [--seconds 30] [--warmup 5] [--repeat 3] \\
        [--interval 1.0] [--gpus 8] [--profile] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Dict, List, Optional

ROOT = Path(__file__).resolve().parents[1]
CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
MAX_GPUS = 64  # --gpus: more than any one node holds

#: the profiler's own work (its snapshots): left out of the shares
PROFILER = "profiler"
#: (category, path fragments of a function's file); the first match wins
CATEGORIES = [
    ("rendering (textual, rich)", ("/textual/", "/rich/")),
    ("widgets and screens (console)", ("/console/widgets/", "/console/screens/", "/console/app.py",
                                       "/console/textual_compat.py", "/console/fmt.py")),
    ("polling (httpx, console.client)", ("/httpx/", "/httpcore/", "/h11/", "/anyio/", "/sniffio/",
                                         "/console/client.py", "/ssl.py", "/socket.py")),
    ("log parsing (console.log*)", ("/console/log", "/console/accesslog.py")),
    ("NVML (console.nvml)", ("/console/nvml",)),
    ("session and model (console)", ("/console/session.py", "/console/model.py", "/console/state.py",
                                     "/console/load_figures.py", "/console/events.py",
                                     "/console/portcheck.py", "/console/process.py")),
    (PROFILER, ("/cProfile.py", "/pstats.py", "/bench/console_cpu.py")),
    ("event loop (asyncio, selectors)", ("/asyncio/", "/selectors.py", "/threading.py",
                                         "/concurrent/")),
]
OTHER = "other"


def category(filename: str) -> str:
    """The :data:`CATEGORIES` name of the code in ``filename`` (``other`` when none matches)."""
    for name, parts in CATEGORIES:
        if any(p in filename for p in parts):
            return name
    return OTHER


def cpu_seconds(pid: int) -> float:
    """``utime + stime`` of ``pid`` in seconds (all its threads; not its children)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rfind(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def parse_size(text: str) -> tuple:
    """``160x50`` -> (160, 50)."""
    try:
        cols, rows = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--size wants COLSxROWS, e.g. 160x50 (got {text!r})") from None
    if cols < 20 or rows < 10:
        raise argparse.ArgumentTypeError(f"--size {text} is too small")
    return cols, rows


def connected(text: str) -> bool:
    """The screen shows the demo server connected with the gate (SPEC ON / OFF)."""
    return "connected" in text and ("SPEC ON" in text or "SPEC OFF" in text)


def child_argv(a: argparse.Namespace, log_dir: Path, profile_out: Optional[Path] = None) -> List[str]:
    """The console under test: ``python -m bench.console_cpu --child ...``."""
    argv = [sys.executable, "-m", "bench.console_cpu", "--child", "--gpus", str(a.gpus),
            "--interval", str(a.interval), "--log-dir", str(log_dir)]
    if profile_out is not None:
        argv += ["--profile-out", str(profile_out)]
    return argv


def _snapshot(pid: int, profile_out: Optional[Path], k: int, timeout_s: float = 30.0) -> None:
    """Profiled run: ask the console for its ``k``-th stats snapshot (SIGUSR1) and wait for it."""
    if profile_out is None:
        return
    import signal

    os.kill(pid, signal.SIGUSR1)
    path = Path(f"{profile_out}.{k}")
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"the profiled console wrote no snapshot {path}")
        time.sleep(0.05)


def run_once(a: argparse.Namespace, profile_out: Optional[Path] = None) -> Dict[str, Any]:
    """One console in a fresh pty: warm up, measure ``a.seconds``, quit. Returns the record."""
    from bench.console_terminal import Terminal

    cols, rows = a.size
    env = dict(os.environ, TERM="xterm-256color", COLUMNS=str(cols), LINES=str(rows))
    env.pop("SPECCONSOLE_SERVER_CMD", None)
    with tempfile.TemporaryDirectory(prefix="console-cpu-") as tmp:
        term = Terminal(child_argv(a, Path(tmp), profile_out), cols, rows, env, ROOT)
        try:
            if term.wait_for(connected, 60.0) is None:
                raise RuntimeError("the console never showed the demo server connected:\n" + term.text())
            time.sleep(a.warmup)
            c0, t0 = cpu_seconds(term.pid), time.monotonic()
            _snapshot(term.pid, profile_out, 0)
            time.sleep(a.seconds)
            c1, t1 = cpu_seconds(term.pid), time.monotonic()
            _snapshot(term.pid, profile_out, 1)
            screen = term.text()
            term.press("q")
            code = term.wait_exit(60.0)
        finally:
            term.kill(5.0)
    pct = 100.0 * (c1 - c0) / (t1 - t0)
    return {"cpu_s": round(c1 - c0, 3), "wall_s": round(t1 - t0, 3), "pct_of_core": round(pct, 2),
            "exit_code": code, "screen_connected": connected(screen), "feed_errors": term.feed_errors}


def _load_stats(path: Path) -> Dict[Any, Any]:
    import pstats

    return pstats.Stats(str(path)).stats


def breakdown(end_path: Path, start_path: Optional[Path] = None, top: int = 25) -> Dict[str, Any]:
    """Group the own time (tottime) of a dumped cProfile run by :func:`category`.

    With ``start_path`` (a snapshot of the same run taken earlier) only the time between the two
    counts. A built-in function (``~``) has no file of its own: its time goes to its callers'
    categories, in proportion to the time each caller spent in it.
    """
    end = _load_stats(end_path)
    start = _load_stats(start_path) if start_path is not None else {}
    groups: Dict[str, float] = {}
    rows = []
    for key, (_cc, _nc, tt, _ct, callers) in end.items():
        before = start.get(key)
        tt -= before[2] if before else 0.0
        if tt <= 0:
            continue
        filename, line, func = key
        rows.append((tt, f"{Path(filename).name}:{line}({func})", category(filename)))
        if filename != "~":
            groups[category(filename)] = groups.get(category(filename), 0.0) + tt
            continue
        shares = {}
        for ckey, cval in callers.items():
            b = before[4].get(ckey) if before else None
            shares[ckey] = cval[2] - (b[2] if b else 0.0)
        weight = sum(v for v in shares.values() if v > 0)
        if weight <= 0:
            groups[OTHER] = groups.get(OTHER, 0.0) + tt
            continue
        for ckey, v in shares.items():
            if v > 0:
                cat = category(ckey[0])
                groups[cat] = groups.get(cat, 0.0) + tt * v / weight
    groups.pop(PROFILER, None)
    rows = [r for r in rows if r[2] != PROFILER]
    total = sum(groups.values()) or 1.0
    rows.sort(reverse=True)
    return {
        "profiled_s": round(total, 3),
        "share_pct": {k: round(100.0 * v / total, 1) for k, v in sorted(groups.items(), key=lambda kv: -kv[1])},
        "top_functions": [{"tottime_s": round(tt, 3), "function": fn, "category": cat} for tt, fn, cat in rows[:top]],
    }


# -- the console under test ---------------------------------------------------------------------------------

class _Snapshot:
    """What :class:`pstats.Stats` loads: a copy of a running profiler's stats."""

    def __init__(self, stats: Dict[Any, Any]) -> None:
        self.stats = dict(stats)

    def create_stats(self) -> None:
        """Nothing to do: the stats are already taken."""


def _profile_all_threads(out: Path):
    """Profile the calling thread and every thread started later; returns ``dump()``.

    Each SIGUSR1 writes a snapshot of the stats so far to ``out.0``, ``out.1``, ...; the parent
    takes one when it starts measuring and one when it stops.
    """
    import cProfile
    import threading

    profiles: List[cProfile.Profile] = []
    lock = threading.Lock()

    def start_in_thread(*_args) -> None:
        sys.setprofile(None)
        p = cProfile.Profile(time.thread_time)  # CPU time of this thread: waits cost nothing
        with lock:
            profiles.append(p)
        p.enable()

    main = cProfile.Profile(time.thread_time)
    profiles.append(main)
    threading.setprofile(start_in_thread)
    main.enable()

    def write(path: Path) -> None:
        import pstats

        with lock:
            ps = list(profiles)
        stats = pstats.Stats()
        for p in ps:
            p.snapshot_stats()  # (pstats.Stats(p) would call create_stats: that stops the profiler)
            stats.add(_Snapshot(p.stats))
        stats.dump_stats(str(path) + ".tmp")
        os.replace(str(path) + ".tmp", path)

    snapshots = [0]

    def on_usr1(_sig, _frame) -> None:
        write(Path(f"{out}.{snapshots[0]}"))
        snapshots[0] += 1

    import signal

    signal.signal(signal.SIGUSR1, on_usr1)

    def dump() -> None:
        main.disable()
        threading.setprofile(None)
        write(out)

    return dump


def child_main(a: argparse.Namespace) -> int:
    """Run ``specconsole demo`` with ``a.gpus`` simulated GPUs (optionally under cProfile)."""
    import console.nvml_sim as nvml_sim
    from console import cli

    base = nvml_sim.SimulatedNvml

    class ManyGpus(base):  # type: ignore[misc, valid-type]
        def __init__(self, devices=None, **kw):
            super().__init__(devices=devices if devices is not None else [nvml_sim.SimDevice() for _ in range(a.gpus)],
                             **kw)

    nvml_sim.SimulatedNvml = ManyGpus
    argv = ["--interval", str(a.interval), "demo", "--log-dir", a.log_dir]
    if a.profile_out:
        dump = _profile_all_threads(Path(a.profile_out))
        try:
            return cli.main(argv)
        finally:
            dump()
    return cli.main(argv)


def parse_args(argv: List[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.console_cpu", description=__doc__.split("\n")[0],
                                allow_abbrev=False)
    p.add_argument("--size", type=parse_size, default=(160, 50), help="terminal COLSxROWS (160x50)")
    p.add_argument("--seconds", type=float, default=30.0, help="measured seconds per repeat (30)")
    p.add_argument("--warmup", type=float, default=5.0, help="seconds after connected before measuring (5)")
    p.add_argument("--repeat", type=int, default=3, help="fresh consoles measured (3)")
    p.add_argument("--interval", type=float, default=1.0, help="the console's --interval (1.0)")
    p.add_argument("--gpus", type=int, default=8, help=f"simulated GPUs in the panel (8; at most {MAX_GPUS})")
    p.add_argument("--profile", action="store_true", help="one more run under cProfile: where the time goes")
    p.add_argument("--keep-profile", type=Path, default=None, metavar="DIR",
                   help="with --profile: keep the two cProfile snapshots (start, end of the window) in DIR")
    p.add_argument("--out", type=Path, default=None, help="write the JSON record here (else stdout only)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--log-dir", default=None, help=argparse.SUPPRESS)
    p.add_argument("--profile-out", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        return a
    if not a.seconds > 0:
        p.error(f"--seconds must be > 0, got {a.seconds}")
    from console.cli import MIN_INTERVAL_S, MAX_INTERVAL_S

    if not MIN_INTERVAL_S <= a.interval <= MAX_INTERVAL_S:  # the console's own bounds
        p.error(f"--interval is the console's poll period, {MIN_INTERVAL_S} to {MAX_INTERVAL_S:g} s, got {a.interval}")
    if a.warmup < 0:
        p.error(f"--warmup must be >= 0, got {a.warmup}")
    if a.repeat < 1:
        p.error(f"--repeat must be >= 1, got {a.repeat}")
    if not 0 <= a.gpus <= MAX_GPUS:
        p.error(f"--gpus must be 0-{MAX_GPUS} (GPUs of one node), got {a.gpus}")
    if a.keep_profile is not None and not a.profile:
        p.error("--keep-profile needs --profile")
    if a.out is not None and not a.out.parent.is_dir():  # before minutes of measuring, not after
        p.error(f"--out {a.out}: no directory {a.out.parent}")
    if a.out is not None and (a.out.exists() or a.out.is_symlink()) and not _own_record(a.out):
        p.error(f"--out {a.out} exists and is not an earlier record of this tool: give another file")
    return a


def _own_record(path: Path) -> bool:
    """``path`` is a regular file holding a JSON record this tool wrote (its ``command``): only such a
    file is replaced by a new run (a fresh-user run once replaced /etc/passwd)."""
    if path.is_symlink() or not path.is_file():
        return False
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(rec, dict) and str(rec.get("command", "")).startswith("python -m bench.console_cpu")


def main(argv: Optional[List[str]] = None) -> int:
    """Measure (see the module docstring); prints and optionally writes the JSON record."""
    raw = list(sys.argv[1:] if argv is None else argv)
    a = parse_args(raw)
    if a.child:
        return child_main(a)
    runs = []
    for i in range(a.repeat):
        rec = run_once(a)
        print(f"repeat {i + 1}/{a.repeat}: {rec['pct_of_core']:.2f}% of a core "
              f"({rec['cpu_s']} s CPU in {rec['wall_s']} s)", file=sys.stderr)
        runs.append(rec)
    pcts = [r["pct_of_core"] for r in runs]
    record: Dict[str, Any] = {
        "command": "python -m bench.console_cpu " + shlex.join(raw),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "size": f"{a.size[0]}x{a.size[1]}", "seconds": a.seconds, "warmup_s": a.warmup,
        "interval_s": a.interval, "gpus": a.gpus, "cpus": os.cpu_count(), "python": sys.version.split()[0],
        "pct_of_core": pcts, "median_pct_of_core": round(statistics.median(pcts), 2), "runs": runs,
    }
    try:
        import textual

        record["textual"] = textual.__version__
    except (ImportError, AttributeError):  # pragma: no cover
        pass
    if a.profile:
        with tempfile.TemporaryDirectory(prefix="console-cpu-prof-") as tmp:
            prof = Path(tmp) / "console.prof"
            rec = run_once(a, profile_out=prof)
            record["profile"] = {"run_under_cprofile": rec, "window": "the measured seconds only",
                                 **breakdown(Path(f"{prof}.1"), Path(f"{prof}.0"))}
            if a.keep_profile is not None:  # for pstats: console.prof.0 (start), .1 (end of the window)
                a.keep_profile.mkdir(parents=True, exist_ok=True)
                for k in (0, 1):
                    shutil.copy(f"{prof}.{k}", a.keep_profile / f"console.prof.{k}")
    text = json.dumps(record, indent=2)
    print(text)
    if a.out is not None:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
