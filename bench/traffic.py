"""Real traffic: variable request lengths and open-loop (Poisson) arrivals, beside the uniform sweep.

``bench.throughput run`` measures one shape of load: every request 256 tokens in, 256 out, a
closed loop of C concurrent requests. This module measures the shapes a production server sees,
with SGLang's own ``sglang.bench_serving`` (``--dataset-name random-ids``), against one server:

- workloads are named ``<lengths>-<arrivals>`` (:data:`LENGTHS`, :data:`ARRIVALS`):
  ``uniform-closed`` (the sweep's shape, in this CSV's columns), ``varied-closed`` (input 64-1024,
  output 32-512 tokens, C concurrent requests) and ``varied-poisson`` (the same lengths, Poisson
  arrivals at R requests/s with at most ``--max-concurrency`` in flight), plus ``short-*`` and
  ``long-*`` lengths;
- the server is either already running (``--url``: one device call can run several workloads, or
  several configurations in turn, against a server started earlier) or started here like
  ``run`` does (``--models`` / ``--target``);
- the worker (v1/v2) and attention backend columns come from the server's ``/server_info``
  (``spec_gate.spec_version`` when present, else ``disable_overlap_schedule``;
  ``attention_backend``); ``--worker`` / ``--attention-backend`` only check them (start mode:
  choose them);
- every configuration gets the same prompts and arrival times (fixed ``--seed``, see
  :func:`bench_serving_argv`); a warm-up that is not recorded runs first; ``--flush-cache`` empties
  the server's prefix cache before each row's requests, so no row's prefills hit another's prompts;
- one JSON line is printed per row as it is measured and the row is appended to the CSV at once
  (a call cut short keeps its rows).

``--profile-row WORKLOAD:LEVEL`` (e.g. ``varied-closed:64``): after the last row, that row's
requests are sent once more (not recorded: the profiler's overhead and the trace's writing would be
in the row) and ``--profile-steps`` forward steps of that pass, ``--profile-delay`` seconds in, are
recorded with SGLang's torch profiler (:func:`profile_pass`); ``compare-profiles A.json B.json``
puts two such profiles side by side (:func:`bench.trace_summary.compare_stages`).
``--cpu-profile-row WORKLOAD:LEVEL``: py-spy samples the scheduler's Python stacks during that row
itself (:class:`CpuProfile`, ``bench.cpu_profile``; ``python -m bench.cpu_profile compare``).

Configurations (the ``config`` column): ``none`` (no speculation), ``always`` (EAGLE-3, no gate),
``gate`` (EAGLE-3 with the gate at threshold N), ``off`` (the gate server forced off: threshold 1,
hysteresis 0, set live and restored at the end), ``auto`` (an auto-threshold gate server; the
threshold column says ``auto``).

Usage on the GPU machine (from the repository root):
    python -m bench.throughput traffic --url http://127.0.0.1:30500 --config gate --worker v2 \\
        --attention-backend triton --p-wrong 0.2 --workloads varied-closed,varied-poisson --out $OUT
    python -m bench.throughput traffic --url http://127.0.0.1:30500 --config off --p-wrong 0.2 --out $OUT
    python -m bench.throughput traffic --models /tmp/models/8b/p0.2 --config none --quick --out $OUT
Here: python -m bench.throughput summarize-traffic OUT/real-traffic.csv   (bench/traffic_summary.py)

bench_serving's flags are checked against the installed ``sglang/bench_serving.py`` before any
row (bench/bench_serving_cli.py).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import heapq
import json
import math
import re
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple
from urllib.parse import urlsplit

from bench.bench_serving_cli import RESULT_KEYS, check_bench_serving_cli
from bench.errors import BenchError, first_line
from server_patch.contract import ACTIVITY_COUNTERS, HYSTERESIS_FLAG, THRESHOLD_FLAG, GateConfig, GateConfigError

CONFIGS = ("none", "always", "gate", "off", "auto")
WORKERS = ("v2", "v1")
ARRIVALS = ("closed", "poisson")


@dataclasses.dataclass(frozen=True)
class Lengths:
    """Request lengths of bench_serving's ``random-ids`` dataset, in tokens.

    ``input_len`` / ``output_len`` are ``--random-input-len`` / ``--random-output-len`` and
    ``range_ratio`` is ``--random-range-ratio`` r. SGLang 0.5.12 draws each request's input and
    output length independently and uniformly from the integers ``[max(int(L * r), 1), L]``
    (``benchmark/datasets/common.py``, ``compute_random_lens``: ``np.random.randint(max(int(L * r),
    1), L + 1)``), with the one r for both, so the two ranges have the same min/max ratio. r = 1.0
    gives exactly L. (Prompts are sent as text: ``random.py`` first takes the tokenizer's special
    tokens off each input length.)
    """

    input_len: int
    output_len: int
    range_ratio: float
    note: str = ""

    @staticmethod
    def _range(full: int, ratio: float) -> Tuple[int, int]:
        return max(int(full * ratio), 1), full

    @property
    def input_range(self) -> Tuple[int, int]:
        """(shortest, longest) input, tokens."""
        return self._range(self.input_len, self.range_ratio)

    @property
    def output_range(self) -> Tuple[int, int]:
        """(shortest, longest) output, tokens."""
        return self._range(self.output_len, self.range_ratio)

    @property
    def mean_output(self) -> float:
        """Mean output length, tokens (the midpoint of the uniform range)."""
        lo, hi = self.output_range
        return (lo + hi) / 2

    @property
    def mean_input(self) -> float:
        """Mean input length, tokens (the midpoint of the uniform range)."""
        lo, hi = self.input_range
        return (lo + hi) / 2


LENGTHS: Dict[str, Lengths] = {
    "uniform": Lengths(256, 256, 1.0, "the sweep's shape: every request 256 in, 256 out"),
    "varied": Lengths(1024, 512, 0.0625, "input 64-1024, output 32-512"),
    "short": Lengths(256, 128, 0.125, "input 32-256, output 16-128"),
    "long": Lengths(2048, 1024, 0.0625, "input 128-2048, output 64-1024"),
}
DEFAULT_WORKLOADS = ["uniform-closed", "varied-closed", "varied-poisson"]
CLOSED_LEVELS = [1, 4, 16, 32, 64, 128]  # max concurrent requests
# Poisson arrivals, requests/s. With the 8B-shaped pair (README tables) and varied lengths (mean
# output 272 tokens): 2/s keeps ~2-3 requests in flight; the gate's default N = 48 is crossed at
# ~24-30/s without speculation; always-on saturates at ~24/s (6451 tok/s at 128), no speculation
# at ~40/s (10892 tok/s), so 64/s is past saturation for every configuration.
POISSON_RATES = [2.0, 8.0, 16.0, 32.0, 64.0]
POISSON_MAX_CONCURRENCY = 128  # = the server's --max-running-requests in start mode
ROW_SECONDS = 18.0
QUICK_ROW_SECONDS = 3.0
QUICK_CLOSED_LEVELS = [1, 16, 128]
QUICK_POISSON_RATES = [4.0, 32.0]
MIN_PROMPTS = 4
# (max concurrency, requests, lengths) before the first row, not recorded: both batch-size classes
# (8; 64 = OFF steps for a gate below 64), and the long prefills of the varied lengths.
WARMUP = [(8, 32, "uniform"), (64, 128, "varied")]
QUICK_WARMUP = [(8, 16, "uniform"), (64, 64, "varied")]
WARMUP_SEED = 999
# The slower of no speculation and EAGLE-3 always on per max concurrency, output tok/s (8B-shaped
# pair, p = 0.2, H200, uniform 256/256; README, bench/results/x2-2026-11-30d): request counts are
# sized so that the slower configuration takes about ROW_SECONDS per row.
REF_TOK_S = {1: 215.0, 2: 426.0, 4: 841.0, 8: 1608.0, 16: 2953.0, 32: 4737.0, 64: 6162.0, 128: 6451.0}
REF_INPUT = 256  # the input length those rows prefilled, tokens
# Prefill tokens/s for input beyond REF_INPUT: an estimate, not a measurement (2 x 8e9 FLOP per
# token at ~500 TFLOP/s of an H200's bf16); it matters only at high concurrency (varied: +288
# input tokens per request, ~6 s of a 512-request row).
PREFILL_TOK_S = 30000.0
MAX_RR = 128  # start mode: --max-running-requests and --cuda-graph-max-bs, as bench.throughput run
DEFAULT_THRESHOLD = 48  # start mode, --config gate (bench.throughput's default)
DEFAULT_CSV = "real-traffic.csv"

# CSV columns, in this order. Units: tok/s (output tokens over the row's bench_serving duration;
# steady_tok_s: over the closed-loop window in which every slot was busy, steady_s long, see
# steady_state()),
# ms (TPOT = per request (e2e - TTFT) / (output tokens - 1); e2e and TTFT from the moment a request
# is sent, i.e. after it got one of the --max-concurrency slots: time queued in the client behind
# the cap is not in them), s (duration_s).
REQUIRED_COLUMNS = [
    "config", "workload", "p_wrong", "worker", "attention_backend", "concurrency", "request_rate", "threshold",
    "output_tok_s", "mean_tpot_ms", "p99_tpot_ms", "mean_e2e_ms", "p99_e2e_ms", "mean_ttft_ms",
]
EXTRA_COLUMNS = ["accept_length", "num_requests", "completed", "duration_s", "max_concurrency",
                 "steady_tok_s", "steady_s"]
#: the columns of traffic CSVs written before the steady-state columns (rows are still appended to them)
OLD_TRAFFIC_COLUMNS = REQUIRED_COLUMNS + EXTRA_COLUMNS[:5]
TRAFFIC_COLUMNS = REQUIRED_COLUMNS + EXTRA_COLUMNS
POSITIVE_COLUMNS = ("output_tok_s", "mean_tpot_ms", "p99_tpot_ms", "mean_e2e_ms", "p99_e2e_ms", "mean_ttft_ms")


@dataclasses.dataclass(frozen=True)
class Workload:
    """One ``<lengths>-<arrivals>`` workload: ``closed`` (C concurrent requests, each sent when
    one finishes) or ``poisson`` (open loop: exponential gaps at R requests/s, at most a cap in
    flight)."""

    name: str
    lengths: Lengths
    arrivals: str


def parse_workload(name: str) -> Workload:
    """``"varied-poisson"`` -> its :class:`Workload`.

    Raises:
        ValueError: not ``<lengths>-<arrivals>`` with lengths in :data:`LENGTHS` and arrivals in
            :data:`ARRIVALS`.
    """
    lengths, _, arrivals = name.partition("-")
    if lengths not in LENGTHS or arrivals not in ARRIVALS:
        raise ValueError(f"workload {name!r} is not <lengths>-<arrivals> with lengths in "
                         f"{', '.join(LENGTHS)} and arrivals in {', '.join(ARRIVALS)}")
    return Workload(name, LENGTHS[lengths], arrivals)


def ref_tok_s(concurrency: float) -> float:
    """:data:`REF_TOK_S` at ``concurrency`` (log-log interpolation; clamped to 1..128: the
    reference server runs at most 128 requests at once)."""
    keys = sorted(REF_TOK_S)
    c = min(max(float(concurrency), keys[0]), keys[-1])
    if c in REF_TOK_S:
        return REF_TOK_S[c]
    for lo, hi in zip(keys, keys[1:]):
        if lo <= c <= hi:
            t = (math.log(c) - math.log(lo)) / (math.log(hi) - math.log(lo))
            return math.exp(math.log(REF_TOK_S[lo]) + t * (math.log(REF_TOK_S[hi]) - math.log(REF_TOK_S[lo])))
    return REF_TOK_S[keys[-1]]


def request_seconds(lengths: Lengths, concurrency: float) -> float:
    """GPU seconds one request of ``lengths`` adds to a row that keeps ``concurrency`` requests
    in flight, for the slower static configuration: its mean output at :func:`ref_tok_s` plus the
    prefill of its input beyond :data:`REF_INPUT` at :data:`PREFILL_TOK_S`."""
    extra = max(0.0, lengths.mean_input - REF_INPUT)
    return lengths.mean_output / ref_tok_s(concurrency) + extra / PREFILL_TOK_S


def closed_prompts(concurrency: int, lengths: Lengths, row_seconds: float) -> int:
    """Requests for a closed-loop row: as many as the slower static configuration serves in
    ``row_seconds`` at ``concurrency`` (:func:`request_seconds`), at least ``concurrency`` and
    :data:`MIN_PROMPTS`; with uniform lengths (ratio 1) rounded up to whole waves of
    ``concurrency`` (those requests start and end together: a part wave would run at a lower
    concurrency than the row's)."""
    n = max(row_seconds / request_seconds(lengths, concurrency), MIN_PROMPTS, concurrency)
    if lengths.range_ratio >= 1:
        return math.ceil(n / concurrency) * concurrency
    return math.ceil(n)


def poisson_prompts(rate: float, cap: int, lengths: Lengths, row_seconds: float) -> int:
    """Requests for an open-loop row at ``rate`` requests/s: ``row_seconds`` of arrivals, but past
    the slower static configuration's saturation rate with ``cap`` requests in flight
    (1 / :func:`request_seconds`) only ``row_seconds`` of its service (the arrivals then queue
    behind the cap and the row lasts as long as the server needs). At least :data:`MIN_PROMPTS`."""
    saturation = 1.0 / request_seconds(lengths, cap)
    return max(MIN_PROMPTS, math.ceil(row_seconds * min(rate, saturation)))


def fmt_rate(rate: float) -> str:
    """A request rate as written in argv and the CSV: ``8.0`` -> ``"8"``, ``2.5`` -> ``"2.5"``."""
    return f"{rate:g}"


# -- bench_serving ---------------------------------------------------------------------------------

def bench_serving_argv(host: str, port: int, lengths: Lengths, num_prompts: int, seed: int, output_file: Path, *,
                       concurrency: Optional[int] = None, rate: Optional[float] = None,
                       max_concurrency: Optional[int] = None) -> List[str]:
    """argv (without the program) for one bench_serving run: closed loop with ``concurrency``, or
    Poisson arrivals at ``rate`` requests/s capped at ``max_concurrency`` in flight.

    Same prompts for every configuration: bench_serving seeds ``random`` and ``numpy`` with
    ``--seed`` before it draws the lengths, the prompt tokens and then the arrival gaps, so one
    (lengths, ``num_prompts``, ``seed``, rate) gives the same requests at the same times.
    ``--flush-cache`` empties the prefix cache after bench_serving's one warm-up request.
    """
    if (concurrency is None) == (rate is None):
        raise ValueError("give concurrency (closed loop) or rate (open loop)")
    argv = [
        "--backend", "sglang", "--host", host, "--port", str(port), "--dataset-name", "random-ids",
        "--random-input-len", str(lengths.input_len), "--random-output-len", str(lengths.output_len),
        "--random-range-ratio", repr(lengths.range_ratio),
        "--num-prompts", str(num_prompts), "--seed", str(seed), "--output-file", str(output_file),
        "--disable-tqdm", "--flush-cache",
    ]
    if concurrency is not None:
        # --request-rate stays inf: a closed loop; per-request TTFT and ITLs for steady_state()
        argv += ["--max-concurrency", str(concurrency), "--output-details"]
    else:
        argv += ["--request-rate", fmt_rate(rate), "--max-concurrency", str(max_concurrency)]
    return argv


_DRIVER = None


def serving_driver():
    """The process's one :class:`bench.serving_driver.ServingDriver` (SGLang imported once)."""
    global _DRIVER
    if _DRIVER is None:
        from bench.serving_driver import ServingDriver

        _DRIVER = ServingDriver()
    return _DRIVER


def run_bench_serving(argv: List[str], output_file: Path) -> Dict[str, Any]:
    """Run bench_serving with ``argv`` (which names ``output_file``); return its JSON result line.

    Raises:
        RuntimeError: bench_serving failed or wrote no result line (its output tail in the message).
    """
    if output_file.exists():
        output_file.unlink()
    out = serving_driver().run(argv)
    if not output_file.exists() or not output_file.read_text().strip():
        raise RuntimeError(f"bench_serving wrote no {output_file}:\n{out[-2000:]}")
    return json.loads(output_file.read_text().strip().splitlines()[-1])


# -- the server ------------------------------------------------------------------------------------

def split_url(url: str) -> Tuple[str, int]:
    """``http://HOST:PORT`` -> (HOST, PORT).

    Raises:
        BenchError: another scheme, no host, no port, or a path.
    """
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        port, parts = None, None
    if parts is None or parts.scheme != "http" or not parts.hostname or port is None or parts.path not in ("", "/"):
        raise BenchError(f"--url {url}: expected http://HOST:PORT (the server bench_serving talks to)")
    return parts.hostname, port


def server_facts(info: Dict[str, Any]) -> Dict[str, Any]:
    """What the rows are labelled with, from a ``/server_info`` answer: ``worker`` (``spec_gate.
    spec_version`` when the gate is there, else ``"v1"`` if ``disable_overlap_schedule`` else
    ``"v2"``; None if neither is present) and ``worker_source``, ``attention_backend``
    (``attention_backend``, else ``decode_attention_backend``; None if unset), ``spec_gate``
    (None without the gate), ``threshold`` / ``hysteresis`` (the gate's, requests), and
    ``speculative_algorithm``, ``max_running_requests``, ``version``."""
    states = info.get("internal_states") or [{}]
    gate = states[0].get("spec_gate") if isinstance(states[0], dict) else None
    gate = gate if isinstance(gate, dict) else None
    if gate and gate.get("spec_version") in WORKERS:
        worker, source = gate["spec_version"], "spec_gate.spec_version"
    elif "disable_overlap_schedule" in info:
        worker, source = ("v1" if info["disable_overlap_schedule"] else "v2"), "disable_overlap_schedule"
    else:
        worker, source = None, None
    return {
        "worker": worker, "worker_source": source,
        "attention_backend": info.get("attention_backend") or info.get("decode_attention_backend"),
        "speculative_algorithm": info.get("speculative_algorithm"),
        "spec_gate": gate,
        "threshold": gate.get("threshold") if gate else None,
        "hysteresis": gate.get("hysteresis") if gate else None,
        "max_running_requests": info.get("max_running_requests"),
        "version": info.get("version"),
    }


def check_server(config: str, facts: Dict[str, Any], url: str, worker: Optional[str],
                 attention_backend: Optional[str]) -> Dict[str, Any]:
    """``facts`` with ``worker`` and ``attention_backend`` settled, once the server is the
    configuration asked for (flags fill in what ``/server_info`` lacks, never override it).

    Raises:
        BenchError: ``none`` on a speculating server; ``always`` / ``gate`` / ``off`` / ``auto``
            without speculation; ``always`` with the gate, ``gate`` / ``off`` without it; a
            ``worker`` or ``attention_backend`` other than the server's; no worker known at all.
    """
    algo, gate = facts["speculative_algorithm"], facts["spec_gate"]
    if config == "none" and algo:
        raise BenchError(f"--config none, but the server at {url} runs {algo} speculation")
    if config != "none" and not algo:
        raise BenchError(f"--config {config}, but the server at {url} does not speculate "
                         f"(no speculative_algorithm in /server_info)")
    if config == "always" and gate:
        raise BenchError(f"--config always, but the server at {url} has the speculation gate "
                         f"(threshold {gate.get('threshold')}); use --config gate or off")
    if config in ("gate", "off") and not gate:
        raise BenchError(f"--config {config} needs the speculation gate, but the server at {url} has no "
                         f"spec_gate in /server_info (start it with {THRESHOLD_FLAG})")
    out = dict(facts)
    for key, flag, value in (("worker", "--worker", worker), ("attention_backend", "--attention-backend",
                                                               attention_backend)):
        if value is not None and out[key] is not None and value != out[key]:
            raise BenchError(f"{flag} {value}, but the server at {url} runs {out[key]} "
                             f"(/server_info {out.get('worker_source') if key == 'worker' else key})")
        if out[key] is None:
            out[key] = value
    if out["worker"] is None:
        raise BenchError(f"/server_info of {url} says neither spec_gate.spec_version nor "
                         f"disable_overlap_schedule: give --worker")
    if out["worker_source"] is None:
        out["worker_source"] = "--worker"
    return out


# -- rows ------------------------------------------------------------------------------------------

def threshold_label(config: str, facts: Dict[str, Any]) -> Any:
    """The threshold column: the gate's N for ``gate``, 1 for ``off``, ``"auto"`` for ``auto``,
    empty for ``none`` and ``always``."""
    if config == "gate":
        return facts["threshold"]
    if config == "off":
        return 1
    return "auto" if config == "auto" else ""


def steady_state(result: Dict[str, Any], concurrency: int) -> Optional[Tuple[float, float]]:
    """Output tok/s of a closed-loop row while all ``concurrency`` slots were busy:
    ``(tok_s, window_s)``, or None when ``result`` has no per-request details (bench_serving
    without ``--output-details``), a request failed, or there is no such window.

    The row's ``output_throughput`` divides every token by the whole run, whose last seconds drain
    from ``concurrency`` requests to none (at 128 requests of 32-512 output tokens on an H200, ~11 s
    rows of 310 requests spent several seconds draining: h200-2026-12-06). The window here opens
    when the first request ends (the first burst of prefills is over and slots start to turn over)
    and closes when the last request is sent (from then on fewer are in flight).

    Timeline: bench_serving sends request i when it gets one of ``concurrency`` slots of an
    ``asyncio.Semaphore`` (FIFO), in order, with ``--request-rate inf``; so the first
    ``concurrency`` start at 0 and request i >= ``concurrency`` starts when the earliest running
    one ends. A request's end is its start + TTFT + the sum of its ITLs (bench_serving's
    ``latency`` of a streamed request). Its ``output_lens`` tokens are spread evenly over its
    chunks (the first at start + TTFT, each next one an ITL later): exact for one token a chunk
    (speculation off), an even split of a chunk's accepted tokens otherwise. Source of the keys:
    ``result_details`` in ``sglang/bench_serving.py`` (0.5.12)."""
    try:
        ttfts, itls, lens = result["ttfts"], result["itls"], result["output_lens"]
    except KeyError:
        return None
    errors = result.get("errors") or []
    if any(errors) or not (len(ttfts) == len(itls) == len(lens)) or len(lens) <= concurrency:
        return None
    ends: List[float] = []  # a heap of the running requests' end times
    requests = []
    for ttft, gaps, n in zip(ttfts, itls, lens):
        start = heapq.heappop(ends) if len(ends) == concurrency else 0.0  # the earliest slot to free
        chunks = [start + ttft]
        for gap in gaps:
            chunks.append(chunks[-1] + gap)
        heapq.heappush(ends, chunks[-1])
        requests.append((start, chunks, n))
    first_end = min(chunks[-1] for _, chunks, _ in requests)
    last_start = requests[-1][0]
    window = last_start - first_end
    if window <= 0:
        return None
    tokens = 0.0
    for _, chunks, n in requests:
        per_chunk = n / len(chunks)
        tokens += per_chunk * sum(1 for t in chunks if first_end <= t < last_start)
    return tokens / window, window


def build_row(config: str, workload: Workload, p_wrong: Any, facts: Dict[str, Any], result: Dict[str, Any], *,
              num_prompts: int, concurrency: Optional[int] = None, rate: Optional[float] = None,
              max_concurrency: Optional[int] = None, accept_length: Optional[float] = None) -> Dict[str, Any]:
    """One CSV row (:data:`TRAFFIC_COLUMNS`) from a bench_serving ``result`` line.

    Raises:
        RuntimeError: the result line lacks one of :data:`RESULT_KEYS`, or no request completed.
    """
    missing = [k for k in RESULT_KEYS if k not in result]
    if missing:
        raise RuntimeError(f"bench_serving's result line lacks {', '.join(missing)}")
    if not result["completed"]:
        raise RuntimeError(f"no request of {num_prompts} completed ({workload.name})")

    def ms(key: str) -> float:
        return round(float(result[key]), 3)

    steady = steady_state(result, concurrency) if concurrency is not None else None

    return {
        "config": config, "workload": workload.name, "p_wrong": p_wrong, "worker": facts["worker"],
        "attention_backend": facts["attention_backend"] or "",
        "concurrency": concurrency if concurrency is not None else "",
        "request_rate": fmt_rate(rate) if rate is not None else "",
        "threshold": threshold_label(config, facts),
        "output_tok_s": round(float(result["output_throughput"]), 1),
        "mean_tpot_ms": ms("mean_tpot_ms"), "p99_tpot_ms": ms("p99_tpot_ms"),
        "mean_e2e_ms": ms("mean_e2e_latency_ms"), "p99_e2e_ms": ms("p99_e2e_latency_ms"),
        "mean_ttft_ms": ms("mean_ttft_ms"),
        "accept_length": "" if accept_length is None else round(float(accept_length), 3),
        "num_requests": num_prompts, "completed": int(result["completed"]),
        "duration_s": round(float(result["duration"]), 3),
        "max_concurrency": concurrency if concurrency is not None else max_concurrency,
        "steady_tok_s": "" if steady is None else round(steady[0], 1),
        "steady_s": "" if steady is None else round(steady[1], 3),
    }


def check_csv(path: Path) -> None:
    """Raise :class:`BenchError` unless ``path`` is absent, empty, or a CSV with exactly
    :data:`TRAFFIC_COLUMNS` (rows are appended to it)."""
    if path.is_dir():
        raise BenchError(f"{path} is a directory")
    if not path.exists() or path.stat().st_size == 0:
        return
    try:
        with path.open(newline="", encoding="utf-8-sig") as f:
            header = next(csv.reader(f), [])
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise BenchError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    if header not in (TRAFFIC_COLUMNS, OLD_TRAFFIC_COLUMNS):
        raise BenchError(f"{path} has other columns than a traffic CSV ({','.join(header)[:120]}); "
                         f"rows would not line up: give another --csv-name or move it")


def append_row(path: Path, row: Dict[str, Any]) -> None:
    """Append ``row`` to the CSV at ``path`` (header first when the file is new or empty); a CSV
    of :data:`OLD_TRAFFIC_COLUMNS` gets the row without the steady-state columns."""
    new = not path.exists() or path.stat().st_size == 0
    columns = TRAFFIC_COLUMNS
    if not new:
        with path.open(newline="", encoding="utf-8-sig") as f:
            columns = next(csv.reader(f), []) or TRAFFIC_COLUMNS
    with path.open("a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        if new:
            w.writeheader()
        w.writerow(row)


# -- measuring -------------------------------------------------------------------------------------

# --profile-row: SGLang's torch profiler over live traffic (bench.trace_summary reads the traces).
PROFILE_STEPS = 200  # forward steps (scheduler batches: prefills and decode steps alike)
# After the profiled pass starts: the closed loop's first burst of prefills (every slot at once) is
# over and requests end at spread-out times (varied lengths at 64 requests, 8B on the H200:
# ~13 ms a step, 32-512 output tokens a request, so the first ones end after ~0.5-7 s).
PROFILE_DELAY_S = 6.0


#: the profiled pass sends up to this many times the row's requests (same lengths and arrival
#: process): with only the row's (112 at 64 concurrent, 6 s rows), the pass was draining when the
#: window began, ~9 and ~16 tokens a decode step instead of 64 (bench/results/h200-2026-12-03c/README.md)
PROFILE_PASS_FACTOR = 3


def profile_pass_factor(delay_s: float, row_seconds: Optional[float]) -> int:
    """How many times the row's requests the profiled pass sends: enough that the pass lasts about
    twice the delay plus a 2 s window (a closed loop drains over its last ~20%), at most
    :data:`PROFILE_PASS_FACTOR`: 3 for 6 s rows and the default 6 s delay, 1 for rows of 16 s and
    more. ``row_seconds``: None (rows sized by ``--num-prompts``) gives the most."""
    if not row_seconds:
        return PROFILE_PASS_FACTOR
    return max(1, min(PROFILE_PASS_FACTOR, math.ceil(2 * (delay_s + 2.0) / row_seconds)))


@dataclasses.dataclass(frozen=True)
class ProfileSpec:
    """``--profile-row WORKLOAD:LEVEL``: after the last row, that row's requests are sent once more
    (up to :data:`PROFILE_PASS_FACTOR` times as many; not recorded) and ``steps`` forward steps of
    that pass, ``delay_s`` after it starts, are recorded with SGLang's profiler (``--cpu-profile-row``
    uses it too: ``delay_s`` into the row itself, ``steps`` unused). ``level``: the closed
    loop's max concurrency, or the Poisson rate (requests/s)."""

    workload: str
    level: float
    steps: int = PROFILE_STEPS
    delay_s: float = PROFILE_DELAY_S

    def matches(self, name: str, lv: Dict[str, Any]) -> bool:
        """Whether the row ``name`` at level ``lv`` (:meth:`Plan.levels`) is the profiled one."""
        value = lv.get("concurrency", lv.get("rate"))
        return name == self.workload and value is not None and float(value) == float(self.level)

    @property
    def level_tag(self) -> str:
        """``c64`` (closed loop) or ``r32`` (Poisson), as in the raw result files."""
        return (f"c{int(self.level)}" if self.workload.endswith("-closed") else f"r{fmt_rate(self.level)}")


def parse_profile_row(text: str, flag: str = "--profile-row") -> Tuple[Workload, float]:
    """``"varied-closed:64"`` -> (its workload, 64.0); ``"varied-poisson:32"`` -> (..., 32.0).

    Raises:
        ValueError: not ``WORKLOAD:LEVEL`` with a known workload, and a closed loop's level a
            whole number of requests >= 1 or a Poisson rate > 0.
    """
    name, sep, level = text.partition(":")
    if not sep:
        raise ValueError(f"{flag} {text!r} is not WORKLOAD:LEVEL (e.g. varied-closed:64, varied-poisson:32)")
    w = parse_workload(name.strip())
    try:
        value = float(level)
    except ValueError:
        value = math.nan
    closed = w.arrivals == "closed"
    if not (math.isfinite(value) and value > 0 and (not closed or (value == int(value) and value >= 1))):
        what = "a number of concurrent requests >= 1" if closed else "a request rate > 0 (requests/s)"
        raise ValueError(f"{flag} {text!r}: the level of {w.name} is {what}")
    return w, value


@dataclasses.dataclass
class Plan:
    """What one ``traffic`` call measures: workloads in order, closed-loop levels (max concurrent
    requests), Poisson rates (requests/s) with their cap, request counts (``num_prompts`` for every
    row, else sized by ``row_seconds``), the seed, the warm-up."""

    workloads: List[Workload]
    concurrency: List[int]
    rates: List[float]
    max_concurrency: int
    row_seconds: float
    num_prompts: Optional[int]
    seed: int
    warmup: List[Tuple[int, int, str]]
    profile: Optional[ProfileSpec] = None
    #: ``--cpu-profile-row``: the row during which py-spy samples the scheduler (``bench.cpu_profile``)
    cpu_profile: Optional[ProfileSpec] = None

    def levels(self, w: Workload) -> List[Dict[str, Any]]:
        """Per row of ``w``: ``{concurrency | rate, max_concurrency, num_prompts}``."""
        if w.arrivals == "closed":
            return [{"concurrency": c, "max_concurrency": c,
                     "num_prompts": self.num_prompts or closed_prompts(c, w.lengths, self.row_seconds)}
                    for c in self.concurrency]
        return [{"rate": r, "max_concurrency": self.max_concurrency,
                 "num_prompts": self.num_prompts or poisson_prompts(r, self.max_concurrency, w.lengths,
                                                                   self.row_seconds)}
                for r in self.rates]

    def argvs(self, host: str, port: int, work: Path, tag: str) -> List[Tuple[str, List[str], Path, Dict[str, Any]]]:
        """(workload name, argv, output file, level) for every row, in order."""
        out = []
        for w in self.workloads:
            for lv in self.levels(w):
                level = f"c{lv['concurrency']}" if "concurrency" in lv else f"r{fmt_rate(lv['rate'])}"
                path = work / f"traffic-{tag}-{w.name}-{level}.jsonl"
                argv = bench_serving_argv(host, port, w.lengths, lv["num_prompts"], self.seed, path,
                                          concurrency=lv.get("concurrency"), rate=lv.get("rate"),
                                          max_concurrency=lv["max_concurrency"])
                out.append((w.name, argv, path, lv))
        return out


GATE_CONFIGS = ("gate", "auto", "off")  # configurations whose server runs the gate (spec_gate in /server_info)


def gate_snapshot(config: str, url: str) -> Optional[Dict[str, Any]]:
    """The server's ``spec_gate`` now, for a configuration that runs the gate (``GATE_CONFIGS``); None
    for ``none`` / ``always`` or when ``/server_info`` cannot be read (a label, never a lost row)."""
    if config not in GATE_CONFIGS:
        return None
    from bench import server_harness

    try:
        return server_facts(server_harness.server_info(url))["spec_gate"]
    except Exception:  # noqa: BLE001 - a label, not a measurement: never lose the row for it
        return None


def gate_row_delta(before: Optional[Dict[str, Any]], after: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """What a gate server did during one row, from its ``spec_gate`` before and after it: the change
    of each counter of ``server_patch.contract.ACTIVITY_COUNTERS`` present in both (decode steps ON /
    OFF, switches, auto's probes and probe steps, resume steps, the KV reserve's top-ups and steps
    without allocation), ``on_share`` (ON decode steps / all,
    None without decode steps) and the ``auto_reason`` at the end. It tells a row's loss in auto mode
    from probes and switches apart from slower steps. None when a snapshot is missing or a counter
    went back (the server restarted during the row: the difference would be meaningless)."""
    if not before or not after:
        return None
    delta: Dict[str, Any] = {}
    for key in ACTIVITY_COUNTERS:
        a, b = before.get(key), after.get(key)
        if isinstance(a, int) and isinstance(b, int):
            if b < a:
                return None
            delta[key] = b - a
    delta["on_share"] = on_share(delta.get("decode_steps_on"), delta.get("decode_steps_off"))
    delta["auto_reason"] = after.get("auto_reason")
    return delta


def on_share(on: Optional[int], off: Optional[int]) -> Optional[float]:
    """ON decode steps over all (rounded to 4 places), None when a count is missing or there were none."""
    return round(on / (on + off), 4) if on is not None and off is not None and on + off else None


def accept_length_for(config: str, gate: Optional[Dict[str, Any]], result: Dict[str, Any]) -> Optional[float]:
    """Accept length for a row: ``spec_gate.accept_length_recent`` on a gate server (``gate``, ``auto``;
    ``gate`` is its ``spec_gate`` after the row: SGLang's own average counts tokens made while
    speculation was off), bench_serving's ``accept_length`` for ``always`` (and a gate server whose
    ``spec_gate`` could not be read), None for ``none`` and ``off`` (no speculative step in the row)."""
    if config in ("none", "off"):
        return None
    if config in ("gate", "auto") and gate is not None:
        return gate.get("accept_length_recent")
    return result.get("accept_length")


class CpuProfile:
    """``--cpu-profile-row``: py-spy samples the TP-0 scheduler's Python stacks during the measured row
    itself (``--nonblocking``: the process is never paused), ``spec.delay_s`` into it for
    ``bench.cpu_profile.RECORD_SECONDS``, on a thread started here. The server must run on this
    machine (start mode, or ``--url`` of a local one). :meth:`finish` waits for the recording and
    writes ``OUT/cpu-profile-...txt`` (raw) and ``.json`` (the summary, tokens estimated from the
    row's output tok/s); every failure is recorded and printed, never raised."""

    def __init__(self, config: str, p_wrong: Any, facts: Dict[str, Any], spec: ProfileSpec, out: Path,
                 port: Optional[int] = None):
        from bench import cpu_profile

        self.cpu_profile = cpu_profile
        self.port = port  # the measured server's: with two servers up (bench.ab_traffic), its scheduler only
        self.name = profile_name(config, facts["worker"], p_wrong, spec, kind="cpu-profile")
        self.raw = out / f"{self.name}.txt"
        self.meta = dict(zip(cpu_profile.META_KEYS, (config, facts["worker"], p_wrong, spec.workload, spec.level,
                                                     spec.delay_s, cpu_profile.RECORD_SECONDS)))
        self.result: Dict[str, Any] = {}
        self.thread = threading.Thread(target=self._record, args=(spec.delay_s,), name="cpu-profile", daemon=True)
        self.thread.start()

    def _record(self, delay_s: float) -> None:
        time.sleep(delay_s)
        pids = self.cpu_profile.scheduler_pids(port=self.port)
        if not pids:
            where = f" of the server listening on port {self.port}" if self.port is not None else ""
            self.result = {"ok": False,
                           "error": f"no {self.cpu_profile.SCHEDULER_TITLE}* process{where} on this machine"}
            return
        self.result = {"pid": pids[0], **self.cpu_profile.record(pids[0], self.cpu_profile.RECORD_SECONDS, self.raw)}

    def finish(self, row: Dict[str, Any]) -> Dict[str, Any]:
        """Wait for the recording; summarize it (``row``: the measured row, for its output tok/s)."""
        self.thread.join()
        out = {**self.meta, **self.result, "raw": str(self.raw)}
        if out.get("ok"):
            try:
                doc = self.cpu_profile.profile_row(self.raw, float(row.get("output_tok_s") or 0) or None,
                                                   self.cpu_profile.RECORD_SECONDS, self.meta)
                out.update(json=str(self.cpu_profile.summary_path(self.raw)), samples=doc["samples"],
                           top=[r["function"] for r in doc["inclusive"][:5]])
            except (OSError, ValueError) as exc:
                out.update(ok=False, error=f"{type(exc).__name__}: {exc}")
        if not out.get("ok"):
            print(f"warning: cpu profile: {out.get('error')}", file=sys.stderr, flush=True)
        print(json.dumps({"cpu_profile": self.name, **{k: out.get(k) for k in ("ok", "samples", "top")}}), flush=True)
        return out


def measure(config: str, p_wrong: Any, url: str, facts: Dict[str, Any], plan: Plan, csv_path: Path, work: Path,
            meta: Dict[str, Any], save) -> List[Dict[str, Any]]:
    """Warm up (not recorded), then every row of ``plan``: print it as one JSON line, append it to
    ``csv_path``, note it in ``meta`` (on a gate server with its ``spec_gate_delta``:
    :func:`gate_row_delta`) and ``save()`` (so a call cut short keeps what it measured).
    The profiled pass of ``plan.profile`` runs after the last row, so that no measured row follows
    a profiler session (on 2026-12-04 the row after one ran 0.80x of the same row on a server that
    had none; whether the profiler did it is not known: ``bench/results/h200-2026-12-04/README.md``)."""
    host, port = split_url(url)
    work.mkdir(parents=True, exist_ok=True)
    tag = f"{config}-{facts['worker']}"
    meta["warmup_output_tok_s"] = []
    for i, (c, n, lengths) in enumerate(plan.warmup):
        path = work / f"traffic-{tag}-warmup{i}.jsonl"
        res = run_bench_serving(bench_serving_argv(host, port, LENGTHS[lengths], n, WARMUP_SEED, path,
                                                   concurrency=c), path)
        meta["warmup_output_tok_s"].append(round(float(res["output_throughput"]), 1))
    if plan.warmup:
        print(f"warm-up (not recorded): {meta['warmup_output_tok_s']} tok/s", flush=True)
    save()
    rows: List[Dict[str, Any]] = []
    profiled = None
    for name, argv, path, lv in plan.argvs(host, port, work, tag):
        t0 = time.time()
        cpu = (CpuProfile(config, p_wrong, facts, plan.cpu_profile, csv_path.parent, port)
               if plan.cpu_profile is not None and plan.cpu_profile.matches(name, lv) else None)
        before = gate_snapshot(config, url)
        res = run_bench_serving(argv, path)
        after = gate_snapshot(config, url)
        row = build_row(config, parse_workload(name), p_wrong, facts, res, num_prompts=lv["num_prompts"],
                        concurrency=lv.get("concurrency"), rate=lv.get("rate"),
                        max_concurrency=lv["max_concurrency"], accept_length=accept_length_for(config, after, res))
        if row["completed"] < row["num_requests"]:
            level = f"c={row['concurrency']}" if row["concurrency"] != "" else f"r={row['request_rate']}/s"
            print(f"warning: {name} {level}: only {row['completed']} of {row['num_requests']} requests "
                  f"completed", file=sys.stderr, flush=True)
        print(json.dumps(row), flush=True)
        append_row(csv_path, row)
        rows.append(row)
        meta["rows"].append({**row, "wall_s": round(time.time() - t0, 1),
                             **({"spec_gate_delta": gate_row_delta(before, after)} if config in GATE_CONFIGS else {})})
        if cpu is not None:
            meta["cpu_profile"] = cpu.finish(row)
        save()
        if plan.profile is not None and plan.profile.matches(name, lv) and profiled is None:
            profiled = (argv, path, row)
    if profiled is not None:
        argv, path, row = profiled
        factor = profile_pass_factor(plan.profile.delay_s, None if plan.num_prompts else plan.row_seconds)
        meta["profile"] = profile_pass(config, p_wrong, url, facts, plan.profile, argv, path, csv_path.parent,
                                       tokens_per_verify_for(config, row), factor)
        save()
    return rows


def tokens_per_verify_for(config: str, row: Dict[str, Any]) -> Optional[float]:
    """Output tokens per request of a TARGET_VERIFY batch in a profile of ``config``: 1 for ``off``
    (an OFF step keeps exactly the bonus token), the row's accept length for configurations that
    speculate (an estimate: the trace does not say which steps accepted what), None for ``none``
    (no verify batches) or when the row has no accept length. A gate server's profile replaces it
    with :func:`mixed_tokens_per_verify` of the profiled pass itself."""
    if config == "off":
        return 1.0
    value = row.get("accept_length")
    return float(value) if config != "none" and isinstance(value, (int, float)) else None


def mixed_tokens_per_verify(delta: Optional[Dict[str, Any]], accept_length: Optional[float]) -> Optional[float]:
    """Output tokens per request of a TARGET_VERIFY batch on a gate server over a stretch whose
    ``spec_gate`` counter change is ``delta`` (:func:`gate_row_delta`): ON steps make
    ``accept_length`` tokens a request, OFF steps 1 (the bonus token), so
    ``(on * accept_length + off) / (on + off)``. The trace's verify spans look alike ON and OFF (a
    CUDA-graph draft extend records no span), hence this count. None when a count is missing or
    there were no decode steps, or ON steps without an accept length."""
    if not delta:
        return None
    on, off = delta.get("decode_steps_on"), delta.get("decode_steps_off")
    if not isinstance(on, int) or not isinstance(off, int) or on + off <= 0:
        return None
    if on == 0:
        return 1.0
    if not isinstance(accept_length, (int, float)) or not math.isfinite(accept_length) or accept_length < 1:
        return None
    return round((on * float(accept_length) + off) / (on + off), 4)


def profile_name(config: str, worker: str, p_wrong: Any, spec: ProfileSpec, kind: str = "profile-traffic") -> str:
    """``KIND-CONFIG-WORKER-pP-WORKLOAD-LEVEL``: the trace directory and (+ ``.json``) the summary of
    one profile in ``--out`` (``kind`` ``cpu-profile``: a ``--cpu-profile-row`` recording)."""
    return f"{kind}-{config}-{worker}-p{safe_label(p_wrong)}-{spec.workload}-{spec.level_tag}"


def profile_pass(config: str, p_wrong: Any, url: str, facts: Dict[str, Any], spec: ProfileSpec, argv: List[str],
                 row_file: Path, out: Path, tokens_per_verify: Optional[float],
                 factor: int = PROFILE_PASS_FACTOR) -> Dict[str, Any]:
    """The profiled pass of ``--profile-row``: ``argv`` (the row's bench_serving run: the same
    requests, ``factor`` times as many: :func:`profile_pass_factor`) once more, not recorded; ``spec.delay_s`` after it starts, ``POST /start_profile``
    for ``spec.steps`` forward steps (CPU + GPU, without stacks or shapes) into
    ``out/NAME/`` (:func:`profile_name`); SGLang writes one trace per TP rank when they are done
    (``/stop_profile`` if the pass ended first). Each trace is summarized with
    :func:`bench.trace_summary.summarize` and :func:`bench.trace_summary.stage_summary`, all of it
    written to ``out/NAME.json``. Returns a short record for the call's JSON.

    A diagnostic: every failure is recorded (``errors``) and printed, never raised, except an
    interrupt (KeyboardInterrupt: the device call's SIGTERM).
    """
    import zlib

    import httpx

    from bench import server_harness, trace_summary

    name = profile_name(config, facts["worker"], p_wrong, spec)
    trace_dir = (out / name).resolve()
    json_path = out / f"{name}.json"
    doc: Dict[str, Any] = {
        "command": "python -m bench.throughput " + " ".join(sys.argv[1:]), "config": config, "p_wrong": p_wrong,
        "workload": spec.workload, "level": spec.level, "worker": facts["worker"],
        "attention_backend": facts["attention_backend"], "threshold": threshold_label(config, facts),
        "profile": {"steps": spec.steps, "delay_s": spec.delay_s, "options": trace_summary.PROFILE_OPTIONS,
                    "dir": str(trace_dir)},
        "tokens_per_verify": tokens_per_verify, "traces": {}, "primary": None, "errors": [],
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    errors: List[str] = doc["errors"]
    started: Dict[str, Any] = {}
    try:
        trace_dir.mkdir(parents=True, exist_ok=True)
        before = set(trace_dir.glob("*.trace.json*"))
    except OSError as exc:
        errors.append(f"cannot make {trace_dir}: {exc}")
        before = None
    done = threading.Event()

    def start() -> None:  # in a thread: bench_serving holds the main thread (and its stdout)
        if spec.delay_s > 0 and done.wait(spec.delay_s):
            started["error"] = f"the pass ended within --profile-delay {spec.delay_s:g} s: nothing recorded"
            return
        started["at_s"] = round(time.time() - t0, 2)
        try:
            reply = httpx.post(url + "/start_profile", timeout=120, json={
                "output_dir": str(trace_dir), "num_steps": spec.steps, **trace_summary.PROFILE_OPTIONS})
            started["status"] = reply.status_code
            if reply.status_code != 200:
                started["error"] = f"/start_profile answered {reply.status_code}: {reply.text[:300]}"
        except Exception as exc:  # noqa: BLE001 - recorded
            started["error"] = f"/start_profile: {type(exc).__name__}: {exc}"

    mixed_steps = config in ("gate", "auto")  # ON and OFF steps in one pass (off: OFF steps only)
    gate_before = gate_snapshot(config, url) if mixed_steps else None
    pass_argv = list(argv)
    pass_file = row_file.with_name(row_file.stem + "-profile" + row_file.suffix)
    pass_argv[pass_argv.index("--output-file") + 1] = str(pass_file)
    # more requests than the row's, so that the window lies in the steady load, not in the drain
    i = pass_argv.index("--num-prompts") + 1
    pass_argv[i] = str(factor * int(pass_argv[i]))
    t0, interrupted = time.time(), False
    thread = threading.Thread(target=start, name="start-profile", daemon=True)
    if before is not None:
        thread.start()
    try:
        if before is not None:
            res = run_bench_serving(pass_argv, pass_file)
            doc["pass"] = {"output_tok_s": round(float(res.get("output_throughput", 0.0)), 1),
                           "duration_s": round(float(res.get("duration", 0.0)), 3),
                           "completed": res.get("completed"), "wall_s": round(time.time() - t0, 1)}
    except Exception as exc:  # noqa: BLE001 - the row is measured; the profile is a diagnostic
        errors.append(f"the profiled pass failed: {first_line(exc)}")
    except BaseException:  # an interrupt: leave at once
        interrupted = True
        raise
    finally:
        done.set()
        if thread.is_alive():
            thread.join(timeout=1 if interrupted else 150)
    doc["start_profile"] = started
    gate_after = gate_snapshot(config, url) if mixed_steps else None
    if gate_after is not None:  # ON and OFF steps of the pass: the window's verify batches made this many tokens
        delta = gate_row_delta(gate_before, gate_after)
        doc["pass_spec_gate_delta"] = delta
        mixed = mixed_tokens_per_verify(delta, gate_after.get("accept_length_recent"))
        if mixed is not None:
            doc["tokens_per_verify_row"] = tokens_per_verify
            tokens_per_verify = doc["tokens_per_verify"] = mixed
    if "error" in started:
        errors.append(started["error"])
    if before is not None and started.get("status") == 200:
        new = sorted(set(trace_dir.glob("*.trace.json*")) - before)
        if not new:  # fewer than spec.steps forward steps in the pass: write what was recorded
            doc["stopped_early"] = True
            try:
                reply = httpx.post(url + "/stop_profile", timeout=600)
                doc["stop_profile"] = reply.status_code
            except Exception as exc:  # noqa: BLE001 - recorded
                errors.append(f"/stop_profile: {type(exc).__name__}: {exc}")
            new = sorted(set(trace_dir.glob("*.trace.json*")) - before)
        if not new:
            errors.append(f"no trace in {trace_dir} (SGLang writes them on the server's machine: is it this one?)")
        speculative = config != "none"
        for path in new:
            try:
                events = trace_summary.load_events(path)
                doc["traces"][path.name] = {
                    "bytes": path.stat().st_size, "summary": trace_summary.summarize(events),
                    "stages": trace_summary.stage_summary(events, tokens_per_verify, speculative)}
            except (OSError, ValueError, EOFError, zlib.error, MemoryError) as exc:
                doc["traces"][path.name] = {"error": f"{type(exc).__name__}: {exc}"}
                errors.append(f"{path.name}: {exc}")
        ranked = sorted(doc["traces"], key=lambda n: (not re.search(r"-TP-0\b", n), n))
        doc["primary"] = ranked[0] if ranked else None
    try:
        doc["final_spec_gate"] = server_facts(server_harness.server_info(url))["spec_gate"]
    except Exception:  # noqa: BLE001 - a label
        doc["final_spec_gate"] = None
    try:
        server_harness.write_json(json_path, doc)
    except Exception as exc:  # noqa: BLE001 - recorded in the call's JSON instead
        errors.append(f"cannot write {json_path}: {exc}")
    brief: Dict[str, Any] = {"json": str(json_path), "dir": str(trace_dir), "errors": errors}
    primary = doc["traces"].get(doc["primary"]) if doc["primary"] else None
    if primary and "stages" in primary:
        st = primary["stages"]
        brief.update(window_ms=st["window_ms"], output_tokens=st["tokens"]["output_tokens"],
                     stages_ms={c: v["total_ms"] for c, v in st["stages"].items()})
    print(json.dumps({"profile": config, "workload": spec.workload, "level": spec.level, **brief}), flush=True)
    for e in errors:
        print(f"warning: profile: {e}", file=sys.stderr, flush=True)
    return brief


def _set_gate_checked(url: str, threshold: int, hysteresis: int) -> None:
    """Set the gate live and read it back.

    Raises:
        RuntimeError: the server refused the update or reads back other values.
    """
    from bench import server_harness

    reply = server_harness.set_gate(url, threshold=threshold, hysteresis=hysteresis)
    if isinstance(reply, dict) and reply.get("updated") is False:
        raise RuntimeError(f"the server refused threshold {threshold}, hysteresis {hysteresis}: {reply.get('reason')}")
    facts = server_facts(server_harness.server_info(url))
    if (facts["threshold"], facts["hysteresis"]) != (threshold, hysteresis):
        raise RuntimeError(f"asked the gate for threshold {threshold}, hysteresis {hysteresis}; it reads "
                           f"{facts['threshold']}, {facts['hysteresis']}")


def measure_server(a: argparse.Namespace, url: str, meta: Dict[str, Any], meta_path_for,
                   live_threshold: bool = True) -> List[Dict[str, Any]]:
    """Check the server at ``url`` is ``a.config`` (and ``a.worker`` / ``a.attention_backend``
    when given), set the gate for ``off`` and, with ``live_threshold``, for ``gate --threshold``
    (restored at the end), then :func:`measure`. ``meta_path_for(worker)`` names the run's JSON file.

    Raises:
        BenchError: the server cannot be reached or is not the configuration asked for.
    """
    import httpx

    from bench import server_harness

    try:
        info = server_harness.server_info(url)
    except (httpx.HTTPError, ValueError) as exc:
        raise BenchError(f"cannot read {url}/server_info: {exc}") from None
    facts = check_server(a.config, server_facts(info), url, a.worker, a.attention_backend)
    restore = None
    if a.config == "off" or (a.config == "gate" and a.threshold is not None and live_threshold):
        target = (1, 0) if a.config == "off" else (
            a.threshold, a.hysteresis if a.hysteresis is not None else facts["hysteresis"])
        if target[1] >= target[0]:
            raise BenchError(f"--threshold {target[0]} needs a hysteresis below it; the server's is {target[1]}: "
                             f"give --hysteresis")
        restore = (facts["threshold"], facts["hysteresis"])
        _set_gate_checked(url, *target)
        facts = check_server(a.config, server_facts(server_harness.server_info(url)), url, a.worker,
                             a.attention_backend)
    meta.update(server={k: v for k, v in facts.items() if k != "spec_gate"}, worker=facts["worker"])
    mrr = facts["max_running_requests"]
    most = max([a.plan.max_concurrency] * any(w.arrivals == "poisson" for w in a.plan.workloads)
               + [max(a.plan.concurrency)] * any(w.arrivals == "closed" for w in a.plan.workloads))
    if isinstance(mrr, int) and most > mrr:
        meta["note"] = (f"up to {most} requests in flight, but the server runs at most {mrr} at once "
                        f"(--max-running-requests): the rest wait in its queue, and that wait is in their TTFT")
        print(f"warning: {meta['note']}", file=sys.stderr, flush=True)
    meta_path = meta_path_for(facts["worker"])
    runs = _load_runs(meta_path)

    def save() -> None:
        driver = serving_driver()
        meta["bench_serving_mode"], meta["bench_serving_fallback"] = driver.mode, driver.fallback_reason
        server_harness.write_json(meta_path, {"runs": runs + [meta]})

    try:
        return measure(a.config, a.p_wrong, url, facts, a.plan, a.out / a.csv_name, a.work_dir, meta, save)
    except BaseException as exc:
        meta["error"] = f"{type(exc).__name__}: {exc}"
        raise
    finally:
        if restore is not None:
            try:
                _set_gate_checked(url, *restore)
                meta["restored_gate"] = {"threshold": restore[0], "hysteresis": restore[1]}
            except Exception as exc:  # noqa: BLE001 - reported; the rows are what matters
                meta["restore_error"] = f"{type(exc).__name__}: {exc}"
                print(f"warning: could not restore the gate to threshold {restore[0]}, hysteresis "
                      f"{restore[1]}: {exc}", file=sys.stderr, flush=True)
        try:
            meta["final_spec_gate"] = server_facts(server_harness.server_info(url))["spec_gate"]
        except Exception:  # noqa: BLE001 - the server may be gone; the error says why
            meta["final_spec_gate"] = None
        save()


def _load_runs(path: Path) -> List[Any]:
    """The earlier calls' records in ``path`` (``{"runs": [...]}``); [] if absent or unreadable."""
    try:
        runs = json.loads(path.read_text(encoding="utf-8"))["runs"]
        return runs if isinstance(runs, list) else []
    except (OSError, ValueError, KeyError, TypeError):
        return []


#: The environment of a benchmark server: its requests are greedy (``bench_serving`` sends
#: temperature 0), so the gate's start-up build of the sampled verify's kernels
#: (``server_patch/sampling_warmup.py``: ~2 min on a machine without FlashInfer's JIT cache, the
#: H200 of 2026-12-04 took 115.8 s) buys nothing there and costs device time; a given variable wins.
GREEDY_SERVER_ENV = {"SPECCONSOLE_WARM_SAMPLING": "0"}


def greedy_server_env(env: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """:data:`GREEDY_SERVER_ENV` under ``env`` (a key in ``env``, or already in this process's
    environment, keeps its value)."""
    import os

    out = {k: v for k, v in GREEDY_SERVER_ENV.items() if k not in os.environ}
    out.update(env or {})
    return out


def launch_args(config: str, target: str, draft: Optional[str], *, worker: Optional[str],
                attention_backend: Optional[str], mem_fraction: float, threshold: Any = None,
                hysteresis: Optional[int] = None) -> List[str]:
    """The SGLang server arguments of ``config`` (as ``bench.throughput run``:
    ``--max-running-requests`` / ``--cuda-graph-max-bs`` 128, EAGLE-3 steps 3, topk 1, 4 draft
    tokens), worker ``v1`` as ``--disable-overlap-schedule``, ``attention_backend`` appended (SGLang
    keeps the last value of a repeated flag). ``gate`` / ``off``: the gate at ``threshold`` (default
    DEFAULT_THRESHOLD) and ``hysteresis`` (default 2); nothing of the gate for the other configs."""
    from bench.server_harness import eagle3_args, plain_args

    if config == "none":
        args = plain_args(target, max_running_requests=MAX_RR, cuda_graph_max_bs=MAX_RR, mem_fraction=mem_fraction)
        if worker == "v1":
            args.append("--disable-overlap-schedule")
    else:
        args = eagle3_args(target, draft, max_running_requests=MAX_RR, cuda_graph_max_bs=MAX_RR,
                           mem_fraction=mem_fraction, overlap=worker != "v1")
        if config in ("gate", "off"):
            threshold = threshold if threshold is not None else DEFAULT_THRESHOLD
            hysteresis = hysteresis if hysteresis is not None else 2
            args += [THRESHOLD_FLAG, str(threshold), HYSTERESIS_FLAG, str(hysteresis)]
    if attention_backend:
        args += ["--attention-backend", attention_backend]
    return args


def server_args_for(a: argparse.Namespace, target: str, draft: Optional[str]) -> List[str]:
    """Start mode: :func:`launch_args` for ``a.config`` (``--worker``, ``--attention-backend``,
    ``--threshold``, ``--hysteresis``, ``--mem-fraction``), then the arguments after ``--``."""
    return launch_args(a.config, target, draft, worker=a.worker, attention_backend=a.attention_backend,
                       mem_fraction=a.mem_fraction, threshold=a.threshold, hysteresis=a.hysteresis) + list(a.server_args)


def safe_label(value: Any) -> str:
    """``value`` for a file name: characters other than letters, digits, ``.``, ``_``, ``-`` -> ``_``."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", str(value))


def traffic(a: argparse.Namespace) -> List[Dict[str, Any]]:
    """The ``traffic`` subcommand (``check_args`` has run): against ``a.url``, or a server started
    here from ``a.models`` / ``a.target``; rows to ``a.out / a.csv_name``, the call's record to
    ``a.out / traffic-CONFIG-WORKER-pP.json`` (``{"runs": [...]}``, one entry per call).

    Raises:
        BenchError: bad input (see :func:`check_server`, :func:`check_csv`,
            :func:`check_bench_serving_cli`), or the measurement failed after some rows (the
            message's first line; details on stdout and in the JSON).
    """
    if a.dry_run:
        return dry_run(a)
    created = not a.out.exists()
    a.out.mkdir(parents=True, exist_ok=True)
    try:
        return _traffic(a)
    finally:
        if created and a.out.is_dir() and not any(a.out.iterdir()):
            a.out.rmdir()  # a run that wrote nothing leaves no empty --out behind


def _traffic(a: argparse.Namespace) -> List[Dict[str, Any]]:
    """:func:`traffic` once ``a.out`` exists."""
    from bench import server_harness

    check_csv(a.out / a.csv_name)
    host, port = split_url(a.url) if a.url else ("127.0.0.1", a.port)
    checked = check_bench_serving_cli(argv for _, argv, _, _ in a.plan.argvs(host, port, a.work_dir, "check"))
    meta: Dict[str, Any] = {
        "command": "python -m bench.throughput " + " ".join(sys.argv[1:]), "config": a.config,
        "p_wrong": a.p_wrong, "workloads": [w.name for w in a.plan.workloads],
        "plan": {"concurrency": a.plan.concurrency, "rates": a.plan.rates, "max_concurrency": a.plan.max_concurrency,
                 "row_seconds": a.plan.row_seconds, "num_prompts": a.plan.num_prompts, "seed": a.plan.seed,
                 "warmup": a.plan.warmup,
                 "profile": dataclasses.asdict(a.plan.profile) if a.plan.profile else None},
        "bench_serving_cli": checked, "started_at": time.strftime("%Y-%m-%dT%H:%M:%S"), "rows": [],
    }

    def meta_path_for(worker: str) -> Path:
        return a.out / f"traffic-{a.config}-{worker}-p{safe_label(a.p_wrong)}.json"

    server = None
    # A device call that runs out of time gets SIGTERM: leave through the finally blocks (restore
    # the gate, save the JSON, stop a server started here). KeyboardInterrupt, not SystemExit:
    # ServingDriver would take a SystemExit inside bench_serving for a failed run and retry it.
    old_handler = signal.signal(signal.SIGTERM, _interrupt)
    try:
        if a.url:
            meta["url"] = a.url
            return measure_server(a, a.url, meta, meta_path_for)
        target, draft = (str(a.models / "target"), str(a.models / "draft")) if a.models else (a.target, a.draft)
        args = server_args_for(a, target, draft)
        meta["launch_args"] = args
        server = server_harness.start_server(f"traffic-{a.config}-{a.worker or 'v2'}-p{safe_label(a.p_wrong)}",
                                             args, a.port, Path("/tmp/specconsole-logs"),
                                             env=greedy_server_env())
        server_harness.wait_ready(server, timeout_s=600)
        meta["startup_s"] = round(server.ready_s, 1)
        return measure_server(a, server.url, meta, meta_path_for, live_threshold=False)
    except BenchError:
        raise
    except KeyboardInterrupt:
        raise BenchError(f"traffic interrupted {rows_kept(len(meta['rows']), a.out / a.csv_name)}") from None
    except Exception as exc:
        print(f"{type(exc).__name__}: {exc}", flush=True)
        if server is not None:
            print(server.log_tail(60), flush=True)
        hint = ""
        inside = re.search(r"No module named '[^']+'", str(exc))  # bench_serving's own run failed on an import
        if isinstance(exc, ModuleNotFoundError) or inside:
            named = "" if isinstance(exc, ModuleNotFoundError) else f"{inside.group(0)}: "  # the first line has it
            hint = f" ({named}SGLang's bench_serving needs SGLang 0.5.12 with its dependencies: pip install 'specconsole[server]')"
        raise BenchError(f"traffic stopped {rows_kept(len(meta['rows']), a.out / a.csv_name)}: "
                         f"{first_line(exc)}{hint}") from None
    finally:
        if server is not None:
            print(f"stopped the server: exit code {server_harness.stop_server(server)}", flush=True)
        signal.signal(signal.SIGTERM, old_handler if old_handler is not None else signal.SIG_DFL)


def rows_kept(done: int, csv_path: Path) -> str:
    """Where a stopped run's rows are: ``before its first row`` or ``after N row(s) (CSV has them)``."""
    return "before its first row" if done == 0 else f"after {done} row(s) ({csv_path} has them)"


PER_RUN_OVERHEAD_S = 3.0  # bench_serving's tokenizer load, warm-up request, 1 s sleep, /server_info calls


def row_seconds_estimate(workload: Workload, level: Dict[str, Any]) -> float:
    """Seconds the slower static configuration needs for a row (:func:`request_seconds`; Poisson:
    the arrivals or, past saturation, the service at the cap, whichever is longer)."""
    n = level["num_prompts"]
    if "concurrency" in level:
        return n * request_seconds(workload.lengths, level["concurrency"])
    return max(n / level["rate"], n * request_seconds(workload.lengths, level["max_concurrency"]))


def dry_run(a: argparse.Namespace) -> List[Dict[str, Any]]:
    """``--dry-run``: print what the call would run (the server command in start mode, then one
    JSON line per row with its request count, bench_serving argv and estimated seconds, then the
    total); nothing is started or written."""
    host, port = split_url(a.url) if a.url else ("127.0.0.1", a.port)
    if a.url:
        print(f"server: {a.url} (already running)")
    else:
        target, draft = (str(a.models / "target"), str(a.models / "draft")) if a.models else (a.target, a.draft)
        print("server: python -m server_patch.launch_server "
              + " ".join(server_args_for(a, target, draft) + ["--port", str(port), "--host", "127.0.0.1"]))
    rows, total = [], sum(PER_RUN_OVERHEAD_S + row_seconds_estimate(
        parse_workload("varied-closed" if lengths == "varied" else "uniform-closed"),
        {"concurrency": c, "num_prompts": n}) for c, n, lengths in a.plan.warmup)
    for name, argv, _, lv in a.plan.argvs(host, port, a.work_dir, f"{a.config}-dry"):
        est = row_seconds_estimate(parse_workload(name), lv)
        total += est + PER_RUN_OVERHEAD_S
        rows.append({"workload": name, **{k: v for k, v in lv.items()}, "est_s": round(est, 1), "argv": argv})
        print(json.dumps(rows[-1]))
        if a.plan.profile is not None and a.plan.profile.matches(name, lv):
            total += est + PER_RUN_OVERHEAD_S  # the profiled pass: the same requests once more
            print(json.dumps({"profile_pass": name, **lv, "est_s": round(est, 1), "steps": a.plan.profile.steps,
                              "delay_s": a.plan.profile.delay_s}))
    print(f"{len(rows)} rows, {len(a.plan.warmup)} warm-up runs: about {total:.0f} s at 8B-on-H200 speeds "
          f"(the slower static config; {PER_RUN_OVERHEAD_S:g} s per bench_serving run added)")
    return rows


def _interrupt(signum: int, frame: Any) -> None:
    """SIGTERM handler of ``traffic``: see there."""
    raise KeyboardInterrupt(f"signal {signum}")


# -- command line ------------------------------------------------------------------------------------

def _ints(text: str) -> List[int]:
    """argparse type: ``"1,4,16"`` -> ``[1, 4, 16]`` (positive integers)."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers, got {text!r}")
    _no_repeats(values, text)
    return values


def _no_repeats(values: List[Any], text: str, each: str = "each level is one row") -> None:
    """A level (or workload) given twice in ``text`` is refused: each is one row (or set of rows),
    written to one file (a second would overwrite the first's raw output and count as another
    repeat of the row)."""
    twice = sorted({v for v in values if values.count(v) > 1})
    if twice:
        shown = ", ".join(v if isinstance(v, str) else fmt_rate(v) for v in twice)
        raise argparse.ArgumentTypeError(f"{shown} given more than once in {text!r}: {each}")


def _rates(text: str) -> List[float]:
    """argparse type: ``"2,8,16.5"`` -> ``[2.0, 8.0, 16.5]`` (finite requests/s > 0)."""
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        values = []
    if not values or not all(math.isfinite(v) and v > 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected comma-separated request rates > 0 (requests/s), got {text!r}")
    _no_repeats(values, text)
    return values


def _workloads(text: str) -> List[Workload]:
    """argparse type: ``"varied-closed,varied-poisson"`` -> their :class:`Workload` s."""
    names = [x.strip() for x in text.split(",") if x.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"expected comma-separated workload names, got {text!r}")
    _no_repeats(names, text, "each workload is one set of rows")
    try:
        return [parse_workload(n) for n in names]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_parsers(sub) -> None:
    """Add ``traffic`` and ``summarize-traffic`` to ``bench.throughput``'s subcommands."""
    names = ", ".join(f"{k} ({v.note})" for k, v in LENGTHS.items())
    t = sub.add_parser(
        "traffic", help="variable lengths and Poisson arrivals against one server (GPU machine)",
        description="Measure real-traffic workloads against one SGLang server (--url), or one started here "
                    "(--models / --target; arguments after -- go to that server). Appends rows to "
                    f"OUT/{DEFAULT_CSV}, one JSON line per row on stdout.")
    where = t.add_mutually_exclusive_group(required=True)
    where.add_argument("--url", metavar="URL", help="an already-started server, http://HOST:PORT")
    where.add_argument("--models", type=Path, metavar="DIR",
                       help="start a server on this synthetic pair (python -m bench.synthetic_models); "
                            "rows labelled with its p_wrong")
    where.add_argument("--target", help="start a server on your own target (with --draft unless --config none)")
    t.add_argument("--draft", help="your own EAGLE-3 draft model (with --target)")
    t.add_argument("--config", choices=CONFIGS, required=True,
                   help="none: no speculation; always: EAGLE-3 always on; gate: EAGLE-3 with the gate; off: the gate "
                        "server forced off (threshold 1, set live, restored after); auto: an auto-threshold server")
    t.add_argument("--p-wrong", metavar="LABEL",
                   help="p_wrong column (the draft's error rate, or a label for your own pair); "
                        "required unless --models gives it")
    t.add_argument("--worker", choices=WORKERS,
                   help="--url: check the server runs this worker (v2: overlap scheduler, v1: "
                        "--disable-overlap-schedule); start mode: start it so (default v2)")
    t.add_argument("--attention-backend", metavar="NAME",
                   help="--url: check the server's attention backend; start mode: pass it to the server "
                        "(default: triton, as bench.server_harness)")
    t.add_argument("--out", type=Path, required=True, metavar="DIR",
                   help=f"results dir (created): appends DIR/{DEFAULT_CSV} (see --csv-name), writes "
                        f"DIR/traffic-CONFIG-WORKER-pP.json")
    t.add_argument("--csv-name", default=DEFAULT_CSV, metavar="NAME",
                   help=f"CSV file name in --out (default: {DEFAULT_CSV}; e.g. auto-traffic.csv for auto runs)")
    t.add_argument("--workloads", type=_workloads, default=None, metavar="W,W,...",
                   help=f"<lengths>-<arrivals>, run in this order (default: {','.join(DEFAULT_WORKLOADS)}); "
                        f"lengths: {names}; arrivals: closed (C concurrent requests) or poisson")
    t.add_argument("--concurrency", type=_ints, default=None, metavar="C,C,...",
                   help=f"closed-loop max concurrent requests per row (default: {','.join(map(str, CLOSED_LEVELS))}; "
                        f"--quick: {','.join(map(str, QUICK_CLOSED_LEVELS))})")
    t.add_argument("--rates", type=_rates, default=None, metavar="R,R,...",
                   help=f"Poisson arrival rates per row, requests/s (default: {','.join(map(fmt_rate, POISSON_RATES))}; "
                        f"--quick: {','.join(map(fmt_rate, QUICK_POISSON_RATES))})")
    t.add_argument("--max-concurrency", type=int, default=POISSON_MAX_CONCURRENCY, metavar="C",
                   help=f"Poisson rows: at most C requests in flight; later arrivals wait in the client, and that "
                        f"wait is not in their latency (default: {POISSON_MAX_CONCURRENCY})")
    t.add_argument("--row-seconds", type=float, default=None, metavar="S",
                   help=f"size each row's request count so the slower static config takes about S seconds at "
                        f"8B-on-H200 speed (default: {ROW_SECONDS:g}; --quick: {QUICK_ROW_SECONDS:g})")
    t.add_argument("--num-prompts", type=int, default=None, metavar="N",
                   help="send N requests in every row instead (overrides --row-seconds)")
    t.add_argument("--quick", action="store_true",
                   help=f"a short device call: {QUICK_ROW_SECONDS:g} s rows, fewer levels, a shorter warm-up")
    t.add_argument("--seed", type=int, default=1,
                   help="bench_serving --seed of every row: same prompts and arrivals for every config (default: 1)")
    t.add_argument("--dry-run", action="store_true",
                   help="print the server command (start mode), each row's request count, bench_serving argv and "
                        "estimated seconds, and the total; start and write nothing")
    t.add_argument("--no-warmup", dest="warmup", action="store_false",
                   help="skip the warm-up (a server an earlier call already warmed)")
    t.add_argument("--threshold", type=int, default=None, metavar="N",
                   help=f"gate: speculation off once the decode batch has >= N requests (--url: set live and "
                        f"restored after; start mode default: {DEFAULT_THRESHOLD})")
    t.add_argument("--hysteresis", type=int, default=None, metavar="H",
                   help="gate: once off, back on below N - H requests (--url: default the server's; start mode: 2)")
    t.add_argument("--work-dir", type=Path, default=Path("/tmp/bench-work"), metavar="DIR",
                   help="where bench_serving's raw JSONL results go (default: /tmp/bench-work)")
    t.add_argument("--mem-fraction", type=float, default=0.8, metavar="F",
                   help="start mode: fraction of GPU memory for SGLang's static pool, 0-1 (default: 0.8)")
    t.add_argument("--port", type=int, default=30500, help="start mode: server port (default: 30500)")
    t.add_argument("--cpu-profile-row", metavar="WORKLOAD:LEVEL",
                   help="sample the scheduler's Python stacks with py-spy during that row itself "
                        "(bench.cpu_profile; the server on this machine, py-spy installed)")
    t.add_argument("--profile-row", metavar="WORKLOAD:LEVEL",
                   help="after this row (e.g. varied-closed:64, varied-poisson:32) send its requests once more, not "
                        "recorded, and record --profile-steps forward steps of that pass with SGLang's profiler into "
                        "OUT/profile-traffic-CONFIG-WORKER-pP-WORKLOAD-LEVEL/, summarized by stage (prefill, draft "
                        "prefill, decode/verify, draft, other) into the .json of that name")
    t.add_argument("--profile-steps", type=int, default=None, metavar="N",
                   help=f"with --profile-row: forward steps to record (default: {PROFILE_STEPS})")
    t.add_argument("--profile-delay", type=float, default=None, metavar="S",
                   help=f"with --profile-row: start recording S seconds into the pass (default: {PROFILE_DELAY_S:g})")
    c = sub.add_parser("compare-profiles",
                       help="B against A, two --profile-row summaries, per stage and step in ms per 1000 output tokens",
                       description="Where B's time went against A's (e.g. A = none, B = off, the same row): two "
                                   "OUT/profile-traffic-*.json files of traffic --profile-row, per stage and per step "
                                   "kind in ms per 1000 output tokens; the stages' differences sum to the window's.")
    c.add_argument("a", type=Path, metavar="A.json", help="the reference (e.g. the none server's profile)")
    c.add_argument("b", type=Path, metavar="B.json", help="the one compared with it (e.g. the off server's)")
    c.add_argument("--json", action="store_true", help="print the comparison as JSON instead of tables")
    for side in ("a", "b"):
        c.add_argument(f"--{side}-tokens-per-verify", type=_tokens_per_verify, default=None, metavar="X",
                       help=f"count X output tokens per request of {side.upper()}'s TARGET_VERIFY batches instead of "
                            f"the profile's own figure (1: a window of OFF steps)")
    s = sub.add_parser("summarize-traffic", help="ratio tables (off/none, gate and auto / best static, v1 / v2) "
                                                 "from traffic CSVs")
    s.add_argument("csv", type=Path, nargs="+", help=f"traffic CSVs ({DEFAULT_CSV}, an auto run's CSV, ...)")


COMMANDS = ("traffic", "summarize-traffic", "compare-profiles")

#: output tokens a request of one verify batch can make, at most (the accepted drafts and the bonus token)
MAX_TOKENS_PER_VERIFY = 64


def _tokens_per_verify(text: str) -> float:
    """``--a/--b-tokens-per-verify``: a number of tokens in (0, MAX_TOKENS_PER_VERIFY]."""
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (0 < x <= MAX_TOKENS_PER_VERIFY):  # also refuses nan
        raise argparse.ArgumentTypeError(f"output tokens per request of a verify batch are > 0 and at most "
                                         f"{MAX_TOKENS_PER_VERIFY} (got {text})")
    return x


def p_wrong_label_problem(label: str) -> Optional[str]:
    """Why ``label`` cannot be a row's ``p_wrong`` (it also names the record file), or None: a number
    is the draft's per-token error rate and lies in [0, 1]; a name (your own pair) is one word
    without a path separator."""
    try:
        value = float(label)
    except ValueError:
        if any(c.isspace() or c in "/\\" for c in label):
            return "a label is one word without spaces or path separators (it names the record file)"
        return None
    if not (math.isfinite(value) and 0 <= value <= 1):
        return "a number is the draft's per-token error rate, in [0, 1] (or give a name for your own pair)"
    return None


def check_args(parser: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    """``parser.error`` for a ``traffic`` call that cannot be right, before anything starts; then
    ``a.plan`` (:class:`Plan`) and, with ``--models``, ``a.p_wrong`` from its oracle.json."""
    if a.cmd != "traffic":
        return
    start = a.url is None
    if a.server_args and not start:
        parser.error("arguments after -- are server arguments: only when traffic starts the server (not --url)")
    if start and a.config == "auto" and not a.server_args:
        parser.error("--config auto starts no server of its own: give the auto-threshold server arguments after --, "
                     "or start it yourself and pass --url")
    if a.draft and a.target is None:
        parser.error("--draft goes with --target (a --models pair has its own draft)")
    if a.target is not None and a.config != "none" and not a.draft:
        parser.error(f"--config {a.config} with --target needs --draft")
    if a.threshold is not None and a.config != "gate":
        parser.error(f"--threshold is the gate's N, for --config gate (off is threshold 1), not {a.config}")
    if a.hysteresis is not None and a.config != "gate":
        parser.error(f"--hysteresis goes with --config gate (off is hysteresis 0), not {a.config}")
    if a.threshold is not None and a.threshold < 1:
        parser.error(f"--threshold is a number of requests >= 1, got {a.threshold}")
    if start and a.config == "gate" or a.hysteresis is not None:
        n = a.threshold if a.threshold is not None else DEFAULT_THRESHOLD
        try:
            GateConfig(n, a.hysteresis if a.hysteresis is not None else 2).validate()
        except GateConfigError as exc:
            parser.error(f"--threshold / --hysteresis: {exc}")
    if a.url is not None:
        try:
            split_url(a.url)
        except BenchError as exc:
            parser.error(str(exc))
    if a.max_concurrency < 1:
        parser.error(f"--max-concurrency is a number of requests >= 1, got {a.max_concurrency}")
    if a.row_seconds is not None and not (math.isfinite(a.row_seconds) and a.row_seconds > 0):
        parser.error(f"--row-seconds must be > 0, got {a.row_seconds}")
    if a.num_prompts is not None and a.num_prompts < 1:
        parser.error(f"--num-prompts must be >= 1, got {a.num_prompts}")
    if not 0 < a.mem_fraction <= 1:
        parser.error(f"--mem-fraction is a fraction of GPU memory (0-1], got {a.mem_fraction}")
    if "/" in a.csv_name or a.csv_name in ("", ".", ".."):
        parser.error(f"--csv-name is a file name inside --out, got {a.csv_name!r}")
    if a.out.exists() and not a.out.is_dir():
        parser.error(f"--out {a.out} is a file; give a directory")
    if a.models is not None:
        from bench.server_harness import pair_problem

        problem = pair_problem(a.models)
        if problem:
            parser.error(f"--models {a.models} {problem}")
        try:
            p = json.loads((a.models / "oracle.json").read_text(encoding="utf-8"))["p_wrong"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            parser.error(f"--models {a.models}: unreadable oracle.json ({exc})")
        if a.p_wrong is not None and str(a.p_wrong) != str(p):
            parser.error(f"--p-wrong {a.p_wrong}, but {a.models}/oracle.json says p_wrong {p}")
        a.p_wrong = p
    for flag, value in (("--target", a.target), ("--draft", a.draft)):
        if value and value.startswith(("/", ".")) and not Path(value).exists():
            parser.error(f"{flag} {value}: no such directory (a Hugging Face id looks like org/name)")
    if a.p_wrong is None or not str(a.p_wrong).strip():
        parser.error("--p-wrong is needed to label the rows (with --url or --target)")
    label_problem = p_wrong_label_problem(str(a.p_wrong))
    if label_problem:
        parser.error(f"--p-wrong {a.p_wrong}: {label_problem}")
    profile = None
    if a.profile_row is None and (a.profile_steps is not None or a.profile_delay is not None):
        parser.error("--profile-steps / --profile-delay go with --profile-row WORKLOAD:LEVEL")
    if a.profile_steps is not None and a.profile_steps < 1:
        parser.error(f"--profile-steps is a number of forward steps >= 1, got {a.profile_steps}")
    if a.profile_delay is not None and not (math.isfinite(a.profile_delay) and a.profile_delay >= 0):
        parser.error(f"--profile-delay is a number of seconds >= 0, got {a.profile_delay}")
    if a.profile_row is not None:
        try:
            w, level = parse_profile_row(a.profile_row)
        except ValueError as exc:
            parser.error(str(exc))
        profile = ProfileSpec(w.name, level, a.profile_steps or PROFILE_STEPS,
                              PROFILE_DELAY_S if a.profile_delay is None else a.profile_delay)
    cpu_profile = None
    if a.cpu_profile_row is not None:
        try:
            w, level = parse_profile_row(a.cpu_profile_row, "--cpu-profile-row")
        except ValueError as exc:
            parser.error(str(exc))
        from bench.cpu_profile import RECORD_DELAY_S

        cpu_profile = ProfileSpec(w.name, level, 0, RECORD_DELAY_S)
    a.plan = Plan(
        workloads=a.workloads or [parse_workload(n) for n in DEFAULT_WORKLOADS],
        concurrency=a.concurrency or (QUICK_CLOSED_LEVELS if a.quick else CLOSED_LEVELS),
        rates=a.rates or (QUICK_POISSON_RATES if a.quick else POISSON_RATES),
        max_concurrency=a.max_concurrency,
        row_seconds=a.row_seconds or (QUICK_ROW_SECONDS if a.quick else ROW_SECONDS),
        num_prompts=a.num_prompts, seed=a.seed,
        warmup=[] if not a.warmup else (QUICK_WARMUP if a.quick else WARMUP),
        profile=profile,
        cpu_profile=cpu_profile,
    )
    for flag, text, spec in (("--cpu-profile-row", a.cpu_profile_row, cpu_profile),
                             ("--profile-row", a.profile_row, profile)):
        if spec is not None and not any(spec.matches(x.name, lv) for x in a.plan.workloads for lv in a.plan.levels(x)):
            arrivals = parse_workload(spec.workload).arrivals
            levels = a.plan.concurrency if arrivals == "closed" else [fmt_rate(r) for r in a.plan.rates]
            parser.error(f"{flag} {text}: no such row in this call (workloads "
                         f"{','.join(x.name for x in a.plan.workloads)}; {arrivals} levels "
                         f"{','.join(map(str, levels))})")
    if profile is not None:
        w = parse_workload(profile.workload)
        lv = next(lv for lv in a.plan.levels(w) if profile.matches(w.name, lv))
        est = row_seconds_estimate(w, lv)
        if profile.delay_s > est / 2:
            print(f"warning: --profile-delay {profile.delay_s:g} s is over half of the row's ~{est:.0f} s (the slower "
                  f"static config at 8B-on-H200 speed): the pass may end before {profile.steps} steps are "
                  f"recorded (then /stop_profile writes what was); longer rows: --row-seconds", file=sys.stderr)


def main(a: argparse.Namespace) -> None:
    """Run ``traffic`` or ``compare-profiles`` (``summarize-traffic`` is bench.traffic_summary's:
    bench.throughput dispatches it)."""
    if a.cmd == "compare-profiles":
        compare_profiles(a)
    else:
        traffic(a)


def _profile_label(doc: Dict[str, Any], path: Path) -> str:
    if not isinstance(doc, dict) or "config" not in doc:
        return str(path)
    level = doc.get("level")
    tag = (f"c={level:g}" if str(doc.get("workload", "")).endswith("-closed") else f"{level:g}/s") \
        if isinstance(level, (int, float)) else ""
    return f"{doc['config']} {doc.get('workload', '')} {tag} ({path})"


def compare_profiles(a: argparse.Namespace) -> Dict[str, Any]:
    """``compare-profiles A.json B.json``: :func:`bench.trace_summary.compare_stages` of the two
    profiles' primary traces, printed as tables (``--json``: as JSON).

    Raises:
        BenchError: a file is missing, not JSON, or holds no stage summary; a profile has no
            output token count.
    """
    from bench import trace_summary

    docs, stages = [], []
    for side, path in (("a", a.a), ("b", a.b)):
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise BenchError(f"no such file: {path}") from None
        except IsADirectoryError:
            raise BenchError(f"{path} is a directory; give the profile's .json") from None
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise BenchError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
        x = getattr(a, f"{side}_tokens_per_verify", None)
        try:
            st = trace_summary.stages_of(doc)
            if x is not None:
                if not (st.get("tokens") or {}).get("verify_requests"):
                    print(f"note: {path} has no TARGET_VERIFY batches: --{side}-tokens-per-verify changes nothing",
                          file=sys.stderr)
                st = trace_summary.with_tokens_per_verify(st, x)
            stages.append(st)
        except (ValueError, AttributeError, TypeError) as exc:
            raise BenchError(f"{path}: {exc}") from None
        docs.append(doc)
    try:
        cmp = trace_summary.compare_stages(*stages)
    except KeyError as exc:
        raise BenchError(f"cannot compare {a.a} with {a.b}: a stage summary lacks the field {exc}") from None
    except ValueError as exc:
        raise BenchError(f"cannot compare {a.a} with {a.b}: {exc}") from None
    except (TypeError, AttributeError, ZeroDivisionError) as exc:
        raise BenchError(f"cannot compare {a.a} with {a.b}: a stage summary is malformed ({exc})") from None
    notes = []
    sites = [trace_summary.sites_of(d) for d in docs]
    if all(sites):
        try:
            cmp["sites"] = trace_summary.compare_sites(sites[0], sites[1], cmp["tokens"]["a"], cmp["tokens"]["b"])
        except (KeyError, TypeError, AttributeError, ValueError, ZeroDivisionError):
            notes.append("the sync and idle sites are not shown: a summary's site lists are malformed")
    else:
        notes.append("the sync and idle sites are not shown: a summary predates them")
    ops = [trace_summary.cpu_ops_of(d) for d in docs]
    try:
        speed = trace_summary.cpu_speed(*ops) if all(ops) else None
    except (TypeError, ValueError, AttributeError):
        speed = None
        notes.append("CPU per op is not shown: a summary's cpu_ops are malformed")
    if speed is not None:
        cmp["cpu_speed"] = speed
    elif not all(ops):
        notes.append("CPU per op is not shown: a summary predates it")
    if a.json:
        print(json.dumps({**cmp, "notes": notes}, indent=1))
    else:
        print(trace_summary.format_comparison(cmp, _profile_label(docs[0], a.a), _profile_label(docs[1], a.b)))
        if "sites" in cmp:
            print(trace_summary.format_sites(cmp["sites"]))
        if "cpu_speed" in cmp:
            print(trace_summary.format_cpu_speed(cmp["cpu_speed"]))
        for note in notes:
            print(f"\n({note})")
    return cmp
