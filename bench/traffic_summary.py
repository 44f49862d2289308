"""``summarize-traffic``: ratio tables from traffic CSVs (``bench.traffic``'s rows).

Per p_wrong, workload and level (closed-loop concurrency, or Poisson rate and cap), per worker
(v2, v1) and attention backend: output tok/s of none / always / gate / off / auto and the ratios
off / none, gate / best static, auto / best static (best static = the higher of none and always);
for v1 rows also against the v2 none row; for Poisson rows the same of mean end-to-end latency.
"""

from __future__ import annotations

import argparse
import csv
import math
import re
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from bench.errors import BenchError, not_a_regular_file
from bench.traffic import ARRIVALS, CONFIGS, DEFAULT_WORKLOADS, POSITIVE_COLUMNS, REQUIRED_COLUMNS, WORKERS

#: what an auto server's gate did during a row (``bench.ab_collect``'s extra columns, when there)
GATE_COLUMNS = ("gate_on_share", "gate_switches", "gate_probe_steps")


def read_traffic_rows(paths: List[Path], empty_ok: bool = False) -> List[Dict[str, Any]]:
    """The rows of traffic CSVs, in order (values are strings, as ``csv`` reads them). With
    ``empty_ok`` a file without rows (empty, or a header alone: a run cut short) gives none.

    Raises:
        BenchError: a path is missing or a directory; a file is not UTF-8 text, lacks one of
            :data:`REQUIRED_COLUMNS` or has no rows (unless ``empty_ok``); a row has more values
            than columns, or a cell is not what its column holds (see :func:`_row_problem`). The
            message names the file, and the line and column for a cell.
    """
    rows: List[Dict[str, Any]] = []
    for path in paths:
        if not path.exists():
            raise BenchError(f"no such file: {path}")
        why = not_a_regular_file(path)
        if why is not None:
            raise BenchError(f"{path} {why}")
        got = []
        try:
            with path.open(newline="", encoding="utf-8-sig") as f:
                reader = csv.DictReader(f)
                header = reader.fieldnames or REQUIRED_COLUMNS  # None: an empty file, no rows
                missing = [c for c in REQUIRED_COLUMNS if c not in header]
                if missing:
                    raise BenchError(f"{path} is not a traffic CSV: missing columns {', '.join(missing)}")
                for row in reader:
                    if None in row:
                        raise BenchError(f"{path}:{reader.line_num}: more values than columns")
                    problem = _row_problem(row)
                    if problem:
                        raise BenchError(f"{path}:{reader.line_num}: column {problem[0]}: {problem[1]}")
                    got.append(row)
        except UnicodeDecodeError:
            raise BenchError(f"{path} is not a text CSV (not UTF-8; binary file?)") from None
        except (OSError, csv.Error) as exc:
            raise BenchError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
        if not got and not empty_ok:
            raise BenchError(f"{path} has no rows")
        rows += got
    return rows


def _number(value: str, integer: bool, positive: bool) -> Optional[str]:
    """Why ``value`` is not a measurement of that kind; None when it is."""
    kind = "an integer" if integer else "a number"
    try:
        x = int(value) if integer else float(value)
    except ValueError:
        return f"{value!r} is not {kind}"
    if not math.isfinite(x) or x < 0 or (positive and x == 0):
        return f"{value!r} is not a measurement (needs {kind} {'> 0' if positive else '>= 0'})"
    return None


def _row_problem(row: Dict[str, Any]) -> Optional[Tuple[str, str]]:
    """(column, why) for the first cell of ``row`` that is not what its column holds, else None:
    config in :data:`CONFIGS`; workload ``<lengths>-<arrivals>`` with arrivals in :data:`ARRIVALS`;
    worker in :data:`WORKERS`; p_wrong not empty; a closed loop's concurrency a positive integer
    and request_rate empty, the other way round for Poisson (a positive rate); threshold a positive
    integer for gate and off, ``auto`` (or an integer) for auto, empty otherwise; the latency and
    throughput columns > 0; the extra columns, when there, empty or numbers (:data:`GATE_COLUMNS`:
    a share in [0, 1], counts >= 0)."""
    cell = {k: (v or "").strip() for k, v in row.items() if k is not None}
    short = [c for c in REQUIRED_COLUMNS if row.get(c) is None]
    if short:
        return short[0], "is missing (short line)"
    if cell["config"] not in CONFIGS:
        return "config", f"{cell['config']!r} is not one of {', '.join(CONFIGS)}"
    lengths, _, arrivals = cell["workload"].partition("-")
    if not re.fullmatch(r"[a-z0-9_]+", lengths) or arrivals not in ARRIVALS:
        return "workload", f"{cell['workload']!r} is not <lengths>-<arrivals> with arrivals in {', '.join(ARRIVALS)}"
    if cell["worker"] not in WORKERS:
        return "worker", f"{cell['worker']!r} is not one of {', '.join(WORKERS)}"
    if not cell["p_wrong"]:
        return "p_wrong", "is empty"
    level, other = ("concurrency", "request_rate") if arrivals == "closed" else ("request_rate", "concurrency")
    if cell[other]:
        return other, f"must be empty for a {arrivals} workload, got {cell[other]!r}"
    if not cell[level]:
        return level, f"is empty (a {arrivals} workload needs it)"
    why = _number(cell[level], level == "concurrency", True)
    if why:
        return level, why
    t = cell["threshold"]
    if cell["config"] in ("gate", "off") or (cell["config"] == "auto" and t != "auto"):
        why = "is empty" if not t else _number(t, True, True)
        if why:
            return "threshold", why + (" (auto rows say 'auto' or N)" if cell["config"] == "auto" else "")
    elif cell["config"] in ("none", "always") and t:
        return "threshold", f"must be empty for {cell['config']}, got {t!r}"
    for column in POSITIVE_COLUMNS:
        why = "is empty" if not cell[column] else _number(cell[column], False, True)
        if why:
            return column, why
    for column, integer, positive in (("accept_length", False, False), ("num_requests", True, True),
                                      ("completed", True, False), ("duration_s", False, True),
                                      ("max_concurrency", True, True)):
        if cell.get(column):
            why = _number(cell[column], integer, positive)
            if why:
                return column, why
    for column in GATE_COLUMNS:
        if cell.get(column):
            share = column == "gate_on_share"
            why = _number(cell[column], not share, False)
            if why is None and share and float(cell[column]) > 1:
                why = f"is a share of decode steps (0-1), got {cell[column]!r}"
            if why:
                return column, why
    return None


def _level(row: Dict[str, Any]) -> Tuple[str, float, str]:
    """(arrivals, level, cap) of a row: ("closed", concurrency, "") or ("poisson", rate, max_concurrency)."""
    arrivals = row["workload"].partition("-")[2]
    if arrivals == "closed":
        return arrivals, float(row["concurrency"]), ""
    return arrivals, float(row["request_rate"]), (row.get("max_concurrency") or "").strip()


def _key(row: Dict[str, Any]) -> tuple:
    return (str(row["p_wrong"]), row["workload"], _level(row), row["worker"], row["attention_backend"] or "",
            row["config"], row["threshold"] if row["config"] == "gate" else "")


def traffic_warnings(rows: List[Dict[str, Any]]) -> List[str]:
    """What the tables would otherwise pick or hide silently: measurements that appear more than
    once (the last one read is shown) and rows in which not every request completed."""
    seen: Dict[tuple, int] = {}
    for r in rows:
        seen[_key(r)] = seen.get(_key(r), 0) + 1
    out = []
    dups = [k for k, n in seen.items() if n > 1]
    if dups:
        shown = ", ".join(f"{k[5]} {k[1]} {_fmt_level(k[2])} {k[3]} p={k[0]}" for k in dups[:4])
        out.append(f"{len(dups)} measurement(s) appear more than once ({shown}{' ...' if len(dups) > 4 else ''}); "
                   f"the last one read is shown")
    lost = [r for r in rows if (r.get("completed") or "").strip() and (r.get("num_requests") or "").strip()
            and int(r["completed"]) < int(r["num_requests"])]
    if lost:
        out.append(f"{len(lost)} row(s) had requests that did not complete (see completed / num_requests)")
    return out


def _fmt_level(level: Tuple[str, float, str]) -> str:
    arrivals, x, cap = level
    if arrivals == "closed":
        return f"c={x:g}"
    return f"r={x:g}/s" + (f" cap {cap}" if cap else "")


def _ratio(x: Optional[float], y: Optional[float]) -> Optional[float]:
    return round(x / y, 3) if x is not None and y else None


def traffic_ratios(rows: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """One record per (p_wrong, workload, level, worker, attention backend, gate N), in the
    order the tables print them: ``tok_s`` and ``e2e_ms`` (mean end-to-end latency) per config,
    and the ratios, each None when a side is missing:

    - ``off/none``, ``gate/best``, ``auto/best`` of output tok/s, against rows of the same worker
      and attention backend; best static = the larger of none and always (None unless both exist);
    - for v1 records also ``off/none_v2``, ``gate/none_v2``, ``auto/none_v2``: against the v2
      ``none`` row of the same level (of the same attention backend, else the only v2 none row
      there; ``none_v2_attention`` then names its backend);
    - ``e2e``: the same ratios of mean e2e latency for Poisson workloads (best static = the lower
      latency of none and always; a ratio < 1 is faster).
    """
    index: Dict[tuple, Dict[str, Any]] = {}
    for r in rows:
        index[_key(r)] = r  # the last one read (traffic_warnings says so)
    groups: Dict[tuple, Dict[str, Dict[Any, Dict[str, Any]]]] = {}
    order_w: Dict[str, int] = {}
    for (p, w, level, worker, attn, config, n), r in index.items():
        order_w.setdefault(w, len(order_w))
        g = groups.setdefault((p, w, level, worker, attn), {})
        g.setdefault(config, {})[n] = r

    def rank(k: tuple) -> tuple:
        p, w, level, worker, attn = k
        known = DEFAULT_WORKLOADS.index(w) if w in DEFAULT_WORKLOADS else len(DEFAULT_WORKLOADS) + order_w[w]
        return (p, known, w, level[0], level[1], level[2], WORKERS.index(worker), attn)

    out = []
    for k in sorted(groups, key=rank):
        p, w, level, worker, attn = k
        g = groups[k]
        v2_none, v2_attn = None, None
        if worker != "v2":
            same = groups.get((p, w, level, "v2", attn), {}).get("none")
            others = [(a2, groups[(p2, w2, l2, wk2, a2)]["none"]) for (p2, w2, l2, wk2, a2) in groups
                      if (p2, w2, l2, wk2) == (p, w, level, "v2") and "none" in groups[(p2, w2, l2, wk2, a2)]]
            if same:
                v2_none = same[""]
            elif len(others) == 1:
                v2_attn, v2_none = others[0][0], others[0][1][""]
        for n in sorted(g.get("gate", {"": None}), key=lambda t: (t == "", int(t) if t else 0)):
            cells = {c: g[c][""] for c in ("none", "always", "off", "auto") if c in g}
            if n != "" and "gate" in g:
                cells["gate"] = g["gate"][n]
            rec = {"p_wrong": p, "workload": w, "level": level, "worker": worker, "attention_backend": attn,
                   "threshold": n, "tok_s": {}, "e2e_ms": {}}
            for c, r in cells.items():
                rec["tok_s"][c] = float(r["output_tok_s"])
                rec["e2e_ms"][c] = float(r["mean_e2e_ms"])
            rec["ratios"] = _ratios(rec["tok_s"], max, v2_none and float(v2_none["output_tok_s"]), worker)
            if level[0] == "poisson":
                rec["e2e"] = _ratios(rec["e2e_ms"], min, v2_none and float(v2_none["mean_e2e_ms"]), worker)
            rec["none_v2_attention"] = v2_attn
            if "auto" in cells and any((cells["auto"].get(c) or "").strip() for c in GATE_COLUMNS):
                rec["auto_gate"] = {c: (cells["auto"].get(c) or "").strip() for c in GATE_COLUMNS}
            out.append(rec)
    return out


def _ratios(values: Dict[str, float], best, v2_none: Optional[float], worker: str) -> Dict[str, Optional[float]]:
    static = best(values["none"], values["always"]) if "none" in values and "always" in values else None
    out = {"off/none": _ratio(values.get("off"), values.get("none")),
           "gate/best": _ratio(values.get("gate"), static), "auto/best": _ratio(values.get("auto"), static)}
    if worker != "v2":
        for c in ("off", "gate", "auto"):
            out[f"{c}/none_v2"] = _ratio(values.get(c), v2_none)
    return out


def _table_row(cells: List[str]) -> str:
    """One markdown table row; a ``|`` inside a cell (a label from a CSV) is escaped."""
    return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"


def traffic_tables(rows: List[Dict[str, Any]]) -> str:
    """Markdown tables of :func:`traffic_ratios` per p_wrong: output tok/s for every workload,
    then mean e2e latency (ms) for the Poisson ones, then, where auto rows carry
    :data:`GATE_COLUMNS`, what auto's gate did during each (ON share, switches, probe steps).
    Missing values print as ``n/a``; a ``/ none v2`` ratio against another attention backend's row
    is marked ``*``."""
    recs = traffic_ratios(rows)
    lines: List[str] = []

    def v(x: Optional[float]) -> str:  # tok/s, ms
        return "n/a" if x is None else f"{x:.1f}"

    def f(x: Optional[float]) -> str:  # a ratio
        return "n/a" if x is None else f"{x:.3f}"

    for p in sorted({r["p_wrong"] for r in recs}):
        mine = [r for r in recs if r["p_wrong"] == p]
        v1 = any(r["worker"] != "v2" for r in mine)
        lines.append(f"p_wrong={p}")
        for title, values, ratios, pick in (
                ("output tok/s (c = max concurrent requests, closed loop; r = Poisson arrivals per second, "
                 "at most cap in flight); best static = the higher of none and always", "tok_s", "ratios", mine),
                ("mean end-to-end latency, ms (Poisson arrivals; a ratio < 1 is faster); best static = the "
                 "lower of none and always", "e2e_ms", "e2e", [r for r in mine if "e2e" in r])):
            if not pick:
                continue
            head = ["workload", "level", "worker", "attention", "gate N", *CONFIGS, "off / none", "gate / best static",
                    "auto / best static"] + (["off / none v2", "gate / none v2", "auto / none v2"] if v1 else [])
            lines += ["", title, "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
            for r in pick:
                rt = r[ratios]
                mark = "*" if r["none_v2_attention"] else ""
                cells = [r["workload"], _fmt_level(r["level"]), r["worker"], r["attention_backend"] or "n/a",
                         r["threshold"] or "", *[v(r[values].get(c)) for c in CONFIGS],
                         f(rt["off/none"]), f(rt["gate/best"]), f(rt["auto/best"])]
                if v1:
                    cells += [f(rt[k]) + mark if rt.get(k) is not None else ("" if r["worker"] == "v2" else "n/a")
                              for k in ("off/none_v2", "gate/none_v2", "auto/none_v2")]
                lines.append(_table_row(cells))
        gated = [r for r in mine if "auto_gate" in r]
        if gated:  # a row auto lost with ON share as the better mode's and few probes: the server, not the decision
            lines += ["", "what auto's gate did during each row (bench.ab_collect's gate columns, over the repeats)", "",
                      "| workload | level | worker | attention | auto / best static | ON share of decode steps "
                      "| switches | probe steps |", "|" + "---|" * 8]
            for r in gated:
                g = r["auto_gate"]
                lines.append(_table_row([r["workload"], _fmt_level(r["level"]), r["worker"],
                                         r["attention_backend"] or "n/a", f(r["ratios"]["auto/best"]),
                                         g["gate_on_share"] or "n/a", g["gate_switches"] or "n/a",
                                         g["gate_probe_steps"] or "n/a"]))
        stars = sorted({r["none_v2_attention"] for r in mine if r["none_v2_attention"]})
        if stars:
            lines.append(f"* against the v2 none row of attention backend {', '.join(stars)}")
        lines.append("")
    return "\n".join(lines)


def summarize_traffic(a: argparse.Namespace) -> None:
    """The ``summarize-traffic`` subcommand: :func:`traffic_tables` of ``a.csv``; warnings on stderr.

    Raises:
        BenchError: as :func:`read_traffic_rows`.
    """
    rows = read_traffic_rows(a.csv)
    for warning in traffic_warnings(rows):
        print(f"warning: {warning}", file=sys.stderr)
    print(traffic_tables(rows), end="")
