"""GPU: the speculation gate under KV pressure and request churn (retraction, aborts, radix-cache hits).

For each configuration (v2 topk 1, v1 topk 1, v1 topk 4) it starts a patched SGLang 0.5.12 server on
the synthetic pair with SGLang's own retraction test hook (``SGLANG_TEST_RETRACT=1``: every
``--retract-interval`` forward steps ``update_running_batch`` retracts at least one running request,
``managers/scheduler.py:2913``, which re-queues it for a new prefill of its prompt and outputs) and
SGLang's strict idle memory check (a token or request slot not back in its pool when the server is
idle raises: ``scheduler_runtime_checker_mixin.py``), and checks against the oracle:

H1. retraction under switching: the threshold flips between 1 and max every few ms while 16
    requests of varied lengths (4-160 prompt, 16-200 output tokens) run, so requests are retracted
    during OFF steps, at switches and at resume steps; every output equals the oracle's;
H2. aborts in the middle of OFF steps: forced OFF, 8 long requests; after 100 OFF steps half of
    them are aborted (``POST /abort_request``); what each aborted one returned is a prefix of the
    oracle's continuation, the others are exact, and a batch sent afterwards is exact;
H3. a radix-cache hit on a prefix generated while OFF: forced OFF, one request of 200 tokens; then
    speculation on and one request whose prompt is that prompt plus 150 of those tokens, alone on
    the server (so never retracted): its output is exact and its verify count equals the oracle's
    for a current draft (``Oracle.spec_decode``), which a wrong draft K/V of the cached OFF-era
    positions would change on a KV-sensitive pair;
and then: the server is still alive after idling (no leak raised), ``retractions`` (from the log's
``Testing retraction`` lines) > 0, every run-time proof 0 mismatches.

Usage (GPU machine): python -m bench.churn_correctness --models DIR --kv-sensitive --out bench/results/gate-churn.json
One JSON line per configuration as it ends; entries replace those of the same config and pair kind.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import httpx

from bench.gate_correctness import MAX_RR, load_pair, merge_result, proof_counters, run_on_config_server, wait_steps
from bench.oracle_check import check_batch, check_one, make_prompts
from bench.server_harness import CONFIGS, add_run_arguments, config_names, flipping_threshold, set_gate, spec_gate

RETRACT_INTERVAL = 37  # forward steps between two forced retractions (prime: hits every kind of step)
RETRACTION_LINE = re.compile(r"(?:Testing retraction|Retract requests)\. #retracted_reqs: (\d+)")
LEAK_LINE = re.compile(r"memory leak detected|Mem Leak Detected", re.I)
#: H1: requests, at once, prompt and output length ranges, seed; threshold flips (ms apart)
CHURN_REQUESTS, CHURN_CONCURRENCY = 48, 16
CHURN_PROMPT_RANGE, CHURN_OUTPUT_RANGE, CHURN_SEED = (4, 160), (16, 200), 777
FLIP_EVERY_S = 0.01
#: H2: requests (tokens each), how many are aborted, OFF steps before the aborts
ABORT_REQUESTS, ABORT_TOKENS, ABORTED, ABORT_AFTER_OFF_STEPS = 8, 600, 4, 100
#: H3: the first request's tokens, how many of them the second prompt takes, the second's tokens
RADIX_FIRST_TOKENS, RADIX_PREFIX_TOKENS, RADIX_SECOND_TOKENS = 200, 150, 100


def churn_requests(vocab: int) -> List[Tuple[List[int], int]]:
    """H1's (prompt, max_new_tokens) pairs, deterministic for one vocab."""
    rng = random.Random(CHURN_SEED)
    return [(make_prompts(vocab, 1, rng.randint(*CHURN_PROMPT_RANGE), CHURN_SEED + i)[0],
             rng.randint(*CHURN_OUTPUT_RANGE)) for i in range(CHURN_REQUESTS)]


def retractions(log: str) -> int:
    """Requests SGLang retracted, from its log lines (test hook and real KV pressure alike)."""
    return sum(int(m.group(1)) for m in RETRACTION_LINE.finditer(log))


def phase_retraction(url: str, oracle: Any) -> Dict[str, Any]:
    """H1: varied requests while the threshold flips; every output exact."""
    g0 = spec_gate(url)
    with flipping_threshold(url, MAX_RR, FLIP_EVERY_S) as sent:
        with ThreadPoolExecutor(max_workers=CHURN_CONCURRENCY) as pool:
            results = list(pool.map(lambda pm: check_one(url, oracle, pm[0], pm[1]), churn_requests(oracle.vocab)))
    g = spec_gate(url)
    return {"oracle_match": all(r["match"] for r in results), "requests": len(results),
            "mismatched": [i for i, r in enumerate(results) if not r["match"]],
            "switches": g["switches"] - g0["switches"], "flips_sent": sent["flips"],
            "flip_errors": sent["errors"], "first_flip_error": sent["first_error"], "slowest_flip_s": sent["slowest_s"],
            "decode_steps_off": g["decode_steps_off"] - g0["decode_steps_off"]}


def generate_with_rid(url: str, prompt: List[int], max_new_tokens: int, rid: str) -> Dict[str, Any]:
    """Greedy ``/generate`` with a request id (so it can be aborted); SGLang's JSON answer."""
    payload = {"input_ids": prompt, "rid": rid,
               "sampling_params": {"temperature": 0.0, "max_new_tokens": max_new_tokens, "ignore_eos": True}}
    r = httpx.post(url + "/generate", json=payload, timeout=300)
    r.raise_for_status()
    return r.json()


def prefix_of_oracle(oracle: Any, prompt: List[int], got: Sequence[int]) -> bool:
    """Whether ``got`` (possibly cut short) is the start of the oracle's continuation of ``prompt``."""
    return list(got) == oracle.continuation(prompt, len(got))[:len(got)] if got else True


def phase_aborts(url: str, oracle: Any, wait_off_steps: Callable[[int], None]) -> Dict[str, Any]:
    """H2: forced OFF, long requests, half aborted mid-way; returned tokens are oracle prefixes."""
    set_gate(url, threshold=1, hysteresis=0)
    prompts = make_prompts(oracle.vocab, ABORT_REQUESTS, 48, 901)
    rids = [f"churn-abort-{i}-{uuid.uuid4().hex[:8]}" for i in range(ABORT_REQUESTS)]
    start_off = spec_gate(url)["decode_steps_off"]
    outs: Dict[int, Any] = {}

    def run(i: int) -> None:
        try:
            outs[i] = generate_with_rid(url, prompts[i], ABORT_TOKENS, rids[i])
        except Exception as exc:  # noqa: BLE001 - an aborted request may end with an HTTP error
            outs[i] = {"error": f"{type(exc).__name__}: {exc}"[:200]}

    threads = [threading.Thread(target=run, args=(i,)) for i in range(ABORT_REQUESTS)]
    for t in threads:
        t.start()
    wait_off_steps(start_off + ABORT_AFTER_OFF_STEPS)
    abort_replies = [httpx.post(url + "/abort_request", json={"rid": rid}, timeout=30).status_code
                     for rid in rids[:ABORTED]]
    for t in threads:
        t.join()
    aborted = [outs[i] for i in range(ABORTED)]
    kept = [outs[i] for i in range(ABORTED, ABORT_REQUESTS)]
    aborted_prefix = [prefix_of_oracle(oracle, prompts[i], (outs[i].get("output_ids") or []))
                      for i in range(ABORTED)]
    kept_exact = [o.get("output_ids") == oracle.continuation(p, ABORT_TOKENS)
                  for o, p in zip(kept, prompts[ABORTED:])]
    after_ok, _ = check_batch(url, oracle, make_prompts(oracle.vocab, 4, 32, 902), 64)
    return {
        "aborts": ABORTED, "abort_http_status": abort_replies,
        "aborted_tokens": [len(o.get("output_ids") or []) for o in aborted],
        "aborted_finish": [((o.get("meta_info") or {}).get("finish_reason") or {}).get("type") for o in aborted],
        "aborted_prefix_ok": all(aborted_prefix),
        "aborted_cut_short": all(len(o.get("output_ids") or []) < ABORT_TOKENS for o in aborted),
        "kept_exact": all(kept_exact), "after_batch_exact": after_ok,
        "oracle_match": all(aborted_prefix) and all(kept_exact) and after_ok,
    }


def phase_radix(url: str, oracle: Any, num_steps: int) -> Dict[str, Any]:
    """H3: a prefix generated while OFF, hit in the radix cache by a request run ON alone."""
    set_gate(url, threshold=1, hysteresis=0)
    prompt = make_prompts(oracle.vocab, 1, 40, 903)[0]
    first = check_one(url, oracle, prompt, RADIX_FIRST_TOKENS)
    second_prompt = prompt + oracle.continuation(prompt, RADIX_PREFIX_TOKENS)
    set_gate(url, threshold=MAX_RR)
    out = generate_with_rid(url, second_prompt, RADIX_SECOND_TOKENS, f"churn-radix-{uuid.uuid4().hex[:8]}")
    meta = out.get("meta_info") or {}
    want = oracle.spec_decode(second_prompt, RADIX_SECOND_TOKENS, num_steps)["verify_ct"]
    exact = out.get("output_ids") == oracle.continuation(second_prompt, RADIX_SECOND_TOKENS)
    return {
        "first_exact": first["match"], "second_exact": exact,
        "cached_tokens": meta.get("cached_tokens"), "prompt_tokens": len(second_prompt),
        "spec_verify_ct": meta.get("spec_verify_ct"), "spec_verify_ct_oracle": want,
        "verify_ct_matches_oracle": meta.get("spec_verify_ct") == want,
        "oracle_match": first["match"] and exact,
    }


def _proofs(g: Dict[str, Any]) -> Dict[str, Any]:
    checks, mismatches = proof_counters(g, "checks"), proof_counters(g, "mismatches")
    return {"checks": checks, "mismatches": mismatches,
            "mismatches_zero": bool(g.get("ranks")) and all(v == 0 for vs in mismatches.values() for v in vs)}


def run_config(name: str, models: Path, oracle: Any, port: int, log_dir: Path, *, tp: int,
               mem_fraction: float, retract_interval: int = RETRACT_INTERVAL) -> Dict[str, Any]:
    """H1-H3 on one configuration's server; the entry for ``gate-churn.json``."""
    env = {"SGLANG_TEST_RETRACT": "1", "SGLANG_TEST_RETRACT_INTERVAL": str(retract_interval),
           "SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_IDLE": "1"}
    num_steps = CONFIGS[name]["num_steps"]

    def body(server: Any, rec: Dict[str, Any]) -> None:
        url = server.url
        rec["retraction"] = phase_retraction(url, oracle)
        rec["abort"] = phase_aborts(url, oracle, lambda target: wait_steps(url, "decode_steps_off", target))
        rec["radix_hit"] = phase_radix(url, oracle, num_steps)
        time.sleep(3.0)  # idle: SGLang's strict memory check runs and raises on a leak
        alive = httpx.get(url + "/health", timeout=10).status_code == 200
        log = server.log_text()
        rec.update(_proofs(spec_gate(url)))
        rec["retractions"] = retractions(log)
        rec["aborts"] = rec["abort"]["aborts"]
        rec["leak_lines"] = [m.group(0) for m in LEAK_LINE.finditer(log)][:3]
        rec["alive_after_idle"] = alive
        rec["oracle_match"] = all(rec[k]["oracle_match"] for k in ("retraction", "abort", "radix_hit"))
        rec["ok"] = (rec["oracle_match"] and rec["retractions"] > 0 and rec["retraction"]["flip_errors"] == 0
                     and rec["mismatches_zero"] and alive and not rec["leak_lines"]
                     and rec["radix_hit"]["verify_ct_matches_oracle"])

    return run_on_config_server("churn", name, models, oracle, port, log_dir, tp=tp, mem_fraction=mem_fraction,
                                body=body, env=env, fields={"retract_interval": retract_interval})


LINE_KEYS = ("config", "tp", "kv_sensitive", "worker_class", "ok", "oracle_match", "retractions", "aborts",
             "mismatches_zero", "alive_after_idle", "leak_lines", "error")


def main(argv: Optional[Sequence[str]] = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.churn_correctness", description=__doc__.splitlines()[0])
    add_run_arguments(ap, mem_fraction=0.3, port=31500)
    ap.add_argument("--retract-interval", type=int, default=RETRACT_INTERVAL, metavar="STEPS",
                    help=f"forward steps between two forced retractions (default {RETRACT_INTERVAL})")
    a = ap.parse_args(argv)
    names = config_names(ap, a.configs)
    if a.retract_interval < 1:
        ap.error(f"--retract-interval is a number of forward steps >= 1, got {a.retract_interval}")
    if not (a.models / "oracle.json").is_file():
        ap.error(f"no synthetic pair at {a.models}: write one with python -m bench.synthetic_models --out "
                 f"{a.models} --preset 1b" + (" --kv-sensitive" if a.kv_sensitive else ""))
    a.build = None
    oracle = load_pair(ap, a)
    for i, name in enumerate(names):
        rec = run_config(name, a.models, oracle, a.port + i, a.log_dir, tp=a.tp, mem_fraction=a.mem_fraction,
                         retract_interval=a.retract_interval)
        merge_result(a.out, rec)  # replaces the entry of the same config, TP and kind of pair
        print(json.dumps({k: rec.get(k) for k in LINE_KEYS}), flush=True)


if __name__ == "__main__":
    main()
