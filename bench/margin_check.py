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
Exit status 1 if any argmax is wrong.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch

from bench.reference_forward import DraftModel, TargetModel, bf16_ulp, logit_margin
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


def check(out_dir: str, tokens: int = 256, steps: int = 5, device: str = "cpu", seed: int = 0,
          act_dtype: torch.dtype = torch.bfloat16) -> list[dict]:
    """Margin check of a written pair (full target forward). Returns one stats dict per model/step."""
    o = Oracle.load(out_dir)
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
                    device: str = "cpu") -> list[dict]:
    """Margin check without writing the pair (for the 8b shape on a small-memory CPU box).

    Builds the bf16 embedding, lm_head and full draft exactly as ``generate_pair`` does for
    (preset, seed) on ``device`` (E, pi, corruption, lm_head and the MLP memory are identical;
    the draft's random q/k/v come from another point of the RNG stream). The target is evaluated
    *head only*: ``lm_head(RMSNorm(E[x]))`` with aux = ``[E[x]] * 3`` -- exact for
    ``proj_noise=0``, where every decoder layer adds exactly 0 to the residual (asserted by the
    tests and by ``check`` on full forwards).
    """
    from bench.reference_forward import rms_norm
    from bench.synthetic_models import PRESETS, _WeightBuilder, build_maps, draft_config, vocab_layout

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
    a = ap.parse_args(argv)
    if a.dir:
        res = check(a.dir, a.tokens, a.steps, a.device, act_dtype=getattr(torch, a.act_dtype))
    else:
        res = check_in_memory(a.preset, a.p_wrong, a.seed, a.tokens, a.steps, a.device)
    for r in res:
        print(json.dumps(r))
    return 1 if any(r["wrong"] for r in res) else 0


if __name__ == "__main__":
    sys.exit(main())
