"""The EAGLE target's prefill on SGLang's piecewise CUDA graph (SGLang 0.5.12).

Why: every prefill of an EAGLE/EAGLE-3 server asks the target for all positions' hidden states
(``CaptureHiddenMode.FULL``: the draft's prefill extend reads them), and the piecewise CUDA graph
runner (PCG) rejects any batch whose mode differs from the one it was built with (``NULL``:
``model_executor/piecewise_cuda_graph_runner.py:227,470``). So on a speculative server every
target prefill runs eagerly, while the same target without speculation replays its PCG: a cost
paid on every prefill, whether speculation is on or off, that a server without speculation does
not pay (upstream: sgl-project/sglang PR 25568, "PCG silently bypassed for EAGLE speculative
decoding"; PR 28809 captures the EAGLE target's prefill graph at FULL in later releases).

The mode check is stricter than the graph: only the target's inner model (``model.model``,
``piecewise_cuda_graph_runner.py:314-330``) is compiled and captured, and it returns the EAGLE-3
aux hidden states whatever the batch's mode (``models/llama.py:392-417``; the layers to capture
are set before any graph is captured, ``model_runner.py:897``), while the logits processor that
turns them into ``hidden_states`` per the live mode runs eagerly around the replay
(``piecewise_cuda_graph_runner.py:815-860``). SGLang itself replays NULL-captured graphs in FULL
mode under ``--enable-return-hidden-states`` (line 231). So :func:`enable` sets the target PCG's
mode to FULL, and the target's prefills replay the graph.

Proof at run time (:class:`PrefillGraphCheck`): on sampled prefills (the contract's rule) the
eager forward runs right after the replay on the same batch and its result is returned (it
rewrites the same KV cache slots with the eager values); the replay's logits and hidden states
must agree with it within ``RTOL`` of their largest magnitude (not bit for bit: the graph runs at
a padded token count, so GEMMs may pick other kernels). A mismatch, or a replay without hidden
states, turns the graph off for the target's prefills for the rest of the server's life (logged
as an error), which is SGLang's own behaviour.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Callable, Optional

from server_patch import options, proof

logger = logging.getLogger("server_patch.spec_gate")

#: "0" keeps SGLang's eager target prefill on a speculative server (escape hatch, measurements)
ENV_SWITCH = "SPECCONSOLE_TARGET_PREFILL_GRAPH"
#: relative tolerance of the sampled check: |graph - eager| <= RTOL * max|eager| per tensor
RTOL = 0.02
ON = "piecewise-cuda-graph"
OFF = "eager"
DISAGREED = "the graph disagreed with the eager forward on a sampled prefill"


def unavailable_reason(model_runner: Any, environ=os.environ) -> Optional[str]:
    """Why the target's prefills cannot replay its piecewise CUDA graph here, or None if they can.

    ``model_runner`` is the target worker's SGLang ``ModelRunner``."""
    if not options.switch(ENV_SWITCH, True, environ):
        return f"{ENV_SWITCH}=0"
    pcg = getattr(model_runner, "piecewise_cuda_graph_runner", None)
    if pcg is None:
        return "no piecewise CUDA graph on the target (disabled or not captured)"
    if type(pcg).__name__ != "PiecewiseCudaGraphRunner":
        return f"prefill graph runner {type(pcg).__name__} is not PiecewiseCudaGraphRunner"
    return None


class EagerPrefill:
    """The target's prefills stay eager (``target_prefill_reason`` says why): the ``spec_gate``
    fields of :class:`PrefillGraphCheck` for a server without it."""

    target_prefill = OFF
    target_prefill_graph_replays = target_prefill_checks = target_prefill_mismatches = 0

    def __init__(self, reason: str) -> None:
        self.target_prefill_reason = reason


class PrefillGraphCheck:
    """Wraps the target PCG's ``replay``: counts replays, checks sampled ones against the eager
    forward, and turns the graph off for good on a mismatch.

    Args:
        model_runner: the target's SGLang ``ModelRunner`` (its PCG gets the FULL mode).
        sampled: ``sampled(n)`` is True if the n-th replay (from 1) is checked.
        full_mode: SGLang's ``CaptureHiddenMode.FULL``; ``null_mode`` the mode it had before.
        any_rank: ``any_rank(flag)`` is True on every TP rank when some rank passed True (graph and
            eager prefills may issue different collectives, so all ranks turn the graph off together;
            every rank runs the same prefills, so the sampled checks meet).
    """

    def __init__(self, model_runner: Any, sampled: Callable[[int], bool], full_mode: Any, null_mode: Any,
                 any_rank: Callable[[bool], bool] = bool):
        self.model_runner = model_runner
        self.pcg = model_runner.piecewise_cuda_graph_runner
        self.sampled = sampled
        self.any_rank = any_rank
        self.null_mode = null_mode
        self.replays = 0
        self.checks = 0
        self.mismatches = 0
        self.state = ON
        self._replay = self.pcg.replay
        self.pcg.replay = self.replay
        self.pcg.capture_hidden_mode = full_mode

    # -- the spec_gate fields (contract.SPEC_GATE_FIELDS), read by name like the OFF-step runner's

    @property
    def target_prefill(self) -> str:
        return self.state

    @property
    def target_prefill_reason(self) -> Optional[str]:
        return None if self.state == ON else DISAGREED

    @property
    def target_prefill_graph_replays(self) -> int:
        return self.replays

    @property
    def target_prefill_checks(self) -> int:
        return self.checks

    @property
    def target_prefill_mismatches(self) -> int:
        return self.mismatches

    def replay(self, forward_batch: Any, **kwargs: Any) -> Any:
        """The PCG replay of ``forward_batch``; on sampled replays, the checked eager result."""
        out = self._replay(forward_batch, **kwargs)
        if self.state != ON or not forward_batch.capture_hidden_mode.need_capture():
            return out
        self.replays += 1
        if not self.sampled(self.replays):
            return out
        self.checks += 1
        proof.note_check()
        graph_logits = out.next_token_logits.clone()
        graph_hidden = None if out.hidden_states is None else out.hidden_states.clone()
        eager = self.eager_forward(forward_batch, **kwargs)
        why = mismatch(graph_logits, graph_hidden, eager.next_token_logits, eager.hidden_states)
        if why is not None:
            self.mismatches += 1
        if self.any_rank(why is not None):
            self.state = OFF
            self.pcg.capture_hidden_mode = self.null_mode
            logger.error("spec_gate: %s (%s); target prefills run eagerly from now on", DISAGREED,
                         why or "on another TP rank")
        return eager

    def eager_forward(self, forward_batch: Any, **kwargs: Any) -> Any:
        """What ``ModelRunner.forward_extend`` runs when no graph can (``model_runner.py:3219-3239``)."""
        runner = self.model_runner
        runner.attn_backend.init_forward_metadata(forward_batch)
        return runner.model.forward(forward_batch.input_ids, forward_batch.positions, forward_batch, **kwargs)


def mismatch(graph_logits: Any, graph_hidden: Any, eager_logits: Any, eager_hidden: Any) -> Optional[str]:
    """Why the replay's ``[tokens, vocab]`` logits / ``[tokens, hidden]`` states differ from the eager
    ones beyond ``RTOL`` (or have another shape, or lack hidden states), or None if they agree."""
    pairs = (("logits", graph_logits, eager_logits), ("hidden states", graph_hidden, eager_hidden))
    for name, got, want in pairs:
        if want is None:
            continue
        if got is None:
            return f"no {name} from the graph"
        if tuple(got.shape) != tuple(want.shape):
            return f"{name} shape {tuple(got.shape)} != {tuple(want.shape)}"
        scale = float(want.float().abs().max())
        diff = float((got.float() - want.float()).abs().max())
        if diff > RTOL * max(scale, 1e-6):
            return f"{name} differ by {diff:.4g} (largest magnitude {scale:.4g})"
    return None


def enable(model_runner: Any, sampled: Callable[[int], bool],
           any_rank: Callable[[bool], bool] = bool) -> "PrefillGraphCheck | EagerPrefill":
    """Let the EAGLE target's prefills replay its piecewise CUDA graph, with the sampled check.

    Returns the check, or :class:`EagerPrefill` with the reason of :func:`unavailable_reason`
    (logged); either one's ``target_prefill*`` attributes are the ``spec_gate`` fields."""
    reason = unavailable_reason(model_runner)
    if reason is not None:
        logger.info("spec_gate: target prefill stays eager: %s", reason)
        return EagerPrefill(reason)
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode

    previous = model_runner.piecewise_cuda_graph_runner.capture_hidden_mode
    check = PrefillGraphCheck(model_runner, sampled, CaptureHiddenMode.FULL, previous, any_rank)
    logger.info("spec_gate: target prefill = piecewise CUDA graph with all hidden states (sampled check "
                "against the eager forward; %s=0 keeps it eager)", ENV_SWITCH)
    return check
