"""The only module that talks to NVML (nvidia-ml-py, imported as ``pynvml``).

Modelled on nvitop's ``api/libnvml.py``: every pynvml call goes through :meth:`NvmlReader._call`,
which turns "this GPU/driver does not have that" errors (NotSupported, FunctionNotFound,
NotFound, NoData, NoPermission on one field, a binding without the function) into ``None`` — the
widgets render ``n/a`` — and classifies the failures that matter to an operator:

* the library is missing (no driver / no ``libnvidia-ml.so``, or nvidia-ml-py not installed),
* the driver and library versions differ (driver updated without reboot),
* the kernel driver is not loaded,
* one GPU is lost (fell off the bus): that row says so and the other rows keep updating.

:meth:`NvmlReader.read` never raises, so the console keeps running whatever NVML does.
The pynvml module is injectable (``NvmlReader(module=fake)``) for tests and for the demo's
simulated GPU (:mod:`console.nvml_sim`).

Calls block (NVML can take tens of ms, more on a sick GPU); the app runs :meth:`read` in a
thread worker, never on the UI thread.
"""

from __future__ import annotations

import importlib
import threading
import time
from typing import Any, Callable

from console import state as st
from console.gpu_sources import short_name

# NVML return codes (stable across NVML versions; pynvml exposes the same numbers).
_NOT_SUPPORTED = 3
_NO_PERMISSION = 4
_NOT_FOUND = 6
_DRIVER_NOT_LOADED = 9
_LIBRARY_NOT_FOUND = 12
_FUNCTION_NOT_FOUND = 13
_GPU_IS_LOST = 15
_LIB_RM_VERSION_MISMATCH = 18
_NO_DATA = 21
_ARGUMENT_VERSION_MISMATCH = 25
_DEPRECATED = 26
_GPU_NOT_FOUND = 28

#: errors that mean "this field is not available here" -> None / n/a
_FIELD_NA = {_NOT_SUPPORTED, _NO_PERMISSION, _NOT_FOUND, _FUNCTION_NOT_FOUND, _NO_DATA, _ARGUMENT_VERSION_MISMATCH, _DEPRECATED}
#: errors that mean the GPU is gone
_GPU_GONE = {_GPU_IS_LOST, _GPU_NOT_FOUND}

_TEMPERATURE_GPU = 0  # NVML_TEMPERATURE_GPU
_CLOCK_SM = 1  # NVML_CLOCK_SM
_MIG_ENABLE = 1  # NVML_DEVICE_MIG_ENABLE

#: seconds between nvmlInit retries after an init failure
INIT_RETRY_S = 30.0


class GpuLost(Exception):
    """A per-device NVML call said GPU_IS_LOST / GPU_NOT_FOUND."""


def _error_code(exc: BaseException) -> int | None:
    """NVML return code of a pynvml error, None for anything else."""
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _is_nvml_error(module: Any, exc: BaseException) -> bool:
    base = getattr(module, "NVMLError", None)
    if isinstance(base, type) and isinstance(exc, base):
        return True
    return _error_code(exc) is not None


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def classify_init_error(exc: BaseException | None, module_missing: bool = False) -> tuple[str, str]:
    """Map an nvmlInit failure to ``(GpuPanelState.status, message for the operator)``."""
    if module_missing:
        return st.GPU_NO_LIBRARY, "nvidia-ml-py not installed (pip install nvidia-ml-py)"
    code = _error_code(exc) if exc is not None else None
    if code == _LIBRARY_NOT_FOUND:
        return st.GPU_NO_LIBRARY, "NVML library not found: no NVIDIA driver (libnvidia-ml.so) on this machine"
    if code == _LIB_RM_VERSION_MISMATCH:
        return st.GPU_DRIVER_MISMATCH, "driver/library version mismatch: driver updated without reboot? reboot or reload nvidia modules"
    if code == _DRIVER_NOT_LOADED:
        return st.GPU_NO_DRIVER, "NVIDIA kernel driver not loaded"
    if code == _NO_PERMISSION:
        return st.GPU_NO_PERMISSION, "no permission to open NVML (/dev/nvidia*)"
    return st.GPU_ERROR, f"NVML init failed: {exc}"


class NvmlReader:
    """Reads every GPU's state through pynvml; one instance per app.

    Args:
        module: a pynvml-compatible module or object (injected in tests / the demo); None
            imports ``pynvml`` on first use.
        clock: monotonic clock in seconds (injectable for tests).

    Thread-safety: :meth:`read` holds a lock, so two threads never call NVML at once.
    """

    def __init__(self, module: Any = None, clock: Callable[[], float] = time.monotonic) -> None:
        self._module: Any = module
        self._clock = clock
        self._lock = threading.Lock()
        self._initialized = False
        self._init_failed: tuple[str, str] | None = None
        self._next_init = 0.0
        self._handles: dict[int, Any] = {}
        self._driver: str | None = None
        self.simulated = bool(getattr(module, "SIMULATED", False))

    # -- internals -------------------------------------------------------------------------

    def _load_module(self) -> Any:
        if self._module is None:
            self._module = importlib.import_module("pynvml")
        return self._module

    def _const(self, name: str, default: int) -> int:
        return getattr(self._module, name, default)

    def _call(self, fn_name: str, *args: Any) -> Any:
        """Call ``pynvml.<fn_name>(*args)``.

        Returns:
            The result, or None when the function does not exist in this binding or NVML
            answers NotSupported / NotFound / FunctionNotFound / NoData / NoPermission.

        Raises:
            GpuLost: NVML said GPU_IS_LOST or GPU_NOT_FOUND.
            Exception: any other NVML error (the caller decides).
        """
        fn = getattr(self._module, fn_name, None)
        if fn is None:
            return None
        try:
            return fn(*args)
        except Exception as exc:  # noqa: BLE001 - we classify below
            if not _is_nvml_error(self._module, exc):
                if isinstance(exc, (AttributeError, TypeError, NotImplementedError)):
                    return None  # binding/driver API skew
                raise
            code = _error_code(exc)
            if code in _FIELD_NA:
                return None
            if code in _GPU_GONE:
                raise GpuLost(str(exc)) from exc
            raise

    def _field(self, fn_name: str, *args: Any) -> Any:
        """Like :meth:`_call` but any non-lost NVML error on one field also becomes None."""
        try:
            return self._call(fn_name, *args)
        except GpuLost:
            raise
        except Exception as exc:  # noqa: BLE001
            if _is_nvml_error(self._module, exc):
                return None
            raise

    def _init(self) -> tuple[str, str] | None:
        """nvmlInit once (retrying every INIT_RETRY_S after a failure). None on success."""
        if self._initialized:
            return None
        now = self._clock()
        if self._init_failed is not None and now < self._next_init:
            return self._init_failed
        try:
            mod = self._load_module()
        except ImportError:
            self._init_failed = classify_init_error(None, module_missing=True)
            self._next_init = now + INIT_RETRY_S
            return self._init_failed
        try:
            mod.nvmlInit()
        except Exception as exc:  # noqa: BLE001
            self._init_failed = classify_init_error(exc)
            self._next_init = now + INIT_RETRY_S
            return self._init_failed
        self._initialized = True
        self._init_failed = None
        self._handles.clear()
        try:
            self._driver = _text(self._field("nvmlSystemGetDriverVersion"))
        except GpuLost:
            self._driver = None
        return None

    def _read_row(self, index: int) -> st.GpuRow:
        handle = self._handles.get(index)
        if handle is None:
            handle = self._call("nvmlDeviceGetHandleByIndex", index)
            if handle is None:
                return st.GpuRow(index=index)
            self._handles[index] = handle
        name = short_name(_text(self._field("nvmlDeviceGetName", handle)))
        uuid = _text(self._field("nvmlDeviceGetUUID", handle))
        mig = False
        mode = self._field("nvmlDeviceGetMigMode", handle)
        if isinstance(mode, (tuple, list)) and mode:
            mig = mode[0] == self._const("NVML_DEVICE_MIG_ENABLE", _MIG_ENABLE)
        util = self._field("nvmlDeviceGetUtilizationRates", handle)
        util_pct = float(util.gpu) if util is not None and getattr(util, "gpu", None) is not None else None
        mem = self._field("nvmlDeviceGetMemoryInfo", handle)
        mem_used = mem_total = None
        if mem is not None:
            if getattr(mem, "used", None) is not None:
                mem_used = mem.used / 2**20
            if getattr(mem, "total", None) is not None:
                mem_total = mem.total / 2**20
        temp = self._field("nvmlDeviceGetTemperature", handle, self._const("NVML_TEMPERATURE_GPU", _TEMPERATURE_GPU))
        power = self._field("nvmlDeviceGetPowerUsage", handle)  # mW
        limit = self._field("nvmlDeviceGetEnforcedPowerLimit", handle)  # mW
        if limit is None:
            limit = self._field("nvmlDeviceGetPowerManagementLimit", handle)
        clock = self._field("nvmlDeviceGetClockInfo", handle, self._const("NVML_CLOCK_SM", _CLOCK_SM))
        return st.GpuRow(
            index=index,
            name=name,
            util_pct=util_pct,
            mem_used_mib=mem_used,
            mem_total_mib=mem_total,
            temp_c=float(temp) if temp is not None else None,
            power_w=power / 1000.0 if power is not None else None,
            power_limit_w=limit / 1000.0 if limit is not None else None,
            sm_clock_mhz=float(clock) if clock is not None else None,
            mig=mig,
            uuid=uuid,
        )

    # -- public ----------------------------------------------------------------------------

    def read(self) -> st.GpuPanelState:
        """One NVML sweep over all GPUs. Never raises.

        Returns:
            A :class:`console.state.GpuPanelState`: ``ok`` with one row per GPU (lost GPUs
            flagged ``lost=True``), or a failure status with a message when NVML itself
            cannot be used (library not found, driver/library mismatch, ...).
        """
        with self._lock:
            failed = self._init()
            if failed is not None:
                status, message = failed
                return st.GpuPanelState(status=status, message=message, simulated=self.simulated)
            try:
                count = self._call("nvmlDeviceGetCount")
            except Exception as exc:  # noqa: BLE001
                code = _error_code(exc)
                if code in (_LIB_RM_VERSION_MISMATCH, _DRIVER_NOT_LOADED, _LIBRARY_NOT_FOUND):
                    self._initialized = False
                    self._init_failed = classify_init_error(exc)
                    self._next_init = self._clock() + INIT_RETRY_S
                    status, message = self._init_failed
                    return st.GpuPanelState(status=status, message=message, simulated=self.simulated)
                return st.GpuPanelState(status=st.GPU_ERROR, message=f"nvmlDeviceGetCount failed: {exc}", simulated=self.simulated)
            if not count:
                return st.GpuPanelState(status=st.GPU_NONE, message="NVML sees no GPU", driver_version=self._driver, simulated=self.simulated)
            rows = []
            for i in range(int(count)):
                try:
                    rows.append(self._read_row(i))
                except GpuLost:
                    self._handles.pop(i, None)
                    rows.append(st.GpuRow(index=i, lost=True))
                except Exception:  # noqa: BLE001 - one bad GPU must not hide the others
                    self._handles.pop(i, None)
                    rows.append(st.GpuRow(index=i))
            return st.GpuPanelState(
                status=st.GPU_OK, message="", driver_version=self._driver, rows=tuple(rows), simulated=self.simulated
            )

    def close(self) -> None:
        """nvmlShutdown if initialized (errors ignored)."""
        with self._lock:
            if self._initialized:
                try:
                    self._module.nvmlShutdown()
                except Exception:  # noqa: BLE001
                    pass
                self._initialized = False

