"""server_patch.sampling_warmup: the sampled verify's kernels run once at start-up, never stop a server."""

from __future__ import annotations

import logging

import torch

from server_patch import sampling_warmup as sw


def _clock(*times):
    it = iter(times)
    return lambda: next(it)


def test_both_kernels_run_once_with_the_verify_dtypes_and_the_build_time_is_logged(caplog):
    calls = []

    def top_k(probs, k):
        calls.append(("k", probs.shape, probs.dtype, k.dtype, k.tolist()))
        return probs

    def top_p(probs, p):
        calls.append(("p", probs.shape, probs.dtype, p.dtype))
        return probs

    with caplog.at_level(logging.INFO, logger="server_patch.spec_gate"):
        s = sw.warm_verify_sampling("cpu", kernels=(top_k, top_p), clock=_clock(10.0, 84.5))
    assert s == 74.5
    assert calls == [("k", (1, 8), torch.float32, torch.int32, [4]), ("p", (1, 8), torch.float32, torch.float32)]
    assert "ready in 74.5 s (built now" in caplog.text


def test_a_failing_kernel_is_logged_and_the_server_goes_on(caplog):
    def broken(*_):
        raise RuntimeError("nvcc not found")

    with caplog.at_level(logging.WARNING, logger="server_patch.spec_gate"):
        assert sw.warm_verify_sampling("cpu", kernels=(broken, broken)) is None
    assert "nvcc not found" in caplog.text and "first sampled request builds them" in caplog.text


def test_switched_off_or_without_sgl_kernel_nothing_runs(monkeypatch):
    ran = []
    monkeypatch.setenv(sw.ENV_SWITCH, "0")
    assert sw.warm_verify_sampling("cpu", kernels=(ran.append, ran.append)) is None and ran == []
    monkeypatch.delenv(sw.ENV_SWITCH)
    monkeypatch.setattr(sw, "_kernels", lambda: None)
    assert sw.warm_verify_sampling("cpu") is None
