"""Greedy requests against a server, checked token-for-token against the synthetic pair's oracle."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, Tuple

from bench.server_harness import generate


def make_prompts(vocab: int, n: int, length: int, seed: int) -> List[List[int]]:
    """``n`` random prompts of ``length`` word-token ids in ``[0, vocab)``."""
    rng = random.Random(seed)
    return [[rng.randrange(vocab) for _ in range(length)] for _ in range(n)]


def check_one(url: str, oracle: Any, prompt: List[int], max_new_tokens: int) -> Dict[str, Any]:
    """One greedy request; ``match`` is True iff the output ids equal the oracle's continuation."""
    return check_output(oracle, prompt, generate(url, prompt, max_new_tokens), max_new_tokens)


def check_batch(url: str, oracle: Any, prompts: List[List[int]], max_new_tokens: int) -> Tuple[bool, List[Dict[str, Any]]]:
    """``prompts`` as one batched ``/generate`` (a list of ``input_ids``): SGLang 0.5.12 hands
    pre-tokenized batches to the scheduler as one message (tokenizer_manager.py
    ``_send_batch_request``), so they are prefilled together and decode in lockstep. Returns
    (all matched, per-request results in prompt order)."""
    outs = generate(url, prompts, max_new_tokens)
    if not isinstance(outs, list) or len(outs) != len(prompts):
        raise ValueError(f"batched /generate returned {type(outs).__name__}, not {len(prompts)} outputs")
    results = [check_output(oracle, p, o, max_new_tokens) for p, o in zip(prompts, outs)]
    return all(r["match"] for r in results), results


def check_output(oracle: Any, prompt: List[int], out: Dict[str, Any], max_new_tokens: int) -> Dict[str, Any]:
    """One ``/generate`` answer against the oracle's continuation of ``prompt`` (the pi chain of its
    last token, or for a KV-sensitive pair the one of its last two): ``match``, the index of the
    first wrong token (None if all right), ``n_tokens`` and SGLang's per-request spec counters."""
    got = out.get("output_ids") or []
    want = oracle.continuation(prompt, max_new_tokens)
    first_bad = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None)
    if first_bad is None and len(got) != len(want):
        first_bad = min(len(got), len(want))
    meta = out.get("meta_info", {})
    return {
        "match": first_bad is None,
        "first_mismatch": first_bad,
        "n_tokens": len(got),
        "spec_accept_length": meta.get("spec_accept_length"),
        "spec_verify_ct": meta.get("spec_verify_ct"),
    }


def check_many(url: str, oracle: Any, prompts: List[List[int]], max_new_tokens: int,
               concurrency: int) -> Tuple[bool, List[Dict[str, Any]]]:
    """Run ``prompts`` with up to ``concurrency`` in flight; (all matched, per-request results)."""
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        results = list(pool.map(lambda p: check_one(url, oracle, p, max_new_tokens), prompts))
    return all(r["match"] for r in results), results
