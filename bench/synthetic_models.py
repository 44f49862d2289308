"""Synthetic EAGLE-3 target/draft pair with predictable greedy output and acceptance.

Implements ``shared/design/synthetic-models.md`` (corrections against the SGLang 0.5.12 source
are listed below). ``python -m bench.synthetic_models --out DIR --preset {tiny,1b,8b}
[--p-wrong P | --families K --p-wrong-families P0,..,PK-1] [--kv-sensitive]`` writes::

    DIR/target/config.json                  LlamaForCausalLM
    DIR/target/generation_config.json
    DIR/target/model.safetensors            (or model-0000i-of-0000n.safetensors + model.safetensors.index.json
                                             when larger than --max-shard-gb; the 8b preset is sharded)
    DIR/target/tokenizer.json, tokenizer_config.json, special_tokens_map.json
    DIR/draft/config.json                   LlamaForCausalLMEagle3 (1 decoder layer)
    DIR/draft/model.safetensors
    DIR/draft/tokenizer.json, tokenizer_config.json, special_tokens_map.json
    DIR/oracle.json                         pi, corrupted keys, draft successor map, ids, expected acceptance
                                             (format 1; format 2 adds ``families`` when K > 1; format 3
                                             is a KV-sensitive pair, see the end of this docstring)

Construction (all "SGLang" references are to sglang 0.5.12, ``python/sglang/srt``):

* Vocabulary: ``V`` word tokens ``"w0".."w{V-1}"`` with ids ``0..V-1``, then 4 special tokens
  ``<unk> <s> </s> <pad>`` with ids ``V..V+3``; ``config.vocab_size`` is ``V+4`` rounded up to a
  multiple of 64 (rows past ``V+3`` are padding no tokenizer id maps to).
* ``pi`` is a random permutation of ``0..V-1`` forming a single cycle; the target's greedy next
  token after word ``x`` is ``pi[x]``.
* Prompt families ("shifting draft", ``--families K`` / ``--p-wrong-families p_0,..,p_{K-1}``,
  ``generate_pair(families=, p_wrong_families=)``): the words are split into K contiguous id
  ranges (family ``k`` = ``k*V//K .. (k+1)*V//K - 1``), ``pi`` is one cycle per family, and
  ``round(p_k * size_k)`` of family ``k``'s keys are corrupted (their wrong successors are drawn
  inside the family). A greedy continuation never leaves the family of its prompt's last token,
  so one server's accept length follows its prompt mix: ``Oracle.family_prompt_ids`` makes prompts
  of one family, ``Oracle.expected_accept_length(k, family)`` is their accept length, and
  ``expected_accept_length(k)`` is the pooled value of a uniform mix. Nothing else changes (the
  weights are built from ``pi`` / the successor map exactly as below). Without these options the
  pair is the single family ``0..V-1``: same seed, same maps, byte-identical files, format-1
  ``oracle.json``; with K > 1 ``oracle.json`` is format 2 (format 1 plus ``families``, each
  ``token_ids`` [start, stop), ``p_wrong`` and derived rates), and ``p_wrong`` is the families'
  size-weighted mean. ``Oracle.load`` reads both formats.
* Target (``models/llama.py``): embedding ``E`` Gaussian (std 1). Every ``o_proj`` / ``down_proj``
  is zero (optionally ``proj_noise``-sized noise), so each decoder layer adds exactly 0 to the
  residual stream: the residual stays ``E[x_t]`` through all layers (llama.py:308-330, fused
  add+RMSNorm), the EAGLE-3 aux hidden states ``hidden_states + residual`` captured before layers
  ``[2, L//2, L-3]`` (llama.py:392-395, 798-805) all equal ``E[x_t]``, and the final RMSNorm
  (llama.py:412) gives ``n = E[x]/rms(E[x])`` (norm weights are 1; RMSNorm only rescales by a
  positive scalar, so it cannot move the argmax). ``lm_head`` row ``j < V`` is the unit vector
  ``u[pi^-1(j)] = E[pi^-1(j)]/|E[pi^-1(j)]|``; special/padding rows are 0. The logit of
  ``pi(x)`` is exactly ``sqrt(H)`` (|n| = sqrt(H), cos = 1); every other word's logit is
  ``sqrt(H)*cos(E[x], E[y]) ~ N(0, 1)``; special tokens score exactly 0. Unit rows (instead of the
  note's raw ``E`` rows) keep logits O(sqrt(H)): the measured gap to the runner-up is >= 39 logits
  (1b) / >= 58 (8b) in bf16 (``bench.margin_check``), so even temperature-1 sampling follows the
  chain (runner-up probability < V*e^-39 per token); at tiny size the gap is ~12.
* Draft (``models/llama_eagle3.py``): ``fc`` (3H -> H) = ``[I, 0, 0]`` so the residual starts as the
  first aux hidden state ``E[x_t]`` (llama_eagle3.py:217-225). The decoder layer feeds
  ``cat(input_layernorm(embed), hidden_norm(hidden))`` (width 2H) into ``qkv_proj``
  (llama_eagle3.py:55-68, 93-98) -- random weights, but ``o_proj`` is zero so attention adds 0 and
  the token embedding has no effect. The residual after attention is still ``E[x_t]``
  (llama_eagle3.py:95, 110); ``post_attention_layernorm`` hands the MLP ``n = E[x]/rms(E[x])``.
  The MLP is a key-value memory over all ``V`` words: row ``i`` of ``gate_proj`` is ``s*u[i]``,
  row ``i`` of ``up_proj`` is ``u[i]``, column ``i`` of ``down_proj`` is
  ``(E[m(i)] - E[i]) / (s*H)`` where ``m(i) = pi(i)`` (or a wrong successor for corrupted keys).
  For the matching key ``gate = s*sqrt(H)`` exactly, so ``SiLU(gate)*up = s*H*sigmoid(s*sqrt(H))
  ~= s*H`` and the MLP adds ``E[m(x)] - E[x]``; other keys give O(1) activations whose mean part
  cancels (sum over a permutation) and whose random part is ~ ``sqrt(2V/H)`` (std-1 units) against
  a signal of norm ``sqrt(H)``. The final ``norm(mlp_out + residual)`` (llama_eagle3.py:241-247)
  then meets the same ``lm_head`` as the target (``draft_vocab_size = V``, ``d2t`` all zeros:
  SGLang maps draft id ``i`` to target id ``i + d2t[i]``, llama_eagle3.py:318-321, used as
  ``hot_token_id[topk_index]`` in speculative/eagle_worker.py:864-865), so the draft predicts
  ``pi(m(x_t))`` = ``x_{t+2}`` unless ``x_t`` is corrupted, and its pre-norm output hidden
  ``E[m(x_t)]`` (llama_eagle3.py:246) is exactly what the next draft step needs. Needs
  ``intermediate_size >= V`` (the draft's intermediate is raised to ``V`` rounded up to 256 if needed).
* Corrections to the design note: the draft residual is the *fc output* (not normed) and the
  draft MLP sees the post-attention-RMSNorm'd residual, so keys are matched against
  ``E[x]/rms(E[x])`` (norm sqrt(H)) -- the scales above follow from that; ``SiLU(gate)*up`` is
  ``s*H`` only with ``up`` at unit scale (the note scales both by s); the draft's output hidden used
  by the next step is the *pre-norm* ``mlp_out + residual``; the target aux layers are the inputs
  of layers 2, L//2, L-3 and must be distinct (L >= 7), because SGLang appends one aux tensor per
  layer index, in ascending order (duplicates would shrink the fc input below 3H).
* EOS: ``eos_token_id = V+2`` (``</s>``) is in config.json and generation_config.json (SGLang
  stops on their union, configs/model_config.py:1309-1327), but its lm_head row is 0 so greedy
  decoding of a word prompt never produces it: no ``ignore_eos`` needed (though it is harmless).
  The tokenizer adds no BOS (no post-processor, ``add_bos_token: false``), so a text prompt
  "w5 w17" is exactly ids [5, 17] and the continuation is ``pi`` applied to the last word.

KV-sensitive pair (``--kv-sensitive``, ``generate_pair(kv_sensitive=True)``; oracle.json format 3).
In the pair above the target's attention adds nothing and the draft's ``o_proj`` is zero, so a
wrong or stale K/V cache (after the gate's OFF steps, a retraction, a switch) cannot change any
output. This variant routes the next token through attention over earlier positions, in both
models; maps (``pi``, corruption, families), shapes, configs and tokenizer are the same, and so
are the per-token acceptance and ``expected_accept_length``.

* Layout (``KVLayout``, ``D = min(kv_heads * head_dim, (H-1)//2)``: 127 tiny, 1023 1b, 1024 8b):
  embedding row ``x`` = the code ``c(x)`` (random direction, ``|c| = sqrt(D)``) on dims C =
  ``0..D-1``, ``KV_BIAS`` on ``bias_dim = 2D``, 0 elsewhere -- in particular on P = ``D..2D-1``,
  which only attention writes and both lm_heads read. ``u(x) = c(x)/|c(x)|``.
* Positional heads (``PositionalHead``): q_proj/k_proj read only ``bias_dim``, so q and k are one
  fixed vector per head whatever the token, and RoPE makes the softmax logit of key ``s`` for the
  query at ``t`` a function ``S(s - t + offset)`` of the distance alone, peaked at
  ``s = t - offset`` with a gap of ``KV_ATTENTION_GAP`` = 30 nats to every other key up to
  ``max_position_embeddings`` (checked numerically, also with bf16 q/k/cos/sin): such a head
  returns the value of exactly one earlier position. v_proj copies C into the value (KV head
  ``g`` carries code dims ``g*head_dim..``), o_proj writes it to P at its embedding scale.
* Target: layer 0's heads all look one position back; every other ``o_proj`` / ``down_proj`` is 0,
  so from layer 1 on the residual is ``E[x_t] + c(x_{t-1})`` (P part = ``c(x_{t-1})``; so are the
  three aux states). ``lm_head`` row ``j`` = ``u(pi^-1(j))`` on P: the next token after
  ``x_{t-1}, x_t`` is ``pi(x_{t-1})``, and the continuation of ``[.., a, b]`` is
  ``pi(a), pi(b), pi^2(a), pi^2(b), ..`` (``Oracle.continuation``). Logit of the winner
  ``~ sqrt(D)`` (11 tiny, 32 1b, 45 8b), runner-up gap >= 7 / 26 / 37 in bf16
  (``bench.margin_check --preset P --kv-sensitive``).
* Draft: at position p its embedding input is ``x_{p+1}`` and it must propose ``x_{p+2} =
  pi(x_p)``. ``fc`` copies the first aux state's P dims (``c(x_{p-1})``) onto P. Half of each KV
  group's query heads look one position back and add the code of their embedding input there,
  ``c(x_p)``; the other half look two back and subtract ``c(x_{p-1})``. At an extend position
  the fc copy and the subtraction cancel; at a decode step the residual is the previous step's
  output hidden, whose P part is the code the two-back heads subtract: either way the P part
  entering the MLP is exactly ``c(x_p)``, read from the draft's own K/V. ``lm_head`` is the
  target's (``pi``), so the draft proposes ``pi(x_p)``. The MLP memory holds only the corrupted
  keys ``k``: it turns ``c(k)`` into ``sqrt(D) (u(pi^-1(succ(k))) - KV_WRONG_PUSH u(k))``, so the
  proposal is ``succ(k)`` and the right token scores below zero (never another top-k branch of
  an EAGLE tree: topk > 1 accepts exactly the chain's). Proposals: ``Oracle.draft_proposals``.
* What a wrong K/V does: the target's K/V of position t-1 holding another token's (or another
  position's) makes the next token ``pi`` of something else -- an output mismatch; the draft's
  K/V of positions p-1 / p-2 left unwritten or written for the wrong token (e.g. by OFF steps)
  makes its proposal wrong -- an accept length below ``Oracle.accept_lengths_from``; a stale aux
  hidden leaves an uncancelled code in P (often a wrong proposal). The default pair gives the
  same output and accept lengths in all these cases (tests/test_synthetic_kv.py shows both).
* Limits: the target reads exactly one position back, in layer 0 (a K/V entry damaged after it
  was read as "the previous position", or the K/V of layers 1.., change nothing); the draft's K/V
  depend on its embedding input and position, not on the hidden half of its input; the oracle
  needs prompts of >= 2 tokens for the output and >= 3 for speculation (``min_prompt_length``:
  the draft's first step looks three positions back from the end), word tokens in the last two
  places; ``proj_noise`` is refused.
"""

from __future__ import annotations

import argparse
import bisect
import dataclasses
import json
import math
import os
import re
import sys
import time
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np
import torch

DESIGN_NOTE = "shared/design/synthetic-models.md"

#: Special tokens, in id order, placed right after the V word tokens.
SPECIAL_TOKENS: tuple[str, ...] = ("<unk>", "<s>", "</s>", "<pad>")
#: config.vocab_size is padded up to a multiple of this (GEMM-friendly logits width).
VOCAB_PAD_MULTIPLE = 64
#: Gate scale ``s`` of the draft's key-value memory (see module docstring).
MEMORY_GATE_SCALE = 1.0
#: oracle.json format of a single-family pair (unchanged since the first generator).
ORACLE_FORMAT_VERSION = 1
#: oracle.json format of a multi-family pair: version 1 plus a ``families`` list. A reader that
#: knows only version 1 refuses it (its single ``p_wrong`` would mispredict acceptance).
ORACLE_FORMAT_VERSION_FAMILIES = 2
#: oracle.json format of a KV-sensitive pair (``--kv-sensitive``, one family or several): version 1
#: (plus ``families`` when K > 1) with ``kv_sensitive: true`` and ``kv_construction``. Its greedy
#: output depends on the last *two* prompt tokens, so a reader that knows only 1/2 must refuse it.
ORACLE_FORMAT_VERSION_KV = 3
ORACLE_FORMAT_VERSIONS = (ORACLE_FORMAT_VERSION, ORACLE_FORMAT_VERSION_FAMILIES, ORACLE_FORMAT_VERSION_KV)

#: KV-sensitive pair: RoPE frequency pairs its positional heads use (the fastest ones; a slow pair
#: turns too little between neighbouring positions to tell them apart, so it only adds a constant).
KV_HEAD_FREQS = 16
#: KV-sensitive pair: smallest softmax-logit gap (nats) between a positional head's wanted key and
#: any other key within ``max_position_embeddings``; the other keys then share < T * e^-30 weight.
KV_ATTENTION_GAP = 30.0
#: KV-sensitive pair: the constant embedding coordinate every word carries (q and k are made from it).
KV_BIAS = 1.0
#: KV-sensitive pair: a corrupted draft key also pushes the right token down by this (x its unit
#: code), so the right token is never among a tree's other top-k branches (exact topk > 1 acceptance).
KV_WRONG_PUSH = 0.5


@dataclasses.dataclass(frozen=True)
class Preset:
    """Model shape of one preset. ``vocab`` is the default number of word tokens ``V``."""

    name: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int
    vocab: int
    max_position_embeddings: int
    dtype: str
    rope_theta: float = 500000.0
    rms_norm_eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads


PRESETS: dict[str, Preset] = {
    # CPU tests: 8 layers so that SGLang's default capture layers [2, 4, 5] are distinct.
    "tiny": Preset("tiny", 256, 8, 4, 2, 512, 128, 4096, "float32"),
    # Llama-3.2-1B-like shape (hidden 2048, 16 layers, 16 heads, 8 KV heads); intermediate 8192 >= V.
    "1b": Preset("1b", 2048, 16, 16, 8, 8192, 8192, 16384, "bfloat16"),
    # Llama-3.1-8B shape.
    "8b": Preset("8b", 4096, 32, 32, 8, 14336, 8192, 16384, "bfloat16"),
}

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_ST_DTYPE = {
    torch.float32: "F32",
    torch.bfloat16: "BF16",
    torch.float16: "F16",
    torch.int64: "I64",
    torch.bool: "BOOL",
}


def _round_up(x: int, m: int) -> int:
    return (x + m - 1) // m * m


def sglang_default_capture_layers(num_layers: int) -> list[int]:
    """Layer indices whose *input* SGLang captures as EAGLE-3 aux hidden states, in capture order.

    SGLang sets ``layers_to_capture = [2, L//2, L-3]`` when the draft config has no
    ``eagle_config.eagle_aux_hidden_state_layer_ids`` (models/llama.py:798-805) and appends
    ``hidden_states + residual`` once per layer index ``i`` that is in that list while looping
    ``i`` upward (llama.py:392-395), so the result is sorted and de-duplicated.

    Raises ValueError when the three layers are not distinct and >= 1 (then the draft's ``fc``,
    which expects 3 * hidden inputs, would not match, and layer 0 has no residual yet).
    """
    wanted = [2, num_layers // 2, num_layers - 3]
    layers = sorted(set(wanted))
    if len(layers) != 3 or layers[0] < 1:
        raise ValueError(
            f"num_layers={num_layers}: default EAGLE-3 capture layers {wanted} are not 3 distinct "
            "layers >= 1 (need num_layers >= 7)"
        )
    return layers


def vocab_layout(vocab: int) -> dict:
    """Token-id layout for ``vocab`` word tokens.

    Returns a dict with ``vocab`` (word ids are ``0..vocab-1``), ``special_tokens`` (name -> id:
    ``<unk>`` = vocab, ``<s>`` = vocab+1, ``</s>`` = vocab+2, ``<pad>`` = vocab+3), ``bos_token_id``,
    ``eos_token_id``, ``pad_token_id``, ``unk_token_id``, ``tokenizer_size`` (vocab + 4) and
    ``vocab_size`` (the config value: tokenizer_size rounded up to a multiple of 64).
    """
    if vocab < 2:
        raise ValueError(f"vocab must be >= 2, got {vocab}")
    specials = {tok: vocab + i for i, tok in enumerate(SPECIAL_TOKENS)}
    return {
        "vocab": vocab,
        "special_tokens": specials,
        "unk_token_id": specials["<unk>"],
        "bos_token_id": specials["<s>"],
        "eos_token_id": specials["</s>"],
        "pad_token_id": specials["<pad>"],
        "tokenizer_size": vocab + len(SPECIAL_TOKENS),
        "vocab_size": _round_up(vocab + len(SPECIAL_TOKENS), VOCAB_PAD_MULTIPLE),
    }


@dataclasses.dataclass(frozen=True)
class PromptFamily:
    """One prompt family: the word ids ``start..stop-1`` (half-open, ``size = stop - start >= 2``),
    one cycle of ``pi`` over them, and a draft wrong on ``round(p_wrong * size)`` of their keys.

    A greedy continuation never leaves the family of its prompt's last token, so a prompt's family
    fixes its accept length. In ``oracle.json``: ``{"token_ids": [start, stop], "p_wrong": p, ...}``.
    Raises ValueError for ``size < 2``, ``start < 0`` or ``p_wrong`` outside [0, 1].
    """

    start: int
    stop: int
    p_wrong: float

    def __post_init__(self) -> None:
        if not 0.0 <= self.p_wrong <= 1.0:
            raise ValueError(f"p_wrong must be in [0, 1], got {self.p_wrong}")
        if self.start < 0 or self.size < 2:
            raise ValueError(f"a family needs >= 2 word ids >= 0, got {self.start}..{self.stop - 1}")

    @property
    def size(self) -> int:
        """Number of word ids in the family."""
        return self.stop - self.start

    @property
    def corrupted_count(self) -> int:
        """Keys with a wrong draft successor: ``round(p_wrong * size)`` (halves round up)."""
        return int(math.floor(self.p_wrong * self.size + 0.5))

    def contains(self, token: int) -> bool:
        """True for ``start <= token < stop``."""
        return self.start <= int(token) < self.stop

    def to_json(self) -> dict:
        return {"token_ids": [self.start, self.stop], "p_wrong": self.p_wrong}

    @classmethod
    def from_json(cls, d: "dict | PromptFamily") -> "PromptFamily":
        """From ``to_json()``'s dict (extra keys such as derived rates are ignored), or as is."""
        if isinstance(d, PromptFamily):
            return d
        start, stop = d["token_ids"]
        return cls(int(start), int(stop), float(d["p_wrong"]))


def split_families(vocab: int, p_wrong_families: Sequence[float]) -> list[PromptFamily]:
    """``K = len(p_wrong_families)`` contiguous families over word ids ``0..vocab-1``, sizes
    ``floor``/``ceil`` of ``vocab / K`` (family ``k`` starts at ``k * vocab // K``); family ``k``'s
    draft is wrong with probability ``p_wrong_families[k]``.

    Raises ValueError for ``K < 1``, a family smaller than 2 ids (``K > vocab // 2``), or a
    ``p_wrong`` outside [0, 1].
    """
    k = len(p_wrong_families)
    if k < 1:
        raise ValueError("need at least one family")
    if vocab < 2 * k:
        raise ValueError(f"{k} families need vocab >= {2 * k} (2 ids each), got {vocab}")
    bounds = [i * vocab // k for i in range(k + 1)]
    return [PromptFamily(bounds[i], bounds[i + 1], float(p)) for i, p in enumerate(p_wrong_families)]


def prompt_families(vocab: int, p_wrong: float = 0.0, families: int | None = None,
                    p_wrong_families: Sequence[float] | None = None) -> list[PromptFamily]:
    """The families of a pair, from ``generate_pair``/``build_maps``'s options.

    * neither ``families`` nor ``p_wrong_families``: one family ``0..vocab-1`` with ``p_wrong``
      (the original single-cycle pair);
    * ``families=K`` alone: K families, each with ``p_wrong``;
    * ``p_wrong_families=[p_0, .., p_{K-1}]``: K families (``families``, if given, must equal K).

    Raises ValueError when ``families`` and ``len(p_wrong_families)`` differ, when a nonzero
    ``p_wrong`` is given together with ``p_wrong_families`` (ambiguous), or as ``split_families``.
    """
    if vocab < 2:
        raise ValueError(f"vocab must be >= 2, got {vocab}")
    if p_wrong_families is None:
        return split_families(vocab, [float(p_wrong)] * (1 if families is None else int(families)))
    if p_wrong:
        raise ValueError("give p_wrong or p_wrong_families, not both")
    if families is not None and int(families) != len(p_wrong_families):
        raise ValueError(f"families={families} but {len(p_wrong_families)} p_wrong_families values")
    return split_families(vocab, p_wrong_families)


def mean_p_wrong(families: Sequence[PromptFamily]) -> float:
    """Size-weighted mean of the families' ``p_wrong`` (exactly ``p_wrong`` for one family)."""
    if len(families) == 1:
        return families[0].p_wrong
    return sum(f.p_wrong * f.size for f in families) / sum(f.size for f in families)


def _check_partition(families: Sequence[PromptFamily]) -> int:
    """Number of words; raises ValueError unless the families tile ``0..vocab-1`` in order."""
    if not families or families[0].start != 0:
        raise ValueError("families must start at word id 0")
    for a, b in zip(families, families[1:]):
        if b.start != a.stop:
            raise ValueError(f"families must be contiguous: {a.start}..{a.stop - 1} then {b.start}..")
    return families[-1].stop


def _draw_family(rng: np.random.Generator, fam: PromptFamily, pi: np.ndarray, succ: np.ndarray) -> list[int]:
    """Fill ``pi`` and ``succ`` (int64 [vocab], in place) on ``fam``'s ids; return its corrupted keys.

    Draws, in this order: a permutation of the family (its cycle order), the corrupted keys, then
    one wrong successor per corrupted key, uniform over the family's ids ``!= pi[key]``. For the
    single family ``0..V-1`` this is exactly the original single-cycle draw sequence.
    """
    lo, n = fam.start, fam.size
    order = lo + rng.permutation(n)
    pi[order] = np.roll(order, -1)
    n_wrong = fam.corrupted_count
    corrupted = lo + np.sort(rng.choice(n, size=n_wrong, replace=False)) if n_wrong else np.array([], np.int64)
    succ[lo:fam.stop] = pi[lo:fam.stop]
    for c in corrupted:
        w = int(rng.integers(n - 1))
        if w >= pi[c] - lo:
            w += 1
        succ[c] = lo + w
    return [int(c) for c in corrupted]


def build_family_maps(families: Sequence[PromptFamily], seed: int) -> tuple[list[int], list[int], list[int]]:
    """``build_maps`` for explicit families (a contiguous tiling of the word ids, in order).

    Returns ``(pi, draft_successor, corrupted)``, each a list of word ids: ``pi`` is one cycle per
    family, ``draft_successor`` differs from ``pi`` exactly on ``corrupted`` (sorted), and both
    map each family into itself. Drawn with ``numpy.random.default_rng(seed)``, family by family.
    Raises ValueError unless ``families`` tile ``0..V-1``.
    """
    vocab = _check_partition(families)
    rng = np.random.default_rng(seed)
    pi = np.empty(vocab, dtype=np.int64)
    succ = np.empty(vocab, dtype=np.int64)
    corrupted: list[int] = []
    for fam in families:
        corrupted += _draw_family(rng, fam, pi, succ)
    return pi.tolist(), succ.tolist(), corrupted


def build_maps(vocab: int, p_wrong: float, seed: int, families: int | None = None,
               p_wrong_families: Sequence[float] | None = None) -> tuple[list[int], list[int], list[int]]:
    """The oracle's maps, drawn with ``numpy.random.default_rng(seed)`` (device independent).

    Returns ``(pi, draft_successor, corrupted)``:

    * ``pi[x]``: the target's greedy next token after word ``x``. By default one cycle through all
      ``vocab`` words; with ``families``/``p_wrong_families`` (see ``prompt_families``) one cycle
      per family, so ``pi`` never leaves a family.
    * ``corrupted``: sorted list of distinct word ids (memory keys whose value is wrong):
      ``round(p_wrong * vocab)`` of them, or ``round(p_k * size_k)`` in each family ``k``.
    * ``draft_successor[x]``: the token whose embedding the draft's MLP writes for key ``x``:
      ``pi[x]`` unless ``x`` is corrupted, else a uniformly drawn word ``!= pi[x]`` of ``x``'s family.

    Without ``families``/``p_wrong_families`` the draws are those of the original single-cycle
    generator (same seed, same maps; pinned by tests/test_synthetic_families.py).
    Raises ValueError for ``p_wrong`` outside [0, 1], ``vocab < 2``, or bad family options.
    """
    if not 0.0 <= p_wrong <= 1.0:
        raise ValueError(f"p_wrong must be in [0, 1], got {p_wrong}")
    return build_family_maps(prompt_families(vocab, p_wrong, families, p_wrong_families), seed)


# ---------------------------------------------------------------------------------------------
# KV-sensitive construction: layout and positional heads
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class KVLayout:
    """Residual-stream layout of a KV-sensitive pair, in dims of the hidden size H.

    * C = dims ``0..D-1``: the token's own code ``c(x)`` (``|c(x)| = sqrt(D)``, a random direction);
    * P = dims ``D..2D-1``: zero in every embedding; only attention writes here (the code of an
      earlier token), and both lm_heads read only here;
    * ``bias_dim = 2D``: ``KV_BIAS`` in every embedding row (q and k are made from it alone, so
      they carry position only, through RoPE);
    * dims ``2D+1..H-1``: zero.

    ``D = min(num_kv_heads * head_dim, (H - 1) // 2)``: KV head ``g``'s value is C dims
    ``g*head_dim ..`` of its token, so all KV heads together carry one whole code.
    """

    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    code_dim: int

    @property
    def bias_dim(self) -> int:
        return 2 * self.code_dim

    @property
    def group(self) -> int:
        """Query heads per KV head."""
        return self.num_heads // self.num_kv_heads

    @property
    def code(self) -> slice:
        """C: the token's own code."""
        return slice(0, self.code_dim)

    @property
    def prev(self) -> slice:
        """P: the code an attention head copied from an earlier position."""
        return slice(self.code_dim, 2 * self.code_dim)

    @property
    def embed_rms(self) -> float:
        """RMS of a word embedding row, ``sqrt((D + KV_BIAS^2) / H)``: RMSNorm divides by this
        (up to bf16 rounding of the code and ``rms_norm_eps``), the same for every word."""
        return math.sqrt((self.code_dim + KV_BIAS**2) / self.hidden_size)

    def to_json(self) -> dict:
        return {"code_dims": [0, self.code_dim], "prev_dims": [self.code_dim, 2 * self.code_dim],
                "bias_dim": self.bias_dim}


def kv_layout(p: Preset) -> KVLayout:
    """The ``KVLayout`` of preset ``p``. Raises ValueError when the shape cannot hold it: the
    query heads per KV head must be even (half of the draft's heads look one position back, half
    two), and H must leave room for C, P and the bias dim."""
    hd, nh, nkv = p.head_dim, p.num_heads, p.num_kv_heads
    if nh % nkv or (nh // nkv) % 2:
        raise ValueError(f"KV-sensitive pair needs an even number of query heads per KV head, "
                         f"got {nh} heads / {nkv} KV heads")
    d = min(nkv * hd, (p.hidden_size - 1) // 2)
    if d < 16:
        raise ValueError(f"hidden size {p.hidden_size} too small for a KV-sensitive pair")
    return KVLayout(p.hidden_size, nh, nkv, hd, d)


@dataclasses.dataclass(frozen=True)
class PositionalHead:
    """q/k of an attention head that looks exactly ``offset`` positions back, through RoPE alone.

    Neox RoPE turns the pair (i, i + head_dim/2) of q at position t by ``t*theta_i`` and of k at
    position s by ``s*theta_i`` (``theta_i = rope_theta^(-2i/head_dim)``), so with
    ``k0_i = mu_i (1, 0)`` and ``q0_i = lambda_i (cos(offset*theta_i), -sin(offset*theta_i))`` the
    softmax logit ``head_dim^-0.5 q.k`` is ``S(s - t + offset)`` with
    ``S(delta) = sum_i w_i cos(delta*theta_i)``, ``w_i = head_dim^-0.5 lambda_i mu_i``: largest at
    ``delta = 0`` (key ``s = t - offset``), for every t. ``w_i`` is ``sqrt(theta_i)`` on the
    ``KV_HEAD_FREQS`` fastest pairs (0 on the rest), scaled so that ``min_gap`` =
    ``S(0) - max_{1 <= |delta| <= max_positions} S(delta)`` equals ``gap`` (nats). One ``k0``
    serves every offset (a KV head's query heads may look back by different offsets).
    """

    head_dim: int
    rope_theta: float
    max_positions: int
    weights: tuple[float, ...]  # w_i, [head_dim // 2], softmax-logit units
    min_gap: float

    @classmethod
    def build(cls, head_dim: int, rope_theta: float, max_positions: int,
              gap: float = KV_ATTENTION_GAP) -> "PositionalHead":
        """Raises ValueError when no gap is left (head_dim < 4 or max_positions < 1)."""
        if head_dim < 4 or head_dim % 2 or max_positions < 1:
            raise ValueError(f"positional head needs an even head_dim >= 4 and max_positions >= 1, "
                             f"got {head_dim}, {max_positions}")
        theta = cls._inv_freq(head_dim, rope_theta)
        w = np.zeros(head_dim // 2)
        k = min(KV_HEAD_FREQS, head_dim // 2)
        w[:k] = np.sqrt(theta[:k])
        g = cls._gaps(w, theta, max_positions).min()
        if not g > 0:
            raise ValueError("positional head: no gap between the wanted key and the others")
        w *= gap / g
        return cls(head_dim, float(rope_theta), int(max_positions), tuple(float(x) for x in w),
                   float(cls._gaps(w, theta, max_positions).min()))

    @staticmethod
    def _inv_freq(head_dim: int, rope_theta: float) -> np.ndarray:
        # SGLang RotaryEmbedding._compute_inv_freq (layers/rotary_embedding/base.py:119-139)
        return 1.0 / rope_theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)

    @staticmethod
    def _gaps(w: np.ndarray, theta: np.ndarray, max_positions: int) -> np.ndarray:
        """``S(0) - S(delta)`` for ``delta = 1..max_positions`` (S is even)."""
        delta = np.arange(1, max_positions + 1, dtype=np.float64)[:, None]
        return (w[None, :] * (1.0 - np.cos(delta * theta[None, :]))).sum(axis=1)

    def _amplitude(self) -> np.ndarray:
        # lambda_i = mu_i = sqrt(w_i * sqrt(head_dim)): q and k of equal size (bf16 headroom both)
        return np.sqrt(np.asarray(self.weights) * math.sqrt(self.head_dim))

    def key(self) -> np.ndarray:
        """k0 [head_dim] (before RoPE): ``mu_i`` at dim i, 0 at dim i + head_dim/2."""
        k = np.zeros(self.head_dim)
        k[: self.head_dim // 2] = self._amplitude()
        return k

    def query(self, offset: int) -> np.ndarray:
        """q0 [head_dim] (before RoPE) of a head that attends to the key ``offset`` positions back."""
        theta = self._inv_freq(self.head_dim, self.rope_theta)
        a, half = self._amplitude(), self.head_dim // 2
        q = np.zeros(self.head_dim)
        q[:half] = a * np.cos(offset * theta)
        q[half:] = -a * np.sin(offset * theta)
        return q

    def logits(self, rel: Sequence[int], offset: int) -> np.ndarray:
        """Softmax logits [len(rel)] of the keys at relative positions ``rel`` (``s - t <= 0``)."""
        theta = self._inv_freq(self.head_dim, self.rope_theta)
        d = (np.asarray(rel, dtype=np.float64) + offset)[:, None]
        return (np.asarray(self.weights)[None, :] * np.cos(d * theta[None, :])).sum(axis=1)

    def to_json(self) -> dict:
        return {"freq_pairs": int(np.count_nonzero(self.weights)), "min_gap_nats": self.min_gap,
                "peak_logit": float(sum(self.weights)), "max_positions": self.max_positions}


def kv_construction(p: Preset) -> dict:
    """What ``oracle.json`` records of a KV-sensitive pair's construction (informative)."""
    head = PositionalHead.build(p.head_dim, p.rope_theta, p.max_position_embeddings)
    return {"layout": kv_layout(p).to_json(), "positional_head": head.to_json(),
            "target_attention_layer": 0, "target_offsets": [1], "draft_offsets": [1, 2],
            "wrong_push": KV_WRONG_PUSH}


# ---------------------------------------------------------------------------------------------
# Oracle
# ---------------------------------------------------------------------------------------------


def _chain_accept_length(a: float, num_steps: int) -> float:
    """``1 + a + .. + a^k = (1 - a^(k+1)) / (1 - a)`` for per-token acceptance ``a``, k steps."""
    if a >= 1.0:
        return float(num_steps + 1)
    return (1.0 - a ** (num_steps + 1)) / (1.0 - a)


@dataclasses.dataclass
class Oracle:
    """What a generated pair will do, without running it (``DIR/oracle.json``).

    Token ids ``0..vocab-1`` are the words ``"w0".."w{vocab-1}"``; ``special_tokens`` come after.
    ``families`` (``PromptFamily`` list, or the dicts of ``oracle.json``) tiles the words; None
    (the default, and every format-1 file) means one family ``0..vocab-1`` with ``p_wrong``, and
    ``__post_init__`` fills it in; ``format_version`` is set from the number of families (1 for
    one, 2 for more, 3 for a KV-sensitive pair). With several families ``generate_pair`` stores
    their size-weighted mean ``p_wrong`` (a label; the per-family values drive every prediction).

    ``kv_sensitive`` (``--kv-sensitive``): the target's greedy next token after ``... a, b`` is
    ``pi[a]`` (the token one position *before* the last, read through attention), not ``pi[b]``;
    the continuation of ``[.., a, b]`` is ``pi(a), pi(b), pi^2(a), pi^2(b), ..`` (``continuation``).
    The draft step at a position reads the token there through attention as well, so its memory
    keys are the sequence's own tokens (see ``draft_proposals``). The sequence methods
    (``next_after``, ``continuation``, ``draft_proposals``, ``accepted_after``, ``spec_decode``,
    ``accept_lengths_from``) serve both kinds of pair; ``chain``/``next_token`` stay the pi chain,
    and the methods that take one key (``draft_chain``, ``accepted_drafts``,
    ``simulate_spec_decode``) refuse a KV-sensitive pair. The acceptance formulas are the same.
    ``kv_construction`` records the layout and positional heads (informative).
    """

    pi: list[int]
    draft_successor: list[int]
    corrupted: list[int]
    p_wrong: float
    seed: int
    preset: str
    vocab: int
    vocab_size: int
    special_tokens: dict[str, int]
    eos_token_id: int
    bos_token_id: int
    pad_token_id: int
    unk_token_id: int
    hidden_size: int
    num_layers: int
    draft_intermediate_size: int
    target_layers_to_capture: list[int]
    dtype: str
    device: str = "cpu"
    proj_noise: float = 0.0
    format_version: int = ORACLE_FORMAT_VERSION
    families: list[PromptFamily] | None = None
    kv_sensitive: bool = False
    kv_construction: dict | None = None

    def __post_init__(self) -> None:
        self._pi_inv = [0] * self.vocab
        for x, y in enumerate(self.pi):
            self._pi_inv[y] = x
        self._corrupted_set = set(self.corrupted)
        if self.families is None:
            self.families = [PromptFamily(0, self.vocab, float(self.p_wrong))]
        self.families = [PromptFamily.from_json(f) for f in self.families]
        if _check_partition(self.families) != self.vocab:
            raise ValueError(f"families end at {self.families[-1].stop}, vocab is {self.vocab}")
        self.format_version = ORACLE_FORMAT_VERSION if len(self.families) == 1 else ORACLE_FORMAT_VERSION_FAMILIES
        self.kv_sensitive = bool(self.kv_sensitive)
        if self.kv_sensitive:
            self.format_version = ORACLE_FORMAT_VERSION_KV
        self._family_starts = [f.start for f in self.families]
        self._family_corrupted = [0] * len(self.families)
        for c in self.corrupted:
            self._family_corrupted[self.family_of(c)] += 1

    # -- identity ---------------------------------------------------------------------------
    @property
    def accept_rate(self) -> float:
        """Per-draft-token acceptance over all keys: ``1 - |corrupted| / vocab`` (``1 - p_wrong`` up
        to rounding; with several families, the mean over keys drawn uniformly from all words)."""
        return 1.0 - len(self.corrupted) / self.vocab

    # -- prompt families ----------------------------------------------------------------------
    @property
    def num_families(self) -> int:
        """Number of prompt families (1 for the original single-cycle pair)."""
        return len(self.families)

    def family_of(self, token: int) -> int:
        """Index of the family holding word ``token`` (that of every token of its chain)."""
        return bisect.bisect_right(self._family_starts, self._check_word(token)) - 1

    def _check_family(self, family: int) -> PromptFamily:
        if not 0 <= int(family) < len(self.families):
            raise ValueError(f"family {family} does not exist (0..{len(self.families) - 1})")
        return self.families[int(family)]

    def family_accept_rate(self, family: int) -> float:
        """Per-draft-token acceptance of one family: ``1 - corrupted keys / size`` (about
        ``1 - p_wrong[family]``)."""
        size = self._check_family(family).size
        return 1.0 - self._family_corrupted[int(family)] / size

    def family_prompt_ids(self, family: int, num_prompts: int, length: int, seed: int = 0) -> list[list[int]]:
        """``num_prompts`` prompts of ``length`` word ids, all in ``family`` (shape
        [num_prompts][length]); their continuations stay in it, so they accept
        ``expected_accept_length(k, family)``. Seeded like ``random_prompt_ids``."""
        return random_prompt_ids(self.vocab, num_prompts, length, seed, family=self._check_family(family))

    def is_word(self, token: int) -> bool:
        """True for word ids ``0..vocab-1`` (the only ids the chain visits)."""
        return 0 <= int(token) < self.vocab

    def _check_word(self, token: int) -> int:
        token = int(token)
        if not self.is_word(token):
            raise ValueError(
                f"token {token} is not a word id (0..{self.vocab - 1}); the chain is only defined on words"
            )
        return token

    # -- target -------------------------------------------------------------------------------
    def next_token(self, token: int) -> int:
        """The target's greedy next token after word ``token``: ``pi[token]``."""
        return self.pi[self._check_word(token)]

    def prev_token(self, token: int) -> int:
        """``pi^-1[token]``."""
        return self._pi_inv[self._check_word(token)]

    def chain(self, start_token: int, n: int) -> list[int]:
        """The expected greedy continuation: ``[pi(start), pi(pi(start)), ...]``, ``n`` ids.

        Holds for any prompt whose last token is ``start_token`` (the target ignores context),
        with speculation on, off or switching; every id is in ``family_of(start_token)``. Raises ValueError if ``start_token`` is not a word
        id or ``n < 0``. A KV-sensitive pair's output is not this chain: use ``continuation``.
        """
        x = self._check_word(start_token)
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        out = []
        for _ in range(n):
            x = self.pi[x]
            out.append(x)
        return out

    # -- draft --------------------------------------------------------------------------------
    def draft_chain(self, key: int, num_steps: int) -> list[int]:
        """The draft's chain proposal (topk 1) when the last *verified* position holds ``key``.

        In SGLang's EAGLE-3 loop the first draft step sees the target's aux hidden of the
        second-to-last committed token ``key`` (and the embedding of the last committed token
        ``pi(key)``); step ``i`` proposes ``pi(m^i(key))`` with ``m = draft_successor``.
        Equal to ``chain(pi(key), num_steps + 1)[1:]`` up to the first corrupted key.
        Raises ValueError for a KV-sensitive pair (its proposals depend on two tokens:
        ``draft_proposals``).
        """
        self._refuse_kv("draft_chain", "draft_proposals")
        k = self._check_word(key)
        out = []
        for _ in range(num_steps):
            k = self.draft_successor[k]
            out.append(self.pi[k])
        return out

    def draft_correct(self, key: int) -> bool:
        """Whether the draft's step with memory key ``key`` proposes the right token (key not corrupted)."""
        return self._check_word(key) not in self._corrupted_set

    # -- acceptance ---------------------------------------------------------------------------
    def expected_accept_length(self, num_steps: int, family: int | None = None) -> float:
        """Expected mean accept length per verify for chain drafting (topk 1, ``num_steps`` steps).

        accept length = 1 + number of leading draft tokens the target accepts (SGLang counts the
        bonus token: ``spec_accept_length = completion_tokens / spec_verify_ct``,
        managers/tokenizer_manager.py:2130-2132). With per-token acceptance ``a`` (``accept_rate``)
        independent across tokens, ``P(first i drafts accepted) = a^i``, so

            E[L] = 1 + sum_{i=1..k} a^i = (1 - a^(k+1)) / (1 - a)     (= k + 1 when a = 1)

        -- Leviathan, Kalman & Matias, "Fast Inference from Transformers via Speculative
        Decoding", ICML 2023, Eq. (1) (gamma = k). Here the corrupted keys are a fixed random
        subset, so a single prompt's rounds scatter around this; ``simulate_spec_decode`` gives
        the exact value for a given prompt.

        ``family``: the value for prompts of that family (``a = family_accept_rate(family)``).
        None: with one family the formula above with ``accept_rate``; with several, the pooled
        value (tokens / verifies, as a server counts them) of prompts whose last token is uniform
        over all words and whose outputs have equal length: family ``k`` (weight
        ``w_k = size_k / vocab``) needs ``1 / E_k`` verifies per token, so
        ``E = 1 / sum_k (w_k / E_k)``. Raises ValueError if ``num_steps < 1`` or no such family.
        """
        if num_steps < 1:
            raise ValueError(f"num_steps must be >= 1, got {num_steps}")
        if family is not None:
            return _chain_accept_length(self.family_accept_rate(family), num_steps)
        if len(self.families) == 1:
            return _chain_accept_length(self.accept_rate, num_steps)
        lengths = self.expected_accept_lengths_by_family(num_steps)
        return 1.0 / sum(f.size / self.vocab / e for f, e in zip(self.families, lengths))

    def expected_accept_lengths_by_family(self, num_steps: int) -> list[float]:
        """``[expected_accept_length(num_steps, k) for each family k]`` (tokens per verify)."""
        return [self.expected_accept_length(num_steps, k) for k in range(len(self.families))]

    def expected_accept_rate(self, num_steps: int, family: int | None = None) -> float:
        """Expected SGLang ``spec_accept_rate`` (correct drafts / proposed drafts, no bonus).

        ``(expected_accept_length(k, family) - 1) / k`` (tokenizer_manager.py:2126-2129 counts a
        draft as correct only within the accepted prefix, so this is below ``accept_rate`` for
        k > 1).
        """
        return (self.expected_accept_length(num_steps, family) - 1.0) / num_steps

    def simulate_spec_decode(self, last_prompt_token: int, max_new_tokens: int, num_steps: int) -> dict:
        """Exact EAGLE-3 chain-drafting trace (topk 1) for a prompt ending in ``last_prompt_token``.

        Round structure (SGLang): prefill emits ``pi(last)``; each verify round proposes
        ``draft_chain(key, num_steps)`` where ``key`` is the second-to-last committed token,
        accepts ``n`` leading drafts and adds the target's bonus token, committing ``n + 1``.

        Returns ``{"tokens": ids (== chain(last, max_new_tokens)), "accept_lengths": [n+1 per
        round], "verify_ct": rounds, "mean_accept_length": mean of accept_lengths,
        "sglang_spec_accept_length": max_new_tokens / verify_ct}``. The last round may overshoot
        ``max_new_tokens`` (SGLang trims the tokens but counts the round), so the SGLang number is
        exact only when no round overshoots; expect small tail effects for short outputs.
        """
        self._refuse_kv("simulate_spec_decode", "spec_decode")
        last = self._check_word(last_prompt_token)
        if max_new_tokens < 1 or num_steps < 1:
            raise ValueError("max_new_tokens and num_steps must be >= 1")
        tokens = [self.pi[last]]
        key = last
        accept = []
        while len(tokens) < max_new_tokens:
            n = self.accepted_drafts(key, num_steps)
            tokens.extend(self.chain(tokens[-1], n + 1))
            accept.append(n + 1)
            for _ in range(n + 1):
                key = self.pi[key]
        tokens = tokens[:max_new_tokens]
        return {
            "tokens": tokens,
            "accept_lengths": accept,
            "verify_ct": len(accept),
            "mean_accept_length": (sum(accept) / len(accept)) if accept else float("nan"),
            "sglang_spec_accept_length": (max_new_tokens / len(accept)) if accept else float("nan"),
        }

    def accepted_drafts(self, key: int, num_steps: int) -> int:
        """Draft tokens the target accepts in one chain-drafting round (topk 1, ``num_steps`` steps)
        whose first draft step has memory key ``key`` (the second-to-last committed token, see
        ``draft_chain``): the leading steps whose keys are not corrupted, ``0..num_steps``.
        Raises ValueError for a KV-sensitive pair (``accepted_after``)."""
        self._refuse_kv("accepted_drafts", "accepted_after")
        n, k = 0, self._check_word(key)
        while n < num_steps and k not in self._corrupted_set:
            n += 1
            k = self.pi[k]
        return n

    def accept_lengths_from(self, prompt: Sequence[int], committed: int, num_rounds: int,
                            num_steps: int) -> list[int]:
        """Accept lengths (bonus token included) of ``num_rounds`` verify rounds of a perfect draft
        state that start once ``committed`` (>= 1) output tokens of ``prompt`` exist.

        This is what speculation must reach when it resumes after OFF steps: each OFF step commits
        one token of the continuation, so a request that made ``committed`` tokens without
        speculation drafts from ``seq = prompt + continuation(prompt, committed)``
        (``accepted_after(seq)``; key ``seq[-2]`` for the default pair). For topk > 1 the same holds
        with the synthetic draft (a corrupted key's other top-k branches are noise; a KV-sensitive
        draft even pushes the right token to the bottom there). Raises ValueError if
        ``committed < 1`` or ``num_rounds``/``num_steps < 1``, or (KV-sensitive) a prompt of < 3 tokens.
        """
        if committed < 1 or num_rounds < 1 or num_steps < 1:
            raise ValueError("committed, num_rounds and num_steps must be >= 1")
        self._check_spec_prompt(prompt)
        # only the last two tokens matter (one for the default pair): keep the list short
        seq = [self._check_word(t) for t in prompt[-2 if self.kv_sensitive else -1:]]
        seq += self.continuation(seq, committed)
        out = []
        for _ in range(num_rounds):
            n = self.accepted_after(seq, num_steps)
            out.append(n + 1)
            seq.extend(self.continuation(seq[-2:], n + 1))
            del seq[:-2]
        return out

    # -- sequence view (both kinds of pair) ----------------------------------------------------
    @property
    def min_prompt_length(self) -> int:
        """Shortest prompt whose speculative decoding the oracle predicts: 1, or 3 for a
        KV-sensitive pair (its draft's first step reads the prompt's last two tokens and the one
        before, through its positional heads)."""
        return 3 if self.kv_sensitive else 1

    def _refuse_kv(self, name: str, instead: str) -> None:
        if self.kv_sensitive:
            raise ValueError(f"{name}: a KV-sensitive pair's output depends on the last two tokens; "
                             f"use {instead} with the sequence")

    def _check_spec_prompt(self, prompt: Sequence[int]) -> None:
        if len(prompt) < self.min_prompt_length:
            raise ValueError(f"this pair needs prompts of >= {self.min_prompt_length} tokens, got {len(prompt)}")

    def next_after(self, seq: Sequence[int]) -> int:
        """The target's greedy next token after the word ids ``seq``: ``pi[seq[-1]]``, or for a
        KV-sensitive pair ``pi[seq[-2]]`` (its layer-0 heads read the position before the last).
        Raises ValueError for a non-word, an empty ``seq``, or a 1-token one of a KV-sensitive pair
        (whose only key is itself: undefined here)."""
        if self.kv_sensitive:
            if len(seq) < 2:
                raise ValueError("a KV-sensitive pair needs >= 2 tokens to predict the next one")
            self._check_word(seq[-1])
            return self.pi[self._check_word(seq[-2])]
        if not seq:
            raise ValueError("empty sequence")
        return self.pi[self._check_word(seq[-1])]

    def continuation(self, prompt: Sequence[int], n: int) -> list[int]:
        """The exact greedy continuation of ``prompt`` (word ids), ``n`` ids; with speculation on,
        off or switching. Default pair: ``chain(prompt[-1], n)``. KV-sensitive pair, prompt
        ``[.., a, b]``: ``pi(a), pi(b), pi^2(a), pi^2(b), ..`` (every token is pi of the token two
        before it). Raises ValueError as ``next_after`` or for ``n < 0``.
        """
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        if not self.kv_sensitive:
            if not prompt:
                raise ValueError("empty prompt")
            return self.chain(prompt[-1], n)
        self.next_after(prompt)
        a, b = int(prompt[-2]), int(prompt[-1])
        out = []
        for _ in range(n):
            a, b = b, self.pi[a]
            out.append(b)
        return out

    def draft_proposals(self, seq: Sequence[int], num_steps: int) -> list[int]:
        """The draft's chain proposal (topk 1) for a request whose committed tokens are ``seq``
        (its last token is the one the next verify feeds first).

        Default pair: ``draft_chain(seq[-2], num_steps)``. KV-sensitive pair: the draft step at
        position p reads the token *at p* through attention (its input embedding at p - 1) and
        proposes ``draft_successor`` of it for p + 2; the first proposal comes from position
        ``len(seq) - 2``, so with ``view = [seq[-2], seq[-1], d_1, d_2, ..]`` step i proposes
        ``d_i = draft_successor[view[i-1]]``. Exact up to and including the first wrong proposal
        (a corrupted key's memory output stays in the draft's hidden: later proposals of that
        round are unspecified, and never accepted). ``seq`` is the committed sequence of a prompt of
        >= ``min_prompt_length`` tokens (or just its last two tokens). Raises ValueError for < 2
        tokens or ``num_steps < 1``.
        """
        if num_steps < 1:
            raise ValueError(f"num_steps must be >= 1, got {num_steps}")
        if len(seq) < 2:
            raise ValueError("draft proposals need >= 2 committed tokens")
        if not self.kv_sensitive:
            return self.draft_chain(seq[-2], num_steps)
        view = [self._check_word(seq[-2]), self._check_word(seq[-1])]
        for i in range(num_steps):
            view.append(self.draft_successor[view[i]])
        return view[2:]

    def accepted_after(self, seq: Sequence[int], num_steps: int) -> int:
        """Draft tokens the target accepts in the round that follows the committed tokens ``seq``
        (topk 1, ``num_steps`` steps): the leading keys ``seq[-2], seq[-1], c_1, c_2, ..``
        (``c = continuation(seq, ..)``) that are not corrupted, ``0..num_steps``. For the default
        pair this is ``accepted_drafts(seq[-2])`` (its keys walk the pi chain, which is the
        continuation). ``seq`` as for ``draft_proposals``; raises ValueError as it does."""
        if num_steps < 1:
            raise ValueError(f"num_steps must be >= 1, got {num_steps}")
        if len(seq) < 2:
            raise ValueError("a round needs >= 2 committed tokens")
        if not self.kv_sensitive:
            return self.accepted_drafts(seq[-2], num_steps)
        keys = [int(seq[-2]), int(seq[-1])] + self.continuation(seq, max(0, num_steps - 2))
        n = 0
        while n < num_steps and keys[n] not in self._corrupted_set:
            n += 1
        return n

    def spec_decode(self, prompt: Sequence[int], max_new_tokens: int, num_steps: int,
                    on: Callable[[int], bool] | None = None) -> dict:
        """``simulate_spec_decode`` for a whole prompt (either kind of pair): the prefill emits
        ``next_after(prompt)``, each verify round accepts ``accepted_after(seq)`` drafts plus the
        bonus token. Same return dict (``tokens == continuation(prompt, max_new_tokens)``), plus
        ``rounds`` (``"on"``/``"off"`` per round).

        ``on`` (round index -> bool, default always): a gated schedule; an OFF round commits one
        token without speculating (and counts no verify), and the first ON round after OFF ones
        accepts what a current draft state accepts there (``accept_lengths_from``), since the gate
        keeps the draft's KV and hidden state current through OFF steps. Raises ValueError for a
        prompt shorter than ``min_prompt_length`` or counts < 1.
        """
        if max_new_tokens < 1 or num_steps < 1:
            raise ValueError("max_new_tokens and num_steps must be >= 1")
        self._check_spec_prompt(prompt)
        seq = [self._check_word(t) for t in prompt]
        seq.append(self.next_after(seq))
        made, accept, rounds = 1, [], []
        while made < max_new_tokens:
            if on is not None and not on(len(rounds)):
                seq.extend(self.continuation(seq, 1))
                made += 1
                rounds.append("off")
                continue
            n = self.accepted_after(seq, num_steps)
            seq.extend(self.continuation(seq, n + 1))
            made += n + 1
            accept.append(n + 1)
            rounds.append("on")
        return {
            "tokens": seq[len(prompt):len(prompt) + max_new_tokens],
            "accept_lengths": accept,
            "verify_ct": len(accept),
            "mean_accept_length": (sum(accept) / len(accept)) if accept else float("nan"),
            "sglang_spec_accept_length": (max_new_tokens / len(accept)) if accept else float("nan"),
            "rounds": rounds,
        }

    # -- prompts ------------------------------------------------------------------------------
    def random_prompts(self, num_prompts: int, length: int, seed: int = 0) -> list[list[int]]:
        """``num_prompts`` prompts of ``length`` random *word* ids (never special tokens)."""
        return random_prompt_ids(self.vocab, num_prompts, length, seed)

    @staticmethod
    def to_text(ids: Iterable[int]) -> str:
        """Word ids -> the text the tokenizer maps back to them, e.g. [5, 17] -> "w5 w17"."""
        return ids_to_text(ids)

    # -- (de)serialisation --------------------------------------------------------------------
    def to_json(self) -> dict:
        """The ``oracle.json`` content (adds derived ``accept_rate`` / ``expected_accept_length``).

        One family: format 1, exactly the original keys (no ``families``). Several: format 2, the
        same keys plus ``families``, one dict per family: ``token_ids`` [start, stop) and
        ``p_wrong`` (what ``load`` reads back), and derived ``corrupted_count``, ``accept_rate``,
        ``expected_accept_length`` (num_steps "1".."8" -> tokens per verify). KV-sensitive: format 3,
        the keys of 1 (and ``families`` when K > 1) plus ``kv_sensitive: true`` and ``kv_construction``.
        """
        skip = {"families"} if self.kv_sensitive else {"families", "kv_sensitive", "kv_construction"}
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in skip}
        d["accept_rate"] = self.accept_rate
        d["expected_accept_length"] = {str(k): self.expected_accept_length(k) for k in range(1, 9)}
        d["word_token_ids"] = [0, self.vocab]
        d["design_note"] = DESIGN_NOTE
        if len(self.families) > 1:
            d["families"] = [self._family_json(k) for k in range(len(self.families))]
        return d

    def _family_json(self, family: int) -> dict:
        return {
            **self.families[family].to_json(),
            "corrupted_count": self._family_corrupted[family],
            "accept_rate": self.family_accept_rate(family),
            "expected_accept_length": {str(k): self.expected_accept_length(k, family) for k in range(1, 9)},
        }

    def save(self, path: str | os.PathLike) -> None:
        """Write ``to_json()`` to ``path``."""
        Path(path).write_text(json.dumps(self.to_json(), indent=1) + "\n")

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Oracle":
        """Read an ``oracle.json`` (``path`` may be the file or the generator's output dir).

        Reads format 1 (one family), 2 (``families``) and 3 (KV-sensitive). Raises
        FileNotFoundError if missing, ValueError on an unknown ``format_version``, a format-2 file
        without ``families``, or ``kv_sensitive`` not matching format 3.
        """
        p = Path(path)
        if p.is_dir():
            p = p / "oracle.json"
        d = json.loads(p.read_text())
        if d.get("format_version") not in ORACLE_FORMAT_VERSIONS:
            raise ValueError(f"{p}: unsupported oracle format_version {d.get('format_version')!r}")
        if d["format_version"] == ORACLE_FORMAT_VERSION_FAMILIES and not d.get("families"):
            raise ValueError(f"{p}: format_version 2 without 'families'")
        if (d["format_version"] == ORACLE_FORMAT_VERSION_KV) != bool(d.get("kv_sensitive")):
            raise ValueError(f"{p}: format_version {d['format_version']} with kv_sensitive={d.get('kv_sensitive')!r}")
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def random_prompt_ids(vocab: int, num_prompts: int, length: int, seed: int = 0,
                      family: PromptFamily | None = None) -> list[list[int]]:
    """Random prompts of word ids only (uniform in ``0..vocab-1``, or with ``family`` uniform in
    its ``start..stop-1``), seeded; shape [num_prompts][length].

    Prompts never contain special tokens, so each continuation is ``Oracle.chain(prompt[-1], n)``
    (inside ``family`` when given). Without ``family`` the draws are the original ones.
    (SGLang's ``bench_serving --dataset-name random --random-sample false`` draws ids below
    ``tokenizer.vocab_size`` = vocab + 4, benchmark/datasets/random.py:145-153, so a few of its
    prompts contain specials; only a prompt *ending* in one has an unpredictable continuation.)
    """
    if length < 1 or num_prompts < 0:
        raise ValueError("length must be >= 1 and num_prompts >= 0")
    low, high = (0, vocab) if family is None else (family.start, family.stop)
    if high > vocab:
        raise ValueError(f"family {family.start}..{family.stop - 1} is not inside 0..{vocab - 1}")
    rng = np.random.default_rng(seed)
    return rng.integers(low, high, size=(num_prompts, length)).tolist()


def ids_to_text(ids: Iterable[int]) -> str:
    """Word ids -> whitespace-joined words, e.g. [5, 17] -> "w5 w17" (the tokenizer's inverse)."""
    return " ".join(f"w{int(i)}" for i in ids)


# ---------------------------------------------------------------------------------------------
# Tokenizer / configs
# ---------------------------------------------------------------------------------------------


def write_tokenizer(out_dir: str | os.PathLike, vocab: int, model_max_length: int) -> None:
    """Write tokenizer.json (``tokenizers`` WordLevel + WhitespaceSplit), tokenizer_config.json and
    special_tokens_map.json to ``out_dir``.

    Words ``w0..w{vocab-1}`` get ids ``0..vocab-1``, specials follow (see ``vocab_layout``); the
    specials are also registered as special added tokens so they encode as one id and are
    skipped by ``skip_special_tokens``. No post-processor: nothing (no BOS) is added on encode.
    ``tokenizer_class`` is ``PreTrainedTokenizerFast`` (not a Llama class, whose transformers-v5
    constructor would rebuild the pre-tokenizer and whose v4 default adds BOS).
    """
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers

    lay = vocab_layout(vocab)
    table = {f"w{i}": i for i in range(vocab)}
    table.update(lay["special_tokens"])
    tok = Tokenizer(models.WordLevel(vocab=table, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    specials = {"unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>"}
    cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        **specials,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": model_max_length,
        # Plain concatenation of message contents, so /v1/chat/completions works too.
        "chat_template": "{% for message in messages %}{{ message['content'] }}{% if not loop.last %} {% endif %}{% endfor %}",
    }
    (out / "tokenizer_config.json").write_text(json.dumps(cfg, indent=1) + "\n")
    (out / "special_tokens_map.json").write_text(json.dumps(specials, indent=1) + "\n")


def _llama_config(p: Preset, lay: dict, dtype: str, *, layers: int, intermediate: int) -> dict:
    return {
        "model_type": "llama",
        "hidden_size": p.hidden_size,
        "intermediate_size": intermediate,
        "num_hidden_layers": layers,
        "num_attention_heads": p.num_heads,
        "num_key_value_heads": p.num_kv_heads,
        "head_dim": p.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": p.max_position_embeddings,
        "rms_norm_eps": p.rms_norm_eps,
        "rope_theta": p.rope_theta,
        "rope_scaling": None,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "vocab_size": lay["vocab_size"],
        "bos_token_id": lay["bos_token_id"],
        "eos_token_id": lay["eos_token_id"],
        "pad_token_id": lay["pad_token_id"],
        "initializer_range": 0.02,
        "use_cache": True,
        "torch_dtype": dtype,
    }


def target_config(p: Preset, vocab: int, dtype: str) -> dict:
    """config.json of the target (``LlamaForCausalLM``, ``tie_word_embeddings: false``)."""
    cfg = {"architectures": ["LlamaForCausalLM"]}
    cfg.update(_llama_config(p, vocab_layout(vocab), dtype, layers=p.num_layers, intermediate=p.intermediate_size))
    return cfg


def draft_intermediate_size(p: Preset, vocab: int) -> int:
    """The draft's MLP width: the preset's, raised to ``vocab`` rounded up to 256 if smaller."""
    return max(p.intermediate_size, _round_up(vocab, 256))


def draft_config(p: Preset, vocab: int, dtype: str) -> dict:
    """config.json of the draft (``LlamaForCausalLMEagle3``, 1 layer).

    Keys SGLang reads (models/llama_eagle3.py): ``draft_vocab_size`` (= vocab: lm_head rows and
    d2t length, 270-288), ``target_hidden_size`` (fc input = 3 x this, 148-164),
    ``tie_word_embeddings`` (false, else lm_head = embed_tokens, 271-272). No ``eagle_config``:
    SGLang then captures its default layers [2, L//2, L-3] (model_executor/model_runner.py:428-441)
    and the draft expects 3 aux states (llama_eagle3.py:154-158).
    """
    cfg = {"architectures": ["LlamaForCausalLMEagle3"]}
    cfg.update(_llama_config(p, vocab_layout(vocab), dtype, layers=1, intermediate=draft_intermediate_size(p, vocab)))
    cfg["draft_vocab_size"] = vocab
    cfg["target_hidden_size"] = p.hidden_size
    return cfg


def generation_config(vocab: int) -> dict:
    """generation_config.json: token ids only (no sampling defaults for SGLang to pick up)."""
    lay = vocab_layout(vocab)
    return {
        "bos_token_id": lay["bos_token_id"],
        "eos_token_id": lay["eos_token_id"],
        "pad_token_id": lay["pad_token_id"],
    }


# ---------------------------------------------------------------------------------------------
# Weights
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class TensorSpec:
    """One tensor to write: ``make()`` returns it (any device) with exactly ``shape``/``dtype``."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    make: Callable[[], torch.Tensor]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * torch.empty((), dtype=self.dtype).element_size()


def write_safetensors(path: str | os.PathLike, specs: Sequence[TensorSpec], metadata: dict | None = None) -> int:
    """Stream ``specs`` into one safetensors file, creating each tensor only when it is written.

    Writes the standard layout (8-byte little-endian header length, JSON header padded with
    spaces to 8 bytes, then the raw little-endian tensor bytes in ``specs`` order) so peak host
    memory is one tensor, not the whole model. Returns the data size in bytes. Raises ValueError
    if a made tensor's shape/dtype differs from its spec.
    """
    header: dict = {"__metadata__": {"format": "pt", **(metadata or {})}}
    off = 0
    for s in specs:
        n = s.nbytes
        header[s.name] = {"dtype": _ST_DTYPE[s.dtype], "shape": list(s.shape), "data_offsets": [off, off + n]}
        off += n
    hbytes = json.dumps(header, separators=(",", ":")).encode()
    hbytes += b" " * (-len(hbytes) % 8)
    with open(path, "wb") as f:
        f.write(len(hbytes).to_bytes(8, "little"))
        f.write(hbytes)
        for s in specs:
            t = s.make()
            if tuple(t.shape) != tuple(s.shape) or t.dtype != s.dtype:
                raise ValueError(f"{s.name}: made {tuple(t.shape)} {t.dtype}, spec {s.shape} {s.dtype}")
            t = t.detach().contiguous().to("cpu").reshape(-1)
            f.write(memoryview(t.view(torch.uint8).numpy()))
            del t
    return off


def write_sharded(out_dir: Path, specs: Sequence[TensorSpec], max_shard_bytes: int) -> list[str]:
    """Write ``specs`` as ``model.safetensors`` or, above ``max_shard_bytes``, as HF-style shards
    ``model-0000i-of-0000n.safetensors`` plus ``model.safetensors.index.json``. Returns file names."""
    shards: list[list[TensorSpec]] = [[]]
    size = 0
    for s in specs:
        if shards[-1] and size + s.nbytes > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(s)
        size += s.nbytes
    if len(shards) == 1:
        write_safetensors(out_dir / "model.safetensors", shards[0])
        return ["model.safetensors"]
    names, weight_map, total = [], {}, 0
    for i, shard in enumerate(shards):
        name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        total += write_safetensors(out_dir / name, shard)
        names.append(name)
        weight_map.update({s.name: name for s in shard})
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out_dir / "model.safetensors.index.json").write_text(json.dumps(index, indent=1) + "\n")
    return names


class _WeightBuilder:
    """Makes the tensors of both models on ``device`` (see module docstring for the math)."""

    def __init__(self, p: Preset, oracle_maps, vocab: int, dtype: torch.dtype, device: torch.device,
                 seed: int, proj_noise: float):
        self.p, self.vocab, self.dtype, self.device = p, vocab, dtype, device
        self.pi, self.succ, _ = oracle_maps
        self.lay = vocab_layout(vocab)
        self.proj_noise = proj_noise
        self.gen = torch.Generator(device=device)
        self.gen.manual_seed(seed)
        H, Vs = p.hidden_size, self.lay["vocab_size"]
        # Embedding (std 1), rounded to the storage dtype; everything derived uses the rounded copy
        # so that the model's own arithmetic sees exactly these values.
        e = torch.randn(Vs, H, generator=self.gen, device=device, dtype=torch.float32)
        self.embed = e.to(dtype)
        self.E = self.embed.float()
        del e
        self.U = self.E[:vocab] / self.E[:vocab].norm(dim=1, keepdim=True)  # unit rows of word embeds
        self.pi_t = torch.tensor(self.pi, device=device)
        self.succ_t = torch.tensor(self.succ, device=device)
        pi_inv = torch.empty_like(self.pi_t)
        pi_inv[self.pi_t] = torch.arange(vocab, device=device)
        self.pi_inv_t = pi_inv

    # -- primitives -------------------------------------------------------------------------
    def ones(self, n: int) -> torch.Tensor:
        return torch.ones(n, dtype=self.dtype, device=self.device)

    def rand(self, out: int, inp: int) -> torch.Tensor:
        """Gaussian with std 1/sqrt(fan_in): unit-scale activations, no overflow in bf16."""
        t = torch.randn(out, inp, generator=self.gen, device=self.device, dtype=self.dtype)
        return t.mul_(1.0 / math.sqrt(inp))

    def residual_out(self, out: int, inp: int) -> torch.Tensor:
        """o_proj / down_proj: zeros, or ``proj_noise/sqrt(fan_in)`` Gaussian noise."""
        if self.proj_noise == 0.0:
            return torch.zeros(out, inp, dtype=self.dtype, device=self.device)
        t = torch.randn(out, inp, generator=self.gen, device=self.device, dtype=self.dtype)
        return t.mul_(self.proj_noise / math.sqrt(inp))

    def lm_head_rows(self, rows: int) -> torch.Tensor:
        """[rows, H]: row j < vocab = u[pi^-1(j)], other rows 0 (specials/padding never win)."""
        head = torch.zeros(rows, self.p.hidden_size, dtype=torch.float32, device=self.device)
        head[: self.vocab] = self.U[self.pi_inv_t]
        return head.to(self.dtype)

    # -- draft memory -----------------------------------------------------------------------
    def memory_gate(self, inter: int) -> torch.Tensor:
        g = torch.zeros(inter, self.p.hidden_size, dtype=torch.float32, device=self.device)
        g[: self.vocab] = MEMORY_GATE_SCALE * self.U
        return g.to(self.dtype)

    def memory_up(self, inter: int) -> torch.Tensor:
        u = torch.zeros(inter, self.p.hidden_size, dtype=torch.float32, device=self.device)
        u[: self.vocab] = self.U
        return u.to(self.dtype)

    def memory_down(self, inter: int) -> torch.Tensor:
        H = self.p.hidden_size
        d = torch.zeros(H, inter, dtype=torch.float32, device=self.device)
        diff = self.E[self.succ_t] - self.E[: self.vocab]  # [V, H]
        d[:, : self.vocab] = diff.T / (MEMORY_GATE_SCALE * H)
        return d.to(self.dtype)

    def fc(self) -> torch.Tensor:
        H = self.p.hidden_size
        w = torch.zeros(H, 3 * H, dtype=self.dtype, device=self.device)
        w[:, :H] = torch.eye(H, dtype=self.dtype, device=self.device)
        return w

    # -- plans ------------------------------------------------------------------------------
    def target_specs(self) -> list[TensorSpec]:
        """HF Llama names, as SGLang's LlamaForCausalLM.load_weights expects (llama.py:615-686)."""
        p, dt = self.p, self.dtype
        H, I, hd = p.hidden_size, p.intermediate_size, p.head_dim
        q, kv = p.num_heads * hd, p.num_kv_heads * hd
        Vs = self.lay["vocab_size"]
        specs = [TensorSpec("model.embed_tokens.weight", (Vs, H), dt, lambda: self.embed)]
        for i in range(p.num_layers):
            pre = f"model.layers.{i}."
            specs += [
                TensorSpec(pre + "input_layernorm.weight", (H,), dt, lambda: self.ones(H)),
                TensorSpec(pre + "self_attn.q_proj.weight", (q, H), dt, lambda: self.rand(q, H)),
                TensorSpec(pre + "self_attn.k_proj.weight", (kv, H), dt, lambda: self.rand(kv, H)),
                TensorSpec(pre + "self_attn.v_proj.weight", (kv, H), dt, lambda: self.rand(kv, H)),
                TensorSpec(pre + "self_attn.o_proj.weight", (H, q), dt, lambda: self.residual_out(H, q)),
                TensorSpec(pre + "post_attention_layernorm.weight", (H,), dt, lambda: self.ones(H)),
                TensorSpec(pre + "mlp.gate_proj.weight", (I, H), dt, lambda: self.rand(I, H)),
                TensorSpec(pre + "mlp.up_proj.weight", (I, H), dt, lambda: self.rand(I, H)),
                TensorSpec(pre + "mlp.down_proj.weight", (H, I), dt, lambda: self.residual_out(H, I)),
            ]
        specs += [
            TensorSpec("model.norm.weight", (H,), dt, lambda: self.ones(H)),
            TensorSpec("lm_head.weight", (Vs, H), dt, lambda: self.lm_head_rows(Vs)),
        ]
        return specs

    def draft_specs(self) -> list[TensorSpec]:
        """EAGLE-3 checkpoint names (as in the public EAGLE-3 Llama checkpoints: ``midlayer.*``,
        ``fc``, ``norm``, ``lm_head``, ``d2t``, ``t2d``), mapped by SGLang's
        LlamaForCausalLMEagle3.load_weights (llama_eagle3.py:293-346: ``midlayer`` -> ``layers.0``,
        ``model.`` prefix added, q/k/v and gate/up stacked, ``d2t`` -> hot_token_id, ``t2d`` skipped).
        ``embed_tokens`` is included for self-containedness; SGLang replaces it with the target's
        (speculative/eagle_worker.py:177-188, same hidden size)."""
        p, dt = self.p, self.dtype
        H, hd = p.hidden_size, p.head_dim
        I = draft_intermediate_size(p, self.vocab)
        q, kv = p.num_heads * hd, p.num_kv_heads * hd
        V, Vs = self.vocab, self.lay["vocab_size"]
        m = "midlayer."
        return [
            TensorSpec("embed_tokens.weight", (Vs, H), dt, lambda: self.embed),
            TensorSpec("fc.weight", (H, 3 * H), dt, self.fc),
            TensorSpec(m + "hidden_norm.weight", (H,), dt, lambda: self.ones(H)),
            TensorSpec(m + "input_layernorm.weight", (H,), dt, lambda: self.ones(H)),
            TensorSpec(m + "self_attn.q_proj.weight", (q, 2 * H), dt, lambda: self.rand(q, 2 * H)),
            TensorSpec(m + "self_attn.k_proj.weight", (kv, 2 * H), dt, lambda: self.rand(kv, 2 * H)),
            TensorSpec(m + "self_attn.v_proj.weight", (kv, 2 * H), dt, lambda: self.rand(kv, 2 * H)),
            TensorSpec(m + "self_attn.o_proj.weight", (H, q), dt, lambda: torch.zeros(H, q, dtype=dt, device=self.device)),
            TensorSpec(m + "post_attention_layernorm.weight", (H,), dt, lambda: self.ones(H)),
            TensorSpec(m + "mlp.gate_proj.weight", (I, H), dt, lambda: self.memory_gate(I)),
            TensorSpec(m + "mlp.up_proj.weight", (I, H), dt, lambda: self.memory_up(I)),
            TensorSpec(m + "mlp.down_proj.weight", (H, I), dt, lambda: self.memory_down(I)),
            TensorSpec("norm.weight", (H,), dt, lambda: self.ones(H)),
            TensorSpec("lm_head.weight", (V, H), dt, lambda: self.lm_head_rows(V)),
            TensorSpec("d2t", (V,), torch.int64, lambda: torch.zeros(V, dtype=torch.int64)),
            TensorSpec("t2d", (Vs,), torch.bool, lambda: torch.arange(Vs) < V),
        ]


class _KVWeightBuilder(_WeightBuilder):
    """The KV-sensitive pair's tensors (module docstring, "KV-sensitive pair"; layout ``KVLayout``).

    The random tensors (the target's MLPs and its q/k/v of layers 1..) come from the same seeded
    generator as the default pair's; the Gaussian embedding the base class draws is replaced by
    the codes, drawn right after it.
    """

    def __init__(self, p: Preset, oracle_maps, vocab: int, dtype: torch.dtype, device: torch.device,
                 seed: int, proj_noise: float):
        if proj_noise:
            raise ValueError("proj_noise is not supported with a KV-sensitive pair")
        super().__init__(p, oracle_maps, vocab, dtype, device, seed, proj_noise)
        self.lay_kv = kv_layout(p)
        self.head = PositionalHead.build(p.head_dim, p.rope_theta, p.max_position_embeddings)
        lk, H, Vs = self.lay_kv, p.hidden_size, self.lay["vocab_size"]
        D = lk.code_dim
        c = torch.randn(Vs, D, generator=self.gen, device=device, dtype=torch.float32)
        c *= math.sqrt(D) / c.norm(dim=1, keepdim=True)  # |c(x)| = sqrt(D): one RMS for every row
        e = torch.zeros(Vs, H, dtype=torch.float32, device=device)
        e[:, lk.code] = c
        e[:, lk.bias_dim] = KV_BIAS
        self.embed = e.to(dtype)
        self.E = self.embed.float()
        del c, e
        code = self.E[:, lk.code]
        self.U = code / code.norm(dim=1, keepdim=True)  # [Vs, D] unit codes u(x), of the stored rows
        # RMSNorm output of the bias coordinate (the same for every row up to bf16 rounding)
        self.n_bias = KV_BIAS / math.sqrt(lk.embed_rms**2 + p.rms_norm_eps)

    # -- primitives -------------------------------------------------------------------------
    def _on_prev(self, rows: torch.Tensor) -> torch.Tensor:
        """[n, D] code-space rows -> [n, H] rows living on the P dims."""
        out = torch.zeros(rows.shape[0], self.p.hidden_size, dtype=torch.float32, device=self.device)
        out[:, self.lay_kv.prev] = rows
        return out

    def lm_head_rows(self, rows: int) -> torch.Tensor:
        """[rows, H]: row j < vocab = u(pi^-1(j)) on the P dims, so the argmax is pi of the token
        whose code attention wrote there; other rows 0."""
        head = torch.zeros(rows, self.p.hidden_size, dtype=torch.float32, device=self.device)
        head[: self.vocab] = self._on_prev(self.U[self.pi_inv_t])
        return head.to(self.dtype)

    def _qk(self, offsets: Sequence[int], in_width: int) -> tuple[torch.Tensor, torch.Tensor]:
        """q_proj [heads*hd, in_width], k_proj [kv_heads*hd, in_width]: read only the bias dim, so q
        and k are ``PositionalHead`` vectors (q head h of a KV group looks back ``offsets[h % group]``)."""
        lk, hd = self.lay_kv, self.p.head_dim
        q = torch.zeros(lk.num_heads * hd, in_width, dtype=torch.float64)
        k = torch.zeros(lk.num_kv_heads * hd, in_width, dtype=torch.float64)
        for h in range(lk.num_heads):
            q[h * hd:(h + 1) * hd, lk.bias_dim] = torch.from_numpy(self.head.query(offsets[h % lk.group]))
        for g in range(lk.num_kv_heads):
            k[g * hd:(g + 1) * hd, lk.bias_dim] = torch.from_numpy(self.head.key())
        return ((q / self.n_bias).to(self.dtype).to(self.device),
                (k / self.n_bias).to(self.dtype).to(self.device))

    def _v(self, in_width: int) -> torch.Tensor:
        """v_proj [kv_heads*hd, in_width]: value dim r = C dim r (KV head g carries code dims g*hd..)."""
        lk = self.lay_kv
        v = torch.zeros(lk.num_kv_heads * self.p.head_dim, in_width, dtype=self.dtype, device=self.device)
        idx = torch.arange(lk.code_dim, device=self.device)
        v[idx, idx] = 1
        return v

    def _o(self, signs: Sequence[float]) -> torch.Tensor:
        """o_proj [H, heads*hd]: q head h's output dim j -> P dim g*hd + j (g its KV group), times
        ``signs[h % group] * embed_rms / (heads of that sign in the group)``: the heads of one sign
        average, and the copied code comes out at its embedding scale, ``c(x)``."""
        lk, hd = self.lay_kv, self.p.head_dim
        o = torch.zeros(self.p.hidden_size, lk.num_heads * hd, dtype=torch.float32, device=self.device)
        for h in range(lk.num_heads):
            sign = signs[h % lk.group]
            if not sign:
                continue
            same = sum(1 for x in signs if x == sign)
            g = h // lk.group
            for j in range(hd):
                r = g * hd + j
                if r < lk.code_dim:
                    o[lk.code_dim + r, h * hd + j] = sign * lk.embed_rms / same
        return o.to(self.dtype)

    # -- draft pieces -----------------------------------------------------------------------
    def fc(self) -> torch.Tensor:
        """[H, 3H]: the first aux state's P dims (the target's copy of ``c(x_{p-1})``) onto the P dims,
        where the draft's two-back heads subtract the same code again."""
        H, lk = self.p.hidden_size, self.lay_kv
        w = torch.zeros(H, 3 * H, dtype=self.dtype, device=self.device)
        idx = torch.arange(lk.prev.start, lk.prev.stop, device=self.device)
        w[idx, idx] = 1
        return w

    def _corrupted_keys(self) -> list[int]:
        return [k for k in range(self.vocab) if self.succ[k] != self.pi[k]]

    def memory_gate(self, inter: int) -> torch.Tensor:
        """Row r < #corrupted: ``s * u(c_r)`` on P (only corrupted keys need a memory row)."""
        keys = torch.tensor(self._corrupted_keys(), dtype=torch.long, device=self.device)
        g = torch.zeros(inter, self.p.hidden_size, dtype=torch.float32, device=self.device)
        g[: len(keys)] = MEMORY_GATE_SCALE * self._on_prev(self.U[keys])
        return g.to(self.dtype)

    def memory_up(self, inter: int) -> torch.Tensor:
        keys = torch.tensor(self._corrupted_keys(), dtype=torch.long, device=self.device)
        u = torch.zeros(inter, self.p.hidden_size, dtype=torch.float32, device=self.device)
        u[: len(keys)] = self._on_prev(self.U[keys])
        return u.to(self.dtype)

    def memory_down(self, inter: int) -> torch.Tensor:
        """Column r: ``sqrt(D) (u(t) - (1 + KV_WRONG_PUSH) u(c_r)) / (s H)``, ``t = pi^-1(succ(c_r))``:
        the P content ``sqrt(D) u(c)`` becomes ``sqrt(D) (u(t) - KV_WRONG_PUSH u(c))``, whose argmax
        through the lm_head is ``succ(c)`` and whose score for the right token ``pi(c)`` is negative."""
        H, D = self.p.hidden_size, self.lay_kv.code_dim
        keys = torch.tensor(self._corrupted_keys(), dtype=torch.long, device=self.device)
        d = torch.zeros(H, inter, dtype=torch.float32, device=self.device)
        if len(keys):
            t = self.pi_inv_t[self.succ_t[keys]]
            diff = math.sqrt(D) * (self.U[t] - (1.0 + KV_WRONG_PUSH) * self.U[keys])  # [n, D]
            d[:, : len(keys)] = self._on_prev(diff).T / (MEMORY_GATE_SCALE * H)
        return d.to(self.dtype)

    # -- plans ------------------------------------------------------------------------------
    def target_specs(self) -> list[TensorSpec]:
        """As ``_WeightBuilder.target_specs`` with layer 0's attention made positional: q/k from the
        bias dim (every head looks one position back), v = the code, o_proj -> P."""
        specs = super().target_specs()
        H, hd, lk = self.p.hidden_size, self.p.head_dim, self.lay_kv
        q, kv = lk.num_heads * hd, lk.num_kv_heads * hd
        qk = lambda i: self._qk([1] * lk.group, H)[i]  # noqa: E731

        pre = "model.layers.0.self_attn."
        layer0 = {
            pre + "q_proj.weight": TensorSpec(pre + "q_proj.weight", (q, H), self.dtype, lambda: qk(0)),
            pre + "k_proj.weight": TensorSpec(pre + "k_proj.weight", (kv, H), self.dtype, lambda: qk(1)),
            pre + "v_proj.weight": TensorSpec(pre + "v_proj.weight", (kv, H), self.dtype, lambda: self._v(H)),
            pre + "o_proj.weight": TensorSpec(pre + "o_proj.weight", (H, q), self.dtype,
                                              lambda: self._o([1.0] * lk.group)),
        }
        return [layer0.get(s.name, s) for s in specs]

    def draft_specs(self) -> list[TensorSpec]:
        """As ``_WeightBuilder.draft_specs`` with a positional attention (half of each KV group's
        query heads look one position back and add the code there to P, half look two back and
        subtract it) reading the embedding half of the 2H input, and the corrupted-keys memory."""
        specs = super().draft_specs()
        H, hd, lk = self.p.hidden_size, self.p.head_dim, self.lay_kv
        q, kv = lk.num_heads * hd, lk.num_kv_heads * hd
        half = lk.group // 2
        offsets = [1] * half + [2] * half
        signs = [1.0] * half + [-1.0] * half
        qk = lambda i: self._qk(offsets, 2 * H)[i]  # noqa: E731

        m = "midlayer.self_attn."
        attn = {
            m + "q_proj.weight": TensorSpec(m + "q_proj.weight", (q, 2 * H), self.dtype, lambda: qk(0)),
            m + "k_proj.weight": TensorSpec(m + "k_proj.weight", (kv, 2 * H), self.dtype, lambda: qk(1)),
            m + "v_proj.weight": TensorSpec(m + "v_proj.weight", (kv, 2 * H), self.dtype, lambda: self._v(2 * H)),
            m + "o_proj.weight": TensorSpec(m + "o_proj.weight", (H, q), self.dtype, lambda: self._o(signs)),
        }
        return [attn.get(s.name, s) for s in specs]


def _resolve_device(device: str | None) -> torch.device:
    if device is None or device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    d = torch.device(device)
    if d.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device 'cuda' requested but torch.cuda.is_available() is False")
    return d


def generate_pair(
    out_dir: str | os.PathLike,
    preset: str = "tiny",
    vocab: int | None = None,
    p_wrong: float = 0.0,
    seed: int = 0,
    device: str | None = None,
    dtype: str | None = None,
    proj_noise: float = 0.0,
    max_shard_gb: float = 5.0,
    families: int | None = None,
    p_wrong_families: Sequence[float] | None = None,
    kv_sensitive: bool = False,
    target_from: str | os.PathLike | None = None,
) -> Oracle:
    """Write the synthetic target/draft pair and ``oracle.json`` under ``out_dir``; return the Oracle.

    Args:
        out_dir: created if missing; ``target/``, ``draft/`` and ``oracle.json`` are overwritten.
        preset: ``"tiny"`` (H=256, 8 layers, V=128, float32), ``"1b"`` (H=2048, 16 layers, 16/8
            heads, intermediate 8192) or ``"8b"`` (H=4096, 32 layers, 32/8 heads, intermediate
            14336), both V=8192 and bfloat16.
        vocab: number of word tokens V (default: the preset's). config.vocab_size is V+4 rounded up to 64.
        p_wrong: fraction of memory keys with a wrong draft successor; per-draft-token acceptance
            is ``1 - round(p_wrong*V)/V``.
        seed: seeds ``pi``/corruption (numpy, device independent) and the weights (torch, so
            weights differ between cpu and cuda for one seed; behaviour does not).
        device: "cpu", "cuda" (or "cuda:N"); default cuda when available.
        dtype: "bfloat16" / "float32" / "float16" storage dtype (default: the preset's).
        proj_noise: 0 (default) makes every target o_proj/down_proj exactly zero; > 0 fills them with
            N(0, (proj_noise/sqrt(fan_in))^2) noise (cost realism; keep <= ~0.02, the argmax
            guarantee then rests on the margin instead of exact arithmetic).
        max_shard_gb: target/draft files above this are written as HF shards with an index.
        families: K >= 1 splits the V words into K contiguous prompt families (ids
            ``k*V//K .. (k+1)*V//K - 1``), ``pi`` into one cycle per family; each family's draft
            is wrong with probability ``p_wrong`` unless ``p_wrong_families`` is given.
        p_wrong_families: K per-family fractions of wrong draft keys (family k accepts about
            ``1 - p_wrong_families[k]`` per draft token); K = ``families`` when both are given.
            Excludes a nonzero ``p_wrong``. Without ``families``/``p_wrong_families`` the pair
            (weights, configs, oracle.json) is exactly the original single-cycle one.
        kv_sensitive: build the KV-sensitive pair (module docstring): the target's next token is
            pi of the token one position back, read by layer 0's attention, and the draft reads the
            sequence through its own attention, so a wrong or stale K/V of either model changes the
            output or the accept length. Same maps, shapes, configs and tokenizer; oracle.json
            format 3. Excludes ``proj_noise``.
        target_from: a pair written before with the same target (same preset, vocab, seed, dtype,
            device, proj_noise, kind and ``pi``: another ``p_wrong`` or per-family ``p_wrong`` of
            the same families): ``out_dir/target`` becomes a link to its ``target/`` instead of a
            second copy (16 GB for the 8b preset, most of its writing time), and the draft is made
            after the target's tensors as without it, so its file is byte for byte the same.

    Raises ValueError for an unknown preset/dtype, ``p_wrong`` outside [0, 1], vocab < 2,
    family options ``prompt_families`` refuses, ``kv_sensitive`` with ``proj_noise`` or a shape
    ``kv_layout`` refuses, or a ``target_from`` without a pair or with another target (the field
    named), or ``out_dir/target`` a directory holding files this generator did not write.
    Design: shared/design/synthetic-models.md; math: see the module docstring.
    """
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose from {sorted(PRESETS)}")
    p = PRESETS[preset]
    vocab = int(p.vocab if vocab is None else vocab)
    dtype = dtype or p.dtype
    if dtype not in _DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; choose from {sorted(_DTYPES)}")
    if proj_noise < 0:
        raise ValueError("proj_noise must be >= 0")
    if kv_sensitive:
        if proj_noise:
            raise ValueError("proj_noise is not supported with a KV-sensitive pair")
        construction = kv_construction(p)  # refuses a shape that cannot hold the layout
    layers = sglang_default_capture_layers(p.num_layers)
    dev = _resolve_device(device)
    if not 0.0 <= p_wrong <= 1.0:
        raise ValueError(f"p_wrong must be in [0, 1], got {p_wrong}")
    fams = prompt_families(vocab, p_wrong, families, p_wrong_families)
    maps = build_family_maps(fams, seed)
    lay = vocab_layout(vocab)
    out = Path(out_dir)
    tdir, ddir = out / "target", out / "draft"
    if target_from is not None:
        shared = _same_target(Path(target_from), preset=preset, vocab=vocab, seed=int(seed), dtype=dtype,
                              device=str(dev), proj_noise=float(proj_noise), kv_sensitive=kv_sensitive,
                              pi=[int(x) for x in maps[0]])
        out.mkdir(parents=True, exist_ok=True)
        if tdir.resolve() != shared:  # else the shared target is this pair's own already: keep it
            _clear_target_dir(tdir)
            tdir.symlink_to(shared, target_is_directory=True)
    written = (ddir,) if target_from is not None else (tdir, ddir)
    for d in written:
        d.mkdir(parents=True, exist_ok=True)
        for old in d.glob("model*.safetensors*"):
            old.unlink()

    with torch.no_grad():
        b = (_KVWeightBuilder if kv_sensitive else _WeightBuilder)(p, maps, vocab, _DTYPES[dtype], dev, seed, proj_noise)
        max_bytes = int(max_shard_gb * (1 << 30))
        if target_from is None:
            write_sharded(tdir, b.target_specs(), max_bytes)
        else:
            for spec in b.target_specs():  # the draft's random tensors come after the target's
                spec.make()
        write_sharded(ddir, b.draft_specs(), max_bytes)
        del b
    if target_from is None:
        (tdir / "config.json").write_text(json.dumps(target_config(p, vocab, dtype), indent=1) + "\n")
        (tdir / "generation_config.json").write_text(json.dumps(generation_config(vocab), indent=1) + "\n")
    (ddir / "config.json").write_text(json.dumps(draft_config(p, vocab, dtype), indent=1) + "\n")
    for d in written:
        write_tokenizer(d, vocab, p.max_position_embeddings)

    pi, succ, corrupted = maps
    oracle = Oracle(
        pi=pi, draft_successor=succ, corrupted=corrupted, p_wrong=float(mean_p_wrong(fams)), seed=int(seed),
        preset=preset, vocab=vocab, vocab_size=lay["vocab_size"], special_tokens=lay["special_tokens"],
        eos_token_id=lay["eos_token_id"], bos_token_id=lay["bos_token_id"],
        pad_token_id=lay["pad_token_id"], unk_token_id=lay["unk_token_id"],
        hidden_size=p.hidden_size, num_layers=p.num_layers,
        draft_intermediate_size=draft_intermediate_size(p, vocab), target_layers_to_capture=layers,
        dtype=dtype, device=str(dev), proj_noise=float(proj_noise), families=fams,
        kv_sensitive=kv_sensitive, kv_construction=construction if kv_sensitive else None,
    )
    oracle.save(out / "oracle.json")
    return oracle


#: what a pair's ``oracle.json`` must share with a new one for their targets to be the same
SAME_TARGET_FIELDS = ("preset", "vocab", "seed", "dtype", "device", "proj_noise", "kv_sensitive", "pi")


def _same_target(pair: Path, **want) -> Path:
    """``pair/target`` resolved, after checking that ``pair/oracle.json`` has ``want``'s values.

    Raises:
        ValueError: no ``oracle.json`` or target there, or a field differs (named)."""
    try:
        have = Oracle.load(pair / "oracle.json")
    except (OSError, ValueError, TypeError) as exc:
        raise ValueError(f"--target-from {pair}: no pair there ({type(exc).__name__}: {exc})") from None
    for name in SAME_TARGET_FIELDS:
        value = getattr(have, name)
        if (list(value) if name == "pi" else value) != want[name]:
            shown = "another permutation" if name == "pi" else f"{value!r}, not {want[name]!r}"
            raise ValueError(f"--target-from {pair}: another target ({name}: {shown})")
    target = (pair / "target").resolve()
    if not (target / "config.json").is_file():
        raise ValueError(f"--target-from {pair}: {target} holds no target model")
    return target


def _clear_target_dir(tdir: Path) -> None:
    """Make room for the link: a link is removed, a directory of this generator's files emptied and
    removed. Raises ValueError, before removing anything, where the directory holds other entries."""
    if tdir.is_symlink():
        tdir.unlink()
        return
    if not tdir.exists():
        return
    ours = ("model*.safetensors*", "config.json", "generation_config.json", "tokenizer.json",
            "tokenizer_config.json", "special_tokens_map.json")
    files = {f for pattern in ours for f in tdir.glob(pattern) if f.is_file()}
    others = sorted(f.name for f in tdir.iterdir() if f not in files)
    if others:
        raise ValueError(f"{tdir} holds {', '.join(others[:3])}{' ...' if len(others) > 3 else ''}, not written "
                         "by this generator: move it away to link the target there")
    for f in files:
        f.unlink()
    tdir.rmdir()


def _float_list(text: str) -> list[float]:
    """argparse type: "0.1,0.6" -> [0.1, 0.6]."""
    try:
        return [float(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of numbers: {text!r}") from None


def _family_summary(o: Oracle, num_steps: int) -> str:
    """One line per family: its ids, p_wrong, acceptance and E[accept_len | num_steps]."""
    lines = []
    for k, f in enumerate(o.families):
        lines.append(f"  family {k}: ids {f.start}..{f.stop - 1} p_wrong={f.p_wrong} "
                     f"accept_rate={o.family_accept_rate(k):.4f} "
                     f"E[accept_len|{num_steps} steps]={o.expected_accept_length(num_steps, k):.3f}")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m bench.synthetic_models",
        description="Write a synthetic EAGLE-3 target/draft pair (+ oracle.json) for SGLang.",
        epilog="Shifting draft: --families 2 --p-wrong-families 0.1,0.6 makes two prompt families "
               "(word ids 0..V/2-1 and V/2..V-1); a prompt's continuation stays in the family of "
               "its last token, so the accept length follows the prompt mix.",
    )
    ap.add_argument("--out", required=True, help="output directory (target/, draft/, oracle.json)")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    ap.add_argument("--vocab", type=int, default=None, help="number of word tokens V (default: preset's)")
    ap.add_argument("--p-wrong", type=float, default=None,
                    help="fraction of draft keys made wrong (acceptance ~ 1-p; default 0); "
                         "with --families, of every family")
    ap.add_argument("--families", type=int, default=None, metavar="K",
                    help="split the V words into K contiguous prompt families, pi into one cycle per "
                         "family (default: one family, the original single-cycle pair)")
    ap.add_argument("--p-wrong-families", type=_float_list, default=None, metavar="P0,P1,..",
                    help="per-family fraction of wrong draft keys, K comma-separated values "
                         "(sets K when --families is not given; excludes --p-wrong)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default=None, help="cpu | cuda[:N] (default: cuda if available)")
    ap.add_argument("--dtype", choices=sorted(_DTYPES), default=None, help="default: preset's")
    ap.add_argument("--proj-noise", type=float, default=0.0, help="noise scale for target o_proj/down_proj (default 0: exact zeros)")
    ap.add_argument("--max-shard-gb", type=float, default=5.0)
    ap.add_argument("--kv-sensitive", action="store_true",
                    help="the KV-sensitive pair: the next token is pi of the token one position back, "
                         "read through attention by target and draft, so a wrong or stale K/V changes "
                         "the output or the accept length (oracle.json format 3)")
    ap.add_argument("--target-from", metavar="DIR", default=None,
                    help="a pair written before with the same target (same preset, vocab, seed, dtype, device, "
                         "kind; another --p-wrong): link DIR/target instead of writing it again; the draft is "
                         "byte for byte the same as without this option")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point (see ``--help``). Returns the process exit code."""
    ap = _parser()
    a = ap.parse_args(argv)
    if a.p_wrong is not None and a.p_wrong_families is not None:
        ap.error("give --p-wrong or --p-wrong-families, not both")
    p_wrong = 0.0 if a.p_wrong is None else a.p_wrong
    vocab = int(PRESETS[a.preset].vocab if a.vocab is None else a.vocab)
    if not (math.isfinite(a.proj_noise) and a.proj_noise >= 0):
        ap.error(f"--proj-noise must be a finite number >= 0, got {a.proj_noise}")
    if not (math.isfinite(a.max_shard_gb) and a.max_shard_gb > 0):
        ap.error(f"--max-shard-gb must be a finite number > 0, got {a.max_shard_gb}")
    if not 0 <= a.seed < 2 ** 32:
        ap.error(f"--seed must be 0 .. 2**32 - 1, got {a.seed}")
    if a.device is not None and not re.fullmatch(r"cpu|cuda(:\d+)?", a.device):
        ap.error(f"--device must be cpu, cuda or cuda:N, got {a.device!r}")
    if Path(a.out).exists() and not Path(a.out).is_dir():
        ap.error(f"--out {a.out}: a file, not a directory (the pair is written as target/, draft/, oracle.json)")
    try:
        prompt_families(vocab, p_wrong, a.families, a.p_wrong_families)
        if a.kv_sensitive:
            kv_layout(PRESETS[a.preset])
            if a.proj_noise:
                raise ValueError("--proj-noise is not supported with --kv-sensitive")
    except ValueError as exc:
        ap.error(str(exc))
    if a.device is not None and a.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            ap.error(f"--device {a.device}: this machine's torch sees no CUDA GPU (leave --device out, or cpu)")
    t0 = time.perf_counter()
    try:
        o = generate_pair(a.out, preset=a.preset, vocab=a.vocab, p_wrong=p_wrong, seed=a.seed,
                          device=a.device, dtype=a.dtype, proj_noise=a.proj_noise, max_shard_gb=a.max_shard_gb,
                          families=a.families, p_wrong_families=a.p_wrong_families, kv_sensitive=a.kv_sensitive,
                          target_from=a.target_from)
    except ValueError as exc:  # the options were checked above: --target-from's pair, --out's target/
        if a.target_from is None:
            raise
        ap.error(str(exc))
    dt = time.perf_counter() - t0
    size = sum(f.stat().st_size for f in Path(a.out).rglob("*") if f.is_file())
    print(
        f"wrote {a.out}: preset={o.preset} V={o.vocab} vocab_size={o.vocab_size} dtype={o.dtype} "
        f"device={o.device} p_wrong={o.p_wrong} accept_rate={o.accept_rate:.4f} "
        f"{'kv_sensitive ' if o.kv_sensitive else ''}"
        f"E[accept_len|3 steps]={o.expected_accept_length(3):.3f} eos={o.eos_token_id} "
        f"{size / 1e9:.2f} GB in {dt:.1f} s",
        file=sys.stderr,
    )
    if o.num_families > 1:
        print(_family_summary(o, 3), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
