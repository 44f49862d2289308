"""The speculation gate as pure policy: no SGLang, no torch.

Semantics (the README's contract): speculation is ON while the final decode batch size is
``< threshold`` (N); it turns OFF when the batch size reaches N, and turns back ON only when
the batch size falls below ``N - hysteresis`` (H). Prefill/extend batches are never gated; the
caller only feeds decode batch sizes.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from typing import Any, Deque, Dict, Mapping, Optional, Tuple

THRESHOLD_KEY = "speculative_disable_batch_threshold"
HYSTERESIS_KEY = "speculative_disable_hysteresis"
GATE_KEYS = (THRESHOLD_KEY, HYSTERESIS_KEY)
# Extra keys of a gate reply on its way from the scheduler to the tokenizer manager
# (inside SetInternalStateReqOutput.server_args).
REASON_KEY = "spec_gate_reason"
DECODE_STEP_KEY = "spec_gate_decode_step"


class GateConfigError(ValueError):
    """A threshold/hysteresis pair (or an update to it) that the gate refuses; the message says why."""


@dataclasses.dataclass(frozen=True)
class GateConfig:
    """Threshold N (decode batch size at which speculation turns off) and hysteresis H.

    Valid when ``N >= 1``, ``0 <= H < N`` and, if ``max_running_requests`` is known,
    ``N <= max_running_requests``.
    """

    threshold: int
    hysteresis: int = 0

    def validate(self, max_running_requests: Optional[int] = None) -> "GateConfig":
        """Return self if valid, else raise :class:`GateConfigError` with the reason."""
        _require_int("threshold", self.threshold)
        _require_int("hysteresis", self.hysteresis)
        if self.threshold < 1:
            raise GateConfigError(f"threshold must be >= 1, got {self.threshold}")
        if max_running_requests is not None and self.threshold > max_running_requests:
            raise GateConfigError(
                f"threshold {self.threshold} > max running requests {max_running_requests}: "
                "the batch could never reach it"
            )
        if self.hysteresis < 0:
            raise GateConfigError(f"hysteresis must be >= 0, got {self.hysteresis}")
        if self.hysteresis >= self.threshold:
            raise GateConfigError(
                f"hysteresis {self.hysteresis} must be < threshold {self.threshold}"
            )
        return self

    @property
    def resume_below(self) -> int:
        """Speculation resumes when the decode batch size is ``< N - H``."""
        return self.threshold - self.hysteresis


def _require_int(name: str, value: Any) -> None:
    # bool is an int subclass; "true" as a threshold is a client bug, not 1.
    if isinstance(value, bool) or not isinstance(value, int):
        raise GateConfigError(f"{name} must be an integer, got {value!r}")


def parse_update(
    current: GateConfig, update: Mapping[str, Any], max_running_requests: Optional[int]
) -> GateConfig:
    """Apply a ``/set_internal_state`` ``server_args`` dict to ``current``, all or nothing.

    Either key may be sent alone; the other keeps its current value.

    Raises:
        GateConfigError: a key other than the two gate keys is present, a value is not an
            integer, or the resulting pair is invalid (see :meth:`GateConfig.validate`).
    """
    others = sorted(k for k in update if k not in GATE_KEYS)
    if others:
        raise GateConfigError(
            f"gate keys cannot be mixed with other keys ({', '.join(others)}); send them separately"
        )
    if not any(k in update for k in GATE_KEYS):
        raise GateConfigError("no gate key in the update")
    new = GateConfig(
        threshold=update.get(THRESHOLD_KEY, current.threshold),
        hysteresis=update.get(HYSTERESIS_KEY, current.hysteresis),
    )
    return new.validate(max_running_requests)


@dataclasses.dataclass
class Switch:
    """One on<->off transition: decode step index, new direction ("on"/"off"), batch size."""

    step: int
    direction: str
    batch_size: int


class SpecGate:
    """Per-scheduler gate state: decides ON/OFF for each decode batch and keeps counters.

    ``decide`` is called once per decode batch with its final batch size; the result holds
    for that batch only. Counters: ``decode_steps_on/off`` (decode batches run each way),
    ``switches`` (transitions), ``last_switch``. ``record_accept`` feeds the recent accept
    length from speculative (ON) steps only.
    """

    ACCEPT_WINDOW = 64  # decode batches in the recent accept-length window
    FIRST_ON_STEPS = 16  # ON batches measured after each off->on switch (draft warm-up check)

    def __init__(self, config: GateConfig):
        self.config = config
        self.spec_enabled = True
        self.current_off = False  # decision for the batch being run now
        self.last_decode_batch_size = 0
        self.decode_steps_on = 0
        self.decode_steps_off = 0
        self.switches = 0
        self.last_switch: Optional[Switch] = None
        self._accept: Deque[Tuple[int, int]] = deque(maxlen=self.ACCEPT_WINDOW)
        self._since_on = [0, 0, 0]  # accepted tokens, verifies, batches since the last off->on
        self._first_on: Optional[float] = None  # accept length of the first ON batch after it

    @property
    def decode_steps(self) -> int:
        return self.decode_steps_on + self.decode_steps_off

    def decide(self, batch_size: int) -> Optional[Switch]:
        """Decide for one decode batch of ``batch_size`` requests; return the Switch if it flipped."""
        self.last_decode_batch_size = batch_size
        cfg = self.config
        switch = None
        if self.spec_enabled and batch_size >= cfg.threshold:
            self.spec_enabled = False
            switch = Switch(self.decode_steps, "off", batch_size)
        elif not self.spec_enabled and batch_size < cfg.resume_below:
            self.spec_enabled = True
            switch = Switch(self.decode_steps, "on", batch_size)
            self._since_on = [0, 0, 0]
            self._first_on = None
        if switch is not None:
            self.switches += 1
            self.last_switch = switch
        if self.spec_enabled:
            self.decode_steps_on += 1
        else:
            self.decode_steps_off += 1
        self.current_off = not self.spec_enabled
        return switch

    def update(self, config: GateConfig) -> GateConfig:
        """Install a validated config (takes effect at the next ``decide``); return the old one."""
        old, self.config = self.config, config
        return old

    def record_accept(self, num_verifies: int, num_correct_drafts: int) -> None:
        """Record one speculative decode batch: ``num_verifies`` requests verified, drafts accepted."""
        if num_verifies > 0:
            self._accept.append((num_verifies + num_correct_drafts, num_verifies))
            if self._since_on[2] == 0:
                self._first_on = (num_verifies + num_correct_drafts) / num_verifies
            if self._since_on[2] < self.FIRST_ON_STEPS:
                self._since_on[0] += num_verifies + num_correct_drafts
                self._since_on[1] += num_verifies
                self._since_on[2] += 1

    def recent_accept_window(self) -> Optional[Tuple[int, int]]:
        """(accepted tokens incl. bonus, verifies) summed over the recent ON batches, or None."""
        if not self._accept:
            return None
        return sum(a for a, _ in self._accept), sum(v for _, v in self._accept)

    @property
    def accept_length_recent(self) -> Optional[float]:
        """Mean accept length (accepted drafts + 1 bonus per verify) over recent ON batches."""
        window = self.recent_accept_window()
        return None if window is None else window[0] / window[1]

    def snapshot(self) -> Dict[str, Any]:
        """Counters and config as a JSON-able dict (part of ``spec_gate`` in /server_info)."""
        return {
            "spec_enabled": self.spec_enabled,
            "threshold": self.config.threshold,
            "hysteresis": self.config.hysteresis,
            "last_decode_batch_size": self.last_decode_batch_size,
            "decode_steps_on": self.decode_steps_on,
            "decode_steps_off": self.decode_steps_off,
            "switches": self.switches,
            "last_switch": dataclasses.asdict(self.last_switch) if self.last_switch else None,
            "accept_length_recent": self.accept_length_recent,
            # accept length over the first ON batches after the last off->on switch
            "accept_length_since_on": (
                self._since_on[0] / self._since_on[1] if self._since_on[1] else None
            ),
            "steps_since_on": self._since_on[2],
            # a draft left stale by the OFF steps shows here first (1.0: the first draft token missed)
            "accept_length_first_on_step": self._first_on,
        }


def switch_log_line(switch: Switch, config: GateConfig) -> str:
    """The contract's log line for a switch, e.g. ``spec_gate: speculation off (batch 37 >= 32)``."""
    if switch.direction == "off":
        return f"spec_gate: speculation off (batch {switch.batch_size} >= {config.threshold})"
    return f"spec_gate: speculation on (batch {switch.batch_size} < {config.resume_below})"
