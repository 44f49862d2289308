"""Acceptance run of "the console against a real server": ``specconsole launch`` in a real terminal.

The console runs in a pseudo-terminal (``ptyprocess``, ``TERM=xterm-256color``, COLS x ROWS) whose
output a reader thread feeds into a ``pyte`` screen, so what is checked is what an operator would
see over ssh. Against the server it launched, this:

1. waits until the screen shows the gate (``SPEC ON`` / ``SPEC OFF`` as plain words) and
   ``connected`` (``--ready-timeout``, default 900 s: an 8B server takes 60-90 s, the first start
   JIT-compiles);
2. records the server's own answers at idle (``/server_info``, ``/v1/loads?include=core,spec``,
   ``/metrics`` with ``--enable-metrics``, ``/health`` status) for test fixtures;
3. drives load at each concurrency level in turn (SGLang's ``bench_serving``, ``random-ids``,
   256 in / 256 out, ``--max-concurrency L``, through :mod:`bench.serving_driver` in a thread;
   one warm-up run first) and every ``--capture-every`` s saves the screen and compares the
   console's shown tok/s with the server's newest ``Decode batch`` log line; the answers are
   recorded once per level under load too;
4. presses ``+`` (waits for ``confirmed by spec_gate``), ``-``, ``?`` (help), ``Escape`` and ``q``,
   waits for the console to exit, and records its exit status, the processes left behind and the
   GPU memory still used.

Usage on the GPU machine (from the repository root)::

    python -m bench.console_terminal --out DIR [--cols 160 --rows 50] [--levels 4,32,96] \\
        [--seconds-per-level 30] [--capture-every 10] -- <server args for specconsole launch>

Outputs in DIR:

- ``screens/NNN-<tag>.txt``: the screen text (NNN counts every save; tag is the level for load
  captures, else ``ready``, ``idle``, ``plus``, ``minus``, ``help``, ``help-closed``, ``quit``, ``error``);
- ``captures.jsonl``: one record per load capture (see :func:`capture_record`);
- ``endpoints.json``: ``{tag: {path: {status, body}}}`` like
  ``tests/fixtures/sglang-0.5.12-h200/endpoints.json`` (tags ``idle``, ``load-c<L>``; model paths
  read ``MODELS/...``);
- ``summary.json``: the verdict (see :func:`level_stats` and :meth:`AcceptanceRun.summary`),
  written also when a step fails (then with ``error``) or the run gets SIGTERM / SIGHUP;
- ``logs/``: the console's server log (``server-*.log``); ``load/``: bench_serving's result lines;
  ``progress.log``: what this run did, with times.

``--no-load`` skips bench_serving (the levels are then only capture windows: the demo server
simulates its own load); ``SPECCONSOLE_SERVER_CMD`` replaces the launched server command, as for
the console itself (the tests point it at ``python -m console.demo_server``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from console.config import api_key_from_server_args, flag_value, url_from_server_args
from console.process import group_members

REPO = Path(__file__).resolve().parent.parent

READY_TIMEOUT_S = 900.0  # an 8B server: 60-90 s; the first start JIT-compiles
KEY_TIMEOUT_S = 20.0  # for each key's visible effect (confirmed change, help open / closed)
STOP_TIMEOUT_S = 10.0  # the console's --stop-timeout (SIGTERM -> SIGKILL of the server's group)
EXIT_GRACE_S = 30.0  # the console's exit after q: at most its stop timeout + this
STEADY_AFTER_S = 10.0  # captures this long into a level count as steady
LOG_FRESH_S = 30.0  # an older Decode batch line says nothing about now (console/load_figures.py)
WITHIN = 0.10  # within_10pct: |median shown/server - 1| <= this
MIN_RUN_S = 5.0  # a new bench_serving run is started only if at least this much of the level is left
LOAD_TIMEOUT_FACTOR = 4.0  # a level's load may run this many times its seconds (+ LOAD_TIMEOUT_EXTRA_S)
LOAD_TIMEOUT_EXTRA_S = 180.0
HTTP_TIMEOUT_S = 30.0
LOG_TAIL_BYTES = 1 << 20  # of the server log read per capture for its newest Decode batch line

#: endpoints recorded for fixtures; /metrics only with --enable-metrics, /health: status only
ENDPOINTS = ("/server_info", "/v1/loads?include=core,spec", "/metrics", "/health")
#: SGLang's access-log lines of the console's own polling, as they would show in the log pane
ACCESS_PATTERNS = ('"GET /server_info HTTP/1.1"', '"GET /v1/loads?include=core%2Cspec HTTP/1.1"', "GET /metrics")
#: server flags whose value is a model (or tokenizer) path
MODEL_PATH_FLAGS = ("--model-path", "--model", "--tokenizer-path", "--speculative-draft-model-path",
                    "--speculative-draft-model", "--speculative-draft-tokenizer-path")
#: cmdline words of processes that must not outlive the console
LEFTOVER_WORDS = ("sglang", "server_patch.launch_server")
HELP_MARK = "specconsole — keys"  # the help screen's heading
CRASH_MARKS = ("The server crashed", "The server exited on its own")
NO_GATE_MARK = "NO GATE"  # the server answers, but without spec_gate (started without the threshold flag?)
NO_GATE_GRACE_S = 15.0  # how long NO GATE may show while waiting for the gate before the run gives up
ESCAPE = "\x1b"

SPEC_WORDS = re.compile(r"\bSPEC (ON|OFF)\b")
CONNECTED = re.compile(r"\bconnected\b")  # lower case: "NOT CONNECTED" does not count
LOAD_LINE = re.compile(r"running (?P<running>\S+)\s+queue (?P<queue>\S+)\s+(?P<tok>n/a|[0-9][0-9,]*(?:\.[0-9]+)?"
                       r"(?:e[+-]?[0-9]+)?)(?: tok/s)?")
CONFIRMED = re.compile(r"threshold (?:\S+ -> \S+|back to \S+)[^│\n]*?confirmed by spec_gate")
DECODE = re.compile(r"^\[(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)[^\]]*\].*?Decode batch, #running-req: (?P<bs>\d+),"
                    r".*?gen throughput \(token/s\): (?P<tps>[0-9.]+(?:[eE][+-]?[0-9]+)?)"
                    r"(?:.*?#queue-req: (?P<queue>\d+))?")
GROUP_LINE = re.compile(r"started server pid (\d+) \(process group (\d+)\)")


class StepError(RuntimeError):
    """A step of the run failed (timeout, the console or server gone); the message says which."""


# -- the screen: parsing (pure) ---------------------------------------------------------------------

def _number(text: str) -> Optional[float]:
    """``"1,531"`` -> 1531.0; ``"n/a"`` or anything else -> None."""
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def _count(text: str) -> Optional[int]:
    """``"1,024"`` -> 1024 (requests); ``"n/a"`` or anything else -> None."""
    value = _number(text)
    return int(value) if value is not None and value.is_integer() else None


def parse_load_line(text: str) -> Optional[Dict[str, Any]]:
    """The Load panel's summary line ``running R  queue Q  X tok/s`` -> ``{running, queue (req),
    tok_s (tok/s; None for n/a), line}``; None if the screen has no such line."""
    m = LOAD_LINE.search(text)
    if m is None:
        return None
    return {"running": _count(m["running"]), "queue": _count(m["queue"]), "tok_s": _number(m["tok"]),
            "line": m.group(0)}


def spec_word(text: str) -> Optional[str]:
    """``"SPEC ON"`` or ``"SPEC OFF"`` as plain words on the screen (block letters do not count), else None."""
    m = SPEC_WORDS.search(text)
    return m.group(0) if m else None


def is_ready(text: str) -> bool:
    """The console shows the gate (plain SPEC ON/OFF) and ``connected`` in its top line (which may
    wrap onto a second line; ``connected`` in the log pane does not count)."""
    top = "\n".join(text.splitlines()[:2])
    return spec_word(text) is not None and CONNECTED.search(top) is not None


#: rows of one request line on one screen from which it counts as the console's polling: other
#: clients send these too (bench_serving asks ``/server_info`` when a run starts and ends), but a
#: console polling once a second with its own lines shown fills the followed pane with them
OWN_POLL_ROWS = 3


def access_lines(text: str) -> List[str]:
    """Which of :data:`ACCESS_PATTERNS` (the console's own polling in SGLang's access log) are on
    screen at least :data:`OWN_POLL_ROWS` times."""
    return [p for p in ACCESS_PATTERNS if text.count(p) >= OWN_POLL_ROWS]


def confirmations(text: str) -> set:
    """The ``threshold A -> B ... confirmed by spec_gate`` texts on screen."""
    return set(CONFIRMED.findall(text))


# -- the server log ---------------------------------------------------------------------------------

def newest_decode_line(log_text: str) -> Optional[Dict[str, Any]]:
    """The last ``Decode batch`` line of ``log_text`` -> ``{running_req (req), gen_tok_s (tok/s),
    queue_req (req or None), time (its ``YYYY-MM-DD HH:MM:SS``), epoch (s, local time)}``; None if none."""
    for line in reversed(log_text.splitlines()):
        if "Decode batch" not in line:
            continue
        m = DECODE.search(line)
        if m is None:
            continue
        try:
            epoch = time.mktime(time.strptime(m["ts"], "%Y-%m-%d %H:%M:%S"))
        except (ValueError, OverflowError):
            epoch = None
        return {"running_req": int(m["bs"]), "gen_tok_s": float(m["tps"]),
                "queue_req": int(m["queue"]) if m["queue"] is not None else None,
                "time": m["ts"], "epoch": epoch}
    return None


#: seconds of ``Decode batch`` lines averaged for a capture: the console's own rate window
#: (``console/load_figures.py`` ``RATE_WINDOW_S``) plus one for the log's 1 s timestamps
WINDOW_S = 6.0


def window_decode_tok_s(log_text: str, now: float, window_s: float = WINDOW_S) -> Optional[float]:
    """Mean ``gen throughput`` (tok/s) of the ``Decode batch`` lines stamped in ``(now - window_s,
    now]`` (epoch s, local time), or None without one. A line covers 40 decode steps (0.2-0.5 s
    under load): one alone scatters +-20% against a 5 s rate on variable lengths."""
    vals = []
    for line in log_text.splitlines():
        m = DECODE.search(line) if "Decode batch" in line else None
        if m is None:
            continue
        try:
            t = time.mktime(time.strptime(m["ts"], "%Y-%m-%d %H:%M:%S"))
        except (ValueError, OverflowError):
            continue
        if now - window_s < t <= now:
            vals.append(float(m["tps"]))
    return round(sum(vals) / len(vals), 2) if vals else None


def read_tail(path: Optional[Path], max_bytes: int = LOG_TAIL_BYTES) -> str:
    """The last ``max_bytes`` of a text file ('' if unreadable or None)."""
    if path is None:
        return ""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - max_bytes))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def server_log(log_dir: Path) -> Optional[Path]:
    """The newest ``server-*.log`` the console wrote under ``log_dir``, or None."""
    logs = sorted(log_dir.glob("server-*.log"), key=lambda p: p.stat().st_mtime)
    return logs[-1] if logs else None


# -- one capture and the verdict (pure) --------------------------------------------------------------

def ratio(shown: Optional[float], server: Optional[float]) -> Optional[float]:
    """shown / server (both tok/s), rounded to 4 digits; None if either is unknown or server is 0."""
    if shown is None or not server:
        return None
    return round(shown / server, 4)


def capture_record(screen: str, log_text: str, *, now: float, level: int, t_in_level: float,
                   load_active: bool, screen_file: str) -> Dict[str, Any]:
    """One capture: ``time`` (epoch s), ``iso``, ``level`` (req), ``t_in_level_s``, ``load_active``
    (a bench_serving run was in progress, or --no-load), the console's ``shown_tok_s`` /
    ``shown_running`` / ``shown_queue`` (``shown_line``: the parsed text), ``spec_word``,
    ``plain_words``, the server's newest ``Decode batch`` figures (``server_tok_s``,
    ``server_running``, ``server_queue``, ``server_line_time``, ``server_line_age_s``), ``ratio``
    (shown / server tok/s), ``server_window_tok_s`` / ``window_ratio`` (the same against the mean of
    the lines of the last :data:`WINDOW_S` s), ``access_lines_on_screen`` (bool) with
    ``access_patterns``, ``screen_file``."""
    load = parse_load_line(screen) or {}
    dec = newest_decode_line(log_text) or {}
    word = spec_word(screen)
    seen = access_lines(screen)
    age = round(now - dec["epoch"], 1) if dec.get("epoch") is not None else None
    window = window_decode_tok_s(log_text, now)
    return {
        "time": round(now, 3), "iso": datetime.fromtimestamp(now).isoformat(timespec="seconds"),
        "level": level, "t_in_level_s": round(t_in_level, 1), "load_active": load_active,
        "shown_tok_s": load.get("tok_s"), "shown_running": load.get("running"), "shown_queue": load.get("queue"),
        "shown_line": load.get("line"),
        "spec_word": word, "plain_words": word is not None,
        "server_tok_s": dec.get("gen_tok_s"), "server_running": dec.get("running_req"),
        "server_queue": dec.get("queue_req"), "server_line_time": dec.get("time"), "server_line_age_s": age,
        "ratio": ratio(load.get("tok_s"), dec.get("gen_tok_s")),
        "server_window_tok_s": window, "window_ratio": ratio(load.get("tok_s"), window),
        "access_lines_on_screen": bool(seen), "access_patterns": seen,
        "screen_file": screen_file,
    }


def is_steady(c: Dict[str, Any], steady_after_s: float = STEADY_AFTER_S) -> bool:
    """A capture that counts for the verdict: at least ``steady_after_s`` into its level, with the
    load on, a ratio, requests shown running, and a server line at most :data:`LOG_FRESH_S` old."""
    age = c.get("server_line_age_s")
    return (c["t_in_level_s"] >= steady_after_s and c["load_active"] and c["ratio"] is not None
            and (c.get("shown_running") or 0) > 0 and age is not None and age <= LOG_FRESH_S)


def level_stats(captures: List[Dict[str, Any]], level: int, steady_after_s: float = STEADY_AFTER_S) -> Dict[str, Any]:
    """The verdict of one level: ``captures``, ``steady_captures`` (:func:`is_steady`),
    ``median_ratio`` / ``min_ratio`` / ``max_ratio`` (shown / server tok/s over the steady ones),
    ``within_10pct`` (None without steady captures), ``median_shown_tok_s``, ``median_server_tok_s``,
    ``window_ratios`` (each steady capture's ``window_ratio``) and ``window_within_10pct`` (the
    share of them within 10%)."""
    mine = [c for c in captures if c["level"] == level]
    steady = [c for c in mine if is_steady(c, steady_after_s)]
    ratios = [c["ratio"] for c in steady]
    out: Dict[str, Any] = {"captures": len(mine), "steady_captures": len(steady),
                           "median_ratio": None, "min_ratio": None, "max_ratio": None, "within_10pct": None,
                           "median_shown_tok_s": None, "median_server_tok_s": None}
    if ratios:
        med = statistics.median(ratios)
        out.update(median_ratio=round(med, 4), min_ratio=min(ratios), max_ratio=max(ratios),
                   within_10pct=abs(med - 1.0) <= WITHIN,
                   median_shown_tok_s=statistics.median(c["shown_tok_s"] for c in steady),
                   median_server_tok_s=statistics.median(c["server_tok_s"] for c in steady))
    windows = [c.get("window_ratio") for c in steady if c.get("window_ratio") is not None]
    out["window_ratios"] = windows
    out["window_within_10pct"] = (round(sum(abs(r - 1.0) <= WITHIN for r in windows) / len(windows), 3)
                                  if windows else None)
    return out


def recheck(run_dir: Path) -> Dict[str, Any]:
    """A finished run's verdicts again, with this module's rules, from its files (``captures.jsonl``,
    ``screens/``, ``logs/server-*.log[.gz]``, ``summary.json``): per level the window ratios of
    the steady captures (:func:`window_decode_tok_s`), the screens with the console's polls
    (:func:`access_lines`) and the leftovers that are the console's (its group, or the server's
    ``--port`` from ``summary.json``'s command). Raises OSError / ValueError for a missing or bad file."""
    import gzip

    summary = json.loads((run_dir / "summary.json").read_text())
    logs = sorted((run_dir / "logs").glob("server-*.log*"))
    if not logs:
        raise ValueError(f"no server log under {run_dir / 'logs'}")
    opener = gzip.open if logs[0].suffix == ".gz" else open
    with opener(logs[0], "rt", errors="replace") as f:
        log_text = f.read()
    caps = [json.loads(line) for line in (run_dir / "captures.jsonl").read_text().splitlines() if line.strip()]
    for c in caps:
        c["server_window_tok_s"] = window_decode_tok_s(log_text, c["time"])
        c["window_ratio"] = ratio(c["shown_tok_s"], c["server_window_tok_s"])
    polls = [c["screen_file"] for c in caps if access_lines((run_dir / c["screen_file"]).read_text())]
    port = flag_value(shlex.split(summary.get("command", "")), "--port") or "30000"
    mine = [r for r in summary.get("leftover") or []
            if r.get("in_group") or re.search(rf"--port[ =]{re.escape(port)}(\s|$)", r["cmdline"])]
    levels = {str(lv): {k: v for k, v in level_stats(caps, lv, summary.get("steady_after_s", STEADY_AFTER_S)).items()
                        if k in ("steady_captures", "median_ratio", "window_ratios", "window_within_10pct")}
              for lv in summary.get("levels", [])}
    return {"recheck_of": str(run_dir), "per_level": levels, "console_access_lines_seen": bool(polls),
            "screens_with_console_polls": polls, "leftover_pids": [r["pid"] for r in mine],
            "other_processes": [r["pid"] for r in summary.get("leftover") or [] if r not in mine]}


def vs_clients(stats: Dict[str, Any]) -> Dict[str, Any]:
    """The level's shown tok/s against what its clients got: ``client_tok_s`` (bench_serving's
    output throughput of the level's runs, weighted by their durations), ``median_ratio_vs_clients``
    (median shown over it) and ``within_10pct_vs_clients``; None without runs or steady captures.

    The reference that counts: SGLang's ``Decode batch`` figure averages 40 decode batches, which
    under variable lengths mostly fall between prefill bursts (it read ~14,000 tok/s at 96 running
    requests on the H200 while the clients got 8,750)."""
    runs = [r for r in stats.get("load_runs", []) if r.get("output_throughput") and r.get("duration")]
    shown = stats.get("median_shown_tok_s")
    out: Dict[str, Any] = {"client_tok_s": None, "median_ratio_vs_clients": None, "within_10pct_vs_clients": None}
    if runs:
        total_s = sum(r["duration"] for r in runs)
        out["client_tok_s"] = round(sum(r["output_throughput"] * r["duration"] for r in runs) / total_s, 1)
        if shown:
            ratio = shown / out["client_tok_s"]
            out.update(median_ratio_vs_clients=round(ratio, 4), within_10pct_vs_clients=abs(ratio - 1.0) <= WITHIN)
    return out


# -- recorded answers ---------------------------------------------------------------------------------

def model_path_anchors(server_args: List[str]) -> List[Tuple[str, str]]:
    """``[(prefix, replacement)]`` that turn the absolute model paths of ``server_args`` into
    ``MODELS/...`` (``/tmp/models/8b/target`` -> ``MODELS/8b/target``: the last two parts stay),
    longest prefix first."""
    pairs = {}
    for flag in MODEL_PATH_FLAGS:
        value = flag_value(server_args, flag)
        if not value or not value.startswith("/"):
            continue
        p = Path(value.rstrip("/") or "/")
        if len(p.parts) >= 4:
            pairs[str(p.parent.parent) + "/"] = "MODELS/"
        elif len(p.parts) == 3:
            pairs[str(p.parent) + "/"] = "MODELS/"
        elif len(p.parts) == 2:
            pairs[str(p)] = f"MODELS/{p.name}"
    return sorted(pairs.items(), key=lambda kv: -len(kv[0]))


def scrub(body: Any, anchors: List[Tuple[str, str]]) -> Any:
    """``body`` (JSON value or text) with every string's model-path prefixes replaced."""
    if isinstance(body, str):
        for prefix, repl in anchors:
            body = body.replace(prefix, repl)
        return body
    if isinstance(body, list):
        return [scrub(v, anchors) for v in body]
    if isinstance(body, dict):
        return {scrub(k, anchors): scrub(v, anchors) for k, v in body.items()}
    return body


def record_endpoints(client: Any, url: str, with_metrics: bool, anchors: List[Tuple[str, str]]) -> Dict[str, Any]:
    """``{path: {status, body}}`` of :data:`ENDPOINTS` from the server at ``url`` (``client``: an
    ``httpx.Client``); bodies as JSON where they parse, else text; ``/health`` status only;
    ``/metrics`` only ``with_metrics``; a failed request is ``{error}``."""
    out: Dict[str, Any] = {}
    for path in ENDPOINTS:
        if path == "/metrics" and not with_metrics:
            continue
        try:
            r = client.get(url + path, timeout=HTTP_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - recorded: the answer (or its absence) is the data
            out[path] = {"error": f"{type(exc).__name__}: {exc}"}
            continue
        if path == "/health":
            out[path] = {"status": r.status_code}
            continue
        try:
            body: Any = r.json() if "json" in r.headers.get("content-type", "") else r.text
        except ValueError:
            body = r.text
        out[path] = {"status": r.status_code, "body": scrub(body, anchors)}
    return out


SMI_FIELDS = ("index", "uuid", "name", "utilization.gpu", "memory.used", "memory.total", "temperature.gpu",
              "power.draw", "power.limit", "clocks.sm")


def nvidia_smi_gpus() -> Dict[str, Any]:
    """``{status, body}``: nvidia-smi's view of every GPU now (``body``: one dict per GPU keyed by
    SMI_FIELDS, MiB / % / °C / W / MHz as nvidia-smi prints them), ``{error}`` without nvidia-smi."""
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    rows = [dict(zip(SMI_FIELDS, (x.strip() for x in line.split(",")))) for line in out.stdout.splitlines() if line.strip()]
    return {"status": out.returncode, "body": rows}


# -- processes ----------------------------------------------------------------------------------------

def proc_table() -> List[Dict[str, Any]]:
    """Live (non-zombie) processes from /proc: ``{pid, ppid, pgrp, cmdline}``."""
    rows = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace").strip()
        except OSError:
            continue
        rest = stat[stat.rfind(")") + 2:].split()
        if len(rest) < 3 or rest[0] in ("Z", "X"):
            continue
        rows.append({"pid": int(entry.name), "ppid": int(rest[1]), "pgrp": int(rest[2]), "cmdline": cmd})
    return rows


def own_lineage() -> set:
    """This process and its ancestors (their command lines may name sglang: not leftovers)."""
    by_pid = {r["pid"]: r for r in proc_table()}
    out, pid = set(), os.getpid()
    while pid and pid not in out:
        out.add(pid)
        pid = by_pid.get(pid, {}).get("ppid", 0)
    return out


def find_server_group(console_pid: int, screen: str = "") -> Optional[int]:
    """The process group of the server the console started: its child that leads its own group
    (/proc), else the ``started server pid P (process group G)`` line on screen; None if neither."""
    for r in proc_table():
        if r["ppid"] == console_pid and r["pgrp"] == r["pid"]:
            return r["pid"]
    m = None
    for m in GROUP_LINE.finditer(screen):
        pass
    return int(m.group(2)) if m else None


def leftovers(pgid: Optional[int], port: Optional[str] = None) -> List[Dict[str, Any]]:
    """Processes left in group ``pgid`` or whose cmdline has a :data:`LEFTOVER_WORDS` word and,
    with ``port``, ``--port PORT`` (other servers on the machine are not the console's; this
    process and its ancestors aside): ``{pid, cmdline, in_group}``."""
    group = set(group_members(pgid)) if pgid else set()
    mine = own_lineage()
    out = []
    for r in proc_table():
        named = any(w in r["cmdline"] for w in LEFTOVER_WORDS) and (
            port is None or re.search(rf"--port[ =]{re.escape(port)}(\s|$)", r["cmdline"]) is not None)
        if r["pid"] in mine or not (r["pid"] in group or named):
            continue
        out.append({"pid": r["pid"], "cmdline": r["cmdline"][:300], "in_group": r["pid"] in group})
    return out


def kill_group(pgid: Optional[int], timeout_s: float) -> None:
    """SIGTERM group ``pgid``, wait up to ``timeout_s`` s for it to empty, then SIGKILL."""
    if not pgid or not group_members(pgid):
        return
    for sig, wait_s in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            return
        deadline = time.monotonic() + wait_s
        while group_members(pgid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not group_members(pgid):
            return


def gpu_memory_used() -> Tuple[Optional[Dict[str, int]], Optional[str]]:
    """``({gpu index: MiB used}, None)`` from nvidia-smi, or ``(None, why not)``."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None, "skipped: no nvidia-smi"
    try:
        out = subprocess.run([exe, "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"nvidia-smi failed: {exc}"
    if out.returncode != 0:
        return None, f"nvidia-smi exit code {out.returncode}: {out.stderr.strip()[:200]}"
    used = {}
    for line in out.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
            used[parts[0]] = int(parts[1])
    return used, None


# -- the terminal ----------------------------------------------------------------------------------------

class Terminal:
    """A program in a pseudo-terminal of ``cols`` x ``rows``, its output rendered by pyte.

    A daemon thread reads the pty and feeds a ``pyte.Screen`` through a ``pyte.Stream``;
    :meth:`text` is the screen's display lines (trailing blanks cut) joined by newlines.
    """

    def __init__(self, argv: List[str], cols: int, rows: int, env: Dict[str, str], cwd: Path) -> None:
        try:
            import pyte
            from ptyprocess import PtyProcessUnicode
        except ImportError as exc:
            raise StepError(f"{exc.name} is not installed: pip install pyte ptyprocess") from None
        self.screen = pyte.Screen(cols, rows)
        self.stream = pyte.Stream(self.screen)
        self.lock = threading.Lock()
        self.feed_errors = 0
        self.proc = PtyProcessUnicode.spawn(argv, env=env, cwd=str(cwd), dimensions=(rows, cols))
        self.reader = threading.Thread(target=self._read, name="pty-reader", daemon=True)
        self.reader.start()

    @property
    def pid(self) -> int:
        """The program's pid (also its process group: ptyprocess starts it in a new session)."""
        return self.proc.pid

    def _read(self) -> None:
        while True:
            try:
                data = self.proc.read(65536)
            except (EOFError, OSError):
                return
            with self.lock:
                try:
                    self.stream.feed(data)
                except Exception:  # noqa: BLE001 - a sequence pyte cannot parse must not stop the reader
                    self.feed_errors += 1

    def text(self) -> str:
        """What the screen shows now."""
        with self.lock:
            return "\n".join(line.rstrip() for line in self.screen.display)

    def press(self, key: str) -> None:
        """Type ``key`` (a character, or an escape sequence such as :data:`ESCAPE`)."""
        self.proc.write(key)
        self.proc.flush()

    def alive(self) -> bool:
        return self.proc.isalive()

    def exit_status(self) -> Optional[int]:
        """The exit code; ``-N`` when killed by signal N; None while it runs."""
        if self.proc.isalive():
            return None
        if self.proc.signalstatus is not None:
            return -int(self.proc.signalstatus)
        return self.proc.exitstatus

    def wait_for(self, cond: Callable[[str], bool], timeout_s: float, poll_s: float = 0.2) -> Optional[str]:
        """Poll the screen until ``cond(text)`` holds (returns the text) or ``timeout_s`` passes or
        the program exits (returns None)."""
        deadline = time.monotonic() + timeout_s
        while True:
            text = self.text()
            if cond(text):
                return text
            if time.monotonic() >= deadline or not self.alive():
                return None
            time.sleep(poll_s)

    def wait_exit(self, timeout_s: float) -> Optional[int]:
        """Wait up to ``timeout_s`` s for the program to exit; its :meth:`exit_status` (None: still runs)."""
        deadline = time.monotonic() + timeout_s
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        return self.exit_status()

    def kill(self, timeout_s: float) -> None:
        """SIGTERM the program's process group, SIGKILL after ``timeout_s`` s; close the pty."""
        if self.alive():
            kill_group(self.pid, timeout_s)
        try:
            self.proc.close(force=True)
        except Exception:  # noqa: BLE001 - already gone
            pass


# -- load --------------------------------------------------------------------------------------------------

def serving_driver():
    """The process's bench_serving driver (:func:`bench.traffic.serving_driver`; tests replace this)."""
    from bench.traffic import serving_driver as driver

    return driver()


def load_argv(host: str, port: int, concurrency: int, num_prompts: int, seed: int, output_file: Path,
              lengths: str = "uniform") -> List[str]:
    """bench_serving argv for a closed loop of ``concurrency`` requests (as ``bench.throughput``'s
    ``bench_serving``: ``random-ids``, ``--flush-cache``) of ``bench.traffic.LENGTHS[lengths]``:
    ``uniform`` 256 in / 256 out (requests start and end in waves), ``varied`` 64-1024 in / 32-512
    out (prefills interleave with decode all the time, so every 40-step ``Decode batch`` window of
    SGLang's log holds its share of them). Raises KeyError for another name."""
    from bench.traffic import LENGTHS

    shape = LENGTHS[lengths]
    return [
        "--backend", "sglang", "--host", host, "--port", str(port), "--dataset-name", "random-ids",
        "--random-input-len", str(shape.input_len), "--random-output-len", str(shape.output_len),
        "--random-range-ratio", repr(shape.range_ratio),
        "--num-prompts", str(num_prompts), "--max-concurrency", str(concurrency),
        "--seed", str(seed), "--output-file", str(output_file), "--disable-tqdm", "--flush-cache",
    ]


def prompts_for(concurrency: int, seconds: float, lengths: str = "uniform") -> int:
    """Requests that keep ``concurrency`` busy for about ``seconds`` s on the slower static
    configuration of the reference H200 runs (:func:`bench.traffic.closed_prompts`)."""
    from bench.traffic import LENGTHS, closed_prompts

    return closed_prompts(concurrency, LENGTHS[lengths], seconds)


class LoadRunner:
    """bench_serving runs, one at a time, in a daemon thread; each run's outcome in :attr:`runs`."""

    def __init__(self, host: str, port: int, work: Path, lengths: str = "uniform") -> None:
        self.host, self.port, self.work, self.lengths = host, port, work, lengths
        self.runs: List[Dict[str, Any]] = []
        self.thread: Optional[threading.Thread] = None

    @property
    def busy(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    @property
    def error(self) -> Optional[str]:
        """The first failed run's error (then no more runs are started), or None."""
        return next((r["error"] for r in self.runs if "error" in r), None)

    def start(self, tag: str, concurrency: int, num_prompts: int, seed: int) -> None:
        """Start one run (``tag`` names its result file ``load/<tag>.jsonl``) unless one is running."""
        if self.busy:
            return
        out = self.work / f"{tag}.jsonl"
        rec: Dict[str, Any] = {"tag": tag, "concurrency": concurrency, "num_prompts": num_prompts, "seed": seed,
                               "started": round(time.time(), 3)}
        self.runs.append(rec)
        argv = load_argv(self.host, self.port, concurrency, num_prompts, seed, out, self.lengths)
        self.thread = threading.Thread(target=self._run, args=(argv, out, rec), name=f"load-{tag}", daemon=True)
        self.thread.start()

    @staticmethod
    def _run(argv: List[str], out: Path, rec: Dict[str, Any]) -> None:
        try:
            if out.exists():
                out.unlink()
            serving_driver().run(argv)
            res = json.loads(out.read_text().strip().splitlines()[-1])
            rec.update({k: res.get(k) for k in ("output_throughput", "duration", "completed")})
        except Exception as exc:  # noqa: BLE001 - recorded; the captures say what the console showed
            rec["error"] = f"{type(exc).__name__}: {str(exc)[-1500:]}"
        rec["ended"] = round(time.time(), 3)

    def wait(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` s for the current run; True if none runs any more."""
        if self.thread is not None:
            self.thread.join(timeout_s)
        return not self.busy


# -- the run -------------------------------------------------------------------------------------------------

def _interrupt(signum: int, frame: Any) -> None:
    """SIGTERM / SIGHUP: leave through the finally blocks (as ``bench.traffic``'s handler)."""
    raise KeyboardInterrupt(f"signal {signum}")


def _levels(text: str) -> List[int]:
    try:
        levels = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        levels = []
    if not levels or min(levels) < 1:
        raise argparse.ArgumentTypeError(f"expected comma-separated request counts >= 1, got {text!r}")
    return levels


def parse_args(argv: List[str]) -> argparse.Namespace:
    """Our options before ``--``, the server's after it (``server_args``)."""
    if "--" in argv:
        i = argv.index("--")
        ours, server = argv[:i], argv[i + 1:]
    else:
        ours, server = argv, []
    ap = argparse.ArgumentParser(prog="python -m bench.console_terminal", description=__doc__.splitlines()[0],
                                 epilog="server args follow a --")
    ap.add_argument("--out", type=Path, required=True,
                    help="output directory (with --recheck: the finished run's directory; writes summary-recheck.json)")
    ap.add_argument("--recheck", action="store_true",
                    help="no run: recompute a finished run's verdicts from its files with this version's rules")
    ap.add_argument("--cols", type=int, default=160, help="terminal columns")
    ap.add_argument("--rows", type=int, default=50, help="terminal rows")
    ap.add_argument("--levels", type=_levels, default=[4, 32, 96], help="concurrency levels (req), e.g. 4,32,96")
    ap.add_argument("--seconds-per-level", type=float, default=30.0, help="load time per level (s)")
    ap.add_argument("--capture-every", type=float, default=10.0, help="seconds between screen captures")
    ap.add_argument("--steady-after", type=float, default=STEADY_AFTER_S,
                    help="captures this many seconds into a level count for the ratio (s)")
    ap.add_argument("--ready-timeout", type=float, default=READY_TIMEOUT_S, help="wait for the gate on screen (s)")
    ap.add_argument("--stop-timeout", type=float, default=STOP_TIMEOUT_S, help="the console's --stop-timeout (s)")
    ap.add_argument("--interval", type=float, default=1.0, help="the console's poll interval (s)")
    ap.add_argument("--lengths", choices=("uniform", "varied"), default="uniform",
                    help="request lengths of the load (bench.traffic.LENGTHS): uniform 256/256 (waves) or "
                         "varied 64-1024 in / 32-512 out (prefills all the time; SGLang's Decode lines then "
                         "average over them)")
    ap.add_argument("--no-load", action="store_true", help="no bench_serving (the demo server simulates load)")
    ap.add_argument("--no-warmup", action="store_true", help="no bench_serving warm-up run before the levels")
    a = ap.parse_args(ours)
    if a.cols < 20 or a.rows < 10:
        ap.error("--cols must be >= 20 and --rows >= 10")
    if a.seconds_per_level <= 0 or a.capture_every <= 0 or a.ready_timeout <= 0 or a.stop_timeout < 0:
        ap.error("--seconds-per-level, --capture-every and --ready-timeout must be > 0, --stop-timeout >= 0")
    a.server_args = server
    a.out = a.out.resolve()
    return a


class AcceptanceRun:
    """One acceptance run (see the module docstring); :meth:`execute` never raises for a failed
    step: it ends up in :attr:`error`, and :meth:`finish` always cleans up and writes summary.json."""

    def __init__(self, a: argparse.Namespace, argv: List[str]) -> None:
        self.a = a
        self.argv = argv
        self.out: Path = a.out
        self.log_dir = self.out / "logs"
        self.screens = self.out / "screens"
        self.url = url_from_server_args(a.server_args)
        key = api_key_from_server_args(a.server_args)
        self.headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.anchors = model_path_anchors(a.server_args)
        self.with_metrics = "--enable-metrics" in a.server_args
        self.term: Optional[Terminal] = None
        self.load: Optional[LoadRunner] = None
        self.server_pgid: Optional[int] = None
        self.n_screens = 0
        self.captures: List[Dict[str, Any]] = []
        self.endpoints: Dict[str, Any] = {}
        self.facts: Dict[str, Any] = {"confirmed_plus": False, "confirmed_minus": False, "help_seen": False,
                                      "help_closed": False, "exit_status": None}
        self.error: Optional[str] = None
        self.started = time.time()

    # -- small helpers

    def say(self, msg: str) -> None:
        """A progress line on the real stderr (bench_serving redirects sys.stderr) and in progress.log."""
        line = f"[{time.strftime('%H:%M:%S')}] {msg}"
        print(line, file=sys.__stderr__, flush=True)
        with open(self.out / "progress.log", "a") as f:
            f.write(line + "\n")

    def save_screen(self, tag: str, text: Optional[str] = None) -> str:
        """Save the screen as ``screens/NNN-<tag>.txt``; its path relative to the output directory."""
        text = self.term.text() if text is None and self.term else (text or "")
        name = f"{self.n_screens:03d}-{tag}.txt"
        self.n_screens += 1
        (self.screens / name).write_text(text + "\n")
        return f"screens/{name}"

    def check_alive(self, what: str) -> None:
        """Raise :class:`StepError` if the console exited or shows a server crash."""
        if not self.term.alive():
            raise StepError(f"{what}: the console exited ({self.term.exit_status()})")
        text = self.term.text()
        crash = next((m for m in CRASH_MARKS if m in text), None)
        if crash:
            raise StepError(f"{what}: the console says {crash!r}")

    def record(self, tag: str) -> None:
        """The server's answers now, as ``endpoints.json[tag]`` (the file is rewritten each time)."""
        import httpx

        with httpx.Client(headers=self.headers) as client:
            self.endpoints[tag] = record_endpoints(client, self.url, self.with_metrics, self.anchors)
        self.endpoints[tag]["nvidia-smi"] = nvidia_smi_gpus()  # what each rank's GPU report is checked against
        (self.out / "endpoints.json").write_text(json.dumps(self.endpoints, indent=1) + "\n")
        self.say(f"recorded endpoints [{tag}]: " + ", ".join(
            f"{p} {v.get('status', v.get('error'))}" for p, v in self.endpoints[tag].items()))

    # -- steps

    def launch(self) -> None:
        """Start ``specconsole launch`` in the pty."""
        cmd = [sys.executable, "-m", "console", "launch", "--log-dir", str(self.log_dir),
               "--interval", f"{self.a.interval:g}", "--stop-timeout", f"{self.a.stop_timeout:g}",
               "--", *self.a.server_args]
        env = dict(os.environ, TERM="xterm-256color", COLUMNS=str(self.a.cols), LINES=str(self.a.rows))
        env.setdefault("PYTHONUNBUFFERED", "1")
        self.facts["console_command"] = shlex.join(cmd)
        self.say(f"starting {shlex.join(cmd)} in a {self.a.cols}x{self.a.rows} pty")
        self.term = Terminal(cmd, self.a.cols, self.a.rows, env, REPO)

    def wait_ready(self) -> None:
        """Wait for SPEC ON/OFF and ``connected`` on screen (``--ready-timeout``); fail early on a crash."""
        t0 = time.monotonic()
        deadline = t0 + self.a.ready_timeout
        no_gate_since: Optional[float] = None
        while time.monotonic() < deadline:
            if self.term.wait_for(is_ready, min(5.0, max(0.1, deadline - time.monotonic()))) is not None:
                break
            if self.server_pgid is None and self.term.alive():
                self.server_pgid = find_server_group(self.term.pid, self.term.text())
            self.check_alive("waiting for the gate on screen")
            if NO_GATE_MARK not in self.term.text():
                no_gate_since = None
            elif no_gate_since is None:
                no_gate_since = time.monotonic()
            elif time.monotonic() - no_gate_since > NO_GATE_GRACE_S:
                raise StepError(f"the console shows {NO_GATE_MARK!r} for {NO_GATE_GRACE_S:g} s: the server has no "
                                f"spec_gate (started without the threshold flag?)")
        else:
            raise StepError(f"no SPEC ON/OFF and 'connected' on screen after {self.a.ready_timeout:g} s")
        self.facts["ready_s"] = round(time.monotonic() - t0, 1)
        self.server_pgid = self.server_pgid or find_server_group(self.term.pid, self.term.text())
        self.facts["server_pgid"] = self.server_pgid
        self.save_screen("ready")
        self.say(f"ready after {self.facts['ready_s']} s (server process group {self.server_pgid})")

    def server_port(self) -> str:
        """The launched server's ``--port`` (SGLang's default 30000 when not given)."""
        return flag_value(self.a.server_args, "--port") or "30000"

    def start_load_runner(self) -> None:
        """Check bench_serving's CLI and do the warm-up run (unless --no-load / --no-warmup)."""
        if self.a.no_load:
            return
        from bench.bench_serving_cli import check_bench_serving_cli
        from bench.traffic import split_url

        host, port = split_url(self.url)
        work = self.out / "load"
        work.mkdir(parents=True, exist_ok=True)
        self.facts["bench_serving_cli"] = check_bench_serving_cli([load_argv(host, port, 1, 1, 1, work / "x.jsonl")])
        self.load = LoadRunner(host, port, work, self.a.lengths)
        if not self.a.no_warmup:
            top = max(self.a.levels)
            self.say(f"warm-up: {top} requests at concurrency {top}")
            self.load.start("warmup", top, top, seed=999)
            if not self.load.wait(self.load_timeout()):
                raise StepError(f"the bench_serving warm-up still runs after {self.load_timeout():.0f} s")
        if self.load.error:  # the levels still run (captures without load, then the keys and q)
            self.say(f"bench_serving failed, no more load: {self.load.error}")

    def load_timeout(self) -> float:
        """Seconds a level's load may run in all (s)."""
        return self.a.seconds_per_level * LOAD_TIMEOUT_FACTOR + LOAD_TIMEOUT_EXTRA_S

    def capture(self, level: int, t_in_level: float) -> Dict[str, Any]:
        """One capture at ``level`` (screen file + captures.jsonl record)."""
        self.check_alive(f"level {level}")
        text = self.term.text()
        log_text = read_tail(server_log(self.log_dir))
        load_active = self.a.no_load or (self.load is not None and self.load.busy)
        rec = capture_record(text, log_text, now=time.time(), level=level, t_in_level=t_in_level,
                             load_active=load_active, screen_file=self.save_screen(str(level), text))
        self.captures.append(rec)
        with open(self.out / "captures.jsonl", "a") as f:
            f.write(json.dumps(rec) + "\n")
        self.say(f"c{level} +{rec['t_in_level_s']:.0f}s: shown {rec['shown_tok_s']} tok/s ({rec['shown_running']} req), "
                 f"server {rec['server_tok_s']} tok/s ({rec['server_running']} req, {rec['server_line_age_s']} s old), "
                 f"ratio {rec['ratio']}, {rec['spec_word']}")
        return rec

    def run_level(self, index: int, level: int) -> None:
        """Load at ``level`` for ``--seconds-per-level`` (more bench_serving runs if one ends early;
        the last one is waited for), a capture every ``--capture-every`` s, the answers recorded once
        half-way."""
        secs, every = self.a.seconds_per_level, self.a.capture_every
        t0 = time.monotonic()
        deadline, hard = t0 + secs, t0 + self.load_timeout()
        next_capture, recorded, runs = t0 + every, False, 0
        self.say(f"level {level}: {secs:g} s")
        while True:
            now = time.monotonic()
            left = deadline - now
            if self.load is not None and not self.load.busy and not self.load.error and left >= MIN_RUN_S:
                self.load.start(f"c{level}-{runs}", level, prompts_for(level, left, self.a.lengths), seed=100 * (index + 1) + runs)
                runs += 1
            if now >= next_capture:
                self.capture(level, now - t0)
                next_capture += every
                if not recorded and now - t0 >= secs / 2:
                    self.record(f"load-c{level}")
                    recorded = True
            if now >= deadline and not (self.load is not None and self.load.busy):
                break
            if now >= hard:
                raise StepError(f"bench_serving at concurrency {level} still runs after {self.load_timeout():.0f} s")
            time.sleep(max(0.05, min(0.5, next_capture - time.monotonic())))
        if not recorded:
            self.record(f"load-c{level}")

    def press_and_wait(self, key: str, cond: Callable[[str], bool], tag: str, timeout_s: float = KEY_TIMEOUT_S) -> bool:
        """Type ``key``, wait up to ``timeout_s`` s for ``cond`` on screen, save the screen as ``tag``."""
        self.check_alive(f"before {tag}")
        self.term.press(key)
        ok = self.term.wait_for(cond, timeout_s) is not None
        self.save_screen(tag)
        self.say(f"{tag}: {'seen' if ok else 'NOT seen'} within {timeout_s:g} s")
        return ok

    def keys(self) -> None:
        """``+`` (confirmed?), ``-`` (confirmed?), ``?`` (help), Escape (help gone)."""
        before = confirmations(self.term.text())
        self.facts["confirmed_plus"] = self.press_and_wait("+", lambda t: bool(confirmations(t) - before), "plus")
        after_plus = confirmations(self.term.text())
        self.facts["confirmed_minus"] = self.press_and_wait("-", lambda t: bool(confirmations(t) - after_plus), "minus")
        self.facts["confirmations"] = sorted(confirmations(self.term.text()) - before)
        self.facts["help_seen"] = self.press_and_wait("?", lambda t: HELP_MARK in t, "help", 10.0)
        time.sleep(0.3)
        self.facts["help_closed"] = self.press_and_wait(ESCAPE, lambda t: HELP_MARK not in t, "help-closed", 10.0)
        if not self.facts["help_closed"]:  # one more Escape; q would close the help, not quit
            self.facts["help_closed"] = self.press_and_wait(ESCAPE, lambda t: HELP_MARK not in t, "help-closed", 10.0)

    def quit(self) -> None:
        """``q``; wait for the console to exit (stop timeout + :data:`EXIT_GRACE_S`); record what is left."""
        self.check_alive("before q")
        self.term.press("q")
        timeout = self.a.stop_timeout + EXIT_GRACE_S
        t0 = time.monotonic()
        status = self.term.wait_exit(timeout)
        self.facts["exit_status"] = status
        self.facts["exit_s_after_q"] = round(time.monotonic() - t0, 1)
        self.say(f"console exit status {status}")
        time.sleep(0.2)  # the last output reaches the screen
        self.save_screen("quit")
        if status is None:
            raise StepError(f"the console still runs {timeout:g} s after q")

    def execute(self) -> None:
        """All steps; a failure or SIGTERM/SIGHUP lands in :attr:`error`."""
        try:
            self.launch()
            self.wait_ready()
            time.sleep(min(2.0, self.a.capture_every))  # a poll or two
            self.save_screen("idle")
            self.record("idle")
            self.start_load_runner()
            for i, level in enumerate(self.a.levels):
                self.run_level(i, level)
            self.keys()
            self.quit()
        except KeyboardInterrupt as exc:
            self.error = f"interrupted ({exc})"
        except Exception as exc:  # noqa: BLE001 - every failure ends in summary.json
            self.error = f"{type(exc).__name__}: {exc}"
        if self.error:
            self.say(f"error: {self.error}")
            if self.term is not None:
                self.save_screen("error")

    def finish(self) -> Dict[str, Any]:
        """Record leftovers and GPU memory, stop whatever still runs, write summary.json."""
        try:
            if self.term is not None and self.server_pgid is None and self.term.alive():
                self.server_pgid = find_server_group(self.term.pid, self.term.text())
            left = leftovers(self.server_pgid, self.server_port())
            self.facts["leftover_pids"] = [r["pid"] for r in left]
            self.facts["leftover"] = left
            if self.term is not None and self.term.alive():
                self.term.kill(self.a.stop_timeout + 15.0)
                self.facts["console_killed"] = True
                self.facts["console_status_after_kill"] = self.term.exit_status()
            kill_group(self.server_pgid, 15.0)
            self.facts["leftover_after_cleanup"] = [r["pid"] for r in leftovers(self.server_pgid, self.server_port())]
            if shutil.which("nvidia-smi"):
                time.sleep(2.0)  # the driver frees an exited process's memory
            mem, note = gpu_memory_used()
            self.facts["gpu_mem_after_mib"], self.facts["gpu_mem_note"] = mem, note
        except BaseException as exc:  # noqa: BLE001 - the summary still gets written
            self.error = self.error or f"cleanup: {type(exc).__name__}: {exc}"
        summary = self.summary()
        (self.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
        self.say(f"wrote {self.out / 'summary.json'}" + (f" (error: {self.error})" if self.error else ""))
        return summary

    def summary(self) -> Dict[str, Any]:
        """summary.json: ``command``, ``date``, ``levels``, ``per_level`` (:func:`level_stats` per
        level, with its bench_serving runs), ``console_access_lines_seen`` (in any capture),
        ``plain_words_seen``, ``confirmed_plus`` / ``confirmed_minus``, ``help_seen``,
        ``exit_status``, ``leftover_pids``, ``gpu_mem_after_mib``, ``error`` and more facts."""
        runs = self.load.runs if self.load is not None else []
        per_level = {}
        for level in self.a.levels:
            stats = level_stats(self.captures, level, self.a.steady_after)
            stats["load_runs"] = [r for r in runs if r["concurrency"] == level and r["tag"] != "warmup"]
            stats.update(vs_clients(stats))
            per_level[str(level)] = stats
        f = self.facts
        return {
            "command": "python -m bench.console_terminal " + shlex.join(self.argv),
            "date": datetime.fromtimestamp(self.started).isoformat(timespec="seconds"),
            "duration_s": round(time.time() - self.started, 1),
            "url": self.url, "cols": self.a.cols, "rows": self.a.rows, "levels": self.a.levels,
            "seconds_per_level": self.a.seconds_per_level, "capture_every_s": self.a.capture_every,
            "steady_after_s": self.a.steady_after, "load": not self.a.no_load,
            "per_level": per_level,
            "all_within_10pct": all(v["within_10pct"] for v in per_level.values()),
            "all_within_10pct_vs_clients": all(v["within_10pct_vs_clients"] for v in per_level.values()),
            "console_access_lines_seen": any(c["access_lines_on_screen"] for c in self.captures),
            "plain_words_seen": any(c["plain_words"] for c in self.captures),
            "confirmed_plus": f["confirmed_plus"], "confirmed_minus": f["confirmed_minus"],
            "confirmations": f.get("confirmations", []),
            "help_seen": f["help_seen"], "help_closed": f["help_closed"],
            "exit_status": f["exit_status"],
            "leftover_pids": f.get("leftover_pids"), "leftover": f.get("leftover"),
            "leftover_after_cleanup": f.get("leftover_after_cleanup"),
            "console_killed": f.get("console_killed", False),
            "console_status_after_kill": f.get("console_status_after_kill"),
            "gpu_mem_after_mib": f.get("gpu_mem_after_mib"), "gpu_mem_note": f.get("gpu_mem_note"),
            "ready_s": f.get("ready_s"), "exit_s_after_q": f.get("exit_s_after_q"), "server_pgid": self.server_pgid,
            "server_log": str(server_log(self.log_dir) or ""),
            "console_command": f.get("console_command"), "bench_serving_cli": f.get("bench_serving_cli"),
            "warmup": [r for r in runs if r["tag"] == "warmup"],
            "load_error": self.load.error if self.load is not None else None,
            "captures": len(self.captures), "pyte_feed_errors": self.term.feed_errors if self.term else None,
            "error": self.error,
        }


def main(argv: Optional[List[str]] = None) -> int:
    """Run it; exit code 0 when every step ran (the verdict is in summary.json), 1 on an error
    (``error``) or when bench_serving failed (``load_error``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    a = parse_args(argv)
    if a.recheck:  # before anything below clears the run's files
        try:
            result = recheck(a.out)
        except (OSError, ValueError) as exc:
            print(f"--recheck {a.out}: {exc}", file=sys.stderr)
            return 1
        result["command"] = "python -m bench.console_terminal " + shlex.join(argv)
        (a.out / "summary-recheck.json").write_text(json.dumps(result, indent=1) + "\n")
        print(json.dumps(result, indent=1))
        return 0
    for sub in ("screens", "logs"):
        (a.out / sub).mkdir(parents=True, exist_ok=True)
    for stale in ("captures.jsonl", "summary.json", "endpoints.json", "progress.log"):
        (a.out / stale).unlink(missing_ok=True)
    for stale in (a.out / "screens").glob("[0-9][0-9][0-9]-*.txt"):  # an earlier run's screens
        stale.unlink()
    run = AcceptanceRun(a, argv)
    old = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        run.execute()
    finally:
        try:
            summary = run.finish()
        finally:
            for sig, handler in old.items():
                signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
    return 1 if summary["error"] or summary["load_error"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
