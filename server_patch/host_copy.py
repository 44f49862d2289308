"""Host-to-device copies that do not make the scheduler wait for the GPU.

Why: CUDA documents that a copy from pageable host memory (``torch.from_numpy(a).to("cuda")``,
``torch.tensor(list, device="cuda")``) performs "a stream sync before the copy is initiated", and
that an asynchronous one "may" (docs.nvidia.com/cuda/cuda-runtime-api/api-sync-behavior.html): the
CPU then waits for every kernel already queued on the current stream (older versions of that page,
and some reports, say small copies are staged without waiting; which holds for these sizes on the H200 is
for the next GPU run to measure, with ``SPECCONSOLE_HOST_COPY_PINNED=0`` as the other side). Inside
SGLang's overlap scheduler the current stream is the forward stream, so such a copy in a prefill's
draft stage would wait for the target prefill just launched, and the GPU would then idle while the
scheduler prepares and launches the next batch: the overlap lost at every prefill. From pinned
memory the copy is queued like a kernel (PyTorch's caching host allocator keeps the pinned block
until the copy's stream has passed it); SGLang stages its own such copies the same way in places
(``pin_memory=True`` in ``eagle_info_v2.py``, ``schedule_batch.py``). ``SPECCONSOLE_HOST_COPY_PINNED=0``
copies from pageable memory as before (measurements, and an escape hatch).
"""

from __future__ import annotations

from typing import Any, Sequence, Union

import numpy as np
import torch

from server_patch import options

ENV_SWITCH = "SPECCONSOLE_HOST_COPY_PINNED"


def to_device(values: Union[np.ndarray, Sequence[int]], device: Any, dtype: torch.dtype = torch.int64) -> torch.Tensor:
    """``values`` (a numpy array or a list, 1-D) as a ``dtype`` tensor on ``device``, without
    waiting for the GPU: staged in pinned memory on a CUDA device (unless
    ``SPECCONSOLE_HOST_COPY_PINNED=0``), a plain copy elsewhere."""
    host = torch.as_tensor(np.asarray(values), dtype=dtype)
    device = torch.device(device)
    if device.type != "cuda" or not options.switch(ENV_SWITCH, True):
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)
