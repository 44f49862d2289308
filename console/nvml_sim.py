"""A pynvml-shaped stand-in: simulated GPUs for the demo and failure injection for tests.

:class:`SimulatedNvml` implements exactly the subset of nvidia-ml-py that :mod:`console.nvml`
calls, raising the real ``pynvml.NVMLError`` subclasses (``NVMLError(code)``) when
nvidia-ml-py is installed, so :class:`console.nvml.NvmlReader` sees what it would see on a real
machine. Nothing else in the console uses this module.

Failure injection (all per device unless noted):

* ``init_error=NVML_ERROR_LIBRARY_NOT_FOUND`` / ``..._LIB_RM_VERSION_MISMATCH`` /
  ``..._DRIVER_NOT_LOADED``: nvmlInit fails (whole panel);
* ``SimDevice(unsupported={"power", "temp", ...})``: that getter raises NotSupported;
* ``SimDevice(lost=True)``: every call on that device raises GPU_IS_LOST;
* ``SimDevice(mig=True)``: MIG mode on, utilization raises NotSupported (as on real MIG parents).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

try:  # use the real exception classes when nvidia-ml-py is installed
    import pynvml as _pynvml

    NVMLError = _pynvml.NVMLError
except ImportError:  # pragma: no cover - nvidia-ml-py is a runtime dependency

    class NVMLError(Exception):  # type: ignore[no-redef]
        """Minimal pynvml.NVMLError: ``value`` is the NVML return code."""

        def __init__(self, value: int) -> None:
            super().__init__(f"NVML error {value}")
            self.value = value


NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
NVML_DEVICE_MIG_ENABLE = 1
NVML_DEVICE_MIG_DISABLE = 0

#: the fields a SimDevice can mark unsupported
FIELDS = ("name", "util", "memory", "temp", "power", "power_limit", "sm_clock", "mig")


@dataclass
class SimDevice:
    """One simulated GPU. Values in NVML's units are derived from these (MiB, °C, W, MHz).

    ``util_pct`` None makes the GPU follow a smooth deterministic wave (the demo); a number
    freezes it (tests, snapshots).
    """

    name: str = "NVIDIA H200"
    util_pct: float | None = None
    mem_used_mib: float = 71_000.0
    mem_total_mib: float = 143_771.0
    temp_c: float = 54.0
    power_w: float = 412.0
    power_limit_w: float = 700.0
    sm_clock_mhz: float = 1980.0
    unsupported: set[str] = field(default_factory=set)
    lost: bool = False
    mig: bool = False


class SimulatedNvml:
    """A pynvml-compatible object. Pass it to ``NvmlReader(module=...)``.

    Args:
        devices: the GPUs (default: one H200).
        init_error: NVML return code nvmlInit raises, or None.
        driver_version: what nvmlSystemGetDriverVersion returns.
        seed: seed of the demo's utilization wave (deterministic).
    """

    SIMULATED = True
    NVMLError = NVMLError
    NVML_TEMPERATURE_GPU = NVML_TEMPERATURE_GPU
    NVML_CLOCK_SM = NVML_CLOCK_SM
    NVML_DEVICE_MIG_ENABLE = NVML_DEVICE_MIG_ENABLE

    def __init__(
        self,
        devices: list[SimDevice] | None = None,
        init_error: int | None = None,
        driver_version: str = "580.159.04 (simulated)",
        seed: int = 0,
    ) -> None:
        self.devices = devices if devices is not None else [SimDevice()]
        self.init_error = init_error
        self.driver_version = driver_version
        self.initialized = False
        self.calls = 0
        self._rng = random.Random(seed)
        self._t = 0

    # -- library -------------------------------------------------------------------------

    def nvmlInit(self) -> None:
        """Like pynvml: raises NVMLError(init_error) when set."""
        self.calls += 1
        if self.init_error is not None:
            raise NVMLError(self.init_error)
        self.initialized = True

    def nvmlShutdown(self) -> None:
        """Like pynvml."""
        self.initialized = False

    def _check_init(self) -> None:
        if not self.initialized:
            raise NVMLError(1)  # UNINITIALIZED

    def nvmlSystemGetDriverVersion(self) -> str:
        """Driver version string."""
        self._check_init()
        return self.driver_version

    def nvmlDeviceGetCount(self) -> int:
        """Number of devices (advances the demo's utilization wave)."""
        self._check_init()
        self.calls += 1
        self._t += 1
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        """Handle = index; GPU_IS_LOST for a lost device."""
        self._check_init()
        if not 0 <= index < len(self.devices):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        if self.devices[index].lost:
            raise NVMLError(NVML_ERROR_GPU_IS_LOST)
        return index

    # -- device getters ------------------------------------------------------------------

    def _dev(self, handle: int, fieldname: str) -> SimDevice:
        self._check_init()
        self.calls += 1
        dev = self.devices[handle]
        if dev.lost:
            raise NVMLError(NVML_ERROR_GPU_IS_LOST)
        if fieldname in dev.unsupported:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return dev

    def _util(self, handle: int, dev: SimDevice) -> float:
        if dev.util_pct is not None:
            return dev.util_pct
        # smooth wave plus a little seeded noise: looks alive, stays reproducible
        base = 55 + 40 * math.sin(self._t / 9.0 + handle)
        return max(0.0, min(100.0, base + self._rng.uniform(-4, 4)))

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        """A stable made-up UUID per simulated device."""
        return f"GPU-5e1f0000-0000-0000-0000-{handle:012d}"  # the demo server's node-0 ranks use these

    def nvmlDeviceGetName(self, handle: int) -> str:
        """Device name, e.g. 'NVIDIA H200'."""
        return self._dev(handle, "name").name

    def nvmlDeviceGetMigMode(self, handle: int) -> tuple[int, int]:
        """(current, pending) MIG mode."""
        dev = self._dev(handle, "mig")
        mode = NVML_DEVICE_MIG_ENABLE if dev.mig else NVML_DEVICE_MIG_DISABLE
        return (mode, mode)

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> Any:
        """Object with .gpu / .memory in %; NotSupported on MIG."""
        dev = self._dev(handle, "util")
        if dev.mig:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        u = self._util(handle, dev)
        return SimpleNamespace(gpu=int(round(u)), memory=int(round(u * 0.6)))

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        """Object with .total / .used / .free in bytes."""
        dev = self._dev(handle, "memory")
        total = int(dev.mem_total_mib * 2**20)
        used = int(dev.mem_used_mib * 2**20)
        return SimpleNamespace(total=total, used=used, free=total - used)

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int:
        """Temperature in °C."""
        dev = self._dev(handle, "temp")
        if dev.util_pct is None:
            return int(round(dev.temp_c + self._util(handle, dev) / 10))
        return int(round(dev.temp_c))

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        """Power draw in mW."""
        dev = self._dev(handle, "power")
        if dev.util_pct is None:
            return int((dev.power_w * 0.5 + dev.power_w * self._util(handle, dev) / 100) * 1000)
        return int(dev.power_w * 1000)

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: int) -> int:
        """Power limit in mW."""
        return int(self._dev(handle, "power_limit").power_limit_w * 1000)

    def nvmlDeviceGetPowerManagementLimit(self, handle: int) -> int:
        """Power limit in mW."""
        return int(self._dev(handle, "power_limit").power_limit_w * 1000)

    def nvmlDeviceGetClockInfo(self, handle: int, clock_type: int) -> int:
        """SM clock in MHz."""
        return int(self._dev(handle, "sm_clock").sm_clock_mhz)
