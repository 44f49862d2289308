"""How long the log pane's whole-file reads take on a big log, and the memory they use.

Why: the pane holds the last 20,000 lines; a filter or ``n`` / ``N`` past them reads the rest of
the file in a thread (``console.logsearch`` through the block index of ``console.logindex``).
This times each read on a generated SGLang-like log (``Decode batch`` lines, a ``spec_gate`` line
every 10,000, one ``needle`` line near the top), wall clock, best of ``--repeat``:

- ``first_read``: the follower's first read (index the whole file + scan it for startup facts,
  as the session does), and the index size;
- ``find_backward``: ``N`` from the tail: the last match above it (the needle, near the top);
- ``find_forward``: ``n`` past the last match: the first match from the top;
- ``filter``: a whole-file filter (``spec_gate``): the last 20,000 lines that pass, and a count;
- ``peak_mib``: the largest Python allocation (tracemalloc) during each read.

The reads skip 1 MiB chunks in which the search (filter) word does not occur, as the session's do
(``console.logfilter.chunk_test``); ``--no-skip`` times them decoding every line.

    python -m bench.logpane_index [--lines 250000] [--repeat 3] [--out FILE]

Prints (and with ``--out`` writes) JSON. Timing is for this script only: tests assert behaviour.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any, Callable

from console import logparse, logsearch
from console.logfilter import FILTERED, FIND, LogRequest
from console.logfollow import LogFollower

NEEDLE_AT = 1_234


def write_log(path: Path, lines: int) -> None:
    """A log of ``lines`` SGLang-like lines (about 145 bytes each)."""
    with open(path, "w") as fh:
        for i in range(lines):
            if i == NEEDLE_AT:
                fh.write("[2026-12-01 19:00:00] needle\n")
            elif i % 10_000 == 5_000:
                fh.write(f"[2026-12-01 20:00:00 TP0] spec_gate: speculation off (batch {i % 90 + 33} >= 32)\n")
            else:
                fh.write(f"[2026-12-01 20:{i // 60 % 60:02d}:{i % 60:02d} TP0] Decode batch, #running-req: {i % 97}, "
                         "#token: 4608, token usage: 0.05, gen throughput (token/s): 2142.00, #queue-req: 0\n")


def measure(fn: Callable[[], Any], repeat: int) -> tuple[float, float, Any]:
    """(best seconds of ``repeat`` calls, peak MiB of Python allocations of one more call under
    tracemalloc (it slows the call, so it is not timed), the result)."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    tracemalloc.start()
    result = fn()
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return best, peak, result


def run(lines: int, repeat: int, skip: bool = True) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.log"
        write_log(path, lines)
        facts = logparse.LogFacts()

        def first_read() -> LogFollower:
            f = LogFollower(path, on_scan=facts.feed)
            f.read_batch()
            return f

        t_first, m_first, follower = measure(first_read, repeat)
        above = lines - len(LogFollower(path).read_new())  # lines above the tail read at start
        index = follower.index
        out: dict[str, Any] = {
            "lines": lines, "skip": skip, "file_mib": round(path.stat().st_size / 2**20, 1),
            "index_bytes": index.nbytes, "tail_lines_at_start": lines - above,
            "first_read": {"s": round(t_first, 3), "peak_mib": round(m_first, 1)},
        }
        find_req = LogRequest(FIND, index.file_id, 0, search="needle")
        hit = find_req.hits(lambda _t: False)
        searches = {
            "find_backward": (-1, ((0, above),)),
            "find_forward": (1, ((0, above),)),
        }
        for name, (direction, ranges) in searches.items():
            def find(direction=direction, ranges=ranges) -> int | None:
                with logsearch.open_indexed(path, index) as fh:
                    return logsearch.find_line(fh, index, hit, ranges, direction, maybe=find_req.might_hit() if skip else None)

            t, m, line = measure(find, repeat)
            out[name] = {"s": round(t, 3), "peak_mib": round(m, 1), "line": line}
        filter_req = LogRequest(FILTERED, index.file_id, 0, include="spec_gate")
        keep = filter_req.keeps(lambda _t: False)

        def filtered() -> tuple[int, int]:
            with logsearch.open_indexed(path, index) as fh:
                kept, count = logsearch.last_kept(fh, index, keep, above, 20_000, maybe=filter_req.might_keep() if skip else None)
            return len(kept), count

        t, m, (held, count) = measure(filtered, repeat)
        out["filter"] = {"s": round(t, 3), "peak_mib": round(m, 1), "held": held, "count": count}
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=250_000, help="lines of the generated log")
    ap.add_argument("--repeat", type=int, default=3, help="best of this many runs")
    ap.add_argument("--out", type=Path, help="also write the JSON here")
    ap.add_argument("--no-skip", action="store_true", help="decode every line (no chunk test)")
    a = ap.parse_args()
    result = run(a.lines, a.repeat, skip=not a.no_skip)
    text = json.dumps(result, indent=2)
    print(text)
    if a.out:
        a.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
