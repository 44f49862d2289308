"""What the first ON steps after OFF steps must accept, exactly, with the synthetic pair.

Issue #3 asks that after 200+ OFF steps "the first ON steps reach the configured accept length".
A mean over a few ON steps scatters around the configured value (2.95 for p = 0.2, 3 steps)
because the corrupted keys are a fixed set: one position's four requests can all meet one. The
synthetic pair's oracle removes that noise: a draft whose KV cache and hidden state are current
accepts exactly ``Oracle.accept_lengths_from`` at each position, so the measured accept length of
the first ON batch, and of the first ``steps_since_on`` ON batches, must *equal* the prediction. A
stale draft state would draft from an old token and accept 1 per request. With a KV-sensitive pair
(``bench.synthetic_models --kv-sensitive``) the draft reads the tokens before it through its K/V
cache, so a draft K/V left wrong by the OFF steps breaks the equality too (the default pair's draft
ignores its K/V: there only the hidden state counts).

Assumes the recovery phase's requests were prefilled in one batch (they then share one position;
``bench.gate_correctness`` phase C sends them together and records whether the prediction held).

``python -m bench.recovery_oracle FILE [--models DIR | --vocab V (--p-wrong P | --p-wrong-families
P0,P1,..) --seed S [--kv-sensitive]]`` adds the prediction to each entry of a ``bench.gate_correctness`` JSON list
written before phase C recorded it, and prints one line per entry. Exit status 0 when every entry equals the prediction, 1 when
one does not or could not be checked (no recovery phase, malformed, not measured), 2 for a file
or oracle it cannot read.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from bench.oracle_check import make_prompts

RECOVERY_REQUESTS = 4  # phase C's requests: make_prompts(vocab, RECOVERY_REQUESTS, 32, seed=3)
RECOVERY_PROMPT_LEN = 32
RECOVERY_PROMPT_SEED = 3


def recovery_prompts(vocab: int) -> List[List[int]]:
    """Phase C's prompts (shape [RECOVERY_REQUESTS][RECOVERY_PROMPT_LEN] word ids)."""
    return make_prompts(vocab, RECOVERY_REQUESTS, RECOVERY_PROMPT_LEN, RECOVERY_PROMPT_SEED)


def predict_recovery(oracle: Any, prompts: Sequence[Sequence[int]], committed: int, num_rounds: int,
                     num_steps: int) -> Dict[str, float]:
    """Accept lengths a perfect draft state gives when speculation resumes after ``committed``
    output tokens of every prompt (all requests in every batch, as SGLang's decode batch holds them).

    Returns ``{"first_on_step": mean accept length of the first ON batch, "first_on_steps": accepted
    tokens / verifies over the first ``num_rounds`` ON batches}`` -- the same ratios as
    ``spec_gate``'s ``accept_length_first_on_step`` and ``accept_length_since_on``
    (server_patch/gate.py ``record_accept``). Raises ValueError for an empty ``prompts`` or a
    count < 1.
    """
    if not prompts:
        raise ValueError("no prompts")
    rounds = [oracle.accept_lengths_from(p, committed, num_rounds, num_steps) for p in prompts]
    return {
        "first_on_step": sum(r[0] for r in rounds) / len(rounds),
        "first_on_steps": sum(map(sum, rounds)) / (len(rounds) * num_rounds),
    }


def committed_at_on(off_steps: int, resume_steps: int) -> int:
    """Output tokens of each recovery request when its first speculative step runs: the prefill's
    token, one per OFF step, and one for the resume step (a full OFF step, server_patch
    ``off_resume_steps``) when the KV-only OFF draft extend ran."""
    return 1 + off_steps + resume_steps


def check_recovery(oracle: Any, phase: Dict[str, Any], num_steps: int,
                   resume_steps: int, prompts: Optional[Sequence[Sequence[int]]] = None) -> Dict[str, Any]:
    """The prediction for one recovery phase record (``C_recovery``; ``prompts``: the requests that
    were prefilled together and were the only ones running when speculation resumed, default phase
    C's) and whether the measurement equals it.

    ``phase`` needs ``off_steps_before_on`` and ``steps_counted`` (spec_gate's ``steps_since_on``);
    ``accept_length_first_on_step`` and ``accept_length_first_on_steps`` are the measurements. Returns
    ``{"committed_at_on", "accept_length_first_on_step_oracle",
    "accept_length_first_on_steps_oracle", "recovery_matches_oracle"}``: the predictions are None
    when the phase counted no ON step, the verdict also when a measurement is missing.
    """
    committed = committed_at_on(phase["off_steps_before_on"], resume_steps)
    rounds = phase.get("steps_counted") or 0
    out: Dict[str, Any] = {"committed_at_on": committed, "accept_length_first_on_step_oracle": None,
                           "accept_length_first_on_steps_oracle": None, "recovery_matches_oracle": None}
    if rounds < 1:
        return out
    pred = predict_recovery(oracle, prompts if prompts is not None else recovery_prompts(oracle.vocab),
                            committed, rounds, num_steps)
    out["accept_length_first_on_step_oracle"] = pred["first_on_step"]
    out["accept_length_first_on_steps_oracle"] = pred["first_on_steps"]
    first, mean = phase.get("accept_length_first_on_step"), phase.get("accept_length_first_on_steps")
    if first is not None and mean is not None:
        out["recovery_matches_oracle"] = (abs(pred["first_on_step"] - first) < 1e-9
                                          and abs(pred["first_on_steps"] - mean) < 1e-9)
    return out


def annotate(entries: List[Dict[str, Any]], oracle: Any, configs: Dict[str, Dict[str, Any]]) -> List[str]:
    """Add ``check_recovery``'s fields to each entry's ``C_recovery`` phase, and
    ``accept_length_after_on_oracle`` and ``recovery_matches_oracle`` to the entry (in place);
    return one summary line per entry.

    Entries written before phase C counted resume steps are taken to have had one exactly when
    the KV-only OFF draft extend ran (``off_draft_extend == "kv-only"``, the only case
    server_patch runs resume steps in). An entry run on the other kind of pair than ``oracle``
    (``kv_sensitive`` differs; absent means the default pair) is skipped.
    """
    lines = []
    for i, e in enumerate(entries):
        phases = e.get("phases") if isinstance(e, dict) else None
        phase = phases.get("C_recovery") if isinstance(phases, dict) else None
        if isinstance(e, dict):
            e["recovery_matches_oracle"] = None  # until checked below (a stale True must not stay)
        if not isinstance(phase, dict) or e.get("config") not in configs:
            name = f"{e.get('config')} tp={e.get('tp')}" if isinstance(e, dict) else f"entry {i}"
            lines.append(f"{name}: no recovery phase of a known config, skipped")
            continue
        if bool(e.get("kv_sensitive")) != bool(getattr(oracle, "kv_sensitive", False)):
            kind = "a KV-sensitive" if e.get("kv_sensitive") else "the default"
            lines.append(f"{e['config']} tp={e.get('tp')}: ran on {kind} pair, not this oracle's, skipped")
            continue
        resume = phase.get("resume_steps")
        if resume is None:
            resume = 1 if e.get("off_draft_extend") == "kv-only" else 0
        try:
            res = check_recovery(oracle, phase, configs[e["config"]]["num_steps"], resume)
        except (KeyError, TypeError, ValueError) as exc:  # a hand-edited or truncated record
            lines.append(f"{e['config']} tp={e.get('tp')}: malformed C_recovery ({type(exc).__name__}: {exc}), skipped")
            continue
        phase.update(res)
        e["accept_length_after_on_oracle"] = res["accept_length_first_on_steps_oracle"]
        e["recovery_matches_oracle"] = res["recovery_matches_oracle"]
        lines.append(
            f"{e['config']} tp={e.get('tp')}: committed {res['committed_at_on']}, first ON step "
            f"{phase.get('accept_length_first_on_step')} (oracle {res['accept_length_first_on_step_oracle']}), "
            f"first {phase.get('steps_counted')} ON steps {phase.get('accept_length_first_on_steps')} "
            f"(oracle {res['accept_length_first_on_steps_oracle']}): "
            + {True: "equal", False: "NOT equal", None: "not measured"}[res["recovery_matches_oracle"]]
        )
    return lines


def oracle_from_maps(vocab: int, p_wrong: float, seed: int,
                     p_wrong_families: Optional[Sequence[float]] = None, kv_sensitive: bool = False) -> Any:
    """An ``Oracle`` from ``build_maps(vocab, p_wrong, seed, p_wrong_families=...)`` alone (no
    model dir): enough for chains and acceptance; its layout fields (special tokens, sizes) are
    placeholders. ``p_wrong_families`` (K values, with ``p_wrong`` 0) rebuilds a pair made with
    ``--p-wrong-families``; ``kv_sensitive`` one made with ``--kv-sensitive`` (same maps)."""
    from bench.synthetic_models import Oracle, build_family_maps, mean_p_wrong, prompt_families

    if not 0.0 <= p_wrong <= 1.0:
        raise ValueError(f"p_wrong must be in [0, 1], got {p_wrong}")
    families = prompt_families(vocab, p_wrong, None, p_wrong_families)
    pi, succ, corrupted = build_family_maps(families, seed)
    return Oracle(pi=pi, draft_successor=succ, corrupted=corrupted, p_wrong=mean_p_wrong(families),
                  seed=seed, preset="maps-only", vocab=vocab, vocab_size=vocab, special_tokens={},
                  eos_token_id=-1, bos_token_id=-1, pad_token_id=-1, unk_token_id=-1, hidden_size=0,
                  num_layers=0, draft_intermediate_size=0, target_layers_to_capture=[], dtype="none",
                  families=families, kv_sensitive=kv_sensitive)


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.recovery_oracle", description=__doc__.splitlines()[0])
    ap.add_argument("file", type=Path, help="a bench.gate_correctness JSON list (rewritten in place)")
    ap.add_argument("--models", type=Path, help="the pair's dir (its oracle.json)")
    ap.add_argument("--vocab", type=int, default=8192, help="without --models: the pair's word count")
    ap.add_argument("--p-wrong", type=float, default=None, help="without --models: the pair's p (default 0.2)")
    ap.add_argument("--p-wrong-families", default=None, metavar="P0,P1,..",
                    help="without --models: the pair's per-family p (excludes --p-wrong)")
    ap.add_argument("--seed", type=int, default=0, help="without --models: the pair's seed")
    ap.add_argument("--kv-sensitive", action="store_true", help="without --models: a KV-sensitive pair")
    ap.add_argument("--dry-run", action="store_true", help="print, do not rewrite the file")
    a = ap.parse_args(argv)
    from bench.server_harness import CONFIGS, write_json

    try:
        if a.models is not None:
            from bench.synthetic_models import Oracle

            oracle = Oracle.load(a.models / "oracle.json")
        elif a.p_wrong_families is not None:
            if a.p_wrong is not None:
                ap.error("give --p-wrong or --p-wrong-families, not both")
            oracle = oracle_from_maps(a.vocab, 0.0, a.seed, [float(x) for x in a.p_wrong_families.split(",")],
                                      kv_sensitive=a.kv_sensitive)
        else:
            oracle = oracle_from_maps(a.vocab, 0.2 if a.p_wrong is None else a.p_wrong, a.seed,
                                      kv_sensitive=a.kv_sensitive)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        ap.error(f"no oracle: {type(exc).__name__}: {exc}")
    try:
        entries = json.loads(a.file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        ap.error(f"cannot read {a.file}: {type(exc).__name__}: {exc}")
    if not isinstance(entries, list):
        ap.error(f"{a.file}: not a JSON list of bench.gate_correctness entries")
    for line in annotate(entries, oracle, CONFIGS):
        print(line)
    if not a.dry_run:
        write_json(a.file, entries)
    # every entry must be checked and equal: a skipped or unmeasured one is not a pass
    verdicts = [e.get("recovery_matches_oracle") if isinstance(e, dict) else None for e in entries]
    if not verdicts or not all(v is True for v in verdicts):
        print(f"{sum(v is True for v in verdicts)} of {len(verdicts)} entries equal the prediction",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
