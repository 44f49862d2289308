"""Logit margins of a generated pair under bf16 arithmetic (does SGLang's argmax follow the oracle?).

``python -m bench.margin_check --dir DIR [--tokens 256] [--steps 5] [--device cpu|cuda]`` loads the
stored (bf16-rounded) weights into float32, runs ``bench.reference_forward`` with activations
rounded to bf16 wherever SGLang stores them (GEMMs accumulate in float32, as cuBLAS does), and
prints, for the target over a ``--tokens``-long pi chain and for the draft over the same keys for
``--steps`` chained steps:

* ``gap``: logit of the oracle token minus the best other logit (> 0 means the argmax is right),
* ``gap/ulp``: that gap in units of the bf16 spacing at the winning logit (SGLang's lm_head GEMM
  writes bf16 logits, so a gap of a few ulp could flip; hundreds cannot),
* ``rel``: gap / winning logit.

``--preset 8b`` instead of ``--dir`` checks the 8b shape without writing 14 GB (target head only,
see ``check_in_memory``). Draft steps after the first are run batched with every key at position
0 and no KV cache; the draft's ``o_proj`` is zero so attention contributes exactly 0 either way.

A KV-sensitive pair (``oracle.json`` format 3, or ``--preset P --kv-sensitive``) is checked over a
random word sequence instead (its next token is pi of the token one position back, whatever the
sequence), with the draft's step 1 over every position of one extend and its later steps run
with the KV cache from ``--starts`` positions of it (attention is what the pair is made of);
``check_in_memory`` runs layer 0 (the positional heads) and one plain layer for the target, exact
because the others add exactly 0 to the residual.
Exit status 1 if any argmax is wrong.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch

from bench.reference_forward import DraftModel, KVCache, TargetModel, bf16_ulp, logit_margin
from bench.synthetic_models import Oracle


def _stats(name: str, gap: torch.Tensor, top: torch.Tensor) -> dict:
    gap, top = gap.float().cpu(), top.float().cpu()
    ulp = gap / bf16_ulp(top)
    q = lambda t, x: float(torch.quantile(t, x))  # noqa: E731
    return {
        "what": name, "n": int(gap.numel()), "wrong": int((gap <= 0).sum()),
        "gap_min": float(gap.min()), "gap_p1": q(gap, 0.01), "gap_median": q(gap, 0.5),
        "gap_ulp_min": float(ulp.min()), "rel_min": float((gap / top).min()),
        "top_logit_median": q(top, 0.5),
    }


def _draft_steps(o: Oracle, dm: DraftModel, seq: list[int], aux: torch.Tensor, steps: int) -> list[dict]:
    res = []
    with torch.no_grad():
        ids = torch.tensor(seq[1:] + [o.pi[seq[-1]]])
        d = dm.forward(ids, aux, torch.arange(len(seq)))
        for step in range(1, steps + 1):
            exp = torch.tensor([o.draft_chain(k, step)[-1] for k in seq], device=d.logits.device)
            gap = logit_margin(d.logits, exp)
            res.append(_stats(f"draft step {step}", gap, d.logits.gather(1, exp[:, None]).squeeze(1)))
            if step < steps:
                d = dm.forward(torch.tensor(d.tokens), d.hidden, torch.zeros(len(seq), dtype=torch.long))
    return res


def _chain_seq(o: Oracle, tokens: int, seed: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    start = int(torch.randint(o.vocab, (), generator=g).item())
    return [start] + o.chain(start, tokens - 1)


def _kv_seq(o: Oracle, tokens: int, seed: int) -> list[int]:
    """Random word ids (a KV-sensitive pair predicts pi of the token one back in any sequence)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(o.vocab, (tokens,), generator=g).tolist()


def _truncated(cache: KVCache, last_pos: int) -> KVCache:
    """A copy of ``cache`` holding positions ``<= last_pos`` (shape per layer [S, kv_heads, hd])."""
    out = KVCache()
    for layer, pos in cache.pos.items():
        keep = pos <= last_pos
        out.k[layer], out.v[layer], out.pos[layer] = cache.k[layer][keep], cache.v[layer][keep], pos[keep]
    return out


def _kv_target(o: Oracle, tm: TargetModel, seq: list[int], name: str = "target") -> tuple[dict, torch.Tensor]:
    """Target margins at positions 1..T-1 of ``seq`` (position 0 has no key one back) and aux [T, 3H]."""
    t0 = time.perf_counter()
    with torch.no_grad():
        out = tm.forward(torch.tensor(seq), torch.arange(len(seq)))
    exp = torch.tensor([o.next_after(seq[: t + 1]) for t in range(1, len(seq))], device=out.logits.device)
    lg = out.logits[1:]
    aux = out.aux_hidden if out.aux_hidden.shape[-1] != tm.H else torch.cat([out.aux_hidden] * 3, dim=-1)
    stats = _stats(name, logit_margin(lg, exp), lg.gather(1, exp[:, None]).squeeze(1))
    return stats | {"s": time.perf_counter() - t0}, aux


def _kv_draft_steps(o: Oracle, dm: DraftModel, seq: list[int], aux: torch.Tensor, steps: int,
                    starts: int = 16) -> list[dict]:
    """Draft margins of a KV-sensitive pair: step 1 at every extend position p >= 2 of ``seq``
    (expected ``draft_proposals(seq[:p+2], 1)``), steps 2.. run with the extend's KV cache from
    ``starts`` end positions, counted while the earlier proposals of that start were right."""
    T = len(seq)
    ids = seq[1:] + [o.next_after(seq)]
    full = seq + ids[-1:]
    cache = KVCache()
    res = []
    with torch.no_grad():
        d = dm.forward(torch.tensor(ids), aux, torch.arange(T), cache)
        exp = torch.tensor([o.draft_proposals(full[: p + 2], 1)[0] for p in range(2, T)], device=d.logits.device)
        lg = d.logits[2:]
        res.append(_stats("draft step 1", logit_margin(lg, exp), lg.gather(1, exp[:, None]).squeeze(1)))
        gaps: list[list[torch.Tensor]] = [[] for _ in range(steps)]
        tops: list[list[torch.Tensor]] = [[] for _ in range(steps)]
        for e in torch.linspace(3, T - 1, min(starts, T - 3)).round().long().unique().tolist():
            want = o.draft_proposals(full[: e + 2], steps)
            keys = [full[e], full[e + 1]] + want
            c = _truncated(cache, e)
            tok, h = d.tokens[e], d.hidden[e:e + 1]
            for s in range(1, steps):
                if not o.draft_correct(keys[s - 1]):
                    break  # the earlier proposal was wrong: this one is unspecified
                dd = dm.forward(torch.tensor([tok]), h, torch.tensor([e + s]), c)
                x = torch.tensor([want[s]], device=dd.logits.device)
                gaps[s].append(logit_margin(dd.logits, x))
                tops[s].append(dd.logits.gather(1, x[:, None]).squeeze(1))
                tok, h = dd.tokens[-1], dd.hidden
        for s in range(1, steps):
            if gaps[s]:
                res.append(_stats(f"draft step {s + 1}", torch.cat(gaps[s]), torch.cat(tops[s])))
    return res


def check(out_dir: str, tokens: int = 256, steps: int = 5, device: str = "cpu", seed: int = 0,
          act_dtype: torch.dtype = torch.bfloat16, starts: int = 16) -> list[dict]:
    """Margin check of a written pair (full target forward). Returns one stats dict per model/step.
    ``starts``: a KV-sensitive pair's decode-step start positions (``_kv_draft_steps``)."""
    o = Oracle.load(out_dir)
    if o.kv_sensitive:
        seq = _kv_seq(o, tokens, seed)
        tm = TargetModel(f"{out_dir}/target", act_dtype=act_dtype, device=device)
        res, aux = _kv_target(o, tm, seq)
        embed = tm.w["model.embed_tokens.weight"]
        del tm
        dm = DraftModel(f"{out_dir}/draft", act_dtype=act_dtype, embed=embed, device=device)
        return [res] + _kv_draft_steps(o, dm, seq, aux, steps, starts)
    seq = _chain_seq(o, tokens, seed)
    t0 = time.perf_counter()
    tm = TargetModel(f"{out_dir}/target", act_dtype=act_dtype, device=device)
    with torch.no_grad():
        out = tm.forward(torch.tensor(seq), torch.arange(len(seq)))
    exp = torch.tensor([o.pi[x] for x in seq], device=out.logits.device)
    gap = logit_margin(out.logits, exp)
    res = [_stats("target", gap, out.logits.gather(1, exp[:, None]).squeeze(1)) | {"s": time.perf_counter() - t0}]
    aux, embed = out.aux_hidden, tm.w["model.embed_tokens.weight"]
    del tm, out
    dm = DraftModel(f"{out_dir}/draft", act_dtype=act_dtype, embed=embed, device=device)
    return res + _draft_steps(o, dm, seq, aux, steps)


def check_in_memory(preset: str, p_wrong: float = 0.2, seed: int = 0, tokens: int = 256, steps: int = 5,
                    device: str = "cpu", kv_sensitive: bool = False, starts: int = 16) -> list[dict]:
    """Margin check without writing the pair (for the 8b shape on a small-memory CPU box).

    Builds the bf16 embedding, lm_head and full draft exactly as ``generate_pair`` does for
    (preset, seed) on ``device`` (E, pi, corruption, lm_head and the MLP memory are identical;
    the draft's random q/k/v come from another point of the RNG stream). The target is evaluated
    *head only*: ``lm_head(RMSNorm(E[x]))`` with aux = ``[E[x]] * 3`` -- exact for
    ``proj_noise=0``, where every decoder layer adds exactly 0 to the residual (asserted by the
    tests and by ``check`` on full forwards).

    ``kv_sensitive``: the KV-sensitive pair of (preset, seed); the target runs layers 0 and 1 only
    (layer 0 holds the positional heads; every later layer adds exactly 0 to the residual, so the
    logits and the three aux states equal the full model's), over a random word sequence.
    """
    from bench.reference_forward import rms_norm
    from bench.synthetic_models import PRESETS, _WeightBuilder, build_maps, draft_config, vocab_layout

    if kv_sensitive:
        return _kv_in_memory(preset, p_wrong, seed, tokens, steps, device, starts)

    p = PRESETS[preset]
    maps = build_maps(p.vocab, p_wrong, seed)
    lay = vocab_layout(p.vocab)
    o = Oracle(pi=maps[0], draft_successor=maps[1], corrupted=maps[2], p_wrong=p_wrong, seed=seed,
               preset=preset, vocab=p.vocab, vocab_size=lay["vocab_size"], special_tokens=lay["special_tokens"],
               eos_token_id=lay["eos_token_id"], bos_token_id=lay["bos_token_id"], pad_token_id=lay["pad_token_id"],
               unk_token_id=lay["unk_token_id"], hidden_size=p.hidden_size, num_layers=p.num_layers,
               draft_intermediate_size=0, target_layers_to_capture=[], dtype="bfloat16")
    bf = torch.bfloat16
    with torch.no_grad():
        b = _WeightBuilder(p, maps, p.vocab, bf, torch.device(device), seed, 0.0)
        seq = _chain_seq(o, tokens, seed)
        x = b.embed[torch.tensor(seq, device=device)].float()
        head = b.lm_head_rows(lay["vocab_size"]).float()
        n = rms_norm(x, torch.ones(p.hidden_size, device=device), p.rms_norm_eps, act_dtype=bf)
        logits = (n @ head.T).to(bf).float()  # SGLang's lm_head GEMM writes bf16 logits
        exp = torch.tensor([o.pi[t] for t in seq], device=device)
        res = [_stats("target (head only)", logit_margin(logits, exp), logits.gather(1, exp[:, None]).squeeze(1))]
        tensors = {s.name: s.make() for s in b.draft_specs()}
        dm = DraftModel(None, act_dtype=bf, embed=b.embed.float(), device=device,
                        config=draft_config(p, p.vocab, "bfloat16"), tensors=tensors)
        aux = torch.cat([x, x, x], dim=-1)
    return res + _draft_steps(o, dm, seq, aux, steps)


def _kv_in_memory(preset: str, p_wrong: float, seed: int, tokens: int, steps: int, device: str,
                  starts: int) -> list[dict]:
    from bench.synthetic_models import (PRESETS, _KVWeightBuilder, build_maps, draft_config,
                                        draft_intermediate_size, target_config, vocab_layout)

    p = PRESETS[preset]
    maps = build_maps(p.vocab, p_wrong, seed)
    lay = vocab_layout(p.vocab)
    o = Oracle(pi=maps[0], draft_successor=maps[1], corrupted=maps[2], p_wrong=p_wrong, seed=seed,
               preset=preset, vocab=p.vocab, vocab_size=lay["vocab_size"], special_tokens=lay["special_tokens"],
               eos_token_id=lay["eos_token_id"], bos_token_id=lay["bos_token_id"], pad_token_id=lay["pad_token_id"],
               unk_token_id=lay["unk_token_id"], hidden_size=p.hidden_size, num_layers=p.num_layers,
               draft_intermediate_size=draft_intermediate_size(p, p.vocab), target_layers_to_capture=[],
               dtype="bfloat16", kv_sensitive=True)
    bf = torch.bfloat16
    with torch.no_grad():
        b = _KVWeightBuilder(p, maps, p.vocab, bf, torch.device(device), seed, 0.0)
        wanted = ("model.embed_tokens.", "model.layers.0.", "model.layers.1.", "model.norm.", "lm_head.")
        tensors = {s.name: s.make() for s in b.target_specs() if s.name.startswith(wanted)}
        cfg = target_config(p, p.vocab, "bfloat16") | {"num_hidden_layers": 2}
        tm = TargetModel(None, act_dtype=bf, device=device, config=cfg, tensors=tensors, layers_to_capture=[1])
        seq = _kv_seq(o, tokens, seed)
        res, aux = _kv_target(o, tm, seq, "target (layers 0-1)")
        del tm, tensors
        dt = {s.name: s.make() for s in b.draft_specs()}
        dm = DraftModel(None, act_dtype=bf, embed=b.embed.float(), device=device,
                        config=draft_config(p, p.vocab, "bfloat16"), tensors=dt)
    return [res] + _kv_draft_steps(o, dm, seq, aux, steps, starts)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.margin_check", description=__doc__.split("\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--dir", help="generator output dir (target/, draft/, oracle.json)")
    src.add_argument("--preset", help="in-memory check of this preset's shape (target head only)")
    ap.add_argument("--p-wrong", type=float, default=0.2, help="with --preset")
    ap.add_argument("--seed", type=int, default=0, help="with --preset")
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--act-dtype", choices=["bfloat16", "float32"], default="bfloat16", help="with --dir")
    ap.add_argument("--kv-sensitive", action="store_true", help="with --preset: the KV-sensitive pair")
    ap.add_argument("--starts", type=int, default=16,
                    help="KV-sensitive pair: positions the draft's decode steps start from")
    a = ap.parse_args(argv)
    if a.dir:
        res = check(a.dir, a.tokens, a.steps, a.device, act_dtype=getattr(torch, a.act_dtype), starts=a.starts)
    else:
        res = check_in_memory(a.preset, a.p_wrong, a.seed, a.tokens, a.steps, a.device,
                              kv_sensitive=a.kv_sensitive, starts=a.starts)
    for r in res:
        print(json.dumps(r))
    return 1 if any(r["wrong"] for r in res) else 0


if __name__ == "__main__":
    sys.exit(main())
