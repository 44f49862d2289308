"""What the auto threshold's step-time samples were made of: a server's ``SPECCONSOLE_AUTO_TRACE`` record.

The server (``server_patch/auto_trace.py``) writes one JSON line per decode result; this rebuilds the
samples the auto threshold took from them (``auto_threshold.StepTimer``: a step's period kept only
inside a run of three decode batches of one kind, with no proof check in it; the server's estimator
also drops a period four times its running estimate, which this keeps) and reports them per
batch-size bucket and mode, split three ways, so a step-time estimate that reads a mode slower than it
ran can be traced to its cause:

- ``by_run_position``: the sample's place in its run of one kind (``2-4``: the first samples after a
  switch or a prefill; ``5-16``; ``17+``), e.g. ON steps measured soon after a switch (probes are 8
  steps) slower than steady ones;
- ``by_context``: the batch's KV tokens per request (``seq_lens_sum / bs``) in tertiles of the bucket's
  samples (``short``, ``middle``, ``long``, each with its range), e.g. an ON step slower at long
  contexts (triton's verify attends the whole prefix per token);
- ``table``: samples whose period held an auto-table rebuild (every 64 decode steps) against the rest;
- ``one_prefill_between``: the periods between two decode results of that kind with one other batch
  between them (a prefill: its forward iteration is the one skipped), and ``extra_ms``, their median
  less the median of ``all_steps``: what a prefill batch costs the server in that mode, which the
  auto threshold's decode-step samples leave out (an ON server's prefill also runs the draft over
  the prompt and drafts its first tokens; an OFF one's writes only the draft's K/V). Such a period
  also holds any time the server sat idle between the two (one request at a time: the next one's
  arrival), so it reads a prefill's cost only where the batch stays busy.

Each group gives the sample count, mean and median step time (ms), the mean batch size (a bucket spans
several sizes: ON samples from a drain at 5 requests and OFF ones at 4 compare unlike steps) and, for
ON, the mean output tokens per request and step. ``all_steps`` beside them: every period of that bucket and kind between two
contiguous decode results of that kind, kept or not (what the server spent per step away from
prefills and switches).

    python -m bench.auto_trace TRACE[.gz] [--min-samples 8] [--table]

Prints JSON (``--table``: one markdown table of the means). An unreadable file or one without decode results ends with a one-line message on stderr
and exit status 1; lines that are not trace lines are counted and skipped, a forward iteration that
goes back (two server runs appended to one file) is said, and so is an output without any bucket
(``--min-samples``).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import zlib
from pathlib import Path
from typing import Any, Dict, List, Optional

from bench.errors import BenchError
from server_patch import auto_threshold as auto


def _number(x: Any) -> bool:
    """A finite JSON number (not a bool, not NaN / Infinity, not too large for a float)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return False
    try:
        return math.isfinite(float(x))
    except OverflowError:
        return False


def _trace_line(d: Any) -> bool:
    """``d`` is a decode result as ``server_patch/auto_trace.py`` writes one."""
    return (isinstance(d, dict) and _number(d.get("t")) and d.get("k") in ("on", "off", "resume")
            and isinstance(d.get("bs"), int) and not isinstance(d["bs"], bool) and d["bs"] >= 1
            and (d.get("i") is None or (isinstance(d["i"], int) and not isinstance(d["i"], bool)))
            and all(d.get(f) is None or (_number(d[f]) and d[f] >= 0) for f in ("ctx", "tok"))
            and all(isinstance(d.get(f, False), bool) for f in ("clean", "tbl")))


def read_trace(path: Path) -> List[Dict[str, Any]]:
    """The decode results of a trace file (plain or gzip), in order. Lines that are not a trace
    line (not JSON, a field missing or of the wrong type, a number that is not finite) are skipped
    and counted on stderr, as are restarts of the forward iteration (a second server run appended
    to the same file: its samples are pooled with the first's).

    Raises:
        BenchError: the file cannot be read (missing, a directory, a damaged gzip), or holds no
            trace line.
    """
    from bench.decode_log import read_log

    try:
        text = read_log(path)
    except (OSError, EOFError, ValueError, zlib.error) as exc:
        raise BenchError(str(exc) if str(path) in str(exc) else f"{path}: {exc}") from None
    steps, bad, restarts, last = [], 0, 0, None
    for line in text.splitlines():
        try:
            d = json.loads(line.lstrip("\ufeff"))
        except ValueError:
            bad += 1
            continue
        if not _trace_line(d):
            bad += 1
            continue
        i = d.get("i")
        if isinstance(i, int) and isinstance(last, int) and i <= last:
            restarts += 1
        last = i if isinstance(i, int) else last
        steps.append(d)
    if not steps:
        raise BenchError(f"{path}: no decode results (a SPECCONSOLE_AUTO_TRACE file has one JSON line per result)")
    if bad:
        print(f"note: {path}: {bad} line(s) that are not trace lines skipped", file=sys.stderr)
    if restarts:
        print(f"note: {path}: the forward iteration went back {restarts} time(s) (server runs appended to one "
              f"file, or a damaged record): their samples are pooled", file=sys.stderr)
    return steps


def _stats(values: List[float], tokens: List[float], sizes: List[int]) -> Dict[str, Any]:
    out: Dict[str, Any] = {"n": len(values)}
    if values:
        out["mean_ms"] = round(1000 * statistics.fmean(values), 3)
        out["median_ms"] = round(1000 * statistics.median(values), 3)
    if sizes:  # a bucket spans several sizes: two modes measured at different ones are not compared alike
        out["mean_bs"] = round(statistics.fmean(sizes), 2)
    if tokens:
        out["tok_per_req"] = round(statistics.fmean(tokens), 3)
    return out


def samples(steps: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The samples the server's ``StepTimer`` kept, each with its bucket, mode, step time (s), place
    in its run of one kind (2 = the first that can be kept), context per request, tokens per
    request and whether its period held a table rebuild."""
    timer = auto.StepTimer()
    out, run, prev_kind, prev_iter = [], 0, None, None
    info: Dict[int, Dict[str, Any]] = {}
    for d in steps:
        i = d.get("i")
        contiguous = isinstance(i, int) and isinstance(prev_iter, int) and i == prev_iter + 1
        run = run + 1 if contiguous and d["k"] == prev_kind else 1
        prev_kind, prev_iter = d["k"], i
        if isinstance(i, int):
            ctx = d.get("ctx")
            info[i] = {"run": run, "ctx": ctx / d["bs"] if isinstance(ctx, (int, float)) else None,
                       "tbl": bool(d.get("tbl"))}
        got = timer.observe(i if isinstance(i, int) else None, d["k"], float(d["t"]), d["bs"], d.get("tok"),
                            clean=d.get("clean", True))
        # the server's estimator drops a period that is not positive (StepCosts.add): so does this
        if got is not None and got.step_time_s > 0 and isinstance(i, int) and (i - 1) in info:
            meta = info.pop(i - 1)  # the sample is batch i - 1's, confirmed by batch i
            out.append({"bucket": auto.bucket_of(got.batch_size), "bs": got.batch_size, "on": got.on, "s": got.step_time_s,
                        "run": meta["run"], "ctx": meta["ctx"], "tbl": meta["tbl"],
                        "tok_per_req": got.tokens / got.batch_size if got.tokens is not None else None})
        for old in [k for k in info if isinstance(i, int) and k < i - 2]:
            del info[old]
    return out


def all_periods(steps: List[Dict[str, Any]], gap: int = 1) -> Dict[tuple, List[tuple]]:
    """(bucket, kind) -> every (period s, batch size) between two decode results of that kind whose
    forward iterations are ``gap`` apart: 1, contiguous decode steps; 2, one other batch (a prefill)
    ran between them."""
    out: Dict[tuple, List[tuple]] = {}
    for a, b in zip(steps, steps[1:]):
        if (isinstance(a.get("i"), int) and b.get("i") == a["i"] + gap and a["k"] == b["k"]
                and b["t"] > a["t"]):
            out.setdefault((auto.bucket_of(b["bs"]), b["k"]), []).append((b["t"] - a["t"], b["bs"]))
    return out


def _run_group(run: int) -> str:
    return "2-4" if run <= 4 else "5-16" if run <= 16 else "17+"


def summarize(steps: List[Dict[str, Any]], min_samples: int = 8) -> Dict[str, Any]:
    """Per bucket (its batch-size range) and mode with at least ``min_samples`` samples: the groups
    of the module docstring."""
    kept = samples(steps)
    periods = all_periods(steps)
    with_prefill = all_periods(steps, gap=2)
    buckets: List[Dict[str, Any]] = []
    for (index, on) in sorted({(s["bucket"], s["on"]) for s in kept}):
        group = [s for s in kept if s["bucket"] == index and s["on"] == on]
        if len(group) < min_samples:
            continue
        lo, hi = auto.bucket_range(index)

        def stats(sub: List[Dict[str, Any]]) -> Dict[str, Any]:
            return _stats([s["s"] for s in sub], [s["tok_per_req"] for s in sub if on and s["tok_per_req"] is not None],
                          [s["bs"] for s in sub])

        label = f"{lo}+" if hi is None else str(lo) if hi == lo else f"{lo}-{hi}"
        mode = "on" if on else "off"
        every = periods.get((index, mode), [])
        entry: Dict[str, Any] = {"batch": label, "mode": mode, "samples": stats(group),
                                 "all_steps": _stats([t for t, _ in every], [], [b for _, b in every])}
        entry["by_run_position"] = {name: stats([s for s in group if _run_group(s["run"]) == name])
                                    for name in ("2-4", "5-16", "17+")}
        with_ctx = sorted((s for s in group if s["ctx"] is not None), key=lambda s: s["ctx"])
        if len(with_ctx) >= 3:
            third = len(with_ctx) // 3
            parts = (with_ctx[:third], with_ctx[third:2 * third], with_ctx[2 * third:])
            entry["by_context"] = {name: {"tokens_per_request": [round(p[0]["ctx"]), round(p[-1]["ctx"])], **stats(p)}
                                   for name, p in zip(("short", "middle", "long"), parts)}
        entry["table"] = {"rebuilt": stats([s for s in group if s["tbl"]]),
                          "not": stats([s for s in group if not s["tbl"]])}
        held = with_prefill.get((index, mode), [])
        entry["one_prefill_between"] = _stats([t for t, _ in held], [], [b for _, b in held])
        if held and every:
            extra = statistics.median(t for t, _ in held) - statistics.median(t for t, _ in every)
            entry["one_prefill_between"]["extra_ms"] = round(1000 * extra, 3)
        buckets.append(entry)
    return {"decode_results": len(steps), "samples": len(kept), "buckets": buckets}


def format_table(out: Dict[str, Any]) -> str:
    """:func:`summarize`'s result as one markdown table, a row per bucket and mode: samples, mean step
    time (ms) and batch size, ON's tokens per request, the mean step time by run position and by
    context tertile (``-`` where a group is empty or the record has no context), every step's, and
    the periods holding one prefill: their count and median cost over a decode step's (ms)."""
    def ms(group: Optional[Dict[str, Any]]) -> str:
        return f"{group['mean_ms']:.2f}" if group and group.get("n") else "-"

    lines = [f"{out['decode_results']} decode results, {out['samples']} samples",
             "| batch | mode | samples | mean ms | mean bs | tok / req | run 2-4 / 5-16 / 17+ | context short / "
             "middle / long (tokens a request) | all steps | one prefill between: periods, extra ms |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for b in out["buckets"]:
        s = b["samples"]
        run = " / ".join(ms(b["by_run_position"].get(k)) for k in ("2-4", "5-16", "17+"))
        ctx = b.get("by_context")
        context = (" / ".join(f"{ms(ctx[k])} ({ctx[k]['tokens_per_request'][0]}-{ctx[k]['tokens_per_request'][1]})"
                              for k in ("short", "middle", "long")) if ctx else "-")
        tok = f"{s['tok_per_req']:.2f}" if s.get("tok_per_req") is not None else "-"
        pre = b["one_prefill_between"]
        prefill = f"{pre['n']}, {pre['extra_ms']:.2f}" if "extra_ms" in pre else f"{pre['n']}, -"
        lines.append(f"| {b['batch']} | {b['mode']} | {s['n']} | {ms(s)} | {s['mean_bs']:.2f} | {tok} | {run} | "
                     f"{context} | {ms(b['all_steps'])} | {prefill} |")
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.auto_trace", description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", type=Path, help="a SPECCONSOLE_AUTO_TRACE file (plain or .gz)")
    ap.add_argument("--min-samples", type=int, default=8, help="buckets and modes with fewer samples are left out")
    ap.add_argument("--table", action="store_true", help="one markdown table of the means instead of the JSON")
    a = ap.parse_args(argv)
    if a.min_samples < 1:
        ap.error(f"--min-samples must be >= 1, got {a.min_samples}")
    try:
        out = summarize(read_trace(a.trace), a.min_samples)
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if not out["buckets"]:
        print(f"note: {a.trace}: no bucket and mode with {a.min_samples} or more samples ({out['samples']} samples "
              f"in all: a sample needs three contiguous decode results of one kind, forward iterations as integers)",
              file=sys.stderr)
    print(format_table(out) if a.table else json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
