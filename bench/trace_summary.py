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
``allocations``: the caching allocator's calls into the driver (``cudaMalloc``, ``cudaFree``,
count and ms; a ``cudaFree`` waits for the device). ``sync_sites`` and ``idle_sites`` say where the CPU waited and what the idle GPU waited for: each
sync, and each gap by the launch of the activity that ended it, under the CPU ops that enclose it
on its thread (:func:`site_of`), the ``top`` sites by total ms (the trace files themselves stay on
the GPU machine, so these are what a run brings back).

``--stages`` adds :func:`stage_summary` under ``stages``: a window of live serving (prefills and
decode steps mixed) split by what each GPU activity was launched for (target prefill, draft
prefill, target decode/verify, draft, other), told apart by the ``step[MODE bs=B]`` spans that
SGLang 0.5.12's ``ModelRunner.forward`` records while the profiler runs (:data:`CLASSIFIED_BY`),
and by step (a target forward on the GPU to the next). :func:`compare_stages` /
:func:`format_comparison` put two such windows side by side in ms per 1000 output tokens
(``python -m bench.throughput compare-profiles A.json B.json``).
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import re
import statistics
import sys
import zlib
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Tuple

from bench.decode_log import read_log

GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
# What this project asks SGLang's /start_profile for: CPU + GPU activity, without Python stacks and
# shapes: with SGLang's default (with_stack=True) ten steps at 128 requests made a 340 MB trace
# whose writing stalled the server ~5 min (x2-2026-11-30c).
PROFILE_OPTIONS = {"activities": ["CPU", "GPU"], "with_stack": False, "record_shapes": False}


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


def _complete(events: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The complete events (``ph`` "X" with ``ts`` and ``dur``) of a trace, their times checked.

    Raises:
        ValueError: a ``ts`` or ``dur`` that is not a finite time (``dur`` < 0 too).
    """
    complete = [e for e in events if e.get("ph") == "X" and "ts" in e and "dur" in e]
    for e in complete:
        try:
            ts, dur = float(e["ts"]), float(e["dur"])
        except (TypeError, ValueError):
            ts, dur = math.nan, math.nan
        if not (math.isfinite(ts) and math.isfinite(dur)) or dur < 0:
            raise ValueError(f"event {str(e.get('name', ''))[:60]!r} has ts {e['ts']!r} / dur {e['dur']!r}: "
                             "not a time (a corrupt trace?)")
    return complete


def _gpu_events(complete: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The GPU activities (kernels, memcpy, memset) among ``complete``.

    Raises:
        ValueError: there is none (a CPU-only profile).
    """
    gpu_events = [e for e in complete if str(e.get("cat", "")).lower() in GPU_CATEGORIES]
    if not gpu_events:
        raise ValueError("no GPU activity in the trace (was it recorded with activities CPU and GPU?)")
    return gpu_events


def summarize(events: List[Dict[str, Any]], gap_us: float = 20.0, top: int = TOP_GPU) -> Dict[str, Any]:
    """GPU busy time, idle gaps, graph launches, CPU syncs and the ``top`` GPU activities by total
    time of one trace (times in ms, means in us).

    ``events``: Chrome-trace events (``ph`` "X" with ``ts``/``dur`` in microseconds, ``cat``,
    ``name``). Raises ValueError when the trace holds no GPU activity (a CPU-only profile).
    """
    complete = _complete(events)
    gpu_events = _gpu_events(complete)
    gpu = [(float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in gpu_events]
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
    allocations: Dict[str, Dict[str, float]] = {}  # cudaFree waits for the device; a cudaMalloc may too
    for e in runtime:
        name = str(e.get("name", ""))
        if name.startswith(ALLOCATION_CALLS):
            a = allocations.setdefault(name, {"count": 0, "total_ms": 0.0})
            a["count"] += 1
            a["total_ms"] += float(e["dur"]) / 1000
    for a in allocations.values():
        a["total_ms"] = round(a["total_ms"], 3)
    steps = sum(1 for e in complete if str(e.get("name", "")).startswith("ProfilerStep#"))
    ops = cpu_ops_by_thread(complete)
    sync_sites: Dict[Tuple[str, str], List[float]] = {}
    for e in runtime:
        name = str(e.get("name", ""))
        if "Synchronize" in name or (name in ("cudaMemcpy", "cudaMemcpyAsync") and _is_blocking_copy(e)):
            sync_sites.setdefault((site_of(ops, e), name), []).append(float(e["dur"]))
    launches = _launches(complete)
    first_at = {float(g["ts"]): g for g in gpu_events}  # the activity that ends a gap starts it
    idle_sites: Dict[Tuple[str, str], List[float]] = {}
    for a, b in zip(busy, busy[1:]):
        if b[0] - a[1] <= gap_us:
            continue
        g = first_at.get(b[0])
        launch = launches.get((g.get("args") or {}).get("correlation")) if g is not None else None
        key = (site_of(ops, launch) if launch is not None else "(no launch in the trace)",
               str(launch.get("name", "")) if launch is not None else "")
        idle_sites.setdefault(key, []).append(b[0] - a[1])
    by_name: Dict[str, List[float]] = {}
    for e in gpu_events:
        by_name.setdefault(str(e.get("name", "")), []).append(float(e["dur"]))
    ranked = sorted(by_name.items(), key=lambda kv: -sum(kv[1]))[:top]
    return {
        "cpu_ops": cpu_op_medians(complete),
        "window_ms": round(window / 1000, 3),
        "gpu_busy_ms": round(busy_us / 1000, 3),
        "gpu_busy_frac": round(busy_us / window, 4) if window > 0 else None,
        "gaps": {"threshold_us": gap_us, "count": len(gaps), "total_ms": round(sum(gaps) / 1000, 3),
                 "longest_ms": round(max(gaps) / 1000, 3) if gaps else 0.0},
        "graph_launches": sum(1 for e in runtime if e.get("name") == "cudaGraphLaunch"),
        "steps": steps or None,
        "syncs": syncs,
        "allocations": allocations,
        "sync_sites": _ranked_sites(sync_sites, top),
        "idle_sites": _ranked_sites(idle_sites, top),
        "top_gpu": [{"name": name[:120], "count": len(d), "total_ms": round(sum(d) / 1000, 3),
                     "mean_us": round(sum(d) / len(d), 2)} for name, d in ranked],
    }


#: ATen ops that can wait for the GPU (a blocking copy, a scalar read) or run a compiled region: not a
#: measure of how fast a server's CPU runs its own work
CPU_WAITING_OPS = ("aten::item", "aten::_local_scalar_dense", "aten::nonzero", "aten::to", "aten::_to_copy",
                   "aten::copy_", "aten::equal", "aten::is_nonzero", "aten::pin_memory")
#: an op is compared between two servers only where each ran it this many times in its window
CPU_SPEED_MIN_COUNT = 50
#: ... and took at least this long (us, median) on both: sub-microsecond ops are timer noise
CPU_SPEED_MIN_US = 1.0
#: CPU ops kept per trace for :func:`cpu_speed` (the most frequent)
CPU_OPS_KEPT = 60


def cpu_op_medians(complete: List[Dict[str, Any]], keep: int = CPU_OPS_KEPT) -> Dict[str, List[float]]:
    """``{name: [count, median us]}`` of the ``keep`` most frequent ATen ops (``cat`` cpu_op) of a
    trace's complete events: how long a server's CPU took for the same small ops, e.g. to tell a
    slower host core from more work."""
    durations: Dict[str, List[float]] = {}
    for e in complete:
        if str(e.get("cat", "")).lower() == "cpu_op":
            durations.setdefault(str(e.get("name", "")), []).append(float(e["dur"]))
    ranked = sorted(durations.items(), key=lambda kv: (-len(kv[1]), kv[0]))[:keep]
    return {name: [len(d), round(statistics.median(d), 2)] for name, d in ranked}


def cpu_speed(a: Dict[str, List[float]], b: Dict[str, List[float]],
              min_count: int = CPU_SPEED_MIN_COUNT) -> Optional[Dict[str, Any]]:
    """B's CPU time per op against A's (two :func:`cpu_op_medians`): the geometric mean over the
    ATen ops both ran at least ``min_count`` times (leaving out :data:`CPU_WAITING_OPS` and ops under
    CPU_SPEED_MIN_US) of B's median / A's, with the ops and their ratios. The same op on the same
    shapes costs the same CPU time on one host, so a ratio away from 1 says B ran on slower (or
    busier) cores, or its ops were bigger; None when no op qualifies.

    Raises:
        TypeError, ValueError: an entry is not ``[count, median us]``.
    """
    rows = []
    for name in sorted(set(a) & set(b)):
        (na, ma), (nb, mb) = a[name], b[name]
        if (not name.startswith("aten::") or name in CPU_WAITING_OPS or min(na, nb) < min_count
                or min(ma, mb) < CPU_SPEED_MIN_US):
            continue
        rows.append({"op": name, "count": [int(na), int(nb)], "median_us": [ma, mb], "ratio": round(mb / ma, 3)})
    if not rows:
        return None
    geo = math.exp(sum(math.log(r["ratio"]) for r in rows) / len(rows))
    return {"ratio": round(geo, 3), "ops": len(rows), "min_count": min_count,
            "by_op": sorted(rows, key=lambda r: -r["ratio"])}


#: CUDA runtime calls of the caching allocator going to the driver (PyTorch frees its cache and
#: retries when an allocation fails: each cudaFree then synchronizes the device)
ALLOCATION_CALLS = ("cudaMalloc", "cudaFree", "cudaHostAlloc", "cudaFreeHost")

#: the CPU-side events a sync or a launch is placed under (ATen ops and record_function spans)
SITE_CATEGORIES = ("cpu_op", "user_annotation")
def cpu_ops_by_thread(complete: List[Dict[str, Any]]) -> Dict[Any, Tuple[List[float], List[Dict[str, Any]], List[int]]]:
    """Per ``(pid, tid)``: the start times, the CPU ops / annotations (:data:`SITE_CATEGORIES`,
    ``ProfilerStep#N`` left out) of ``complete`` sorted by start (the longer first at a tie), and
    each one's parent (the index of the innermost op enclosing it, -1 for none), for :func:`site_of`."""
    by: Dict[Any, List[Dict[str, Any]]] = {}
    for e in complete:
        if (str(e.get("cat", "")).lower() in SITE_CATEGORIES
                and not str(e.get("name", "")).startswith("ProfilerStep#")):
            by.setdefault((e.get("pid"), e.get("tid")), []).append(e)
    out = {}
    for key, evs in by.items():
        evs.sort(key=lambda e: (float(e["ts"]), -float(e["dur"])))
        parents, stack = [], []
        for i, e in enumerate(evs):
            end = float(e["ts"]) + float(e["dur"])
            while stack and float(evs[stack[-1]]["ts"]) + float(evs[stack[-1]]["dur"]) < end:
                stack.pop()
            parents.append(stack[-1] if stack else -1)
            stack.append(i)
        out[key] = ([float(e["ts"]) for e in evs], evs, parents)
    return out


def _site_name(event: Dict[str, Any]) -> str:
    m = STEP_SPAN.match(str(event.get("name", "")))
    return f"step[{m['mode']}]" if m else str(event.get("name", ""))[:80]


def site_of(ops: Dict[Any, Tuple[List[float], List[Dict[str, Any]], List[int]]], event: Dict[str, Any]) -> str:
    """Where on the CPU ``event`` (a runtime call: sync, copy, launch) happened: the outermost CPU
    op enclosing it on its thread, then the two innermost, ``"step[EXTEND] > aten::to >
    aten::copy_"`` (a ``step[MODE bs=B ...]`` span as ``step[MODE]``); ``"(no CPU op)"`` when
    none encloses it. ``ops``: :func:`cpu_ops_by_thread`'s."""
    starts, evs, parents = ops.get((event.get("pid"), event.get("tid")), ([], [], []))
    t0 = float(event["ts"])
    t1 = t0 + float(event.get("dur", 0))
    j = bisect.bisect_right(starts, t0) - 1
    while j >= 0 and float(evs[j]["ts"]) + float(evs[j]["dur"]) < t1:
        j = parents[j]  # an op that ended before the event: its enclosing ones may still hold it
    enclosing = []  # innermost first
    while j >= 0:
        enclosing.append(evs[j])
        j = parents[j]
    if not enclosing:
        return "(no CPU op)"
    names = [_site_name(e) for e in enclosing]
    chain = [names[-1]] + list(reversed(names[:2]))
    return " > ".join(dict.fromkeys(chain))


def _launches(complete: List[Dict[str, Any]]) -> Dict[Any, Dict[str, Any]]:
    """The CPU launch (runtime or driver call) of each correlation id."""
    out: Dict[Any, Dict[str, Any]] = {}
    for e in complete:
        if str(e.get("cat", "")).lower() in LAUNCH_CATEGORIES:
            corr = (e.get("args") or {}).get("correlation")
            if corr is not None:
                out[corr] = e
    return out


def _ranked_sites(sites: Dict[Tuple[str, str], List[float]], top: int) -> List[Dict[str, Any]]:
    ranked = sorted(sites.items(), key=lambda kv: -sum(kv[1]))[:top]
    return [{"site": site, "call": call, "count": len(d), "total_ms": round(sum(d) / 1000, 3)}
            for (site, call), d in ranked]


def _is_blocking_copy(event: Dict[str, Any]) -> bool:
    # a plain cudaMemcpy always blocks; an Async one only shows as long when it waited
    return event.get("name") == "cudaMemcpy" or float(event.get("dur", 0)) > 50


# -- stages: what each GPU activity was launched for -----------------------------------------------

#: While the profiler runs, SGLang 0.5.12's ``ModelRunner.forward`` wraps every forward pass in
#: ``torch.profiler.record_function`` named ``step[MODE bs=B]`` (``step[EXTEND bs=B toks=T]`` for
#: EXTEND; ``model_executor/model_runner.py``, ``_build_step_span_name``): a CPU-side
#: ``user_annotation`` span on the thread that launches the forward's kernels.
STEP_SPAN = re.compile(r"^step\[(?P<mode>[A-Z][A-Z0-9_]*) bs=(?P<bs>\d+)(?: toks=(?P<toks>\d+))?\]$")
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")  # driver: Triton kernels (cuLaunchKernel)
GRAPH_LAUNCHES = ("cudaGraphLaunch", "cuGraphLaunch")
SPECULATIVE_MODES = ("TARGET_VERIFY", "DRAFT_EXTEND", "DRAFT_EXTEND_V2")
STEP_KINDS = ("prefill", "decode", "mixed")  # the target forwards a step starts with
TOP_PER_STAGE = 5
#: What each stage category holds (written into every stage summary).
STAGES = {
    "prefill": "the target's prefill: step[EXTEND] spans (on a speculative server the first of each pair)",
    "draft_prefill": "the draft's prefill (EAGLE: draft extend over the same batch right after the target's): "
                     "on a speculative server, a step[EXTEND] span right after a target one of the same bs and toks",
    "decode": "the target's decode-phase forward: step[DECODE] without speculation; step[TARGET_VERIFY] on a "
              "speculative server (an OFF step's one-token target forward, or an ON step's verify)",
    "draft": "the draft after decode-phase steps: step[DRAFT_EXTEND*] spans, step[DECODE] spans on a speculative "
             "server (eager draft steps) and CUDA graphs launched outside any forward span (the draft's multi-step "
             "and draft-extend graphs, the OFF step's KV-only draft extend)",
    "mixed": "step[MIXED] spans (chunked prefill mixed with decode)",
    "other": "launched outside any forward span, not a CUDA graph: sampling, the speculative worker's accept and "
             "bookkeeping kernels, the scheduler's input copies",
    "unattributed": "no launch of it in the trace (launched before the profiler started) or no correlation id",
}
CLASSIFIED_BY = ("each GPU activity by the CPU launch with its correlation id: inside a step[MODE] span of "
                 "ModelRunner.forward -> that span's stage; outside -> draft (a CUDA graph, speculative server) "
                 "or other; GPU idle time is charged to the activity that ends it (the GPU waited for its launch); "
                 "overlapping activities share their time equally")


def forward_spans(complete: List[Dict[str, Any]], speculative: Optional[bool] = None) -> Tuple[List[Dict[str, Any]], bool]:
    """SGLang's ``step[...]`` spans of ``complete`` (checked complete events), each with its stage
    ``category`` (see :data:`STAGES`), sorted by start; and whether the server speculates
    (``speculative``, else: any TARGET_VERIFY or DRAFT_EXTEND* span).

    Target and draft prefill spans carry the same name; on a speculative server an EXTEND span
    that follows a target EXTEND span of the same bs and toks on the same thread, with no forward
    between them, is the draft's."""
    spans = []
    for e in complete:
        if str(e.get("cat", "")).lower() != "user_annotation":
            continue
        m = STEP_SPAN.match(str(e.get("name", "")))
        if m:
            ts = float(e["ts"])
            spans.append({"thread": (e.get("pid"), e.get("tid")), "ts": ts, "end": ts + float(e["dur"]),
                          "mode": m["mode"], "bs": int(m["bs"]), "toks": int(m["toks"]) if m["toks"] else None})
    if speculative is None:
        speculative = any(s["mode"] in SPECULATIVE_MODES for s in spans)
    previous: Dict[Any, Dict[str, Any]] = {}
    for s in sorted(spans, key=lambda s: s["ts"]):
        s["category"] = _span_category(s, previous.get(s["thread"]), speculative)
        previous[s["thread"]] = s
    spans.sort(key=lambda s: s["ts"])
    return spans, speculative


def _span_category(span: Dict[str, Any], before: Optional[Dict[str, Any]], speculative: bool) -> str:
    mode = span["mode"]
    if mode == "EXTEND":
        pair = before is not None and before["category"] == "prefill" and (before["bs"], before["toks"]) == (
            span["bs"], span["toks"])
        return "draft_prefill" if speculative and pair else "prefill"
    if mode == "DECODE":
        return "draft" if speculative else "decode"
    if mode == "TARGET_VERIFY":
        return "decode"
    if mode.startswith("DRAFT_"):
        return "draft"
    return mode.lower()  # mixed, idle, ...


def _attribute(complete: List[Dict[str, Any]], gpu_events: List[Dict[str, Any]], spans: List[Dict[str, Any]],
               speculative: bool) -> List[Tuple[float, float, str, Optional[int]]]:
    """``(start, end, stage, span index or None)`` of every GPU activity (see :data:`CLASSIFIED_BY`)."""
    launches = _launches(complete)
    threads: Dict[Any, Tuple[List[float], List[int]]] = {}
    anywhere: Tuple[List[float], List[int]] = ([], [])
    for i, s in enumerate(spans):  # sorted by start
        for starts, idx in (threads.setdefault(s["thread"], ([], [])), anywhere):
            starts.append(s["ts"])
            idx.append(i)
    out = []
    for g in gpu_events:
        start = float(g["ts"])
        end = start + float(g["dur"])
        corr = (g.get("args") or {}).get("correlation")
        launch = launches.get(corr) if corr is not None else None
        if launch is None:
            out.append((start, end, "unattributed", None))
            continue
        # the launching thread's spans; a launch from a thread without any (a trace whose runtime
        # events carry another thread id than the CPU ops) is matched by time alone
        at = float(launch["ts"])
        where = threads.get((launch.get("pid"), launch.get("tid")), anywhere)
        span = None
        k = bisect.bisect_right(where[0], at) - 1
        if k >= 0 and spans[where[1][k]]["end"] >= at:
            span = where[1][k]
        if span is not None:
            out.append((start, end, spans[span]["category"], span))
        elif speculative and launch.get("name") in GRAPH_LAUNCHES:
            out.append((start, end, "draft", None))
        else:
            out.append((start, end, "other", None))
    return out


def _partition(acts: List[Tuple[float, float, str, Optional[int]]]) -> Tuple[Dict[str, float], Dict[str, float]]:
    """Busy and idle time (us) per stage: the window from the first activity's start to the last
    end, cut at every start and end; a busy piece is shared equally by the stages running in it,
    an idle piece goes to the stage of the activity that starts at its end."""
    deltas: Dict[float, Dict[str, int]] = {}
    starts_at: Dict[float, str] = {}
    for start, end, cat, _ in sorted(acts, key=lambda a: (a[0], a[1], a[2])):
        deltas.setdefault(start, {}).setdefault(cat, 0)
        deltas[start][cat] += 1
        deltas.setdefault(end, {}).setdefault(cat, 0)
        deltas[end][cat] -= 1
        starts_at.setdefault(start, cat)
    times = sorted(deltas)
    active: Dict[str, int] = {}
    busy: Dict[str, float] = {}
    idle: Dict[str, float] = {}
    for t, nxt in zip(times, times[1:]):
        for cat, d in deltas[t].items():
            n = active.get(cat, 0) + d
            if n:
                active[cat] = n
            else:
                active.pop(cat, None)
        if active:
            share = (nxt - t) / len(active)
            for cat in active:
                busy[cat] = busy.get(cat, 0.0) + share
        else:
            cat = starts_at.get(nxt, "unattributed")
            idle[cat] = idle.get(cat, 0.0) + (nxt - t)
    return busy, idle


def _busy_between(union: List[Tuple[float, float]], starts: List[float], a: float, b: float) -> float:
    """Time (us) of ``union`` (sorted, disjoint intervals, e.g. GPU busy or a thread's waits;
    ``starts`` their starts) within [a, b]."""
    total = 0.0
    for s, e in union[max(bisect.bisect_right(starts, a) - 1, 0):]:
        if s >= b:
            break
        total += max(0.0, min(e, b) - max(s, a))
    return total


def stage_summary(events: List[Dict[str, Any]], tokens_per_verify: Optional[float] = None,
                  speculative: Optional[bool] = None, top: int = TOP_PER_STAGE) -> Dict[str, Any]:
    """Where the time of a window of live serving went, by what each GPU activity was launched for
    (times in ms).

    - ``stages``: per stage (:data:`STAGES`) ``total_ms`` = ``busy_ms`` (its share of the GPU busy
      time) + ``idle_before_ms`` (GPU idle ended by one of its activities); the stages' totals sum
      to ``window_ms``. Also ``activities``, ``kernel_ms`` (sum of durations) and its ``top``
      activities by name.
    - ``steps``: the GPU timeline cut where each target forward (prefill, decode, mixed) starts on
      the GPU; a step runs to the next one and holds everything in between (the target forward,
      sampling, the draft, the idle before the next forward). Per kind: ``steps``, ``wall_ms``,
      ``busy_ms``, ``idle_ms``, ``requests``, ``modes``; ``lead_in`` is the window before the first.
    - ``cpu``: per stage, the forward spans' count, the scheduler thread's wall time in them
      (``span_ms``: launching the forward), ``requests`` (sum of bs) and prefill ``tokens``;
      ``to_next_ms``: its wall time from the end of each span to the start of the next target
      forward span on that thread (draft forwards are between the two; ``followed`` spans had one):
      the scheduler's work between two forwards (a prefill's draft stage, result processing, the
      next batch's preparation), which the GPU waits out where it has nothing queued.
      ``span_wait_ms`` / ``to_next_wait_ms``: the parts of those spent in CUDA synchronize calls
      (waiting for the GPU, e.g. for the previous batch's result); the rest is CPU work.
      ``ops_to_next``: the ATen ops run between a span and the next target forward (not inside
      another op of that stretch), name -> [count, us] summed over the stage's spans, the
      OPS_TO_NEXT_KEPT with the most time.
    - ``tokens``: output tokens of the window's forwards: one per request of a DECODE or prefill
      batch (a request cut by chunked prefill is counted at each chunk: at most one too many per
      prefill batch), ``tokens_per_verify`` per request of a TARGET_VERIFY batch (1 for an OFF
      step; an ON step's accept length). ``output_tokens`` is None when verify batches were
      recorded and ``tokens_per_verify`` is None.

    ``speculative``: whether the server speculates (None: from the trace, see :func:`forward_spans`).

    Raises:
        ValueError: as :func:`summarize` (not a time; no GPU activity).
    """
    complete = _complete(events)
    gpu_events = _gpu_events(complete)
    spans, speculative = forward_spans(complete, speculative)
    acts = _attribute(complete, gpu_events, spans, speculative)
    union = _union((a[0], a[1]) for a in acts)
    window = union[-1][1] - union[0][0]
    busy_us = sum(e - s for s, e in union)
    busy, idle = _partition(acts)
    by_name: Dict[str, Dict[str, List[float]]] = {}
    for g, (start, end, cat, _) in zip(gpu_events, acts):
        by_name.setdefault(cat, {}).setdefault(str(g.get("name", "")), []).append(end - start)
    stages = {}
    for cat in sorted(set(busy) | set(idle) | set(by_name),
                      key=lambda c: -(busy.get(c, 0.0) + idle.get(c, 0.0))):
        names = by_name.get(cat, {})
        ranked = sorted(names.items(), key=lambda kv: -sum(kv[1]))[:top]
        stages[cat] = {
            "total_ms": round((busy.get(cat, 0.0) + idle.get(cat, 0.0)) / 1000, 3),
            "busy_ms": round(busy.get(cat, 0.0) / 1000, 3), "idle_before_ms": round(idle.get(cat, 0.0) / 1000, 3),
            "activities": sum(len(d) for d in names.values()),
            "kernel_ms": round(sum(sum(d) for d in names.values()) / 1000, 3),
            "top": [{"name": n[:120], "count": len(d), "total_ms": round(sum(d) / 1000, 3)} for n, d in ranked],
        }
    return {
        "classified_by": CLASSIFIED_BY, "speculative": speculative,
        "window_ms": round(window / 1000, 3), "gpu_busy_ms": round(busy_us / 1000, 3),
        "gpu_idle_ms": round((window - busy_us) / 1000, 3),
        "stages": stages, "steps": _steps(acts, spans, union),
        "cpu": _cpu(spans, _waits(complete), cpu_ops_by_thread(complete)),
        "tokens": _tokens(spans, tokens_per_verify),
        "legend": {c: STAGES.get(c, "forward spans of this mode") for c in stages},
    }


def _steps(acts, spans, union) -> Dict[str, Any]:
    first: Dict[int, float] = {}
    for start, _, cat, span in acts:
        if span is not None and cat in STEP_KINDS and start < first.get(span, math.inf):
            first[span] = start
    marks = sorted((t, spans[i]["category"], i) for i, t in first.items())
    lo, hi = union[0][0], union[-1][1]
    starts = [u[0] for u in union]
    out: Dict[str, Any] = {}
    edges = [(lo, "lead_in", None)] + marks
    for k, (t, kind, span) in enumerate(edges):
        end = edges[k + 1][0] if k + 1 < len(edges) else hi
        if end <= t and kind == "lead_in":
            continue
        rec = out.setdefault(kind, {"steps": 0, "wall_ms": 0.0, "busy_ms": 0.0, "idle_ms": 0.0, "requests": 0,
                                    "modes": {}})
        busy = _busy_between(union, starts, t, end)
        rec["wall_ms"] += (end - t) / 1000
        rec["busy_ms"] += busy / 1000
        rec["idle_ms"] += (end - t - busy) / 1000
        if span is not None:
            rec["steps"] += 1
            rec["requests"] += spans[span]["bs"]
            mode = spans[span]["mode"]
            rec["modes"][mode] = rec["modes"].get(mode, 0) + 1
    for rec in out.values():
        for key in ("wall_ms", "busy_ms", "idle_ms"):
            rec[key] = round(rec[key], 3)
    return out


def _waits(complete: List[Dict[str, Any]]) -> Dict[Any, Tuple[List[Tuple[float, float]], List[float]]]:
    """Per ``(pid, tid)``: the intervals the thread spent in a CUDA synchronize call (waiting for the
    GPU), sorted and merged, with their starts (:func:`_busy_between`'s arguments)."""
    out: Dict[Any, List[Tuple[float, float]]] = {}
    for e in complete:
        if str(e.get("cat", "")).lower() == "cuda_runtime" and "Synchronize" in str(e.get("name", "")):
            ts = float(e["ts"])
            out.setdefault((e.get("pid"), e.get("tid")), []).append((ts, ts + float(e["dur"])))
    merged = {k: _union(v) for k, v in out.items()}
    return {k: (u, [s for s, _ in u]) for k, u in merged.items()}


#: the ATen ops between a forward span and the next one kept per stage (the most CPU time) ...
OPS_TO_NEXT_KEPT = 20
#: ... and shown per stage by compare-profiles (the largest differences)
OPS_TO_NEXT_SHOWN = 8


def _ops_between(ops: Optional[Tuple[List[float], List[Dict[str, Any]], List[int]]], a: float, b: float,
                 into: Dict[str, List[float]]) -> None:
    """Add the ATen ops (cpu_op) a thread started in ``[a, b)`` and not inside another op of that
    interval to ``into`` (name -> [count, us])."""
    if ops is None:
        return
    starts, evs, _ = ops
    end = a
    for e in evs[bisect.bisect_left(starts, a):bisect.bisect_left(starts, b)]:
        ts = float(e["ts"])
        if ts < end:
            continue  # inside an op started earlier in the interval
        end = ts + float(e["dur"])
        if str(e.get("cat", "")).lower() == "cpu_op":
            rec = into.setdefault(str(e.get("name", ""))[:80], [0, 0.0])
            rec[0] += 1
            rec[1] += float(e["dur"])


def _cpu(spans: List[Dict[str, Any]], waits: Optional[Dict[Any, Tuple[List[Tuple[float, float]], List[float]]]] = None,
         ops: Optional[Dict[Any, Tuple[List[float], List[Dict[str, Any]], List[int]]]] = None) -> Dict[str, Any]:
    waits = waits or {}
    ops = ops or {}
    between: Dict[str, Dict[str, List[float]]] = {}
    out: Dict[str, Any] = {}
    following: Dict[int, float] = {}  # span index -> start of the next target forward span on its thread
    last: Dict[Any, int] = {}
    for i, s in enumerate(spans):  # sorted by start
        if s["category"].startswith("draft"):
            continue  # the draft's own forwards run between a target forward and the next one
        if s["thread"] in last:
            following[last[s["thread"]]] = s["ts"]
        last[s["thread"]] = i
    for i, s in enumerate(spans):
        rec = out.setdefault(s["category"], {"spans": 0, "span_ms": 0.0, "span_wait_ms": 0.0, "requests": 0,
                                             "tokens": 0, "modes": {}, "to_next_ms": 0.0, "to_next_wait_ms": 0.0,
                                             "followed": 0})
        w = waits.get(s["thread"], ([], []))
        rec["spans"] += 1
        rec["span_ms"] += (s["end"] - s["ts"]) / 1000
        rec["span_wait_ms"] += _busy_between(*w, s["ts"], s["end"]) / 1000
        rec["requests"] += s["bs"]
        rec["tokens"] += s["toks"] or 0
        rec["modes"][s["mode"]] = rec["modes"].get(s["mode"], 0) + 1
        if i in following:
            rec["to_next_ms"] += max(0.0, following[i] - s["end"]) / 1000
            rec["to_next_wait_ms"] += _busy_between(*w, s["end"], following[i]) / 1000
            rec["followed"] += 1
            _ops_between(ops.get(s["thread"]), s["end"], following[i], between.setdefault(s["category"], {}))
    for cat, rec in out.items():
        for key in ("span_ms", "span_wait_ms", "to_next_ms", "to_next_wait_ms"):
            rec[key] = round(rec[key], 3)
        if ops:
            kept = sorted(between.get(cat, {}).items(), key=lambda kv: -kv[1][1])[:OPS_TO_NEXT_KEPT]
            rec["ops_to_next"] = {name: [int(n), round(us, 1)] for name, (n, us) in kept}
    return out


def _output_tokens(decode: int, verify: int, prefill: int, mixed: int,
                   tokens_per_verify: Optional[float]) -> Optional[float]:
    """One token per request of a DECODE, prefill or mixed batch, ``tokens_per_verify`` per request
    of a TARGET_VERIFY batch (None: unknown where there were any), rounded to 0.1."""
    out = decode + prefill + mixed
    if verify:
        if tokens_per_verify is None:
            return None
        out += verify * tokens_per_verify
    return round(out, 1)


def _tokens(spans: List[Dict[str, Any]], tokens_per_verify: Optional[float]) -> Dict[str, Any]:
    def bs(category: str, mode: Optional[str] = None) -> int:
        return sum(s["bs"] for s in spans if s["category"] == category and mode in (None, s["mode"]))

    decode, verify = bs("decode", "DECODE"), bs("decode", "TARGET_VERIFY")
    prefill, mixed = bs("prefill"), bs("mixed")
    return {"decode_requests": decode, "verify_requests": verify, "prefill_requests": prefill,
            "mixed_requests": mixed, "prefill_input_tokens": sum(s["toks"] or 0 for s in spans
                                                                  if s["category"] == "prefill"),
            "tokens_per_verify": tokens_per_verify,
            "output_tokens": _output_tokens(decode, verify, prefill, mixed, tokens_per_verify)}


def with_tokens_per_verify(stages: Dict[str, Any], tokens_per_verify: float) -> Dict[str, Any]:
    """A copy of a :func:`stage_summary` whose output token count takes ``tokens_per_verify`` tokens
    per request of a TARGET_VERIFY batch (e.g. 1 for a window of OFF steps whose profile counted the
    row's accept length), from the request counts it recorded.

    Raises:
        ValueError: ``tokens_per_verify`` is not a finite number > 0, or the summary has no request
            counts.
    """
    if not (isinstance(tokens_per_verify, (int, float)) and math.isfinite(tokens_per_verify)
            and tokens_per_verify > 0):
        raise ValueError(f"tokens per verify must be a number of tokens > 0 (got {tokens_per_verify!r})")
    tokens = stages.get("tokens") or {}
    keys = ("decode_requests", "verify_requests", "prefill_requests", "mixed_requests")
    if not all(isinstance(tokens.get(k), int) for k in keys):
        raise ValueError("the summary has no request counts to recount its output tokens from")
    out = _output_tokens(*(tokens[k] for k in keys), float(tokens_per_verify))
    return {**stages, "tokens": {**tokens, "tokens_per_verify": float(tokens_per_verify), "output_tokens": out}}


# -- comparing two windows -------------------------------------------------------------------------

def primary_trace(doc: Any) -> Optional[Any]:
    """A traffic profile JSON's (``bench.traffic``) primary trace entry (the one ``primary`` names,
    else the first), or None where ``doc`` has no traces."""
    traces = doc.get("traces") if isinstance(doc, dict) else None
    if not isinstance(traces, dict) or not traces:
        return None
    return traces.get(doc.get("primary")) or next(iter(traces.values()))


def _primary_summary(doc: Any) -> Optional[Dict[str, Any]]:
    trace = primary_trace(doc)
    summary = trace.get("summary") if isinstance(trace, dict) else None
    return summary if isinstance(summary, dict) else None


def stages_of(doc: Dict[str, Any]) -> Dict[str, Any]:
    """The stage summary in ``doc``: a :func:`stage_summary` itself, or a traffic profile JSON
    (``bench.traffic``: its ``primary`` trace's ``stages``).

    Raises:
        ValueError: neither, or the primary trace has no stage summary (its error then says why).
    """
    if isinstance(doc, dict) and "stages" in doc and "tokens" in doc:
        return doc
    trace = primary_trace(doc)
    if trace is None:
        raise ValueError("neither a stage summary nor a traffic profile with traces")
    if not isinstance(trace, dict) or not isinstance(trace.get("stages"), dict):
        why = trace.get("error") if isinstance(trace, dict) else None
        raise ValueError(f"its trace has no stage summary ({why or 'none recorded'})")
    return trace["stages"]


#: two windows whose output tokens per decode step differ by more than this ran different batches
LOAD_RATIO_LIMIT = 1.25


def compare_stages(a: Dict[str, Any], b: Dict[str, Any]) -> Dict[str, Any]:
    """B against A (two :func:`stage_summary` results), in ms per 1000 output tokens: per stage
    (``stages``: total, busy and idle; they sum to the window's), per step kind (``steps``: wall
    per 1000 tokens and per step) and the window (``total``). ``share`` is a stage's part of the
    whole difference.

    Raises:
        ValueError: a summary has no output token count (verify batches without tokens_per_verify).
    """
    per = []
    for name, s in (("A", a), ("B", b)):
        tokens = (s.get("tokens") or {}).get("output_tokens")
        if not tokens:
            raise ValueError(f"{name} has no output token count (tokens.output_tokens: {tokens!r}; a trace with "
                             f"TARGET_VERIFY batches needs tokens_per_verify)")
        per.append(1000.0 / tokens)
    fa, fb = per
    gap = b["window_ms"] * fb - a["window_ms"] * fa

    def row(key: str, x: Dict[str, Any], y: Dict[str, Any], fields: Tuple[str, ...]) -> Dict[str, Any]:
        out: Dict[str, Any] = {"name": key}
        for f in fields:
            va, vb = (x.get(f) or 0.0) * fa, (y.get(f) or 0.0) * fb
            out[f] = {"a": round(va, 3), "b": round(vb, 3), "diff": round(vb - va, 3)}
        return out

    stages = []
    for cat in sorted(set(a["stages"]) | set(b["stages"])):
        r = row(cat, a["stages"].get(cat, {}), b["stages"].get(cat, {}), ("total_ms", "busy_ms", "idle_before_ms"))
        r["share"] = round(r["total_ms"]["diff"] / gap, 3) if gap else None
        stages.append(r)
    stages.sort(key=lambda r: -abs(r["total_ms"]["diff"]))
    steps = []
    for kind in sorted(set(a.get("steps", {})) | set(b.get("steps", {}))):
        x, y = a["steps"].get(kind, {}), b["steps"].get(kind, {})
        r = row(kind, x, y, ("wall_ms", "busy_ms", "idle_ms"))
        r["steps"] = {"a": x.get("steps", 0), "b": y.get("steps", 0)}
        r["ms_per_step"] = {k: round(v.get("wall_ms", 0.0) / v["steps"], 3) if v.get("steps") else None
                            for k, v in (("a", x), ("b", y))}
        r["share"] = round(r["wall_ms"]["diff"] / gap, 3) if gap else None
        steps.append(r)
    total = row("window", a, b, ("window_ms", "gpu_busy_ms", "gpu_idle_ms"))
    per_step = {}
    for k, summary in (("a", a), ("b", b)):
        n = (summary.get("steps", {}).get("decode") or {}).get("steps")
        per_step[k] = round(summary["tokens"]["output_tokens"] / n, 2) if n else None
    load_differs = (None if None in per_step.values() else
                    max(per_step.values()) > LOAD_RATIO_LIMIT * min(per_step.values()))
    cpu, ops_rows = [], []
    for cat in sorted(set(a.get("cpu", {})) | set(b.get("cpu", {}))):
        ca, cb = a.get("cpu", {}).get(cat) or {}, b.get("cpu", {}).get(cat) or {}
        r = {"name": cat}
        for k, c in (("a", ca), ("b", cb)):
            n, f = c.get("spans"), c.get("followed")

            def per(key: str, count: Any) -> Optional[float]:
                return round(c[key] / count, 3) if count and isinstance(c.get(key), (int, float)) else None

            r[k] = {"spans": n or 0, "span_ms": per("span_ms", n), "span_wait_ms": per("span_wait_ms", n),
                    "to_next_ms": per("to_next_ms", f), "to_next_wait_ms": per("to_next_wait_ms", f)}
        cpu.append(r)
        if "ops_to_next" not in ca or "ops_to_next" not in cb or not ca.get("followed") or not cb.get("followed"):
            continue
        fa, fb = ca["followed"], cb["followed"]
        for name in set(ca["ops_to_next"]) | set(cb["ops_to_next"]):
            (na, ua), (nb, ub) = (c["ops_to_next"].get(name, [0, 0.0]) for c in (ca, cb))
            ops_rows.append({"stage": cat, "op": name, "count": [round(na / fa, 2), round(nb / fb, 2)],
                             "us": [round(ua / fa, 1), round(ub / fb, 1)],
                             "diff_us": round(ub / fb - ua / fa, 1)})
    ops_rows.sort(key=lambda r: (r["stage"], -abs(r["diff_us"])))
    return {"unit": "ms per 1000 output tokens", "tokens_per_decode_step": per_step, "load_differs": load_differs,
            "cpu_per_span": cpu, "ops_to_next": ops_rows,
            "tokens": {"a": a["tokens"]["output_tokens"], "b": b["tokens"]["output_tokens"]},
            "window_ms": {"a": a["window_ms"], "b": b["window_ms"]},
            "tok_s": {"a": round(a["tokens"]["output_tokens"] / a["window_ms"] * 1000, 1),
                      "b": round(b["tokens"]["output_tokens"] / b["window_ms"] * 1000, 1)},
            "total": total, "stages": stages, "steps": steps}


def format_comparison(cmp: Dict[str, Any], a_name: str = "A", b_name: str = "B") -> str:
    """:func:`compare_stages` as text: two markdown tables (by stage, by step kind)."""
    t = cmp["total"]
    lines = [f"A = {a_name}: {cmp['tokens']['a']:g} output tokens in {cmp['window_ms']['a']:g} ms "
             f"({cmp['tok_s']['a']:g} tok/s in the window)",
             f"B = {b_name}: {cmp['tokens']['b']:g} output tokens in {cmp['window_ms']['b']:g} ms "
             f"({cmp['tok_s']['b']:g} tok/s in the window)",
             f"window, {cmp['unit']}: A {t['window_ms']['a']:.2f}, B {t['window_ms']['b']:.2f}, "
             f"B - A {t['window_ms']['diff']:+.2f} (GPU busy {t['gpu_busy_ms']['diff']:+.2f}, "
             f"GPU idle {t['gpu_idle_ms']['diff']:+.2f})"]
    per = cmp.get("tokens_per_decode_step") or {}
    if per.get("a") is not None and per.get("b") is not None:
        lines.append(f"output tokens per decode step: A {per['a']:g}, B {per['b']:g}"
                     + (" -- NOT THE SAME LOAD: the windows ran different batches (a drain, a ramp?); "
                        "per-step times compare loads, not servers" if cmp.get("load_differs") else ""))
    lines += ["",
             f"By stage (what the GPU work was launched for; idle charged to the work that ended it), {cmp['unit']}:",
             "| stage | A | B | B - A | of the gap | B - A busy | B - A idle |", "|---|---|---|---|---|---|---|"]

    def share(r):
        return f"{100 * r['share']:.0f}%" if r["share"] is not None else "n/a"

    for r in cmp["stages"]:
        v = r["total_ms"]
        lines.append(f"| {r['name']} | {v['a']:.2f} | {v['b']:.2f} | {v['diff']:+.2f} | {share(r)} | "
                     f"{r['busy_ms']['diff']:+.2f} | {r['idle_before_ms']['diff']:+.2f} |")
    lines += ["", f"By step (a target forward on the GPU to the next one), {cmp['unit']}:",
              "| step | A steps | B steps | A ms/step | B ms/step | A | B | B - A | of the gap | B - A idle |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in cmp["steps"]:
        ms = r["ms_per_step"]
        fmt = [f"{ms[k]:.3f}" if ms[k] is not None else "" for k in ("a", "b")]
        v = r["wall_ms"]
        lines.append(f"| {r['name']} | {r['steps']['a']} | {r['steps']['b']} | {fmt[0]} | {fmt[1]} | {v['a']:.2f} | "
                     f"{v['b']:.2f} | {v['diff']:+.2f} | {share(r)} | {r['idle_ms']['diff']:+.2f} |")
    rows = cmp.get("cpu_per_span") or []
    if rows:
        lines += ["", "Scheduler thread's wall time per forward span, ms (in the span: launching the forward; to next: "
                      "from its end to the next target forward span; (w): of it waiting in CUDA synchronize calls, "
                      "the rest is CPU work; blank where the summary predates it):",
                  "| stage | A spans | B spans | A in span (w) | B in span (w) | A to next (w) | B to next (w) |",
                  "|---|---|---|---|---|---|---|"]

        def ms(x, wait):
            return "" if x is None else f"{x:.3f}" + ("" if wait is None else f" ({wait:.3f})")

        for r in rows:
            a, b = r["a"], r["b"]
            lines.append(f"| {r['name']} | {a['spans']} | {b['spans']} | {ms(a['span_ms'], a['span_wait_ms'])} | "
                         f"{ms(b['span_ms'], b['span_wait_ms'])} | {ms(a['to_next_ms'], a['to_next_wait_ms'])} | "
                         f"{ms(b['to_next_ms'], b['to_next_wait_ms'])} |")
    ops_rows = cmp.get("ops_to_next") or []
    if ops_rows:
        lines += ["", "ATen ops between a forward span and the next target forward, per span (count, us; the "
                      f"{OPS_TO_NEXT_SHOWN} largest differences a stage):",
                  "| stage | op | A count | B count | A us | B us | B - A us |", "|---|---|---|---|---|---|---|"]
        shown: Dict[str, int] = {}
        for r in ops_rows:
            if shown.get(r["stage"], 0) >= OPS_TO_NEXT_SHOWN:
                continue
            shown[r["stage"]] = shown.get(r["stage"], 0) + 1
            lines.append(f"| {r['stage']} | {r['op']} | {r['count'][0]:g} | {r['count'][1]:g} | {r['us'][0]:.1f} | "
                         f"{r['us'][1]:.1f} | {r['diff_us']:+.1f} |")
    return "\n".join(lines)


def sites_of(doc: Dict[str, Any]) -> Optional[Dict[str, List[Dict[str, Any]]]]:
    """``{"sync_sites": [...], "idle_sites": [...]}`` of a traffic profile JSON's primary trace
    (:func:`summarize`), or None where it has none (a summary from before they were recorded)."""
    summary = _primary_summary(doc)
    if summary is None or "sync_sites" not in summary:
        return None
    return {k: summary.get(k) or [] for k in ("sync_sites", "idle_sites")}


def cpu_ops_of(doc: Dict[str, Any]) -> Optional[Dict[str, List[float]]]:
    """The primary trace's :func:`cpu_op_medians` in a traffic profile JSON, or None where its summary
    predates them."""
    summary = _primary_summary(doc)
    ops = summary.get("cpu_ops") if summary is not None else None
    return ops if isinstance(ops, dict) and ops else None


def compare_sites(a: Dict[str, List[Dict[str, Any]]], b: Dict[str, List[Dict[str, Any]]],
                  tokens_a: float, tokens_b: float) -> Dict[str, List[Dict[str, Any]]]:
    """Per kind (``sync_sites``, ``idle_sites``) the sites of either window, with count and ms per
    1000 output tokens on each side (``tokens_*``: the windows' output tokens), the largest B - A
    first. A site only in the other side's top list counts 0 here."""
    out = {}
    for kind in ("sync_sites", "idle_sites"):
        rows: Dict[Tuple[str, str], Dict[str, Any]] = {}
        for side, sites, tokens in (("a", a.get(kind) or [], tokens_a), ("b", b.get(kind) or [], tokens_b)):
            for site in sites:
                r = rows.setdefault((site["site"], site["call"]), {"site": site["site"], "call": site["call"],
                                                                   "count": {"a": 0, "b": 0}, "ms": {"a": 0.0, "b": 0.0}})
                r["count"][side] = site["count"]
                r["ms"][side] = round(1000 * site["total_ms"] / tokens, 3) if tokens else 0.0
        out[kind] = sorted(rows.values(), key=lambda r: -(r["ms"]["b"] - r["ms"]["a"]))
    return out


def format_cpu_speed(speed: Dict[str, Any]) -> str:
    """:func:`cpu_speed` as one paragraph (its three most different ops named)."""
    most = ", ".join(f"{r['op']} {r['ratio']:g}" for r in speed["by_op"][:3])
    return (f"\nCPU per op: B's median CPU time for an ATen op A also ran is {speed['ratio']:g}x A's (geometric "
            f"mean over {speed['ops']} ops each ran >= {speed['min_count']} times, ops that can wait for the GPU and "
            f"ops under {CPU_SPEED_MIN_US:g} us left out; slower or busier cores, or bigger ops; the most: {most})")


def format_sites(cmp: Dict[str, List[Dict[str, Any]]]) -> str:
    """:func:`compare_sites` as two markdown tables."""
    lines = []
    for kind, title in (("sync_sites", "CPU waits (syncs, blocking copies) by CPU site"),
                        ("idle_sites", "GPU idle gaps by the CPU site of the launch that ended them")):
        lines += ["", f"{title}, ms per 1000 output tokens (each side's top sites):",
                  "| site | call | A count | B count | A | B | B - A |", "|---|---|---|---|---|---|---|"]
        for r in cmp[kind]:
            lines.append(f"| {r['site']} | {r['call']} | {r['count']['a']} | {r['count']['b']} | {r['ms']['a']:.2f} | "
                         f"{r['ms']['b']:.2f} | {r['ms']['b'] - r['ms']['a']:+.2f} |")
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.trace_summary", description=__doc__.splitlines()[0])
    ap.add_argument("trace", type=Path, nargs="+", help="Chrome trace(s) from SGLang's /start_profile")
    ap.add_argument("--gap-us", type=float, default=20.0, help="GPU idle longer than this counts as a gap (us)")
    ap.add_argument("--top", type=int, default=TOP_GPU, help="GPU activities listed by total time (default: %(default)s)")
    ap.add_argument("--stages", action="store_true",
                    help="also split the window by stage (prefill, draft prefill, decode/verify, draft, other) "
                         "and by step, from SGLang's step[...] spans")
    ap.add_argument("--tokens-per-verify", type=float, default=None, metavar="X",
                    help="with --stages: output tokens per request of a TARGET_VERIFY batch (1 for OFF steps; "
                         "an ON step's accept length), for the window's output token count")
    a = ap.parse_args(argv)
    if not (a.gap_us >= 0 and a.gap_us != float("inf")):  # also refuses nan
        ap.error(f"--gap-us must be a finite number of microseconds >= 0 (got {a.gap_us})")
    if a.top < 1:
        ap.error(f"--top must be >= 1 (got {a.top})")
    if a.tokens_per_verify is not None and not (a.tokens_per_verify > 0 and math.isfinite(a.tokens_per_verify)):
        ap.error(f"--tokens-per-verify must be a number of tokens > 0 (got {a.tokens_per_verify})")
    for path in a.trace:
        if path.is_dir():
            ap.error(f"{path} is a directory; give the trace file(s) in it")
        if not path.is_file():
            ap.error(f"no such file: {path}")
    out, errors = {}, []
    for path in a.trace:  # a bad file is named; the good ones are still summarized
        try:
            events = load_events(path)
            out[str(path)] = summarize(events, a.gap_us, a.top)
            if a.stages:
                out[str(path)]["stages"] = stage_summary(events, a.tokens_per_verify)
        except (OSError, ValueError, EOFError, zlib.error) as exc:
            errors.append(f"{path}: {exc}")
    if out:
        print(json.dumps(out, indent=1))
    if errors:
        sys.exit("\n".join(errors))


if __name__ == "__main__":
    main()
