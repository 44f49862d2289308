"""OFF steps that sample as a server without speculation does (default on v2, where it is proven).

Why: an OFF step's one-token verify samples its bonus token the speculative way. SGLang 0.5.12's
verify (v1 ``EagleVerifyInput.verify``, ``speculative/eagle_info.py:346-385``; v2
``EagleVerifyInputV2Mixin.sample``, ``eagle_info_v2.py:409-446``) renormalises top-k and then
top-p on the temperature-scaled softmax and draws with ``tree_speculative_sampling_target_only``:
``min_p`` and the per-request ``sampling_seed`` are ignored, and on v2 so are custom logit
processors. A server without speculation draws with ``Sampler._sample_from_probs``
(``layers/sampler.py``: top-p over the whole distribution, top-k, min_p, a seeded multinomial
where asked). So turning speculation off did not give an operator plain-decode sampling back.

What changes, only for an OFF step (a 1-node tree: exactly one token per request) and only when
the batch is not all greedy (the greedy path, ``verify_tree_greedy``, already equals argmax
decoding): a wrapper of the verify's sampling method notes its inputs (the logits after SGLang's
penalties, logit bias and grammar mask, which it applies in place before drawing; the batch's
``sampling_info``; the verify positions), and the tree-sampling kernel of both modules is replaced
for the step by :func:`sample_root`, which draws with the target runner's own ``Sampler`` from
``softmax(logits / temperature)`` and writes the kernel's outputs for a 1-node tree (the token at
the root, the root as the only accepted index, 0 accepted drafts). Logprobs are computed by SGLang
from the logits afterwards, as before. TP > 1: SGLang broadcasts the drawn tokens from rank 0
right after the kernel, as it does for its own draws.

Proven on the H200 on v2 at TP 1 (``bench/results/h200-2026-12-03c/``, ``bench.sampling_distribution``):
at temperature 48 / top-k 8 / top-p 0.95 the OFF steps' draws and a server without speculation's
are one distribution (chi-square p = 0.93, 64 cells, 1,000 draws each); at temperature 20 with
min_p 0.3 both drew only the one token min_p leaves, while SGLang's verify sampling put 45.6% of
its draws elsewhere (p = 2e-123). The same on v1 topk 1 (``bench/results/h200-2026-12-04/sampling-v1.json``):
p = 0.60 against a server without speculation at temperature 48; at temperature 20 with min_p 0.3
only the one token, where the verify sampling put 46.3% elsewhere (p = 7e-126). So it is the
default on ``EAGLEWorkerV2`` and on ``EAGLEWorker`` with topk 1; v1 with topk > 1 (not drawn on a
GPU) keeps SGLang's verify sampling. ``SPECCONSOLE_OFF_PLAIN_SAMPLING=1`` turns it on for every
worker, ``=0`` off for every one (SGLang's verify sampling). A ``sampling_seed``
is used by SGLang 0.5.12 only with ``--enable-deterministic-inference``
(``sampling_batch_info.py``), with or without speculation.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Callable, Iterator, Optional

from server_patch import options

ENV_SWITCH = "SPECCONSOLE_OFF_PLAIN_SAMPLING"
KERNEL_NAME = "tree_speculative_sampling_target_only"
PLAIN = "plain-decode-sampler"
SPECULATIVE = "speculative-verify"


def mode(v2: bool, topk: int = 1) -> str:
    """How OFF steps of a worker draw non-greedy tokens: :data:`PLAIN` or :data:`SPECULATIVE`.
    ``SPECCONSOLE_OFF_PLAIN_SAMPLING`` ``1`` / ``0`` decides for every worker; unset, :data:`PLAIN`
    where it was drawn on the H200 (v2, ``EAGLEWorkerV2``; v1, ``EAGLEWorker``, with ``topk`` 1) and
    :data:`SPECULATIVE` on v1 with ``topk`` > 1 (not drawn on a GPU)."""
    return PLAIN if options.switch(ENV_SWITCH, v2 or topk == 1) else SPECULATIVE


@dataclasses.dataclass
class Noted:
    """The verify's sampling inputs of the running OFF step (filled by the verify wrapper)."""

    logits: Any = None  # (bs, vocab) float, after penalties / bias / grammar mask
    sampling_info: Any = None
    positions: Any = None  # (bs,) int64: each request's bonus-token position
    custom_processors: bool = False  # the verify did not apply them (v2): the draw must


def sample_root(noted: Noted, sampler: Any, apply_custom: Optional[Callable[[Any, Any], None]] = None,
                softmax: Optional[Callable[..., Any]] = None) -> Callable[..., None]:
    """The stand-in for ``tree_speculative_sampling_target_only`` during one OFF step.

    Called with the kernel's keywords (``predicts`` (bs,) int32, ``accept_index`` (bs, steps + 1)
    int32 filled with -1, ``accept_token_num`` (bs,) int32, ``retrive_index`` (bs, 1) int64, ...);
    draws each request's token with ``sampler._sample_from_probs(probs, sampling_info, positions,
    simple)`` from ``softmax(logits / temperatures)`` of the noted logits, and writes
    ``predicts[root] = token``, ``accept_index[:, 0] = root``, ``accept_token_num = 0``.
    ``apply_custom(logits, sampling_info)``: SGLang's ``apply_custom_logit_processor`` (v2 only).

    Raises:
        RuntimeError: called without noted logits, or for a tree with more than one node (an ON
            step must never reach it).
    """
    def kernel(*, predicts, accept_index, accept_token_num, retrive_index, **_ignored) -> None:
        import torch

        if noted.logits is None or noted.sampling_info is None:
            raise RuntimeError("OFF-step sampling: the verify's logits were not noted")
        if retrive_index.shape[-1] != 1:
            raise RuntimeError(f"OFF-step sampling needs a 1-node tree, got {retrive_index.shape[-1]} nodes")
        info = noted.sampling_info
        logits = noted.logits.clone()  # SGLang computes logprobs from these afterwards
        if noted.custom_processors and apply_custom is not None and getattr(info, "has_custom_logit_processor", False):
            apply_custom(logits, info)
        probs = (softmax or torch.softmax)(logits / info.temperatures, dim=-1)
        simple = not (info.need_top_p_sampling or info.need_top_k_sampling or info.need_min_p_sampling)
        tokens = sampler._sample_from_probs(probs, info, noted.positions, simple)
        root = retrive_index[:, 0]
        predicts[root] = tokens.to(predicts.dtype)
        accept_index[:, 0] = root.to(accept_index.dtype)
        accept_token_num.zero_()

    return kernel


@contextlib.contextmanager
def plain_sampling(sampler: Any, v2: bool) -> Iterator[Noted]:
    """For the ``with`` body (one OFF step): the verify's sampling method of SGLang 0.5.12 notes
    its inputs and both modules' tree-sampling kernel is :func:`sample_root`. Yields the
    :class:`Noted` record. SGLang imported here only (the GPU machine)."""
    from sglang.srt.layers.sampler import apply_custom_logit_processor
    from sglang.srt.speculative import eagle_info, eagle_info_v2

    noted = Noted(custom_processors=v2)
    cls = eagle_info.EagleVerifyInput
    name = "sample" if v2 else "verify"
    original = getattr(cls, name)

    def noting(self, batch, logits_output, *args, **kwargs):
        noted.logits = logits_output.next_token_logits
        noted.sampling_info = batch.sampling_info
        noted.positions = self.positions
        return original(self, batch, logits_output, *args, **kwargs)

    kernel = sample_root(noted, sampler, apply_custom_logit_processor)
    modules = [m for m in (eagle_info, eagle_info_v2) if hasattr(m, KERNEL_NAME)]
    kernels = {m: getattr(m, KERNEL_NAME) for m in modules}
    setattr(cls, name, noting)
    for m in modules:
        setattr(m, KERNEL_NAME, kernel)
    try:
        yield noted
    finally:
        setattr(cls, name, original)
        for m, k in kernels.items():
            setattr(m, KERNEL_NAME, k)
