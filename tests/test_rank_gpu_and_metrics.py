"""server_patch/rank_gpu.py (each rank's own GPU, read by NVML in its scheduler) and
server_patch/metrics.py (the gate on SGLang's /metrics), on CPU with fakes."""

from __future__ import annotations

import types

import pytest

from server_patch import metrics, rank_gpu


class FakeNvml:
    """pynvml as far as RankGpu uses it: one H200 found by UUID; power not supported."""

    NVML_TEMPERATURE_GPU, NVML_CLOCK_SM = 0, 1

    def __init__(self, lost: bool = False) -> None:
        self.inits, self.lost = 0, lost

    def nvmlInit(self):
        self.inits += 1

    def nvmlDeviceGetHandleByUUID(self, uuid):
        assert uuid == "GPU-1234"
        return "h"

    def nvmlDeviceGetIndex(self, h):
        return 3

    def nvmlDeviceGetName(self, h):
        return b"NVIDIA H200"

    def nvmlDeviceGetUtilizationRates(self, h):
        if self.lost:
            raise RuntimeError("GPU is lost")
        return types.SimpleNamespace(gpu=87)

    def nvmlDeviceGetMemoryInfo(self, h):
        return types.SimpleNamespace(used=70 * 2**30, total=141 * 2**30)

    def nvmlDeviceGetTemperature(self, h, sensor):
        return 61

    def nvmlDeviceGetPowerUsage(self, h):
        raise RuntimeError("Not Supported")

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return 700_000

    def nvmlDeviceGetClockInfo(self, h, kind):
        return 1980


def test_a_rank_reports_its_own_gpu_by_uuid_with_n_a_for_unsupported_fields():
    gpu = rank_gpu.RankGpu(gpu_id=0, uuid="1234", nvml_index=None, node_rank=1, module=FakeNvml())
    assert gpu.report()["error"] == "not read yet"
    gpu.read_once()
    r = gpu.report()
    assert (r["uuid"], r["nvml_index"], r["name"], r["node_rank"]) == ("GPU-1234", 3, "NVIDIA H200", 1)
    assert (r["util_pct"], r["mem_used_mib"], r["temp_c"], r["power_w"], r["power_limit_w"]) == (87.0, 70 * 1024, 61.0, None, 700.0)
    assert r["error"] is None and r["read_ms"] is not None and r["host"]


def test_a_lost_gpu_or_missing_nvml_is_a_state_never_an_exception():
    lost = rank_gpu.RankGpu(0, "1234", None, module=FakeNvml(lost=True))
    lost.read_once()
    assert "GPU is lost" in lost.report()["error"]
    none = rank_gpu.RankGpu(0, None, None, module=FakeNvml())
    none.read_once()
    assert "no UUID or NVML index" in none.report()["error"]


def test_the_reading_thread_runs_off_the_scheduler_and_stops():
    gpu = rank_gpu.RankGpu(0, "1234", None, module=FakeNvml())
    gpu.start()
    gpu._thread.join(0.2)
    gpu.stop()
    gpu._thread.join(2)
    assert not gpu._thread.is_alive() and gpu.reads >= 1


def test_metrics_are_a_no_op_without_enable_metrics():
    m = metrics.GateMetrics.for_scheduler(types.SimpleNamespace(enable_metrics=False))
    m.update(object())  # nothing to write, nothing raised
    assert m.labels is None


CHILD = """
import types
from server_patch import metrics
from server_patch.contract import GateConfig
from server_patch.gate import SpecGate

labels = {"model_name": "m", "engine_type": "unified", "tp_rank": "0", "pp_rank": "0", "moe_ep_rank": "0"}
sched = types.SimpleNamespace(enable_metrics=True, metrics_collector=types.SimpleNamespace(labels=labels))
m = metrics.GateMetrics.for_scheduler(sched)
gate = SpecGate(GateConfig(4, 1))
for bs in (2, 8, 8, 2):
    gate.decide(bs)
values = {"off_attention_checks": 5, "off_attention_mismatches": 0, "off_kv_only_checks": 3,
          "off_kv_only_mismatches": 0, "off_early_seq_lens_checks": 2, "off_early_seq_lens_mismatches": 0,
          "target_prefill_checks": 7, "target_prefill_mismatches": 0}
runtime = types.SimpleNamespace(gate=gate, value=values.__getitem__)
m.update(runtime)
m.update(runtime)  # counters add only what changed
assert m.labels is not None, "the update failed"
print(gate.decode_steps_off, gate.switches)
"""


def test_metrics_follow_the_gate_with_sglangs_labels(tmp_path):
    """In a child process that has PROMETHEUS_MULTIPROC_DIR from the start, as SGLang's schedulers
    do; read back the way SGLang's /metrics reads the directory."""
    import os
    import subprocess
    import sys

    pytest.importorskip("prometheus_client")
    from prometheus_client import CollectorRegistry, generate_latest, multiprocess

    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    steps_off, switches = map(int, out.stdout.split())
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=str(tmp_path))
    text = generate_latest(registry).decode()
    assert 'sglang:spec_gate_threshold{engine_type="unified",model_name="m"' in text
    lines = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
             if line.startswith("sglang:")}

    def one(prefix: str, label: str = "") -> list:
        return [v for k, v in lines.items() if k.startswith(prefix + "{") and label in k]

    assert one("sglang:spec_gate_decode_steps_total", 'mode="off"') == [steps_off]
    assert one("sglang:spec_gate_switches_total") == [switches]
    assert one("sglang:spec_gate_proof_checks_total", 'proof="attention"') == [5.0]
    assert one("sglang:spec_gate_proof_checks_total", 'proof="target_prefill"') == [7.0]
    assert one("sglang:spec_gate_hysteresis") == [1.0] and one("sglang:spec_gate_auto") == [0.0]


def test_the_grafana_panels_name_only_metrics_the_plugin_exports():
    import json
    import re
    from pathlib import Path

    dash = json.loads((Path(__file__).resolve().parents[1] / "examples" / "grafana-spec-gate.json").read_text())
    used = {m for p in dash["panels"] for t in p["targets"] for m in re.findall(r"sglang:spec_gate_\w+", t["expr"])}
    exported = {metrics.PREFIX + n for n in metrics.GAUGES}
    exported |= {metrics.PREFIX + n + "_total" for n in ("decode_steps", "switches", "auto_probe_steps",
                                                           "proof_checks", "proof_mismatches")}
    assert used and used <= exported, used - exported
