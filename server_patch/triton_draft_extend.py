"""A mend of SGLang 0.5.12's triton attention for v1's draft extend on CUDA graphs.

The bug: ``EAGLEWorker`` (v1, ``--disable-overlap-schedule``) runs the draft extend after each
verify on only the tokens each request accepted, packed: request i holds rows
``[cumsum(num_accept_tokens)[i-1], cumsum(num_accept_tokens)[i])``, 1 to ``num_steps + 1`` of them
(``speculative/eagle_info.py`` ``verify``: ``input_ids=accept_tokens``; the graph runner copies the
packed rows into ``buffers.input_ids[:num_tokens]``, ``eagle_draft_extend_cuda_graph_runner.py``
``replay``). The eager path lays the queries out that way (``EagleDraftExtendInput
.generate_attn_arg_prefill``: ``qo_indptr[1:] = cumsum(num_accept_tokens)``), and so does
FlashAttention's graph path (``cu_seqlens_q`` from ``num_accept_tokens``). But
``TritonAttnBackend.init_forward_metadata_replay_cuda_graph`` (``layers/attention/
triton_backend.py``, the ``is_draft_extend(include_v2=True)`` branch) writes
``qo_indptr = arange(0, bs * (num_steps + 1) + 1, num_steps + 1)``: a fixed stride, right only for
v2 (which extends every drafted token). With bs > 1 and a request that accepted fewer than
``num_steps + 1`` tokens, the draft's attention reads the queries of the wrong requests with the
wrong causal offsets; its hidden state and top-k are wrong, the next drafts are rejected, every
request then accepts 1 token, and the layout stays wrong. Outputs stay right (the K/V are stored
row by row before attention and the target verifies every token); speculation is lost.

Seen on the H200 (``bench/results/h200-2026-12-04c/``, and in every v1 triton run on the
KV-sensitive pair since 2026-12-02): accept length 1.30-1.36 where fa3 and flashinfer v1 servers,
v2 and the oracle's trace give 2.82, with 2.1x the oracle's verifies. Upstream fixed the same
stride for v2 with topk > 1 (sgl-project/sglang PR 27545, not in 0.5.12); v1 keeps it.

The mend, an AFTER hook on that method: for ``DRAFT_EXTEND`` (v1 only; not ``DRAFT_EXTEND_V2``)
with ``spec_info.num_accept_tokens``, ``qo_indptr[1:bs+1] = cumsum(num_accept_tokens[:bs])``
in the backend's own buffer (the one the captured kernels read). Padded requests carry the runner's
``num_steps + 1`` (its fill), so the total stays <= ``bs * (num_steps + 1)``, the rows the graph
has; each request's rows stay <= the captured ``max_extend_len``. The KV indices are SGLang's,
as the eager path builds them. ``SPECCONSOLE_TRITON_DRAFT_EXTEND_FIX=0`` leaves SGLang's layout.
Registered wherever the plugin is installed, with or without the gate (the bug is SGLang's), in the
scheduler processes only.
"""

from __future__ import annotations

import logging
import multiprocessing
from typing import Any, Callable, Iterable, Optional, Tuple

from server_patch import options

logger = logging.getLogger("server_patch.spec_gate")

TARGET = "sglang.srt.layers.attention.triton_backend.TritonAttnBackend.init_forward_metadata_replay_cuda_graph"
ENV_SWITCH = "SPECCONSOLE_TRITON_DRAFT_EXTEND_FIX"
#: positions of the replay method's parameters after ``self`` (SGLang 0.5.12; pinned in tests)
_BS, _FORWARD_MODE, _SPEC_INFO = 0, 5, 6


def enabled_by_env() -> bool:
    """False when ``SPECCONSOLE_TRITON_DRAFT_EXTEND_FIX=0`` keeps SGLang's fixed-stride layout."""
    return options.switch(ENV_SWITCH, True)


def _arg(args: tuple, kwargs: dict, name: str, index: int) -> Any:
    return kwargs[name] if name in kwargs else (args[index] if len(args) > index else None)


class PackedQueries:
    """The AFTER hook (``fn(result, backend, *args, **kwargs)``): rewrites a v1 draft extend's
    ``qo_indptr`` to the packed layout (module docstring); counts the replays it mended
    (``mended``) and logs the first."""

    def __init__(self) -> None:
        self.mended = 0

    def __call__(self, result: Any, backend: Any, *args: Any, **kwargs: Any) -> None:
        mode = _arg(args, kwargs, "forward_mode", _FORWARD_MODE)
        if mode is None or not mode.is_draft_extend() or mode.is_draft_extend_v2():
            return None
        accepted = getattr(_arg(args, kwargs, "spec_info", _SPEC_INFO), "num_accept_tokens", None)
        bs = int(_arg(args, kwargs, "bs", _BS))
        if accepted is None or accepted.numel() < bs:  # (the runner hands over bs counts, padded)
            return None
        import torch

        torch.cumsum(accepted[:bs], dim=0, dtype=backend.qo_indptr.dtype, out=backend.qo_indptr[1:bs + 1])
        if self.mended == 0:
            logger.info("spec_gate: v1 draft extend on triton CUDA graphs: queries packed per request "
                        "(SGLang 0.5.12 lays them out at a fixed stride; %s=0 keeps it)", ENV_SWITCH)
        self.mended += 1
        return None


#: the hook this process registered (its ``mended`` count), None when switched off or not registered
MEND: "PackedQueries | None" = None


def register(registry: Any, hook_type: Any, parent_process: Optional[Callable[[], Any]] = None) -> bool:
    """Register the mend unless switched off; returns whether it did. Only in SGLang's child
    processes (the schedulers, where attention runs): in the main process, which loads plugins
    before it has parsed its arguments, hooking would import the triton backend for nothing."""
    global MEND
    if not enabled_by_env() or (parent_process or multiprocessing.parent_process)() is None:
        return False
    MEND = PackedQueries()
    registry.register(TARGET, MEND, hook_type.AFTER)
    return True


def startup_line(spec_version: str, attention_backend: Optional[str], cuda_graph: bool,
                 patched: Callable[[], Iterable[str]]) -> Optional[Tuple[int, str]]:
    """``(log level, line)`` a gate server logs at start-up about the mend, for a v1 server on
    triton with CUDA graphs only (None elsewhere): applied, switched off, or registered but not
    applied (SGLang's ``HookRegistry`` only logs a target it could not patch; ``patched()``: the
    targets it hooked, asked only where the mend matters)."""
    if spec_version != "v1" or attention_backend != "triton" or not cuda_graph:
        return None
    if not enabled_by_env():
        return logging.WARNING, (f"spec_gate: {ENV_SWITCH}=0: v1's draft extend on triton CUDA graphs keeps "
                                 "SGLang's fixed query stride (its drafts read the wrong rows at batch > 1)")
    if TARGET not in patched():
        return logging.ERROR, (f"spec_gate: the mend of v1's draft extend on triton CUDA graphs was not applied "
                               f"({TARGET} not hooked): drafts read the wrong rows at batch > 1")
    return logging.INFO, "spec_gate: v1 draft extend on triton CUDA graphs: queries packed per request (SGLang's fixed stride mended)"
