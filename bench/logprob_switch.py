"""GPU: logprobs and sampled requests across speculation OFF/ON switches (issue 18 item 4, the server half).

For each configuration (v2 topk 1, v1 topk 1, v1 topk 4) it starts a patched SGLang 0.5.12 server on
the synthetic pair and sends, with ``return_logprob``, ``top_logprobs_num`` 3 and several
``logprob_start_len`` values:

L1. greedy requests with speculation forced ON (threshold max), then the same requests forced OFF
    (threshold 1), then while the threshold flips between 1 and max every few ms;
L2. sampled requests (temperature, top_p, top_k, min_p, repetition and frequency penalties) while
    the threshold flips.

A request slower than ``STALL_S`` or a threshold change that fails or waits that long is a
``stalled`` server (once seen on v2: 82 s, ``bench/results/h200-2026-12-02c/``).

Checked for every answer (:func:`check_answer`): HTTP 200; ``max_new_tokens`` output tokens;
``output_token_logprobs`` and ``output_top_logprobs`` one entry per output token, the ids those of
the output, every logprob finite and <= 0, each top list of 3 in descending order and (greedy) its
first id the chosen token; ``input_token_logprobs`` one entry per prompt token from
``logprob_start_len``. Greedy outputs equal the oracle's; the greedy output logprobs of the OFF and
the switching runs against the ON run: largest absolute difference (``max_abs_logprob_diff``; an OFF
step's target forward is a 1-token decode, an ON step's a multi-token verify: bf16 rounding differs,
nothing more is expected).

Usage (GPU machine): python -m bench.logprob_switch --models DIR --out bench/results/gate-logprobs.json
One JSON line per configuration; entries (``sampling`` key) replace those of the same config and pair.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import httpx

from bench.gate_correctness import MAX_RR, load_pair, merge_result, proof_counters, run_on_config_server
from bench.oracle_check import make_prompts
from bench.server_harness import add_run_arguments, config_names, flipping_threshold, set_gate, spec_gate

TOP_N = 3
#: largest |logprob difference| between an ON and an OFF/switching run of one greedy request
#: that still counts as the same computation in bf16 (the chosen tokens must be equal anyway)
LOGPROB_TOLERANCE = 0.25
GREEDY_REQUESTS, SAMPLED_REQUESTS, CONCURRENCY, MAX_NEW = 24, 24, 12, 64
SAMPLED = {"temperature": 0.8, "top_p": 0.9, "top_k": 16, "min_p": 0.02,
           "repetition_penalty": 1.1, "frequency_penalty": 0.2}


def requests(vocab: int, n: int, seed: int) -> List[Tuple[List[int], int]]:
    """``n`` (prompt, logprob_start_len) pairs: prompts of 8-40 tokens, start 0, the middle or the last token."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        prompt = make_prompts(vocab, 1, rng.randint(8, 40), seed + i)[0]
        out.append((prompt, (0, len(prompt) // 2, len(prompt) - 1)[i % 3]))
    return out


def payload(prompt: List[int], start: int, sampling: Optional[Dict[str, Any]], seed: int) -> Dict[str, Any]:
    """A ``/generate`` body asking for logprobs; ``sampling`` None = greedy."""
    params = {"max_new_tokens": MAX_NEW, "ignore_eos": True, "temperature": 0.0}
    if sampling is not None:
        params.update(sampling, sampling_seed=seed)
    return {"input_ids": prompt, "sampling_params": params, "return_logprob": True,
            "top_logprobs_num": TOP_N, "logprob_start_len": start}


def _finite_logprob(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x <= 1e-6


def check_answer(prompt: List[int], start: int, answer: Dict[str, Any], greedy: bool) -> List[str]:
    """What is wrong with one ``/generate`` answer (SGLang's JSON) to :func:`payload`; [] when nothing.

    Entries of ``*_token_logprobs`` are ``(logprob, token_id, text)``; of ``*_top_logprobs`` lists
    of those (``tokenizer_manager.detokenize_logprob_tokens`` in 0.5.12). The first entry of
    ``input_token_logprobs`` is None at every ``start`` (``scheduler_output_processor_mixin.py``
    ``_process_input_token_logprobs``: ``[None] + input_token_logprobs[:-1]``)."""
    problems: List[str] = []
    ids = answer.get("output_ids") or []
    meta = answer.get("meta_info") or {}
    out_lp = meta.get("output_token_logprobs") or []
    out_top = meta.get("output_top_logprobs") or []
    in_lp = meta.get("input_token_logprobs")
    if len(ids) != MAX_NEW:
        problems.append(f"{len(ids)} output tokens, asked {MAX_NEW}")
    if len(out_lp) != len(ids):
        problems.append(f"output_token_logprobs has {len(out_lp)} entries for {len(ids)} tokens")
    elif [e[1] for e in out_lp] != list(ids):
        problems.append("output_token_logprobs ids are not the output ids")
    if not all(_finite_logprob(e[0]) for e in out_lp):
        problems.append("an output logprob is not finite and <= 0")
    if len(out_top) != len(ids):
        problems.append(f"output_top_logprobs has {len(out_top)} entries for {len(ids)} tokens")
    for i, top in enumerate(out_top):
        vals = [e[0] for e in top]
        if len(top) != TOP_N or not all(_finite_logprob(v) for v in vals) or vals != sorted(vals, reverse=True):
            problems.append(f"output_top_logprobs[{i}] is not {TOP_N} finite logprobs in descending order")
            break
        if greedy and i < len(ids) and top[0][1] != ids[i]:
            problems.append(f"greedy token {i} is not the first of its top logprobs")
            break
    want_in = len(prompt) - start
    if in_lp is None or len(in_lp) != want_in:
        problems.append(f"input_token_logprobs has {None if in_lp is None else len(in_lp)} entries, "
                        f"want {want_in} (prompt {len(prompt)}, logprob_start_len {start})")
    elif not all(_finite_logprob(e[0]) for e in in_lp[1:]):
        problems.append("an input logprob is not finite and <= 0")
    return problems


def max_abs_diff(a: Sequence[Dict[str, Any]], b: Sequence[Dict[str, Any]]) -> Optional[float]:
    """Largest |logprob difference| over the output tokens of pairwise answers with equal output ids;
    None when some pair's ids differ."""
    worst = 0.0
    for x, y in zip(a, b):
        if "meta_info" not in x or "meta_info" not in y or x.get("output_ids") != y.get("output_ids"):
            return None
        for ex, ey in zip(x["meta_info"]["output_token_logprobs"], y["meta_info"]["output_token_logprobs"]):
            worst = max(worst, abs(ex[0] - ey[0]))
    return worst


#: a request slower than this (s) is a stall of the server, not load: 64 tokens take < 1 s here
STALL_S = 20.0


def _send_all(url: str, bodies: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    def one(body: Dict[str, Any]) -> Dict[str, Any]:
        t0 = time.monotonic()
        r = httpx.post(url + "/generate", json=body, timeout=300)
        took = round(time.monotonic() - t0, 3)
        if r.status_code != 200:
            return {"http_status": r.status_code, "body": r.text[:300], "took_s": took}
        return {**r.json(), "took_s": took}

    with ThreadPoolExecutor(max_workers=CONCURRENCY) as pool:
        return list(pool.map(one, bodies))


def _run(url: str, oracle: Any, reqs: List[Tuple[List[int], int]], sampling: Optional[Dict[str, Any]]):
    answers = _send_all(url, [payload(p, s, sampling, 1000 + i) for i, (p, s) in enumerate(reqs)])
    problems = {}
    exact = True
    for i, ((prompt, start), ans) in enumerate(zip(reqs, answers)):
        if "http_status" in ans:
            problems[i] = [f"HTTP {ans['http_status']}: {ans['body']}"]
            exact = False
            continue
        p = check_answer(prompt, start, ans, greedy=sampling is None)
        if p:
            problems[i] = p
        if sampling is None and list(ans.get("output_ids") or []) != oracle.continuation(prompt, MAX_NEW):
            exact = False
    slowest = max((a.get("took_s", 0.0) for a in answers), default=0.0)
    return answers, {"requests": len(reqs), "problems": {str(k): v for k, v in list(problems.items())[:5]},
                     "answers_with_problems": len(problems), "oracle_match": exact if sampling is None else None,
                     "slowest_request_s": slowest}


def logprob_phases(url: str, oracle: Any) -> Dict[str, Any]:
    """L1 and L2 on the server at ``url``; the ``sampling`` record of its entry."""
    greedy = requests(oracle.vocab, GREEDY_REQUESTS, 7)
    out: Dict[str, Any] = {}
    set_gate(url, threshold=MAX_RR, hysteresis=0)
    on, out["greedy_on"] = _run(url, oracle, greedy, None)
    set_gate(url, threshold=1, hysteresis=0)
    g0 = spec_gate(url)
    off, out["greedy_off"] = _run(url, oracle, greedy, None)
    out["greedy_off"]["decode_steps_off"] = spec_gate(url)["decode_steps_off"] - g0["decode_steps_off"]
    g0 = spec_gate(url)
    with flipping_threshold(url, MAX_RR) as sent:
        flip, out["greedy_switching"] = _run(url, oracle, greedy, None)
        _, out["sampled_switching"] = _run(url, oracle, requests(oracle.vocab, SAMPLED_REQUESTS, 11), SAMPLED)
    g1 = spec_gate(url)
    out["switches"] = g1["switches"] - g0["switches"]
    out["flips_sent"] = sent["flips"]
    out["flip_errors"], out["first_flip_error"], out["slowest_flip_s"] = sent["errors"], sent["first_error"], sent["slowest_s"]
    out["max_abs_logprob_diff_off_vs_on"] = max_abs_diff(on, off)
    out["max_abs_logprob_diff_switching_vs_on"] = max_abs_diff(on, flip)
    diffs = (out["max_abs_logprob_diff_off_vs_on"], out["max_abs_logprob_diff_switching_vs_on"])
    phases = ("greedy_on", "greedy_off", "greedy_switching", "sampled_switching")
    out["oracle_match"] = all(out[k]["oracle_match"] for k in phases[:3])
    out["stalled"] = (max(out[k]["slowest_request_s"] for k in phases) > STALL_S
                      or out["slowest_flip_s"] > STALL_S or out["flip_errors"] > 0)
    out["ok"] = (out["oracle_match"] and not any(out[k]["answers_with_problems"] for k in phases)
                 and not out["stalled"] and out["switches"] > 0 and out["greedy_off"]["decode_steps_off"] > 0
                 and all(d is not None and d <= LOGPROB_TOLERANCE for d in diffs))
    return out


def run_config(name: str, models: Path, oracle: Any, port: int, log_dir: Path, *, tp: int,
               mem_fraction: float, extra: Sequence[str] = ()) -> Dict[str, Any]:
    """L1-L2 on one configuration's server; its entry (``sampling`` holds the phases)."""
    def body(server: Any, rec: Dict[str, Any]) -> None:
        rec["sampling"] = logprob_phases(server.url, oracle)
        mism = proof_counters(spec_gate(server.url), "mismatches")
        rec["proof_mismatches"] = mism
        rec["mismatches_zero"] = all(max(v or [0]) == 0 for v in mism.values())
        rec["oracle_match"] = rec["sampling"]["oracle_match"]
        rec["ok"] = rec["sampling"]["ok"] and rec["mismatches_zero"]

    return run_on_config_server("logprob", name, models, oracle, port, log_dir, tp=tp,
                                mem_fraction=mem_fraction, body=body, extra=extra)


def main(argv: Optional[Sequence[str]] = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.logprob_switch", description=__doc__.splitlines()[0])
    add_run_arguments(ap, mem_fraction=0.15, port=31700)
    ap.add_argument("--parallel", type=int, default=3, help="servers at once (started together)")
    a = ap.parse_args(argv)
    names = config_names(ap, a.configs)
    a.build = None
    oracle = load_pair(ap, a)
    with ThreadPoolExecutor(max_workers=max(1, a.parallel)) as pool:
        futs = [pool.submit(run_config, n, a.models, oracle, a.port + 10 * i, a.log_dir, tp=a.tp,
                            mem_fraction=a.mem_fraction) for i, n in enumerate(names)]
        for f in futs:
            rec = f.result()
            merge_result(a.out, rec)
            print(json.dumps({k: rec.get(k) for k in ("config", "worker_class", "ok", "oracle_match",
                                                       "mismatches_zero", "error")}
                             | {"sampling": {k: v for k, v in (rec.get("sampling") or {}).items()
                                             if not isinstance(v, dict)}}), flush=True)


if __name__ == "__main__":
    main()
