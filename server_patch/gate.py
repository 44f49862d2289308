"""The speculation gate as pure policy: no SGLang, no torch.

Semantics (the README's contract): speculation is ON while the final decode batch size is
``< threshold`` (N); it turns OFF when the batch size reaches N, and turns back ON only when
the batch size falls below ``N - hysteresis`` (H). Prefill/extend batches are never gated; the
caller only feeds decode batch sizes.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from typing import Any, Deque, Dict, Optional, Tuple

from server_patch.contract import GateConfig, fields_of, switch_line


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
        """Decode batches decided so far (ON and OFF)."""
        return self.decode_steps_on + self.decode_steps_off

    @property
    def threshold(self) -> int:
        """N in force (req)."""
        return self.config.threshold

    @property
    def hysteresis(self) -> int:
        """H in force (req)."""
        return self.config.hysteresis

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

    @property
    def accept_length_since_on(self) -> Optional[float]:
        """Accept length over the first (up to FIRST_ON_STEPS) ON batches after the last off->on."""
        return self._since_on[0] / self._since_on[1] if self._since_on[1] else None

    @property
    def steps_since_on(self) -> int:
        """ON batches counted in :attr:`accept_length_since_on`."""
        return self._since_on[2]

    @property
    def accept_length_first_on_step(self) -> Optional[float]:
        """Accept length of the first ON batch after the last off->on switch: a draft left stale
        by the OFF steps shows here first (1.0: the first draft token missed)."""
        return self._first_on

    def snapshot(self) -> Dict[str, Any]:
        """This gate's own ``spec_gate`` fields (config, decision, counters) as a JSON-able dict."""
        return fields_of(self)


def switch_log_line(switch: Switch, config: GateConfig) -> str:
    """The contract's log line for a switch, e.g. ``spec_gate: speculation off (batch 37 >= 32)``."""
    return switch_line(switch.direction, switch.batch_size, config)
