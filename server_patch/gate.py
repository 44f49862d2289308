"""The speculation gate as pure policy: no SGLang, no torch.

Semantics (``docs/contract.md``): with a manual threshold N speculation is ON while the final
decode batch size is ``< N``; it turns OFF when the batch size reaches N, and turns back ON only
when the batch size falls below ``N - hysteresis`` (H). With the auto threshold the decision per
decode batch is :class:`server_patch.auto_threshold.AutoPolicy`'s, from the step times and accept
lengths fed by :meth:`SpecGate.record_step` (kept in both modes, so the learned curve is there to
see and to switch to). Prefill/extend batches are never gated; the caller only feeds decode
batch sizes.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from typing import Any, Deque, Dict, Optional, Tuple

from server_patch import auto_threshold as auto
from server_patch.contract import MODE_AUTO, MODE_MANUAL, GateConfig, fields_of, switch_line

#: decisions_digest: a rolling hash of every decision (equal on two TP ranks = the same decision
#: at every decode step)
_DIGEST_MOD = (1 << 61) - 1


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

    def __init__(self, config: GateConfig, auto_prefill: bool = False):
        self.config = config
        self.spec_enabled = True
        self.current_off = False  # decision for the batch being run now
        self.last_decode_batch_size = 0
        self.decode_steps_on = 0
        self.decode_steps_off = 0
        self.switches = 0
        self.last_switch: Optional[Switch] = None
        self._accept: Deque[Tuple[int, int]] = deque(maxlen=self.ACCEPT_WINDOW)
        self.costs = auto.StepCosts(prefill_aware=auto_prefill)  # auto_prefill: auto_threshold.PREFILL_ENV_SWITCH
        self.policy = auto.AutoPolicy()
        self.probing = False  # the batch being run now is an auto-threshold probe
        self.probe_switch = False  # the last decision's switch entered or left a probe
        self.decisions_digest = 0
        self._since_on = [0, 0, 0]  # accepted tokens, verifies, batches since the last off->on
        self._first_on: Optional[float] = None  # accept length of the first ON batch after it

    @property
    def decode_steps(self) -> int:
        """Decode batches decided so far (ON and OFF)."""
        return self.decode_steps_on + self.decode_steps_off

    @property
    def threshold(self) -> Optional[int]:
        """N in force (req): the manual one, or the auto threshold's learned crossover (None
        until it found one)."""
        return auto.crossover(self.policy.table) if self.config.auto else self.config.threshold

    @property
    def mode(self) -> str:
        """``manual`` or ``auto``."""
        return MODE_AUTO if self.config.auto else MODE_MANUAL

    @property
    def hysteresis(self) -> int:
        """H in force (req)."""
        return self.config.hysteresis

    def decide(self, batch_size: int) -> Optional[Switch]:
        """Decide for one decode batch of ``batch_size`` requests; return the Switch if it flipped."""
        self.last_decode_batch_size = batch_size
        cfg = self.config
        was_probing = self.probing
        if cfg.auto:
            on, self.probing = self.policy.decide(batch_size, self.decode_steps, self.decode_steps_off)
        else:
            self.probing = False
            on = self.spec_enabled
            if self.spec_enabled and batch_size >= cfg.threshold:
                on = False
            elif not self.spec_enabled and batch_size < cfg.resume_below:
                on = True
            self.policy.on = on  # so a switch to auto starts from the mode in force
        switch = None
        self.probe_switch = False
        if on != self.spec_enabled:
            # into a probe, or back from one to the mode auto prefers: not a change of that mode
            self.probe_switch = self.probing or (was_probing and cfg.auto)
            self.spec_enabled = on
            switch = Switch(self.decode_steps, "on" if on else "off", batch_size)
            if on:
                self._since_on = [0, 0, 0]
                self._first_on = None
        self.decisions_digest = (self.decisions_digest * 1_000_003 + (1 if on else 2)) % _DIGEST_MOD
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
        """Install a validated config (takes effect at the next ``decide``); return the old one.

        From a manual N to auto, the learned crossover starts at the bucket edge nearest N (the
        operator's threshold is the prior; the crossover lies on bucket edges; the table moves it
        only where the measurements clearly favour another, auto_threshold.fit_crossover):
        switched on under load, auto had extrapolated OFF to every size from the large batches it
        had measured and kept speculation off at batch 5 for 20-30 s although ON measured faster
        there. The same value on every TP rank (it comes from the config), so the ranks still
        decide alike."""
        old, self.config = self.config, config
        if config.auto and not old.auto and old.threshold is not None:
            self.policy.table = dataclasses.replace(self.policy.table, cross=auto.nearest_edge(old.threshold))
        return old

    # -- the auto threshold's inputs and table ---------------------------------------------

    def record_step(self, batch_size: int, on: bool, step_time_s: float, tokens: int) -> bool:
        """One decode batch's measured step time (s) and output tokens (see auto_threshold)."""
        return self.costs.add(batch_size, on, step_time_s, tokens, self.decode_steps)

    def record_period(self, forward_iter: Optional[int], kind: str, now_s: float, batch_size: int,
                      clean: bool) -> None:
        """Every decode result (``kind``: ``on``, ``off``, ``resume``) at ``now_s`` (s): the prefill
        rate and each mode's prefill cost (auto_threshold.PrefillCosts)."""
        self.costs.prefill.observe(forward_iter, kind, now_s, batch_size, clean, self.costs, self.decode_steps)

    def refresh_table(self) -> list:
        """Rebuild the auto threshold's table from this rank's estimates; returns its wire form
        (TP rank 0 broadcasts it; :meth:`set_table` installs it on every rank)."""
        self.policy.table = auto.build_table(self.costs, self.policy.table, self.decode_steps)
        return self.policy.table.to_wire()

    def set_table(self, wire: list) -> None:
        """Install TP rank 0's table (:meth:`refresh_table`)."""
        self.policy.table = auto.Table.from_wire(wire)

    @property
    def auto_buckets(self) -> list:
        """The learned curve: per measured bucket, ON / OFF tok/s, samples, the preferred mode."""
        return auto.report(self.costs, self.policy.table)

    @property
    def auto_probes(self) -> int:
        """Probe bursts run so far."""
        return len(self.policy.probe_starts)

    @property
    def auto_probe_steps(self) -> int:
        """Decode steps run as probes so far."""
        return self.policy.probe_steps

    @property
    def auto_probe_share(self) -> Optional[float]:
        """Probe steps over decode steps (None before any decode step)."""
        return self.policy.probe_steps / self.decode_steps if self.decode_steps else None

    @property
    def auto_probe_time_share(self) -> Optional[float]:
        """The probes' share of decode time, estimated: probe steps weighted by their step time over
        the preferred mode's (``auto_threshold.probe_cost``), over decode steps (None before any
        decode step). What the probe budget counts (PROBE_SHARE plus the startup allowance)."""
        return self.policy.probe_charge / self.decode_steps if self.decode_steps else None

    @property
    def auto_reason(self) -> Optional[str]:
        """Why the last decode batch ran as it did in auto mode, e.g. ``auto: OFF at batch 48
        (est. ON 6,100 vs OFF 7,900 tok/s)``; None in manual mode."""
        if not self.config.auto:
            return None
        bs = self.last_decode_batch_size
        state = "ON" if self.spec_enabled else "OFF"
        return f"auto: {state} at batch {bs} ({self.estimate_text(bs)})"

    def estimate_text(self, batch_size: int) -> str:
        """``est. ON 6,100 vs OFF 7,900 tok/s; crossover 24`` at ``batch_size`` (or what is not
        measured yet): this bucket's estimates and the crossover fitted to all of them, which
        decides (auto_threshold.build_table)."""
        if self.probing:
            return "probing: measuring this mode here"
        index = auto.bucket_of(batch_size) if batch_size else None
        b = self.costs.buckets.get(index) if index is not None else None
        on_rate, off_rate = (b.rates(batch_size, self.costs.accept_for(index), self.costs.shares()) if b is not None
                             else (None, None))
        entry = self.policy.table.get(index) if index is not None else None
        if on_rate is not None and off_rate is not None:
            here = f"est. ON {on_rate:,.0f} vs OFF {off_rate:,.0f} tok/s"
        elif entry is not None and entry.implied and (on_rate if entry.on else off_rate) is not None:
            mode, rate = ("ON", on_rate) if entry.on else ("OFF", off_rate)
            side = "larger" if entry.on else "smaller"
            here = f"est. {mode} {rate:,.0f} tok/s, {mode} ahead at {side} batches"
        else:
            here = "learning: not measured both ways yet"
        cross = auto.crossover(self.policy.table)
        if cross is None:
            return f"{here}; no crossover yet"
        if not self.spec_enabled and index is not None and self.policy.in_band(index):
            return f"{here}; crossover {cross}: OFF kept just below it (hysteresis band)"
        lean = _lean(on_rate, off_rate)
        if lean is not None and index is not None and lean != self.policy.table.preferred(index):
            # one crossover fitted to every measured size decides, not this size alone
            return (f"{here}; crossover {cross}, fitted to every measured size: it moves when they "
                    f"clearly favour another")
        return f"{here}; crossover {cross}"

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


def _lean(on_rate: Optional[float], off_rate: Optional[float]) -> Optional[bool]:
    """True / False where one mode's estimate is ahead by more than auto_threshold.MARGIN, else None."""
    if on_rate is None or off_rate is None:
        return None
    if on_rate > off_rate * (1 + auto.MARGIN):
        return True
    if off_rate > on_rate * (1 + auto.MARGIN):
        return False
    return None


def switch_log_line(switch: Switch, config: GateConfig, detail: str = "") -> str:
    """The contract's log line for a switch, e.g. ``spec_gate: speculation off (batch 37 >= 32)``."""
    return switch_line(switch.direction, switch.batch_size, config, detail)
