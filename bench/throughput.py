"""GPU benchmark: no speculation vs EAGLE-3 always on vs EAGLE-3 with the dynamic gate.

One server per configuration, driven by SGLang's own ``sglang.bench_serving``
(``--dataset-name random-ids``, input 256, output 256). Each ``run`` call handles one
configuration so that each fits a device call; rows are appended to a CSV.

Configurations:
- ``none``:   target only, no speculation
- ``always``: EAGLE-3 (steps 3, topk 1, 4 draft tokens), no gate option
- ``gate``:   the same EAGLE-3 server with ``--speculative-disable-batch-threshold N``; on this server
  the run also (a) measures the OFF-step cost (threshold 1 at 64 and 128 concurrent requests) and
  (b) with ``--recommend``, sweeps N at run time through ``/set_internal_state`` (no restart).

Every configuration also runs the time-varying load (concurrency 1 -> 64 -> 4 -> 128 -> 2, the
same request counts for all), recording total output tokens and wall time.

Usage on the GPU machine (models from ``python -m bench.synthetic_models --preset 8b``):
    python -m bench.throughput run --config none   --models /tmp/models/8b/p0.2 --out $OUT
    python -m bench.throughput run --config always --models /tmp/models/8b/p0.2 --out $OUT
    python -m bench.throughput run --config gate --threshold 48 --recommend --models /tmp/models/8b/p0.2 --out $OUT
Here, from the committed CSVs: python -m bench.throughput summarize bench/results/x2-2026-11-30c/*.csv

Real traffic (variable lengths, Poisson arrivals; against a running server or one started like
``run``; rows in OUT/real-traffic.csv) is ``traffic`` / ``summarize-traffic``, in bench/traffic.py.

Bad input (a missing or malformed CSV, a path that is not there) ends with a one-line message on
stderr and a non-zero exit, never a traceback; ``offcost``/``plot`` check ``--out`` before working
and write nothing when there is nothing to write.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

from bench import trace_summary, traffic
from bench.errors import BenchError  # one class for this module (__main__ under -m) and bench.traffic
from server_patch.contract import HYSTERESIS_FLAG, THRESHOLD_FLAG, GateConfig, GateConfigError

CONCURRENCY = [1, 2, 4, 8, 16, 32, 64, 128]
TIME_VARYING = [(1, 16), (64, 256), (4, 32), (128, 512), (2, 16)]  # (max concurrency, requests)
MAX_RR = 128
# The 8B-shaped pair's crossover (bench/results/x2-2026-11-30c, p = 0.2): always-on led no
# speculation up to 16 requests, trailed it by 3% at 32 and by 27% at 64, and the gate's OFF steps
# at 32 (5011 tok/s) trailed both. So N = 48 (on at 32, off at 64) by default, and --recommend
# sweeps N across 16-64 at the concurrencies that decide it.
DEFAULT_THRESHOLD = 48
RECOMMEND_THRESHOLDS = [16, 24, 32, 48, 64]
RECOMMEND_LEVELS = [16, 32, 64]
WARMUP = [(8, 32), (64, 64)]  # (max concurrency, requests) before every sweep, not recorded
CSV_COLUMNS = ["config", "p_wrong", "concurrency", "output_tok_s", "mean_tpot_ms", "p99_tpot_ms",
               "accept_length", "threshold"]
# What read_rows accepts in the numeric columns: integers in INTEGER_COLUMNS, finite numbers
# elsewhere; > 0 in POSITIVE_COLUMNS, >= 0 in accept_length; empty only in OPTIONAL_COLUMNS
# (accept_length without speculation, threshold outside the gate), but gate-n* rows need a threshold.
INTEGER_COLUMNS = ("concurrency", "threshold")
POSITIVE_COLUMNS = ("concurrency", "output_tok_s", "mean_tpot_ms", "p99_tpot_ms", "threshold")
OPTIONAL_COLUMNS = ("accept_length", "threshold")


def serving_driver():
    """The process's one :class:`bench.serving_driver.ServingDriver` (SGLang imported once):
    :func:`bench.traffic.serving_driver`'s, shared by the uniform sweep and the real-traffic rows."""
    return traffic.serving_driver()


def bench_serving(port: int, concurrency: int, num_prompts: int, out_jsonl: Path, seed: int = 1) -> Dict[str, Any]:
    """Run SGLang's ``bench_serving`` once (through :func:`serving_driver`); return its JSON
    result line. ``--flush-cache`` empties the server's prefix cache after bench_serving's warm-up
    request, so no run's prefills hit prompts that an earlier run on the same server sent (the
    forced-off rows of x2-2026-11-30c re-sent the gate levels' prompts and read 5-14% above the
    per-step ratio from the server log).

    Raises:
        RuntimeError: bench_serving failed (its output tail in the message).
    """
    argv = [
        "--backend", "sglang",
        "--host", "127.0.0.1", "--port", str(port), "--dataset-name", "random-ids",
        "--random-input-len", "256", "--random-output-len", "256", "--random-range-ratio", "1.0",
        "--num-prompts", str(num_prompts), "--max-concurrency", str(concurrency),
        "--seed", str(seed), "--output-file", str(out_jsonl), "--disable-tqdm", "--flush-cache",
    ]
    if out_jsonl.exists():
        out_jsonl.unlink()
    out = serving_driver().run(argv)
    if not out_jsonl.exists():
        raise RuntimeError(f"bench_serving wrote no {out_jsonl}:\n{out[-2000:]}")
    return json.loads(out_jsonl.read_text().strip().splitlines()[-1])


def _gate_accept(url: str) -> Optional[float]:
    from bench.server_harness import spec_gate

    try:
        return spec_gate(url).get("accept_length_recent")
    except Exception:
        return None


def level_prompts(concurrency: int) -> int:
    """Requests per measured level: four waves of ``concurrency``, and at least 32 (at 1-4
    requests, 16 requests gave spec-decoding rows that moved 5-10% between runs)."""
    return max(32, 4 * concurrency)


def sweep(config: str, p: float, port: int, url: str, work: Path, threshold: Optional[int],
          levels: List[int]) -> List[Dict[str, Any]]:
    rows = []
    for c in levels:
        res = bench_serving(port, c, level_prompts(c), work / f"{config}-{c}.jsonl")
        acc = _gate_accept(url) if config == "gate" else res.get("accept_length")
        rows.append({
            "config": config, "p_wrong": p, "concurrency": c,
            "output_tok_s": round(res["output_throughput"], 1),
            "mean_tpot_ms": round(res["mean_tpot_ms"], 3), "p99_tpot_ms": round(res["p99_tpot_ms"], 3),
            "accept_length": None if acc is None else round(acc, 3),
            "threshold": threshold if threshold is not None else "",
        })
        print(json.dumps(rows[-1]), flush=True)
    return rows


PROFILE_STEPS = 5  # decode steps recorded by SGLang's torch profiler
PROFILE_OPTIONS = trace_summary.PROFILE_OPTIONS  # CPU + GPU, without Python stacks and shapes
PROFILE_DELAY_S = 2.0  # after the load starts: its first prefill is over, decode runs at full batch


def profile_decode(url: str, port: int, config: str, concurrency: int, out: Path, work: Path) -> Dict[str, Any]:
    """Record PROFILE_STEPS decode steps under a load of ``concurrency`` requests with SGLang's own
    profiler (``POST /start_profile``, CPU + GPU activity) into ``out/profile-CONFIG-cC/``, and
    summarize each trace with :mod:`bench.trace_summary` (GPU busy fraction, gaps, CPU syncs).
    Failures are recorded, not raised: the profile is a diagnostic, the sweep is the result."""
    import threading
    import time

    import zlib

    import httpx

    prof_dir = out / f"profile-{config}-c{concurrency}"
    prof_dir.mkdir(parents=True, exist_ok=True)
    box: Dict[str, Any] = {}
    load = threading.Thread(target=lambda: box.update(
        r=bench_serving(port, concurrency, 4 * concurrency, work / f"{config}-profile.jsonl", seed=7)))
    load.start()
    time.sleep(PROFILE_DELAY_S)
    rec: Dict[str, Any] = {"concurrency": concurrency, "steps": PROFILE_STEPS, "dir": str(prof_dir)}
    try:
        reply = httpx.post(url + "/start_profile", timeout=120, json={
            "output_dir": str(prof_dir), "num_steps": PROFILE_STEPS, **PROFILE_OPTIONS})
        rec["start_profile"] = reply.status_code
    except httpx.HTTPError as exc:
        rec["error"] = f"start_profile: {exc}"
    load.join()
    time.sleep(2.0)  # the trace is written when the last profiled step ends
    rec["summaries"] = {}
    for path in sorted(prof_dir.glob("*.trace.json*")):
        try:
            rec["summaries"][path.name] = trace_summary.summarize(trace_summary.load_events(path))
        except (OSError, ValueError, EOFError, zlib.error) as exc:
            rec["summaries"][path.name] = {"error": str(exc)}
    print(json.dumps({"profile": config, **{k: v for k, v in rec.items() if k != "summaries"},
                      "summaries": rec["summaries"]}), flush=True)
    return rec


def time_varying(config: str, port: int, work: Path) -> Dict[str, Any]:
    """The same staged load for every config; wall time = sum of bench_serving durations."""
    stages, total_tokens, wall = [], 0, 0.0
    for i, (c, n) in enumerate(TIME_VARYING):
        res = bench_serving(port, c, n, work / f"{config}-tv{i}.jsonl", seed=100 + i)
        stages.append({"concurrency": c, "requests": n, "duration_s": round(res["duration"], 3),
                       "output_tokens": res["total_output_tokens"]})
        total_tokens += res["total_output_tokens"]
        wall += res["duration"]
    return {"config": config, "stages": stages, "total_output_tokens": total_tokens, "wall_s": round(wall, 3)}


def append_csv(path: Path, rows: List[Dict[str, Any]]) -> None:
    new = not path.exists()
    with path.open("a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        if new:
            w.writeheader()
        w.writerows(rows)


def gpu_name() -> Optional[str]:
    """``name, driver_version`` of each GPU as nvidia-smi prints them (one line each), or None
    without nvidia-smi or when it fails (the record then says nothing about the GPU)."""
    import shutil

    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def run(a: argparse.Namespace) -> bool:
    """One configuration on one server (``main`` has checked the paths; see the module docstring).
    Returns False when the server failed (to start, or during the rows): the error and the server
    log's tail are on stderr and in the JSON's ``error`` / ``log_tail``.

    Raises:
        BenchError: ``--models``' oracle.json is not JSON or has another format version.
    """
    from bench.server_harness import (
        eagle3_args, plain_args, set_gate, spec_gate, start_server, stop_server, wait_ready, write_json,
    )
    from bench.synthetic_models import Oracle

    if a.models is not None:  # the synthetic pair: its p_wrong labels the rows
        try:
            p_label: Any = Oracle.load(a.models / "oracle.json").p_wrong
        except ValueError as exc:  # not JSON, or another format_version
            raise BenchError(f"--models {a.models}: unreadable oracle.json ({exc})") from None
        target, draft = str(a.models / "target"), str(a.models / "draft")
    else:  # an operator's own pair
        p_label, target, draft = a.label, a.target, a.draft
    if a.config == "none":
        args = plain_args(target, max_running_requests=MAX_RR, cuda_graph_max_bs=MAX_RR, mem_fraction=a.mem_fraction)
    else:
        args = eagle3_args(target, draft, max_running_requests=MAX_RR, cuda_graph_max_bs=MAX_RR,
                           mem_fraction=a.mem_fraction)
        if a.config == "gate":
            args += [THRESHOLD_FLAG, str(a.threshold), HYSTERESIS_FLAG, str(a.hysteresis)]
    args += a.server_args  # after ours: SGLang's parser keeps the last value of a repeated flag
    a.out.mkdir(parents=True, exist_ok=True)
    work = Path("/tmp/bench-work")
    work.mkdir(parents=True, exist_ok=True)
    server = start_server(f"bench-{a.config}-p{p_label}", args, a.port, Path("/tmp/specconsole-logs"),
                          env=traffic.greedy_server_env())
    meta: Dict[str, Any] = {"config": a.config, "p_wrong": p_label, "launch_args": args,
                            "threshold": a.threshold if a.config == "gate" else None}

    def force_off() -> None:  # threshold 1, no hysteresis: every decode step is an OFF step
        set_gate(server.url, threshold=1, hysteresis=0)

    def save() -> None:
        # after every phase, so a run stopped half-way (device time) keeps what it measured
        driver = serving_driver()
        meta["bench_serving_mode"] = driver.mode
        meta["bench_serving_fallback"] = driver.fallback_reason
        write_json(a.out / f"throughput-{a.config}-p{p_label}.json", meta)
    try:
        wait_ready(server, timeout_s=600)
        meta["startup_s"] = round(server.ready_s, 1)
        import httpx
        info = httpx.get(server.url + "/server_info", timeout=30).json()
        meta["sglang_version"] = info.get("version")
        meta["gpu"] = gpu_name()
        # Not recorded: the first requests after startup ran 5-20% slower in the 2026-11-30 run
        # (gate at 1 request: 368 tok/s first, 384-410 later in the same server), and the gate's
        # first OFF steps at 32 requests in x2-2026-11-30b read 12% below the same OFF steps later.
        # So warm both batch-size classes (8; 64 = OFF steps for a gate below 64) before measuring.
        meta["warmup_output_tok_s"] = [
            round(bench_serving(a.port, c, n, work / f"{a.config}-warmup{c}.jsonl", seed=999)["output_throughput"], 1)
            for c, n in WARMUP
        ]
        rows = sweep(a.config, p_label, a.port, server.url, work,
                     a.threshold if a.config == "gate" else None, a.concurrency)
        append_csv(a.out / "throughput.csv", rows)
        save()
        if a.time_varying:
            meta["time_varying"] = time_varying(a.config, a.port, work)
            print(json.dumps({"time_varying": meta["time_varying"]}), flush=True)
            save()
        if a.config == "gate":
            force_off()
            off = sweep("gate-forced-off", p_label, a.port, server.url, work, 1, [64, 128])
            append_csv(a.out / "throughput.csv", off)
            meta["forced_off"] = off
            save()
            if a.recommend:
                rec_rows = []
                for n in a.recommend_thresholds:
                    set_gate(server.url, threshold=n)
                    rec_rows += sweep(f"gate-n{n}", p_label, a.port, server.url, work, n, a.recommend_levels)
                append_csv(a.out / "throughput.csv", rec_rows)
            meta["final_spec_gate"] = spec_gate(server.url)
        if a.profile:  # last: a slow trace write stalls the server, and must not delay the rows
            if a.config == "gate":  # profile OFF steps (to compare with a none server's decode steps)
                force_off()
            meta["profile"] = profile_decode(server.url, a.port, a.config, a.profile, a.out, work)
            save()
    except Exception as exc:
        meta["error"] = f"{type(exc).__name__}: {exc}"
        meta["log_tail"] = server.log_tail(60)
        tail = "\n".join(x for x in meta["log_tail"].splitlines() if x not in meta["error"])  # each line once
        print(meta["error"], tail, sep="\n", file=sys.stderr)
    finally:
        meta["exit_code"] = stop_server(server)
        save()
    return "error" not in meta


def read_rows(paths: List[Path]) -> List[Dict[str, Any]]:
    """The rows of throughput CSVs, in order (values are strings, as ``csv`` reads them).

    Raises:
        BenchError: a path is missing or a directory; a file is not UTF-8 text, lacks some of
            ``CSV_COLUMNS`` in its header or has no rows; a row has more values than columns, or a
            numeric cell is empty, not a number, or not a measurement (nan, inf, negative; 0 where
            only a positive value makes sense). The message names the file, and the line and
            column for a cell.
    """
    rows: List[Dict[str, Any]] = []
    for path in paths:
        rows.extend(_read_csv(path))
    return rows


def _read_csv(path: Path) -> List[Dict[str, Any]]:
    if not path.exists():
        raise BenchError(f"no such file: {path}")
    if path.is_dir():
        raise BenchError(f"{path} is a directory")
    rows = []
    try:
        with path.open(newline="", encoding="utf-8-sig") as f:  # -sig: a BOM from a spreadsheet
            reader = csv.DictReader(f)
            header = reader.fieldnames or CSV_COLUMNS  # None: an empty file, reported as no rows
            if "workload" in header and "request_rate" in header:
                raise BenchError(f"{path} is a real-traffic CSV: read it with "
                                 f"`python -m bench.throughput summarize-traffic {path}`")
            missing = [c for c in CSV_COLUMNS if c not in header]
            if missing:
                raise BenchError(f"{path} is not a throughput CSV: missing columns {', '.join(missing)}")
            for row in reader:
                if None in row:  # DictReader files surplus values under the key None
                    raise BenchError(f"{path}:{reader.line_num}: more values than columns")
                for column in CSV_COLUMNS[2:]:
                    problem = _cell_problem(row, column)
                    if problem:
                        raise BenchError(f"{path}:{reader.line_num}: column {column}: {problem}")
                rows.append(row)
    except UnicodeDecodeError:
        raise BenchError(f"{path} is not a text CSV (not UTF-8; binary file?)") from None
    except (OSError, csv.Error) as exc:
        raise BenchError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    if not rows:
        raise BenchError(f"{path} has no rows")
    return rows


def _cell_problem(row: Dict[str, Any], column: str) -> Optional[str]:
    """Why ``row[column]`` (a numeric column) is not a measurement; None when it is fine."""
    value = (row[column] or "").strip()  # None: a short row
    if not value:
        gate_n = (row["config"] or "").startswith("gate-n")
        if column in OPTIONAL_COLUMNS and not (column == "threshold" and gate_n):
            return None
        return "is empty" if row[column] is not None else "is missing (short line)"
    kind = "an integer" if column in INTEGER_COLUMNS else "a number"
    try:
        x = int(value) if column in INTEGER_COLUMNS else float(value)
    except ValueError:
        return f"{value!r} is not {kind}"
    if not math.isfinite(x) or x < 0 or (x == 0 and column in POSITIVE_COLUMNS):
        return f"{value!r} is not a measurement (needs {kind} {'> 0' if column in POSITIVE_COLUMNS else '>= 0'})"
    return None


def same_label(value: Any, label: Any) -> bool:
    """Rows are grouped by their ``p_wrong`` column: the synthetic pair's p (``0.2``), or the label
    of an operator's own pair (``--label``); CSV values are strings, labels may be floats."""
    return str(value) == str(label)


def threshold_scores(rows: List[Dict[str, Any]], p: float) -> List[Dict[str, Any]]:
    """Every swept threshold N of ``p``: ``{threshold, score, concurrencies, tpot_ok, tpot_ratio}``.

    ``score``: mean of (gate tok/s / best static tok/s) over the swept concurrencies that have
    both a ``none`` and an ``always`` row (None if none has: the better of one alone is not the
    best static configuration); ``tpot_ok``: the mean TPOT at the lowest swept concurrency is
    within 5% of always-on's there (``tpot_ratio`` = gate / always TPOT, None without an always
    row). ``rows`` as from :func:`read_rows`: ``gate-n<N>`` rows against ``none``/``always`` rows
    of the same ``p_wrong`` and concurrency."""
    pick = [r for r in rows if same_label(r["p_wrong"], p)]
    static = _static_rows(pick)
    cands: Dict[int, List[Dict[str, Any]]] = {}
    for r in pick:
        if r["config"].startswith("gate-n"):
            cands.setdefault(int(r["threshold"]), []).append(r)
    out = []
    for n, rs in sorted(cands.items()):
        cs = sorted(int(r["concurrency"]) for r in rs)
        lo = next(r for r in rs if int(r["concurrency"]) == cs[0])
        always_lo = static.get(cs[0], {}).get("always")
        tpot_ratio = float(lo["mean_tpot_ms"]) / float(always_lo["mean_tpot_ms"]) if always_lo else None
        ratios = []
        for r in rs:
            st = static.get(int(r["concurrency"]), {})
            if len(st) == 2:  # both none and always: "best static" against one alone misleads
                ratios.append(float(r["output_tok_s"]) / max(float(x["output_tok_s"]) for x in st.values()))
        out.append({"threshold": n, "score": round(sum(ratios) / len(ratios), 4) if ratios else None,
                    "concurrencies": cs, "tpot_ok": tpot_ratio is None or tpot_ratio <= 1.05,
                    "tpot_ratio": round(tpot_ratio, 3) if tpot_ratio is not None else None})
    return out


def _static_rows(pick: List[Dict[str, Any]]) -> Dict[int, Dict[str, Any]]:
    """``{concurrency: {"none": row, "always": row}}`` (either may be missing) of one p's rows."""
    static: Dict[int, Dict[str, Any]] = {}
    for r in pick:
        if r["config"] in ("none", "always"):
            static.setdefault(int(r["concurrency"]), {})[r["config"]] = r
    return static


def recommend(rows: List[Dict[str, Any]], p: float) -> Optional[Dict[str, Any]]:
    """The threshold N that maximises the mean of (gate tok/s / best static tok/s) over the swept
    concurrencies, among the N whose mean TPOT at the lowest concurrency is within 5% of always-on
    (:func:`threshold_scores`). Returns ``{threshold, score, concurrencies}``, or None when there
    is no ``gate-n*`` row for ``p``, no N has both static rows at any of its concurrencies, or every N
    fails the TPOT rule (:func:`why_no_recommendation` says which)."""
    return best_threshold(threshold_scores(rows, p))


def best_threshold(scores: List[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """:func:`recommend`'s pick among :func:`threshold_scores` already computed."""
    best = None
    for t in scores:
        if not t["tpot_ok"] or t["score"] is None:
            continue
        if best is None or t["score"] > best["score"]:
            best = {"threshold": t["threshold"], "score": t["score"], "concurrencies": t["concurrencies"]}
    return best


def why_no_recommendation(rows: List[Dict[str, Any]], p: Any) -> str:
    """The first thing :func:`recommend` needs that ``rows`` lack for ``p``, as a sentence."""
    pick = [r for r in rows if same_label(r["p_wrong"], p)]
    swept = sorted({int(r["concurrency"]) for r in pick if r["config"].startswith("gate-n")})
    if not swept:
        return "no gate-n* sweep rows: run --config gate --recommend"
    static = _static_rows(pick)
    if not any(len(static.get(c, {})) == 2 for c in swept):
        return f"no none and always rows at the same swept concurrency {swept}"
    return "no threshold keeps the mean TPOT at the lowest swept concurrency within 5% of always-on"


def off_step_cost(rows: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Per concurrency where both exist: gate forced off (threshold 1) against no speculation.

    ``ratio`` = forced-off output tok/s / no-speculation output tok/s (issue target: >= 0.93 at 64
    and 128 concurrent requests)."""
    by: Dict[tuple, Dict[str, Any]] = {}
    for r in rows:
        if r["config"] in ("none", "gate-forced-off"):
            by[(r["config"], str(r["p_wrong"]), int(r["concurrency"]))] = r
    out = []
    for (config, p, c), off in sorted(by.items()):
        none = by.get(("none", p, c))
        if config != "gate-forced-off" or none is None:
            continue
        out.append({
            "p_wrong": p, "concurrency": c,
            "none_output_tok_s": float(none["output_tok_s"]), "forced_off_output_tok_s": float(off["output_tok_s"]),
            "ratio": round(float(off["output_tok_s"]) / float(none["output_tok_s"]), 3),
            "none_mean_tpot_ms": float(none["mean_tpot_ms"]), "forced_off_mean_tpot_ms": float(off["mean_tpot_ms"]),
        })
    return out


def plot(rows: List[Dict[str, Any]], out: Path, title: str = "") -> None:
    """Output tok/s against max concurrency (log2 axis) for none / always / gate, one panel per
    p_wrong that has such rows; PNG at ``out`` (or another format matplotlib writes, by extension).
    Needs matplotlib (``pip install matplotlib``; not a test dependency).

    Raises:
        BenchError: matplotlib is not installed, ``out`` has an extension matplotlib cannot write,
            or ``rows`` has no none/always/gate row.
    """
    try:
        import matplotlib
    except ImportError:
        raise BenchError("plot needs matplotlib: pip install matplotlib") from None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    style = {"none": ("no speculation", "o-"), "always": ("EAGLE-3 always on", "s-"), "gate": ("EAGLE-3 + gate", "^-")}
    ps = sorted({str(r["p_wrong"]) for r in rows if r["config"] in style})
    if not ps:
        raise BenchError("no none/always/gate rows to plot")
    fig, axes = plt.subplots(1, len(ps), figsize=(6.4 * len(ps), 4.4), squeeze=False)
    if out.suffix and out.suffix[1:].lower() not in fig.canvas.get_supported_filetypes():
        plt.close(fig)
        raise BenchError(f"--out {out}: matplotlib cannot write {out.suffix!r} files (use .png, .svg or .pdf)")
    for ax, p in zip(axes[0], ps):
        for config, (label, fmt) in style.items():
            pts = sorted((int(r["concurrency"]), float(r["output_tok_s"]), r.get("threshold") or "")
                         for r in rows if r["config"] == config and same_label(r["p_wrong"], p))
            if pts:
                if config == "gate" and pts[0][2]:
                    label += f" (N={pts[0][2]})"
                ax.plot([c for c, _, _ in pts], [t for _, t, _ in pts], fmt, label=label)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("max concurrency (requests)")
        ax.set_ylabel("output tok/s")
        ax.set_title(f"p_wrong = {p}" + (f" · {title}" if title else ""))
        ax.grid(True, alpha=0.3)
        ax.legend()
    fig.tight_layout()
    try:
        fig.savefig(out, dpi=120)
    except OSError as exc:
        raise BenchError(f"cannot write {out}: {exc.strerror or exc}") from None


def summarize(a: argparse.Namespace) -> None:
    """Markdown table per p_wrong (none / always / gate tok/s, gate over the better static config,
    n/a unless both were measured at that concurrency) and the
    recommended threshold (or why there is none), from ``CSV...`` or ``--results DIR/throughput.csv``.

    Raises:
        BenchError: as :func:`read_rows`.
    """
    default = a.results / "throughput.csv"
    if not a.csv and not default.exists():
        raise BenchError(f"no such file: {default} (give throughput CSVs, or --results DIR that holds throughput.csv)")
    rows = read_rows(a.csv or [default])
    for warning in row_warnings(rows):
        print(f"warning: {warning}", file=sys.stderr)
    all_loads = time_varying_results(a.csv or [default])
    for p in sorted({str(r["p_wrong"]) for r in rows}):
        print(f"p_wrong={p}")
        print("| concurrency | none tok/s | always tok/s | gate tok/s | gate / best static |")
        print("|---|---|---|---|---|")
        by = {}
        for r in rows:
            if same_label(r["p_wrong"], p) and r["config"] in ("none", "always", "gate"):
                by.setdefault(int(r["concurrency"]), {})[r["config"]] = float(r["output_tok_s"])
        for c in sorted(by):
            d = by[c]
            # against the better of the two static configs: only when both were measured
            both = "none" in d and "always" in d
            ratio = f"{d['gate'] / max(d['none'], d['always']):.3f}" if "gate" in d and both else "n/a"
            print(f"| {c} | {d.get('none', 'n/a')} | {d.get('always', 'n/a')} | {d.get('gate', 'n/a')} | {ratio} |")
        forced = {int(r["concurrency"]): float(r["output_tok_s"]) for r in rows
                  if same_label(r["p_wrong"], p) and r["config"] == "gate-forced-off"}
        if forced:  # the OFF step against no speculation (offcost writes the same as JSON)
            print("gate forced off: " + ", ".join(
                f"{c} req {forced[c]} tok/s" + (f" ({forced[c] / by[c]['none']:.3f}x none)" if "none" in by.get(c, {}) else "")
                for c in sorted(forced)))
        scores = threshold_scores(rows, p)
        for t in scores:
            tpot = f", TPOT at {t['concurrencies'][0]} req {t['tpot_ratio']:.2f}x always-on" if t["tpot_ratio"] else ""
            refused = "" if t["tpot_ok"] else " (refused: TPOT over 1.05x always-on)"
            score = f"{t['score']:.4f}" if t["score"] is not None else "n/a"
            print(f"sweep N={t['threshold']}: mean gate / best static {score} at {t['concurrencies']} req{tpot}{refused}")
        best = best_threshold(scores)
        print("recommended threshold:",
              f"N = {best['threshold']} (mean gate / best static {best['score']:.4f} at "
              f"{', '.join(map(str, best['concurrencies']))} req)" if best
              else f"none ({why_no_recommendation(rows, p)})")
        measured = {r["config"] for r in rows if same_label(r["p_wrong"], p)}  # not another run's JSON
        loads = [t for t in all_loads if same_label(t["p_wrong"], p) and t["config"] in measured]
        if loads:
            parts = ", ".join(f"{t['config']}{' N=' + str(t['threshold']) if t['threshold'] else ''} "
                              f"{t['wall_s']:.1f} s" for t in loads)
            fastest = min(loads, key=lambda t: t["wall_s"])
            print(f"time-varying load: {parts}; fastest: {fastest['config']}")


def time_varying_results(csv_paths: List[Path]) -> List[Dict[str, Any]]:
    """The time-varying loads recorded by ``run`` in the ``throughput-*.json`` files next to
    ``csv_paths``: ``{config, p_wrong, threshold, wall_s, total_output_tokens}`` each, sorted by
    config. Unreadable or foreign JSON files are skipped (they are not this tool's output)."""
    out = []
    for d in sorted({p.parent for p in csv_paths}):
        for path in sorted(d.glob("throughput-*.json")):
            try:
                meta = json.loads(path.read_text(encoding="utf-8"))
                tv = meta["time_varying"]
                out.append({"config": meta["config"], "p_wrong": meta["p_wrong"], "threshold": meta.get("threshold"),
                            "wall_s": float(tv["wall_s"]), "total_output_tokens": int(tv["total_output_tokens"])})
            except (OSError, ValueError, KeyError, TypeError):
                continue
    return sorted(out, key=lambda t: t["config"])


KNOWN_CONFIGS = ("none", "always", "gate", "gate-forced-off")  # plus gate-n<N> sweep rows


def row_warnings(rows: List[Dict[str, Any]]) -> List[str]:
    """What ``summarize`` would otherwise drop or pick silently: rows of an unknown config, and
    (config, p_wrong, concurrency) measured more than once (the table shows the last one read)."""
    out, seen = [], {}
    unknown = sorted({r["config"] for r in rows if r["config"] not in KNOWN_CONFIGS
                      and not r["config"].startswith("gate-n")})
    if unknown:
        out.append(f"rows of unknown config(s) {', '.join(unknown)} are not shown")
    for r in rows:
        key = (r["config"], str(r["p_wrong"]), int(r["concurrency"]))
        seen[key] = seen.get(key, 0) + 1
    dups = [k for k, n in seen.items() if n > 1]
    if dups:
        shown = ", ".join(f"{c} p={p} at {n}" for c, p, n in dups[:4]) + (" ..." if len(dups) > 4 else "")
        out.append(f"{len(dups)} measurement(s) appear more than once ({shown}); the last one read is shown")
    return out


def offcost(a: argparse.Namespace) -> None:
    """Write the :func:`off_step_cost` rows of ``a.csv`` (with the command and ``a.note``) as JSON to
    ``a.out``; print the rows.

    Raises:
        BenchError: as :func:`read_rows`, or no (none, gate-forced-off) pair at the same p_wrong
            and concurrency (``a.out`` is then not written).
    """
    rows = off_step_cost(read_rows(a.csv))
    if not rows:
        raise BenchError(f"no (none, gate-forced-off) pair at the same p_wrong and concurrency in "
                         f"{' '.join(map(str, a.csv))}; {a.out} not written")
    command = f"python -m bench.throughput offcost {' '.join(map(str, a.csv))} --out {a.out}"
    if a.note:
        command += " --note " + shlex.quote(a.note)
    cost = {"command": command, "note": a.note, "rows": rows}
    try:
        a.out.write_text(json.dumps(cost, indent=1) + "\n")
    except OSError as exc:
        raise BenchError(f"cannot write {a.out}: {exc.strerror or exc}") from None
    print(json.dumps(rows, indent=1))


def _int_list(text: str) -> List[int]:
    """argparse type: ``"1,4,8"`` -> ``[1, 4, 8]`` (positive integers)."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers, got {text!r}")
    return values


def _check_run_paths(parser: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    """``parser.error`` unless the models given to ``run`` can be there and ``--out`` can be a directory."""
    if a.models is not None:
        from bench.server_harness import pair_problem

        problem = pair_problem(a.models)
        if problem:
            parser.error(f"--models {a.models} {problem}")
    for flag, value in (("--target", a.target), ("--draft", a.draft)):
        # A local path (/..., ./..., ../...) must exist; anything else may be a Hugging Face id (org/name).
        if value and value.startswith(("/", ".")) and not Path(value).exists():
            parser.error(f"{flag} {value}: no such directory (a Hugging Face id looks like org/name)")
    if a.out.exists() and not a.out.is_dir():
        parser.error(f"--out {a.out} is a file; give a directory")


def _check_out(parser: argparse.ArgumentParser, out: Path, inputs: List[Path]) -> None:
    """``parser.error`` unless ``out`` can be written without touching one of the ``inputs``."""
    if not out.parent.is_dir():
        parser.error(f"--out {out}: directory {out.parent} does not exist")
    if out.is_dir():
        parser.error(f"--out {out} is a directory; give a file name")
    if any(out.resolve() == p.resolve() for p in inputs):
        parser.error(f"--out {out} is one of the input CSVs; it would be overwritten")


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.throughput", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="benchmark one configuration on its own SGLang server (GPU machine)",
                       description="Benchmark one configuration on its own SGLang server; append rows to "
                                   "OUT/throughput.csv. Arguments after -- go to the SGLang server unchanged.")
    r.add_argument("--config", choices=["none", "always", "gate"], required=True,
                   help="none: no speculation; always: EAGLE-3 on every step; gate: EAGLE-3 with the dynamic gate")
    pair = r.add_mutually_exclusive_group(required=True)
    pair.add_argument("--models", type=Path, metavar="DIR",
                      help="synthetic pair dir from python -m bench.synthetic_models (target/, draft/, oracle.json); "
                           "rows labelled with its p_wrong")
    pair.add_argument("--target", help="your own target model (local dir or Hugging Face id; with --draft); "
                                       "rows labelled --label")
    r.add_argument("--draft", help="your own EAGLE-3 draft model (local dir or Hugging Face id; with --target)")
    r.add_argument("--label", default="model", help="p_wrong column for your own pair (default: model)")
    r.add_argument("--out", type=Path, required=True, metavar="DIR",
                   help="results dir (created): appends DIR/throughput.csv, writes DIR/throughput-CONFIG-pP.json")
    r.add_argument("--threshold", type=int, default=DEFAULT_THRESHOLD, metavar="N",
                   help=f"gate: speculation off once the decode batch has >= N requests (default: {DEFAULT_THRESHOLD})")
    r.add_argument("--hysteresis", type=int, default=2, metavar="H",
                   help="gate: once off, back on below N - H requests (default: 2)")
    r.add_argument("--concurrency", type=_int_list, default=CONCURRENCY, metavar="C,C,...",
                   help=f"max concurrent requests per sweep point (default: {','.join(map(str, CONCURRENCY))})")
    r.add_argument("--no-time-varying", dest="time_varying", action="store_false",
                   help="skip the time-varying load (1 -> 64 -> 4 -> 128 -> 2 concurrent requests)")
    r.add_argument("--recommend", action="store_true",
                   help="gate: also sweep the thresholds live (gate-nN rows) for summarize's recommendation")
    r.add_argument("--recommend-thresholds", type=_int_list, default=RECOMMEND_THRESHOLDS, metavar="N,N,...",
                   help="thresholds N to sweep with --recommend (requests; default: "
                        f"{','.join(map(str, RECOMMEND_THRESHOLDS))})")
    r.add_argument("--recommend-levels", type=_int_list, default=RECOMMEND_LEVELS, metavar="C,C,...",
                   help="max concurrent requests per threshold with --recommend; the lowest one is where "
                        f"summarize's TPOT rule applies (default: {','.join(map(str, RECOMMEND_LEVELS))})")
    r.add_argument("--profile", type=int, default=None, metavar="C",
                   help="at the end, record a few decode steps (gate: forced off) at C concurrent requests "
                        "with SGLang's profiler into OUT/profile-CONFIG-cC/ and summarize them (GPU busy, "
                        "gaps, CPU syncs, top kernels)")
    r.add_argument("--mem-fraction", type=float, default=0.8, metavar="F",
                   help="fraction of GPU memory for SGLang's static pool, 0-1 (--mem-fraction-static; default: 0.8)")
    r.add_argument("--port", type=int, default=30500, help="server port (default: 30500)")
    s = sub.add_parser("summarize", help="markdown table per p_wrong and the recommended threshold from CSVs")
    s.add_argument("csv", type=Path, nargs="*", help="throughput CSVs (default: --results DIR/throughput.csv)")
    s.add_argument("--results", type=Path, default=Path("bench/results"), metavar="DIR",
                   help="dir holding throughput.csv, read when no CSV is given (default: bench/results)")
    pl = sub.add_parser("plot", help="PNG of tok/s against concurrency from throughput CSVs (needs matplotlib)")
    pl.add_argument("csv", type=Path, nargs="+", help="throughput CSVs")
    pl.add_argument("--title", default="", help="appended to each panel's title")
    pl.add_argument("--out", type=Path, required=True, help="image to write (.png; .svg/.pdf also work)")
    o = sub.add_parser("offcost", help="off-step cost JSON from throughput CSVs (none + gate-forced-off rows)")
    o.add_argument("csv", type=Path, nargs="+", help="throughput CSVs")
    o.add_argument("--note", default="", help="what the OFF step was (commit, attention kernel)")
    o.add_argument("--out", type=Path, required=True, help="JSON file to write")
    traffic.add_parsers(sub)  # traffic, summarize-traffic (bench/traffic.py)
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    a = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    a.server_args = extra
    parser = sub.choices[a.cmd]
    if extra and a.cmd not in ("run", "traffic"):
        parser.error("arguments after -- are server arguments, only for run and traffic")
    if a.cmd == "run":
        if a.target is not None and not a.draft and a.config != "none":
            parser.error(f"--target needs --draft (--config {a.config} speculates)")
        if a.draft and a.target is None:
            parser.error("--draft goes with --target (a --models pair has its own draft)")
        if a.recommend and a.config != "gate":
            parser.error("--recommend sweeps the gate's threshold: it needs --config gate")
        if a.config == "gate":
            try:
                GateConfig(a.threshold, a.hysteresis).validate()
            except GateConfigError as exc:
                parser.error(f"--threshold / --hysteresis: {exc}")
        if a.profile is not None and a.profile < 1:
            parser.error(f"--profile is a number of concurrent requests >= 1, got {a.profile}")
        if not 0 < a.mem_fraction <= 1:
            parser.error(f"--mem-fraction is a fraction of GPU memory (0-1], got {a.mem_fraction}")
        if not 1 <= a.port <= 65535:
            parser.error(f"--port must be 1-65535, got {a.port}")
        _check_run_paths(parser, a)
    elif a.cmd in ("plot", "offcost"):
        _check_out(parser, a.out, a.csv)
    elif a.cmd in traffic.COMMANDS:
        traffic.check_args(parser, a)
    try:
        if a.cmd == "run":
            if not run(a):
                sys.exit(1)
        elif a.cmd == "summarize-traffic":
            from bench.traffic_summary import summarize_traffic

            summarize_traffic(a)
        elif a.cmd in traffic.COMMANDS:
            traffic.main(a)
        elif a.cmd == "summarize":
            summarize(a)
        elif a.cmd == "plot":
            plot(read_rows(a.csv), a.out, a.title)
        else:
            offcost(a)
    except BenchError as exc:
        sys.exit(str(exc))


def main_in_process(argv: List[str]) -> int:
    """``python -m bench.throughput ARGV`` in this process (SGLang's bench_serving imports are paid
    once per process, not once per call: 14-15 s each on the H200 host); returns its exit status."""
    saved, sys.argv = sys.argv, ["bench.throughput", *argv]
    try:
        main()
        return 0
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    finally:
        sys.argv = saved


if __name__ == "__main__":
    main()
