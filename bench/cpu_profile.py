"""The SGLang scheduler's CPU time by Python function, sampled with py-spy during a measured row.

Why: on variable-length traffic a forced-off gate server does the same GPU work as a server
without speculation but is CPU-bound where that one is GPU-bound (``bench/results/h200-2026-12-04/``:
GPU idle 27.7% against 12.5% at 64 requests); the torch profiler shows that the GPU waited, not for
which Python. py-spy (https://github.com/benfred/py-spy) samples the scheduler process's Python
stacks from outside, ``--nonblocking`` (it never pauses the process), so it can run during the
measured row itself.

``bench.throughput traffic --cpu-profile-row WORKLOAD:LEVEL`` records ``RECORD_SECONDS`` of the TP-0
scheduler (the process SGLang titles ``sglang::scheduler...``), ``RECORD_DELAY_S`` into that row,
into ``OUT/cpu-profile-CONFIG-WORKER-pP-WORKLOAD-LEVEL.txt`` (py-spy's raw format: one line per
distinct stack, ``frame;frame;... COUNT``, outermost frame first) and summarizes it next to it
(``.json``). ``python -m bench.cpu_profile compare A.json B.json`` prints B against A per function in
ms of scheduler CPU per 1,000 output tokens (the window's tokens estimated from the row's output
tok/s). Samples where the scheduler thread waits in a call (a CUDA sync inside a Python frame,
ZMQ polling) count for that frame: py-spy without ``--idle`` leaves out only threads that sleep.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import shutil
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Set, Tuple

SCHEDULER_TITLE = "sglang::scheduler"
RATE_HZ = 200  # samples per second
RECORD_SECONDS = 8
RECORD_DELAY_S = 4.0
TOP = 30

Stack = Tuple[str, ...]


def scheduler_pids(proc: Path = Path("/proc"), port: Optional[int] = None) -> List[int]:
    """PIDs of processes whose command line (SGLang sets it with ``setproctitle``) starts with
    ``sglang::scheduler``, TP 0 first (``sglang::scheduler_TP0`` sorts first), then by PID.

    ``port``: only the schedulers of the server listening on that TCP port (processes descending
    from the one that holds the listening socket: SGLang's HTTP server starts its schedulers), so
    that with two servers on one machine (``bench.ab_traffic``) the one being measured is sampled;
    [] when nothing here listens on it."""
    found = []
    for entry in proc.iterdir() if proc.is_dir() else []:
        if not entry.name.isdigit():
            continue
        try:
            title = (entry / "cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
        except OSError:
            continue
        if title.startswith(SCHEDULER_TITLE):
            found.append((title, int(entry.name)))
    if port is not None:
        owners = listening_pids(port, proc)
        found = [(title, pid) for title, pid in found if owners & set(ancestors(pid, proc))]
    return [pid for _, pid in sorted(found)]


def listening_pids(port: int, proc: Path = Path("/proc")) -> Set[int]:
    """PIDs holding a TCP socket (IPv4 or IPv6) that listens on ``port`` (``/proc/net/tcp*``, state
    ``0A``; the socket's inode matched against each process's ``fd`` links)."""
    inodes = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{fields[9]}]")
    pids = set()
    for entry in proc.iterdir() if inodes and proc.is_dir() else []:
        if not entry.name.isdigit():
            continue
        try:
            if any(os.readlink(fd) in inodes for fd in (entry / "fd").iterdir()):
                pids.add(int(entry.name))
        except OSError:
            continue
    return pids


def ancestors(pid: int, proc: Path = Path("/proc")) -> List[int]:
    """``pid`` and its parents up to PID 1 (``/proc/PID/stat``'s fourth field), as far as readable."""
    chain = []
    while pid > 1 and pid not in chain:
        chain.append(pid)
        try:
            stat = (proc / str(pid) / "stat").read_text()
            pid = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return chain


def record_argv(pid: int, seconds: int, out: Path, rate: int = RATE_HZ) -> List[str]:
    """The py-spy command line that samples ``pid`` for ``seconds`` at ``rate`` Hz into ``out``."""
    return ["py-spy", "record", "--pid", str(pid), "--duration", str(int(seconds)), "--rate", str(int(rate)),
            "--format", "raw", "--nonblocking", "--output", str(out)]


def record(pid: int, seconds: int, out: Path, rate: int = RATE_HZ) -> Dict[str, Any]:
    """Run py-spy on ``pid`` (blocks ``seconds``); ``{"ok", "argv", "error"}``, never raises: a missing
    py-spy, a process that went away or a refused ptrace is recorded as ``error``."""
    argv = record_argv(pid, seconds, out, rate)
    if shutil.which("py-spy") is None:
        return {"ok": False, "argv": argv, "error": "py-spy is not installed (pip install py-spy)"}
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"ok": False, "argv": argv, "error": f"{type(exc).__name__}: {exc}"}
    ok = proc.returncode == 0 and out.is_file()
    return {"ok": ok, "argv": argv, "error": None if ok else (proc.stderr or proc.stdout)[-500:]}


#: what a row's summary carries besides the profile (``bench.traffic.CpuProfile`` writes them)
META_KEYS = ("config", "worker", "p_wrong", "workload", "level", "delay_s", "seconds")


def parse_raw(text: str) -> List[Tuple[Stack, int]]:
    """py-spy's raw lines ``f1 (file:line);f2 (file:line) COUNT`` -> ``[(frames, count)]``, outermost
    frame first, each frame as ``func (file)`` (line numbers dropped: one function, one row).

    A line that is only a count (py-spy 0.4.3 on the H200 wrote a few per recording, each right after
    a complete line; what they sampled is not known) counts as the stack ``("(unknown)",)``: in the
    totals, in no function.

    Raises:
        ValueError: a non-empty line without a trailing integer count.
    """
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        if line.isdigit():
            out.append((("(unknown)",), int(line)))
            continue
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            raise ValueError(f"line {n} is not py-spy raw output (FRAMES COUNT): {line[:120]!r}")
        out.append((tuple(_frame(f) for f in stack.split(";")), int(count)))
    return out


def _frame(frame: str) -> str:
    """``name (path/to/file.py:123)`` -> ``name (to/file.py)``: the line and all but the last two
    path parts dropped (site-packages prefixes differ between machines)."""
    name, sep, where = frame.partition(" (")
    if not sep:
        return frame
    path = where.rstrip(")").rsplit(":", 1)[0]
    return f"{name} ({'/'.join(path.split('/')[-2:])})"


def summarize(stacks: Iterable[Tuple[Stack, int]], rate: int = RATE_HZ, top: int = TOP) -> Dict[str, Any]:
    """Per function: ``self_s`` (innermost frame), ``inclusive_s`` (anywhere in the stack, once per
    sample) and their shares of all samples; the ``top`` by inclusive time, then by self time.
    ``samples`` / ``seconds`` (samples / ``rate``) of the whole recording."""
    self_n: Dict[str, int] = {}
    incl_n: Dict[str, int] = {}
    total = 0
    for frames, count in stacks:
        total += count
        if not frames:
            continue
        self_n[frames[-1]] = self_n.get(frames[-1], 0) + count
        for f in set(frames):
            incl_n[f] = incl_n.get(f, 0) + count
    names = sorted(incl_n, key=lambda f: (-incl_n[f], -self_n.get(f, 0), f))
    by_self = sorted(self_n, key=lambda f: (-self_n[f], f))

    def row(f: str) -> Dict[str, Any]:
        return {"function": f, "self_s": round(self_n.get(f, 0) / rate, 4), "inclusive_s": round(incl_n[f] / rate, 4),
                "self_share": round(self_n.get(f, 0) / max(total, 1), 4),
                "inclusive_share": round(incl_n[f] / max(total, 1), 4)}

    return {"samples": total, "rate_hz": rate, "seconds": round(total / rate, 3),
            "inclusive": [row(f) for f in names[:top]], "self": [row(f) for f in by_self[:top]],
            "all": {f: [self_n.get(f, 0), incl_n[f]] for f in names}}


def per_kilotoken(summary: Dict[str, Any], output_tokens: Optional[float]) -> Dict[str, Tuple[float, float]]:
    """``{function: (self ms, inclusive ms)}`` per 1,000 output tokens of the window (``output_tokens``;
    None: per second of recording instead)."""
    scale = _ms_per_sample(summary, output_tokens)
    return {f: (s * scale, i * scale) for f, (s, i) in summary["all"].items()}


def _ms_per_sample(summary: Dict[str, Any], output_tokens: Optional[float]) -> float:
    """What one sample of ``summary`` is worth in ms per 1,000 output tokens (``output_tokens``;
    None: in ms per second of recording)."""
    scale = 1e6 / output_tokens if output_tokens else 1e3 / max(summary["seconds"], 1e-9)
    return scale / summary["rate_hz"]


#: a recording with fewer samples than this says little (2 s at the default 200 Hz)
MIN_SAMPLES_TRUSTED = 400


def is_gpu_wait(function: str) -> bool:
    """Whether a frame (``name (dir/file.py)``) is the scheduler waiting for the GPU (``Event`` /
    ``Stream.synchronize``, ``torch.cuda.synchronize``): its samples are slack, not work."""
    return function.partition(" (")[0].rsplit(".", 1)[-1] == "synchronize"


def work_and_wait(summary: Dict[str, Any], output_tokens: Optional[float]) -> Tuple[float, float]:
    """The recording's samples split into scheduler work and GPU waits (:func:`is_gpu_wait` as the
    innermost frame), in ms per 1,000 output tokens (``output_tokens``; None: ms per second of
    recording). Where the work per token grows, the overlap scheduler's slack shrinks, and once it
    is gone the GPU waits for the CPU instead."""
    per = _ms_per_sample(summary, output_tokens)
    wait = sum(s for f, (s, _) in summary["all"].items() if is_gpu_wait(f))
    return ((summary["samples"] - wait) * per, wait * per)


#: what :func:`compare` ranks functions by: the difference of their inclusive or of their self time
RANKINGS = ("inclusive", "self")


def compare(a: Dict[str, Any], b: Dict[str, Any], top: int = TOP, by: str = "inclusive") -> List[Dict[str, Any]]:
    """B against A per function, in ms of scheduler CPU per 1,000 output tokens (each summary's
    ``output_tokens``; per second of recording where one lacks it): the ``top`` functions by
    ``|B - A|`` of inclusive time, or of self time (``by="self"``: the frame that runs the work, C
    calls included, since py-spy records Python frames only; inclusive differences pile up on every
    caller of one hot spot and on the frames around a GPU wait).

    Raises:
        ValueError: ``by`` is not one of :data:`RANKINGS`."""
    if by not in RANKINGS:
        raise ValueError(f"rank by one of {', '.join(RANKINGS)}, not {by!r}")
    tokens = (a.get("output_tokens"), b.get("output_tokens"))
    if not all(tokens):
        tokens = (None, None)
    pa, pb = per_kilotoken(a, tokens[0]), per_kilotoken(b, tokens[1])
    rows = []
    for f in set(pa) | set(pb):
        sa, ia = pa.get(f, (0.0, 0.0))
        sb, ib = pb.get(f, (0.0, 0.0))
        rows.append({"function": f, "a_inclusive": round(ia, 3), "b_inclusive": round(ib, 3),
                     "diff_inclusive": round(ib - ia, 3), "a_self": round(sa, 3), "b_self": round(sb, 3),
                     "diff_self": round(sb - sa, 3)})
    rows.sort(key=lambda r: (-abs(r[f"diff_{by}"]), r["function"]))
    return rows[:top]


def read_raw(raw: Path) -> str:
    """The text of a raw recording, ``.txt`` or gzipped ``.txt.gz`` (how results are committed).

    Raises:
        ValueError: unreadable, not text, or a broken gzip file; the message names the file.
    """
    try:
        if raw.suffix == ".gz":
            with gzip.open(raw, "rt") as f:
                return f.read()
        return raw.read_text()
    except (OSError, EOFError, UnicodeDecodeError, zlib.error) as exc:
        raise ValueError(f"cannot read {raw}: {exc}") from None


def parse_file(raw: Path) -> List[Tuple[Stack, int]]:
    """:func:`parse_raw` of a recording file (:func:`read_raw`); errors name the file.

    Raises:
        ValueError: unreadable, not py-spy raw output, or no samples at all.
    """
    text = read_raw(raw)
    try:
        stacks = parse_raw(text)
    except ValueError as exc:
        raise ValueError(f"{raw}: {exc}") from None
    if not stacks:
        raise ValueError(f"{raw}: no samples (an empty recording)")
    return stacks


def summary_path(raw: Path) -> Path:
    """``cpu-profile-X.txt`` (or ``.txt.gz``) -> ``cpu-profile-X.json``."""
    return (raw.with_suffix("") if raw.suffix == ".gz" else raw).with_suffix(".json")


def profile_row(raw: Path, output_tok_s: Optional[float], seconds: float, meta: Dict[str, Any]) -> Dict[str, Any]:
    """Summarize the recording ``raw`` of a row (``output_tok_s``: the row's, so the window's tokens
    are ``output_tok_s * seconds``) into :func:`summary_path` of it; returns the summary."""
    doc = dict(meta)
    doc.update(summarize(parse_file(raw)))
    doc["output_tokens"] = round(output_tok_s * seconds, 1) if output_tok_s else None
    summary_path(raw).write_text(json.dumps(doc, indent=1) + "\n")
    return doc


def resummarize(traffic_json: Path) -> Dict[str, Any]:
    """Summarize again the recording a ``traffic`` run (``traffic-*.json``) made with
    ``--cpu-profile-row``, from the raw file next to that JSON (e.g. after a parser fix); writes the
    ``.json`` summary beside it as :func:`profile_row` does and returns it.

    Raises:
        ValueError: the run has no CPU profile, its raw recording is not beside the JSON, or its row
            is missing.
    """
    try:
        doc = json.loads(traffic_json.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read {traffic_json}: {exc}") from None
    runs = doc.get("runs") if isinstance(doc, dict) else None
    if not isinstance(runs, list) or not runs:
        raise ValueError(f"{traffic_json} is not a traffic run file (bench.throughput traffic's traffic-*.json: "
                         f"an object with a non-empty list 'runs')")
    run = runs[-1]
    prof = run.get("cpu_profile") if isinstance(run, dict) else None
    if not isinstance(prof, dict) or not isinstance(prof.get("raw"), str):
        raise ValueError(f"{traffic_json}: the run has no CPU profile (traffic --cpu-profile-row)")
    level, seconds = prof.get("level"), prof.get("seconds")
    if not isinstance(prof.get("workload"), str) or not all(isinstance(v, (int, float)) for v in (level, seconds)):
        raise ValueError(f"{traffic_json}: its CPU profile lacks a workload, level or seconds")
    raw = traffic_json.parent / Path(prof["raw"]).name
    if not raw.is_file() and raw.with_name(raw.name + ".gz").is_file():
        raw = raw.with_name(raw.name + ".gz")
    if not raw.is_file():
        raise ValueError(f"{traffic_json}: its recording {raw.name} is not beside it")
    rows = [r for r in run.get("rows") or [] if _is_row(r, prof["workload"], float(level))]
    if not rows:
        raise ValueError(f"{traffic_json}: no {prof['workload']} row at {level}")
    meta = {k: prof[k] for k in META_KEYS if k in prof}
    return profile_row(raw, rows[0].get("output_tok_s"), float(seconds), meta)


def _is_row(row: Any, workload: str, level: float) -> bool:
    """Whether a ``real-traffic.csv``-shaped row is the one at ``workload`` / ``level`` (its
    ``concurrency``, or its ``request_rate`` for an open-loop workload)."""
    if not isinstance(row, dict) or row.get("workload") != workload:
        return False
    value = row.get("concurrency") if row.get("concurrency") not in (None, "") else row.get("request_rate")
    try:
        return value not in (None, "") and float(value) == level
    except (TypeError, ValueError):
        return False


def load_summary(path: Path) -> Dict[str, Any]:
    """A summary written by :func:`profile_row` (``.json``).

    Raises:
        ValueError: not readable as one, with the file's name and what is missing.
    """
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read {path}: {exc}") from None
    def number(x: Any) -> bool:
        return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x >= 0

    ok = (isinstance(doc, dict) and isinstance(doc.get("all"), dict) and isinstance(doc.get("rate_hz"), int)
          and doc["rate_hz"] > 0 and number(doc.get("seconds")) and isinstance(doc.get("samples"), int)
          and (doc.get("output_tokens") is None or number(doc["output_tokens"]))
          and all(isinstance(v, list) and len(v) == 2 and all(isinstance(n, int) for n in v)
                  for v in doc["all"].values()))
    if not ok:
        raise ValueError(f"{path} is not a bench.cpu_profile summary (the .json next to a cpu-profile-*.txt: "
                         f"needs 'all' (function: [self, inclusive] sample counts), 'rate_hz', 'seconds', "
                         f"'samples', and 'output_tokens' a number or null)")
    return doc


def _table(rows: List[Dict[str, Any]], unit: str) -> str:
    lines = [f"| function | A {unit} | B {unit} | B - A | A self | B self |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['function']} | {r['a_inclusive']:.2f} | {r['b_inclusive']:.2f} | "
                     f"{r['diff_inclusive']:+.2f} | {r['a_self']:.2f} | {r['b_self']:.2f} |")
    return "\n".join(lines)


def _positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not >= 1")
    return value


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cpu_profile", description=__doc__.split("\n\n")[0],
                                     allow_abbrev=False)
    sub = parser.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("summarize", help="one py-spy raw recording: the top functions")
    s.add_argument("raw", type=Path)
    s.add_argument("--rate", type=_positive_int, default=RATE_HZ,
                   help=f"the recording's sampling rate, Hz (default {RATE_HZ})")
    r = sub.add_parser("resummarize", help="the summary of a traffic run's recording again, from the raw file "
                                           "beside its traffic-*.json")
    r.add_argument("traffic_json", type=Path)
    c = sub.add_parser("compare", help="B against A: two summaries (.json) of traffic --cpu-profile-row")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    c.add_argument("--top", type=_positive_int, default=TOP, help=f"rows shown (default {TOP})")
    c.add_argument("--by", choices=RANKINGS, default="inclusive",
                   help="rank functions by the difference of their inclusive time (default) or of their self "
                        "time (the frame doing the work, C calls included)")
    a = parser.parse_args(argv)
    try:
        if a.cmd == "summarize":
            doc = summarize(parse_file(a.raw), a.rate)
            print(f"{doc['samples']} samples, {doc['seconds']} s")
            for r in doc["inclusive"]:
                print(f"{r['inclusive_share']:7.1%} {r['self_share']:7.1%}  {r['function']}")
            return 0
        if a.cmd == "resummarize":
            doc = resummarize(a.traffic_json)
            print(f"{doc['samples']} samples, {doc['seconds']} s, ~{doc.get('output_tokens')} output tokens")
            return 0
        docs = [load_summary(p) for p in (a.a, a.b)]
    except (OSError, ValueError) as exc:
        print(f"python -m bench.cpu_profile: error: {exc}", file=sys.stderr)
        return 2
    rows = compare(*docs, top=a.top, by=a.by)
    unit = "ms/1k tok" if all(d.get("output_tokens") for d in docs) else "ms/s"
    for name, d in zip("AB", docs):
        print(f"{name} = {d.get('config', '?')} {d.get('workload', '')} {d.get('level', '')}: {d['samples']} samples "
              f"in {d['seconds']} s, ~{d.get('output_tokens') or '?'} output tokens")
    tokens = [d.get("output_tokens") if unit == "ms/1k tok" else None for d in docs]
    (wa, sa), (wb, sb) = (work_and_wait(d, t) for d, t in zip(docs, tokens))
    print(f"scheduler work (samples outside GPU waits): A {wa:.1f}, B {wb:.1f}, B - A {wb - wa:+.1f} {unit}; "
          f"waiting for the GPU: A {sa:.1f}, B {sb:.1f} {unit} (a wait is a sample in a synchronize frame: a "
          f"blocking .item() / .tolist() / .cpu() shows as its caller's work)")
    for name, d in zip("AB", docs):
        if d["samples"] < MIN_SAMPLES_TRUSTED:
            print(f"warning: {name} has {d['samples']} samples: py-spy recorded almost nothing (did the "
                  f"scheduler process end or was it sampled while idle?)")
    print(_table(rows, unit))
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["scheduler_pids", "listening_pids", "ancestors", "record_argv", "record", "parse_raw", "summarize",
           "per_kilotoken", "is_gpu_wait", "work_and_wait", "RANKINGS", "compare", "META_KEYS", "read_raw", "parse_file",
           "summary_path", "profile_row", "resummarize", "load_summary", "main"]
