"""server_patch/host_copy.py: host-to-device copies staged in pinned memory on CUDA (a pageable copy
waits for every kernel queued on the stream), and the rule that the plugin makes no other kind."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import torch

from server_patch import host_copy

ROOT = Path(__file__).resolve().parents[1]


def test_values_arrive_with_the_dtype_asked_for():
    got = host_copy.to_device(np.array([3, 1, 2]), "cpu")
    assert got.dtype == torch.int64 and got.tolist() == [3, 1, 2]
    assert host_copy.to_device([0, 5], torch.device("cpu"), dtype=torch.int32).dtype == torch.int32


def test_a_cuda_copy_is_staged_in_pinned_memory_and_queued(monkeypatch):
    calls = []

    def pin_memory(self):
        calls.append("pin")
        return self

    def to(self, device, non_blocking=False):
        calls.append(("to", str(device), non_blocking))
        return self

    monkeypatch.setattr(torch.Tensor, "pin_memory", pin_memory)
    monkeypatch.setattr(torch.Tensor, "to", to)
    host_copy.to_device(np.arange(4), "cuda:1")
    assert calls == ["pin", ("to", "cuda:1", True)]
    monkeypatch.setenv(host_copy.ENV_SWITCH, "0")  # as before: from pageable memory
    calls.clear()
    host_copy.to_device(np.arange(4), "cuda:1")
    assert calls == [("to", "cuda:1", False)]


def test_the_plugin_copies_host_values_to_the_gpu_only_through_host_copy():
    """A pageable host-to-device copy on a per-step path stalls the overlap scheduler (host_copy's
    docstring); the sampling warm-up runs once before the server serves."""
    allowed = {"host_copy.py", "sampling_warmup.py"}
    pageable = re.compile(r"torch\.from_numpy\([^)]*\)\.to\(|torch\.(?:tensor|as_tensor)\([^)]*(?:device=|\)\.to\()")
    found = [f"{path.name}:{n}" for path in sorted((ROOT / "server_patch").glob("*.py")) if path.name not in allowed
             for n, line in enumerate(path.read_text().splitlines(), 1) if pageable.search(line)]
    assert found == []
