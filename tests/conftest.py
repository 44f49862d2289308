"""Shared pytest setup: tests marked ``gpu`` are skipped unless a CUDA GPU and SGLang are present."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess

import pytest


def _gpu_available() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and "GPU" in out.stdout


def pytest_collection_modifyitems(config, items):
    gpu_items = [i for i in items if "gpu" in i.keywords]
    if not gpu_items:
        return
    if _gpu_available() and importlib.util.find_spec("torch") is not None:
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU (runs on the GPU machine)")
    for item in gpu_items:
        item.add_marker(skip)
