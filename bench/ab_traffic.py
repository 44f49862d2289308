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

Writes ``OUT/repeatN/{a,b}/real-traffic.csv`` (and each call's ``traffic-*.json``) and
``OUT/ab-summary.json``: per row, B's output tok/s over A's in every repeat, their geometric
mean, min and max. One JSON line per step on stdout.

``--profile-row`` / ``--cpu-profile-row WORKLOAD:LEVEL`` (``bench.throughput traffic``'s: SGLang's
torch profiler over a pass after the row, py-spy on the scheduler during the row) add one pass per
side after the repeats, that row alone, into ``OUT/profile/{a,b}/`` (its row is not in the
summary: py-spy costs the row it samples); compare the two with ``bench.throughput compare-profiles``
and ``bench.cpu_profile compare``.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

CONFIGS = ("none", "always", "off", "gate")
SIDES = ("a", "b")


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
    """SGLang's arguments for ``config`` as ``bench.throughput traffic`` starts it, plus the KV pool
    cap and ``--sleep-on-idle`` (both servers alike)."""
    from bench.traffic import launch_args

    return launch_args(config, str(models / "target"), str(models / "draft"), worker=a.worker,
                       attention_backend=a.attention_backend, mem_fraction=a.mem_fraction) + [
        "--max-total-tokens", str(a.max_total_tokens), "--sleep-on-idle"]


def order(repeat: int) -> Tuple[str, str]:
    """The sides in the order repeat ``repeat`` (0-based) measures them: A B, then B A, ..."""
    return SIDES if repeat % 2 == 0 else SIDES[::-1]


def traffic_argv(url: str, config: str, p_wrong: str, out: Path, a: argparse.Namespace, warmup: bool) -> List[str]:
    """``bench.throughput traffic`` against ``url`` for one side and repeat."""
    argv = ["traffic", "--url", url, "--config", config, "--p-wrong", p_wrong, "--out", str(out),
            "--workloads", a.workloads, "--concurrency", a.concurrency, "--row-seconds", str(a.row_seconds),
            "--work-dir", str(out / "work")]
    return argv + ([] if warmup else ["--no-warmup"])


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


def summarize(out: Path, repeats: int) -> List[Dict[str, Any]]:
    """Per planned row: B's output tok/s over A's in each repeat that measured both, their
    geometric mean, min and max (None where no repeat has both)."""
    ratios: Dict[Tuple[str, str, str], List[float]] = {}
    for r in range(repeats):
        sides = {s: {row_key(x): float(x["output_tok_s"]) for x in read_rows(out / f"repeat{r}" / s / "real-traffic.csv")}
                 for s in SIDES}
        for key, b in sides["b"].items():
            a = sides["a"].get(key)
            if a:
                ratios.setdefault(key, []).append(b / a)
    summary = []
    for (workload, conc, rate), rs in ratios.items():
        summary.append({"workload": workload, "concurrency": conc, "request_rate": rate,
                        "b_over_a": [round(x, 4) for x in rs],
                        "geomean": round(math.exp(sum(math.log(x) for x in rs) / len(rs)), 4),
                        "min": round(min(rs), 4), "max": round(max(rs), 4)})
    return summary


def measure(a: argparse.Namespace, urls: Dict[str, str], p_wrong: str) -> List[Dict[str, Any]]:
    """Every repeat, each side in :func:`order`; returns the step records."""
    from bench import throughput

    steps = []
    for r in range(a.repeats):
        for side in order(r):
            out = a.out / f"repeat{r}" / side
            out.mkdir(parents=True, exist_ok=True)
            t0 = time.time()
            rc = throughput.main_in_process(traffic_argv(urls[side], a.configs[side], p_wrong, out, a, warmup=r == 0))
            step = {"step": "traffic", "repeat": r, "side": side, "config": a.configs[side], "rc": rc,
                    "seconds": round(time.time() - t0, 1)}
            _log(step)
            steps.append(step)
    if a.profile_row or a.cpu_profile_row:
        for side in SIDES:
            out = a.out / "profile" / side
            out.mkdir(parents=True, exist_ok=True)
            t0 = time.time()
            rc = throughput.main_in_process(profile_argv(urls[side], a.configs[side], p_wrong, out, a))
            step = {"step": "profile", "side": side, "config": a.configs[side], "rc": rc,
                    "seconds": round(time.time() - t0, 1)}
            _log(step)
            steps.append(step)
    return steps


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.ab_traffic", description=__doc__.split("\n\n")[0],
                                 allow_abbrev=False)
    ap.add_argument("--models", type=Path, required=True, help="a synthetic pair dir (.../p0.2): rows labelled with its p")
    ap.add_argument("--a", choices=CONFIGS, required=True, help="side A's configuration (bench.throughput traffic --config)")
    ap.add_argument("--b", choices=CONFIGS, required=True, help="side B's configuration")
    ap.add_argument("--a-env", action="append", default=[], metavar="NAME=VALUE", help="an environment variable of A's server")
    ap.add_argument("--b-env", action="append", default=[], metavar="NAME=VALUE", help="an environment variable of B's server")
    ap.add_argument("--worker", choices=("v2", "v1"), default="v2", help="v1: both servers --disable-overlap-schedule")
    ap.add_argument("--attention-backend", default="", metavar="NAME", help="both servers' (default: the harness's triton)")
    ap.add_argument("--repeats", type=int, default=2, help="rows measured this many times on each side (default 2)")
    ap.add_argument("--workloads", default="varied-closed")
    ap.add_argument("--concurrency", default="32,64,128")
    ap.add_argument("--row-seconds", type=float, default=16.0)
    ap.add_argument("--max-total-tokens", type=int, default=262_144, help="each server's KV pool (tokens)")
    ap.add_argument("--mem-fraction", type=float, default=0.85)
    ap.add_argument("--port", type=int, default=30720, help="A's port; B's is PORT + 10")
    ap.add_argument("--profile-row", metavar="WORKLOAD:LEVEL",
                    help="after the repeats, one pass of that row per side with SGLang's profiler (bench.throughput "
                         "traffic --profile-row) into OUT/profile/{a,b}/")
    ap.add_argument("--cpu-profile-row", metavar="WORKLOAD:LEVEL",
                    help="the same pass with py-spy on each server's scheduler during the row (--cpu-profile-row)")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    try:
        envs = {"a": parse_env(a.a_env, "--a-env"), "b": parse_env(a.b_env, "--b-env")}
    except ValueError as exc:
        ap.error(str(exc))
    if a.repeats < 1 or a.row_seconds <= 0 or a.max_total_tokens < 1 or not 0 < a.mem_fraction < 1:
        ap.error("--repeats and --max-total-tokens must be >= 1, --row-seconds > 0, --mem-fraction in (0, 1)")
    if not 1 <= a.port <= 65535 - 10:
        ap.error(f"--port must be in 1..{65535 - 10} (B's is PORT + 10)")
    from bench import traffic

    try:  # as bench.throughput traffic will read them
        traffic._ints(a.concurrency)
        traffic._workloads(a.workloads)
        rows = {flag: traffic.parse_profile_row(v, flag) for flag, v in
                (("--profile-row", a.profile_row), ("--cpu-profile-row", a.cpu_profile_row)) if v}
    except (argparse.ArgumentTypeError, ValueError) as exc:
        ap.error(str(exc))
    if len({(w.name, level) for w, level in rows.values()}) > 1:
        ap.error("--profile-row and --cpu-profile-row name one row (the pass measures one)")
    if a.a == a.b and envs["a"] == envs["b"]:
        ap.error("A and B are the same server: give another --b or a --b-env")
    if not (a.models / "target").is_dir():
        print(f"no synthetic pair at {a.models}", file=sys.stderr)
        return 2
    a.configs = {"a": a.a, "b": a.b}
    p_wrong = a.models.name.removeprefix("p")
    try:
        a.out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        ap.error(f"--out {a.out}: {exc.strerror or exc}")
    from bench import server_harness

    record: Dict[str, Any] = {"argv": sys.argv[1:] if argv is None else argv, "started": time.strftime("%F %T"),
                              "servers": {}, "steps": []}
    servers = {}
    try:
        for i, side in enumerate(SIDES):  # both at once: the pools are capped, neither sizes from the other
            args = server_args(a.configs[side], a.models, a)
            servers[side] = server_harness.start_server(f"ab-{side}-{a.configs[side]}-p{p_wrong}", args,
                                                        a.port + 10 * i, a.out / "server-logs", env=envs[side])
            record["servers"][side] = {"config": a.configs[side], "env": envs[side], "args": args}
        for side in SIDES:
            server_harness.wait_ready(servers[side], timeout_s=900)
            record["servers"][side]["startup_s"] = round(servers[side].ready_s, 1)
            _log({"step": "ready", "side": side, **record["servers"][side]})
        record["steps"] = measure(a, {s: servers[s].url for s in SIDES}, p_wrong)
    except Exception as exc:  # noqa: BLE001 - recorded with what was measured
        record["error"] = f"{type(exc).__name__}: {exc}"
        _log({"step": "error", "error": record["error"]})
        first = (str(exc).strip().splitlines() or [""])[0]
        print(f"bench.ab_traffic: {type(exc).__name__}: {first} (details: {a.out / 'ab-summary.json'}, "
              f"{a.out / 'server-logs'})", file=sys.stderr, flush=True)
    finally:
        for side, server in servers.items():
            record["servers"].setdefault(side, {"config": a.configs[side]})["exit_code"] = server_harness.stop_server(server)
        record["summary"] = summarize(a.out, a.repeats)
        (a.out / "ab-summary.json").write_text(json.dumps(record, indent=1))
    for row in record["summary"]:
        _log({"step": "b_over_a", **row})
    return 1 if "error" in record or any(step["rc"] for step in record["steps"]) else 0


if __name__ == "__main__":
    sys.exit(main())
