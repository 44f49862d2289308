"""Each TP rank's own GPU, read with NVML inside its scheduler process, for ``spec_gate.ranks``.

A console attached from another machine (or to a server spread over nodes) cannot see the
server's GPUs through its own NVML; each scheduler can, for the GPU it runs on. The reading is
done by a daemon thread at most once per PERIOD_S and kept; ``/server_info``'s handler only copies
the last reading, so no NVML call ever runs on the scheduler loop or the decode path. NVML calls
are ctypes calls that release the GIL while they wait on the driver.

The GPU is found by its UUID (``torch.cuda.get_device_properties(gpu_id).uuid``: correct under
any ``CUDA_VISIBLE_DEVICES``, container or device order), else by its NVML index. Every field
NVML does not support on this GPU is None (``n/a`` on screen); a failure (no NVML library,
driver mismatch, GPU lost) is reported in ``error``, never raised into the scheduler.
"""

from __future__ import annotations

import importlib
import socket
import threading
import time
from typing import Any, Callable, Dict, Optional

#: seconds between two NVML readings of a rank's GPU
PERIOD_S = 1.0


def _text(value: Any) -> Optional[str]:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value if isinstance(value, str) else None


class RankGpu:
    """This rank's GPU: identity (host, node rank, CUDA ordinal, UUID, NVML index) and the last
    NVML reading (utilization %, memory MiB, temperature °C, power and limit W, SM clock MHz).

    Args:
        gpu_id: the CUDA ordinal the scheduler runs on.
        uuid: the device UUID without or with the ``GPU-`` prefix, or None.
        nvml_index: the NVML index, or None.
        node_rank: SGLang's ``--node-rank`` (0 on one machine).
        module: a pynvml-compatible module (tests); None imports ``pynvml``.
        clock: monotonic clock in seconds (tests).
    """

    def __init__(self, gpu_id: Optional[int], uuid: Optional[str], nvml_index: Optional[int], node_rank: int = 0,
                 module: Any = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.identity = {
            "host": socket.gethostname(),
            "node_rank": node_rank,
            "gpu_id": gpu_id,
            "uuid": (uuid if uuid is None or uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"),
            "nvml_index": nvml_index,
        }
        self._module = module
        self._clock = clock
        self._handle = None
        self._lock = threading.Lock()
        self._reading: Dict[str, Any] = {"error": "not read yet"}
        self.reads = 0
        self.read_s_total = 0.0  # seconds spent in NVML calls (the cost of the report)
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def start(self) -> None:
        """Read now and then every PERIOD_S in a daemon thread."""
        self._thread = threading.Thread(target=self._run, name="spec-gate-rank-gpu", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """End the reading thread."""
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.read_once()
            self._stop.wait(PERIOD_S)

    def report(self) -> Dict[str, Any]:
        """Identity + the last reading (a copy), ``read_ms``: the mean cost of one reading (ms)."""
        with self._lock:
            reading = dict(self._reading)
        cost = round(1000 * self.read_s_total / self.reads, 3) if self.reads else None
        return {**self.identity, **reading, "read_ms": cost}

    def read_once(self) -> None:
        """One NVML reading (in the reading thread; tests call it directly)."""
        t0 = self._clock()
        try:
            reading = self._read()
        except Exception as exc:  # noqa: BLE001 - reported, never raised into the scheduler
            self._handle = None
            reading = {"error": f"{type(exc).__name__}: {exc}"}
        self.read_s_total += self._clock() - t0
        self.reads += 1
        with self._lock:
            self._reading = reading

    def _nvml(self) -> Any:
        if self._module is None:
            self._module = importlib.import_module("pynvml")
        if self._handle is None:
            self._module.nvmlInit()
            uuid, index = self.identity["uuid"], self.identity["nvml_index"]
            if uuid is not None:
                self._handle = self._module.nvmlDeviceGetHandleByUUID(uuid)
            elif index is not None:
                self._handle = self._module.nvmlDeviceGetHandleByIndex(index)
            else:
                raise RuntimeError("no UUID or NVML index for this rank's GPU")
        return self._module

    def _read(self) -> Dict[str, Any]:
        nv = self._nvml()
        h = self._handle

        def field(fn: str, *args: Any) -> Any:
            try:
                return getattr(nv, fn)(h, *args)
            except Exception as exc:  # noqa: BLE001 - NotSupported and the like: n/a
                if "GPU is lost" in str(exc) or "GpuIsLost" in type(exc).__name__:
                    raise
                return None

        util = field("nvmlDeviceGetUtilizationRates")
        mem = field("nvmlDeviceGetMemoryInfo")
        temp = field("nvmlDeviceGetTemperature", getattr(nv, "NVML_TEMPERATURE_GPU", 0))
        power = field("nvmlDeviceGetPowerUsage")  # mW
        limit = field("nvmlDeviceGetEnforcedPowerLimit")  # mW
        clock = field("nvmlDeviceGetClockInfo", getattr(nv, "NVML_CLOCK_SM", 1))
        index = field("nvmlDeviceGetIndex")
        return {
            "nvml_index": index if isinstance(index, int) else self.identity["nvml_index"],
            "name": _text(field("nvmlDeviceGetName")),
            "util_pct": float(util.gpu) if util is not None and getattr(util, "gpu", None) is not None else None,
            "mem_used_mib": mem.used / 2**20 if mem is not None else None,
            "mem_total_mib": mem.total / 2**20 if mem is not None else None,
            "temp_c": float(temp) if temp is not None else None,
            "power_w": power / 1000.0 if power is not None else None,
            "power_limit_w": limit / 1000.0 if limit is not None else None,
            "sm_clock_mhz": float(clock) if clock is not None else None,
            "error": None,
        }


def for_scheduler(scheduler: Any) -> RankGpu:
    """The :class:`RankGpu` of a scheduler process (identity from torch on its CUDA device)."""
    gpu_id = getattr(scheduler, "gpu_id", None)
    uuid = index = None
    try:
        import torch

        if gpu_id is not None:
            uuid = str(torch.cuda.get_device_properties(gpu_id).uuid)
            index = torch.cuda._get_nvml_device_index(gpu_id)  # private; the UUID is tried first
    except Exception:  # noqa: BLE001 - identity is best effort; the report says what failed
        pass
    node_rank = getattr(getattr(scheduler, "server_args", None), "node_rank", 0) or 0
    return RankGpu(gpu_id, uuid, index, node_rank=node_rank)
