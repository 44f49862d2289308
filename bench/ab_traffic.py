"""GPU: two server configurations side by side on one GPU, their real-traffic rows alternated.

Why: the OFF mode's servers are CPU-bound and a single 16 s row of one varies by several percent,
and a CPU-bound server's speed moves with the host's CPU from one machine to the next
(``bench/results/h200-2026-12-04c/README.md``: v1 and triton forced off beat no speculation at
128 requests and lost 8-13% at 64 in the same run). One row per server, servers one after the
other, cannot tell a 2% lever from noise. This tool starts both servers once and at once (each
with a KV pool capped at ``--max-total-tokens``, so both fit and neither sizes its pool from what
the other left; an 8B server takes 2.5-3.5 min to start on the H200, a GPU session has 30), then
measures ``bench.throughput traffic``'s rows ``--repeats`` times on each,
alternating the order (A B, B A, A B, ...) so drift and warm-up count against both alike; while
one is measured the other is idle (``--sleep-on-idle`` on both: an idle SGLang scheduler
otherwise spins a core).

    python -m bench.ab_traffic --models /tmp/models/8b/p0.2 --a none --b off --attention-backend fa3 \\
        --repeats 2 --out OUT                              # the OFF mode against no speculation
    python -m bench.ab_traffic --models ... --a off --b off --b-env SPECCONSOLE_OFF_KV_ONLY_LEAN_REPLAY=1 --out OUT

``--c`` adds a third server (A B C, then C B A, ...), e.g. the OFF mode with opt-in levers beside
the OFF mode and no speculation, for one start-up of all three; ``--b-models`` / ``--c-models``
give a side another synthetic pair (a draft of another quality beside the same target: rows are
labelled with each side's p). Every server gets :data:`bench.traffic.GREEDY_SERVER_ENV` (the
traffic is greedy) under its ``--X-env``.

    python -m bench.ab_traffic --models /tmp/models/8b/p0.2 --a none --b off --c off \\
        --c-env SPECCONSOLE_OFF_LEAN_FUTURE_MAP=1 --attention-backend fa3 --out OUT
    python -m bench.ab_traffic --models /tmp/models/8b/p0.5 --a none --b always --c auto \\
        --workloads varied-closed,varied-poisson --rates 4,16,48 --max-total-tokens 131072 --out OUT

With three sides the summary also has C against the better of A and B per row and repeat
(``c_over_best``, ``c_e2e_over_best``): the auto threshold against the better static configuration.

Writes ``OUT/repeatN/{a,b[,c]}/real-traffic.csv`` (and each call's ``traffic-*.json``) and
``OUT/ab-summary.json``: per row, B's output tok/s over A's in every repeat, their geometric
mean, min and max (``b_over_a``, ``geomean``, ``min``, ``max``), C's over A's with a ``c_``
prefix, and on open-loop rows the mean end-to-end latency's ratios (``b_e2e_over_a`` ...). One
JSON line per step on stdout.

``--interleave`` measures row by row instead of side by side: each row on every side (A B C, then
C B A for the next row, ...), then the next row, so the sides' measurements of one row lie within a
minute of each other, not a whole sweep apart (on h100-2026-12-07b one server ran its first rows 5-12%
slower than later: a stretch of its life, which sweeps one after the other put on one side alone).
Each row is its own ``bench.throughput traffic`` call (the warm-up once per side, before its first
row); the rows land in the same files as without it.

``--time-varying`` adds, after the repeats, the uniform benchmark's time-varying load
(``bench.throughput.TIME_VARYING``: 1 -> 64 -> 4 -> 128 -> 2 concurrent requests, the same work on every
side, in A B (C) order) into ``OUT/time-varying.json``: each side's wall time and output tok/s, B's and
C's tok/s over A's and, with three sides, C's over the better of A and B (``c_over_best``). An auto
server meets it with what it learned in the rows before.

``--freeze-gc`` posts SGLang's ``/freeze_gc`` to every server once all are ready, before the
first row (``gc.freeze()`` in each scheduler and detokenizer: what exists then, the model, the CUDA
graphs, SGLang's own objects, is no longer traversed by the garbage collector): with it on one run
and off on another, whether the collector is what slows a scheduler's Python.

``--profile-row`` / ``--cpu-profile-row WORKLOAD:LEVEL`` (``bench.throughput traffic``'s: SGLang's
torch profiler over a pass after the row, py-spy on the scheduler during the row) add one pass per
side (``--profile-sides``, default all) after the repeats, that row alone, into ``OUT/profile/SIDE/`` (its row is not in the
summary: py-spy costs the row it samples); compare the two with ``bench.throughput compare-profiles``
and ``bench.cpu_profile compare``.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from bench.errors import first_line

CONFIGS = ("none", "always", "off", "gate", "auto")
SIDES = ("a", "b", "c")  # A is the reference every other side is divided by


def _log(record: Dict[str, Any]) -> None:
    print(json.dumps(record), flush=True)


def parse_env(items: Sequence[str], flag: str) -> Dict[str, str]:
    """``NAME=VALUE`` items as a dict.

    Raises:
        ValueError: an item without ``=`` or with an empty name (the message names ``flag``).
    """
    env = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ValueError(f"{flag} takes NAME=VALUE, got {item!r}")
        env[name] = value
    return env


def server_args(config: str, models: Path, a: argparse.Namespace) -> List[str]:
    """SGLang's arguments for ``config`` as ``bench.throughput traffic`` starts it (``auto``: EAGLE-3
    with ``--speculative-disable-batch-threshold auto``, as ``bench.auto_run``), plus the KV pool
    cap, ``--sleep-on-idle`` and ``--server-args`` (every server alike)."""
    from bench.traffic import launch_args
    from server_patch.contract import AUTO, THRESHOLD_FLAG

    args = launch_args(config, str(models / "target"), str(models / "draft"), worker=a.worker,
                       attention_backend=a.attention_backend, mem_fraction=a.mem_fraction)
    return args + ([THRESHOLD_FLAG, AUTO] if config == "auto" else []) + [
        "--max-total-tokens", str(a.max_total_tokens), "--sleep-on-idle"] + shlex.split(a.server_args)


def order(repeat: int, sides: Sequence[str] = SIDES[:2]) -> Tuple[str, ...]:
    """The sides in the order repeat ``repeat`` (0-based) measures them: A B (C), then (C) B A, ..."""
    return tuple(sides) if repeat % 2 == 0 else tuple(sides)[::-1]


def traffic_argv(url: str, config: str, p_wrong: str, out: Path, a: argparse.Namespace, warmup: bool,
                 row: Optional[List[str]] = None) -> List[str]:
    """``bench.throughput traffic`` against ``url`` for one side and repeat: every row of the plan,
    or with ``row`` (``--interleave``: :func:`interleaved_rows`) that row alone."""
    argv = ["traffic", "--url", url, "--config", config, "--p-wrong", p_wrong, "--out", str(out),
            "--row-seconds", str(a.row_seconds), "--work-dir", str(out / "work")]
    if row is not None:
        argv += row
    else:
        argv += ["--workloads", a.workloads, "--concurrency", a.concurrency] + (["--rates", a.rates] if a.rates else [])
    return argv + ([] if warmup else ["--no-warmup"])


def interleaved_rows(a: argparse.Namespace) -> List[List[str]]:
    """``--interleave``: the ``bench.throughput traffic`` arguments that select each row of one
    repeat, in the order a whole sweep runs them (per workload, its ``--concurrency`` levels when
    closed, its ``--rates`` when Poisson, ``bench.traffic.POISSON_RATES`` without ``--rates``)."""
    from bench import traffic

    rows = []
    for w in traffic._workloads(a.workloads):
        if w.arrivals == "closed":
            rows += [["--workloads", w.name, "--concurrency", str(c)] for c in traffic._ints(a.concurrency)]
        else:
            rates = traffic._rates(a.rates) if a.rates else traffic.POISSON_RATES
            rows += [["--workloads", w.name, "--rates", traffic.fmt_rate(r)] for r in rates]
    return rows


def profile_argv(url: str, config: str, p_wrong: str, out: Path, a: argparse.Namespace) -> List[str]:
    """``bench.throughput traffic`` for one side's profile pass: the profiled row alone (its
    workload and level), with ``--profile-row`` and / or ``--cpu-profile-row``."""
    spec = a.profile_row or a.cpu_profile_row
    workload, _, level = spec.partition(":")
    argv = ["traffic", "--url", url, "--config", config, "--p-wrong", p_wrong, "--out", str(out),
            "--workloads", workload, "--row-seconds", str(a.row_seconds), "--work-dir", str(out / "work"),
            "--no-warmup"]
    argv += ["--concurrency", level] if workload.endswith("-closed") else ["--rates", level]
    for flag, value in (("--profile-row", a.profile_row), ("--cpu-profile-row", a.cpu_profile_row)):
        if value:
            argv += [flag, value]
    return argv


def read_rows(path: Path) -> List[Dict[str, str]]:
    """The rows of a traffic CSV ([] when it is missing)."""
    if not path.exists():
        return []
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def row_key(row: Dict[str, str]) -> Tuple[str, str, str]:
    """``(workload, concurrency, request_rate)``: the row of the plan a CSV row measured."""
    return row["workload"], row["concurrency"], row["request_rate"]


def ratio_stats(ratios: List[float], prefix: str = "", name: str = "over_a") -> Dict[str, Any]:
    """``{PREFIX + NAME: [...], PREFIX + "geomean", "min", "max"}`` of per-repeat ratios (non-empty);
    B's keys (``prefix`` "") are ``b_over_a``, ``geomean``, ``min``, ``max`` for ``name`` over_a,
    else ``b_`` + NAME and NAME + ``_geomean`` ..."""
    geo = round(math.exp(sum(math.log(x) for x in ratios) / len(ratios)), 4)
    if name == "over_a":
        over = "b_over_a" if not prefix else f"{prefix}over_a"
        return {over: [round(x, 4) for x in ratios], f"{prefix}geomean": geo,
                f"{prefix}min": round(min(ratios), 4), f"{prefix}max": round(max(ratios), 4)}
    head = prefix or "b_"
    return {f"{head}{name}": [round(x, 4) for x in ratios], f"{head}{name}_geomean": geo,
            f"{head}{name}_min": round(min(ratios), 4), f"{head}{name}_max": round(max(ratios), 4)}


def _values(rows: Dict[str, Dict[str, str]], column: str) -> Dict[str, float]:
    """Each side's ``column`` of its row, as a number (0 where empty or absent: no ratio)."""
    return {side: float(row.get(column) or 0) for side, row in rows.items()}


def summarize(out: Path, repeats: int, sides: Sequence[str] = SIDES[:2]) -> List[Dict[str, Any]]:
    """Per planned row, from each repeat that measured the sides compared:

    * each other side's output tok/s over A's (B: ``b_over_a`` / ``geomean`` / ``min`` / ``max``;
      C: the same with a ``c_`` prefix), on closed-loop rows also of the tok/s while every slot
      was busy (``b_steady_over_a``, ``c_steady_over_a``, ... from ``steady_tok_s``: the drain at
      the row's end left out) and, on open-loop rows (a request rate), its mean
      end-to-end latency over A's (``b_e2e_over_a``, ``c_e2e_over_a``, with ``_geomean`` ...);
    * with three sides, C against the better of A and B in that repeat (``c_over_best``: C's tok/s
      over the higher of A's and B's; ``c_e2e_over_best``: C's mean end-to-end latency over the
      lower; ``c_steady_over_best`` of the steady tok/s), the comparison of an auto threshold (C)
      with the static configurations (A, B).

    A row is listed when some side has a ratio for it."""
    ratios: Dict[Tuple[str, str, str], Dict[Tuple[str, str], List[float]]] = {}
    for r in range(repeats):
        rows = {s: {row_key(x): x for x in read_rows(out / f"repeat{r}" / s / "real-traffic.csv")} for s in sides}
        keys = list(dict.fromkeys(k for s in sides for k in rows[s]))  # in the plan's order
        for key in keys:
            got = ratios.setdefault(key, {})
            here = {s: rows[s][key] for s in sides if key in rows[s]}
            # (ratio name, each side's value, the better of A and B): tok/s higher, latency lower
            for name, value, best in (("over", _values(here, "output_tok_s"), max),
                                      ("steady_over", _values(here, "steady_tok_s"), max),
                                      ("e2e_over", _values(here, "mean_e2e_ms") if key[2] else {}, min)):
                for side in sides[1:]:
                    if value.get("a") and value.get(side):
                        got.setdefault((side, f"{name}_a"), []).append(value[side] / value["a"])
                if len(sides) == 3 and all(value.get(s) for s in sides):
                    got.setdefault(("c", f"{name}_best"), []).append(value["c"] / best(value["a"], value["b"]))
    summary = []
    for (workload, conc, rate), per in ratios.items():
        if not per:
            continue
        entry: Dict[str, Any] = {"workload": workload, "concurrency": conc, "request_rate": rate}
        for (side, name), rs in sorted(per.items()):
            entry.update(ratio_stats(rs, "" if side == "b" else f"{side}_", name))
        summary.append(entry)
    return summary


def measure(a: argparse.Namespace, urls: Dict[str, str], labels: Dict[str, str]) -> List[Dict[str, Any]]:
    """Every repeat, each side in :func:`order` (``--interleave``: each row on every side, the order
    turning row by row), then the time-varying load and the profile passes; returns the step
    records. ``labels``: each side's p (its pair's dir name without the ``p``)."""
    from bench import throughput

    sides = tuple(urls)
    steps = []
    for r in range(a.repeats):
        calls = ([(side, None) for side in order(r, sides)] if not a.interleave else
                 [(side, row) for k, row in enumerate(interleaved_rows(a)) for side in order(r + k, sides)])
        warmed = set()
        for side, row in calls:
            out = a.out / f"repeat{r}" / side
            out.mkdir(parents=True, exist_ok=True)
            warmup = r == 0 and side not in warmed
            warmed.add(side)
            t0 = time.time()
            rc = throughput.main_in_process(traffic_argv(urls[side], a.configs[side], labels[side], out, a, warmup, row))
            step = {"step": "traffic", "repeat": r, "side": side, "config": a.configs[side], "rc": rc,
                    "seconds": round(time.time() - t0, 1), **({"row": " ".join(row[1::2])} if row else {})}
            _log(step)
            steps.append(step)
    if a.time_varying:
        steps.append(time_varying_pass(a, urls))
    if a.profile_row or a.cpu_profile_row:
        for side in a.profile_sides:
            out = a.out / "profile" / side
            out.mkdir(parents=True, exist_ok=True)
            t0 = time.time()
            rc = throughput.main_in_process(profile_argv(urls[side], a.configs[side], labels[side], out, a))
            step = {"step": "profile", "side": side, "config": a.configs[side], "rc": rc,
                    "seconds": round(time.time() - t0, 1)}
            _log(step)
            steps.append(step)
    return steps


def time_varying_summary(loads: Dict[str, Dict[str, Any]]) -> Dict[str, Any]:
    """Per side (``{side: bench.throughput.time_varying's record}``) its output tok/s
    (``total_output_tokens / wall_s``), each other side's over A's (``b_over_a`` ...) and, with three
    sides, C's over the better of A and B (``c_over_best``). A side without a measured load
    (``wall_s`` 0 or absent) gets no ratio."""
    tok_s = {s: (t["total_output_tokens"] / t["wall_s"]) if t.get("wall_s") else 0.0 for s, t in loads.items()}
    out: Dict[str, Any] = {"sides": {s: {**t, "output_tok_s": round(tok_s[s], 1)} for s, t in loads.items()}}
    for side in list(loads)[1:]:
        if tok_s.get("a") and tok_s[side]:
            out[f"{side}_over_a"] = round(tok_s[side] / tok_s["a"], 4)
    if len(loads) == 3 and all(tok_s.values()):
        out["c_over_best"] = round(tok_s["c"] / max(tok_s["a"], tok_s["b"]), 4)
    return out


def time_varying_pass(a: argparse.Namespace, urls: Dict[str, str]) -> Dict[str, Any]:
    """The time-varying load on every side in A B (C) order into ``OUT/time-varying.json``
    (:func:`time_varying_summary`); the step record. A side whose load fails is recorded with its
    error and the others still run."""
    from bench import throughput
    from bench.traffic import split_url

    loads: Dict[str, Dict[str, Any]] = {}
    errors = {}
    t0 = time.time()
    for side, url in urls.items():
        work = a.out / "time-varying" / side
        work.mkdir(parents=True, exist_ok=True)
        try:
            loads[side] = throughput.time_varying(a.configs[side], split_url(url)[1], work)
        except Exception as exc:  # noqa: BLE001 - recorded, the next side runs
            errors[side] = first_line(exc)
            loads[side] = {"config": a.configs[side], "error": errors[side]}
        _log({"step": "time_varying", "side": side, **{k: v for k, v in loads[side].items() if k != "stages"}})
    summary = time_varying_summary(loads)
    (a.out / "time-varying.json").write_text(json.dumps(summary, indent=1))
    return {"step": "time_varying", "rc": 1 if errors else 0, "seconds": round(time.time() - t0, 1),
            **{k: v for k, v in summary.items() if k != "sides"}}


def freeze_gc(url: str) -> int:
    """POST SGLang's ``/freeze_gc`` (``http_server.py``: ``gc.freeze()`` in the scheduler and the
    detokenizer) to the server at ``url``; its HTTP status.

    Raises:
        httpx.HTTPError: the server did not answer.
    """
    import httpx

    return httpx.post(f"{url}/freeze_gc", timeout=30).status_code


def _holds_a_run(path: Path) -> bool:
    """``path`` is a run's directory: it has ``ab-summary.json`` or, cut short before writing one,
    ``repeatN/SIDE/`` folders (a side's folder inside, so a stray ``repeat0`` elsewhere is no run)."""
    return (path / "ab-summary.json").exists() or any(
        q.is_dir() and any((q / side).is_dir() for side in SIDES) for q in path.glob("repeat[0-9]*"))


def cpu_groups(cpus: Sequence[int], servers: int) -> Tuple[List[List[int]], List[int]]:
    """``cpus`` (the CPU numbers this process may use) cut into ``servers`` + 1 contiguous groups of
    sizes differing by at most one, the larger first: one per server, then the last for the harness
    and its traffic clients.

    Raises:
        ValueError: fewer CPUs than ``servers`` + 1.
    """
    ordered = sorted(set(cpus))
    parts = servers + 1
    if len(ordered) < parts:
        raise ValueError(f"{len(ordered)} CPUs cannot give {servers} servers and the harness one each")
    size, extra = divmod(len(ordered), parts)
    groups, start = [], 0
    for i in range(parts):
        end = start + size + (1 if i < extra else 0)
        groups.append(ordered[start:end])
        start = end
    return groups[:-1], groups[-1]


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m bench.ab_traffic", description=__doc__.split("\n\n")[0],
                                 allow_abbrev=False)
    ap.add_argument("--models", type=Path, required=True, help="a synthetic pair dir (.../p0.2): its name gives the rows' p_wrong column (0.2)")
    ap.add_argument("--a", choices=CONFIGS, required=True, help="side A's configuration (bench.throughput traffic --config)")
    ap.add_argument("--b", choices=CONFIGS, required=True, help="side B's configuration")
    ap.add_argument("--c", choices=CONFIGS, help="a third server, side C (default: none started)")
    for side in SIDES:
        ap.add_argument(f"--{side}-env", action="append", default=[], metavar="NAME=VALUE",
                        help=f"an environment variable of {side.upper()}'s server")
    for side in SIDES[1:]:
        ap.add_argument(f"--{side}-models", type=Path, metavar="DIR",
                        help=f"{side.upper()}'s synthetic pair (default: --models), e.g. another draft of the same target")
    ap.add_argument("--worker", choices=("v2", "v1"), default="v2", help="v1: every server --disable-overlap-schedule")
    ap.add_argument("--attention-backend", default="", metavar="NAME", help="every server's (default: the harness's triton)")
    ap.add_argument("--repeats", type=int, default=2, help="rows measured this many times on each side (default 2)")
    ap.add_argument("--workloads", default="varied-closed",
                    help="bench.throughput traffic's <lengths>-<arrivals> workloads, in order (default varied-closed)")
    ap.add_argument("--concurrency", default="32,64,128",
                    help="closed-loop rows: max concurrent requests each (default 32,64,128)")
    ap.add_argument("--rates", default="", metavar="R,R,...",
                    help="Poisson arrival rates of the open-loop workloads (bench.throughput traffic --rates)")
    ap.add_argument("--row-seconds", type=float, default=16.0,
                    help="each row's request count sized to about this many seconds (default 16)")
    ap.add_argument("--max-total-tokens", type=int, default=262_144,
                    help="each server's KV pool (tokens; 131072 lets three 8B servers fit an H200)")
    ap.add_argument("--mem-fraction", type=float, default=0.85,
                    help="each server's --mem-fraction-static (default 0.85; --max-total-tokens caps its KV pool)")
    ap.add_argument("--port", type=int, default=30720, help="A's port; B's is PORT + 10, C's PORT + 20")
    ap.add_argument("--profile-row", metavar="WORKLOAD:LEVEL",
                    help="after the repeats, one pass of that row per side with SGLang's profiler (bench.throughput "
                         "traffic --profile-row) into OUT/profile/SIDE/")
    ap.add_argument("--cpu-profile-row", metavar="WORKLOAD:LEVEL",
                    help="the same pass with py-spy on each server's scheduler during the row (--cpu-profile-row)")
    ap.add_argument("--profile-sides", default="", metavar="a,b",
                    help="the sides the profile pass runs on (default: all)")
    ap.add_argument("--server-args", default="", metavar="'ARGS'",
                    help="more SGLang arguments for every server, one string split as a shell would "
                         "(e.g. '--chunked-prefill-size 4096')")
    ap.add_argument("--interleave", action="store_true",
                    help="row by row: each row on every side, then the next (default: each side's whole sweep in turn)")
    ap.add_argument("--time-varying", action="store_true",
                    help="after the repeats, the time-varying load on every side (OUT/time-varying.json)")
    ap.add_argument("--freeze-gc", action="store_true",
                    help="POST /freeze_gc to every server once all are ready, before the first row")
    ap.add_argument("--pin-cpus", action="store_true",
                    help="give each server its own CPUs and this tool (with its traffic clients) the rest: the CPUs "
                         "it may use cut into one contiguous group per server plus one (Linux), so that servers "
                         "compared do not share cores")
    ap.add_argument("--out", type=str, required=True, help="a new or empty directory for this run (not inside another run)")
    return ap


def main(argv: Optional[List[str]] = None) -> int:
    ap = _parser()
    a = ap.parse_args(argv)
    sides = SIDES if a.c else SIDES[:2]
    try:
        envs = {s: parse_env(getattr(a, f"{s}_env"), f"--{s}-env") for s in sides}
    except ValueError as exc:
        ap.error(str(exc))
    if a.c_env and not a.c or a.c_models and not a.c:
        ap.error("--c-env / --c-models need --c")
    try:
        shlex.split(a.server_args)
    except ValueError as exc:
        ap.error(f"--server-args: {exc}")
    for flag, value in (("--repeats", a.repeats), ("--max-total-tokens", a.max_total_tokens)):
        if value < 1:
            ap.error(f"{flag} must be >= 1, got {value}")
    if not (math.isfinite(a.row_seconds) and a.row_seconds > 0):
        ap.error(f"--row-seconds must be a finite number > 0, got {a.row_seconds}")
    if not 0 < a.mem_fraction <= 1:
        ap.error(f"--mem-fraction is a fraction of GPU memory (0-1], got {a.mem_fraction}")
    if not a.out.strip():
        ap.error("--out is empty: give a directory for this run (an empty one would write into the current directory)")
    a.out = Path(a.out)
    inside = next((p for p in a.out.resolve().parents if _holds_a_run(p)), None)
    if inside is not None:
        ap.error(f"--out {a.out} is inside the run {inside}: give a directory of its own "
                 f"(this run's summary and server logs would land among that run's files)")
    if a.out.exists() and not a.out.is_dir():
        ap.error(f"--out {a.out}: a file, not a directory")
    if a.out.is_dir() and _holds_a_run(a.out):
        ap.error(f"--out {a.out} holds a run already (ab-summary.json or repeat*/): give another --out "
                 f"(a new run there would mix its rows with that run's and replace its summary)")
    if a.out.is_dir() and any(a.out.iterdir()):
        ap.error(f"--out {a.out} is a directory with other files in it: give a new or empty directory "
                 f"(this run writes ab-summary.json, repeat*/ and server-logs/ there)")
    if not 1 <= a.port <= 65535 - 10 * (len(sides) - 1):
        ap.error(f"--port must be in 1..{65535 - 10 * (len(sides) - 1)} (the last side's is PORT + {10 * (len(sides) - 1)})")
    a.profile_sides = tuple(x for x in a.profile_sides.split(",") if x) or sides
    if set(a.profile_sides) - set(sides):
        ap.error(f"--profile-sides takes sides of this run ({','.join(sides)}), got {','.join(a.profile_sides)}")
    from bench import traffic

    lists = [("--concurrency", a.concurrency, traffic._ints), ("--workloads", a.workloads, traffic._workloads)]
    if a.rates:
        lists.append(("--rates", a.rates, traffic._rates))
    parsed = {}
    for flag, text, parse in lists:  # as bench.throughput traffic will read them
        try:
            parsed[flag] = parse(text)
        except argparse.ArgumentTypeError as exc:
            ap.error(f"argument {flag}: {exc}")
    if a.rates and not any(w.arrivals != "closed" for w in parsed["--workloads"]):
        ap.error(f"--rates {a.rates} goes with an open-loop workload (e.g. varied-poisson); --workloads "
                 f"{a.workloads} has none, so no row would use them")
    try:
        rows = {flag: traffic.parse_profile_row(v, flag) for flag, v in
                (("--profile-row", a.profile_row), ("--cpu-profile-row", a.cpu_profile_row)) if v}
    except (argparse.ArgumentTypeError, ValueError) as exc:
        ap.error(str(exc))
    if len({(w.name, level) for w, level in rows.values()}) > 1:
        ap.error("--profile-row and --cpu-profile-row name one row (the pass measures one)")
    a.configs = {s: getattr(a, s) for s in sides}
    models = {s: getattr(a, f"{s}_models", None) or a.models for s in sides}
    servers_asked = [(a.configs[s], sorted(envs[s].items()), str(models[s])) for s in sides]
    for i, side in enumerate(sides):
        if servers_asked[i] in servers_asked[:i]:
            other = sides[servers_asked.index(servers_asked[i])]
            ap.error(f"{other.upper()} and {side.upper()} are the same server: give another --{side}, "
                     f"--{side}-env or --{side}-models")
    pins: Dict[str, List[int]] = {}
    if a.pin_cpus:
        if not hasattr(os, "sched_getaffinity"):
            ap.error("--pin-cpus needs Linux CPU affinity (os.sched_getaffinity)")
        try:
            groups, harness_cpus = cpu_groups(sorted(os.sched_getaffinity(0)), len(sides))
        except ValueError as exc:
            ap.error(f"--pin-cpus: {exc}")
        pins = {**dict(zip(sides, groups)), "harness": harness_cpus}
    for side in sides:
        if not (models[side] / "target").is_dir():
            print(f"no synthetic pair at {models[side]}", file=sys.stderr)
            return 2
    if pins:
        os.sched_setaffinity(0, pins["harness"])  # the traffic clients started from here inherit it
    labels = {s: models[s].name.removeprefix("p") for s in sides}
    try:
        a.out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        ap.error(f"--out {a.out}: {exc.strerror or exc}")
    from bench import server_harness

    record: Dict[str, Any] = {"argv": sys.argv[1:] if argv is None else argv, "started": time.strftime("%F %T"),
                              "servers": {}, "steps": [], **({"cpus": pins} if pins else {})}
    servers = {}
    try:
        for i, side in enumerate(sides):  # all at once: the pools are capped, none sizes from another
            args = server_args(a.configs[side], models[side], a)
            env = traffic.greedy_server_env(envs[side])
            servers[side] = server_harness.start_server(f"ab-{side}-{a.configs[side]}-p{labels[side]}", args,
                                                        a.port + 10 * i, a.out / "server-logs", env=env,
                                                        cpus=pins.get(side))
            record["servers"][side] = {"config": a.configs[side], "models": str(models[side]), "env": env, "args": args}
        for side in sides:
            server_harness.wait_ready(servers[side], timeout_s=900)
            record["servers"][side]["startup_s"] = round(servers[side].ready_s, 1)
            _log({"step": "ready", "side": side, **record["servers"][side]})
        if a.freeze_gc:
            for side in sides:
                record["servers"][side]["freeze_gc"] = freeze_gc(servers[side].url)
                _log({"step": "freeze_gc", "side": side, "status": record["servers"][side]["freeze_gc"]})
        record["steps"] = measure(a, {s: servers[s].url for s in sides}, labels)
    except Exception as exc:  # noqa: BLE001 - recorded with what was measured
        record["error"] = f"{type(exc).__name__}: {exc}"
        _log({"step": "error", "error": record["error"]})
        print(f"bench.ab_traffic: {first_line(exc)} (details: {a.out / 'ab-summary.json'}, "
              f"{a.out / 'server-logs'})", file=sys.stderr, flush=True)
    finally:
        for side, server in servers.items():
            record["servers"].setdefault(side, {"config": a.configs[side]})["exit_code"] = server_harness.stop_server(server)
        record["summary"] = summarize(a.out, a.repeats, sides)
        (a.out / "ab-summary.json").write_text(json.dumps(record, indent=1))
    for row in record["summary"]:
        _log({"step": "over_a", **row})
    return 1 if "error" in record or any(step["rc"] for step in record["steps"]) else 0


if __name__ == "__main__":
    sys.exit(main())
