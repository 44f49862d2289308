"""Pure-torch reference of SGLang 0.5.12's Llama target and EAGLE-3 draft math (CPU checks).

Mirrors, op for op (file:line in ``python/sglang/srt`` of sglang 0.5.12):

* RMSNorm ``layers/layernorm.py:361-405`` (forward_native): compute in float32, optional fused
  ``x + residual`` whose sum becomes the new residual (stored in the activation dtype), scale
  by ``rsqrt(mean(x^2) + eps)``, multiply by the weight, cast back.
* Llama decoder layer ``models/llama.py:308-330`` (pre-norm; residual carried between layers
  and fused into the next ``input_layernorm``), attention ``llama.py:205-249`` (one QKV GEMM
  split into q/k/v, neox RoPE ``layers/rotary_embedding/base.py:119-148`` and
  ``rotary_embedding/utils.py:36-58``, GQA, causal softmax with scale ``head_dim**-0.5``,
  ``o_proj``), MLP ``llama.py:111-123`` (``silu(gate) * up`` then ``down_proj``), final norm
  ``llama.py:412``, untied lm_head.
* EAGLE-3 aux capture ``llama.py:392-395``: before layer ``i`` in ``layers_to_capture``,
  ``hidden_states + residual``; concatenated in ascending layer order into ``[T, 3H]``.
* EAGLE-3 draft ``models/llama_eagle3.py``: ``fc`` on the 3H aux input (217-225, skipped when the
  input already has width H, i.e. the draft's own hidden on later steps), then layer 0
  (93-115): ``residual = hidden``; ``cat(input_layernorm(embeds), hidden_norm(hidden))`` (2H)
  -> attention -> ``post_attention_layernorm(attn, residual)`` -> MLP; final
  ``norm(mlp, residual)`` gives the logits input and the *pre-norm* sum is the hidden passed to
  the next draft step (241-247). Draft ids map to target ids as ``i + d2t[i]``
  (llama_eagle3.py:318-321; speculative/eagle_worker.py:864-865).

The models are loaded from the generator's directories. ``act_dtype`` rounds activations at the
points where SGLang stores them in the model dtype (GEMM outputs, norm outputs, residual), so a
float32 run over bf16 weights with ``act_dtype=torch.bfloat16`` emulates SGLang's bf16 path
(GEMM accumulation stays float32, as on the GPU).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors import safe_open


def load_safetensors_dir(model_dir: str | Path) -> dict[str, torch.Tensor]:
    """All tensors of ``model_dir/*.safetensors`` (single file or shards), on CPU, as stored."""
    out: dict[str, torch.Tensor] = {}
    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors in {model_dir}")
    for f in files:
        with safe_open(str(f), framework="pt") as sf:
            for k in sf.keys():
                out[k] = sf.get_tensor(k)
    return out


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None,
             act_dtype: torch.dtype = torch.float32):
    """SGLang RMSNorm.forward_native (layernorm.py:361-405).

    x, residual: [T, H]. Returns ``normed`` or, with ``residual``, ``(normed, x + residual)``;
    both rounded to ``act_dtype`` and returned as float32.
    """
    xf = x.float()
    if residual is not None:
        xf = xf + residual.float()
        new_res = xf.to(act_dtype).float()
    var = xf.pow(2).mean(dim=-1, keepdim=True)
    y = (xf * torch.rsqrt(var + eps) * weight.float()).to(act_dtype).float()
    return y if residual is None else (y, new_res)


def _rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Neox-style RoPE on [T, heads, head_dim] (rotary_embedding/base.py:119-148, utils.py:36-58)."""
    d = x.shape[-1]
    inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float32, device=x.device) / d))
    freqs = positions.float()[:, None] * inv_freq[None, :]
    cos, sin = freqs.cos()[:, None, :], freqs.sin()[:, None, :]
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


@dataclass
class KVCache:
    """Per-layer key/value cache of one sequence: lists of [S, kv_heads, head_dim] and positions [S]."""

    k: dict[int, torch.Tensor] = field(default_factory=dict)
    v: dict[int, torch.Tensor] = field(default_factory=dict)
    pos: dict[int, torch.Tensor] = field(default_factory=dict)

    def truncate(self, max_pos_exclusive: int) -> None:
        """Drop every entry at position >= ``max_pos_exclusive`` (rejected / temporary tokens)."""
        for layer in list(self.pos):
            keep = self.pos[layer] < max_pos_exclusive
            self.k[layer], self.v[layer], self.pos[layer] = self.k[layer][keep], self.v[layer][keep], self.pos[layer][keep]


class _LlamaBase:
    def __init__(self, model_dir: str | Path | None, act_dtype: torch.dtype = torch.float32, device: str = "cpu",
                 *, config: dict | None = None, tensors: dict[str, torch.Tensor] | None = None):
        self.device = torch.device(device)
        if model_dir is not None:
            self.dir = Path(model_dir)
            config = json.loads((self.dir / "config.json").read_text())
            tensors = load_safetensors_dir(self.dir)
        elif config is None or tensors is None:
            raise ValueError("give model_dir, or config and tensors")
        self.cfg = config
        # Stored weights (bf16 or fp32) widened to float32: exact copies of the rounded values.
        self.w = {k: (v.to(self.device).float() if v.is_floating_point() else v.to(self.device))
                  for k, v in tensors.items()}
        c = self.cfg
        self.H = c["hidden_size"]
        self.nh, self.nkv = c["num_attention_heads"], c["num_key_value_heads"]
        self.hd = c.get("head_dim", self.H // self.nh)
        self.eps = c["rms_norm_eps"]
        self.theta = c.get("rope_theta", 10000.0)
        self.act = act_dtype

    def _r(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(self.act).float()

    def _linear(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return self._r(x @ w.T)

    def _attention(self, pre: str, x: torch.Tensor, positions: torch.Tensor, cache: KVCache | None,
                   layer: int, qkv_names=("q_proj", "k_proj", "v_proj")) -> torch.Tensor:
        """llama.py:205-249: q/k/v projections, RoPE, causal GQA attention over cache + new, o_proj."""
        T = x.shape[0]
        q = self._linear(x, self.w[pre + "self_attn." + qkv_names[0] + ".weight"]).view(T, self.nh, self.hd)
        k = self._linear(x, self.w[pre + "self_attn." + qkv_names[1] + ".weight"]).view(T, self.nkv, self.hd)
        v = self._linear(x, self.w[pre + "self_attn." + qkv_names[2] + ".weight"]).view(T, self.nkv, self.hd)
        q, k = self._r(_rope(q, positions, self.theta)), self._r(_rope(k, positions, self.theta))
        kpos = positions
        if cache is not None:
            if layer in cache.k:
                k = torch.cat([cache.k[layer], k])
                v = torch.cat([cache.v[layer], v])
                kpos = torch.cat([cache.pos[layer], positions])
            cache.k[layer], cache.v[layer], cache.pos[layer] = k, v, kpos
        rep = self.nh // self.nkv
        kk = k.repeat_interleave(rep, dim=1)  # [S, nh, hd]
        vv = v.repeat_interleave(rep, dim=1)
        scores = torch.einsum("thd,shd->hts", q, kk) * (self.hd ** -0.5)
        mask = kpos[None, :] <= positions[:, None]  # [T, S]
        scores = scores.masked_fill(~mask[None], float("-inf"))
        o = torch.einsum("hts,shd->thd", torch.softmax(scores, dim=-1), vv).reshape(T, self.nh * self.hd)
        return self._linear(self._r(o), self.w[pre + "self_attn.o_proj.weight"])

    def _mlp(self, pre: str, x: torch.Tensor) -> torch.Tensor:
        """llama.py:111-123 (SiluAndMul, layers/activation.py:86-88)."""
        g = self._linear(x, self.w[pre + "mlp.gate_proj.weight"])
        u = self._linear(x, self.w[pre + "mlp.up_proj.weight"])
        return self._linear(self._r(torch.nn.functional.silu(g) * u), self.w[pre + "mlp.down_proj.weight"])


@dataclass
class TargetOutput:
    logits: torch.Tensor  # [T, vocab_size] float32
    aux_hidden: torch.Tensor  # [T, 3H]: captured aux states, ascending layer order
    capture_layers: list[int]


class TargetModel(_LlamaBase):
    """LlamaForCausalLM from ``model_dir`` (HF names) with EAGLE-3 aux capture."""

    def __init__(self, model_dir: str | Path | None, act_dtype: torch.dtype = torch.float32,
                 layers_to_capture: list[int] | None = None, device: str = "cpu", **kw):
        super().__init__(model_dir, act_dtype, device, **kw)
        L = self.cfg["num_hidden_layers"]
        self.L = L
        # llama.py:798-805 default; capture happens once per layer index in ascending order.
        self.layers_to_capture = layers_to_capture if layers_to_capture is not None else [2, L // 2, L - 3]

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        return self.w["model.embed_tokens.weight"][ids]

    def forward(self, ids: torch.Tensor, positions: torch.Tensor, cache: KVCache | None = None) -> TargetOutput:
        """ids, positions: [T] int64. Appends to ``cache``. Returns logits [T, vocab_size] and aux [T, 3H]."""
        ids, positions = ids.to(self.device), positions.to(self.device)
        h = self._r(self.embed(ids))
        residual = None
        aux, layers = [], []
        for i in range(self.L):
            if i in self.layers_to_capture:  # llama.py:393-395
                if residual is None:
                    raise ValueError("SGLang cannot capture layer 0 (residual is None there)")
                aux.append(self._r(h + residual))
                layers.append(i)
            pre = f"model.layers.{i}."
            if residual is None:
                residual = h
                x = rms_norm(h, self.w[pre + "input_layernorm.weight"], self.eps, act_dtype=self.act)
            else:
                x, residual = rms_norm(h, self.w[pre + "input_layernorm.weight"], self.eps, residual, self.act)
            a = self._attention(pre, x, positions, cache, i)
            x, residual = rms_norm(a, self.w[pre + "post_attention_layernorm.weight"], self.eps, residual, self.act)
            h = self._mlp(pre, x)
        out, _ = rms_norm(h, self.w["model.norm.weight"], self.eps, residual, self.act)
        logits = self._r(out @ self.w["lm_head.weight"].T)  # bf16 logits like SGLang's lm_head GEMM
        return TargetOutput(logits, torch.cat(aux, dim=-1) if aux else torch.empty(len(ids), 0), layers)

    def greedy(self, prompt: list[int], max_new_tokens: int) -> list[int]:
        """Plain greedy decoding with a KV cache (prefill then one token per step)."""
        cache = KVCache()
        ids = torch.tensor(prompt)
        out = self.forward(ids, torch.arange(len(prompt)), cache)
        tok = int(out.logits[-1].argmax())
        gen = [tok]
        while len(gen) < max_new_tokens:
            pos = len(prompt) + len(gen) - 1
            out = self.forward(torch.tensor([tok]), torch.tensor([pos]), cache)
            tok = int(out.logits[-1].argmax())
            gen.append(tok)
        return gen


@dataclass
class DraftOutput:
    logits: torch.Tensor  # [T, draft_vocab_size]
    hidden: torch.Tensor  # [T, H] pre-norm hidden for the next draft step (llama_eagle3.py:246)
    tokens: list[int]  # argmax mapped to target ids (i + d2t[i])


class DraftModel(_LlamaBase):
    """LlamaForCausalLMEagle3 from ``model_dir``; names mapped like its load_weights
    (llama_eagle3.py:306-316: ``midlayer.`` -> ``layers.0.``)."""

    def __init__(self, model_dir: str | Path | None, act_dtype: torch.dtype = torch.float32,
                 embed: torch.Tensor | None = None, device: str = "cpu", **kw):
        super().__init__(model_dir, act_dtype, device, **kw)
        self.w = {k.replace("midlayer.", "layers.0."): v for k, v in self.w.items()}
        # SGLang shares the target's embedding with the draft (eagle_worker.py:177-188).
        self.embed_w = (embed if embed is not None else self.w["embed_tokens.weight"]).to(self.device)
        self.d2t = self.w["d2t"].long()

    def forward(self, ids: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor,
                cache: KVCache | None = None) -> DraftOutput:
        """One draft forward (extend or a decode step).

        ids: [T] tokens whose embeddings are input (the token *after* each hidden's position);
        hidden: [T, 3H] target aux states or [T, H] the draft's own previous hidden;
        positions: [T]. Returns logits [T, draft_vocab], pre-norm hidden [T, H], mapped tokens.
        """
        pre = "layers.0."
        ids, hidden, positions = ids.to(self.device), hidden.to(self.device), positions.to(self.device)
        embeds = self._r(self.embed_w[ids])
        h = hidden.float()
        if h.shape[-1] != embeds.shape[-1]:  # llama_eagle3.py:218-225
            h = self._linear(h, self.w["fc.weight"])
        residual = h  # llama_eagle3.py:95
        hn = rms_norm(h, self.w[pre + "hidden_norm.weight"], self.eps, act_dtype=self.act)
        en = rms_norm(embeds, self.w[pre + "input_layernorm.weight"], self.eps, act_dtype=self.act)
        x = torch.cat([en, hn], dim=-1)  # [T, 2H] into qkv (llama_eagle3.py:98)
        a = self._attention(pre, x, positions, cache, 0)
        x, residual = rms_norm(a, self.w[pre + "post_attention_layernorm.weight"], self.eps, residual, self.act)
        m = self._mlp(pre, x)
        out, pre_norm = rms_norm(m, self.w["norm.weight"], self.eps, residual, self.act)
        logits = self._r(out @ self.w["lm_head.weight"].T)  # bf16 logits like SGLang's lm_head GEMM
        idx = logits.argmax(dim=-1)
        tokens = (idx + self.d2t[idx]).tolist()
        return DraftOutput(logits, pre_norm, tokens)


def eagle3_generate(target: TargetModel, draft: DraftModel, prompt: list[int], max_new_tokens: int,
                    num_steps: int) -> dict:
    """Reference EAGLE-3 speculative decoding (chain, topk 1), one sequence, greedy verify.

    Follows SGLang's loop: target prefill -> first token; draft extend over the prompt (hidden
    at position t paired with the token at t+1); per round ``num_steps`` draft steps (the draft's
    own pre-norm hidden as next input), target verify of ``[last, d1..dk]``, accept the longest
    matching prefix + bonus token, drop rejected KV, draft extend over the accepted positions.

    Returns ``{"tokens": generated ids (max_new_tokens), "accept_lengths": [accepted+1 per round],
    "drafts": [proposed tokens per round]}``.
    """
    r = gated_generate(target, draft, prompt, max_new_tokens, num_steps, on=lambda _i: True)
    return {"tokens": r["tokens"], "accept_lengths": r["accept_lengths"], "drafts": r["drafts"]}


#: what an OFF step does to the draft's KV cache (``gated_generate``)
OFF_DRAFT_KV = ("write", "skip", "stale")


def gated_generate(target: TargetModel, draft: DraftModel, prompt: list[int], max_new_tokens: int,
                   num_steps: int, on, off_draft_kv: str = "write") -> dict:
    """``eagle3_generate`` with a speculation gate: round ``i`` speculates when ``on(i)`` is true,
    else it is an OFF step (plain target decode, one token).

    ``off_draft_kv`` says what an OFF step does to the draft's KV cache at its position ``p``:
    ``"write"`` runs the draft extend there (hidden at p with the token at p + 1), as the gate's
    KV-only OFF draft extend does; ``"skip"`` writes nothing; ``"stale"`` writes the K/V of the
    wrong token (the one at p, a one-position-late pairing). The OFF step right before an ON round
    (the gate's resume step) always runs the full draft extend, so ``"skip"``/``"stale"`` leave the
    draft's hidden state current and only its K/V of the earlier OFF positions wrong.

    Returns ``{"tokens": generated ids (max_new_tokens), "accept_lengths": [accepted+1 per ON
    round], "drafts": [proposed tokens per ON round], "rounds": ["on" | "off" per round]}``.
    Raises ValueError for an unknown ``off_draft_kv``.
    """
    if off_draft_kv not in OFF_DRAFT_KV:
        raise ValueError(f"off_draft_kv must be one of {OFF_DRAFT_KV}, got {off_draft_kv!r}")
    tc, dc = KVCache(), KVCache()
    T = len(prompt)
    out = target.forward(torch.tensor(prompt), torch.arange(T), tc)
    tokens = [int(out.logits[-1].argmax())]
    ext_ids = torch.tensor(prompt[1:] + tokens)
    d = draft.forward(ext_ids, out.aux_hidden, torch.arange(T), dc)
    first, hid = d.tokens[-1], d.hidden[-1:]
    seq = T  # committed positions with target KV: 0..seq-1; tokens[-1] sits at position seq
    accept, drafts_log, rounds = [], [], []
    while len(tokens) < max_new_tokens:
        if not on(len(rounds)):
            vo = target.forward(torch.tensor([tokens[-1]]), torch.tensor([seq]), tc)
            nxt = int(vo.logits[-1].argmax())
            if off_draft_kv == "write" or on(len(rounds) + 1):
                d = draft.forward(torch.tensor([nxt]), vo.aux_hidden, torch.tensor([seq]), dc)
                first, hid = d.tokens[-1], d.hidden[-1:]
            elif off_draft_kv == "stale":
                draft.forward(torch.tensor([tokens[-1]]), vo.aux_hidden, torch.tensor([seq]), dc)
            tokens.append(nxt)
            seq += 1
            rounds.append("off")
            continue
        drafts = [first]
        h = hid
        for step in range(1, num_steps):
            dd = draft.forward(torch.tensor([drafts[-1]]), h, torch.tensor([seq + step - 1]), dc)
            drafts.append(dd.tokens[-1])
            h = dd.hidden
        dc.truncate(seq)  # draft decode KV is temporary
        ver_ids = [tokens[-1]] + drafts
        vo = target.forward(torch.tensor(ver_ids), torch.arange(seq, seq + len(ver_ids)), tc)
        pred = vo.logits.argmax(dim=-1).tolist()
        n = 0
        while n < len(drafts) and drafts[n] == pred[n]:
            n += 1
        new = drafts[:n] + [pred[n]]
        tc.truncate(seq + n + 1)
        # draft extend over accepted verify positions seq..seq+n: hidden(pos p) with token at p+1
        d = draft.forward(torch.tensor(new), vo.aux_hidden[: n + 1], torch.arange(seq, seq + n + 1), dc)
        first, hid = d.tokens[-1], d.hidden[-1:]
        tokens += new
        seq += n + 1
        accept.append(n + 1)
        drafts_log.append(drafts)
        rounds.append("on")
    return {"tokens": tokens[:max_new_tokens], "accept_lengths": accept, "drafts": drafts_log, "rounds": rounds}


def logit_margin(logits: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
    """[T] gap ``logits[t, expected[t]] - max_{j != expected[t]} logits[t, j]`` (> 0: argmax right)."""
    exp = logits.gather(1, expected[:, None]).squeeze(1)
    other = logits.clone()
    other.scatter_(1, expected[:, None], float("-inf"))
    return exp - other.max(dim=1).values


def bf16_ulp(x: torch.Tensor) -> torch.Tensor:
    """Spacing of bfloat16 numbers at |x| (8 significant bits): 2^(floor(log2|x|) - 7)."""
    return torch.pow(2.0, torch.floor(torch.log2(x.abs().clamp_min(1e-30))) - 7)


__all__ = [
    "KVCache", "TargetModel", "DraftModel", "TargetOutput", "DraftOutput", "eagle3_generate", "gated_generate",
    "load_safetensors_dir", "rms_norm", "logit_margin", "bf16_ulp",
]
