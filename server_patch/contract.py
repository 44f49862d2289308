"""The HTTP + log contract of the speculation gate, in one place (no SGLang, torch or Textual).

Everything a client or the server must agree on is defined here and imported from here:
``server_patch`` (the SGLang plugin), the console, the demo server and ``bench/``. The prose
version is ``docs/contract.md``; ``tests/test_console_demo_server.py`` keeps the two in step.

* the two server options (CLI flags, ``/set_internal_state`` keys) and their defaults;
* the rules for a threshold N and hysteresis H (``N >= 1``, ``0 <= H < N``, and, where the
  scheduler's max running requests is known, ``N <= max running requests``) with the wording of
  every refusal, for the server's rejections and for a client's checks before it sends;
* ``resume_below`` (speculation resumes below ``N - H``) and the capacity warnings;
* the ``spec_gate`` fields of ``/server_info`` (names and JSON types), the per-TP-rank subset,
  and the keys of the ``/set_internal_state`` answer;
* the contract's log lines (``spec_gate: speculation off (batch 37 >= 32)`` ...) and their regexes;
* the sampling rule of the run-time proofs (which OFF steps are checked).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
from typing import Any, Dict, List, Mapping, Optional, Tuple

# -- options -------------------------------------------------------------------------------

THRESHOLD_KEY = "speculative_disable_batch_threshold"
HYSTERESIS_KEY = "speculative_disable_hysteresis"
GATE_KEYS = (THRESHOLD_KEY, HYSTERESIS_KEY)
THRESHOLD_FLAG = "--" + THRESHOLD_KEY.replace("_", "-")
HYSTERESIS_FLAG = "--" + HYSTERESIS_KEY.replace("_", "-")
DEFAULT_HYSTERESIS = 0
#: the threshold value that lets the gate find the crossover itself (server_patch/auto_threshold.py)
AUTO = "auto"
#: spec_gate ``mode`` values
MODE_MANUAL, MODE_AUTO = "manual", "auto"
#: auto: a bucket whose ON and OFF estimates are within this fraction of each other does not vote
#: on the crossover (a tie); its mode is the fitted crossover's (server_patch/auto_threshold.py)
AUTO_MARGIN = 0.03

#: keys of the ``POST /set_internal_state`` answer for a request with gate keys
SET_ANSWER_KEYS = ("updated", "reason", "threshold", "hysteresis", "decode_step")


def set_answer(updated: bool, reason: Optional[str], threshold: Optional[int], hysteresis: Optional[int],
               decode_step: Optional[int] = None) -> Dict[str, Any]:
    """The ``POST /set_internal_state`` answer: ``updated`` False means nothing was applied and
    ``reason`` says why; ``threshold``/``hysteresis`` are the values in force after the call; an
    accepted change (only) carries ``decode_step``, the first decode batch the new values decide."""
    values = (updated, reason, threshold, hysteresis, decode_step)
    keys = SET_ANSWER_KEYS if updated else SET_ANSWER_KEYS[:-1]
    return dict(zip(keys, values))


#: the rejection of a gate key sent to a server started without the gate
NOT_ENABLED_REASON = (f"the speculation gate is not enabled on this server (start it with {THRESHOLD_FLAG})")

#: extra keys of a gate reply on its way from a scheduler to the tokenizer manager
#: (inside SGLang's ``SetInternalStateReqOutput.server_args``)
REASON_KEY = "spec_gate_reason"
DECODE_STEP_KEY = "spec_gate_decode_step"

# -- the rules for N and H ---------------------------------------------------------------------


class GateConfigError(ValueError):
    """A threshold/hysteresis pair (or an update to it) that the gate refuses; the message says why."""


@dataclasses.dataclass(frozen=True)
class Problem:
    """Why one value breaks a rule: ``field`` (``threshold``/``hysteresis``), the ``value``,
    the ``rule`` broken and the ``limit`` it was compared with.

    Rules: ``min`` (N >= 1, H >= 0), ``max_running`` (N <= max running requests),
    ``above_hysteresis`` (N > H), ``below_threshold`` (H < N), ``below_max_running`` (with the auto
    threshold, H < max running requests: a later manual N is at most that).
    """

    field: str
    value: int
    rule: str
    limit: int

    @property
    def reason(self) -> str:
        """The rule in words, e.g. ``must be >= 1``, ``above max running requests 48``."""
        return {
            "min": f"must be >= {self.limit}",
            "max_running": f"above max running requests {self.limit}",
            "above_hysteresis": f"must be > hysteresis {self.limit}",
            "below_threshold": f"must be < threshold {self.limit}",
            "below_max_running": f"must be < max running requests {self.limit}",
        }[self.rule]

    def refusal(self) -> str:
        """A client's refusal before sending, e.g. ``threshold 0 refused: must be >= 1``."""
        return f"{self.field} {self.value} refused: {self.reason}"

    def server_message(self) -> str:
        """The server's rejection, e.g. ``threshold must be >= 1, got 0``."""
        if self.rule == "min":
            return f"{self.field} must be >= {self.limit}, got {self.value}"
        if self.rule == "max_running":
            return (f"threshold {self.value} > max running requests {self.limit}: "
                    "the batch could never reach it")
        if self.rule == "below_threshold":
            return f"hysteresis {self.value} must be < threshold {self.limit}"
        if self.rule == "below_max_running":
            return (f"hysteresis {self.value} must be < max running requests {self.limit} "
                    "(with the auto threshold, H is kept for a later threshold, which is at most that)")
        return f"threshold {self.value} must be > hysteresis {self.limit}"


def threshold_problem(value: int, max_running_requests: Optional[int] = None,
                      hysteresis: Optional[int] = None) -> Optional[Problem]:
    """Why threshold ``value`` is refused, or None. ``max_running_requests`` (where known) is the
    largest batch the scheduler runs (a larger N could never fire); ``hysteresis``, when given,
    must stay below N (a ``-`` step that would reach it is refused)."""
    if value < 1:
        return Problem("threshold", value, "min", 1)
    if max_running_requests is not None and value > max_running_requests:
        return Problem("threshold", value, "max_running", max_running_requests)
    if hysteresis is not None and value <= hysteresis:
        return Problem("threshold", value, "above_hysteresis", hysteresis)
    return None


def hysteresis_problem(value: int, threshold: Optional[int],
                       max_running_requests: Optional[int] = None) -> Optional[Problem]:
    """Why hysteresis ``value`` is refused with ``threshold`` (``0 <= H < N``; with the auto
    threshold, None, ``H < max_running_requests`` where known), or None."""
    if value < 0:
        return Problem("hysteresis", value, "min", 0)
    if threshold is not None and value >= threshold:
        return Problem("hysteresis", value, "below_threshold", threshold)
    if threshold is None and max_running_requests is not None and value >= max_running_requests:
        return Problem("hysteresis", value, "below_max_running", max_running_requests)
    return None


def require_int(name: str, value: Any) -> None:
    """Raise :class:`GateConfigError` unless ``value`` is an int (``True`` is not a threshold)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise GateConfigError(f"{name} must be an integer, got {value!r}")


def resume_below(threshold: int, hysteresis: int) -> int:
    """Once off, speculation resumes when the decode batch size is ``< N - H``."""
    return threshold - hysteresis


def parse_threshold(value: Any) -> Optional[int]:
    """A threshold from the CLI or ``/set_internal_state``: an integer N, or None for ``"auto"``.

    Raises:
        GateConfigError: anything else (``True``, ``"16"``, ``2.5``).
    """
    if value == AUTO:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise GateConfigError(f"threshold must be an integer, got {value!r} (or {AUTO!r})")
    return value


def threshold_arg(text: str) -> Any:
    """argparse type of ``--speculative-disable-batch-threshold``: an integer, or ``auto`` (kept as
    the string).

    Raises:
        argparse.ArgumentTypeError: anything else (argparse prints it with the option's name).
    """
    if text == AUTO:
        return AUTO
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer or {AUTO!r}, got {text!r}") from None


@dataclasses.dataclass(frozen=True)
class GateConfig:
    """Threshold N (decode batch size at which speculation turns off) and hysteresis H (req).

    ``threshold`` None is the auto threshold: the gate decides per decode batch from its own
    measurements (``server_patch/auto_threshold.py``); H is kept for a later manual N.
    """

    threshold: Optional[int]
    hysteresis: int = DEFAULT_HYSTERESIS

    @property
    def auto(self) -> bool:
        """The auto threshold is on."""
        return self.threshold is None

    def validate(self, max_running_requests: Optional[int] = None) -> "GateConfig":
        """Return self if valid, else raise :class:`GateConfigError` with the server's reason.

        At startup ``max_running_requests`` is None (it is not final yet; a too large N only
        warns, :func:`capacity_warnings`); at run time it is the scheduler's value.
        """
        if not self.auto:
            require_int("threshold", self.threshold)
        require_int("hysteresis", self.hysteresis)
        problem = (None if self.auto else threshold_problem(self.threshold, max_running_requests)) \
            or hysteresis_problem(self.hysteresis, self.threshold, max_running_requests)
        if problem is not None:
            raise GateConfigError(problem.server_message())
        return self

    @property
    def resume_below(self) -> int:
        """Speculation resumes when the decode batch size is ``< N - H`` (manual N only)."""
        assert self.threshold is not None, "the auto threshold has no fixed N"
        return resume_below(self.threshold, self.hysteresis)


def wire_threshold(config: GateConfig) -> Any:
    """The threshold as the server reports it in answers and server args: N, or ``"auto"``."""
    return AUTO if config.auto else config.threshold


def parse_update(current: GateConfig, update: Mapping[str, Any],
                 max_running_requests: Optional[int]) -> GateConfig:
    """Apply a ``/set_internal_state`` ``server_args`` dict to ``current``, all or nothing.

    Either key may be sent alone; the other keeps its current value. The threshold ``"auto"``
    turns the auto threshold on, an integer back to a manual N.

    Raises:
        GateConfigError: a key other than the two gate keys is present, a value is not an
            integer, or the resulting pair is invalid (see :meth:`GateConfig.validate`).
    """
    others = sorted(k for k in update if k not in GATE_KEYS)
    if others:
        raise GateConfigError(
            f"gate keys cannot be mixed with other keys ({', '.join(others)}); send them separately")
    if not any(k in update for k in GATE_KEYS):
        raise GateConfigError("no gate key in the update")
    threshold = parse_threshold(update[THRESHOLD_KEY]) if THRESHOLD_KEY in update else current.threshold
    new = GateConfig(threshold=threshold, hysteresis=update.get(HYSTERESIS_KEY, current.hysteresis))
    return new.validate(max_running_requests)


@dataclasses.dataclass(frozen=True)
class CapacityWarning:
    """A setting that is valid but cannot work as meant: ``kind`` ``never_fires`` (N above max
    running requests), ``no_cuda_graph`` (N above the largest CUDA-graph batch) or
    ``beyond_graphs`` (max running requests -- then in ``threshold`` -- above the largest
    CUDA-graph batch: the largest batches run eagerly whatever the threshold, auto included)."""

    kind: str
    threshold: int
    limit: int

    @property
    def long(self) -> str:
        """The server's log warning, with the flag that fixes it."""
        if self.kind == "never_fires":
            return (f"threshold {self.threshold} > max running requests {self.limit}: speculation can "
                    "never turn off (set --max-running-requests)")
        if self.kind == "beyond_graphs":
            return (f"max running requests {self.threshold} > cuda graph max bs {self.limit}: decode "
                    f"batches of {self.limit + 1}-{self.threshold} requests run without CUDA graphs, ON "
                    f"and OFF (set --cuda-graph-max-bs {self.threshold})")
        return (f"threshold {self.threshold} > cuda graph max bs {self.limit}: OFF steps will run "
                "without CUDA graphs (set --cuda-graph-max-bs)")

    @property
    def short(self) -> str:
        """A console alarm line."""
        if self.kind == "never_fires":
            return f"threshold {self.threshold} > max running {self.limit}: never fires"
        if self.kind == "beyond_graphs":
            return f"max running {self.threshold} > cuda graph max bs {self.limit}: large batches eager"
        return f"threshold {self.threshold} > cuda graph max bs {self.limit}: OFF steps without CUDA graphs"


def capacity_warnings(threshold: int, max_running_requests: Optional[int],
                      cuda_graph_max_bs: Optional[int]) -> List[CapacityWarning]:
    """The warnings for a threshold the gate can never reach or whose OFF steps run without graphs."""
    out = []
    if max_running_requests is not None and threshold > max_running_requests:
        out.append(CapacityWarning("never_fires", threshold, max_running_requests))
    if cuda_graph_max_bs is not None and threshold > cuda_graph_max_bs:
        out.append(CapacityWarning("no_cuda_graph", threshold, cuda_graph_max_bs))
    return out


def graph_coverage_warning(max_running_requests: Optional[int],
                           cuda_graph_max_bs: Optional[int]) -> Optional[CapacityWarning]:
    """The warning for decode batches that can exceed the largest CUDA-graph batch (eager ON and
    OFF steps there), or None."""
    if max_running_requests is None or cuda_graph_max_bs is None or max_running_requests <= cuda_graph_max_bs:
        return None
    return CapacityWarning("beyond_graphs", max_running_requests, cuda_graph_max_bs)


def never_back_on(threshold: Optional[int], hysteresis: Optional[int]) -> bool:
    """``N - H <= 1``: valid, but once off speculation resumes only below batch size 1, i.e. never
    while a request runs."""
    return threshold is not None and hysteresis is not None and resume_below(threshold, hysteresis) <= 1


def accept_length_problem(value: Optional[float], num_steps: Optional[int]) -> Optional[str]:
    """Why an accept length (tokens per request per decode step) cannot be right, or None.

    An EAGLE step emits the accepted draft tokens plus the target's own one: at most
    ``num_steps + 1`` (the draft chain's depth, topk 1 or tree), at least 1 while speculation runs
    (0 where a server reports no step yet). A value outside ``[0, num_steps + 1]`` or not finite
    came from a broken metric or another server's figure; it is shown, marked, not trusted.
    ``num_steps`` None (not known yet) checks only finiteness and sign.
    """
    if value is None:
        return None
    if not math.isfinite(value) or value < 0:
        return f"accept length {value!r} is not a token count"
    if num_steps is not None and value > num_steps + 1 + 1e-6:
        return f"accept length {value:.3g} > {num_steps + 1} (num_steps {num_steps} + 1): not this server's speculation"
    return None


# -- spec_gate in /server_info -----------------------------------------------------------------

#: JSON type tags of the spec_gate fields: ``str``, ``bool``, ``int`` (a count, size, step or
#: rank, >= 0), ``float``, ``switch`` (an object with SWITCH_FIELDS, or null), ``ranks`` (a list
#: of objects with RANK_FIELDS), ``buckets`` (a list of objects with BUCKET_FIELDS), ``gpu`` (an
#: object with GPU_FIELDS). Any field may
#: be null where the server does not know it. ``threshold`` is the manual N, or in auto mode
#: the learned crossover (null until one is found).
SPEC_GATE_FIELDS: Dict[str, str] = {
    "worker_class": "str",
    "spec_version": "str",
    "overlap": "bool",
    "sglang_version": "str",
    "speculative_algorithm": "str",
    "topk": "int",
    "num_steps": "int",
    "num_draft_tokens": "int",
    "spec_enabled": "bool",
    "threshold": "int",
    "hysteresis": "int",
    "max_running_requests": "int",
    "cuda_graph_max_bs": "int",
    "last_decode_batch_size": "int",
    "decode_steps_on": "int",
    "decode_steps_off": "int",
    "switches": "int",
    "last_switch": "switch",
    "accept_length_recent": "float",
    "accept_length_since_on": "float",
    "accept_length_first_on_step": "float",
    "steps_since_on": "int",
    "off_cuda_graph": "bool",
    "off_steps_cuda_graph": "int",
    "off_target_graph_replays": "int",
    "off_draft_extend_graph_replays": "int",
    "on_target_graph_replays": "int",
    "off_target_attention": "str",
    "off_draft_extend_attention": "str",
    "off_attention_checks": "int",
    "off_attention_mismatches": "int",
    "off_draft_extend": "str",
    "off_draft_extend_reason": "str",
    "off_sampling": "str",
    "off_kv_only_graph_replays": "int",
    "off_kv_only_checks": "int",
    "off_kv_only_mismatches": "int",
    "off_kv_only_runs": "str",
    "off_kv_only_inexact": "int",
    "off_kv_only_prefills": "int",
    "off_lean_draft_extend_steps": "int",
    "off_lean_v2_verify": "str",
    "off_lean_v2_verify_steps": "int",
    "off_lean_v2_verify_checks": "int",
    "off_lean_v2_verify_mismatches": "int",
    "off_deferred_draft_kv": "str",
    "off_deferred_draft_kv_rows": "int",
    "off_deferred_draft_kv_flushes": "int",
    "off_lean_v1": "str",
    "off_lean_v1_steps": "int",
    "off_lean_v1_checks": "int",
    "off_lean_v1_mismatches": "int",
    "off_verify_metadata": "str",
    "off_verify_metadata_checks": "int",
    "off_verify_metadata_mismatches": "int",
    "off_lean_future_map": "str",
    "off_lean_future_map_steps": "int",
    "off_lean_future_map_checks": "int",
    "off_lean_future_map_mismatches": "int",
    "off_resume_steps": "int",
    "off_early_seq_lens": "bool",
    "off_early_seq_lens_steps": "int",
    "off_early_seq_lens_checks": "int",
    "off_early_seq_lens_mismatches": "int",
    "kv_reserve": "str",
    "kv_reserve_tokens": "int",
    "kv_reserve_topups": "int",
    "kv_reserve_skipped_steps": "int",
    "kv_reserve_checks": "int",
    "kv_reserve_mismatches": "int",
    "target_prefill": "str",
    "target_prefill_reason": "str",
    "target_prefill_graph_replays": "int",
    "target_prefill_checks": "int",
    "target_prefill_mismatches": "int",
    "mode": "str",
    "auto_reason": "str",
    "auto_buckets": "buckets",
    "auto_probes": "int",
    "auto_probe_steps": "int",
    "auto_probe_share": "float",
    "auto_probe_time_share": "float",
    "decisions_digest": "int",
    "host": "str",
    "node_rank": "int",
    "gpu": "gpu",
    "tp_rank": "int",
    "tp_size": "int",
    "ranks": "ranks",
}
#: what each TP rank reports of itself in ``spec_gate.ranks`` (every rank counts its own proofs)
RANK_FIELDS: Tuple[str, ...] = (
    "tp_rank", "spec_enabled", "threshold", "hysteresis", "switches", "decode_steps_on",
    "decode_steps_off", "off_attention_checks", "off_attention_mismatches",
    "off_early_seq_lens_checks", "off_early_seq_lens_mismatches", "off_kv_only_checks",
    "off_kv_only_mismatches", "off_lean_v1_checks", "off_lean_v1_mismatches",
    "off_lean_v2_verify_checks", "off_lean_v2_verify_mismatches",
    "off_verify_metadata_checks", "off_verify_metadata_mismatches", "off_lean_future_map_checks",
    "off_lean_future_map_mismatches", "off_resume_steps", "kv_reserve_checks", "kv_reserve_mismatches",
    "target_prefill_checks", "target_prefill_mismatches", "mode",
    "decisions_digest", "host", "node_rank", "gpu",
)
#: ``last_switch``: decode step index, ``"on"``/``"off"``, batch size (req)
SWITCH_FIELDS: Tuple[str, ...] = ("step", "direction", "batch_size")
#: ``gpu``: a rank's own GPU as its scheduler reads it with NVML (server_patch/rank_gpu.py): host
#: and node rank, CUDA ordinal, UUID, NVML index, name, utilization %, memory used/total MiB,
#: temperature °C, power and power limit W, SM clock MHz (None where not supported), ``error``
#: (None, or why NVML could not be read), ``read_ms`` (mean cost of one NVML reading, ms)
GPU_FIELDS: Tuple[str, ...] = ("host", "node_rank", "gpu_id", "uuid", "nvml_index", "name", "util_pct",
                               "mem_used_mib", "mem_total_mib", "temp_c", "power_w", "power_limit_w",
                               "sm_clock_mhz", "error", "read_ms")
#: ``auto_buckets``: per measured batch-size bucket, its range (req), the estimated output tok/s
#: with speculation on and off, their sample counts, the accept length, the preferred mode
BUCKET_FIELDS: Tuple[str, ...] = ("lo", "hi", "on_tok_s", "off_tok_s", "on_samples", "off_samples",
                                  "accept_length", "on")
#: the monotone counters whose change over a stretch of load says what the gate did in it (decode
#: steps ON / OFF, switches, auto's probes and probe steps, resume steps, the KV reserve's top-ups
#: and steps without allocation): ``bench.traffic``'s per-row ``spec_gate_delta``
ACTIVITY_COUNTERS: Tuple[str, ...] = ("decode_steps_on", "decode_steps_off", "switches", "auto_probes",
                                      "auto_probe_steps", "off_resume_steps", "kv_reserve_topups",
                                      "kv_reserve_skipped_steps")
#: the fields whose values all TP ranks must share (a difference is an alarm); equal
#: ``decisions_digest`` means the same decision at every decode step
RANK_AGREEMENT_FIELDS: Tuple[str, ...] = ("spec_enabled", "threshold", "hysteresis", "mode",
                                          "decisions_digest")
#: where an EAGLE worker class name maps to (``spec_version``); any other class is refused
WORKER_FAMILIES = {"EAGLEWorker": "v1", "EAGLEWorkerV2": "v2"}


def spec_gate_status(*sources: Any) -> Dict[str, Any]:
    """The ``spec_gate`` dict: every field of SPEC_GATE_FIELDS except ``ranks``, read as the
    attribute of that name on the first of ``sources`` that has it (the server's runtime, its
    SpecGate and OFF-step runner; the demo server's simulated ones).

    Raises:
        AttributeError: no source has some field (a producer that drifted from the contract).
    """
    out: Dict[str, Any] = {}
    for name in SPEC_GATE_FIELDS:
        if name == "ranks":
            continue
        for source in sources:
            if hasattr(source, name):
                out[name] = _json_value(getattr(source, name))
                break
        else:
            raise AttributeError(f"spec_gate field {name!r}: no source has it")
    return out


def fields_of(source: Any) -> Dict[str, Any]:
    """The spec_gate fields that ``source`` has as attributes (e.g. a SpecGate's own counters)."""
    return {name: _json_value(getattr(source, name)) for name in SPEC_GATE_FIELDS if hasattr(source, name)}


def _json_value(value: Any) -> Any:
    """A dataclass (``last_switch``) as its dict; anything else as it is."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return value


def rank_entry(status: Mapping[str, Any]) -> Dict[str, Any]:
    """One rank's entry of ``spec_gate.ranks`` from its own status dict."""
    return {name: status[name] for name in RANK_FIELDS}


# -- log lines -----------------------------------------------------------------------------------

LOG_TAG = "spec_gate:"
SWITCH_RE = re.compile(r"spec_gate: speculation (?P<dir>on|off) \(batch (?P<bs>\d+) (?P<op>[<>]=?) (?P<n>\d+)\)")
CHANGE_RE = re.compile(r"spec_gate: (?P<key>threshold|hysteresis) (?P<old>\d+|auto) -> (?P<new>\d+|auto)")
REJECTED_RE = re.compile(r"spec_gate: rejected ")
WORKER_RE = re.compile(
    r"spec_gate: worker=(?P<worker>\S+) spec=(?P<spec>\S+) overlap=(?P<overlap>\S+)"
    r"(?: threshold=(?P<threshold>\d+|auto))?(?: hysteresis=(?P<hysteresis>\d+))?"
)


AUTO_SWITCH_RE = re.compile(r"spec_gate: speculation (?P<dir>on|off) \(auto: batch (?P<bs>\d+)")


def switch_line(direction: str, batch_size: int, config: GateConfig, detail: str = "") -> str:
    """``spec_gate: speculation off (batch 37 >= 32)`` / ``... on (batch 20 < 28)``; with the auto
    threshold ``spec_gate: speculation off (auto: batch 48, est. 7,900 vs 6,100 tok/s)``."""
    if config.auto:
        return f"spec_gate: speculation {direction} (auto: batch {batch_size}{', ' + detail if detail else ''})"
    if direction == "off":
        return f"spec_gate: speculation off (batch {batch_size} >= {config.threshold})"
    return f"spec_gate: speculation on (batch {batch_size} < {config.resume_below})"


def change_line(key: str, old: Optional[int], new: Optional[int]) -> str:
    """``spec_gate: threshold 32 -> 33`` (``key``: ``threshold`` or ``hysteresis``; a None
    threshold is the auto threshold: ``spec_gate: threshold 32 -> auto``)."""
    show = lambda v: AUTO if v is None else v  # noqa: E731
    return f"spec_gate: {key} {show(old)} -> {show(new)}"


def rejected_line(update: Any, reason: str) -> str:
    """``spec_gate: rejected {'speculative_disable_batch_threshold': 0}: threshold must be >= 1``."""
    return f"spec_gate: rejected {update!r}: {reason}"


def worker_line(worker_class: str, spec_version: str, overlap: bool, config: GateConfig) -> str:
    """The startup line that names the live worker: ``spec_gate: worker=EAGLEWorkerV2 spec=v2 ...``."""
    threshold = AUTO if config.auto else config.threshold
    return (f"spec_gate: worker={worker_class} spec={spec_version} overlap={'on' if overlap else 'off'} "
            f"threshold={threshold} hysteresis={config.hysteresis}")


# -- run-time proofs -------------------------------------------------------------------------------

#: the first PROOF_FIRST calls of a checked OFF-step path are checked, then every PROOF_EVERY-th
PROOF_FIRST = 64
PROOF_EVERY = 256


def sampled(n: int) -> bool:
    """Is the ``n``-th call (from 1) checked? (A check waits for the GPU, so only a sample is.)"""
    return n <= PROOF_FIRST or n % PROOF_EVERY == 0


def sampled_count(n: int) -> int:
    """How many of the first ``n`` calls are checked (PROOF_EVERY > PROOF_FIRST: no overlap)."""
    return min(n, PROOF_FIRST) + n // PROOF_EVERY
