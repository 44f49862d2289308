"""NVML failure kinds, injected at the nvidia-ml-py boundary (a fake pynvml module).

The fake raises nvidia-ml-py's own exception classes (``pynvml.NVMLError(code)``), so
:class:`console.nvml.NvmlReader` sees exactly what a real driver would make it see.
"""

from __future__ import annotations

import types

import pynvml
import pytest

from console import nvml as nvml_mod
from console import state as st
from console.nvml import NvmlReader
from console.nvml_sim import SimDevice, SimulatedNvml
from console.state import ConsoleSnapshot
from console.widgets.gpu_panel import render_rows

STYLES = {k: None for k in ("header", "value", "na", "hot", "lost", "warn", "hist")}


def rendered(panel: st.GpuPanelState, width: int = 100) -> str:
    snap = ConsoleSnapshot(gpus=panel, gpu_util_history=tuple(() for _ in panel.rows))
    return render_rows(snap, width, STYLES).plain


def test_all_fields_when_supported():
    panel = NvmlReader(SimulatedNvml([SimDevice(util_pct=37, temp_c=51, power_w=312, power_limit_w=700)])).read()
    assert panel.status == st.GPU_OK and panel.driver_version.startswith("580.")
    (row,) = panel.rows
    assert row.name == "H200" and row.util_pct == 37 and row.temp_c == 51
    assert row.power_w == pytest.approx(312) and row.power_limit_w == pytest.approx(700)
    assert row.mem_total_mib == pytest.approx(143_771, rel=1e-6) and row.sm_clock_mhz == 1980
    text = rendered(panel)
    assert "37%" in text and "312/700 W" in text and "n/a" not in text


@pytest.mark.parametrize("field,attr", [
    ("power", "power_w"), ("power_limit", "power_limit_w"), ("temp", "temp_c"),
    ("sm_clock", "sm_clock_mhz"), ("util", "util_pct"), ("memory", "mem_used_mib"), ("name", "name"),
])
def test_not_supported_per_field_becomes_na(field, attr):
    fake = SimulatedNvml([SimDevice(util_pct=10, unsupported={field})])
    panel = NvmlReader(fake).read()
    assert panel.status == st.GPU_OK
    row = panel.rows[0]
    assert getattr(row, attr) is None
    others = {"util_pct", "temp_c", "power_w", "sm_clock_mhz", "mem_used_mib"} - {attr}
    if attr == "power_limit_w":
        others -= {"power_w"}
    assert all(getattr(row, o) is not None for o in others)
    assert "n/a" in rendered(panel)


def test_datacenter_gpu_without_power_and_clock_fields():
    fake = SimulatedNvml([SimDevice(util_pct=50, unsupported={"power", "power_limit", "sm_clock"})])
    text = rendered(NvmlReader(fake).read())
    assert "50%" in text and text.count("n/a") >= 2


def test_gpu_lost_marks_only_that_gpu():
    fake = SimulatedNvml([SimDevice(util_pct=20), SimDevice(util_pct=30)])
    reader = NvmlReader(fake)
    assert [r.lost for r in reader.read().rows] == [False, False]
    fake.devices[1].lost = True  # falls off the bus after startup (cached handle)
    panel = reader.read()
    assert panel.status == st.GPU_OK
    assert [r.lost for r in panel.rows] == [False, True]
    assert panel.rows[0].util_pct == 20
    assert "GPU lost" in rendered(panel)
    fake.devices[1].lost = False  # back (after a reset): read again from a fresh handle
    assert [r.lost for r in reader.read().rows] == [False, False]


def test_gpu_lost_at_handle_lookup():
    fake = SimulatedNvml([SimDevice(lost=True), SimDevice(util_pct=5)])
    panel = NvmlReader(fake).read()
    assert panel.rows[0].lost and not panel.rows[1].lost


def test_library_not_found():
    panel = NvmlReader(SimulatedNvml(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)).read()
    assert panel.status == st.GPU_NO_LIBRARY and "library not found" in panel.message
    text = rendered(panel)
    assert "NVML unavailable" in text and "keeps working" in text


def test_nvidia_ml_py_not_installed(monkeypatch):
    def no_module(name):
        raise ImportError(name)

    monkeypatch.setattr(nvml_mod.importlib, "import_module", no_module)
    panel = NvmlReader().read()
    assert panel.status == st.GPU_NO_LIBRARY and "nvidia-ml-py not installed" in panel.message


def test_driver_library_mismatch():
    panel = NvmlReader(SimulatedNvml(init_error=pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH)).read()
    assert panel.status == st.GPU_DRIVER_MISMATCH
    assert "driver/library version mismatch" in panel.message
    assert "mismatch" in rendered(panel)


def test_driver_not_loaded():
    panel = NvmlReader(SimulatedNvml(init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)).read()
    assert panel.status == st.GPU_NO_DRIVER


def test_mig_device_without_utilization():
    panel = NvmlReader(SimulatedNvml([SimDevice(mig=True)])).read()
    row = panel.rows[0]
    assert row.mig and row.util_pct is None and row.mem_used_mib is not None
    text = rendered(panel)
    assert "H200 MIG" in text and "n/a" in text


def test_binding_without_a_function_and_odd_exceptions():
    fake = SimulatedNvml([SimDevice(util_pct=1)])
    # an older nvidia-ml-py without nvmlDeviceGetMigMode, and a getter that raises TypeError
    module = types.SimpleNamespace(**{n: getattr(fake, n) for n in dir(fake) if n.startswith(("nvml", "NVML"))})
    del module.nvmlDeviceGetMigMode

    def broken(handle, clock_type):
        raise TypeError("binding/driver skew")

    module.nvmlDeviceGetClockInfo = broken
    panel = NvmlReader(module).read()
    assert panel.status == st.GPU_OK and panel.rows[0].sm_clock_mhz is None and panel.rows[0].mig is False


def test_init_failure_is_retried_but_rate_limited():
    now = [0.0]
    fake = SimulatedNvml(init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    reader = NvmlReader(fake, clock=lambda: now[0])
    assert reader.read().status == st.GPU_NO_DRIVER
    fake.init_error = None  # driver loaded now
    calls = fake.calls
    assert reader.read().status == st.GPU_NO_DRIVER and fake.calls == calls  # not retried yet
    now[0] += nvml_mod.INIT_RETRY_S + 1
    assert reader.read().status == st.GPU_OK


def test_mismatch_after_init_is_detected():
    fake = SimulatedNvml([SimDevice(util_pct=1)])
    reader = NvmlReader(fake)
    assert reader.read().status == st.GPU_OK

    def mismatch():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH)

    fake.nvmlDeviceGetCount = mismatch
    assert reader.read().status == st.GPU_DRIVER_MISMATCH


def test_real_nvml_never_raises():
    # whatever this machine has (no driver in CI; GPUs on the GPU box), read() returns a state
    panel = NvmlReader().read()
    assert panel.status in {st.GPU_OK, st.GPU_NO_LIBRARY, st.GPU_NO_DRIVER, st.GPU_DRIVER_MISMATCH,
                            st.GPU_NO_PERMISSION, st.GPU_NONE, st.GPU_ERROR}
