"""One real-traffic CSV from ``bench.ab_traffic`` runs: each server's rows, averaged over the repeats.

``bench.ab_traffic`` measures every row ``--repeats`` times per server (alternating the servers), into
``OUT/repeatN/SIDE/real-traffic.csv``. Issue 16's and 17's tables want one row per configuration and
row of the plan (``bench/results/real-traffic.csv``, ``auto-threshold.csv``); this writes them:

    python -m bench.ab_collect RUN [RUN ...] --csv bench/results/real-traffic.csv

Per run, side and row of the plan (config, workload, p_wrong, worker, attention backend, level,
threshold): the arithmetic mean of each measured column over the repeats in which every side
being collected measured that row's level (a repeat that lacks a side's row there, as a run cut
short inside its last interleaved block does, counts for none of them, and is said) (output
tok/s, TPOT, end-to-end latency, TTFT, accept length, ...; counts summed), with more columns:
``repeats`` (how many), ``run`` (the run's directory name), ``side`` and, for a gate server, what its
gate did during the row (:data:`GATE_EXTRA`: the ON share of decode steps, switches, probe steps).
``bench.throughput summarize-traffic`` reads the result like any traffic CSV (its ratios: off / none,
auto / best static, ...). Two sides of one run with the same configuration (e.g. forced off with and without an opt-in lever) are told
apart by ``run`` and ``side``; ``RUN:a,b`` takes only those sides of a run (summarize-traffic wants
one row per configuration and row of the plan).

No speculation has no draft: a ``none`` side is labelled with its pair's p, which for a run whose
speculative sides all ran another draft beside the same target (``--b-models`` / ``--c-models``) is not
the draft its rows are the baseline of. Such ``none`` rows take the p of the run's speculative sides
(:func:`label_none_with_draft`), so ``summarize-traffic`` finds them beside their draft's rows.
``--share-none`` goes one step further for runs that started no ``none`` server at all (a second draft
measured beside the first run's target, to save a server's rows of device time): the ``none`` rows of
the other runs also stand as the baseline of every draft p that has none of its own
(:func:`share_none`); the copies keep their ``run`` and ``side``. The none server must have been
started as the borrowing run's servers were (:func:`check_shared_baseline`: the KV pool, memory,
attention backend, scheduler, batch limits), else nothing is written.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from bench import traffic_summary
from bench.errors import BenchError, not_a_regular_file

#: the columns that name a row of the plan (what the repeats of one server share)
KEY_COLUMNS = ("config", "workload", "p_wrong", "worker", "attention_backend", "concurrency", "request_rate",
               "threshold")
#: summed over the repeats instead of averaged
COUNT_COLUMNS = ("num_requests", "completed")
#: what a gate server's gate did during the row (``spec_gate_delta`` in its traffic record:
#: ``bench.traffic.gate_row_delta``), over the repeats: its ON share of decode steps, switches and
#: auto's probe steps (empty for servers without the gate and for runs from before the record)
GATE_EXTRA = traffic_summary.GATE_COLUMNS
EXTRA = ("repeats", "run", "side") + GATE_EXTRA
Level = Tuple[str, str, str]  # (workload, concurrency, request_rate) as the CSV writes them
Tagged = List[Tuple[str, Dict]]  # (repeat folder name, row or gate record)


def _number(text: str) -> Optional[float]:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def _format(value: float) -> str:
    return str(int(value)) if value == int(value) else f"{value:.4f}".rstrip("0")


def collect(run: Path, only: Optional[List[str]] = None) -> List[Dict[str, str]]:
    """The averaged rows of one ``bench.ab_traffic`` output directory, sides in order (A, B, C),
    or only the sides in ``only``.

    A run cut short (no ``ab-summary.json``: the device time ran out) gives the rows of the repeats
    in which every side collected measured them (:func:`_matched_repeats`); ``repeats`` says how
    many each row has. A side's CSV without rows (a header alone, or empty), and a repeat without
    the side's CSV, are left out with a note on stderr.

    Raises:
        BenchError: neither ``ab-summary.json`` nor a ``repeat*/SIDE/real-traffic.csv`` there (not
            an ab_traffic run), a side in ``only`` the run did not have, no rows in any repeat, or a
            side's CSV that is not a traffic CSV (not UTF-8, a cell not what its column holds:
            ``traffic_summary.read_traffic_rows``, which names the file, line and column).
    """
    from bench.ab_traffic import SIDES
    from bench.traffic import TRAFFIC_COLUMNS

    summary_path = run / "ab-summary.json"
    repeat_dirs = _repeat_dirs(run)

    def has_rows(side: str) -> bool:
        return any((rd / side / "real-traffic.csv").exists() for rd in repeat_dirs)
    try:
        why = not_a_regular_file(summary_path)
        if why is not None:
            raise OSError(f"{summary_path} {why}")
        servers = json.loads(summary_path.read_text()).get("servers")
        if not isinstance(servers, dict) or not servers:
            raise ValueError(f"its 'servers' is {json.dumps(servers)[:40]}, not the sides' servers")
        sides = [s for s in SIDES if s in servers]
        unlisted = [s for s in SIDES if s not in servers and has_rows(s)]
        if unlisted:
            print(f"note: {run}: side(s) {', '.join(unlisted)} have rows but {summary_path.name} does not list them "
                  f"(left out)", file=sys.stderr)
    except (OSError, ValueError, AttributeError) as exc:
        # a run cut short (device time) writes no summary: its sides are the repeats' folders
        sides = [s for s in SIDES if has_rows(s)]
        if not sides:
            raise BenchError(f"{run} is not a bench.ab_traffic run ({summary_path}: "
                             f"{getattr(exc, 'strerror', None) or exc}; no repeat*/SIDE/real-traffic.csv)") from None
        if summary_path.exists():
            print(f"note: {summary_path} is unreadable ({exc}): its sides taken from the repeat folders "
                  f"({', '.join(sides)})", file=sys.stderr)
    missing = sorted(set(only or ()) - set(sides))
    if missing:
        raise BenchError(f"{run} has no side {', '.join(missing)} (it has {', '.join(sides) or 'none'})")
    sides = [s for s in sides if only is None or s in only]
    measured = {side: _side_rows(run, side, repeat_dirs) for side in sides}
    matched = _matched_repeats(run, {side: groups for side, (groups, _) in measured.items()})
    out: List[Dict[str, str]] = []
    for side in sides:
        groups, deltas = measured[side]
        for tagged in groups.values():
            level = _level_of(tagged[0][1])
            rows = [r for repeat, r in tagged if repeat in matched[level]]
            if not rows:
                continue
            merged = {c: rows[0].get(c, "") for c in TRAFFIC_COLUMNS}
            for column in TRAFFIC_COLUMNS:
                if column in KEY_COLUMNS:
                    continue
                values = [v for v in (_number(r.get(column, "")) for r in rows) if v is not None]
                if values:
                    total = sum(values)
                    merged[column] = _format(total if column in COUNT_COLUMNS else total / len(values))
            merged.update(repeats=str(len(rows)), run=run.name, side=side)
            merged.update(gate_columns([d for repeat, d in deltas.get(level, []) if repeat in matched[level]]))
            out.append(merged)
    label_none_with_draft(out)
    if not out:
        raise BenchError(f"{run}: no rows in {', '.join(str(d.name) for d in repeat_dirs) or 'any repeat'}")
    return out


def _level_of(row: Dict) -> Level:
    """A row's (workload, concurrency, request_rate) as the CSV writes them (a traffic record's
    numbers as text: ``16``, ``4``)."""
    return str(row.get("workload", "")), str(row.get("concurrency", "")), str(row.get("request_rate", ""))


def _repeat_dirs(run: Path) -> List[Path]:
    """The run's ``repeatN`` folders in order of N; a second folder for the same N (``repeat01``
    beside ``repeat1``: a copy) is left out with a note, so no repeat counts twice."""
    numbered = [(int(p.name[6:]), p) for p in run.glob("repeat*")
                if p.is_dir() and p.name[6:].isascii() and p.name[6:].isdigit()]
    by_number: Dict[int, Path] = {}
    for n, p in sorted(numbered, key=lambda np: (np[0], np[1].name != f"repeat{np[0]}", np[1].name)):
        if n in by_number:  # the plain name sorts first: this one is the copy
            print(f"note: {run}: {p.name} is another folder of repeat {n} (left out)", file=sys.stderr)
            continue
        by_number[n] = p
    return list(by_number.values())


def _matched_repeats(run: Path, groups: Dict[str, Dict[Tuple[str, ...], Tagged]]) -> Dict[Level, set]:
    """Per level, the repeats in which every side that measured the level at all measured it.

    ``bench.ab_traffic --interleave`` runs each row on every side before the next, so a repeat is a
    block of one row's sides measured minutes apart; a run cut short ends inside a block. Averaging
    each side over the repeats it has would compare one side's three repeats with another's two (on
    h100-2026-12-07d auto's third repeat at 128 requests moved auto / none from 0.948 to 0.954):
    only the blocks every side finished count, and the rows left out are said on stderr."""
    have: Dict[Level, Dict[str, set]] = {}
    for side, side_groups in groups.items():
        levels_seen: Dict[Level, int] = {}
        for tagged in side_groups.values():
            level = _level_of(tagged[0][1])
            levels_seen[level] = levels_seen.get(level, 0) + 1
            have.setdefault(level, {}).setdefault(side, set()).update(repeat for repeat, _ in tagged)
        for level, n in levels_seen.items():
            if n > 1:  # a key column (threshold, backend, p, ...) differs between its repeats
                print(f"note: {run} side {side}: {_level_text(level)} has {n} rows that differ in "
                      f"{', '.join(KEY_COLUMNS[:5])} or threshold between repeats (each kept apart)", file=sys.stderr)
    matched: Dict[Level, set] = {}
    dropped: Dict[Tuple[str, str], List[Level]] = {}
    for level, by_side in have.items():
        matched[level] = set.intersection(*by_side.values())
        if len(by_side) == 1 and len(groups) > 1:
            (side,) = by_side
            print(f"note: {run}: {_level_text(level)} measured by side {side} only (nothing beside it to compare)",
                  file=sys.stderr)
        for side, repeats in by_side.items():
            for repeat in repeats - matched[level]:
                dropped.setdefault((side, repeat), []).append(level)
    for (side, repeat), levels in sorted(dropped.items()):
        what = f"{_level_text(levels[0])} row" if len(levels) == 1 else f"{len(levels)} rows"
        print(f"note: {run} side {side}: {repeat}'s {what} left out (not every side measured that level there)",
              file=sys.stderr)
    return matched


def _level_text(level: Level) -> str:
    workload, c, r = level
    return f"{workload} {'c=' + c if c else 'r=' + r}"


def _side_rows(run: Path, side: str, repeat_dirs: List[Path]) -> Tuple[Dict[Tuple[str, ...], Tagged],
                                                                       Dict[Level, Tagged]]:
    """One side's rows of every repeat, grouped by :data:`KEY_COLUMNS`, and the gate's records of
    them by level (:func:`gate_deltas`, counted only for rows the repeat's CSV has: a copied record
    counts once), each with its repeat's folder name. A repeat without the side's CSV, a CSV without
    rows and a level twice in one CSV are said on stderr.

    Raises:
        BenchError: a CSV that is not a traffic CSV (``traffic_summary.read_traffic_rows``).
    """
    from bench.traffic_summary import read_traffic_rows

    groups: Dict[Tuple[str, ...], Tagged] = {}
    deltas: Dict[Level, Tagged] = {}
    absent = []
    for rd in repeat_dirs:
        path = rd / side / "real-traffic.csv"
        if not path.exists():
            absent.append(rd.name)
            continue
        got = read_traffic_rows([path], empty_ok=True)
        if not got:
            print(f"note: {path} has no rows (left out)", file=sys.stderr)
        levels: Dict[Level, int] = {}
        for row in got:
            groups.setdefault(tuple(row.get(c, "") for c in KEY_COLUMNS), []).append((rd.name, row))
            levels[_level_of(row)] = levels.get(_level_of(row), 0) + 1
        for level, n in levels.items():
            if n > 1:
                print(f"note: {path}: {_level_text(level)} {n} times (each counted as a repeat)", file=sys.stderr)
        for level, got_deltas in gate_deltas(rd / side).items():
            deltas.setdefault(level, []).extend((rd.name, d) for d in got_deltas[:levels.get(level, 0)])
    if absent:  # a run cut short, or a file lost: say which, the rows are fewer than the run's
        print(f"note: {run} side {side}: no real-traffic.csv in {', '.join(absent)}"
              + (" (the side is left out)" if len(absent) == len(repeat_dirs) else ""), file=sys.stderr)
    return groups, deltas


def gate_deltas(side_dir: Path) -> Dict[Level, List[Dict]]:
    """(workload, concurrency, request_rate) -> the ``spec_gate_delta`` of each such row in the
    traffic records (``traffic-*.json``) in ``side_dir``, as the CSV writes the level (``16``, ``4``).
    A record that cannot be read is skipped with a note on stderr (the rows are in the CSV; this is
    only what the gate did during them)."""
    out: Dict[Level, List[Dict]] = {}
    for path in sorted(side_dir.glob("traffic-*.json")):
        why = not_a_regular_file(path)
        if why is not None:
            print(f"note: {path} {why} (not read)", file=sys.stderr)
            continue
        try:
            runs = json.loads(path.read_text()).get("runs", [])
            rows = [r for run in runs for r in run.get("rows", [])]
        except (OSError, ValueError, AttributeError, TypeError) as exc:
            print(f"note: {path}: {exc} (its rows get no gate columns)", file=sys.stderr)
            continue
        for r in rows:
            delta = r.get("spec_gate_delta") if isinstance(r, dict) else None
            if isinstance(delta, dict):
                out.setdefault(_level_of(r), []).append(delta)
    return out


def gate_columns(deltas: List[Dict]) -> Dict[str, str]:
    """:data:`GATE_EXTRA` from a row's ``spec_gate_delta`` s (one per repeat): the ON share of all
    their decode steps, switches and probe steps summed; a column none of them has stays empty."""
    def total(key: str) -> Optional[int]:
        values = [d[key] for d in deltas if isinstance(d.get(key), int)]
        return sum(values) if values else None

    from bench.traffic import on_share

    share = on_share(total("decode_steps_on"), total("decode_steps_off"))
    return {name: "" if value is None else _format(value) for name, value in
            (("gate_on_share", share), ("gate_switches", total("switches")),
             ("gate_probe_steps", total("auto_probe_steps")))}


def label_none_with_draft(rows: List[Dict[str, str]]) -> None:
    """In place: the ``none`` rows of one run get the ``p_wrong`` of its speculative rows when these
    all have one (no speculation has no draft; see the module docstring). Rows of a run with drafts
    of several p, or without speculative rows, keep theirs."""
    drafts = {r["p_wrong"] for r in rows if r.get("config") != "none"}
    if len(drafts) == 1:
        (p,) = drafts
        for r in rows:
            if r.get("config") == "none":
                r["p_wrong"] = p


def share_none(rows: List[Dict[str, str]]) -> List[Dict[str, str]]:
    """``rows`` plus, for every ``p_wrong`` of speculative rows without ``none`` rows of its own, a
    copy of the ``none`` rows labelled with that p (no speculation has no draft: the same target's
    baseline serves every draft of it; the caller vouches that the runs share the target).

    Raises:
        BenchError: a p needs a baseline but there are no ``none`` rows, or ``none`` rows of several
            p (which one is the baseline would be a guess).
    """
    none = [r for r in rows if r.get("config") == "none"]
    have = {r["p_wrong"] for r in none}
    need = sorted({r["p_wrong"] for r in rows if r.get("config") != "none"} - have)
    if not need:
        return rows
    if len(have) != 1:
        raise BenchError(f"--share-none: p {', '.join(need)} need(s) a none baseline, and the runs have none rows "
                         f"of {len(have)} p ({', '.join(sorted(have)) or 'no none rows'}); give runs with one")
    return rows + [{**r, "p_wrong": p} for p in need for r in none]


#: server arguments a none server must share with the servers it stands as the baseline of
#: (``--share-none``): the KV pool and memory, the attention backend, the scheduler (overlap or
#: not), the batch limits, the dtype
BASELINE_FLAGS = ("--max-total-tokens", "--mem-fraction-static", "--attention-backend", "--disable-overlap-schedule",
                  "--max-running-requests", "--cuda-graph-max-bs", "--dtype", "--sampling-backend")


def _baseline_flags(run: Path, side: str) -> Optional[Dict[str, str]]:
    """:data:`BASELINE_FLAGS` as ``side``'s server of ``run`` was started (its ``ab-summary.json``;
    a flag without a value maps to ``""``), or None when that record cannot be read."""
    try:
        args = json.loads((run / "ab-summary.json").read_text())["servers"][side]["args"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(args, list):
        return None
    out = {}
    for i, arg in enumerate(args):
        if arg in BASELINE_FLAGS:
            nxt = args[i + 1] if i + 1 < len(args) else ""
            out[arg] = "" if str(nxt).startswith("--") else str(nxt)
    return out


def check_shared_baseline(by_run: List[Tuple[Path, List[Dict[str, str]]]]) -> None:
    """``--share-none``: the ``none`` servers whose rows stand as another run's baseline were started
    as that run's servers were, on :data:`BASELINE_FLAGS` (a pool of 131,072 tokens against one of
    49,152 put auto at 0.716x "the better static" at 128 requests, against 0.977x with its own run's
    baseline: a fresh user's find). A run whose record cannot be read is said on stderr, not refused.

    Raises:
        BenchError: a flag differs; the message names the runs, sides and values.
    """
    donors = {(run, r["side"]): None for run, got in by_run for r in got if r.get("config") == "none"}
    for donor, dside in donors:
        donors[(donor, dside)] = _baseline_flags(donor, dside)  # each summary read once
    for run, got in by_run:
        if any(r.get("config") == "none" for r in got):
            continue
        for side in dict.fromkeys(r["side"] for r in got):
            mine = _baseline_flags(run, side)
            for (donor, dside), theirs in donors.items():
                if mine is None or theirs is None:
                    print(f"note: --share-none: cannot compare the server arguments of {run} side {side} and "
                          f"{donor} side {dside} (no readable ab-summary.json)", file=sys.stderr)
                    continue
                differ = [f"{flag} {theirs.get(flag, '(unset)')!s} vs {mine.get(flag, '(unset)')!s}"
                          for flag in BASELINE_FLAGS if theirs.get(flag) != mine.get(flag)]
                if differ:
                    raise BenchError(f"--share-none: the none server of {donor} (side {dside}) was started unlike "
                                     f"{run} side {side}: {'; '.join(differ)}; its rows are not that run's baseline")


def write_csv(rows: List[Dict[str, str]], path: Path) -> None:
    """``rows`` with the traffic columns, then :data:`EXTRA`; written whole to a new temporary file
    beside the file ``path`` names (a symlink is followed and kept; a name no other file has, so an
    existing ``PATH.tmp`` is never touched), then renamed over it (the temporary file is gone either
    way).

    Raises:
        OSError: the file could not be written or renamed, or ``path`` exists and is not a regular
            file (:func:`not_a_regular_file`; ``path`` untouched either way).
    """
    from bench.traffic import TRAFFIC_COLUMNS

    why = not_a_regular_file(path)
    if why is not None:
        raise OSError(f"{path} {why}")
    path = path.resolve()
    columns = list(TRAFFIC_COLUMNS) + list(EXTRA)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    tmp = Path(name)
    try:
        with os.fdopen(fd, "w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, fieldnames=columns)
            w.writeheader()
            for row in rows:
                w.writerow({c: row.get(c, "") for c in columns})
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def run_spec(spec: str) -> Tuple[str, Path, Optional[List[str]]]:
    """``RUN[:SIDES]`` as ``(spec, RUN, sides)``: sides None without ``:``, ``[]`` for ``RUN:``
    with none (the caller refuses it); a ``:`` in a folder above RUN is part of the path."""
    path, sep, sides = spec.rpartition(":") if ":" in Path(spec).name else (spec, "", "")
    return spec, Path(path), [x for x in sides.split(",") if x] if sep else None


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.ab_collect", description=__doc__.split("\n\n")[0],
                                 allow_abbrev=False)
    ap.add_argument("runs", nargs="+", metavar="RUN[:SIDES]",
                    help="bench.ab_traffic output directories; RUN:a,b for those sides only")
    ap.add_argument("--csv", type=Path, required=True, help="the CSV to write (replaced if it exists)")
    ap.add_argument("--share-none", action="store_true",
                    help="a run without a none server (another draft of the same target) takes the other "
                         "runs' none rows as its baseline, labelled with its p (their servers must have been "
                         "started alike: KV pool, memory, attention backend, scheduler, batch limits)")
    a = ap.parse_args(argv)
    if not a.csv.name:
        ap.error(f"--csv {str(a.csv)!r}: give a file name (e.g. bench/results/real-traffic.csv)")
    why = not_a_regular_file(a.csv)
    if why is not None:
        ap.error(f"--csv {a.csv} {why}: give the path of a CSV file")
    if not a.csv.parent.is_dir():
        ap.error(f"--csv {a.csv}: no directory {a.csv.parent}")
    if not all(spec.strip() for spec in a.runs):
        ap.error("a run is an empty string: give a bench.ab_traffic output directory")
    specs = [run_spec(spec) for spec in a.runs]
    target = a.csv.resolve()
    for _, path, _ in specs:
        run = path.resolve()
        if target == run or run in target.parents:
            ap.error(f"--csv {a.csv} is inside the run {run}: it would overwrite or join its measurements; "
                     f"write it beside the run")
    try:
        rows, seen, by_run = [], set(), []
        for spec, path, only in specs:
            if only == []:
                raise BenchError(f"{spec}: no side after ':' (RUN:a,b names sides a and b)")
            got = collect(path, only)
            given = {(path.resolve(), r["side"]) for r in got}
            twice = sorted(side for _, side in given & seen)
            if twice:
                raise BenchError(f"{spec}: side(s) {', '.join(twice)} of {path} already given (their rows would count twice)")
            seen |= given
            rows += got
            by_run.append((path, got))
        if a.share_none:
            check_shared_baseline(by_run)
            rows = share_none(rows)
    except BenchError as exc:
        print(f"bench.ab_collect: {exc}", file=sys.stderr)
        return 1
    try:
        write_csv(rows, a.csv)
    except OSError as exc:
        print(f"bench.ab_collect: cannot write --csv {a.csv}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    print(f"{len(rows)} rows from {len(a.runs)} run(s) -> {a.csv}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
