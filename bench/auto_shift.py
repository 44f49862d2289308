"""How many decode steps the auto threshold needs to re-find its choice after the prompt mix changes.

A closed loop of C concurrent greedy ``/generate`` requests (bench/closed_loop.py) whose prompts
come from one prompt family of the synthetic pair per phase (``--sequence 0,1,0``: family 0, the
good draft, then family 1, the weak draft, then family 0 again; the pair made with
``python -m bench.synthetic_models --families 2 --p-wrong-families 0.1,0.6``), against a server
whose gate runs the auto threshold. Meanwhile ``spec_gate`` is polled every ``--poll-interval``
seconds: time, decode steps (``decode_steps_on + decode_steps_off``), ``spec_enabled``,
``threshold``, ``mode``, ``auto_reason``, ``last_decode_batch_size``, ``accept_length_recent``,
``auto_probes``, ``last_switch``.

Per phase (:func:`analyze_phase`) and per change of family (:func:`analyze`):

- ``change_step``: the decode step at which the first request of the new family was sent
  (interpolated between the two polls around that moment);
- the phase's steady mode: the mode of the majority of the decode steps of its second half;
- ``settled_step``: the first decode step from which the steady mode held for >= HOLD_SHARE (90%)
  of the rest of the phase's decode steps (the switch step from ``last_switch`` when the switch
  into it happened between the two polls, else the step count of the poll that first saw it);
- ``first_switch_step`` / ``steps_to_first_switch``: the first switch away from the mode in force at
  the change that the auto table decided (probes left out), whether or not it then held;
- ``steps_to_refind`` = ``settled_step - change_step`` and the same in seconds, when the steady
  mode differs from the previous phase's (``flipped``); when it does not the decision never flips
  (the new family's best mode at this batch size is the old one) and the record says so;
- ``on_share`` (the whole phase) and ``steady_on_share`` (from ``settled_step`` on): the share of
  decode steps run with speculation on;
- the expected mode: with ``A`` the oracle's accept length of the family
  (``Oracle.expected_accept_length(num_steps, family)``) and ``t_on / t_off`` the step-time ratio
  the gate measured in the bucket of the phase's batch size (from ``auto_buckets`` at the end of
  the phase: ``accept_length * off_tok_s / on_tok_s``), speculation pays iff ``A > t_on / t_off``;
  ``direction_matches``: the observed flip (or its absence) is the expected one.

Usage (GPU machine, repository root):
    python -m bench.auto_shift --models /tmp/models/1b/fam --out $OUT/auto-shift.json
    python -m bench.auto_shift --models DIR --url http://127.0.0.1:30600 --out $OUT/auto-shift.json
    python -m bench.auto_shift --models DIR --concurrency-from traffic-auto-v2-p0.2.json --out ...
    python -m bench.auto_shift --models DIR --calibrate 8,16,32,64 --out ...

``--concurrency-from`` picks the concurrency from a curve an auto server learned on the same target
(:func:`pick_concurrency`: where its t_on / t_off lies between the families' accept lengths, so the
decision must flip at the change); when the curve has no such size, ``--concurrency`` is used and
the record's ``concurrency_pick`` says why. ``--calibrate 8,16,32,64`` learns that curve on this
run's own prompts first (:func:`calibrate`): a curve learned on other traffic misleads, because the
step-time ratio depends on the context lengths (on an H100, 2026-12-06, a curve from prompts of
64-1,024 tokens put the ratio 2.36 at batch 16; with this tool's 32-token prompts it was ~1.7 there).
Without ``--url`` it starts ``python -m server_patch.launch_server`` on the pair with
``--speculative-disable-batch-threshold auto`` (arguments after ``--`` are appended); with
``--url`` a server in manual mode is set to auto for the run (POST /set_internal_state) and set
back at the end. One JSON line is printed per phase as it ends, then a summary line; the JSON file
(``--out``) is rewritten after every phase. Exit status 0 when every phase was measured, 1 when
the run failed (the file says why), 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import signal
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from bench.closed_loop import ClosedLoop, check_ids, generate_payload
from bench.errors import BenchError
from bench.gate_correctness import ranks_agree_auto
from server_patch.contract import AUTO, MODE_AUTO, THRESHOLD_FLAG

HOLD_SHARE = 0.9  # the steady mode must hold for this share of the rest of the phase's decode steps
MAX_RR = 128  # start mode: --max-running-requests and --cuda-graph-max-bs (as bench.traffic)
PROMPT_POOL = 1024  # distinct prompts per phase (cycled)
REQUEST_TIMEOUT_S = 600.0
STOP_WAIT_S = 120.0  # at the end, how long the requests in flight may take to finish

ON, OFF = "on", "off"


def mode_name(on: Optional[bool]) -> Optional[str]:
    """``"on"`` / ``"off"`` for a speculation state (None stays None)."""
    return None if on is None else (ON if on else OFF)


def direction(old: Optional[str], new: Optional[str]) -> Optional[str]:
    """``"on->off"``, ``"off->on"``, ``"none"`` (same mode), or None when one is unknown."""
    if old is None or new is None:
        return None
    return "none" if old == new else f"{old}->{new}"


# -- the samples -------------------------------------------------------------------------------


def sample_of(gate: Dict[str, Any], t_s: float) -> Dict[str, Any]:
    """One poll of ``spec_gate`` at ``t_s`` seconds after the load started, as recorded."""
    on, off = gate.get("decode_steps_on") or 0, gate.get("decode_steps_off") or 0
    last = gate.get("last_switch") or {}
    rec = {"t_s": round(t_s, 4), "decode_steps": on + off, "steps_on": on}
    rec.update(spec_enabled=gate.get("spec_enabled"), threshold=gate.get("threshold"))
    rec.update(mode=gate.get("mode"), auto_reason=gate.get("auto_reason"))
    rec.update(batch_size=gate.get("last_decode_batch_size"))
    rec.update(accept_length_recent=gate.get("accept_length_recent"), auto_probes=gate.get("auto_probes"))
    rec.update(last_switch_step=last.get("step"), last_switch_direction=last.get("direction"))
    return rec


def step_at(samples: Sequence[Dict[str, Any]], t_s: float) -> Optional[float]:
    """Decode steps at ``t_s`` (linear between the polls around it; the nearest end outside)."""
    if not samples:
        return None
    if t_s <= samples[0]["t_s"]:
        return float(samples[0]["decode_steps"])
    for a, b in zip(samples, samples[1:]):
        if a["t_s"] <= t_s <= b["t_s"]:
            if b["t_s"] == a["t_s"]:
                return float(b["decode_steps"])
            f = (t_s - a["t_s"]) / (b["t_s"] - a["t_s"])
            return a["decode_steps"] + f * (b["decode_steps"] - a["decode_steps"])
    return float(samples[-1]["decode_steps"])


def time_at(samples: Sequence[Dict[str, Any]], step: float) -> Optional[float]:
    """The moment (s) the decode step count reached ``step`` (linear between polls), or None when
    no poll saw it."""
    prev = None
    for s in samples:
        if s["decode_steps"] >= step:
            if prev is None or s["decode_steps"] == prev["decode_steps"]:
                return s["t_s"]
            f = (step - prev["decode_steps"]) / (s["decode_steps"] - prev["decode_steps"])
            return prev["t_s"] + f * (s["t_s"] - prev["t_s"])
        prev = s
    return None


# -- the analysis (pure) -----------------------------------------------------------------------


def bucket_for(buckets: Optional[Sequence[Dict[str, Any]]], batch_size: Optional[float]) -> Optional[Dict[str, Any]]:
    """The ``auto_buckets`` entry whose range holds ``batch_size``, or None."""
    if not buckets or batch_size is None:
        return None
    b = int(round(batch_size))
    for x in buckets:
        lo, hi = x.get("lo"), x.get("hi")
        if lo is not None and lo <= b and (hi is None or b <= hi):
            return x
    return None


def expectation(bucket: Optional[Dict[str, Any]], accept_oracle: Optional[float]) -> Dict[str, Any]:
    """The mode the gate should choose: ``on`` iff the oracle's accept length ``A`` of the family
    beats the step-time ratio ``t_on / t_off`` the gate measured in ``bucket`` (``auto_buckets``:
    ``on_tok_s = b A_measured / t_on``, ``off_tok_s = b / t_off``, so ``t_on / t_off =
    accept_length * off_tok_s / on_tok_s``). ``margin``: ``A / ratio - 1`` (within the gate's 3%
    hysteresis either mode is right)."""
    out: Dict[str, Any] = {"bucket": None, "accept_length_oracle": accept_oracle, "step_time_ratio": None,
                           "expected_mode": None, "margin": None, "gate_prefers": None, "why_unknown": None}
    if bucket is None:
        out["why_unknown"] = "no auto_buckets entry at this batch size"
        return out
    out["bucket"] = {k: bucket.get(k) for k in ("lo", "hi", "on_tok_s", "off_tok_s", "on_samples", "off_samples",
                                                  "accept_length", "on")}
    out["gate_prefers"] = mode_name(bucket.get("on"))
    on_tok, off_tok, a_meas = bucket.get("on_tok_s"), bucket.get("off_tok_s"), bucket.get("accept_length")
    if not on_tok or not off_tok or not a_meas:
        out["why_unknown"] = "the bucket was not measured both ways"
        return out
    ratio = a_meas * off_tok / on_tok
    out["step_time_ratio"] = round(ratio, 4)
    if accept_oracle is None:
        out["why_unknown"] = "no oracle accept length for this family"
        return out
    out["margin"] = round(accept_oracle / ratio - 1.0, 4)
    out["expected_mode"] = ON if accept_oracle > ratio else OFF
    return out


def first_switch(samples: Sequence[Dict[str, Any]], t_from: float, t_to: float) -> Optional[int]:
    """The decode step of the first switch in ``(t_from, t_to]`` away from the mode in force at
    ``t_from`` (the last poll at or before it) that the auto table decided, not a probe (a poll
    whose ``auto_reason`` says ``probing``): ``last_switch_step`` when that switch happened between
    the two polls, else the poll's step count. None without such a switch or a poll before."""
    before = [x for x in samples if x["t_s"] <= t_from]
    if not before:
        return None
    mode, prev = before[-1].get("spec_enabled"), before[-1]
    for x in samples:
        if not t_from < x["t_s"] <= t_to:
            continue
        probing = "probing" in str(x.get("auto_reason") or "")
        if x.get("spec_enabled") != mode and not probing:
            step, direction_ = x.get("last_switch_step"), x.get("last_switch_direction")
            if (step is not None and direction_ == mode_name(x.get("spec_enabled"))
                    and prev["decode_steps"] - 1 < step <= x["decode_steps"]):
                return int(step)
            return int(x["decode_steps"])
        prev = x
    return None


def analyze_phase(samples: Sequence[Dict[str, Any]], t_from: float, t_to: float,
                  previous_mode: Optional[str] = None, hold: float = HOLD_SHARE) -> Dict[str, Any]:
    """One phase from the polls: the window from ``t_from`` (its first request) to ``t_to`` (the
    next phase's start, or the end of the load). ``previous_mode``: the previous phase's steady
    mode (None for the first phase). See the module docstring for the fields."""
    window = [s for s in samples if t_from <= s["t_s"] <= t_to]
    change = step_at(samples, t_from)
    out: Dict[str, Any] = {
        "t_from_s": round(t_from, 3), "t_to_s": round(t_to, 3),
        "change_step": None if change is None else int(round(change)),
        "end_step": None, "steps": None, "polls": len(window), "on_share": None, "steady_mode": None,
        "settled_step": None, "steps_to_settle": None, "seconds_to_settle": None, "held_share": None,
        "steady_on_share": None, "median_batch_size": None, "probes": None,
        "previous_mode": previous_mode, "flipped": None, "note": None,
        "first_switch_step": None, "steps_to_first_switch": None,
    }
    first = first_switch(samples, t_from, t_to)
    if first is not None and change is not None:
        out["first_switch_step"], out["steps_to_first_switch"] = first, max(0, int(round(first - change)))
    if len(window) < 2:
        out["note"] = "fewer than two polls in this phase"
        return out
    end = step_at(samples, t_to)
    out["end_step"] = int(round(end))
    out["steps"] = int(round(end - change))
    span = window[-1]["decode_steps"] - window[0]["decode_steps"]
    if span > 0:
        out["on_share"] = round((window[-1]["steps_on"] - window[0]["steps_on"]) / span, 4)
    sizes = [s["batch_size"] for s in window if s.get("batch_size")]
    out["median_batch_size"] = statistics.median(sizes) if sizes else None
    probes = [s.get("auto_probes") for s in window if s.get("auto_probes") is not None]
    out["probes"] = (probes[-1] - probes[0]) if probes else None
    # per interval between two polls: its steps on and off
    iv = [(b["decode_steps"] - a["decode_steps"], b["steps_on"] - a["steps_on"])
          for a, b in zip(window, window[1:])]
    mid = (window[0]["decode_steps"] + window[-1]["decode_steps"]) / 2
    late = [(d, on) for (d, on), a in zip(iv, window) if a["decode_steps"] >= mid]
    late_steps, late_on = sum(d for d, _ in late), sum(on for _, on in late)
    if late_steps <= 0:
        out["note"] = "no decode steps in the second half of the phase"
        return out
    steady = ON if late_on * 2 >= late_steps else OFF
    out["steady_mode"] = steady
    out["flipped"] = None if previous_mode is None else steady != previous_mode
    for k, s in enumerate(window):
        if mode_name(s.get("spec_enabled")) != steady:
            continue
        rest = iv[k:]
        total = sum(d for d, _ in rest)
        if total <= 0:
            break
        on_steps = sum(on for _, on in rest)
        held = (on_steps if steady == ON else total - on_steps) / total
        if held < hold:
            continue
        before = window[k - 1]["decode_steps"] if k > 0 else change
        switch_step, switch_dir = s.get("last_switch_step"), s.get("last_switch_direction")
        switched_here = (switch_dir == steady and switch_step is not None
                         and before - 1 < switch_step <= s["decode_steps"])
        if switched_here:
            settled = switch_step  # the switch into the steady mode, between the two polls
        elif k == 0 and (previous_mode is None or previous_mode == steady
                         or (switch_dir == steady and switch_step is not None and switch_step <= before - 1)):
            settled = change  # already in the steady mode when the phase began
        else:
            settled = s["decode_steps"]
        out["settled_step"] = int(round(settled))
        out["steps_to_settle"] = int(round(settled - change))
        t_settled = time_at(samples, settled)
        out["seconds_to_settle"] = None if t_settled is None else round(max(0.0, t_settled - t_from), 3)
        out["held_share"] = round(held, 4)
        out["steady_on_share"] = round(on_steps / total, 4)
        break
    else:
        out["note"] = (f"never settled: from no poll on did {steady} hold {hold:.0%} of the rest of "
                       f"the phase's decode steps")
    if out["settled_step"] is None and out["note"] is None:
        out["note"] = "no decode steps after the last poll in the steady mode"
    return out


def analyze(samples: Sequence[Dict[str, Any]], phases: Sequence[Dict[str, Any]],
            expected_modes: Optional[Sequence[Optional[str]]] = None, hold: float = HOLD_SHARE
            ) -> Dict[str, Any]:
    """All phases and the changes between them. ``phases``: per phase ``{"family", "t_from_s",
    "t_to_s"}`` (its first request, its end); ``expected_modes``: per phase the mode
    :func:`expectation` expects (or None). Returns ``{"phases": [...], "changes": [...]}``."""
    results, changes = [], []
    prev_mode = None
    for i, ph in enumerate(phases):
        r = analyze_phase(samples, ph["t_from_s"], ph["t_to_s"], prev_mode, hold)
        r["family"] = ph["family"]
        r["expected_mode"] = expected_modes[i] if expected_modes is not None and i < len(expected_modes) else None
        results.append(r)
        if i > 0:
            changes.append(change_record(results[i - 1], r))
        prev_mode = r["steady_mode"]
    return {"phases": results, "changes": changes}


def change_record(old: Dict[str, Any], new: Dict[str, Any]) -> Dict[str, Any]:
    """One change of family: where it began, where the decision was re-found (``flipped``), or
    that it did not need to flip, and whether that is what the oracle and the gate's measured
    step times expect."""
    flipped = new.get("flipped")
    rec: Dict[str, Any] = {
        "from_family": old.get("family"), "to_family": new.get("family"),
        "change_step": new.get("change_step"), "change_t_s": new.get("t_from_s"),
        "old_mode": old.get("steady_mode"), "new_mode": new.get("steady_mode"), "flipped": flipped,
        "first_switch_step": new.get("first_switch_step"),
        "steps_to_first_switch": new.get("steps_to_first_switch"),
        "flip_step": new.get("settled_step") if flipped else None,
        "steps_to_refind": new.get("steps_to_settle") if flipped else None,
        "seconds_to_refind": new.get("seconds_to_settle") if flipped else None,
        "held_share": new.get("held_share"),
        "batch_size": new.get("median_batch_size"),
        "expected_old_mode": old.get("expected_mode"), "expected_new_mode": new.get("expected_mode"),
    }
    rec["observed_direction"] = direction(rec["old_mode"], rec["new_mode"])
    rec["expected_direction"] = direction(rec["expected_old_mode"], rec["expected_new_mode"])
    rec["direction_matches"] = (None if rec["observed_direction"] is None or rec["expected_direction"] is None
                                else rec["observed_direction"] == rec["expected_direction"])
    if flipped is False:
        rec["note"] = (f"the decision never flips: {rec['new_mode']} is the best mode for family "
                       f"{rec['to_family']} as for family {rec['from_family']} at batch "
                       f"{rec['batch_size']}")
    elif flipped and rec["steps_to_refind"] is None:
        rec["note"] = new.get("note") or "the new mode never held"
    else:
        rec["note"] = new.get("note")
    return rec


# -- the run -----------------------------------------------------------------------------------


class Load:
    """The closed loop's shared state: the phase (and its family) new requests are sent for, the
    prompts of each phase, the first send of each phase, and per phase the requests answered and
    those that differ from the oracle."""

    def __init__(self, url: str, oracle: Any, sequence: Sequence[int], input_len: int, output_len: int,
                 seed: int, pool: int = PROMPT_POOL):
        self.url, self.oracle, self.output_len = url, oracle, output_len
        self.prompts = [oracle.family_prompt_ids(f, pool, input_len, seed + 1000 * i)
                        for i, f in enumerate(sequence)]
        self.sequence = list(sequence)
        self.phase = 0
        self.next_prompt = [0] * len(sequence)
        self.first_send: List[Optional[float]] = [None] * len(sequence)
        self.answered = [0] * len(sequence)
        self.mismatched = [0] * len(sequence)
        self.first_mismatch: Optional[Dict[str, Any]] = None
        self.t0 = time.monotonic()
        self._lock = threading.Lock()
        self._local = threading.local()

    def now(self) -> float:
        return time.monotonic() - self.t0

    def begin(self, phase: int) -> float:
        """New requests are phase ``phase``'s from now; returns the moment (s)."""
        with self._lock:
            self.phase = phase
            return self.now()

    def send(self, _worker: int) -> Dict[str, Any]:
        import httpx

        client = getattr(self._local, "client", None)
        if client is None:  # before the send time is taken: a new client takes tens of ms
            client = self._local.client = httpx.Client(timeout=REQUEST_TIMEOUT_S)
        with self._lock:
            phase = self.phase
            pool = self.prompts[phase]
            prompt = pool[self.next_prompt[phase] % len(pool)]
            self.next_prompt[phase] += 1
            t_send = self.now()
            if self.first_send[phase] is None:
                self.first_send[phase] = t_send
        r = client.post(self.url + "/generate", json=generate_payload(prompt, self.output_len))
        r.raise_for_status()
        bad = check_ids(self.oracle, prompt, r.json().get("output_ids"), self.output_len)
        with self._lock:
            self.answered[phase] += 1
            if bad is not None:
                self.mismatched[phase] += 1
                if self.first_mismatch is None:
                    self.first_mismatch = {"phase": phase, "prompt_last": prompt[-1], "index": bad}
        return {"phase": phase, "t_send_s": round(t_send, 4), "t_done_s": round(self.now(), 4),
                "match": bad is None}


def oracle_accept_lengths(oracle: Any, num_steps: Optional[int]) -> List[Optional[float]]:
    """Per family the oracle's accept length at ``num_steps`` (None without it)."""
    if not num_steps:
        return [None] * oracle.num_families
    return [round(x, 4) for x in oracle.expected_accept_lengths_by_family(int(num_steps))]


def phase_window(phase_index: int, starts: List[float], first_sends: List[Optional[float]],
                 t_end: float) -> Dict[str, float]:
    """Phase ``phase_index``'s window: from its first request (else its start) to the next
    phase's start (or ``t_end``)."""
    t_from = first_sends[phase_index] if first_sends[phase_index] is not None else starts[phase_index]
    t_to = starts[phase_index + 1] if phase_index + 1 < len(starts) else t_end
    return {"t_from_s": t_from, "t_to_s": max(t_to, t_from)}


def summarize(samples, load: Load, starts, t_end, snapshots, num_steps) -> Dict[str, Any]:
    """The analysis of the phases so far (``len(starts)`` of them), with the expectations from
    the oracle and the gate's ``auto_buckets`` at each phase's end (``snapshots``)."""
    accept = oracle_accept_lengths(load.oracle, num_steps)
    windows = [dict(phase_window(i, starts, load.first_send, t_end), family=load.sequence[i])
               for i in range(len(starts))]
    first = analyze(samples, windows)
    expectations = []
    for i, r in enumerate(first["phases"]):
        bucket = bucket_for(snapshots[i] if i < len(snapshots) else None, r["median_batch_size"])
        expectations.append(expectation(bucket, accept[load.sequence[i]]))
    result = analyze(samples, windows, [e["expected_mode"] for e in expectations])
    for i, (r, e) in enumerate(zip(result["phases"], expectations)):
        r["expectation"] = e
        r["requests"] = load.answered[i]
        r["oracle_mismatches"] = load.mismatched[i]
        end = [s for s in samples if s["t_s"] <= windows[i]["t_to_s"]]
        r["accept_length_recent_end"] = end[-1]["accept_length_recent"] if end else None
        r["accept_length_oracle"] = accept[load.sequence[i]]
        r["phase"] = i
    return result


PICK_NUM_STEPS = 3  # the server's --speculative-num-steps in start mode (bench.server_harness.eagle3_args)


def learned_buckets(record: Any) -> Optional[List[Dict[str, Any]]]:
    """The ``auto_buckets`` of a spec_gate in ``record``: a spec_gate itself, a record with a
    ``final_spec_gate`` (bench.auto_run, bench.gate_correctness) or a ``bench.throughput traffic``
    JSON (``runs[-1].final_spec_gate``); None when it has none."""
    if not isinstance(record, dict):
        return None
    runs = record.get("runs")
    last_run = runs[-1] if isinstance(runs, list) and runs and isinstance(runs[-1], dict) else {}
    for gate in (record, record.get("final_spec_gate"), last_run.get("final_spec_gate")):
        if isinstance(gate, dict) and isinstance(gate.get("auto_buckets"), list):
            return gate["auto_buckets"]
    return None


def pick_concurrency(buckets: Sequence[Dict[str, Any]], accept_lengths: Sequence[float]) -> Dict[str, Any]:
    """The closed-loop concurrency at which the families' best modes differ, from a learned curve.

    Speculation pays at batch ``b`` iff ``A > t_on(b) / t_off(b)`` (the module docstring); a bucket
    measured both ways gives ``t_on / t_off = accept_length * off_tok_s / on_tok_s`` (the accept
    length of the draft that measured it: the step times are the target's and the draft's
    architecture, not its quality). One bucket's ratio is noisy (the H200 curve of 2026-12-02 read
    3.9 at 24-31 and 2.5 at 32-47), so the ratio is fitted as ``r(b) = c0 + c1 ln b`` over the
    buckets (least squares, each weighted by its fewer-measured mode's samples, at its middle batch
    size) and the pick is where the fit reaches the geometric mean of the lowest and highest family
    accept length (both modes then win by about the same factor), rounded, within the measured
    sizes. Returns ``{"concurrency": C or None, "fit": [c0, c1], "target_ratio", "ratios": [[lo,
    hi, ratio, weight], ...], "why"}``."""
    lo_a, hi_a = min(accept_lengths), max(accept_lengths)
    target = math.sqrt(lo_a * hi_a)
    points = []
    for b in buckets:
        on, off, acc = b.get("on_tok_s"), b.get("off_tok_s"), b.get("accept_length")
        if on and off and acc:
            mid = b["lo"] if b.get("hi") is None else (b["lo"] + b["hi"]) / 2
            weight = max(1, min(b.get("on_samples") or 0, b.get("off_samples") or 0))
            points.append((b["lo"], b.get("hi"), acc * off / on, weight, mid))
    out: Dict[str, Any] = {"concurrency": None, "fit": None, "target_ratio": round(target, 3),
                           "ratios": [[lo, hi, round(r, 3), w] for lo, hi, r, w, _ in points]}
    if len({p[4] for p in points}) < 2:
        out["why"] = "fewer than two batch sizes measured both ways: nothing to fit"
        return out
    sw = sum(p[3] for p in points)
    mx = sum(p[3] * math.log(p[4]) for p in points) / sw
    my = sum(p[3] * p[2] for p in points) / sw
    sxx = sum(p[3] * (math.log(p[4]) - mx) ** 2 for p in points)
    c1 = sum(p[3] * (math.log(p[4]) - mx) * (p[2] - my) for p in points) / sxx
    c0 = my - c1 * mx
    out["fit"] = [round(c0, 4), round(c1, 4)]
    if c1 <= 0:
        out["why"] = f"t_on / t_off does not grow with the batch in this curve (fit {c0:.2f} + {c1:.2f} ln b)"
        return out
    b_star = math.exp((target - c0) / c1)
    lowest, highest = min(p[0] for p in points), max(p[4] for p in points)
    if not lowest <= b_star <= highest:
        out["why"] = (f"the fit {c0:.2f} + {c1:.2f} ln b reaches t_on / t_off {target:.2f} at batch {b_star:.1f}, "
                      f"outside the sizes measured both ways ({lowest}-{highest:g})")
        return out
    out["concurrency"] = max(1, round(b_star))
    out["why"] = (f"the fit {c0:.2f} + {c1:.2f} ln b of t_on / t_off reaches {target:.2f} (between the families' "
                  f"accept lengths {lo_a:.2f} and {hi_a:.2f}) at batch {b_star:.1f}")
    return out


def calibrate(url: str, oracle: Any, a: argparse.Namespace, num_steps: Optional[int]) -> Dict[str, Any]:
    """Learn the auto server's curve on this run's own prompts, then pick the concurrency from it.

    A closed loop of the first phase's family (``a.sequence[0]``, ``a.input_len`` / ``a.output_len``
    tokens) at each concurrency of ``a.calibrate`` in turn, ``a.calibrate_seconds`` s each, while the
    server's auto threshold probes the mode it does not run in each new batch-size bucket; then
    :func:`pick_concurrency` on the server's ``auto_buckets`` (the step-time ratio does not depend on
    which family measured it: ``accept_length * off_tok_s / on_tok_s``). Returns the pick with
    ``from`` and, under ``levels``, per concurrency the requests answered, those that differed from
    the oracle and the request errors. Raises BenchError when the spec_gate cannot be read after."""
    from bench import server_harness

    load = Load(url, oracle, [a.sequence[0]], a.input_len, a.output_len, a.seed + 7919)
    levels = []
    for c in a.calibrate:
        before, bad_before = load.answered[0], load.mismatched[0]
        loop = ClosedLoop(load.send, c).start()
        time.sleep(a.calibrate_seconds)
        stopped = loop.stop(timeout_s=STOP_WAIT_S)
        levels.append({"concurrency": c, "requests": load.answered[0] - before,
                       "oracle_mismatches": load.mismatched[0] - bad_before, "request_errors": len(loop.errors),
                       "stopped": stopped})
    try:
        gate = server_harness.spec_gate(url)
    except Exception as exc:  # noqa: BLE001 - any failure to read it ends the run with the reason
        raise BenchError(f"calibration: no spec_gate at {url} ({type(exc).__name__}: {exc})") from None
    accept = [x for x in oracle_accept_lengths(oracle, num_steps or PICK_NUM_STEPS) if x]
    pick = pick_concurrency(gate.get("auto_buckets") or [], accept)
    pick["from"] = (f"--calibrate {','.join(map(str, a.calibrate))}: family {a.sequence[0]}, "
                    f"{a.calibrate_seconds:g} s a level, prompts of {a.input_len} tokens")
    pick["levels"] = levels
    pick["first_mismatch"] = load.first_mismatch
    return pick


def server_args(a: argparse.Namespace) -> List[str]:
    """Start mode: the SGLang server arguments (EAGLE-3 steps 3, topk 1, 4 draft tokens, as
    bench.traffic; the auto threshold; ``--tp-size``; the arguments after ``--``)."""
    from bench.server_harness import eagle3_args

    args = eagle3_args(str(a.models / "target"), str(a.models / "draft"), max_running_requests=MAX_RR,
                       cuda_graph_max_bs=MAX_RR, mem_fraction=a.mem_fraction, overlap=a.worker != "v1")
    args += [THRESHOLD_FLAG, AUTO]
    if a.tp > 1:
        args += ["--tp-size", str(a.tp)]
    return args + list(a.server_args)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def emit(line: Dict[str, Any]) -> None:
    print(json.dumps(line, default=str), flush=True)


def run(a: argparse.Namespace, oracle: Any, rec: Dict[str, Any]) -> Dict[str, Any]:
    """Start or reach the server, run the phases, fill ``rec`` (written to ``a.out`` after every
    phase and at the end)."""
    import httpx

    from bench import server_harness

    server, restore = None, None
    url = a.url
    try:
        if url is None:
            args = server_args(a)
            rec["launch_args"] = args
            from bench.traffic import greedy_server_env  # the load is greedy: no sampling kernels to build

            server = server_harness.start_server(f"auto-shift-{a.worker}", args, a.port, a.log_dir,
                                                 env=greedy_server_env())
            server_harness.wait_ready(server, timeout_s=a.startup_timeout)
            rec["startup_s"] = round(server.ready_s, 1)
            url = server.url
        rec["url"] = url
        try:
            gate = server_harness.spec_gate(url)
        except httpx.TransportError as exc:  # nothing there (refused, timed out): not a missing flag
            raise BenchError(f"nothing answers at {url} ({type(exc).__name__}: {exc})") from None
        except (httpx.HTTPError, KeyError, IndexError, TypeError, ValueError) as exc:
            raise BenchError(f"no spec_gate in {url}/server_info ({type(exc).__name__}: {exc}): "
                             f"start the server with {THRESHOLD_FLAG} {AUTO}") from None
        if gate.get("mode") != MODE_AUTO:
            restore = (gate.get("threshold"), gate.get("hysteresis"))
            reply = server_harness.set_gate(url, threshold=AUTO)
            rec["set_auto_reply"] = reply
            if reply.get("updated") is False:
                raise BenchError(f"the server refused the auto threshold: {reply.get('reason')}")
            gate = server_harness.spec_gate(url)
        rec["server"] = {k: v for k, v in gate.items() if k not in ("auto_buckets", "ranks")}
        num_steps = gate.get("num_steps")
        if (gate.get("topk") or 1) > 1:
            rec["expectation_note"] = ("topk > 1: the oracle's accept length is a chain draft's (topk 1), "
                                       "a lower bound here")
        rec["oracle"] = {"families": [{"family": k, "p_wrong": f.p_wrong, "token_ids": [f.start, f.stop],
                                       "expected_accept_length": acc}
                                      for k, (f, acc) in enumerate(zip(oracle.families,
                                                                       oracle_accept_lengths(oracle, num_steps)))]}
        if a.calibrate:
            pick = calibrate(url, oracle, a, num_steps)
            if pick["concurrency"] is not None:
                a.concurrency = pick["concurrency"]
            else:
                pick["fallback"] = a.concurrency
            rec["concurrency_pick"], rec["concurrency"] = pick, a.concurrency
            server_harness.write_json(a.out, rec)
            emit({"calibration": pick["levels"], "concurrency": a.concurrency, "why": pick["why"]})
        load = Load(url, oracle, a.sequence, a.input_len, a.output_len, a.seed)
        loop = ClosedLoop(load.send, a.concurrency)
        samples: List[Dict[str, Any]] = rec["samples"]
        starts: List[float] = []
        snapshots: List[Optional[list]] = []
        poller = httpx.Client(timeout=10.0)
        last_gate: Dict[str, Any] = {}

        def poll() -> None:
            t_asked = load.now()
            try:
                g = poller.get(url + "/server_info").json()["internal_states"][0]["spec_gate"]
            except Exception as exc:  # noqa: BLE001 - counted; one lost poll is a gap, not a failure
                rec["poll_errors"] += 1
                rec["last_poll_error"] = f"{type(exc).__name__}: {exc}"[:200]
                return
            last_gate.clear()
            last_gate.update(g)
            samples.append(sample_of(g, (t_asked + load.now()) / 2))  # the server read it in between

        def write(t_end: float) -> Dict[str, Any]:
            result = summarize(samples, load, starts, t_end, snapshots, num_steps)
            rec.update(result)
            pick = rec.get("concurrency_pick") or {}  # --calibrate's levels are oracle-checked too
            rec["oracle_match"] = (sum(load.mismatched) == 0 and sum(load.answered) > 0
                                   and not any(x["oracle_mismatches"] for x in pick.get("levels") or []))
            rec["first_mismatch"] = load.first_mismatch or pick.get("first_mismatch")
            rec["request_errors"] = len(loop.errors)
            rec["request_error_examples"] = loop.errors[:5]
            server_harness.write_json(a.out, rec)
            return result

        poll()  # connects; the samples start with the load
        load.t0 = time.monotonic()
        samples.clear()
        poll()
        loop.start()
        try:
            for i in range(len(a.sequence)):
                starts.append(load.begin(i))
                end = starts[-1] + a.phase_seconds
                tick = starts[-1]
                while load.now() < end:
                    poll()
                    tick += a.poll_interval
                    time.sleep(max(0.0, min(tick, end) - load.now()))
                poll()
                snapshots.append(list(last_gate.get("auto_buckets") or []))
                if i + 1 < len(a.sequence):
                    result = write(load.now())
                    emit(phase_line(result, i))
        finally:
            t_stop = load.now()
            if not loop.stop(timeout_s=STOP_WAIT_S):
                rec["stop_note"] = "requests still in flight when the run ended"
        poll()
        result = write(t_stop)
        emit(phase_line(result, len(a.sequence) - 1))
        rec["final_spec_gate"] = dict(last_gate)
        # read once the load ended (the server idle): every TP rank took the same decisions
        rec["ranks_agree_auto"] = ranks_agree_auto(last_gate)
        return rec
    finally:
        if restore is not None and url is not None:
            try:
                server_harness.set_gate(url, threshold=restore[0], hysteresis=restore[1])
                rec["restored_gate"] = {"threshold": restore[0], "hysteresis": restore[1]}
            except Exception as exc:  # noqa: BLE001 - reported; the measurement is what matters
                rec["restore_error"] = f"{type(exc).__name__}: {exc}"
        if server is not None:
            rec["server_exit_code"] = server_harness.stop_server(server)
            rec["log_tail"] = server.log_tail(40)


def phase_line(result: Dict[str, Any], i: int) -> Dict[str, Any]:
    """The JSON line printed when phase ``i`` ends: the phase, and the change into it."""
    p = result["phases"][i]
    line = {"phase": i, "family": p["family"]}
    line.update({k: p.get(k) for k in ("change_step", "end_step", "steps", "median_batch_size", "steady_mode",
                                       "on_share", "steady_on_share", "settled_step", "steps_to_settle",
                                       "requests", "oracle_mismatches", "accept_length_recent_end",
                                       "accept_length_oracle", "expected_mode", "note")})
    if i > 0:
        line["change"] = result["changes"][i - 1]
    return line


def _int_list(what: str, example: str, least: int, distinct: bool = False) -> Any:
    """An argparse type: two or more comma-separated integers >= ``least`` (``what``, e.g. ``example``),
    two of them different when ``distinct``."""
    def parse(text: str) -> List[int]:
        try:
            values = [int(x) for x in text.split(",") if x.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what} like {example}, got {text!r}") from None
        if len(values) < 2 or any(x < least for x in values):
            raise argparse.ArgumentTypeError(f"expected two or more {what} >= {least}, got {text!r}")
        if distinct and len(set(values)) < 2:
            raise argparse.ArgumentTypeError(f"expected two or more different {what}, got {text!r}")
        return values
    return parse


_sequence = _int_list("family numbers", "0,1,0", 0)
_levels = _int_list("concurrencies", "8,16,32,64", 1, distinct=True)  # a curve to fit needs two sizes


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m bench.auto_shift", description=__doc__.splitlines()[0],
                                 epilog="Arguments after -- are appended to the server's (start mode only).")
    ap.add_argument("--models", type=Path, required=True, metavar="DIR",
                    help="a pair from bench.synthetic_models with prompt families (its oracle.json; "
                         "target/ and draft/ when the server is started here)")
    ap.add_argument("--out", type=Path, required=True, metavar="FILE.json", help="the result (rewritten per phase)")
    ap.add_argument("--url", metavar="URL", help="an already-started gate server, http://HOST:PORT "
                                                 "(default: start one with the auto threshold)")
    ap.add_argument("--concurrency", type=int, default=16, metavar="C",
                    help="requests in flight (default 16; with --concurrency-from or --calibrate, when they find none)")
    ap.add_argument("--concurrency-from", type=Path, metavar="FILE.json",
                    help="pick the concurrency from a learned curve: a spec_gate with auto_buckets, or a "
                         "bench.throughput traffic / bench.auto_run JSON with final_spec_gate (the batch size "
                         "where t_on / t_off lies between the families' accept lengths)")
    ap.add_argument("--calibrate", type=_levels, metavar="C,C,..",
                    help="first learn the curve on this run's own prompts: a closed loop at each of these "
                         "concurrencies, then the concurrency picked from the server's auto_buckets as "
                         "--concurrency-from does (e.g. 8,16,32,64)")
    ap.add_argument("--calibrate-seconds", type=float, default=10.0, metavar="S",
                    help="length of each calibration level (default 10)")
    ap.add_argument("--phase-seconds", type=float, default=40.0, metavar="S", help="length of a phase (default 40)")
    ap.add_argument("--output-len", type=int, default=256, metavar="N", help="tokens per request (default 256)")
    ap.add_argument("--input-len", type=int, default=32, metavar="N", help="prompt tokens (default 32)")
    ap.add_argument("--sequence", type=_sequence, default=[0, 1, 0], metavar="F,F,..",
                    help="the family of each phase (default 0,1,0)")
    ap.add_argument("--poll-interval", type=float, default=0.2, metavar="S", help="spec_gate polls (default 0.2 s)")
    ap.add_argument("--seed", type=int, default=1, help="prompt seed (default 1)")
    ap.add_argument("--worker", choices=("v2", "v1"), default="v2", help="start mode: v1 = --disable-overlap-schedule")
    ap.add_argument("--tp", type=int, default=1, help="start mode: --tp-size (default 1)")
    ap.add_argument("--port", type=int, default=30600, help="start mode: server port (default 30600)")
    ap.add_argument("--mem-fraction", type=float, default=0.8, metavar="F",
                    help="start mode: --mem-fraction-static (default 0.8)")
    ap.add_argument("--startup-timeout", type=float, default=600.0, metavar="S", help="start mode (default 600 s)")
    ap.add_argument("--log-dir", type=Path, default=Path("/tmp/specconsole-logs"), help="start mode: server logs")
    return ap


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    ap = parser()
    a = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    a.server_args = extra
    if extra and a.url:
        ap.error("arguments after -- are server arguments: only when the server is started here (not --url)")
    if a.url is not None:
        from bench.traffic import split_url

        try:
            split_url(a.url)
        except BenchError as exc:
            ap.error(str(exc))
    if a.out.exists():  # the record is rewritten after every phase: an earlier one would be lost
        ap.error(f"--out {a.out} exists (an earlier run's record; a failed run leaves one too): "
                 f"give another file or move it away")
    if not a.out.parent.is_dir():
        ap.error(f"--out {a.out}: no directory {a.out.parent}")
    for flag, value, ok in (("--concurrency", a.concurrency, a.concurrency >= 1),
                            ("--output-len", a.output_len, a.output_len >= 1),
                            ("--input-len", a.input_len, a.input_len >= 1),
                            ("--tp", a.tp, a.tp >= 1),
                            ("--phase-seconds", a.phase_seconds, math.isfinite(a.phase_seconds) and a.phase_seconds > 0),
                            ("--calibrate-seconds", a.calibrate_seconds,
                             math.isfinite(a.calibrate_seconds) and a.calibrate_seconds > 0),
                            ("--poll-interval", a.poll_interval, math.isfinite(a.poll_interval) and a.poll_interval > 0)):
        if not ok:
            ap.error(f"{flag} must be > 0, got {value}")
    if not 0 < a.mem_fraction < 1:
        ap.error(f"--mem-fraction must be between 0 and 1 (SGLang's --mem-fraction-static), got {a.mem_fraction}")
    if not 1 <= a.port <= 65535:
        ap.error(f"--port must be 1-65535, got {a.port}")
    if a.url is None:
        from bench.server_harness import missing_pair_files

        missing = missing_pair_files(a.models)
        if missing:
            ap.error(f"--models {a.models}: missing {', '.join(missing)} (a pair made by python -m "
                     f"bench.synthetic_models --families 2 --p-wrong-families 0.1,0.6)")
    try:
        from bench.synthetic_models import Oracle

        oracle = Oracle.load(a.models / "oracle.json")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        ap.error(f"--models {a.models}: no oracle ({type(exc).__name__}: {exc})")
    if oracle.num_families < 2:
        ap.error(f"--models {a.models} has one prompt family; make the pair with --families 2 "
                 f"--p-wrong-families 0.1,0.6")
    bad = [f for f in a.sequence if f >= oracle.num_families]
    if bad:
        ap.error(f"--sequence names family {bad[0]}; the pair has 0..{oracle.num_families - 1}")
    if a.calibrate and a.concurrency_from is not None:
        ap.error("--calibrate and --concurrency-from both pick the concurrency: give one")
    pick = None
    if a.concurrency_from is not None:
        try:
            buckets = learned_buckets(json.loads(a.concurrency_from.read_text(encoding="utf-8")))
        except (OSError, ValueError) as exc:
            ap.error(f"--concurrency-from {a.concurrency_from}: {getattr(exc, 'strerror', None) or exc}")
        if buckets is None:
            ap.error(f"--concurrency-from {a.concurrency_from}: no auto_buckets (a spec_gate of an auto server, "
                     f"or a JSON with final_spec_gate)")
        pick = pick_concurrency(buckets, oracle.expected_accept_lengths_by_family(PICK_NUM_STEPS))
        pick["from"] = str(a.concurrency_from)
        if pick["concurrency"] is not None:
            a.concurrency = pick["concurrency"]
        else:
            pick["fallback"] = a.concurrency
        print(f"auto_shift: concurrency {a.concurrency}: {pick['why']}"
              + ("" if pick["concurrency"] is not None else f"; --concurrency {a.concurrency} instead"), flush=True)
    rec: Dict[str, Any] = {
        "tool": "bench.auto_shift", "command": "python -m bench.auto_shift " + " ".join(argv),
        "concurrency_pick": pick, "calibrate": a.calibrate, "calibrate_seconds": a.calibrate_seconds,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "models": str(a.models), "concurrency": a.concurrency, "phase_seconds": a.phase_seconds,
        "output_len": a.output_len, "input_len": a.input_len, "sequence": a.sequence,
        "poll_interval_s": a.poll_interval, "hold_share": HOLD_SHARE, "seed": a.seed,
        "samples": [], "poll_errors": 0, "phases": [], "changes": [],
    }
    from bench.server_harness import write_json

    old = signal.signal(signal.SIGTERM, _interrupt)
    try:
        run(a, oracle, rec)
    except (Exception, KeyboardInterrupt) as exc:  # noqa: BLE001 - the file says why
        rec["error"] = f"{type(exc).__name__}: {exc}"
        if not isinstance(exc, (BenchError, KeyboardInterrupt)):
            import traceback

            rec["traceback"] = traceback.format_exc()
        write_json(a.out, rec)
        emit({"error": rec["error"], "out": str(a.out)})
        print(f"auto_shift: {rec['error']}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGTERM, old if old is not None else signal.SIG_DFL)
    write_json(a.out, rec)
    emit({"out": str(a.out), "oracle_match": rec.get("oracle_match"),
          "changes": [{k: c.get(k) for k in ("from_family", "to_family", "old_mode", "new_mode", "flipped",
                                             "steps_to_first_switch", "steps_to_refind", "seconds_to_refind",
                                             "direction_matches")}
                      for c in rec["changes"]],
          "steady_on_share": [p.get("steady_on_share") for p in rec["phases"]],
          "ranks_agree_auto": rec.get("ranks_agree_auto")})
    return 0


if __name__ == "__main__":
    sys.exit(main())
