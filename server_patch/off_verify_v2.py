"""A lean verify for v2 OFF steps of all-greedy batches (``EAGLEWorkerV2``).

Why: an OFF step's verify is a 1-node tree, whose answer is the target's argmax at the one
token. SGLang 0.5.12's ``EAGLEWorkerV2.verify`` (``speculative/eagle_worker_v2.py``) still runs
the tree machinery after the target forward: ``EagleVerifyInput.sample`` (three output buffers,
``verify_tree_greedy`` over the tree's retrieve arrays), ``predict[accept_index]``, the triton
``fill_bonus_tokens`` kernel, and builds its draft input. The OFF server is CPU-bound (it
launches, the GPU waits: ``bench/results/h200-2026-12-04/README.md``), and py-spy put SGLang's
verify at 12.1 of the OFF decode step's 20.3 ms of scheduler CPU per 1,000 output tokens (fa3,
64 requests, ``bench/results/h200-2026-12-04b/``), of it 5.5 after ``prepare_for_v2_verify``.

What this verify does instead, for a batch where nothing else is asked of it (:func:`batch_reason`:
all greedy, no penalties or logit bias, no grammar, no logprobs): SGLang's own preparation and
target forward, line for line (``prepare_for_v2_verify`` on the plan stream, the buffer update
after the draft, ``forward_batch_generation(..., is_verify=True)``), then the argmax of the
logits as the drawn token (int32, what ``verify_tree_greedy`` writes for a 1-node tree), accept
lengths of 1, ``new_seq_lens = seq_lens + 1``, the ``verify_done`` event, and the result SGLang
builds.

Proof at run time (new state: the drawn tokens and accept lengths come from here): on the steps
``contract.sampled`` picks, SGLang's own ``EagleVerifyInput.sample`` runs on the same logits and
its tokens and accept lengths must equal these. A mismatch on any TP rank sends OFF steps back to
SGLang's verify for the server's life (logged as an error).

On by default (``SPECCONSOLE_OFF_LEAN_V2_VERIFY=0`` keeps SGLang's verify): oracle-exact on the
KV-sensitive pair (v2 triton, 106 checks over 10,842 steps, ``bench/results/h200-2026-12-04d/``),
109 checks, 0 mismatches under traffic on fa3 (``-04e``). Not built for hybrid / Mamba targets
(their verify updates the Mamba state).
"""

from __future__ import annotations

import collections
from typing import Any, Callable, Dict, Optional

from server_patch import options
from server_patch.proof import SampledProof

ENV_SWITCH = "SPECCONSOLE_OFF_LEAN_V2_VERIFY"


def enabled_by_env() -> bool:
    """False when ``SPECCONSOLE_OFF_LEAN_V2_VERIFY=0`` keeps SGLang's verify on v2 OFF steps."""
    return options.switch(ENV_SWITCH, True)


def server_reason(worker: Any) -> Optional[str]:
    """Why a v2 worker's OFF steps keep SGLang's verify, or None."""
    target = worker.target_worker.model_runner
    if any(getattr(target, n, None) is not None for n in ("hybrid_gdn_config", "mamba2_config")):
        return "hybrid / Mamba target model (its verify updates the Mamba state)"
    return None


def batch_reason(batch: Any) -> Optional[str]:
    """Why this OFF batch (a ``ModelWorkerBatch``) takes SGLang's verify, or None."""
    if batch.forward_mode.is_idle():
        return "idle batch"
    info = batch.sampling_info
    if not info.is_all_greedy:
        return "not all greedy"
    if getattr(info, "acc_additive_penalties", None) is not None or getattr(info, "acc_scaling_penalties", None) is not None:
        return "penalties"
    if getattr(info, "logit_bias", None) is not None:
        return "logit bias"
    if batch.has_grammar:
        return "grammar"
    if batch.return_logprob:
        return "logprobs"
    return None


def _sglang():
    """SGLang's ``GenerationBatchResult`` and ``EagleDraftInput`` (GPU machine; tests replace it)."""
    from sglang.srt.managers.scheduler import GenerationBatchResult
    from sglang.srt.speculative.eagle_info import EagleDraftInput

    return GenerationBatchResult, EagleDraftInput


class LeanVerifyV2(SampledProof):
    """The lean verify of v2 OFF steps (module docstring) and its counters: ``steps``, ``checks``,
    ``mismatches`` (this rank's), ``fallbacks`` (per reason), ``ok`` (False after a failed proof
    on any TP rank).

    Args:
        worker: the live ``EAGLEWorkerV2``.
        sampled, any_rank: as ``off_state.OffStepRunner`` (``contract.sampled``; all-reduce of a flag).
    """

    def __init__(self, worker: Any, sampled: Callable[[int], bool], any_rank: Callable[[bool], bool] = bool):
        super().__init__(any_rank)
        self.worker = worker
        self.sampled = sampled
        self.steps = 0
        self.fallbacks: Dict[str, int] = collections.Counter()

    def wrap(self, original: Callable) -> Callable:
        """A replacement for the worker's bound ``verify`` (``original``) for one OFF step."""

        def verify(batch: Any):
            why = "proof failed" if not self.ok else batch_reason(batch)
            if why is not None:
                self.fallbacks[why] += 1
                return original(batch)
            return self.run(batch)

        return verify

    def run(self, batch: Any):
        """One lean verify of the OFF ``batch`` (``ModelWorkerBatch`` whose ``spec_info`` is the
        1-node verify input); returns SGLang's ``GenerationBatchResult``. Shapes: tokens,
        accept lengths, ``new_seq_lens`` (bs,)."""
        import torch

        generation_batch_result, eagle_draft_input = _sglang()
        w = self.worker
        device_module = torch.get_device_module(w.device)
        # EAGLEWorkerV2.verify up to the target forward, as SGLang runs it
        batch.seq_lens.record_stream(device_module.current_stream())
        verify_input = batch.spec_info
        verify_input.num_tokens_per_req = w.speculative_num_steps + 1
        with w.plan_stream_ctx:
            if w.plan_stream and hasattr(w, "_draft_done_event"):
                w.plan_stream.wait_event(w._draft_done_event)
            forward_batch, can_run_cuda_graph = verify_input.prepare_for_v2_verify(
                w.req_to_token_pool, batch, w.target_worker)
        runner = w.target_worker.model_runner
        if w.plan_stream:
            device_module.current_stream().wait_stream(w.plan_stream)
            runner.attn_backend.update_verify_buffers_to_fill_after_draft(
                verify_input, runner.graph_runner.bs if can_run_cuda_graph else None)
        out = w.target_worker.forward_batch_generation(
            model_worker_batch=None, forward_batch=forward_batch, is_verify=True, skip_attn_backend_init=True)
        logits_output = out.logits_output
        # a 1-node tree's greedy verify: the root's argmax, one accepted token
        tokens = torch.argmax(logits_output.next_token_logits, dim=-1).to(torch.int32)
        accept_lens = torch.ones_like(tokens)
        new_seq_lens = batch.seq_lens + 1
        verify_done = device_module.Event()
        verify_done.record()
        self.steps += 1
        if self.sampled(self.steps):
            self._prove(batch, verify_input, logits_output, tokens)
        next_draft_input = eagle_draft_input(bonus_tokens=tokens, new_seq_lens=new_seq_lens, verify_done=verify_done)
        return generation_batch_result(
            logits_output=logits_output, next_token_ids=tokens, can_run_cuda_graph=can_run_cuda_graph,
            speculative_num_draft_tokens=w.speculative_num_draft_tokens, next_draft_input=next_draft_input,
            accept_lens=accept_lens, routed_experts_output=out.routed_experts_output,
            indexer_topk_output=out.indexer_topk_output)

    def _prove(self, batch: Any, verify_input: Any, logits_output: Any, tokens: Any) -> None:
        """SGLang's own sampling of the verify on the same logits must draw ``tokens`` and accept
        one token per request; waits for the GPU."""
        import torch

        predict, accept_lens, _ = verify_input.sample(batch, logits_output, None)
        differ = not (torch.equal(predict.to(torch.int32), tokens)
                      and bool((accept_lens == 1).all()))
        self.verdict(f"lean v2 OFF verify {self.steps}: the drawn tokens or accept lengths differ from SGLang's "
                     "verify" if differ else None, "OFF steps take SGLang's verify from now on")
