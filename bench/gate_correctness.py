"""GPU: the speculation gate never changes greedy output, on every EAGLE worker path.

For each configuration (v2 topk 1, v1 topk 1, v1 topk 4; optionally TP=2) it starts a patched
SGLang 0.5.12 server on the synthetic pair and checks, against the oracle chain:

A. forced ON (threshold = max running requests): outputs exact, accept length measured;
B. forced OFF (threshold 1): outputs exact, every OFF step replayed the OFF CUDA graph and
   no ON target graph ran;
C. recovery: four long requests run 200+ OFF steps, then speculation turns on: the accept length
   of the first ON steps, which must equal the oracle's for a current draft state
   (bench/recovery_oracle.py);
D. switching: the threshold flips between 1 and max every few ms under load until at least
   ``--switches`` switches happened; outputs exact;
E. load crossing: threshold 8 / hysteresis 2 with a load that ramps 1 -> 32 -> 1 requests;
F. a runtime threshold change takes effect at the next decode step.

Usage (GPU machine): python -m bench.gate_correctness --models DIR --out bench/results/gate-correctness.json
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Dict

from bench.oracle_check import check_batch, check_many, check_one, make_prompts
from bench.recovery_oracle import check_recovery, recovery_prompts
from bench.server_harness import (
    CONFIGS,
    eagle3_args,
    record_failure,
    gate_startup_lines,
    set_gate,
    spec_gate,
    spec_path_log_line,
    start_server,
    stop_server,
    wait_ready,
    write_json,
)
from server_patch.contract import THRESHOLD_FLAG
from server_patch.off_attention import DECODE_KERNEL

MAX_RR = 64


def _wait_steps(url: str, key: str, target: int, timeout_s: float = 120) -> Dict[str, Any]:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        g = spec_gate(url)
        if g[key] >= target:
            return g
        time.sleep(0.05)
    raise TimeoutError(f"{key} did not reach {target}")


def run_config(name: str, models: Path, oracle: Any, port: int, log_dir: Path, *, tp: int,
               switches_target: int, mem_fraction: float) -> Dict[str, Any]:
    cfg = CONFIGS[name]
    args = eagle3_args(
        str(models / "target"), str(models / "draft"),
        topk=cfg["topk"], num_steps=cfg["num_steps"], num_draft_tokens=cfg["num_draft_tokens"],
        overlap=cfg["overlap"], max_running_requests=MAX_RR, cuda_graph_max_bs=MAX_RR,
        mem_fraction=mem_fraction,
    ) + ["--tp-size", str(tp), THRESHOLD_FLAG, str(MAX_RR)]
    rec: Dict[str, Any] = {"config": name, "topk": cfg["topk"], "tp": tp, "phases": {}}
    server = start_server(f"gate-{name}-tp{tp}", args, port, log_dir)
    url = server.url
    try:
        wait_ready(server)
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
        vocab = oracle.vocab
        oks = []

        # A. forced ON
        ok, res = check_many(url, oracle, make_prompts(vocab, 16, 32, 1), 128, 16)
        g = spec_gate(url)
        rec["phases"]["A_forced_on"] = {"oracle_match": ok, "decode_steps_on": g["decode_steps_on"],
                                        "accept_length_recent": g["accept_length_recent"]}
        rec["accept_length_before_off"] = g["accept_length_recent"]
        oks.append(ok)

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
        _wait_steps(url, "decode_steps_off", start_off + 220)
        on_before = spec_gate(url)["decode_steps_on"]
        set_gate(url, threshold=MAX_RR)
        t.join()
        g = spec_gate(url)
        recovery_ok, recovery_res = box["r"]
        rec["phases"]["C_recovery"] = {
            "oracle_match": recovery_ok, "requests": len(prompts),
            "off_steps_before_on": g["decode_steps_off"] - start_off,
            "on_steps_after": g["decode_steps_on"] - on_before,
            "accept_length_first_on_steps": g.get("accept_length_since_on"),
            "accept_length_first_on_step": g.get("accept_length_first_on_step"),
            "steps_counted": g.get("steps_since_on"),
            "resume_steps": g.get("off_resume_steps", 0) - start_resume,
            "spec_verify_ct_per_request": [x["spec_verify_ct"] for x in recovery_res],
        }
        # exact: what a current draft state accepts at these positions (the mean above scatters)
        rec["phases"]["C_recovery"].update(check_recovery(
            oracle, rec["phases"]["C_recovery"], cfg["num_steps"], rec["phases"]["C_recovery"]["resume_steps"]))
        rec["accept_length_after_on"] = g.get("accept_length_since_on")
        rec["accept_length_after_on_oracle"] = rec["phases"]["C_recovery"]["accept_length_first_on_steps_oracle"]
        rec["recovery_matches_oracle"] = rec["phases"]["C_recovery"]["recovery_matches_oracle"]
        oks.append(recovery_ok)

        # D. switching by flipping the threshold under load
        stop = threading.Event()
        flips = {"n": 0}

        def toggler():
            v = 1
            while not stop.is_set():
                set_gate(url, threshold=v)
                flips["n"] += 1
                v = MAX_RR if v == 1 else 1
                time.sleep(0.004)

        sw0 = spec_gate(url)["switches"]
        th = threading.Thread(target=toggler)
        th.start()
        d_ok, waves, seed = True, 0, 100
        try:
            while spec_gate(url)["switches"] - sw0 < switches_target and waves < 150:
                ok, _ = check_many(url, oracle, make_prompts(vocab, 24, 32, seed), 192, 24)
                d_ok &= ok
                waves += 1
                seed += 1
        finally:
            stop.set()
            th.join()
        g = spec_gate(url)
        rec["phases"]["D_flip_threshold"] = {"oracle_match": d_ok, "waves": waves,
                                              "switches": g["switches"] - sw0, "flips_sent": flips["n"]}
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
        _wait_steps(url, "decode_steps_on", spec_gate(url)["decode_steps_on"] + 20)
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
        g = spec_gate(url)
        rec["switches"] = g["switches"]
        rec["ranks"] = g["ranks"]
        rec["ranks_agree"] = len({(x["switches"], x["decode_steps_on"], x["decode_steps_off"]) for x in g["ranks"]}) == 1
        rec["oracle_match"] = all(oks)
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
        _rank_proof(rec, g, "off_kv_only", active=g.get("off_draft_extend_reason") is None
                    and "off_draft_extend" in g)
        rec["final_spec_gate"] = g
    except Exception as exc:  # keep the other runs going; the record says why this one failed
        record_failure(rec, server, exc)
    finally:
        rec["exit_code"] = stop_server(server)
    return rec


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.gate_correctness", description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=Path, required=True, help="dir from bench.synthetic_models")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--switches", type=int, default=1000)
    ap.add_argument("--parallel", type=int, default=3, help="servers at once on the GPU(s)")
    ap.add_argument("--mem-fraction", type=float, default=0.15)
    ap.add_argument("--log-dir", type=Path, default=Path("/tmp/specconsole-logs"))
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--base-port", type=int, default=31000)
    a = ap.parse_args()

    from bench.synthetic_models import Oracle

    oracle = Oracle.load(a.models / "oracle.json")
    names = a.configs.split(",")
    with ThreadPoolExecutor(max_workers=a.parallel) as pool:
        futs = [pool.submit(run_config, n, a.models, oracle, a.base_port + 10 * i, a.log_dir,
                            tp=a.tp, switches_target=a.switches, mem_fraction=a.mem_fraction)
                for i, n in enumerate(names)]
        for f in futs:  # merged as each one ends: a run cut short keeps what finished
            r = f.result()
            merge_result(a.out, r)
            print(json.dumps({k: r.get(k) for k in (
                "config", "tp", "worker_class", "oracle_match", "switches", "ranks_agree",
                "off_steps_used_cuda_graph", "off_target_attention", "off_attention_proof_ok",
                "off_early_seq_lens_proof_ok", "off_draft_extend", "off_kv_only_proof_ok",
                "accept_length_before_off", "accept_length_after_on", "accept_length_after_on_oracle",
                "recovery_matches_oracle", "error")}), flush=True)


def _rank_proof(rec: Dict[str, Any], gate: Dict[str, Any], key: str, active: bool) -> None:
    """``rec[KEY_checks]``/``rec[KEY_mismatches]`` per TP rank from ``gate["ranks"]``, and
    ``rec[KEY_proof_ok]``: the run-time check ``KEY`` ran on every rank and never failed (true when
    the mechanism it checks was not active)."""
    checks = [x.get(f"{key}_checks", 0) for x in gate["ranks"]]
    mismatches = [x.get(f"{key}_mismatches", 0) for x in gate["ranks"]]
    rec[f"{key}_checks"], rec[f"{key}_mismatches"] = checks, mismatches
    rec[f"{key}_proof_ok"] = not active or (min(checks) > 0 and max(mismatches) == 0)


def merge_result(out: Path, rec: Dict[str, Any]) -> None:
    """Write ``rec`` into the JSON list at ``out``, replacing an entry of the same (config, tp)."""
    existing = json.loads(out.read_text()) if out.exists() else []
    keep = [r for r in existing if (r.get("config"), r.get("tp")) != (rec["config"], rec["tp"])]
    write_json(out, keep + [rec])


if __name__ == "__main__":
    main()
