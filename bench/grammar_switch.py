"""GPU: structured output (xgrammar regex) across speculation OFF/ON switches (issue 18 item 5).

For each configuration it starts a patched SGLang 0.5.12 server on the synthetic pair with
``--grammar-backend xgrammar`` and sends the same greedy requests constrained by :data:`REGEX`
three times: speculation forced ON (threshold max), forced OFF (threshold 1), and while the
threshold flips between 1 and max every few ms. The synthetic tokenizer's tokens are the words
``w0 ... w{V-1}`` (``bench/synthetic_models.py``, ``write_tokenizer``; xgrammar reads them as RAW
strings without spaces, checked on CPU with xgrammar 0.2.0), so :data:`REGEX` allows exactly the
tokens whose word starts with ``w1`` after any prefix: no dead end, and greedy decoding under the
mask is deterministic. Checked: every answer HTTP 200, every output token allowed
(:func:`allowed`), and the OFF and switching outputs equal the ON outputs token for token (the
same target argmax under the same mask; a wrong mask or a stale grammar state at a switch would
change them). A request or threshold change slower than ``logprob_switch.STALL_S`` is a stall.

Usage (GPU machine): python -m bench.grammar_switch --models DIR --kv-sensitive --out bench/results/gate-grammar.json
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import httpx

from bench.gate_correctness import MAX_RR, load_pair, merge_result, proof_counters, run_on_config_server
from bench.logprob_switch import STALL_S, requests
from bench.server_harness import add_run_arguments, config_names, flipping_threshold, set_gate, spec_gate

#: words starting with w1 (w1, w10-w19, w100-...), any number of them; the tokens carry no spaces
REGEX = r"(w1[0-9]*)+"
REQUESTS, CONCURRENCY, MAX_NEW = 16, 8, 32
GRAMMAR_ARGS = ("--grammar-backend", "xgrammar")


def allowed(token_id: int, vocab: int) -> bool:
    """Whether word token ``token_id`` (``w<id>``) may be generated under :data:`REGEX`."""
    return 0 <= token_id < vocab and str(token_id).startswith("1")


def payload(prompt: List[int]) -> Dict[str, Any]:
    """A greedy ``/generate`` body constrained by :data:`REGEX`."""
    return {"input_ids": prompt, "sampling_params": {"max_new_tokens": MAX_NEW, "temperature": 0.0, "regex": REGEX}}


def _send_all(url: str, prompts: List[List[int]]) -> List[Dict[str, Any]]:
    def one(prompt: List[int]) -> Dict[str, Any]:
        t0 = time.monotonic()
        r = httpx.post(url + "/generate", json=payload(prompt), timeout=300)
        took = round(time.monotonic() - t0, 3)
        if r.status_code != 200:
            return {"http_status": r.status_code, "body": r.text[:300], "took_s": took}
        return {"output_ids": r.json().get("output_ids") or [], "took_s": took}

    with ThreadPoolExecutor(max_workers=CONCURRENCY) as pool:
        return list(pool.map(one, prompts))


def check_run(answers: List[Dict[str, Any]], vocab: int, reference: Optional[List[Dict[str, Any]]] = None) -> Dict[str, Any]:
    """One run's record: ``errors`` (answers that were not HTTP 200), ``disallowed`` (requests with a
    token :data:`REGEX` forbids), ``empty``, ``differ_from_on`` (requests whose output is not the
    reference run's; None without one), ``slowest_request_s``, ``mean_output_tokens``."""
    ok = [a for a in answers if "http_status" not in a]
    return {
        "requests": len(answers), "errors": len(answers) - len(ok),
        "disallowed": sum(1 for a in ok if not all(allowed(t, vocab) for t in a["output_ids"])),
        "empty": sum(1 for a in ok if not a["output_ids"]),
        "differ_from_on": None if reference is None else sum(
            1 for a, b in zip(answers, reference) if a.get("output_ids") != b.get("output_ids")),
        "slowest_request_s": max((a["took_s"] for a in answers), default=0.0),
        "mean_output_tokens": round(sum(len(a["output_ids"]) for a in ok) / len(ok), 2) if ok else None,
    }


def grammar_phases(url: str, oracle: Any) -> Dict[str, Any]:
    """ON, OFF and switching runs on the server at ``url``; the ``grammar`` record of its entry."""
    prompts = [p for p, _ in requests(oracle.vocab, REQUESTS, 23)]
    out: Dict[str, Any] = {"regex": REGEX}
    set_gate(url, threshold=MAX_RR, hysteresis=0)
    on = _send_all(url, prompts)
    out["on"] = check_run(on, oracle.vocab)
    set_gate(url, threshold=1, hysteresis=0)
    g0 = spec_gate(url)
    out["off"] = check_run(_send_all(url, prompts), oracle.vocab, on)
    out["off"]["decode_steps_off"] = spec_gate(url)["decode_steps_off"] - g0["decode_steps_off"]
    g0 = spec_gate(url)
    with flipping_threshold(url, MAX_RR) as sent:
        out["switching"] = check_run(_send_all(url, prompts), oracle.vocab, on)
    out["switches"] = spec_gate(url)["switches"] - g0["switches"]
    out.update(flips_sent=sent["flips"], flip_errors=sent["errors"], first_flip_error=sent["first_error"],
               slowest_flip_s=sent["slowest_s"])
    runs = [out[k] for k in ("on", "off", "switching")]
    out["stalled"] = (max(r["slowest_request_s"] for r in runs) > STALL_S or out["slowest_flip_s"] > STALL_S
                      or out["flip_errors"] > 0)
    out["outputs_equal_on"] = out["off"]["differ_from_on"] == 0 and out["switching"]["differ_from_on"] == 0
    out["ok"] = (out["outputs_equal_on"] and not out["stalled"] and out["switches"] > 0
                 and out["off"]["decode_steps_off"] > 0
                 and all(r["errors"] == 0 and r["disallowed"] == 0 and r["empty"] == 0 for r in runs))
    return out


def run_config(name: str, models: Path, oracle: Any, port: int, log_dir: Path, *, tp: int,
               mem_fraction: float) -> Dict[str, Any]:
    """The grammar phases on one configuration's server; its entry (``grammar`` holds them)."""
    def body(server: Any, rec: Dict[str, Any]) -> None:
        rec["grammar"] = grammar_phases(server.url, oracle)
        mism = proof_counters(spec_gate(server.url), "mismatches")
        rec["mismatches_zero"] = all(max(v or [0]) == 0 for v in mism.values())
        rec["ok"] = rec["grammar"]["ok"] and rec["mismatches_zero"]

    return run_on_config_server("grammar", name, models, oracle, port, log_dir, tp=tp, mem_fraction=mem_fraction,
                                body=body, extra=GRAMMAR_ARGS)


def main(argv: Optional[Sequence[str]] = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.grammar_switch", description=__doc__.splitlines()[0])
    add_run_arguments(ap, mem_fraction=0.3, port=31800)
    a = ap.parse_args(argv)
    names = config_names(ap, a.configs)
    a.build = None
    oracle = load_pair(ap, a)
    for i, name in enumerate(names):  # one at a time: each needs its KV pool (see GPU_PLAN.md)
        rec = run_config(name, a.models, oracle, a.port + 10 * i, a.log_dir, tp=a.tp, mem_fraction=a.mem_fraction)
        merge_result(a.out, rec)
        print(json.dumps({k: rec.get(k) for k in ("config", "worker_class", "ok", "mismatches_zero", "error")}
                         | {"grammar": {k: v for k, v in (rec.get("grammar") or {}).items() if not isinstance(v, dict)}}),
              flush=True)


if __name__ == "__main__":
    main()
