"""GPU: the speculation gate never changes greedy output, on every EAGLE worker path.

For each configuration (v2 topk 1, v1 topk 1, v1 topk 4; optionally TP=2) it starts a patched
SGLang 0.5.12 server on the synthetic pair and checks, against the oracle chain:

A. forced ON (threshold = max running requests): outputs exact, accept length measured;
B. forced OFF (threshold 1): outputs exact, every OFF step replayed the OFF CUDA graph and
   no ON target graph ran;
C. recovery: four long requests run 200+ OFF steps, then speculation turns on: the accept length
   of the first ON steps, which must equal the oracle's for a current draft state
   (bench/recovery_oracle.py);
G. variable lengths while OFF (run after F, recorded as ``varied_lengths``): four prompts of 9-150
   tokens prefilled together while OFF; around them 24 requests of 4-160 prompt and 16-200 output
   tokens arrive, are prefilled and finish while OFF (12 at a time); then speculation resumes with
   only the four running, whose first ON steps must accept exactly what the oracle predicts for a
   current draft (as C). ``oracle_match`` covers all 28 requests;
D. switching: the threshold flips between 1 and max every few ms under load until at least
   ``--switches`` switches happened; outputs exact;
E. load crossing: threshold 8 / hysteresis 2 with a load that ramps 1 -> 32 -> 1 requests;
F. a runtime threshold change takes effect at the next decode step;
auto. the auto threshold (``"auto"`` over POST /set_internal_state) under a closed-loop load whose
   batch size sweeps 1 -> 48 -> 1 in waves (``--auto-seconds``, ``--auto-period``, ``--auto-peak``,
   until the gate probed and switched, at most ``--auto-extra-seconds`` more): outputs exact,
   ``mode`` auto, probes and switches happened, every run-time proof (``off_attention``,
   ``off_kv_only``, ``off_early_seq_lens``) 0 mismatches on every rank, and every TP rank took the
   same decisions (``decisions_digest``, switches, decode steps ON/OFF: ``ranks_agree_auto``).
   Recorded as ``auto`` in each entry (:func:`auto_record`), with ``auto_ok`` and ``ranks_agree_auto``.

KV-sensitive pair (``--kv-sensitive``; ``bench.synthetic_models --kv-sensitive``): the target's next
token is pi of the token one position back, read by attention, and the draft reads the tokens
before it through its own K/V cache, so a target K/V left wrong by OFF steps, a switch or a
retraction changes an output (A-F, auto), and a draft K/V left wrong changes phase C's accept
length, instead of only showing in the sampled run-time proofs. ``--build PRESET`` writes the pair
into ``--models`` first (``--p-wrong``, ``--seed``; with ``--kv-sensitive`` the KV-sensitive one).
Every entry records ``kv_sensitive``; an entry of one kind of pair never replaces one of the other.

Usage (GPU machine): python -m bench.gate_correctness --models DIR --out bench/results/gate-correctness.json
``--auto`` runs only the auto phase (merged into an existing entry of the same config and TP:
:func:`merge_result`), ``--skip-auto`` only A-F, ``--forced-on-only`` only phase A (the ON path
against the oracle: a quick check, entries marked ``only``). One JSON line per configuration as it ends.
KV-sensitive: python -m bench.gate_correctness --models /tmp/models/1b-kv --build 1b --kv-sensitive
--out bench/results/gate-correctness-kv.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from bench.closed_loop import ClosedLoop, triangle_concurrency
from bench.errors import BenchError
from bench.oracle_check import check_batch, check_many, check_one, make_prompts
from bench.recovery_oracle import check_recovery, recovery_prompts
from bench.server_harness import (
    CONFIGS,
    eagle3_args,
    flipping_threshold,
    record_failure,
    gate_startup_lines,
    port_in_use,
    set_gate,
    spec_gate,
    spec_path_log_line,
    start_server,
    stop_server,
    wait_ready,
    write_json,
)
from server_patch import options
from server_patch.contract import AUTO, MODE_AUTO, THRESHOLD_FLAG
from server_patch.off_attention import DECODE_KERNEL

MAX_RR = 64
#: which phases a run has: A-F and the auto phase (default), A-F only, the auto phase only, phase A only
ALL_PHASES, CLASSIC_ONLY, AUTO_ONLY, FORCED_ON_ONLY = "all", "classic", "auto", "forced-on"
#: the run-time proofs every rank counts (``<key>_checks``, ``<key>_mismatches`` in spec_gate.ranks)
PROOF_KEYS = ("off_attention", "off_kv_only", "off_early_seq_lens", "target_prefill")
#: what an auto-only run (``--auto``) writes into an existing entry of the same config and TP
AUTO_ENTRY_KEYS = ("auto", "auto_ok", "ranks_agree_auto")
AUTO_PROMPT_LEN = 32
AUTO_PROMPT_SEED = 20_000


@dataclasses.dataclass(frozen=True)
class AutoOptions:
    """The auto phase's load: a closed loop whose requests in flight ramp 1 -> ``peak`` -> 1 every
    ``period_s`` seconds for ``seconds``, then on (at most ``extra_s`` more) until the gate has
    probed and switched; ``output_len`` tokens per request; spec_gate polled every ``poll_s``."""

    seconds: float = 24.0
    period_s: float = 8.0
    peak: int = 48
    output_len: int = 160
    extra_s: float = 24.0
    poll_s: float = 0.2


def wait_steps(url: str, key: str, target: int, timeout_s: float = 120) -> Dict[str, Any]:
    """Poll spec_gate until its counter ``key`` reaches ``target``; that spec_gate (TimeoutError after
    ``timeout_s``)."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        g = spec_gate(url)
        if g[key] >= target:
            return g
        time.sleep(0.05)
    raise TimeoutError(f"{key} did not reach {target}")


def config_server_args(name: str, models: Path, tp: int, mem_fraction: float,
                       extra: Sequence[str] = ()) -> List[str]:
    """The SGLang arguments of configuration ``name`` (CONFIGS) on the synthetic pair at ``models``:
    EAGLE-3 with its worker path, MAX_RR running requests and CUDA-graph batch size, the gate
    started at threshold MAX_RR (speculation on), then ``extra`` (SGLang keeps the last value of a
    repeated flag: ``--attention-backend fa3``, ``--disable-cuda-graph``, ``--cuda-graph-max-bs 8``)."""
    cfg = CONFIGS[name]
    return eagle3_args(
        str(models / "target"), str(models / "draft"),
        topk=cfg["topk"], num_steps=cfg["num_steps"], num_draft_tokens=cfg["num_draft_tokens"],
        overlap=cfg["overlap"], max_running_requests=MAX_RR, cuda_graph_max_bs=MAX_RR,
        mem_fraction=mem_fraction,
    ) + ["--tp-size", str(tp), THRESHOLD_FLAG, str(MAX_RR), *extra]


def server_variant(extra: Sequence[str]) -> Dict[str, Any]:
    """What ``extra`` server arguments change that a result entry must say: ``attention_backend``
    (the last ``--attention-backend`` value, else the harness's ``triton``), ``cuda_graph`` (False
    with ``--disable-cuda-graph``), ``cuda_graph_max_bs`` (the last value given, else MAX_RR) and
    ``extra_server_args`` (``extra`` itself). Raises ValueError for a flag without its value."""
    def last(flag: str) -> Optional[str]:
        value = None
        for i, arg in enumerate(extra):
            if arg == flag:
                if i + 1 >= len(extra):
                    raise ValueError(f"{flag} needs a value")
                value = extra[i + 1]
            elif arg.startswith(flag + "="):
                value = arg.split("=", 1)[1]
        return value

    max_bs = last("--cuda-graph-max-bs")
    out = {"attention_backend": last("--attention-backend") or "triton",
           "cuda_graph": "--disable-cuda-graph" not in extra,
           "cuda_graph_max_bs": int(max_bs) if max_bs is not None else MAX_RR,
           "extra_server_args": list(extra)}
    env = opt_in_env()
    if env:
        out["server_env"] = env
    return out


#: the plugin's switch variables (one list, ``server_patch.options``): a run with one of them set
#: (either way) is another variant of its entry
SWITCH_ENV = options.SWITCH_ENV


def opt_in_env() -> Dict[str, str]:
    """The :data:`SWITCH_ENV` variables set in this process's environment (the servers inherit them)."""
    return {k: os.environ[k] for k in SWITCH_ENV if k in os.environ}


def run_on_config_server(kind: str, name: str, models: Path, oracle: Any, port: int, log_dir: Path, *,
                         tp: int, mem_fraction: float, body: Callable[[Any, Dict[str, Any]], None],
                         extra: Sequence[str] = (), env: Optional[Dict[str, str]] = None,
                         fields: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Start configuration ``name``'s server (``config_server_args`` + ``extra``, ``env``; log
    ``log_dir/<kind>-<name>-tp<tp>[-kv][-variant].log``), wait for it, record its worker class, run
    ``body(server, rec)`` (which fills ``rec``, ``ok`` included), stop it, and return ``rec``: the
    config, topk, TP, pair kind, ``server_variant(extra)`` and ``fields``. An exception in the start
    or the body is recorded (``error``, the log tail: ``record_failure``) with ``ok`` False."""
    cfg = CONFIGS[name]
    kv = bool(getattr(oracle, "kv_sensitive", False))
    variant = server_variant(extra)
    rec: Dict[str, Any] = {"config": name, "topk": cfg["topk"], "tp": tp, "kv_sensitive": kv, **variant,
                           **(fields or {})}
    server = start_server(f"{kind}-{name}-tp{tp}" + ("-kv" if kv else "") + variant_label(variant),
                          config_server_args(name, models, tp, mem_fraction, extra), port, log_dir, env=env)
    try:
        wait_ready(server)
        rec["worker_class"] = spec_gate(server.url)["worker_class"]
        body(server, rec)
    except Exception as exc:  # keep the other runs going; the record says why this one failed
        record_failure(rec, server, exc)
        rec["ok"] = False
    finally:
        rec["exit_code"] = stop_server(server)
    return rec


# SGLang 0.5.12 sizes a KV pool as (memory free after loading the weights) - (memory free before)
# x (1 - --mem-fraction-static) (ModelRunner._profile_available_bytes): a server that allocates in
# between leaves it too little, so servers starting at once on one GPU race (on an H100 v2 topk 1
# exited "Not enough memory" twice: h100-2026-12-06f at 0.15, h100-2026-12-06g at 0.25). One server
# starts at a time; their phases still run in parallel.
_STARTING = threading.Lock()


def _ready_or_error(server: Any) -> Optional[BaseException]:
    """``wait_ready(server)``'s exception, or None once it is ready (raised later, after the start
    lock is released, where the record catches it)."""
    try:
        wait_ready(server)
    except Exception as exc:  # noqa: BLE001 - handed to run_config's handler
        return exc
    return None


def run_config(name: str, models: Path, oracle: Any, port: int, log_dir: Path, *, tp: int,
               switches_target: int, mem_fraction: float, phases: str = ALL_PHASES,
               auto_options: Optional[AutoOptions] = None, extra: Sequence[str] = ()) -> Dict[str, Any]:
    cfg = CONFIGS[name]
    kv = bool(getattr(oracle, "kv_sensitive", False))
    args = config_server_args(name, models, tp, mem_fraction, extra)
    variant = server_variant(extra)
    rec: Dict[str, Any] = {"config": name, "topk": cfg["topk"], "tp": tp, "kv_sensitive": kv, **variant,
                           "phases": {}}
    with _STARTING:
        try:
            server = start_server(f"gate-{name}-tp{tp}" + ("-kv" if kv else "") + variant_label(variant),
                                  args, port, log_dir)
        except (BenchError, ValueError) as exc:  # its port taken since the check, bad extra arguments
            rec.update(error=f"{type(exc).__name__}: {exc}", oracle_match=False, ok=False)
            return rec
        not_ready = _ready_or_error(server)
    url = server.url
    try:
        if not_ready is not None:
            raise not_ready
        rec["startup_s"] = round(server.ready_s, 1)
        g = spec_gate(url)
        log = server.log_text()
        rec.update(
            worker_class=g["worker_class"], spec_version=g["spec_version"], overlap=g["overlap"],
            expected_worker_class=cfg["expect"],
            worker_class_ok=g["worker_class"] == cfg["expect"],
            spec_path_log_line=spec_path_log_line(log),
            gate_startup_lines=gate_startup_lines(log),
            off_cuda_graph=g["off_cuda_graph"], max_running_requests=g["max_running_requests"],
        )
        if phases == FORCED_ON_ONLY:
            rec["only"] = FORCED_ON_ONLY
            rec["oracle_match"] = _phase_a(rec, url, oracle, cfg)
        elif phases != AUTO_ONLY:
            _classic_phases(rec, url, oracle, cfg, switches_target)
        if phases not in (CLASSIC_ONLY, FORCED_ON_ONLY):
            _auto_phase(rec, url, oracle, auto_options or AutoOptions())
    except Exception as exc:  # keep the other runs going; the record says why this one failed
        record_failure(rec, server, exc)
    finally:
        rec["exit_code"] = stop_server(server)
    return rec


def _phase_a(rec: Dict[str, Any], url: str, oracle: Any, cfg: Dict[str, Any]) -> bool:
    """Phase A, speculation on from the start (no OFF step yet), into ``rec``; returns whether the
    outputs equal the oracle's. Each request's verify count is compared with the oracle's trace:
    whether SGLang's own loop drafts as the oracle models it (on the KV-sensitive pair a draft that
    reads wrong K/V or a wrong hidden state verifies more often), the baseline for phase C's exact
    recovery check."""
    prompts_a = make_prompts(oracle.vocab, 16, 32, 1)
    ok, res = check_many(url, oracle, prompts_a, 128, 16)
    g = spec_gate(url)
    rec["phases"]["A_forced_on"] = {"oracle_match": ok, "decode_steps_on": g["decode_steps_on"],
                                    "accept_length_recent": g["accept_length_recent"]}
    rec["phases"]["A_forced_on"].update(forced_on_verify_ct(oracle, prompts_a, res, 128, cfg["num_steps"]))
    rec["forced_on_verify_ct_matches_oracle"] = rec["phases"]["A_forced_on"]["spec_verify_ct_matches_oracle"]
    rec["accept_length_before_off"] = g["accept_length_recent"]
    return ok


def _classic_phases(rec: Dict[str, Any], url: str, oracle: Any, cfg: Dict[str, Any], switches_target: int) -> None:
    """Phases A-F on the server at ``url`` (its threshold set to MAX_RR at start), into ``rec``."""
    vocab = oracle.vocab
    oks = [_phase_a(rec, url, oracle, cfg)]

    # B. forced OFF
    r = set_gate(url, threshold=1)
    g0 = spec_gate(url)
    ok, res = check_many(url, oracle, make_prompts(vocab, 16, 32, 2), 128, 16)
    g1 = spec_gate(url)
    off_steps = g1["decode_steps_off"] - g0["decode_steps_off"]
    rec["phases"]["B_forced_off"] = {
        "set_reply": r, "oracle_match": ok, "off_steps": off_steps,
        "on_steps": g1["decode_steps_on"] - g0["decode_steps_on"],
        "off_steps_cuda_graph": g1["off_steps_cuda_graph"] - g0["off_steps_cuda_graph"],
        "on_target_graph_replays": g1["on_target_graph_replays"] - g0["on_target_graph_replays"],
        "off_draft_extend_graph_replays": g1["off_draft_extend_graph_replays"] - g0["off_draft_extend_graph_replays"],
        "spec_verify_ct_per_request": [x["spec_verify_ct"] for x in res[:4]],
    }
    rec["off_steps_used_cuda_graph"] = (
        off_steps > 0 and rec["phases"]["B_forced_off"]["off_steps_cuda_graph"] == off_steps
        and rec["phases"]["B_forced_off"]["on_target_graph_replays"] == 0
    )
    oks.append(ok)

    # C. recovery after 200+ OFF steps, four requests at one position (bench/recovery_oracle.py)
    set_gate(url, threshold=1)
    prompts = recovery_prompts(vocab)
    box: Dict[str, Any] = {}
    # one batched request: prefilled together, so all four are at one position when ON starts
    t = threading.Thread(target=lambda: box.update(r=check_batch(url, oracle, prompts, 900)))
    g0 = spec_gate(url)
    start_off, start_resume = g0["decode_steps_off"], g0.get("off_resume_steps", 0)
    t.start()
    wait_steps(url, "decode_steps_off", start_off + 220)
    on_before = spec_gate(url)["decode_steps_on"]
    set_gate(url, threshold=MAX_RR)
    t.join()
    g = spec_gate(url)
    recovery_ok, recovery_res = box["r"]
    rec["phases"]["C_recovery"] = {"oracle_match": recovery_ok, "requests": len(prompts),
                                   **recovery_measured(g, start_off, start_resume, on_before, recovery_res)}
    # exact: what a current draft state accepts at these positions (the mean above scatters)
    rec["phases"]["C_recovery"].update(check_recovery(
        oracle, rec["phases"]["C_recovery"], cfg["num_steps"], rec["phases"]["C_recovery"]["resume_steps"]))
    rec["accept_length_after_on"] = g.get("accept_length_since_on")
    rec["accept_length_after_on_oracle"] = rec["phases"]["C_recovery"]["accept_length_first_on_steps_oracle"]
    rec["recovery_matches_oracle"] = rec["phases"]["C_recovery"]["recovery_matches_oracle"]
    oks.append(recovery_ok)

    # D. switching by flipping the threshold under load
    sw0 = spec_gate(url)["switches"]
    d_ok, waves, seed = True, 0, 100
    with flipping_threshold(url, MAX_RR, every_s=0.004) as sent:
        while spec_gate(url)["switches"] - sw0 < switches_target and waves < 150:
            ok, _ = check_many(url, oracle, make_prompts(vocab, 24, 32, seed), 192, 24)
            d_ok &= ok
            waves += 1
            seed += 1
    g = spec_gate(url)
    rec["phases"]["D_flip_threshold"] = {"oracle_match": d_ok, "waves": waves,
                                          "switches": g["switches"] - sw0, "flips_sent": sent["flips"],
                                          "flip_errors": sent["errors"], "first_flip_error": sent["first_error"],
                                          "slowest_flip_s": sent["slowest_s"]}
    oks.append(d_ok)

    # E. load crossing with hysteresis
    set_gate(url, threshold=8, hysteresis=2)
    sw0 = spec_gate(url)["switches"]
    e_ok = True
    for conc in (1, 4, 16, 32, 8, 2, 24, 1):
        ok, _ = check_many(url, oracle, make_prompts(vocab, conc, 32, 1000 + conc), 96, conc)
        e_ok &= ok
    g = spec_gate(url)
    rec["phases"]["E_load_crossing"] = {"oracle_match": e_ok, "switches": g["switches"] - sw0}
    oks.append(e_ok)

    # F. a threshold change takes effect at the next decode step
    set_gate(url, threshold=MAX_RR, hysteresis=0)
    box = {}
    t = threading.Thread(target=lambda: box.update(r=check_one(url, oracle, prompts[0], 400)))
    t.start()
    wait_steps(url, "decode_steps_on", spec_gate(url)["decode_steps_on"] + 20)
    reply = set_gate(url, threshold=1)
    g = spec_gate(url)
    t.join()
    g2 = spec_gate(url)
    rec["phases"]["F_runtime_change"] = {
        "reply": reply, "threshold_seen": g["threshold"],
        "switch_step": g2["last_switch"], "reply_decode_step": reply.get("decode_step"),
        "delay_steps": (g2["last_switch"]["step"] - reply["decode_step"]) if reply.get("decode_step") is not None and g2["last_switch"] else None,
        "oracle_match": box["r"]["match"],
    }
    oks.append(box["r"]["match"])

    rec["varied_lengths"] = varied_lengths_phase(url, oracle, cfg["num_steps"])
    rec["varied_lengths_ok"] = bool(rec["varied_lengths"]["oracle_match"]
                                    and rec["varied_lengths"]["recovery_matches_oracle"])
    g = spec_gate(url)
    rec["switches"] = g["switches"]
    rec["ranks"] = g["ranks"]
    rec["ranks_agree"] = len({(x["switches"], x["decode_steps_on"], x["decode_steps_off"]) for x in g["ranks"]}) == 1
    rec["oracle_match_a_to_f"] = all(oks)
    rec["oracle_match"] = all(oks) and bool(rec["varied_lengths"]["oracle_match"])
    # the decode-kernel OFF verify read the right keys on every sampled OFF step, every rank
    rec["off_target_attention"] = g.get("off_target_attention")
    _rank_proof(rec, g, "off_attention", active=g.get("off_target_attention") == DECODE_KERNEL)
    # v2: the early next-batch seq_lens of OFF steps equalled SGLang's on every sampled step
    rec["off_early_seq_lens"] = g.get("off_early_seq_lens")
    _rank_proof(rec, g, "off_early_seq_lens", active=bool(g.get("off_early_seq_lens")))
    # KV-only OFF draft extends stored the same K/V as SGLang's full one on every sampled step
    rec["off_draft_extend"] = g.get("off_draft_extend")
    rec["off_draft_extend_reason"] = g.get("off_draft_extend_reason")
    rec["off_resume_steps"] = [x.get("off_resume_steps", 0) for x in g["ranks"]]
    rec["off_kv_only_prefills"] = g.get("off_kv_only_prefills", 0)  # KV-only draft prefills while OFF
    rec["off_lean_draft_extend_steps"] = g.get("off_lean_draft_extend_steps", 0)
    # v1 lean OFF steps: the draft K/V's slots, seq_lens and greedy tokens checked on sampled steps
    rec["off_lean_v1"] = g.get("off_lean_v1")
    rec["off_lean_v1_steps"] = g.get("off_lean_v1_steps", 0)
    rec["off_verify_metadata"] = g.get("off_verify_metadata")  # fa3: the fused OFF verify metadata
    # v2 lean OFF verify (opt-in): SGLang's verify sampling drew the same tokens on sampled steps
    rec["off_lean_v2_verify"] = g.get("off_lean_v2_verify")
    rec["off_lean_v2_verify_steps"] = g.get("off_lean_v2_verify_steps", 0)
    _rank_proof(rec, g, "off_lean_v2_verify",
                active=g.get("off_lean_v2_verify") == "on" or g.get("off_lean_v2_verify_steps", 0) > 0)
    # v2 deferred draft K/V (opt-in): its checks count in off_kv_only's proof
    rec["off_deferred_draft_kv"] = g.get("off_deferred_draft_kv")
    rec["off_deferred_draft_kv_rows"] = g.get("off_deferred_draft_kv_rows", 0)
    rec["off_deferred_draft_kv_flushes"] = g.get("off_deferred_draft_kv_flushes", 0)
    _rank_proof(rec, g, "off_verify_metadata", active=g.get("off_verify_metadata") == "fused")
    # v2 lean future map (opt-in): no speculative batch resolved a slot an OFF step left, on sampled batches
    rec["off_lean_future_map"] = g.get("off_lean_future_map")
    rec["off_lean_future_map_steps"] = g.get("off_lean_future_map_steps", 0)
    _rank_proof(rec, g, "off_lean_future_map",
                active=g.get("off_lean_future_map") == "on" or g.get("off_lean_future_map_steps", 0) > 0)
    # KV reserve (opt-in, v2): the slots held beyond SGLang's bound were owned and not free, on sampled top-ups
    rec["kv_reserve"] = g.get("kv_reserve")
    rec["kv_reserve_topups"] = g.get("kv_reserve_topups", 0)
    _rank_proof(rec, g, "kv_reserve", active=g.get("kv_reserve") == "on" or rec["kv_reserve_topups"] > 0)
    # what the OFF path ran (the plugin's defaults change between versions: part of an entry's identity)
    rec["off_path"] = {"kv_only_runs": g.get("off_kv_only_runs"), "kv_only_prefills": rec["off_kv_only_prefills"] > 0,
                       "lean_draft_extend": rec["off_lean_draft_extend_steps"] > 0, "lean_v1": rec["off_lean_v1"]}
    if rec["off_deferred_draft_kv_rows"] > 0:  # a key only where it ran: earlier entries keep their identity
        rec["off_path"]["deferred_draft_kv"] = True
    if rec["off_lean_v2_verify_steps"] > 0:
        rec["off_path"]["lean_v2_verify"] = True
    if rec["off_lean_future_map_steps"] > 0:
        rec["off_path"]["lean_future_map"] = True
    if rec["kv_reserve_topups"] > 0:
        rec["off_path"]["kv_reserve"] = g.get("kv_reserve_tokens")
    # built (on) or run: it must have run and been checked, and never failed (no pass with 0 lean steps)
    _rank_proof(rec, g, "off_lean_v1", active=g.get("off_lean_v1") == "on" or g.get("off_lean_v1_steps", 0) > 0)
    _rank_proof(rec, g, "off_kv_only", active=g.get("off_draft_extend_reason") is None
                and "off_draft_extend" in g)
    # target prefills on the piecewise CUDA graph agreed with the eager forward on every sampled one
    rec["target_prefill"] = g.get("target_prefill")
    _rank_proof(rec, g, "target_prefill", active=g.get("target_prefill") == "piecewise-cuda-graph")
    rec["final_spec_gate"] = g


#: phase G: the prompt lengths of the four requests prefilled together, their output length; the
#: requests around them (count, at once, prompt and output length ranges, seed)
VARIED_GROUP_LENS = (9, 40, 77, 150)
VARIED_GROUP_NEW_TOKENS = 1200
VARIED_BACKGROUND, VARIED_CONCURRENCY = 24, 12
VARIED_PROMPT_RANGE, VARIED_OUTPUT_RANGE, VARIED_SEED = (4, 160), (16, 200), 4242
VARIED_MIN_OFF_STEPS = 220


def varied_prompts(vocab: int) -> Tuple[List[List[int]], List[Tuple[List[int], int]]]:
    """Phase G's requests: the group (VARIED_GROUP_LENS prompts) and the background (prompt,
    max_new_tokens) pairs, deterministic for one vocab."""
    rng = random.Random(VARIED_SEED)
    group = [make_prompts(vocab, 1, n, VARIED_SEED + n)[0] for n in VARIED_GROUP_LENS]
    background = [(make_prompts(vocab, 1, rng.randint(*VARIED_PROMPT_RANGE), VARIED_SEED + 1000 + i)[0],
                   rng.randint(*VARIED_OUTPUT_RANGE)) for i in range(VARIED_BACKGROUND)]
    return group, background


def varied_lengths_phase(url: str, oracle: Any, num_steps: int) -> Dict[str, Any]:
    """Phase G on the server at ``url`` (idle, any threshold): forced OFF, the group prefilled
    together, the background arriving and finishing around it, then ON with only the group
    running. Returns the ``varied_lengths`` record: ``oracle_match`` (every request),
    ``recovery_matches_oracle`` (the group's first ON steps, bench/recovery_oracle.py) and what
    they were computed from."""
    group, background = varied_prompts(oracle.vocab)
    set_gate(url, threshold=1, hysteresis=0)
    g0 = spec_gate(url)
    start_off, start_resume = g0["decode_steps_off"], g0.get("off_resume_steps", 0)
    box: Dict[str, Any] = {}
    t = threading.Thread(target=lambda: box.update(r=check_batch(url, oracle, group, VARIED_GROUP_NEW_TOKENS)))
    t.start()
    wait_steps(url, "decode_steps_off", start_off + 1)  # the group decodes: every later OFF step holds it
    with ThreadPoolExecutor(max_workers=VARIED_CONCURRENCY) as pool:
        bg = list(pool.map(lambda pm: check_one(url, oracle, pm[0], pm[1]), background))
    wait_steps(url, "decode_steps_off", start_off + VARIED_MIN_OFF_STEPS)
    on_before = spec_gate(url)["decode_steps_on"]
    set_gate(url, threshold=MAX_RR)
    t.join()
    g = spec_gate(url)
    group_ok, group_res = box["r"]
    phase = {
        "group_prompt_lens": list(VARIED_GROUP_LENS), "background_requests": len(background),
        "background_ok": all(r["match"] for r in bg), "group_ok": group_ok,
        "oracle_match": group_ok and all(r["match"] for r in bg),
        **recovery_measured(g, start_off, start_resume, on_before, group_res),
    }
    phase.update(check_recovery(oracle, phase, num_steps, phase["resume_steps"], prompts=group))
    return phase


def recovery_measured(g: Dict[str, Any], start_off: int, start_resume: int, on_before: int,
                      results: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    """What a recovery phase (C, G) measured, from ``g``, spec_gate read after its requests ended:
    OFF steps since ``start_off`` (the resume step is not one), ON steps since ``on_before``, the
    accept lengths of the first ON step(s) and how many steps those counted, resume steps since
    ``start_resume``, and each request's ``spec_verify_ct`` (``results`` of bench.oracle_check) --
    what :func:`bench.recovery_oracle.check_recovery` compares with the oracle."""
    return {
        "off_steps_before_on": g["decode_steps_off"] - start_off,
        "on_steps_after": g["decode_steps_on"] - on_before,
        "accept_length_first_on_step": g.get("accept_length_first_on_step"),
        "accept_length_first_on_steps": g.get("accept_length_since_on"),
        "steps_counted": g.get("steps_since_on"),
        "resume_steps": g.get("off_resume_steps", 0) - start_resume,
        "spec_verify_ct_per_request": [x["spec_verify_ct"] for x in results],
    }


def forced_on_verify_ct(oracle: Any, prompts: Sequence[Sequence[int]], results: Sequence[Dict[str, Any]],
                        max_new_tokens: int, num_steps: int) -> Dict[str, Any]:
    """``spec_verify_ct`` per request (``results`` in prompt order) next to the oracle's verify count
    for speculation on throughout (``Oracle.spec_decode``), and whether all are equal."""
    got = [r.get("spec_verify_ct") for r in results]
    want = [oracle.spec_decode(p, max_new_tokens, num_steps)["verify_ct"] for p in prompts]
    return {"spec_verify_ct": got, "spec_verify_ct_oracle": want, "spec_verify_ct_matches_oracle": got == want}


# -- the auto phase ------------------------------------------------------------------------------


def _auto_phase(rec: Dict[str, Any], url: str, oracle: Any, opts: AutoOptions) -> None:
    """The auto threshold under a sweeping load (module docstring), into ``rec["auto"]``; also
    ``auto_ok``, ``ranks_agree_auto``, and ``oracle_match`` (and-ed with A-F's when they ran)."""
    before = spec_gate(url)
    reply = set_gate(url, threshold=AUTO)
    lock = threading.Lock()
    counter = {"n": 0}

    def send(_worker: int) -> Dict[str, Any]:
        with lock:
            seed = AUTO_PROMPT_SEED + counter["n"]
            counter["n"] += 1
        prompt = make_prompts(oracle.vocab, 1, AUTO_PROMPT_LEN, seed)[0]
        r = check_one(url, oracle, prompt, opts.output_len)
        return {"seed": seed, "match": r["match"], "first_mismatch": r["first_mismatch"]}

    loop = ClosedLoop(send, opts.peak, active=lambda t: triangle_concurrency(t, opts.peak, opts.period_s))
    polls: List[Dict[str, Any]] = []
    loop.start()
    try:
        while loop.elapsed() < opts.seconds + opts.extra_s:
            try:
                polls.append(spec_gate(url))
            except Exception:  # noqa: BLE001 - a lost poll; the final read decides
                pass
            if loop.elapsed() >= opts.seconds and polls and auto_learned(before, polls[-1]):
                break
            time.sleep(opts.poll_s)
    finally:
        rec_stopped = loop.stop()
        seconds = round(loop.elapsed(), 1)
    after = idle_gate(url)
    out = auto_record(before, after, reply, loop.snapshot(), loop.errors, polls)
    out["seconds"] = seconds
    out["all_requests_ended"] = rec_stopped
    rec["auto"] = out
    rec["auto_ok"] = out["ok"]
    rec["ranks_agree_auto"] = out["ranks_agree_auto"]
    rec["oracle_match"] = bool(rec.get("oracle_match", True)) and out["oracle_match"]


def idle_gate(url: str, tries: int = 10, wait_s: float = 0.2) -> Dict[str, Any]:
    """spec_gate once the server has stopped decoding (two reads with the same decode steps), so
    that every rank's counters are read at one decode step."""
    g = spec_gate(url)
    for _ in range(tries):
        time.sleep(wait_s)
        g2 = spec_gate(url)
        if _steps(g2) == _steps(g):
            return g2
        g = g2
    return g


def _steps(gate: Dict[str, Any]) -> int:
    return (gate.get("decode_steps_on") or 0) + (gate.get("decode_steps_off") or 0)


def _delta(before: Dict[str, Any], after: Dict[str, Any], key: str) -> Optional[int]:
    a, b = after.get(key), before.get(key)
    return None if a is None else a - (b or 0)


def auto_learned(before: Dict[str, Any], now: Dict[str, Any]) -> bool:
    """The auto threshold has probed and switched since ``before`` (the load may stop)."""
    return (_delta(before, now, "auto_probes") or 0) > 0 and (_delta(before, now, "switches") or 0) > 0


def ranks_agree_auto(gate: Dict[str, Any]) -> bool:
    """Every TP rank in ``gate["ranks"]`` took the same decisions: equal ``decisions_digest``
    (present), ``switches``, ``decode_steps_on`` and ``decode_steps_off``, all in auto mode. False
    without ranks."""
    ranks = gate.get("ranks") or []
    if not ranks or any(r.get("decisions_digest") is None for r in ranks):
        return False
    keys = {(r.get("decisions_digest"), r.get("switches"), r.get("decode_steps_on"), r.get("decode_steps_off"))
            for r in ranks}
    return len(keys) == 1 and all(r.get("mode") in (None, MODE_AUTO) for r in ranks)


def proof_counters(gate: Dict[str, Any], suffix: str) -> Dict[str, List[int]]:
    """Per proof of PROOF_KEYS, ``<key>_<suffix>`` of every rank (0 where a rank lacks it)."""
    ranks = gate.get("ranks") or []
    return {k: [r.get(f"{k}_{suffix}") or 0 for r in ranks] for k in PROOF_KEYS}


def auto_record(before: Dict[str, Any], after: Dict[str, Any], reply: Dict[str, Any],
                results: Sequence[Dict[str, Any]], errors: Sequence[str],
                polls: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    """The ``auto`` record from spec_gate ``before`` the phase and ``after`` it (the server idle),
    the ``/set_internal_state`` ``reply``, the requests' oracle results, the request errors and
    the spec_gate polls during the load. ``ok``: every check of ``checks`` holds; ``failed``
    names those that do not."""
    mismatches = proof_counters(after, "mismatches")
    digests = [r.get("decisions_digest") for r in after.get("ranks") or []]
    sizes = [g.get("last_decode_batch_size") for g in polls if g.get("last_decode_batch_size")]
    bad = next((r for r in results if not r.get("match")), None)
    out: Dict[str, Any] = {
        "set_reply": reply,
        "oracle_match": bool(results) and not errors and all(r.get("match") for r in results),
        "requests": len(results), "request_errors": len(errors), "request_error_examples": list(errors[:3]),
        "first_mismatch": bad,
        "mode": after.get("mode"),
        "probes": _delta(before, after, "auto_probes"),
        "probe_steps": _delta(before, after, "auto_probe_steps"),
        "probe_share": after.get("auto_probe_share"),
        "switches": _delta(before, after, "switches"),
        "decode_steps_on": _delta(before, after, "decode_steps_on"),
        "decode_steps_off": _delta(before, after, "decode_steps_off"),
        "decisions_digest": digests,
        "decisions_digest_equal": bool(digests) and None not in digests and len(set(digests)) == 1,
        "ranks_agree_auto": ranks_agree_auto(after),
        "mismatches": mismatches,
        "checks": proof_counters(after, "checks"),
        "mismatches_zero": all(v == 0 for vals in mismatches.values() for v in vals),
        "crossover": after.get("threshold"),
        "auto_reason": after.get("auto_reason"),
        "auto_buckets": after.get("auto_buckets"),
        "batch_sizes_seen": [min(sizes), max(sizes)] if sizes else None,
        "polls": len(polls),
        "polls_on": sum(1 for g in polls if g.get("spec_enabled") is True),
        "polls_off": sum(1 for g in polls if g.get("spec_enabled") is False),
    }
    checks = {
        "set_auto": isinstance(reply, dict) and reply.get("updated") is True,
        "oracle_match": out["oracle_match"],
        "mode_auto": out["mode"] == MODE_AUTO,
        "probed": (out["probes"] or 0) > 0,
        "switched": (out["switches"] or 0) > 0,
        "mismatches_zero": out["mismatches_zero"] and bool(after.get("ranks")),
        "ranks_agree_auto": out["ranks_agree_auto"],
    }
    out["failed"] = [k for k, v in checks.items() if not v]
    out["ok"] = not out["failed"]
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    """The CLI; returns 0 when every configuration ran and matched the oracle, else 1 (2: bad options)."""
    ap = argparse.ArgumentParser(prog="python -m bench.gate_correctness", description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=Path, required=True, help="dir from bench.synthetic_models")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--switches", type=int, default=1000)
    ap.add_argument("--parallel", type=int, default=3,
                    help="servers at once on the GPU(s) (they start one after another: SGLang sizes a KV "
                         "pool from the memory free around its own start)")
    ap.add_argument("--mem-fraction", type=float, default=0.15)
    ap.add_argument("--log-dir", type=Path, default=Path("/tmp/specconsole-logs"))
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--base-port", type=int, default=31000)
    ap.add_argument("server_args", nargs=argparse.REMAINDER,
                    help="after --: more SGLang arguments for every server (e.g. -- --attention-backend fa3); "
                         "recorded in each entry (attention_backend, cuda_graph, extra_server_args)")
    ap.add_argument("--kv-sensitive", action="store_true",
                    help="run on the KV-sensitive pair (bench.synthetic_models --kv-sensitive): wrong or "
                         "stale K/V then changes outputs or accept lengths; --models must hold one (or --build it)")
    ap.add_argument("--build", metavar="PRESET", default=None,
                    help="first write the synthetic pair of this preset (tiny, 1b, 8b) into --models")
    ap.add_argument("--p-wrong", type=float, default=0.2, help="with --build (default 0.2)")
    ap.add_argument("--seed", type=int, default=0, help="with --build (default 0)")
    which = ap.add_mutually_exclusive_group()
    which.add_argument("--auto", action="store_true",
                       help="only the auto-threshold phase (merged into an existing entry of the same config and TP)")
    which.add_argument("--skip-auto", action="store_true", help="only phases A-F")
    which.add_argument("--forced-on-only", action="store_true",
                       help="only phase A (speculation on from the start): outputs and each request's verify "
                            "count against the oracle, a quick check of the ON path (a few servers at once, "
                            "e.g. one per switch variable); entries carry only = forced-on")
    d = AutoOptions()
    ap.add_argument("--auto-seconds", type=float, default=d.seconds, metavar="S",
                    help=f"auto phase: seconds of sweeping load (default {d.seconds:g})")
    ap.add_argument("--auto-period", type=float, default=d.period_s, metavar="S",
                    help=f"auto phase: seconds of one 1 -> peak -> 1 wave (default {d.period_s:g})")
    ap.add_argument("--auto-peak", type=int, default=d.peak, metavar="C",
                    help=f"auto phase: most requests in flight (default {d.peak}, at most {MAX_RR})")
    ap.add_argument("--auto-output-len", type=int, default=d.output_len, metavar="N",
                    help=f"auto phase: tokens per request (default {d.output_len})")
    ap.add_argument("--auto-extra-seconds", type=float, default=d.extra_s, metavar="S",
                    help=f"auto phase: at most this much longer until the gate probed and switched "
                         f"(default {d.extra_s:g})")
    a = ap.parse_args(argv)
    extra = a.server_args[1:] if a.server_args[:1] == ["--"] else a.server_args
    try:
        server_variant(extra)
    except ValueError as exc:
        ap.error(str(exc))
    unknown = [n for n in a.configs.split(",") if n not in CONFIGS]
    if unknown or not a.configs:
        ap.error(f"--configs: unknown {','.join(unknown) or repr(a.configs)}; choose from {','.join(CONFIGS)}")
    if a.parallel < 1 or a.tp < 1 or a.switches < 1 or not 0 < a.mem_fraction < 1:
        ap.error("--parallel, --tp and --switches must be >= 1, --mem-fraction in (0, 1)")
    problem = out_problem(a.out) or ports_problem(a.base_port, a.configs.split(","))
    if problem:
        ap.error(problem)
    if not 1 <= a.auto_peak <= MAX_RR:
        ap.error(f"--auto-peak must be 1..{MAX_RR}, got {a.auto_peak}")
    if not (a.auto_seconds > 0 and a.auto_period > 0 and a.auto_output_len >= 1 and a.auto_extra_seconds >= 0):
        ap.error("--auto-seconds, --auto-period and --auto-output-len must be > 0, --auto-extra-seconds >= 0")
    phases = (AUTO_ONLY if a.auto else CLASSIC_ONLY if a.skip_auto else FORCED_ON_ONLY if a.forced_on_only
              else ALL_PHASES)
    opts = AutoOptions(seconds=a.auto_seconds, period_s=a.auto_period, peak=a.auto_peak,
                       output_len=a.auto_output_len, extra_s=a.auto_extra_seconds)

    oracle = load_pair(ap, a)
    names = a.configs.split(",")
    with ThreadPoolExecutor(max_workers=a.parallel) as pool:
        futs = [pool.submit(run_config, n, a.models, oracle, a.base_port + 10 * i, a.log_dir,
                            tp=a.tp, switches_target=a.switches, mem_fraction=a.mem_fraction,
                            phases=phases, auto_options=opts, extra=extra)
                for i, n in enumerate(names)]
        records = []
        for f in futs:  # merged as each one ends: a run cut short keeps what finished
            r = f.result()
            merge_result(a.out, r, AUTO_ENTRY_KEYS if phases == AUTO_ONLY else None)
            print(json.dumps(result_line(r, phases)), flush=True)
            records.append(r)
    return 0 if all(r.get("oracle_match") is True and not r.get("error") for r in records) else 1


def out_problem(out: Path) -> Optional[str]:
    """Why the results file ``out`` cannot be written (its folder missing or read-only, or it holds
    something other than a JSON list of entries, which merging would lose), or None."""
    folder = out.parent
    if out.is_dir():
        return f"--out {out} is a directory"
    if not folder.is_dir():
        return f"--out {out}: no folder {folder}"
    if not os.access(folder, os.W_OK):
        return f"--out {out}: {folder} is not writable"
    if out.exists():
        try:
            held = json.loads(out.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            return f"--out {out}: not a gate_correctness results file ({exc}); give a new file or one it wrote"
        if not isinstance(held, list):
            return (f"--out {out}: holds a JSON {type(held).__name__}, not the list of entries gate_correctness "
                    f"writes (it would be lost); give a new file or one it wrote")
    return None


def ports_problem(base_port: int, configs: Sequence[str]) -> Optional[str]:
    """Why the servers' ports (``base_port`` + 10 per config) cannot be used, or None: out of
    1024-65535, or already listened on at 127.0.0.1 (that server would be measured instead)."""
    ports = [base_port + 10 * i for i in range(len(configs))]
    if ports[0] < 1024 or ports[-1] > 65535:
        return f"--base-port {base_port}: the servers' ports {ports[0]}-{ports[-1]} must lie in 1024-65535"
    for name, port in zip(configs, ports):
        if port_in_use(port):
            return (f"--base-port {base_port}: port {port} ({name}'s server) is already in use on 127.0.0.1; "
                    f"stop what listens there or give another --base-port")
    return None


def load_pair(ap: argparse.ArgumentParser, a: argparse.Namespace) -> Any:
    """The Oracle of ``a.models`` (written first with ``--build``); exits 2 (``ap.error``) when
    there is none, the preset or p is unknown, or the pair is not the kind ``--kv-sensitive`` asks."""
    from bench.synthetic_models import PRESETS, Oracle, generate_pair

    if a.build is not None:
        if a.build not in PRESETS:
            ap.error(f"--build: unknown preset {a.build!r}; choose from {sorted(PRESETS)}")
        if not 0.0 <= a.p_wrong <= 1.0:
            ap.error(f"--p-wrong must be in [0, 1], got {a.p_wrong}")
        generate_pair(a.models, preset=a.build, p_wrong=a.p_wrong, seed=a.seed, kv_sensitive=a.kv_sensitive)
    try:
        oracle = Oracle.load(a.models / "oracle.json")
    except (OSError, ValueError) as exc:
        ap.error(f"no synthetic pair at {a.models} ({type(exc).__name__}: {exc}); write one with --build PRESET")
    if oracle.kv_sensitive != a.kv_sensitive:
        ap.error(f"{a.models} holds a {'KV-sensitive' if oracle.kv_sensitive else 'default'} pair: "
                 + ("pass --kv-sensitive" if oracle.kv_sensitive else "build one with --build PRESET --kv-sensitive"))
    return oracle


#: the keys of a run's JSON line (phases A-F)
LINE_KEYS = ("config", "tp", "kv_sensitive", "worker_class", "oracle_match", "switches", "ranks_agree",
             "off_steps_used_cuda_graph", "off_target_attention", "off_attention_proof_ok",
             "off_early_seq_lens_proof_ok", "off_draft_extend", "off_kv_only_proof_ok", "off_lean_v1",
             "off_lean_v1_proof_ok", "off_lean_v2_verify", "off_lean_v2_verify_proof_ok", "off_deferred_draft_kv",
             "off_deferred_draft_kv_rows", "off_lean_future_map", "off_lean_future_map_proof_ok", "kv_reserve", "kv_reserve_proof_ok",
             "target_prefill", "target_prefill_proof_ok", "accept_length_before_off", "accept_length_after_on", "accept_length_after_on_oracle",
             "recovery_matches_oracle", "forced_on_verify_ct_matches_oracle", "varied_lengths_ok", "error")


#: the keys of a ``--forced-on-only`` run's JSON line
FORCED_ON_LINE_KEYS = ("config", "tp", "kv_sensitive", "worker_class", "server_env", "oracle_match",
                       "accept_length_before_off", "forced_on_verify_ct_matches_oracle", "error")


def result_line(rec: Dict[str, Any], phases: str = ALL_PHASES) -> Dict[str, Any]:
    """The one JSON line printed for a run: A-F's keys (unless auto-only), then ``auto_ok``,
    ``ranks_agree_auto`` and ``auto`` without its ``auto_buckets`` (in the file)."""
    keys = (("config", "tp", "kv_sensitive", "worker_class", "oracle_match", "error") if phases == AUTO_ONLY
            else FORCED_ON_LINE_KEYS if phases == FORCED_ON_ONLY else LINE_KEYS)
    line = {k: rec.get(k) for k in keys}
    if phases not in (CLASSIC_ONLY, FORCED_ON_ONLY):
        line["auto_ok"] = rec.get("auto_ok")
        line["ranks_agree_auto"] = rec.get("ranks_agree_auto")
        auto = rec.get("auto")
        line["auto"] = {k: v for k, v in auto.items() if k != "auto_buckets"} if isinstance(auto, dict) else None
    return line


def _rank_proof(rec: Dict[str, Any], gate: Dict[str, Any], key: str, active: bool) -> None:
    """``rec[KEY_checks]``/``rec[KEY_mismatches]`` per TP rank from ``gate["ranks"]``, and
    ``rec[KEY_proof_ok]``: the run-time check ``KEY`` ran on every rank and never failed (true when
    the mechanism it checks was not active)."""
    checks = [x.get(f"{key}_checks", 0) for x in gate["ranks"]]
    mismatches = [x.get(f"{key}_mismatches", 0) for x in gate["ranks"]]
    rec[f"{key}_checks"], rec[f"{key}_mismatches"] = checks, mismatches
    rec[f"{key}_proof_ok"] = not active or (min(checks) > 0 and max(mismatches) == 0)


def merge_result(out: Path, rec: Dict[str, Any], keys: Optional[Sequence[str]] = None) -> None:
    """Write ``rec`` into the JSON list at ``out``, replacing an entry of the same (config, tp, kind
    of pair: ``kv_sensitive``, absent = the default pair).

    With ``keys`` (an auto-only run: AUTO_ENTRY_KEYS) an entry of the same (config, tp) that has
    phases A-F keeps them and gets only ``keys`` from ``rec``, ``auto_error`` when the run failed,
    and ``oracle_match`` = A-F's and the auto phase's; otherwise ``rec`` replaces it (or is added).
    """
    existing = json.loads(out.read_text()) if out.exists() else []
    same = [r for r in existing if _same_run(r, rec)]
    if keys is not None and same and same[-1].get("phases"):
        entry = same[-1]
        for k in keys:
            entry[k] = rec.get(k)
        if rec.get("error"):
            entry["auto_error"] = rec["error"]
            entry["auto_ok"] = False
        else:
            entry.pop("auto_error", None)
        base = entry.get("oracle_match_a_to_f", entry.get("oracle_match"))
        auto = rec.get("auto") if isinstance(rec.get("auto"), dict) else {}
        entry["oracle_match"] = bool(base) and auto.get("oracle_match") is True
        write_json(out, existing)
        return
    keep = [r for r in existing if not _same_run(r, rec)]
    write_json(out, keep + [rec])


def _same_run(entry: Any, rec: Dict[str, Any]) -> bool:
    """``entry`` is a run of ``rec``'s configuration, TP size, kind of pair, extra server
    arguments, ``server_env`` (the plugin's switch variables it ran with; entries without them are
    the harness's defaults: triton, CUDA graphs on, no switch set), ``off_path`` (what the OFF
    path ran, from ``spec_gate``: a run under other plugin defaults is another entry) and ``only``
    (a phase-A-only run never replaces a whole one)."""
    return (isinstance(entry, dict) and (entry.get("config"), entry.get("tp")) == (rec["config"], rec["tp"])
            and bool(entry.get("kv_sensitive")) == bool(rec.get("kv_sensitive"))
            and list(entry.get("extra_server_args") or []) == list(rec.get("extra_server_args") or [])
            and dict(entry.get("server_env") or {}) == dict(rec.get("server_env") or {})
            and entry.get("off_path") == rec.get("off_path")
            and entry.get("only") == rec.get("only"))


def variant_label(variant: Dict[str, Any]) -> str:
    """A server-name suffix for a non-default ``server_variant``: ``-fa3``, ``-eager``, ``-maxbs8``."""
    out = "" if variant["attention_backend"] == "triton" else f"-{variant['attention_backend']}"
    if not variant["cuda_graph"]:
        out += "-eager"
    elif variant["cuda_graph_max_bs"] != MAX_RR:
        out += f"-maxbs{variant['cuda_graph_max_bs']}"
    return out


if __name__ == "__main__":
    sys.exit(main())
