"""The gate's state on SGLang's own ``/metrics`` (``--enable-metrics``), per TP rank.

SGLang 0.5.12 serves ``/metrics`` from the main process with prometheus_client's multiprocess
collector over ``PROMETHEUS_MULTIPROC_DIR``, which it sets before spawning the schedulers
(``entrypoints/engine.py:1253``), so metrics a scheduler process creates appear there. The
metrics are created in the scheduler process only (``prometheus_client`` picks its multiprocess
value backend at first import: imported in the main process before SGLang sets the directory,
every main-process metric would silently vanish), with the labels of SGLang's own scheduler
collector (``model_name``, ``engine_type``, ``tp_rank``, ``pp_rank``, ``moe_ep_rank``), gauges in
``mostrecent`` mode as SGLang's. Every rank writes its own series (its own proofs).

Updated every SYNC_EVERY decode steps, after a threshold change and on every ``/server_info``
(a cheap write to a memory-mapped file, never per decode step).

| metric | type | value |
|---|---|---|
| ``sglang:spec_gate_spec_enabled`` | gauge | 1 while speculation is on |
| ``sglang:spec_gate_auto`` | gauge | 1 with the auto threshold |
| ``sglang:spec_gate_threshold`` | gauge | N (auto: the learned crossover; NaN until found) |
| ``sglang:spec_gate_hysteresis`` | gauge | H |
| ``sglang:spec_gate_accept_length`` | gauge | accept length of the recent ON steps (NaN before any) |
| ``sglang:spec_gate_decode_steps_total{mode="on"/"off"}`` | counter | decode batches run each way |
| ``sglang:spec_gate_switches_total`` | counter | on<->off switches |
| ``sglang:spec_gate_auto_probe_steps_total`` | counter | decode steps run as auto-threshold probes |
| ``sglang:spec_gate_proof_checks_total{proof=...}`` | counter | sampled run-time proofs (OFF steps: ``attention``, ``kv_only``, ``early_seq_lens``; prefills: ``target_prefill``) |
| ``sglang:spec_gate_proof_mismatches_total{proof=...}`` | counter | the ones that failed |
"""

from __future__ import annotations

import math
from typing import Any, Dict, Optional

PREFIX = "sglang:spec_gate_"
#: proof label -> (checks field, mismatches field) of spec_gate
PROOFS = {
    "attention": ("off_attention_checks", "off_attention_mismatches"),
    "kv_only": ("off_kv_only_checks", "off_kv_only_mismatches"),
    "early_seq_lens": ("off_early_seq_lens_checks", "off_early_seq_lens_mismatches"),
    "target_prefill": ("target_prefill_checks", "target_prefill_mismatches"),
}
GAUGES = {
    "spec_enabled": "1 while speculation is on for the decode batches",
    "auto": "1 when the auto threshold decides",
    "threshold": "Decode batch size from which speculation is off (auto: the learned crossover)",
    "hysteresis": "Speculation resumes below threshold - hysteresis",
    "accept_length": "Accept length of the recent speculative (ON) decode steps",
}


class GateMetrics:
    """The gate's metrics of one scheduler process; a no-op object without ``--enable-metrics``."""

    def __init__(self, labels: Optional[Dict[str, str]]) -> None:
        self.labels = labels
        self._metrics: Optional[Dict[str, Any]] = None
        self._exported: Dict[tuple, float] = {}  # counter key -> value already added

    @classmethod
    def for_scheduler(cls, scheduler: Any) -> "GateMetrics":
        """Metrics with the labels of the scheduler's SGLang collector (None: metrics are off)."""
        if not getattr(scheduler, "enable_metrics", False):
            return cls(None)
        collector = getattr(scheduler, "metrics_collector", None)
        labels = getattr(collector, "labels", None)
        if not isinstance(labels, dict):
            labels = {"tp_rank": str(getattr(scheduler, "tp_rank", 0))}
        return cls({k: str(v) for k, v in labels.items()})

    def _create(self) -> Dict[str, Any]:
        from prometheus_client import Counter, Gauge  # here, in the scheduler process only

        names = list(self.labels)
        out: Dict[str, Any] = {}
        for name, doc in GAUGES.items():
            out[name] = Gauge(PREFIX + name, doc, labelnames=names, multiprocess_mode="mostrecent", registry=None)
        out["decode_steps"] = Counter(PREFIX + "decode_steps", "Decode batches run with speculation on / off",
                                      labelnames=names + ["mode"], registry=None)
        out["switches"] = Counter(PREFIX + "switches", "Speculation on<->off switches", labelnames=names, registry=None)
        out["auto_probe_steps"] = Counter(PREFIX + "auto_probe_steps", "Decode steps run as auto-threshold probes",
                                          labelnames=names, registry=None)
        out["proof_checks"] = Counter(PREFIX + "proof_checks", "Sampled run-time proofs of the gate",
                                      labelnames=names + ["proof"], registry=None)
        out["proof_mismatches"] = Counter(PREFIX + "proof_mismatches", "Sampled run-time proofs of the gate that failed",
                                          labelnames=names + ["proof"], registry=None)
        return out

    def update(self, runtime: Any) -> None:
        """Write the current state of ``runtime`` (a scheduler_hooks.GateRuntime). Never raises:
        a metrics problem must not stop the scheduler."""
        if self.labels is None:
            return
        try:
            self._update(runtime)
        except Exception:  # noqa: BLE001 - metrics are a view; the gate runs without them
            self.labels = None

    def _update(self, runtime: Any) -> None:
        if self._metrics is None:
            self._metrics = self._create()
        m, g, lab = self._metrics, runtime.gate, self.labels
        nan = float("nan")
        m["spec_enabled"].labels(**lab).set(1.0 if g.spec_enabled else 0.0)
        m["auto"].labels(**lab).set(1.0 if g.config.auto else 0.0)
        m["threshold"].labels(**lab).set(float(g.threshold) if g.threshold is not None else nan)
        m["hysteresis"].labels(**lab).set(float(g.hysteresis))
        accept = g.accept_length_recent
        m["accept_length"].labels(**lab).set(accept if accept is not None and math.isfinite(accept) else nan)
        self._count("decode_steps", g.decode_steps_on, mode="on")
        self._count("decode_steps", g.decode_steps_off, mode="off")
        self._count("switches", g.switches)
        self._count("auto_probe_steps", g.auto_probe_steps)
        for proof, (checks, mismatches) in PROOFS.items():
            self._count("proof_checks", runtime.value(checks), proof=proof)
            self._count("proof_mismatches", runtime.value(mismatches), proof=proof)

    def _count(self, name: str, total: int, **extra: str) -> None:
        """Counters only go up: add what ``total`` gained since the last update."""
        key = (name, tuple(sorted(extra.items())))
        delta = (total or 0) - self._exported.get(key, 0)
        if delta > 0:
            self._metrics[name].labels(**self.labels, **extra).inc(delta)
            self._exported[key] = total
