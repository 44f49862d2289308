"""GPU: do OFF steps draw as a server without speculation? (issue 18 item 4, the proof of off_sampling)

Three servers on one synthetic pair, side by side on one GPU (ports ``--port`` + 0, 1, 2): no speculation; the gate forced off
(threshold 1) with ``SPECCONSOLE_OFF_PLAIN_SAMPLING=1`` (``server_patch/off_sampling.py``); the gate
forced off with SGLang's speculative verify sampling (the default). Each gets, per setting of
:data:`SETTINGS`, the same :data:`DRAWS` requests of one prompt, ``max_new_tokens`` 2: the first token
is drawn by the prefill (the plain Sampler on every server), the second by a decode step (an OFF
step on the gate servers), so the second tokens' counts must follow one distribution where OFF
steps draw as without speculation. Compared with a chi-square test of homogeneity
(:func:`chi_square`, cells with an expected count below 5 pooled), and by the share of draws of a
second token that the no-speculation server never drew (:func:`compare`).

The settings fit the 1B synthetic pair (``bench.synthetic_models --preset 1b``), whose target puts
its next token ~41.6 logits above every other, the others within ~0.4 of each other (bf16 logits of
the pair's head, scanned on CPU: ``bench/results/h200-2026-12-03c/README.md``): ``spread``
(temperature 48) keeps the top 8 tokens with min_p not binding (the others are exp(-41.6/48) =
0.42 of the top, above 0.3): every server must draw alike; ``min-p`` (temperature 20): min_p 0.3
leaves only the top token (the others are exp(-41.6/20) = 0.12 of it), so a server without
speculation draws one token, and a sampler that ignores min_p (SGLang's verify) spreads over the
top 8. That second setting is the control: it proves the test can see the difference that plain
OFF sampling removes. The seeded draws of ``spread`` say something only on servers started with
``--enable-deterministic-inference``: SGLang 0.5.12 ignores ``sampling_seed`` otherwise.

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

from bench.gate_correctness import CONFIGS, MAX_RR, config_server_args
from bench.oracle_check import make_prompts
from bench.server_harness import plain_args, record_failure, set_gate, start_server, stop_server, wait_ready

DRAWS, CONCURRENCY = 1000, 32
BASE = {"top_k": 8, "top_p": 0.95, "min_p": 0.3}
# name -> the sampling params of its draws, and whether seeded draws are made too
SETTINGS: Dict[str, Dict[str, Any]] = {
    "spread": {"params": {**BASE, "temperature": 48.0}, "seeded": True},
    "min-p": {"params": {**BASE, "temperature": 20.0}, "seeded": False},
}
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


def draw(url: str, prompt: List[int], sampling: Dict[str, Any], seeded: bool) -> List[Tuple[int, ...]]:
    """:data:`DRAWS` requests of ``prompt`` with the sampling params ``sampling``: each request's two output tokens."""
    def one(i: int) -> Tuple[int, ...]:
        params = {**sampling, "max_new_tokens": 2, "ignore_eos": True}
        if seeded:
            params["sampling_seed"] = 1000 + i
        r = httpx.post(url + "/generate", json={"input_ids": prompt, "sampling_params": params}, timeout=REQUEST_TIMEOUT_S)
        r.raise_for_status()
        return tuple(r.json()["output_ids"])

    with ThreadPoolExecutor(max_workers=CONCURRENCY) as pool:
        return list(pool.map(one, range(DRAWS)))


def run_server(kind: str, models: Path, prompt: List[int], port: int, log_dir: Path, mem_fraction: float,
               config: str = "v2-topk1") -> Dict[str, Any]:
    """One server of :data:`SERVERS`: its unseeded and seeded draws (``none`` without speculation)."""
    if kind == "none":
        args = plain_args(str(models / "target"), max_running_requests=MAX_RR, cuda_graph_max_bs=MAX_RR,
                          mem_fraction=mem_fraction)
        env = None
    else:
        args = config_server_args(config, models, 1, mem_fraction)
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
        rec["draws"] = {}
        for name, setting in SETTINGS.items():
            d = rec["draws"][name] = {"unseeded": [list(t) for t in draw(server.url, prompt, setting["params"], False)]}
            lap(f"{name}-unseeded")
            if setting["seeded"]:
                d["seeded"] = [list(t) for t in draw(server.url, prompt, setting["params"], True)]
                lap(f"{name}-seeded")
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
    """``other``'s draws of one setting against ``none``'s (each ``{"unseeded": [[t1, t2], ...],
    "seeded": ...}``): the chi-square of the second tokens (:func:`chi_square`), the share of
    ``other``'s second tokens that ``none`` never drew, and (seeded draws) the share of requests whose
    two tokens equal ``none``'s.

    ``same_distribution``: the chi-square's verdict at :data:`ALPHA`; where fewer than :data:`MIN_DF`
    degrees of freedom are left it is decided by the support alone: ``False`` when over 5% of
    ``other``'s draws fall outside ``none``'s support, else ``None`` (``inconclusive``: one token
    drawn by both proves nothing by itself; the ``min-p`` setting's control says whether it could
    have told them apart)."""
    second = lambda rec: Counter(t[1] for t in rec["unseeded"])  # noqa: E731
    a, b = second(none), second(other)
    outside = sum(n for k, n in b.items() if k not in a) / max(1, sum(b.values()))
    out = {"second_token": chi_square(a, b), "distinct_second_tokens": len(a | b),
           "outside_none_support_share": round(outside, 4)}
    if "seeded" in none and "seeded" in other:
        same = sum(1 for x, y in zip(none["seeded"], other["seeded"]) if x == y) / len(none["seeded"])
        out["seeded_equal_share"] = round(same, 4)
    if out["second_token"]["df"] >= MIN_DF:
        out["same_distribution"] = out["second_token"]["p_value"] >= ALPHA
    elif outside > 0.05:
        out["same_distribution"] = False
    else:
        out["same_distribution"] = None
        out["inconclusive"] = (f"only {out['second_token']['cells']} cell(s) with an expected count >= 5: the "
                               f"pair's distribution is too peaked at these parameters (raise --temperature)")
    return out


def verdict(comparisons: Dict[str, Dict[str, Dict[str, Any]]]) -> Dict[str, Any]:
    """The proof from :func:`compare` per setting and server (``{setting: {"off-plain": ..,
    "off-speculative": ..}}``): OFF steps with plain sampling draw as without speculation when every
    setting says so, or says ``inconclusive`` only where the speculative control differs (the test
    could see a difference there and found none)."""
    plain_ok, control_differs = True, False
    for name, c in comparisons.items():
        p, s = c["off-plain"], c["off-speculative"]
        if p["same_distribution"] is False:
            plain_ok = False
        elif p["same_distribution"] is None and not (s["same_distribution"] is False and p["outside_none_support_share"] == 0):
            plain_ok = False
        control_differs = control_differs or s["same_distribution"] is False
    return {"off_plain_samples_as_none": plain_ok, "off_speculative_differs_somewhere": control_differs}


def main(argv: Optional[Sequence[str]] = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.sampling_distribution", description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=Path, required=True, help="dir from bench.synthetic_models")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--mem-fraction", type=float, default=0.3)
    ap.add_argument("--log-dir", type=Path, default=Path("/tmp/specconsole-logs"))
    ap.add_argument("--port", type=int, default=31850)
    ap.add_argument("--config", choices=sorted(CONFIGS), default="v2-topk1",
                    help="the gate servers' configuration (bench.gate_correctness); the none server is plain decode")
    a = ap.parse_args(argv)
    from bench.synthetic_models import Oracle

    try:
        vocab = Oracle.load(a.models).vocab
    except (OSError, ValueError) as exc:
        ap.error(f"no synthetic pair at {a.models} ({exc}): write one with python -m bench.synthetic_models --out {a.models}")
    prompt = make_prompts(vocab, 1, 24, 5)[0]
    runs: Dict[str, Dict[str, Any]] = {}
    lock = threading.Lock()

    def one(i: int, kind: str) -> None:
        rec = run_server(kind, a.models, prompt, a.port + i, a.log_dir, a.mem_fraction, a.config)
        with lock:  # a partial result on disk after each server, in case the run is cut short
            runs[kind] = rec
            write_result(a.out, prompt, runs, a.config)

    with ThreadPoolExecutor(max_workers=len(SERVERS)) as pool:
        for f in [pool.submit(one, i, k) for i, k in enumerate(SERVERS)]:
            f.result()
    print(json.dumps({k: v for k, v in write_result(a.out, prompt, runs, a.config).items() if k != "servers"}))


def write_result(out: Path, prompt: List[int], runs: Dict[str, Dict[str, Any]], config: str = "v2-topk1") -> Dict[str, Any]:
    """Write the JSON of the servers finished so far (the comparisons and :func:`verdict` once all
    three have drawn every setting)."""
    result: Dict[str, Any] = {"config": config, "settings": SETTINGS, "draws": DRAWS, "prompt": prompt, "alpha": ALPHA,
                              "servers": {k: {x: v for x, v in r.items() if x != "draws"} for k, r in runs.items()}}
    if all(set(runs.get(k, {}).get("draws", {})) == set(SETTINGS) for k in SERVERS):
        result["comparisons"] = {name: {k: compare(runs["none"]["draws"][name], runs[k]["draws"][name])
                                        for k in ("off-plain", "off-speculative")} for name in SETTINGS}
        result.update(verdict(result["comparisons"]))
    out.write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
