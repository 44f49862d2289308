"""Per-step decode speed from SGLang's ``Decode batch`` log lines, by running-request count.

SGLang's scheduler logs one line every ``--decode-log-interval`` (default 40) decode steps::

    [2026-11-30 07:05:41] Decode batch, #running-req: 64, #token: 21033, token usage: 0.02,
    accept len: 2.95, ..., cuda graph: True, gen throughput (token/s): 8757.02, #queue-req: 0

``gen throughput`` is the tokens generated in that interval over its wall time, so with one token
per request and step (no speculation, or the gate's OFF steps) a step took
``1000 * running_req / gen_throughput`` ms. Intervals that also ran prefills or waited for requests
read lower; ``p75`` is the steady-state figure, ``median`` the typical one. This reads the server,
not the client: it isolates the decode step from bench_serving's ramp-up and tail.

    python -m bench.decode_log LOG [--start TEXT] [--end TEXT] [--sizes 16,32,64,128]

``--start``/``--end``: only lines after a line containing START and before the next one containing
END, in every such window of the log (e.g. ``"spec_gate: speculation off"`` / ``"spec_gate:
speculation on"``: every OFF stretch; ``"spec_gate: threshold 24 -> 1"``: a forced-off segment).
Prints JSON, with the number of windows read.
A missing or unreadable log, a START no line contains, or a window without ``Decode batch`` lines
at the sizes ends with a one-line message on stderr and a non-zero exit.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
import zlib
from pathlib import Path
from typing import Dict, Iterable, List, Optional

DECODE_LINE = re.compile(
    r"Decode batch, #running-req: (?P<bs>\d+),.*?gen throughput \(token/s\): (?P<tps>[0-9.]+(?:[eE][+-]?[0-9]+)?)"
)


def decode_lines(lines: Iterable[str], start: Optional[str] = None, end: Optional[str] = None,
                 windows: Optional[List[int]] = None):
    """Yield ``(running_req, gen_tok_s)`` of the ``Decode batch`` lines in the windows.

    A window opens after a line containing ``start`` (at the top if None) and closes at the next
    line containing ``end`` (at the bottom if None); with ``start`` given, every later line
    containing it opens another window. ``windows``, if given, gets one entry per window opened."""
    inside = start is None
    if inside and windows is not None:
        windows.append(1)
    for line in lines:
        if not inside:
            inside = start in line
            if inside and windows is not None:
                windows.append(1)
            continue
        if end is not None and end in line:
            if start is None:
                return
            inside = False
            continue
        m = DECODE_LINE.search(line)
        if m and math.isfinite(float(m["tps"])):  # "1e400" reads as inf: not a measurement
            yield int(m["bs"]), float(m["tps"])


def _percentile(values: List[float], q: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def summarize(samples: Iterable[tuple], sizes: Iterable[int]) -> Dict[str, Dict[str, float]]:
    """``{str(bs): {lines, median_tok_s, p75_tok_s, step_ms_median, step_ms_at_p75_tok_s}}`` for each
    requested batch size that has lines. Step times assume one token per request and step."""
    by_bs: Dict[int, List[float]] = {}
    for bs, tps in samples:
        by_bs.setdefault(bs, []).append(tps)
    out = {}
    for bs in sizes:
        values = [v for v in by_bs.get(bs, []) if v > 0]
        if not values:
            continue
        med, p75 = statistics.median(values), _percentile(values, 0.75)
        out[str(bs)] = {
            "lines": len(values),
            "median_tok_s": round(med, 1),
            "p75_tok_s": round(p75, 1),
            "step_ms_median": round(1000 * bs / med, 3),
            # the step time at the p75 *throughput* (the faster quarter of intervals), so it is
            # below the median step time
            "step_ms_at_p75_tok_s": round(1000 * bs / p75, 3),
        }
    return out


def read_log(path: Path) -> str:
    """The text of a plain or gzip log (gzip found by content or a ``.gz`` name; undecodable bytes
    replaced). Also used for profiler traces (``bench.trace_summary``).

    Raises:
        OSError: unreadable, a binary file, or a ``.gz`` that is not gzip (``gzip.BadGzipFile``).
        EOFError, zlib.error: a truncated or corrupt ``.gz``.
    """
    with path.open("rb") as f:
        magic = f.read(2)
    if magic == b"\x1f\x8b" or path.suffix == ".gz":  # gzip by content, whatever the name
        import gzip

        with gzip.open(path, "rt", errors="replace") as f:
            text = f.read()
    else:
        text = path.read_text(errors="replace")
    if "\x00" in text[:4096]:
        raise OSError(f"{path} is a binary file, not text")
    return text


def main(argv: Optional[List[str]] = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.decode_log", description=__doc__.splitlines()[0])
    ap.add_argument("log", type=Path, help="a server log (plain or .gz)")
    ap.add_argument("--start", help="window opens after the first line containing this")
    ap.add_argument("--end", help="window closes at the next line containing this")
    ap.add_argument("--sizes", default="16,32,64,128", help="running-request counts to report")
    a = ap.parse_args(argv)
    try:
        sizes = [int(x) for x in a.sizes.split(",") if x.strip()]
    except ValueError:
        sizes = [0]
    if not sizes:
        ap.error("--sizes is empty")
    if min(sizes) < 1:
        ap.error(f"--sizes must be comma-separated running-request counts >= 1, got {a.sizes!r}")
    if not a.log.exists():
        ap.error(f"no such file: {a.log}")
    if a.log.is_dir():
        ap.error(f"{a.log} is a directory")
    try:
        lines = read_log(a.log).splitlines()
    except (OSError, EOFError, zlib.error) as exc:
        sys.exit(f"cannot read {a.log}: {exc}")
    if a.start is not None and not any(a.start in line for line in lines):
        sys.exit(f"no line contains --start {a.start!r} in {a.log}")
    if a.end is not None and not any(a.end in line for line in lines):
        sys.exit(f"no line contains --end {a.end!r} in {a.log}")
    windows: List[int] = []
    result = summarize(decode_lines(lines, a.start, a.end, windows), sizes)
    if not result:
        window = ((f" after --start {a.start!r}" if a.start is not None else "")
                  + (f" before --end {a.end!r}" if a.end is not None else ""))
        sys.exit(f"no Decode batch lines at running-req {sizes} in {a.log}{window}")
    print(json.dumps({"log": str(a.log), "start": a.start, "end": a.end, "windows": len(windows),
                      "by_running_req": result}, indent=1))


if __name__ == "__main__":
    main()
