"""GPU: do OFF steps draw as a server without speculation? (issue 18 item 4, the proof of off_sampling)

Three servers on one synthetic pair, side by side on one GPU (ports ``--port`` + 0, 1, 2): no speculation; the gate forced off
(threshold 1) with ``SPECCONSOLE_OFF_PLAIN_SAMPLING=1`` (``server_patch/off_sampling.py``); the gate
forced off with SGLang's speculative verify sampling (the default). Each gets the same
:data:`DRAWS` requests of one prompt with :data:`PARAMS` (temperature, top_k, top_p, min_p),
``max_new_tokens`` 2: the first token is drawn by the prefill (the plain Sampler on every server),
the second by a decode step (an OFF step on the gate servers), so the second tokens' counts must
follow one distribution where OFF steps draw as without speculation. Compared with a chi-square
test of homogeneity (:func:`chi_square`, cells with an expected count below 5 pooled); and with
``sampling_seed`` per request, the share of requests whose two tokens equal the no-speculation
server's (a seeded multinomial on the same probabilities draws the same token).

Usage (GPU machine): python -m bench.sampling_distribution --models /tmp/models/1b/p0.2 --out $R/sampling.json
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import httpx

from bench.gate_correctness import MAX_RR, config_server_args
from bench.oracle_check import make_prompts
from bench.server_harness import plain_args, record_failure, set_gate, start_server, stop_server, wait_ready

DRAWS, CONCURRENCY = 1000, 32
PARAMS = {"temperature": 2.0, "top_k": 8, "top_p": 0.95, "min_p": 0.05}
SERVERS = ("none", "off-plain", "off-speculative")
REQUEST_TIMEOUT_S = 60  # a 2-token request; a server that takes longer is stalled, and the record says so
ALPHA = 0.01  # a p-value below this says the two servers draw from different distributions
MIN_DF = 2  # fewer degrees of freedom: the draws are (nearly) one token and prove nothing


def chi_square(a: Counter, b: Counter) -> Dict[str, Any]:
    """Chi-square test of homogeneity of two samples of categories (``Counter`` of counts): the
    statistic, degrees of freedom and p-value (``torch.special.gammaincc(df / 2, x / 2)``, the
    chi-square survival function); categories whose expected count is below 5 in either sample
    are pooled into one cell (dropped when that pool is still below 5). p = 1 with one cell."""
    import torch

    na, nb = sum(a.values()), sum(b.values())
    if not na or not nb:
        raise ValueError("chi_square needs two non-empty samples")
    total = na + nb
    cells, pool = [], [0, 0]
    for k in set(a) | set(b):
        n = a[k] + b[k]
        if min(n * na / total, n * nb / total) < 5:
            pool[0] += a[k]
            pool[1] += b[k]
        else:
            cells.append((a[k], b[k]))
    if sum(pool) * min(na, nb) / total >= 5:
        cells.append(tuple(pool))
    x = 0.0
    for ca, cb in cells:
        n = ca + cb
        for count, size in ((ca, na), (cb, nb)):
            e = n * size / total
            x += (count - e) ** 2 / e
    df = len(cells) - 1
    p = 1.0 if df < 1 else float(torch.special.gammaincc(torch.tensor(df / 2.0, dtype=torch.float64),
                                                         torch.tensor(x / 2.0, dtype=torch.float64)))
    return {"statistic": round(x, 3), "df": df, "p_value": p, "cells": len(cells)}


def draw(url: str, prompt: List[int], seeded: bool) -> List[Tuple[int, ...]]:
    """:data:`DRAWS` requests of ``prompt``: each request's two output tokens."""
    def one(i: int) -> Tuple[int, ...]:
        params = {**PARAMS, "max_new_tokens": 2, "ignore_eos": True}
        if seeded:
            params["sampling_seed"] = 1000 + i
        r = httpx.post(url + "/generate", json={"input_ids": prompt, "sampling_params": params}, timeout=REQUEST_TIMEOUT_S)
        r.raise_for_status()
        return tuple(r.json()["output_ids"])

    with ThreadPoolExecutor(max_workers=CONCURRENCY) as pool:
        return list(pool.map(one, range(DRAWS)))


def run_server(kind: str, models: Path, prompt: List[int], port: int, log_dir: Path, mem_fraction: float) -> Dict[str, Any]:
    """One server of :data:`SERVERS`: its unseeded and seeded draws (``none`` without speculation)."""
    if kind == "none":
        args = plain_args(str(models / "target"), max_running_requests=MAX_RR, cuda_graph_max_bs=MAX_RR,
                          mem_fraction=mem_fraction)
        env = None
    else:
        args = config_server_args("v2-topk1", models, 1, mem_fraction)
        env = {"SPECCONSOLE_OFF_PLAIN_SAMPLING": "1" if kind == "off-plain" else "0"}
    rec: Dict[str, Any] = {"server": kind, "seconds": {}}
    t0 = time.monotonic()
    lap = lambda name: rec["seconds"].__setitem__(name, round(time.monotonic() - t0, 1))  # noqa: E731
    server = start_server(f"sampling-{kind}", args, port, log_dir, patched=kind != "none", env=env)
    try:
        wait_ready(server)
        lap("ready")
        if kind != "none":
            set_gate(server.url, threshold=1, hysteresis=0)
        rec["unseeded"] = [list(t) for t in draw(server.url, prompt, seeded=False)]
        lap("unseeded")
        rec["seeded"] = [list(t) for t in draw(server.url, prompt, seeded=True)]
        lap("seeded")
        if kind != "none":
            g = httpx.get(server.url + "/server_info", timeout=30).json()["internal_states"][0]["spec_gate"]
            rec["off_sampling"] = g.get("off_sampling")
            rec["decode_steps_off"] = g.get("decode_steps_off")
    except Exception as exc:  # the other servers still run; the record says why this one failed
        record_failure(rec, server, exc)
    finally:
        rec["exit_code"] = stop_server(server)
    return rec


def compare(none: Dict[str, Any], other: Dict[str, Any]) -> Dict[str, Any]:
    """``other``'s second tokens against ``none``'s (:func:`chi_square`), and the share of seeded
    requests whose two tokens equal ``none``'s."""
    second = lambda rec: Counter(t[1] for t in rec["unseeded"])  # noqa: E731
    same = sum(1 for x, y in zip(none["seeded"], other["seeded"]) if x == y) / len(none["seeded"])
    out = {"second_token": chi_square(second(none), second(other)), "seeded_equal_share": round(same, 4),
           "distinct_second_tokens": len(second(none) | second(other))}
    if out["second_token"]["df"] < MIN_DF:  # one token drawn nearly always: the test cannot tell anything apart
        out["same_distribution"] = None
        out["inconclusive"] = (f"only {out['second_token']['cells']} cell(s) with an expected count >= 5: the "
                               f"pair's distribution is too peaked at these parameters (raise --temperature)")
    else:
        out["same_distribution"] = out["second_token"]["p_value"] >= ALPHA
    return out


def main(argv: Optional[Sequence[str]] = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.sampling_distribution", description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=Path, required=True, help="dir from bench.synthetic_models")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--mem-fraction", type=float, default=0.3)
    ap.add_argument("--log-dir", type=Path, default=Path("/tmp/specconsole-logs"))
    ap.add_argument("--port", type=int, default=31850)
    ap.add_argument("--temperature", type=float, default=PARAMS["temperature"],
                    help="the synthetic pairs' logit margins are large (>= 40 in bf16): a high temperature "
                         "(tens) spreads the draws over several tokens")
    ap.add_argument("--min-p", type=float, default=PARAMS["min_p"])
    a = ap.parse_args(argv)
    if a.temperature <= 0 or not 0 <= a.min_p < 1:
        ap.error("--temperature must be > 0 and --min-p in [0, 1)")
    PARAMS.update(temperature=a.temperature, min_p=a.min_p)  # every draw of this run
    from bench.synthetic_models import Oracle

    try:
        vocab = Oracle.load(a.models).vocab
    except (OSError, ValueError) as exc:
        ap.error(f"no synthetic pair at {a.models} ({exc}): write one with python -m bench.synthetic_models --out {a.models}")
    prompt = make_prompts(vocab, 1, 24, 5)[0]
    runs: Dict[str, Dict[str, Any]] = {}
    lock = threading.Lock()

    def one(i: int, kind: str) -> None:
        rec = run_server(kind, a.models, prompt, a.port + i, a.log_dir, a.mem_fraction)
        with lock:  # a partial result on disk after each server, in case the run is cut short
            runs[kind] = rec
            write_result(a.out, prompt, runs)

    with ThreadPoolExecutor(max_workers=len(SERVERS)) as pool:
        for f in [pool.submit(one, i, k) for i, k in enumerate(SERVERS)]:
            f.result()
    print(json.dumps({k: v for k, v in write_result(a.out, prompt, runs).items() if k != "servers"}))


def write_result(out: Path, prompt: List[int], runs: Dict[str, Dict[str, Any]]) -> Dict[str, Any]:
    """Write the JSON of the servers finished so far (the comparisons once all three have draws)."""
    result: Dict[str, Any] = {"params": PARAMS, "draws": DRAWS, "prompt": prompt, "alpha": ALPHA,
                              "servers": {k: {x: v for x, v in r.items() if x not in ("unseeded", "seeded")}
                                          for k, r in runs.items()}}
    if all("seeded" in runs.get(k, {}) for k in SERVERS):
        result["off_plain_vs_none"] = compare(runs["none"], runs["off-plain"])
        result["off_speculative_vs_none"] = compare(runs["none"], runs["off-speculative"])
    out.write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
