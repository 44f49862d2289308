"""Build the kernels of a sampled speculative verify before the server serves.

Why: a speculative verify of a batch that is not all greedy (temperature > 0) renormalises the
target's probabilities with ``sgl_kernel.top_k_renorm_prob`` / ``top_p_renorm_prob`` (SGLang
0.5.12: v1 ``speculative/eagle_info.py:353-365``, v2 ``eagle_info_v2.py:419-430``), which call
FlashInfer's sampling module. Without FlashInfer's prebuilt JIT cache that module is compiled
(nvcc) at its first call, inside the scheduler's loop, under a file lock that every server on the
machine shares: on the H200 on 2026-12-03 a v2 server's scheduler sat in
``JitSpec.build_and_load`` from ``top_k_renorm_probs`` for ~4 minutes (SGLang's soft watchdog's
py-spy dumps, ``bench/results/h200-2026-12-03/``), and every running request waited with it.
SGLang's own warm-up request is greedy, so it never reaches these kernels. This happens with or
without the gate (OFF steps run the same verify), but it is the gate's proofs that found it, and a
scheduler that stops for minutes on the first sampled request is what an operator must not see.

So the gate calls both kernels once on a tiny tensor right after the model worker is built (before
``/health`` answers): the compile, when there is one, happens at start-up and is logged with its
duration; with the cache present it costs milliseconds. ``SPECCONSOLE_WARM_SAMPLING=0`` skips it.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Optional, Tuple

from server_patch import options

ENV_SWITCH = "SPECCONSOLE_WARM_SAMPLING"

logger = logging.getLogger("server_patch.spec_gate")


def enabled_by_env() -> bool:
    """False when ``SPECCONSOLE_WARM_SAMPLING=0`` asks to skip the warm-up."""
    return options.switch(ENV_SWITCH, True)


def _kernels() -> Optional[Tuple[Callable[..., Any], Callable[..., Any]]]:
    try:
        from sgl_kernel import top_k_renorm_prob, top_p_renorm_prob
    except ImportError:  # not a CUDA build of SGLang: the verify does not use them either
        return None
    return top_k_renorm_prob, top_p_renorm_prob


def warm_verify_sampling(device: Any, kernels: Optional[Tuple[Callable[..., Any], Callable[..., Any]]] = None,
                         clock: Callable[[], float] = time.perf_counter) -> Optional[float]:
    """Run the sampled verify's renormalisation kernels once on ``device``; return the seconds it took.

    The call has the verify's dtypes: probabilities (1, 8) float32, ``top_k`` (1,) int32,
    ``top_p`` (1,) float32. Returns None (and logs why) when the kernels are not there, the warm-up
    is switched off, or the call fails: a failed warm-up never stops the server, the first sampled
    request then builds the kernels as SGLang would.

    Args:
        device: the scheduler's CUDA device (``torch.device`` or ``"cuda:N"``).
        kernels: ``(top_k_renorm_prob, top_p_renorm_prob)``; default: ``sgl_kernel``'s.
        clock: seconds, monotonic (tests pass their own).
    """
    if not enabled_by_env():
        logger.info("spec_gate: sampling kernels not warmed (%s=0): the first sampled request builds them", ENV_SWITCH)
        return None
    kernels = kernels or _kernels()
    if kernels is None:
        return None
    top_k_renorm, top_p_renorm = kernels
    import torch

    t0 = clock()
    try:
        probs = torch.full((1, 8), 0.125, dtype=torch.float32, device=device)
        probs = top_k_renorm(probs, torch.tensor([4], dtype=torch.int32, device=device))
        top_p_renorm(probs, torch.tensor([0.9], dtype=torch.float32, device=device))
        if torch.cuda.is_available():
            torch.cuda.synchronize(device)
    except Exception as exc:  # noqa: BLE001 - a warm-up must not stop a server that would run without it
        logger.warning("spec_gate: warming the sampled verify's kernels failed (%s: %s); the first sampled "
                       "request builds them", type(exc).__name__, exc)
        return None
    seconds = clock() - t0
    logger.info("spec_gate: sampled verify kernels (top-k / top-p renorm) ready in %.1f s%s", seconds,
                " (built now: FlashInfer's JIT cache had no copy)" if seconds >= 1.0 else "")
    return seconds
