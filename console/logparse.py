"""Reading SGLang server log lines: what kind of line it is, and what it tells about the server.

Pure functions and one small accumulator (:class:`LogFacts`); no I/O. Line formats are the
ones in the README contract (SGLang's ``[YYYY-mm-dd HH:MM:SS TPn] message`` prefix, the
``spec_gate:`` lines of server_patch, SGLang's ``Spec v1 is used`` / ``Spec v2 is enabled``
startup lines) plus SGLang's startup-progress lines (``Load weight begin``, ``Capture cuda
graph begin``, ``The server is fired up and ready to roll!``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from console import state as st

# Kinds of lines (the log pane styles each kind; see themes/*.tcss)
PLAIN = "plain"
VERIFY = "verify"  # lines that tell which speculative worker runs
SWITCH = "switch"  # spec_gate: speculation on/off
GATE = "gate"  # spec_gate: threshold/hysteresis changed
REJECTED = "rejected"  # spec_gate: rejected ...
ERROR = "error"
WARNING = "warning"
DECODE = "decode"  # Decode batch, ...
CONSOLE = "console"  # lines the console itself adds (threshold changes, restarts)
OWN = "own"  # the server's access-log lines of the console's own polls (console.accesslog)

#: Marker the console writes into the log file before each (re)start of a launched server.
START_MARKER = "[specconsole] starting server:"

_PREFIX = re.compile(r"^\[(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?P<tags>[^\]]*)\]\s?(?P<msg>.*)$")
_TP = re.compile(r"\bTP(\d+)\b")
_SPEC_V1 = re.compile(r"Spec v1 is used for .*speculative decoding(?: because (?P<reason>.*?))?\.?$")
_SPEC_V2 = re.compile(r"Spec v2 is enabled\b")
_GATE_WORKER = re.compile(
    r"spec_gate: worker=(?P<worker>\S+) spec=(?P<spec>\S+) overlap=(?P<overlap>\S+)"
    r"(?: threshold=(?P<threshold>\d+))?(?: hysteresis=(?P<hysteresis>\d+))?"
)
_GATE_SWITCH = re.compile(r"spec_gate: speculation (?P<dir>on|off) \(batch (?P<bs>\d+) (?P<op>[<>]=?) (?P<n>\d+)\)")
_GATE_CHANGE = re.compile(r"spec_gate: (?P<key>threshold|hysteresis) (?P<old>\d+) -> (?P<new>\d+)")
_GATE_REJECT = re.compile(r"spec_gate: rejected ")
_ERROR = re.compile(
    # \b\w*Error\b, not \w+Error\b: a match may only start at a word boundary, so a long word is
    # scanned once instead of once per position (a 40 KB word took 1.8 s, 2.5 MB froze the app)
    r"Traceback \(most recent call last\)|\b\w*Error\b|\bException\b|\bERROR\b|\bFATAL\b"
    r"|CUDA out of memory|\bKilled\b|hit an exception|Segmentation fault|core dumped"
)
_WARNING = re.compile(r"\bWARNING\b|\bWarning\b|\bwarn(ing)?:", re.IGNORECASE)
_DECODE = re.compile(r"Decode batch[.,]")
_RUNNING = re.compile(r"#running-req: (\d+)")
_ACCEPT = re.compile(r"accept len: ([\d.]+)")
_TPUT = re.compile(r"gen throughput \(token/s\): ([\d.]+)")
_QUEUE = re.compile(r"#queue-req: (\d+)")

_PHASES = (
    (re.compile(r"The server is fired up and ready to roll"), st.PHASE_READY),
    (re.compile(r"Uvicorn running on|Application startup complete"), st.PHASE_WARMUP),
    (re.compile(r"Capture (?:\w+ )*cuda graph|Capturing batches|Capture piecewise", re.IGNORECASE), st.PHASE_GRAPHS),
    (re.compile(r"KV Cache is allocated|Memory pool end|max_total_num_tokens="), st.PHASE_KV),
    (re.compile(r"Load weight (?:begin|end)|Loading safetensors|Init torch distributed"), st.PHASE_LOADING),
)
_PHASE_ORDER = [st.PHASE_STARTING, st.PHASE_LOADING, st.PHASE_KV, st.PHASE_GRAPHS, st.PHASE_WARMUP, st.PHASE_READY]


def split_prefix(line: str) -> tuple[str | None, int | None, str]:
    """Split SGLang's ``[ts TPn]`` prefix off a line.

    Returns:
        ``(timestamp or None, TP rank or None, message)``; lines without a prefix come back
        whole as the message.
    """
    m = _PREFIX.match(line)
    if not m:
        return None, None, line
    tp = _TP.search(m.group("tags"))
    return m.group("ts"), (int(tp.group(1)) if tp else None), m.group("msg")


def classify(line: str) -> str:
    """The kind of a log line (one of the module constants ``VERIFY``, ``SWITCH``, ...)."""
    if line.startswith("[specconsole]") or line.startswith("[console"):
        return CONSOLE
    _, _, msg = split_prefix(line)
    if "spec_gate:" in msg:
        if _GATE_SWITCH.search(msg):
            return SWITCH
        if _GATE_REJECT.search(msg):
            return REJECTED
        if _GATE_CHANGE.search(msg):
            return GATE
        if _GATE_WORKER.search(msg):
            return VERIFY
    if _SPEC_V1.search(msg) or _SPEC_V2.search(msg):
        return VERIFY
    if _DECODE.search(msg):
        return DECODE
    if _ERROR.search(msg):
        return ERROR
    if _WARNING.search(msg):
        return WARNING
    return PLAIN


def startup_phase(line: str) -> str | None:
    """The startup phase a line announces (``state.PHASE_*``), or None."""
    _, _, msg = split_prefix(line)
    for pattern, phase in _PHASES:
        if pattern.search(msg):
            return phase
    return None


@dataclass(frozen=True)
class DecodeStats:
    """Fields of one ``Decode batch`` line: running batch (req), accept length, tok/s, queue (req)."""

    running_reqs: int
    accept_length: float | None
    gen_throughput: float
    queue_reqs: int | None


def parse_decode(line: str) -> DecodeStats | None:
    """Parse a ``Decode batch, #running-req: R, ... gen throughput (token/s): G, #queue-req: Q`` line."""
    if not _DECODE.search(line):
        return None
    running, tput = _RUNNING.search(line), _TPUT.search(line)
    if not running or not tput:
        return None
    accept, queue = _ACCEPT.search(line), _QUEUE.search(line)
    return DecodeStats(
        int(running.group(1)),
        float(accept.group(1)) if accept else None,
        float(tput.group(1)),
        int(queue.group(1)) if queue else None,
    )


@dataclass
class LogFacts:
    """What the log said so far about the worker and startup; latest line wins.

    ``family`` is ``"v1"``/``"v2"`` from SGLang's startup line (``family_reason`` the text after
    "because" for v1); ``gate_worker``/``gate_spec``/``gate_overlap`` from the
    ``spec_gate: worker=...`` line; ``phase`` the furthest startup phase since the last start
    marker.
    """

    family: str | None = None
    family_line: str | None = None
    family_reason: str | None = None
    gate_worker: str | None = None
    gate_spec: str | None = None
    gate_overlap: str | None = None
    phase: str = st.PHASE_STARTING
    starts: int = 0

    def feed(self, line: str) -> None:
        """Update the facts from one log line."""
        if line.startswith(START_MARKER):
            self.family = self.family_line = self.family_reason = None
            self.gate_worker = self.gate_spec = self.gate_overlap = None
            self.phase = st.PHASE_STARTING
            self.starts += 1
            return
        _, _, msg = split_prefix(line)
        m1 = _SPEC_V1.search(msg)
        if m1:
            self.family, self.family_line, self.family_reason = "v1", msg, m1.group("reason")
        elif _SPEC_V2.search(msg):
            self.family, self.family_line, self.family_reason = "v2", msg, None
        mg = _GATE_WORKER.search(msg)
        if mg:
            self.gate_worker, self.gate_spec, self.gate_overlap = mg.group("worker"), mg.group("spec"), mg.group("overlap")
        phase = startup_phase(line)
        if phase is not None and _PHASE_ORDER.index(phase) > _PHASE_ORDER.index(self.phase):
            self.phase = phase


def worker_family(worker_class: str | None) -> str | None:
    """``"v2"`` for the overlap-scheduler workers (class name ends in ``V2``), else ``"v1"``."""
    if not worker_class:
        return None
    return "v2" if worker_class.endswith("V2") else "v1"


def check_worker(gate: st.GateState | None, facts: LogFacts | None, have_log: bool) -> st.WorkerCheck:
    """Cross-check the live worker class against the log.

    Args:
        gate: the live ``spec_gate`` (None: not reported yet / gate not enabled).
        facts: what the log said (None when there is no log to read).
        have_log: whether a log is followed at all.

    Returns:
        A :class:`console.state.WorkerCheck`; ``mismatch`` when any two sources disagree.
    """
    if gate is None or not gate.worker_class:
        return st.WorkerCheck(detail="no spec_gate in /server_info yet")
    live = gate.worker_class
    fam = worker_family(live)
    base = dict(live_class=live, live_version=gate.spec_version)
    problems = []
    if gate.spec_version and fam and gate.spec_version != fam:
        problems.append(f"spec_gate says spec={gate.spec_version} but the live worker is {live}")
    log_family = facts.family if facts else None
    log_worker = facts.gate_worker if facts else None
    if log_family and fam and log_family != fam:
        problems.append(f"log says Spec {log_family}, live object is {live} ({fam})")
    if log_worker and log_worker != live:
        problems.append(f"startup spec_gate line says {log_worker}, live object is {live}")
    if problems:
        return st.WorkerCheck(st.CHECK_MISMATCH, log_family=log_family, log_worker=log_worker, detail="; ".join(problems), **base)
    if log_family or log_worker:
        src = []
        if log_family:
            src.append(f"Spec {log_family} line")
        if log_worker:
            src.append("spec_gate line")
        return st.WorkerCheck(
            st.CHECK_VERIFIED, log_family=log_family, log_worker=log_worker,
            detail="live object matches " + " + ".join(src), **base,
        )
    why = "no startup line in the log yet" if have_log else "no log to cross-check (attach --log FILE)"
    return st.WorkerCheck(st.CHECK_UNVERIFIED, detail=f"live object only; {why}", **base)
