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

``--versus LOG_B`` compares two servers that served the same requests (one bench run's prompts and
seeds, greedy): a ``Decode batch`` line of B is paired with the line of A that has the same running
requests and the same ``#token`` (the KV tokens in use: the same point of the same work), the n-th
such line of B with the n-th of A, and each pair gives B's gen throughput over A's. With the same
accept lengths (both speculating, or neither) that ratio is the ratio of their decode step speeds,
free of what the bench's rows also hold (probes, switches, prefills, the client): on
h100-2026-12-07b the auto server's lines at 1 request paired with always's at the same ``#token`` and
accept length read 0.90-0.99 in its first row and 0.96-1.12 later. Reported per requested size
(``--sizes``, or ``all``) and over all pairs, as medians. Pairs need the two servers to have scheduled
the same batches: at one request they do line for line; closed loops of several requests drift apart
as responses return at different moments (h100-2026-12-06e, none against forced off at 4 requests:
5 pairs in a row's ~40 lines), so there the rows' TPOT is the measure. ``--series`` adds every pair's
ratio in B's log order (``[running_req, ratio]``): a slow stretch shows as a run of low ratios.
``--by-prefills`` splits each size's lines by the ``Prefill batch`` lines logged since the previous
``Decode batch`` line (none, 1-2, 3 or more; with the prefills' mean count and new tokens): a decode
line's interval also holds those prefills, so two servers whose gap stays the same from the group
with few prefills to the group with many lose it in the decode step, not around the prefills
(h100-2026-12-07g: the OFF server +3.4% a step with 1.8 prefills a line, +4.3% with 4.8: ~0.2 ms a
decode step, ~1.8 ms a prefill).
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

#: a number as SGLang prints one (``1.2.3`` or ``.`` are not)
_NUMBER = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
DECODE_LINE = re.compile(
    r"Decode batch, #running-req: (?P<bs>\d+),(?: #token: (?P<tok>\d+),)?.*?gen throughput \(token/s\): "
    r"(?P<tps>" + _NUMBER + r")(?![0-9.])"
)
#: SGLang 0.5.12's prefill log line: ``Prefill batch, #new-seq: 1, #new-token: 256, #cached-token: 0, ...``
PREFILL_LINE = re.compile(r"Prefill batch, #new-seq: \d+, #new-token: (?P<new>\d+),")
#: the groups of :func:`summarize_by_prefills`: (name, fewest, most prefills since the previous line)
PREFILL_GROUPS = (("0", 0, 0), ("1-2", 1, 2), ("3+", 3, None))
#: longer lines are not SGLang's Decode batch lines (~250 characters); the patterns' ``.*?`` would
#: make a long line's search quadratic
MAX_LINE = 4096
#: a throughput below this (tokens/s) is not a measurement (its step time would overflow)
MIN_TOK_S = 1e-6


def _throughput(m: "re.Match[str] | None") -> Optional[float]:
    """The match's throughput when it is a measurement (finite, >= MIN_TOK_S, or exactly 0: an
    interval without decode work, which summaries drop), else None."""
    if m is None:
        return None
    tps = float(m["tps"])
    return tps if math.isfinite(tps) and (tps == 0 or tps >= MIN_TOK_S) else None


def decode_lines(lines: Iterable[str], start: Optional[str] = None, end: Optional[str] = None,
                 windows: Optional[List[int]] = None):
    """Yield ``(running_req, gen_tok_s)`` of the ``Decode batch`` lines in the windows.

    A window opens after a line containing ``start`` (at the top if None) and closes at the next
    line containing ``end`` (at the bottom if None); with ``start`` given, every later line
    containing it opens another window. ``windows``, if given, gets one entry per window opened."""
    for bs, _, tps in _decode_matches(lines, start, end, windows):
        yield bs, tps


def _decode_matches(lines: Iterable[str], start: Optional[str], end: Optional[str],
                    windows: Optional[List[int]] = None):
    """Yield ``(running_req, kv_tokens or None, gen_tok_s)`` of the ``Decode batch`` lines in the
    windows (:func:`decode_lines`) whose throughput is a measurement (:func:`_throughput`)."""
    for bs, tok, tps, _, _ in _scan(lines, start, end, windows):
        yield bs, tok, tps


def decode_lines_with_prefills(lines: Iterable[str], start: Optional[str] = None, end: Optional[str] = None):
    """Yield ``(running_req, gen_tok_s, prefills, prefill_tokens)`` of the ``Decode batch`` lines in
    the windows (:func:`decode_lines`), with the ``Prefill batch`` lines logged since the previous
    ``Decode batch`` line (any, measured or not) and their ``#new-token`` sum."""
    for bs, _, tps, prefills, tokens in _scan(lines, start, end):
        yield bs, tps, prefills, tokens


def _scan(lines: Iterable[str], start: Optional[str], end: Optional[str], windows: Optional[List[int]] = None):
    """Yield ``(running_req, kv_tokens or None, gen_tok_s, prefills, prefill_tokens)`` of each
    ``Decode batch`` line in the windows whose throughput is a measurement (:func:`_throughput`: "1e400"
    reads as inf, "1e-320" as no time), with the ``Prefill batch`` lines since the previous ``Decode
    batch`` line (measured or not) and their ``#new-token`` sum."""
    prefills = tokens = 0
    for line in _window_lines(lines, start, end, windows):
        if len(line) > MAX_LINE:
            continue
        if "Prefill batch" in line:
            m = PREFILL_LINE.search(line)
            if m is not None:
                prefills, tokens = prefills + 1, tokens + int(m["new"])
            continue
        if "Decode batch" not in line:
            continue
        m = DECODE_LINE.search(line)
        tps = _throughput(m)
        if tps is not None:
            yield int(m["bs"]), None if m["tok"] is None else int(m["tok"]), tps, prefills, tokens
        prefills = tokens = 0


def summarize_by_prefills(samples: Iterable[tuple], sizes: Iterable[int]) -> Dict[str, Dict[str, Dict[str, float]]]:
    """``{str(bs): {group: {lines, step_ms_median, mean_prefills, mean_prefill_tokens}}}`` from
    :func:`decode_lines_with_prefills`, the groups being :data:`PREFILL_GROUPS` (prefill lines since
    the previous decode line); sizes and groups without lines are left out. Step times as
    :func:`summarize` (one token per request and step)."""
    by_bs: Dict[int, List[tuple]] = {}
    for bs, tps, n, tok in samples:
        if tps > 0:
            by_bs.setdefault(bs, []).append((tps, n, tok))
    out: Dict[str, Dict[str, Dict[str, float]]] = {}
    for bs in sizes:
        groups = {}
        for name, lo, hi in PREFILL_GROUPS:
            rows = [r for r in by_bs.get(bs, []) if r[1] >= lo and (hi is None or r[1] <= hi)]
            if rows:
                groups[name] = {"lines": len(rows),
                                "step_ms_median": round(1000 * bs / statistics.median(r[0] for r in rows), 3),
                                "mean_prefills": round(statistics.fmean(r[1] for r in rows), 2),
                                "mean_prefill_tokens": round(statistics.fmean(r[2] for r in rows), 1)}
        if groups:
            out[str(bs)] = groups
    return out


def _window_lines(lines: Iterable[str], start: Optional[str], end: Optional[str],
                  windows: Optional[List[int]] = None):
    """The lines inside the windows (see :func:`decode_lines`), one entry in ``windows`` per window."""
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
        yield line


def keyed_lines(lines: Iterable[str], start: Optional[str] = None, end: Optional[str] = None) -> List[tuple]:
    """``((running_req, kv_tokens), gen_tok_s)`` of the ``Decode batch`` lines in the windows
    (:func:`decode_lines`' ``start`` / ``end``), in log order; lines without a finite throughput
    are left out."""
    return [((bs, tok), tps) for bs, tok, tps in _decode_matches(lines, start, end) if tok is not None]


def pair_lines(a: List[tuple], b: List[tuple]) -> List[tuple]:
    """``(running_req, a_tok_s, b_tok_s)`` for each line of ``b`` (:func:`keyed_lines`) whose key a
    line of ``a`` also has: the n-th line of a key in B with the n-th in A. Pairs where either
    throughput is 0 are left out."""
    queues: Dict[tuple, List[float]] = {}
    for key, tps in a:
        queues.setdefault(key, []).append(tps)
    seen: Dict[tuple, int] = {}
    out = []
    for key, tps in b:
        n = seen.get(key, 0)
        seen[key] = n + 1
        mine = queues.get(key, [])
        if n < len(mine) and mine[n] > 0 and tps > 0:
            out.append((key[0], mine[n], tps))
    return out


def summarize_pairs(pairs: List[tuple], sizes: Optional[Iterable[int]]) -> Dict[str, Dict[str, float]]:
    """``{str(bs) | "all": {pairs, median_ratio, p25_ratio, p75_ratio}}``: B's gen throughput over
    A's per paired line, per requested running-request count (``sizes``; None: every count that
    has pairs) and over all pairs."""
    by_bs: Dict[int, List[float]] = {}
    for bs, tps_a, tps_b in pairs:
        by_bs.setdefault(bs, []).append(tps_b / tps_a)
    groups = [(str(bs), by_bs[bs]) for bs in (sorted(by_bs) if sizes is None else sizes) if bs in by_bs]
    groups.append(("all", [r for rs in by_bs.values() for r in rs]))
    return {name: {"pairs": len(rs), "median_ratio": round(statistics.median(rs), 4),
                   "p25_ratio": round(_percentile(rs, 0.25), 4), "p75_ratio": round(_percentile(rs, 0.75), 4)}
            for name, rs in groups if rs}


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
        OSError: unreadable, not a regular file (a named pipe, a device, a directory), a binary file
            (NUL bytes past any at its top, which a truncation may leave), or a ``.gz`` that is not
            gzip (``gzip.BadGzipFile``).
        EOFError, zlib.error: a truncated or corrupt ``.gz``.
    """
    from bench.errors import not_a_regular_file

    why = not_a_regular_file(path)
    if why is not None:  # a named pipe would wait for a writer forever
        raise OSError(f"{path} {why}")
    with path.open("rb") as f:
        magic = f.read(2)
    if magic == b"\x1f\x8b" or path.suffix == ".gz":  # gzip by content, whatever the name
        import gzip

        with gzip.open(path, "rt", errors="replace") as f:
            text = f.read()
    else:
        text = path.read_text(errors="replace")
    if "\x00" in text.lstrip("\x00")[:4096]:  # NULs only at the top: a hole copytruncate left
        raise OSError(f"{path} is a binary file, not text")
    return text


def main(argv: Optional[List[str]] = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.decode_log", description=__doc__.splitlines()[0])
    ap.add_argument("log", type=Path, help="a server log (plain or .gz)")
    ap.add_argument("--start", help="window opens after the first line containing this")
    ap.add_argument("--end", help="window closes at the next line containing this")
    ap.add_argument("--sizes", default="16,32,64,128",
                    help="running-request counts to report (with --versus also 'all': every count)")
    ap.add_argument("--versus", type=Path, metavar="LOG_B",
                    help="another server's log of the same requests: B's throughput over LOG's, line by "
                         "line at the same running requests and #token (--start / --end apply to both)")
    ap.add_argument("--by-prefills", action="store_true",
                    help="also each size's lines split by the prefill batches logged since the previous decode "
                         "line (0, 1-2, 3+)")
    ap.add_argument("--series", action="store_true",
                    help="with --versus: also every pair's ratio in B's log order (a slow stretch shows as a run)")
    a = ap.parse_args(argv)
    if a.series and a.versus is None:
        ap.error("--series goes with --versus")
    if a.by_prefills and a.versus is not None:
        ap.error("--by-prefills reads one log, not --versus pairs")
    sizes: Optional[List[int]] = None
    if not (a.versus is not None and a.sizes.strip() == "all"):
        try:
            sizes = [int(x) for x in a.sizes.split(",") if x.strip()]
        except ValueError:
            sizes = [0]
        if not sizes:
            ap.error("--sizes is empty")
        if min(sizes) < 1:
            ap.error(f"--sizes must be comma-separated running-request counts >= 1"
                     f"{' (or all, with --versus)' if a.versus is not None else ''}, got {a.sizes!r}")
    logs = [a.log] + ([a.versus] if a.versus is not None else [])
    for path in logs:
        if not path.exists():
            ap.error(f"no such file: {path}")
        if path.is_dir():
            ap.error(f"{path} is a directory")
    texts = []
    for path in logs:
        try:
            texts.append(read_log(path).splitlines())
        except (OSError, EOFError, zlib.error) as exc:
            sys.exit(f"cannot read {path}: {exc}")
    for path, lines in zip(logs, texts):
        if a.start is not None and not any(a.start in line for line in lines):
            sys.exit(f"no line contains --start {a.start!r} in {path}")
        if a.end is not None and not any(a.end in line for line in lines):
            sys.exit(f"no line contains --end {a.end!r} in {path}")
    if a.versus is not None:
        pairs = pair_lines(keyed_lines(texts[0], a.start, a.end), keyed_lines(texts[1], a.start, a.end))
        result = summarize_pairs(pairs, sizes)
        if not pairs or set(result) == {"all"} and sizes is not None:
            sys.exit(f"no Decode batch line of {a.versus} has the running requests and #token of one in {a.log}"
                     + (f" at running-req {sizes}" if pairs else "")
                     + " (were they serving the same requests?)")
        doc = {"log": str(a.log), "versus": str(a.versus), "start": a.start, "end": a.end,
               "ratio": "versus / log, gen throughput of paired lines", "by_running_req": result}
        if a.series:
            doc["series"] = [[bs, round(tps_b / tps_a, 4)] for bs, tps_a, tps_b in pairs
                             if sizes is None or bs in sizes]
        print(json.dumps(doc, indent=1))
        return
    lines = texts[0]
    windows: List[int] = []
    result = summarize(decode_lines(lines, a.start, a.end, windows), sizes)
    if not result:
        window = ((f" after --start {a.start!r}" if a.start is not None else "")
                  + (f" before --end {a.end!r}" if a.end is not None else ""))
        sys.exit(f"no Decode batch lines at running-req {sizes} in {a.log}{window}")
    doc = {"log": str(a.log), "start": a.start, "end": a.end, "windows": len(windows), "by_running_req": result}
    if a.by_prefills:
        doc["by_prefills"] = summarize_by_prefills(decode_lines_with_prefills(lines, a.start, a.end), sizes)
    print(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
