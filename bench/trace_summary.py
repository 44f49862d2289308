"""Where a decode step's time goes, from a PyTorch profiler trace (SGLang's ``/start_profile``).

SGLang writes one Chrome trace per TP rank (``<id>-TP-0.trace.json.gz``). This reads the GPU
activity (kernels, memcpy, memset) and the CUDA runtime calls, and answers the question the
OFF-step work needs answered: is the GPU kept busy (GPU-bound), or does it wait for the CPU
(gaps between kernels, CPU-side synchronizations)?

    python -m bench.trace_summary TRACE [--gap-us 20]

Prints JSON: ``window_ms`` (first GPU activity to last), ``gpu_busy_ms`` / ``gpu_busy_frac``
(union of GPU activity intervals over all streams), ``gaps`` (idle stretches longer than
``--gap-us``: count, total, longest), ``graph_launches`` (``cudaGraphLaunch`` calls), ``steps``
(``ProfilerStep#N`` markers, when the profiler recorded them), ``syncs`` (CPU-side waits:
``cuda*Synchronize`` and synchronous ``cudaMemcpy`` calls, count and total ms) and ``top_gpu``
(the GPU activities with the most total time, by name: count, total ms, mean us), so that two
traces, e.g. an OFF step and a decode step without speculation, can be compared kernel by kernel.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import zlib
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Tuple

from bench.decode_log import read_log

GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")


def load_events(path: Path) -> List[Dict[str, Any]]:
    """The ``traceEvents`` of a Chrome trace (``.json`` or ``.json.gz``, gzip found by content).

    Raises:
        ValueError: not a Chrome trace (no ``traceEvents`` list), or not JSON.
        OSError: unreadable.
    """
    data = json.loads(read_log(path))  # plain or gzip (by content), like a server log
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list) or not all(isinstance(e, dict) for e in events):
        raise ValueError("no traceEvents list of event objects (not a Chrome trace)")
    return events


def _union(intervals: Iterable[Tuple[float, float]]) -> List[Tuple[float, float]]:
    merged: List[Tuple[float, float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


TOP_GPU = 15


def summarize(events: List[Dict[str, Any]], gap_us: float = 20.0, top: int = TOP_GPU) -> Dict[str, Any]:
    """GPU busy time, idle gaps, graph launches, CPU syncs and the ``top`` GPU activities by total
    time of one trace (times in ms, means in us).

    ``events``: Chrome-trace events (``ph`` "X" with ``ts``/``dur`` in microseconds, ``cat``,
    ``name``). Raises ValueError when the trace holds no GPU activity (a CPU-only profile).
    """
    complete = [e for e in events if e.get("ph") == "X" and "ts" in e and "dur" in e]
    for e in complete:
        ts, dur = float(e["ts"]), float(e["dur"])  # ValueError for text
        if not (math.isfinite(ts) and math.isfinite(dur)) or dur < 0:
            raise ValueError(f"event {str(e.get('name', ''))[:60]!r} has ts {e['ts']!r} / dur {e['dur']!r}: "
                             "not a time (a corrupt trace?)")
    gpu_events = [e for e in complete if str(e.get("cat", "")).lower() in GPU_CATEGORIES]
    gpu = [(float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in gpu_events]
    if not gpu:
        raise ValueError("no GPU activity in the trace (was it recorded with activities CPU and GPU?)")
    busy = _union(gpu)
    window = busy[-1][1] - busy[0][0]
    busy_us = sum(end - start for start, end in busy)
    gaps = [b[0] - a[1] for a, b in zip(busy, busy[1:]) if b[0] - a[1] > gap_us]
    runtime = [e for e in complete if str(e.get("cat", "")).lower() == "cuda_runtime"]
    syncs: Dict[str, Dict[str, float]] = {}
    for e in runtime:
        name = str(e.get("name", ""))
        if "Synchronize" in name or (name in ("cudaMemcpy", "cudaMemcpyAsync") and _is_blocking_copy(e)):
            s = syncs.setdefault(name, {"count": 0, "total_ms": 0.0})
            s["count"] += 1
            s["total_ms"] += float(e["dur"]) / 1000
    for s in syncs.values():
        s["total_ms"] = round(s["total_ms"], 3)
    steps = sum(1 for e in complete if str(e.get("name", "")).startswith("ProfilerStep#"))
    by_name: Dict[str, List[float]] = {}
    for e in gpu_events:
        by_name.setdefault(str(e.get("name", "")), []).append(float(e["dur"]))
    ranked = sorted(by_name.items(), key=lambda kv: -sum(kv[1]))[:top]
    return {
        "window_ms": round(window / 1000, 3),
        "gpu_busy_ms": round(busy_us / 1000, 3),
        "gpu_busy_frac": round(busy_us / window, 4) if window > 0 else None,
        "gaps": {"threshold_us": gap_us, "count": len(gaps), "total_ms": round(sum(gaps) / 1000, 3),
                 "longest_ms": round(max(gaps) / 1000, 3) if gaps else 0.0},
        "graph_launches": sum(1 for e in runtime if e.get("name") == "cudaGraphLaunch"),
        "steps": steps or None,
        "syncs": syncs,
        "top_gpu": [{"name": name[:120], "count": len(d), "total_ms": round(sum(d) / 1000, 3),
                     "mean_us": round(sum(d) / len(d), 2)} for name, d in ranked],
    }


def _is_blocking_copy(event: Dict[str, Any]) -> bool:
    # a plain cudaMemcpy always blocks; an Async one only shows as long when it waited
    return event.get("name") == "cudaMemcpy" or float(event.get("dur", 0)) > 50


def main(argv: Optional[List[str]] = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.trace_summary", description=__doc__.splitlines()[0])
    ap.add_argument("trace", type=Path, nargs="+", help="Chrome trace(s) from SGLang's /start_profile")
    ap.add_argument("--gap-us", type=float, default=20.0, help="GPU idle longer than this counts as a gap (us)")
    ap.add_argument("--top", type=int, default=TOP_GPU, help="GPU activities listed by total time (default: %(default)s)")
    a = ap.parse_args(argv)
    if not (a.gap_us >= 0 and a.gap_us != float("inf")):  # also refuses nan
        ap.error(f"--gap-us must be a finite number of microseconds >= 0 (got {a.gap_us})")
    if a.top < 1:
        ap.error(f"--top must be >= 1 (got {a.top})")
    for path in a.trace:
        if path.is_dir():
            ap.error(f"{path} is a directory; give the trace file(s) in it")
        if not path.is_file():
            ap.error(f"no such file: {path}")
    out, errors = {}, []
    for path in a.trace:  # a bad file is named; the good ones are still summarized
        try:
            out[str(path)] = summarize(load_events(path), a.gap_us, a.top)
        except (OSError, ValueError, EOFError, zlib.error) as exc:
            errors.append(f"{path}: {exc}")
    if out:
        print(json.dumps(out, indent=1))
    if errors:
        sys.exit("\n".join(errors))


if __name__ == "__main__":
    main()
