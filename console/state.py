"""Immutable state of the console: what the widgets render, and nothing else.

Every dataclass here is frozen. The data layer builds them (:mod:`console.client`,
:mod:`console.nvml`, :mod:`console.logparse`, :mod:`console.process`), :mod:`console.model`
folds them into one :class:`ConsoleSnapshot`, and widgets only read that snapshot.

Units are in the field names or docstrings: batch size and queue length in requests (req),
throughput in tok/s, memory in MiB, temperature in °C, power in W, clocks in MHz, times in
seconds of ``time.monotonic()`` unless stated otherwise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, make_dataclass
from typing import Any, Mapping

from console import fmt
from server_patch import contract


#: the largest integer a JSON number carries exactly (2**53): a count, size, step or rank above it
#: is not a real value (a server that sent ``1e30`` as its threshold had it shown as 31 digits)
MAX_JSON_INT = 2 ** 53


def _int(value: Any) -> int | None:
    """``value`` as an int, or None when it is missing, not a number (bools are not numbers),
    negative or above :data:`MAX_JSON_INT`: every integer of the contract is a count, size, step
    or rank."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and 0 <= value <= MAX_JSON_INT:
        return value
    return None


def _float(value: Any) -> float | None:
    """``value`` as a float, or None when it is missing, not a number, or not finite."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None


def _amount(value: Any) -> float | None:
    """:func:`_float`, and None below 0 (a GPU's utilization, memory, temperature, power, clock)."""
    number = _float(value)
    return number if number is not None and number >= 0 else None


def _bool(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


#: the longest server string the console keeps (a reason or a name; the contract's longest are
#: ~200 characters): a 3,000-character worker class covered half the screen in a notice
MAX_STR = 400


def _str(value: Any) -> str | None:
    """``value`` when it is a string, cut to :data:`MAX_STR` characters (ending ``…``), control
    characters in caret notation (:func:`console.fmt.printable`), else None."""
    if not isinstance(value, str):
        return None
    return fmt.printable(value if len(value) <= MAX_STR else value[:MAX_STR - 1] + "…")


_CONVERT = {"str": _str, "bool": _bool, "int": _int, "float": _float}


def _field_type(tag: str) -> Any:
    return {"str": "str | None", "bool": "bool | None", "int": "int | None", "float": "float | None"}.get(tag, Any)


#: The gate's last on<->off switch (``spec_gate.last_switch``): decode step index, direction
#: ``"on"``/``"off"``, batch size (req); fields: ``contract.SWITCH_FIELDS``.
LastSwitch = make_dataclass(
    "LastSwitch", [(name, "int | str | None", field(default=None)) for name in contract.SWITCH_FIELDS],
    frozen=True, namespace={"__module__": __name__})

#: One TP rank's gate state (an entry of ``spec_gate.ranks``); fields: ``contract.RANK_FIELDS``.
RankState = make_dataclass(
    "RankState",
    [(name, _field_type(contract.SPEC_GATE_FIELDS[name]), field(default=None)) for name in contract.RANK_FIELDS],
    frozen=True, namespace={"__module__": __name__},
)


#: One bucket of the auto threshold's learned curve (``spec_gate.auto_buckets``): its batch sizes
#: ``lo``..``hi`` (req), estimated output tok/s with speculation on / off, the samples behind them,
#: the accept length, whether speculation is preferred there; fields: ``contract.BUCKET_FIELDS``.
Bucket = make_dataclass(
    "Bucket", [(name, Any, field(default=None)) for name in contract.BUCKET_FIELDS],
    frozen=True, namespace={"__module__": __name__})
_BUCKET_TYPES = {"lo": _int, "hi": _int, "on_tok_s": _float, "off_tok_s": _float, "on_samples": _int,
                 "off_samples": _int, "accept_length": _float, "on": _bool}


#: A TP rank's own GPU as its scheduler reads it (``spec_gate.gpu`` / ``ranks[i].gpu``): host and
#: node rank, CUDA ordinal, UUID, NVML index, name, utilization %, memory used/total MiB,
#: temperature °C, power / limit W, SM clock MHz, NVML error, cost of one reading (ms).
GpuReport = make_dataclass(
    "GpuReport", [(name, Any, field(default=None)) for name in contract.GPU_FIELDS],
    frozen=True, namespace={"__module__": __name__})
_GPU_TYPES = {"host": _str, "node_rank": _int, "gpu_id": _int, "uuid": _str, "nvml_index": _int, "name": _str,
              "util_pct": _amount, "mem_used_mib": _amount, "mem_total_mib": _amount, "temp_c": _amount,
              "power_w": _amount, "power_limit_w": _amount, "sm_clock_mhz": _amount, "error": _str, "read_ms": _amount}


def _convert(tag: str, value: Any) -> Any:
    """A spec_gate value of JSON type ``tag`` (contract.SPEC_GATE_FIELDS) as the console keeps it."""
    if tag == "switch":
        if not isinstance(value, Mapping):
            return None
        return LastSwitch(step=_int(value.get("step")), direction=_str(value.get("direction")),
                          batch_size=_int(value.get("batch_size")))
    if tag == "gpu":
        if not isinstance(value, Mapping):
            return None
        return GpuReport(**{name: _GPU_TYPES[name](value.get(name)) for name in contract.GPU_FIELDS})
    if tag == "buckets":
        return tuple(Bucket(**{name: _BUCKET_TYPES.get(name, _str)(b.get(name)) for name in contract.BUCKET_FIELDS})
                     for b in (value if isinstance(value, (list, tuple)) else ()) if isinstance(b, Mapping))
    if tag == "ranks":
        return tuple(RankState(**{name: _convert(contract.SPEC_GATE_FIELDS[name], r.get(name))
                                  for name in contract.RANK_FIELDS})
                     for r in (value if isinstance(value, (list, tuple)) else ()) if isinstance(r, Mapping))
    return _CONVERT[tag](value)


def _gate_from_json(cls, data: Mapping[str, Any]) -> "GateState":
    """Build from the ``spec_gate`` dict of one ``internal_states`` entry; missing or ill-typed
    keys become None (rendered ``n/a``), nothing raises."""
    return cls(**{name: _convert(tag, data.get(name)) for name, tag in contract.SPEC_GATE_FIELDS.items()})


def _ranks_disagree(self) -> bool:
    """True when TP ranks report different values of contract.RANK_AGREEMENT_FIELDS."""
    seen = {tuple(getattr(r, name) for name in contract.RANK_AGREEMENT_FIELDS) for r in self.ranks}
    return len(seen) > 1


#: ``GET /server_info`` -> ``internal_states[0].spec_gate``, typed: one attribute per field of
#: ``contract.SPEC_GATE_FIELDS`` (None where the server did not report it; ``ranks`` a tuple of
#: RankState, ``last_switch`` a LastSwitch or None).
GateState = make_dataclass(
    "GateState",
    [(name, _field_type(tag), field(default=() if tag in ("ranks", "buckets") else None))
     for name, tag in contract.SPEC_GATE_FIELDS.items()],
    frozen=True,
    namespace={"__module__": __name__, "from_json": classmethod(_gate_from_json),
               "ranks_disagree": property(_ranks_disagree),
               "__doc__": "``spec_gate`` of /server_info, typed (fields: contract.SPEC_GATE_FIELDS)."},
)


@dataclass(frozen=True)
class LoadState:
    """Live load from ``GET /v1/loads?include=core,spec``, summed over DP ranks.

    ``running_reqs`` is the running batch size (req), ``waiting_reqs`` the queue length (req),
    ``gen_throughput`` tok/s, ``token_usage`` a fraction of the KV pool in [0, 1].
    """

    running_reqs: int | None = None
    waiting_reqs: int | None = None
    gen_throughput: float | None = None
    max_running_requests: int | None = None
    token_usage: float | None = None
    accept_length: float | None = None
    dp_ranks: int = 1

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "LoadState":
        """Build from the ``/v1/loads`` answer (SGLang 0.5.12 shape); sums ``loads[*]``."""
        loads = [x for x in (data.get("loads") or ()) if isinstance(x, Mapping)]
        if not loads:
            return cls(dp_ranks=0)

        def total(key: str, conv=_int):
            vals = [conv(x.get(key)) for x in loads]
            vals = [v for v in vals if v is not None]
            return sum(vals) if vals else None

        usage = [_float(x.get("token_usage")) for x in loads]
        usage = [u for u in usage if u is not None]
        accept = []
        for x in loads:
            spec = x.get("speculative")
            if isinstance(spec, Mapping):
                a = _float(spec.get("accept_length"))
                if a is not None:
                    accept.append(a)
        return cls(
            running_reqs=total("num_running_reqs"),
            waiting_reqs=total("num_waiting_reqs"),
            gen_throughput=total("gen_throughput", _float),
            max_running_requests=total("max_running_requests"),
            token_usage=(sum(usage) / len(usage)) if usage else None,
            accept_length=(sum(accept) / len(accept)) if accept else None,
            dp_ranks=len(loads),
        )


@dataclass(frozen=True)
class MetricsState:
    """What the console reads of SGLang's ``/metrics`` (``--enable-metrics``), summed over ranks.

    ``running_reqs`` / ``queue_reqs`` (req) and ``gen_throughput`` (tok/s) are gauges SGLang
    refreshes every 40 decode batches and after each prefill batch; ``decode_tokens_total`` is
    the counter ``sglang:realtime_tokens_total{mode="decode"}`` (tokens, grows on every decode
    batch: its rate between polls is the exact decode throughput); ``accept_length`` the
    speculative accept length of the last 40 decode batches.
    """

    running_reqs: int | None = None
    queue_reqs: int | None = None
    gen_throughput: float | None = None
    decode_tokens_total: float | None = None
    accept_length: float | None = None


@dataclass(frozen=True)
class ServerSample:
    """One poll of the server: version, gate (None: gate not enabled), load (None: no
    ``/v1/loads`` answer), metrics (None: no ``/metrics``), ``/server_info``'s
    ``last_gen_throughput`` (tok/s over the last 40 decode batches, never reset when idle),
    whether the server runs with ``--enable-metrics``, and why ``/v1/loads`` gave no answer."""

    version: str | None
    gate: GateState | None
    load: LoadState | None
    simulated: bool = False
    simulated_note: str | None = None
    metrics: MetricsState | None = None
    last_gen_throughput: float | None = None
    metrics_enabled: bool | None = None
    loads_error: str | None = None


#: where a load figure came from (Figure.source)
SRC_LOADS = "/v1/loads"
SRC_METRICS = "/metrics"
SRC_SERVER_INFO = "server_info"
SRC_SPEC_GATE = "spec_gate"
SRC_LOG = "log"
SRC_IDLE = "idle"


@dataclass(frozen=True)
class Figure:
    """A load figure and its source (``SRC_*``): ``value`` None means unknown (shown ``n/a``,
    never 0). ``window`` says what it averages over, e.g. ``40 decode batches`` (None: live)."""

    value: float | None = None
    source: str | None = None
    window: str | None = None


@dataclass(frozen=True)
class LoadFigures:
    """What the Load panel shows: running requests and queue (req), decode throughput (tok/s)."""

    running: Figure = field(default_factory=Figure)
    queue: Figure = field(default_factory=Figure)
    throughput: Figure = field(default_factory=Figure)


@dataclass(frozen=True)
class SetResult:
    """Answer of ``POST /set_internal_state`` (README contract).

    ``updated`` False means nothing was applied and ``reason`` says why; ``threshold`` and
    ``hysteresis`` are the values in force after the call; ``decode_step`` (accepted changes)
    the first decode batch the new values decide.
    """

    updated: bool
    reason: str | None
    threshold: int | None
    hysteresis: int | None
    decode_step: int | None = None


@dataclass(frozen=True)
class GpuRow:
    """One GPU as NVML reports it. Any None field is not supported there (rendered ``n/a``).

    Memory in MiB, temperature in °C, power and power limit in W, SM clock in MHz,
    utilization in percent. ``lost`` is NVML's GPU_IS_LOST (fell off the bus).
    """

    index: int
    name: str | None = None
    util_pct: float | None = None
    mem_used_mib: float | None = None
    mem_total_mib: float | None = None
    temp_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    sm_clock_mhz: float | None = None
    mig: bool = False
    lost: bool = False
    uuid: str | None = None
    #: a GPU the server reported: its host, node rank and TP rank (None: read by this machine's NVML)
    host: str | None = None
    node_rank: int | None = None
    tp_rank: int | None = None
    error: str | None = None


#: GpuPanelState.status values
GPU_OK = "ok"
GPU_STARTING = "starting"
GPU_NO_LIBRARY = "library_not_found"
GPU_DRIVER_MISMATCH = "driver_mismatch"
GPU_NO_DRIVER = "driver_not_loaded"
GPU_NO_PERMISSION = "no_permission"
GPU_NONE = "no_gpus"
GPU_ERROR = "error"


@dataclass(frozen=True)
class GpuPanelState:
    """Everything the GPU panel shows: an overall status, a message for non-ok states, rows."""

    status: str = GPU_STARTING
    message: str = "reading NVML…"
    driver_version: str | None = None
    rows: tuple[GpuRow, ...] = ()
    simulated: bool = False
    #: where the rows come from: GPU_FROM_LOCAL (this machine's NVML), GPU_FROM_SERVER (each TP
    #: rank's own report), GPU_FROM_BOTH (the server's, then this machine's others)
    source: str = "local"


GPU_FROM_LOCAL, GPU_FROM_SERVER, GPU_FROM_BOTH = "local", "server", "server+local"


#: the failure reason of an answer whose body is not JSON (console.client)
NOT_JSON_REASON = "answer is not JSON (not an SGLang server?)"
#: the failure reason of a body that begins as JSON and does not parse: a real server's answer cut
#: off (a connection closed mid-answer) more likely than another program, so not "not SGLang"
BROKEN_JSON_REASON = "answer is broken JSON, cut off mid-answer?"
#: the reason of a request that connected but got no answer in time (a busy or hung server, not the network)
NO_ANSWER_REASON = "timed out"


def answered_not_sglang(reason: str | None) -> bool:
    """A failure reason from :mod:`console.client` that is an HTTP answer (``HTTP 501 ...``, or a
    body that is not JSON), not a missing one: something listens there, only not as the SGLang
    contract expects."""
    return (reason or "").startswith("HTTP ") or reason == NOT_JSON_REASON


@dataclass(frozen=True)
class ConnectionState:
    """Reachability of the server's HTTP endpoint.

    ``reachable`` is None before the first answer or failure. ``down_since`` is the monotonic
    time of the first failure of the current outage (None while reachable). ``foreign`` (launch
    and demo): the port answers, but the listening process is not the server this console
    started; ``last_error`` says who it is, and nothing of it is shown or sent there.
    """

    url: str = ""
    reachable: bool | None = None
    down_since: float | None = None
    last_error: str | None = None
    failures: int = 0
    foreign: bool = False

    @property
    def auth_refused(self) -> bool:
        """The server answers but refuses the request (HTTP 401/403: wrong or missing API key)."""
        err = self.last_error or ""
        return self.reachable is False and ("HTTP 401" in err or "HTTP 403" in err)

    @property
    def down_word(self) -> str:
        """How to name an outage: ``no SGLang answer`` when something answered and ``not answering``
        when the connection was accepted but no answer came in time (``unreachable`` would send the
        operator looking for a network problem), ``no whole answer`` when the JSON was cut off, else
        ``unreachable``."""
        if answered_not_sglang(self.last_error):
            return "no SGLang answer"
        if self.last_error == BROKEN_JSON_REASON:
            return "no whole answer"
        return "not answering" if self.last_error == NO_ANSWER_REASON else "unreachable"


#: WorkerCheck.status values
CHECK_VERIFIED = "verified"
CHECK_MISMATCH = "mismatch"
CHECK_UNVERIFIED = "unverified"
CHECK_UNKNOWN = "unknown"


@dataclass(frozen=True)
class WorkerCheck:
    """Which speculative worker runs, and how it is known.

    ``live_class`` comes from the live object (``spec_gate.worker_class``); ``log_family``
    (``"v1"``/``"v2"``) from SGLang's startup line; ``log_worker`` from the
    ``spec_gate: worker=...`` line. ``status`` is one of ``verified``, ``mismatch`` (an alarm),
    ``unverified`` (no log line to cross-check) or ``unknown`` (no spec_gate).
    """

    status: str = CHECK_UNKNOWN
    live_class: str | None = None
    live_version: str | None = None
    log_family: str | None = None
    log_worker: str | None = None
    detail: str = "waiting for spec_gate"


@dataclass(frozen=True)
class PendingChange:
    """A threshold/hysteresis change asked for that ``spec_gate`` does not show yet.

    ``threshold`` / ``hysteresis`` are the latest targets (None: not being changed), set at the
    key press, before the server answers; ``old_*`` are spec_gate's values when the change
    began; ``since`` is the time of the latest request; ``accepted`` is True once the server
    accepted the latest target (then only spec_gate's confirmation is awaited).
    """

    threshold: int | None
    hysteresis: int | None
    old_threshold: int | None
    old_hysteresis: int | None
    since: float
    accepted: bool = False


#: ProcessState.phase values (launch / demo modes)
PHASE_STARTING = "starting"
PHASE_LOADING = "loading weights"
PHASE_KV = "allocating KV cache"
PHASE_GRAPHS = "capturing CUDA graphs"
PHASE_WARMUP = "warming up"
PHASE_READY = "ready"
PHASE_CRASHED = "crashed"
PHASE_STOPPING = "stopping"
PHASE_STOPPED = "stopped"
#: a launched server's phases before it is ready (its log tells them)
STARTUP_PHASES = (PHASE_STARTING, PHASE_LOADING, PHASE_KV, PHASE_GRAPHS, PHASE_WARMUP)


@dataclass(frozen=True)
class ProcessState:
    """The server child in launch/demo mode: phase, pid/pgid, exit code and last log lines.

    ``error`` is set when the console did not start the child at all (e.g. the port is taken);
    the phase is then ``crashed`` with no exit code.
    """

    phase: str = PHASE_STARTING
    pid: int | None = None
    exit_code: int | None = None
    last_lines: tuple[str, ...] = ()
    started_at: float | None = None
    restarts: int = 0
    command: str = ""
    error: str | None = None


@dataclass(frozen=True)
class ConsoleSnapshot:
    """The one state object the widgets render.

    ``batch_history`` holds the running batch size (req) per poll, oldest first;
    ``throughput_history`` tok/s per poll; ``gpu_util_history[i]`` GPU i's utilization (%)
    per NVML read (None where n/a). ``now`` is the monotonic time the snapshot was taken (for
    durations such as "unreachable for 12 s"). ``message`` is the last threshold-control
    outcome (e.g. the server's reason for a rejection). ``switches_per_min`` is the on<->off
    switch rate over the last minute (thrash around the threshold shows here). ``poll_delay_s``
    is the current delay between polls (longer than ``interval_s`` while backing off).
    """

    mode: str = "attach"
    url: str = ""
    readonly: bool = False
    interval_s: float = 1.0
    version: str | None = None
    sample_seen: bool = False
    gate: GateState | None = None
    load: LoadState | None = None
    connection: ConnectionState = field(default_factory=ConnectionState)
    worker: WorkerCheck = field(default_factory=WorkerCheck)
    pending: PendingChange | None = None
    process: ProcessState | None = None
    gpus: GpuPanelState = field(default_factory=GpuPanelState)
    batch_history: tuple[int, ...] = ()
    throughput_history: tuple[float, ...] = ()
    gpu_util_history: tuple[tuple[float | None, ...], ...] = ()
    simulated_note: str | None = None
    log_path: str | None = None
    message: str | None = None
    message_level: str = "info"
    switches_per_min: float | None = None
    poll_delay_s: float | None = None
    now: float = 0.0
    figures: LoadFigures = field(default_factory=LoadFigures)

    @property
    def running_batch(self) -> int | None:
        """Running requests (req) from the best source that answered (``figures.running``)."""
        v = self.figures.running.value
        return None if v is None else int(v)

    @property
    def decode_batch(self) -> int | None:
        """Batch size (req) of the last decode batch (spec_gate), else the running requests."""
        if self.gate is not None and self.gate.last_decode_batch_size is not None:
            return self.gate.last_decode_batch_size
        return self.running_batch

    @property
    def stale(self) -> bool:
        """True when the server values on screen predate an outage (unreachable, crashed, stopped)."""
        if not self.sample_seen:
            return False
        if self.connection.reachable is False:
            return True
        p = self.process
        return p is not None and p.phase in (PHASE_CRASHED, PHASE_STOPPING, PHASE_STOPPED)

    @property
    def max_running_requests(self) -> int | None:
        """Upper bound for the threshold (req): spec_gate's value, else /v1/loads'."""
        if self.gate is not None and self.gate.max_running_requests is not None:
            return self.gate.max_running_requests
        if self.load is not None:
            return self.load.max_running_requests
        return None

    @property
    def down_for_s(self) -> float | None:
        """Seconds the server has been unreachable, None while reachable."""
        if self.connection.down_since is None:
            return None
        return max(0.0, self.now - self.connection.down_since)
