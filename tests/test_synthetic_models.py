"""CPU tests of the synthetic EAGLE-3 pair generator (bench/synthetic_models.py), tiny preset.

The reference forward (bench/reference_forward.py) re-implements SGLang 0.5.12's Llama /
LlamaForCausalLMEagle3 math; the expected weight names below are read off
sglang/srt/models/llama.py (LlamaModel/LlamaDecoderLayer/LlamaForCausalLM, load_weights 615-686)
and sglang/srt/models/llama_eagle3.py (LlamaModel/LlamaDecoderLayer, load_weights 293-346).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402

from bench import synthetic_models as sm  # noqa: E402
from bench.reference_forward import (  # noqa: E402
    DraftModel,
    KVCache,
    TargetModel,
    eagle3_generate,
    load_safetensors_dir,
    logit_margin,
)

P = sm.PRESETS["tiny"]
V = P.vocab
SEED = 1234


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    """Tiny pairs for p_wrong in {0.0, 0.2, 0.5}: {p: (dir, oracle, target, draft)}."""
    out = {}
    for p in (0.0, 0.2, 0.5):
        d = tmp_path_factory.mktemp(f"tiny_p{int(p * 100)}")
        o = sm.generate_pair(d, preset="tiny", p_wrong=p, seed=SEED, device="cpu")
        t = TargetModel(d / "target")
        dr = DraftModel(d / "draft", embed=t.w["model.embed_tokens.weight"])
        out[p] = (d, o, t, dr)
    return out


def _cycle(o: sm.Oracle, start: int = 0) -> list[int]:
    """start followed by the whole cycle: every word appears as a key exactly once in seq[:-1]."""
    return [start] + o.chain(start, o.vocab)


# --------------------------------------------------------------------------------------------
# target
# --------------------------------------------------------------------------------------------


def test_target_greedy_equals_pi_chain(pairs):
    _, o, t, _ = pairs[0.2]
    prompts = [o.random_prompts(1, n, seed=n)[0] for n in (1, 5, 17, 40)]
    for prompt in prompts:
        assert t.greedy(prompt, 24) == o.chain(prompt[-1], 24), prompt


def test_target_argmax_is_pi_for_every_word_and_never_special(pairs):
    _, o, t, _ = pairs[0.0]
    seq = _cycle(o, start=7)
    with torch.no_grad():
        out = t.forward(torch.tensor(seq), torch.arange(len(seq)))
    pred = out.logits.argmax(-1).tolist()
    assert pred == [o.pi[x] for x in seq]
    # every word was a key once; special/padding logits are exactly 0, far below the winner
    assert sorted(set(seq)) == list(range(V))
    assert torch.all(out.logits[:, V:] == 0)
    exp = torch.tensor([o.pi[x] for x in seq])
    assert logit_margin(out.logits, exp).min() > 0.5 * P.hidden_size**0.5
    # aux hidden = E[x_t] at all three capture layers (o_proj/down_proj are zero)
    E = t.w["model.embed_tokens.weight"][torch.tensor(seq)]
    assert out.capture_layers == o.target_layers_to_capture == [2, 4, 5]
    for chunk in out.aux_hidden.split(P.hidden_size, dim=-1):
        torch.testing.assert_close(chunk, E)


# --------------------------------------------------------------------------------------------
# draft
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("p", [0.2, 0.5])
def test_draft_one_step_matches_chain_except_corrupted(pairs, p):
    _, o, t, dr = pairs[p]
    seq = _cycle(o, start=3)
    with torch.no_grad():
        out = t.forward(torch.tensor(seq), torch.arange(len(seq)))
        # draft extend: hidden at position i paired with the token at i+1 (the target's choice)
        d = dr.forward(torch.tensor(seq[1:] + [o.pi[seq[-1]]]), out.aux_hidden, torch.arange(len(seq)))
    corrupted = set(o.corrupted)
    assert len(corrupted) == round(p * V)
    for key, tok in zip(seq[:-1], d.tokens[:-1]):
        right = o.pi[o.pi[key]]  # x_{t+2}
        assert (tok == right) == (key not in corrupted), key
        assert tok == o.draft_chain(key, 1)[0]
        assert tok < V  # d2t maps draft ids onto words only


def test_draft_multi_step_uses_own_hidden(pairs):
    _, o, t, dr = pairs[0.2]
    steps = 6
    corrupted = set(o.corrupted)
    clean = [k for k in range(V) if all(c not in corrupted for c in [k] + o.chain(k, steps - 1))]
    dirty = [k for k in range(V) if k in corrupted or o.pi[k] in corrupted][:6]
    keys = clean[:6] + dirty
    assert len(clean) >= 6 and len(dirty) >= 4
    for i, key in enumerate(keys):
        prompt = o.random_prompts(1, 4, seed=i)[0] + [key]
        T = len(prompt)
        tc, dc = KVCache(), KVCache()
        with torch.no_grad():
            out = t.forward(torch.tensor(prompt), torch.arange(T), tc)
            nxt = int(out.logits[-1].argmax())
            d = dr.forward(torch.tensor(prompt[1:] + [nxt]), out.aux_hidden, torch.arange(T), dc)
            toks, h = [d.tokens[-1]], d.hidden[-1:]
            for s in range(1, steps):
                d = dr.forward(torch.tensor([toks[-1]]), h, torch.tensor([T + s - 1]), dc)
                toks.append(d.tokens[-1])
                h = d.hidden
        assert toks == o.draft_chain(key, steps), key
        truth = o.chain(nxt, steps)  # x_{T+1}.. : d_i should be truth[i]
        k = key
        for j in range(steps):
            if k in corrupted:
                assert toks[j] != truth[j]  # wrong exactly at the first corrupted key
                break
            assert toks[j] == truth[j]
            k = o.pi[k]
        if key in clean:
            assert toks == truth


@pytest.mark.parametrize("p", [0.0, 0.2, 0.5])
def test_measured_acceptance_close_to_1_minus_p(pairs, p):
    _, o, t, dr = pairs[p]
    seq = _cycle(o, start=11)
    with torch.no_grad():
        out = t.forward(torch.tensor(seq), torch.arange(len(seq)))
        d = dr.forward(torch.tensor(seq[1:] + [o.pi[seq[-1]]]), out.aux_hidden, torch.arange(len(seq)))
    hits = [tok == o.pi[o.pi[k]] for k, tok in zip(seq[:-1], d.tokens[:-1])]
    measured = sum(hits) / len(hits)
    assert abs(measured - (1 - p)) <= 0.03
    assert measured == pytest.approx(o.accept_rate)


@pytest.mark.parametrize("p", [0.0, 0.2, 0.5])
def test_speculative_loop_output_and_accept_lengths(pairs, p):
    """Full reference EAGLE-3 loop: output == pi chain, accept lengths == oracle simulation."""
    _, o, t, dr = pairs[p]
    steps, n_new = 3, 48
    lengths = []
    for prompt in o.random_prompts(4, 6, seed=100):
        with torch.no_grad():
            r = eagle3_generate(t, dr, prompt, n_new, steps)
        sim = o.simulate_spec_decode(prompt[-1], n_new, steps)
        assert r["tokens"] == o.chain(prompt[-1], n_new) == sim["tokens"]
        assert r["accept_lengths"] == sim["accept_lengths"]
        lengths += r["accept_lengths"]
    mean = sum(lengths) / len(lengths)
    if p == 0.0:
        assert all(n == steps + 1 for n in lengths)
    assert abs(mean - o.expected_accept_length(steps)) < 0.45


def test_bfloat16_pair_with_bf16_activations(tmp_path):
    """bf16 storage + bf16-rounded activations (SGLang's arithmetic) keep target and draft exact."""
    o = sm.generate_pair(tmp_path, preset="tiny", p_wrong=0.3, seed=7, device="cpu", dtype="bfloat16")
    t = TargetModel(tmp_path / "target", act_dtype=torch.bfloat16)
    dr = DraftModel(tmp_path / "draft", act_dtype=torch.bfloat16, embed=t.w["model.embed_tokens.weight"])
    with safe_open(str(tmp_path / "target" / "model.safetensors"), "pt") as f:
        assert f.get_tensor("lm_head.weight").dtype == torch.bfloat16
    seq = _cycle(o, start=0)
    with torch.no_grad():
        out = t.forward(torch.tensor(seq), torch.arange(len(seq)))
        d = dr.forward(torch.tensor(seq[1:] + [o.pi[seq[-1]]]), out.aux_hidden, torch.arange(len(seq)))
    assert out.logits.argmax(-1).tolist() == [o.pi[x] for x in seq]
    assert d.tokens[:-1] == [o.draft_chain(k, 1)[0] for k in seq[:-1]]
    r = eagle3_generate(t, dr, [5, 9, seq[40]], 30, 4)
    assert r["tokens"] == o.chain(seq[40], 30)


def test_proj_noise_keeps_chain(tmp_path):
    o = sm.generate_pair(tmp_path, preset="tiny", p_wrong=0.2, seed=3, device="cpu", proj_noise=0.02)
    t = TargetModel(tmp_path / "target")
    assert t.w["model.layers.0.mlp.down_proj.weight"].abs().max() > 0
    seq = _cycle(o, start=1)
    with torch.no_grad():
        out = t.forward(torch.tensor(seq), torch.arange(len(seq)))
    assert out.logits.argmax(-1).tolist() == [o.pi[x] for x in seq]
    E = t.w["model.embed_tokens.weight"][torch.tensor(seq)]
    assert not torch.equal(out.aux_hidden[:, : P.hidden_size], E)  # the noise really is there
    dr = DraftModel(tmp_path / "draft", embed=t.w["model.embed_tokens.weight"])
    r = eagle3_generate(t, dr, [seq[10]], 32, 3)
    assert r["tokens"] == o.chain(seq[10], 32)
    assert r["accept_lengths"] == o.simulate_spec_decode(seq[10], 32, 3)["accept_lengths"]


# --------------------------------------------------------------------------------------------
# files: configs, weight names/shapes as SGLang loads them, tokenizer
# --------------------------------------------------------------------------------------------


def test_output_layout_and_configs(pairs):
    d, o, _, _ = pairs[0.2]
    assert sorted(p.name for p in d.iterdir()) == ["draft", "oracle.json", "target"]
    tok_files = ["special_tokens_map.json", "tokenizer.json", "tokenizer_config.json"]
    assert sorted(p.name for p in (d / "target").iterdir()) == sorted(
        ["config.json", "generation_config.json", "model.safetensors"] + tok_files)
    assert sorted(p.name for p in (d / "draft").iterdir()) == sorted(["config.json", "model.safetensors"] + tok_files)

    tc = json.loads((d / "target" / "config.json").read_text())
    dc = json.loads((d / "draft" / "config.json").read_text())
    lay = sm.vocab_layout(V)
    assert tc["architectures"] == ["LlamaForCausalLM"] and tc["model_type"] == "llama"
    assert dc["architectures"] == ["LlamaForCausalLMEagle3"] and dc["model_type"] == "llama"
    for c in (tc, dc):
        assert c["tie_word_embeddings"] is False  # else lm_head = embed_tokens (llama.py:483, llama_eagle3.py:271)
        assert c["hidden_size"] == P.hidden_size and c["hidden_act"] == "silu"
        assert c["num_attention_heads"] == P.num_heads and c["num_key_value_heads"] == P.num_kv_heads
        assert c["vocab_size"] == lay["vocab_size"] == o.vocab_size >= V + 4
        assert c["vocab_size"] % 64 == 0
        assert c["eos_token_id"] == o.eos_token_id == V + 2
        assert c["bos_token_id"] == V + 1 and c["pad_token_id"] == V + 3
        assert c["max_position_embeddings"] >= 4096 and c["rope_theta"] > 0
        assert c["torch_dtype"] == "float32"
    assert tc["num_hidden_layers"] == P.num_layers
    assert dc["num_hidden_layers"] == 1
    assert dc["draft_vocab_size"] == V and dc["target_hidden_size"] == P.hidden_size
    assert dc["intermediate_size"] >= V  # key-value memory needs one slot per word
    assert "eagle_config" not in dc  # SGLang default capture layers [2, L//2, L-3]
    gc = json.loads((d / "target" / "generation_config.json").read_text())
    assert gc["eos_token_id"] == V + 2
    assert not {"temperature", "top_k", "top_p"} & set(gc)

    oj = json.loads((d / "oracle.json").read_text())
    for key in ("pi", "corrupted", "draft_successor", "p_wrong", "seed", "preset", "vocab", "vocab_size",
                "accept_rate", "expected_accept_length", "eos_token_id", "special_tokens",
                "target_layers_to_capture"):
        assert key in oj, key
    assert sorted(oj["pi"]) == list(range(V)) and oj["p_wrong"] == 0.2 and oj["preset"] == "tiny"
    assert oj["special_tokens"] == {"<unk>": V, "<s>": V + 1, "</s>": V + 2, "<pad>": V + 3}


def _sglang_target_param_names(L: int) -> set[str]:
    """named_parameters() of SGLang's LlamaForCausalLM (llama.py:70-123, 170-185, 296-306, 333-368, 483-492)."""
    names = {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"}
    for i in range(L):
        for n in ("self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj",
                  "input_layernorm", "post_attention_layernorm"):
            names.add(f"model.layers.{i}.{n}.weight")
    return names


# llama_eagle3.py: LlamaDecoderLayer 44-82 (qkv_proj 2H input, mlp, hidden_norm), LlamaModel 118-187
# (embed_tokens, fc, layers, norm), LlamaForCausalLMEagle3 270-282 (lm_head with draft_vocab_size).
SGLANG_DRAFT_PARAMS = {
    "model.embed_tokens.weight", "model.fc.weight", "model.norm.weight", "lm_head.weight",
    "model.layers.0.self_attn.qkv_proj.weight", "model.layers.0.self_attn.o_proj.weight",
    "model.layers.0.mlp.gate_up_proj.weight", "model.layers.0.mlp.down_proj.weight",
    "model.layers.0.input_layernorm.weight", "model.layers.0.post_attention_layernorm.weight",
    "model.layers.0.hidden_norm.weight",
}
STACKED = [(".qkv_proj", ".q_proj", "q"), (".qkv_proj", ".k_proj", "k"), (".qkv_proj", ".v_proj", "v"),
           (".gate_up_proj", ".gate_proj", 0), (".gate_up_proj", ".up_proj", 1)]


def _map_target(name: str, params: set[str]):
    """LlamaForCausalLM.load_weights name mapping (llama.py:659-686)."""
    for param, shard, sid in STACKED:
        if shard in name:
            name = name.replace(shard, param)
            return (name, sid) if name in params else (None, None)
    return (name, None) if name in params else (None, None)


def _map_draft(name: str, params: set[str]):
    """LlamaForCausalLMEagle3.load_weights mapping (llama_eagle3.py:306-346)."""
    for legacy, new in {"midlayer": "layers.0", "aux_norm_low": "fc_norm.0", "aux_norm_mid": "fc_norm.1",
                        "aux_norm_high": "fc_norm.2"}.items():
        if legacy in name:
            name = name.replace(legacy, new)
    if "d2t" in name:
        return ("hot_token_id", None)
    if "t2d" in name:
        return ("skipped", None)
    for param, shard, sid in STACKED:
        if shard in name:
            name = name.replace(shard, param)
            pn = f"model.{name}" if name not in params else name
            return (pn, sid) if pn in params else (None, None)
    pn = name if name in params else f"model.{name}"
    return (pn, None) if pn in params else (None, None)


def _stacked_shapes(ckpt: dict, mapper, params):
    got: dict[str, list] = {}
    for name, t in ckpt.items():
        pn, sid = mapper(name, params)
        assert pn is not None, f"{name} would not be loaded by SGLang"
        got.setdefault(pn, []).append((sid, tuple(t.shape), t))
    return got


def test_target_weights_match_sglang_llama_load_weights(pairs):
    d, o, _, _ = pairs[0.2]
    ckpt = load_safetensors_dir(d / "target")
    params = _sglang_target_param_names(P.num_layers)
    got = _stacked_shapes(ckpt, _map_target, params)
    assert set(got) == params  # every SGLang parameter gets a weight, nothing is dropped
    H, hd, I, Vs = P.hidden_size, P.head_dim, P.intermediate_size, o.vocab_size
    q, kv = P.num_heads * hd, P.num_kv_heads * hd
    for i in range(P.num_layers):
        pre = f"model.layers.{i}."
        assert sorted((str(s), sh) for s, sh, _ in got[pre + "self_attn.qkv_proj.weight"]) == [
            ("k", (kv, H)), ("q", (q, H)), ("v", (kv, H))]
        assert sorted((str(s), sh) for s, sh, _ in got[pre + "mlp.gate_up_proj.weight"]) == [("0", (I, H)), ("1", (I, H))]
        assert got[pre + "self_attn.o_proj.weight"][0][1] == (H, q)
        assert got[pre + "mlp.down_proj.weight"][0][1] == (H, I)
        assert not got[pre + "mlp.down_proj.weight"][0][2].any()  # exact zeros: residual stream untouched
        assert not got[pre + "self_attn.o_proj.weight"][0][2].any()
    assert got["model.embed_tokens.weight"][0][1] == (Vs, H)
    assert got["lm_head.weight"][0][1] == (Vs, H)


def test_draft_weights_match_sglang_eagle3_load_weights(pairs):
    d, o, _, _ = pairs[0.2]
    ckpt = load_safetensors_dir(d / "draft")
    assert {"d2t", "t2d", "fc.weight", "midlayer.hidden_norm.weight", "lm_head.weight"} <= set(ckpt)
    got = _stacked_shapes(ckpt, _map_draft, SGLANG_DRAFT_PARAMS)
    assert set(got) - {"hot_token_id", "skipped"} == SGLANG_DRAFT_PARAMS
    H, hd = P.hidden_size, P.head_dim
    I = sm.draft_intermediate_size(P, V)
    q, kv = P.num_heads * hd, P.num_kv_heads * hd
    pre = "model.layers.0."
    # EAGLE-3 input layer: qkv takes cat(embeds, hidden) of width 2H (llama_eagle3.py:55-68)
    assert sorted((str(s), sh) for s, sh, _ in got[pre + "self_attn.qkv_proj.weight"]) == [
        ("k", (kv, 2 * H)), ("q", (q, 2 * H)), ("v", (kv, 2 * H))]
    assert sorted((str(s), sh) for s, sh, _ in got[pre + "mlp.gate_up_proj.weight"]) == [("0", (I, H)), ("1", (I, H))]
    assert got[pre + "mlp.down_proj.weight"][0][1] == (H, I)
    assert got["model.fc.weight"][0][1] == (H, 3 * H)  # 3 aux states x target_hidden_size
    assert got["lm_head.weight"][0][1] == (V, H)  # draft_vocab_size rows
    assert got["model.embed_tokens.weight"][0][1] == (o.vocab_size, H)
    d2t = ckpt["d2t"]
    assert d2t.dtype == torch.int64 and tuple(d2t.shape) == (V,) and not d2t.any()
    hot = d2t + torch.arange(V)  # SGLang: hot_token_id = d2t + arange (llama_eagle3.py:320)
    assert torch.equal(hot, torch.arange(V))
    assert ckpt["t2d"].dtype == torch.bool and int(ckpt["t2d"].sum()) == V


def test_tokenizer_roundtrip_and_specials(pairs):
    from tokenizers import Tokenizer

    d, o, _, _ = pairs[0.2]
    for sub in ("target", "draft"):
        tok = Tokenizer.from_file(str(d / sub / "tokenizer.json"))
        enc = tok.encode("w5 w17")
        assert enc.ids == [5, 17]  # no BOS added
        assert tok.decode(enc.ids) == "w5 w17"
        assert tok.encode("w5 nonsense w127").ids == [5, o.unk_token_id, 127]
        assert tok.encode("</s>").ids == [o.eos_token_id]
        assert tok.decode([5, 17, o.eos_token_id], skip_special_tokens=True) == "w5 w17"
        assert tok.get_vocab_size() == V + 4 <= o.vocab_size
        assert all(tok.token_to_id(f"w{i}") == i for i in range(V))
        tc = json.loads((d / sub / "tokenizer_config.json").read_text())
        assert tc["eos_token"] == "</s>" and tc["add_bos_token"] is False
        assert tc["tokenizer_class"] == "PreTrainedTokenizerFast"
    prompt = o.random_prompts(1, 20, seed=5)[0]
    assert tok.encode(sm.ids_to_text(prompt)).ids == prompt


def test_tokenizer_loads_with_transformers_if_installed(pairs):
    transformers = pytest.importorskip("transformers")
    d, o, _, _ = pairs[0.2]
    tok = transformers.AutoTokenizer.from_pretrained(str(d / "target"), clean_up_tokenization_spaces=False)
    assert tok.encode("w5 w17") == [5, 17]
    assert tok.decode([5, 17]) == "w5 w17"
    assert tok.eos_token_id == o.eos_token_id and tok.num_special_tokens_to_add() == 0
    cfg = transformers.AutoConfig.from_pretrained(str(d / "draft"))
    assert cfg.draft_vocab_size == V and cfg.target_hidden_size == P.hidden_size


# --------------------------------------------------------------------------------------------
# oracle and helpers
# --------------------------------------------------------------------------------------------


def test_oracle_chain_and_expected_accept_length(pairs, tmp_path):
    d, o, _, _ = pairs[0.2]
    o2 = sm.Oracle.load(d)  # dir or file
    assert sm.Oracle.load(d / "oracle.json").to_json() == o2.to_json() == o.to_json()
    c = o.chain(9, V)
    assert c[-1] == 9 and len(set(c)) == V  # a single cycle through every word
    assert o.chain(9, 3) == [o.pi[9], o.pi[o.pi[9]], o.pi[o.pi[o.pi[9]]]]
    assert o.chain(9, 0) == []
    for bad in (V, V + 2, -1):
        with pytest.raises(ValueError):
            o.chain(bad, 3)
    a = o.accept_rate
    assert a == pytest.approx(1 - round(0.2 * V) / V)
    assert o.expected_accept_length(3) == pytest.approx(1 + a + a**2 + a**3)
    assert o.expected_accept_length(1) < o.expected_accept_length(3) < o.expected_accept_length(8) < 1 / (1 - a)
    assert o.expected_accept_rate(3) == pytest.approx((o.expected_accept_length(3) - 1) / 3)
    assert pairs[0.0][1].expected_accept_length(5) == 6.0
    with pytest.raises(ValueError):
        o.expected_accept_length(0)
    sim = o.simulate_spec_decode(9, 50, 4)
    assert sim["tokens"] == o.chain(9, 50)
    assert all(1 <= n <= 5 for n in sim["accept_lengths"])
    assert sum(sim["accept_lengths"]) + 1 >= 50
    # the oracle's own draft map: wrong successor exactly on corrupted keys
    for k in range(V):
        assert (o.draft_successor[k] == o.pi[k]) == (k not in o.corrupted)
    bad = tmp_path / "oracle.json"
    bad.write_text(json.dumps({**o.to_json(), "format_version": 99}))
    with pytest.raises(ValueError):
        sm.Oracle.load(bad)


def test_build_maps_and_prompts():
    pi, succ, cor = sm.build_maps(1000, 0.25, seed=5)
    assert len(cor) == 250 and len(set(cor)) == 250
    x, seen = 0, set()
    for _ in range(1000):
        seen.add(x)
        x = pi[x]
    assert x == 0 and len(seen) == 1000
    assert sm.build_maps(1000, 0.25, seed=5) == (pi, succ, cor)
    assert sm.build_maps(1000, 0.25, seed=6)[0] != pi
    assert sm.build_maps(10, 1.0, 0)[2] == list(range(10))
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError):
            sm.build_maps(10, bad, 0)
    prompts = sm.random_prompt_ids(50, 8, 30, seed=1)
    assert len(prompts) == 8 and all(len(p) == 30 and all(0 <= t < 50 for t in p) for p in prompts)
    assert prompts == sm.random_prompt_ids(50, 8, 30, seed=1)
    assert sm.ids_to_text([5, 17]) == "w5 w17"
    with pytest.raises(ValueError):
        sm.sglang_default_capture_layers(6)  # [2, 3, 3]: duplicate capture layer
    assert sm.sglang_default_capture_layers(32) == [2, 16, 29]


def test_cli_and_sharded_output(tmp_path):
    out = tmp_path / "cli"
    rc = sm.main(["--out", str(out), "--preset", "tiny", "--vocab", "96", "--p-wrong", "0.25",
                  "--seed", "2", "--device", "cpu", "--max-shard-gb", "0.004"])
    assert rc == 0
    o = sm.Oracle.load(out)
    assert o.vocab == 96 and o.vocab_size == 128 and len(o.corrupted) == 24
    shards = sorted(p.name for p in (out / "target").glob("*.safetensors"))
    assert len(shards) > 1 and shards[0] == f"model-00001-of-{len(shards):05d}.safetensors"
    index = json.loads((out / "target" / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"].values()) == set(shards)
    assert len(index["weight_map"]) == 2 + 9 * P.num_layers + 1
    t = TargetModel(out / "target")
    assert t.greedy([3, 50], 20) == o.chain(50, 20)
    with pytest.raises(SystemExit):
        sm.main(["--out", str(out), "--preset", "70b"])
    with pytest.raises(ValueError):
        sm.generate_pair(tmp_path / "x", preset="tiny", p_wrong=2.0, device="cpu")


def test_margin_check_reports_positive_bf16_gaps(tmp_path):
    from bench import margin_check

    sm.generate_pair(tmp_path, preset="tiny", p_wrong=0.2, seed=9, device="cpu", dtype="bfloat16")
    res = margin_check.check(str(tmp_path), tokens=64, steps=2)
    mem = margin_check.check_in_memory("tiny", p_wrong=0.2, seed=9, tokens=64, steps=2)
    assert [r["what"] for r in res] == ["target", "draft step 1", "draft step 2"]
    for r in res + mem:
        assert r["n"] == 64 and r["wrong"] == 0
        assert r["gap_min"] > 0.5 * P.hidden_size**0.5 and r["gap_ulp_min"] > 50
    assert margin_check.main(["--dir", str(tmp_path), "--tokens", "16", "--steps", "1"]) == 0


def test_a_cuda_device_without_a_gpu_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    """Fresh-user find: ``--device cuda`` on a machine without CUDA was a RuntimeError traceback."""
    import torch

    from bench import synthetic_models

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as exc:
        synthetic_models.main(["--preset", "tiny", "--out", str(tmp_path / "pair"), "--device", "cuda"])
    assert exc.value.code == 2 and "sees no CUDA GPU" in capsys.readouterr().err
    assert not (tmp_path / "pair").exists()


@pytest.mark.parametrize("args, words", [
    (["--vocab", "0"], "vocab must be >= 2, got 0"),  # was: the preset's vocab, silently
    (["--out-is-a-file"], "a file, not a directory"),  # was: a traceback
    (["--proj-noise", "nan"], "--proj-noise must be a finite number >= 0"),  # was: NaN weights, exit 0
    (["--proj-noise", "-1"], "--proj-noise must be a finite number >= 0"),  # was: a traceback
    (["--max-shard-gb", "0"], "--max-shard-gb must be a finite number > 0"),  # was: a shard per tensor
    (["--max-shard-gb", "nan"], "--max-shard-gb must be a finite number > 0"),  # was: a traceback, half a pair
    (["--seed", "-1"], "--seed must be 0 .. 2**32 - 1"),  # was: numpy's traceback
    (["--device", "banana"], "--device must be cpu, cuda or cuda:N"),  # was: torch's traceback
])
def test_bad_values_are_a_one_line_error_that_writes_nothing(tmp_path, capsys, args, words):
    out = tmp_path / "pair"
    if args == ["--out-is-a-file"]:
        out.write_text("keep me")
        args = []
    with pytest.raises(SystemExit) as exc:
        sm.main(["--preset", "tiny", "--out", str(out), "--device", "cpu"] + args)
    assert exc.value.code == 2 and words in capsys.readouterr().err
    assert not out.exists() or out.read_text() == "keep me"


def test_a_pair_linked_to_an_earlier_target_has_the_same_draft_bytes_and_oracle(tmp_path):
    """--target-from: the target is a link to the earlier pair's (its 8B copy is most of the writing
    time) and the draft and oracle.json are byte for byte what a full generation writes."""
    sm.generate_pair(tmp_path / "p0.2", preset="tiny", p_wrong=0.2, device="cpu")
    sm.generate_pair(tmp_path / "full", preset="tiny", p_wrong=0.5, device="cpu")
    (tmp_path / "p0.5" / "target").mkdir(parents=True)  # an earlier full write: replaced by the link
    (tmp_path / "p0.5" / "target" / "config.json").write_text("{}")
    sm.generate_pair(tmp_path / "p0.5", preset="tiny", p_wrong=0.5, device="cpu", target_from=tmp_path / "p0.2")
    linked = tmp_path / "p0.5" / "target"
    assert linked.is_symlink() and linked.resolve() == (tmp_path / "p0.2" / "target").resolve()
    for name in ("draft/model.safetensors", "draft/config.json", "draft/tokenizer.json", "oracle.json"):
        assert (tmp_path / "p0.5" / name).read_bytes() == (tmp_path / "full" / name).read_bytes(), name
    sm.generate_pair(tmp_path / "p0.5", preset="tiny", p_wrong=0.5, device="cpu", target_from=tmp_path / "p0.2")
    assert linked.is_symlink()  # written again over its own link


def test_a_target_from_the_pair_itself_or_one_linked_to_it_keeps_its_weights(tmp_path):
    """Fresh-user find: --target-from pointing at the pair being written (itself, or a pair whose
    target links back to it) replaced the target directory by a link to itself and lost the weights."""
    sm.generate_pair(tmp_path / "p0.2", preset="tiny", p_wrong=0.2, device="cpu")
    weights = (tmp_path / "p0.2" / "target" / "model.safetensors").read_bytes()
    sm.generate_pair(tmp_path / "p0.5", preset="tiny", p_wrong=0.5, device="cpu", target_from=tmp_path / "p0.2")
    for source in (tmp_path / "p0.5", tmp_path / "p0.2"):  # linked back to it; itself
        sm.generate_pair(tmp_path / "p0.2", preset="tiny", p_wrong=0.2, device="cpu", target_from=source)
        target = tmp_path / "p0.2" / "target"
        assert not target.is_symlink() and (target / "model.safetensors").read_bytes() == weights
    assert (tmp_path / "p0.5" / "target").resolve() == (tmp_path / "p0.2" / "target").resolve()


@pytest.mark.parametrize("kwargs, message", [
    ({"seed": 3}, "seed: 0, not 3"),
    ({"vocab": 64}, "vocab: 128, not 64"),
    ({"families": 2}, "pi: another permutation"),
])
def test_another_target_is_refused_before_anything_is_written(tmp_path, kwargs, message):
    sm.generate_pair(tmp_path / "p0.2", preset="tiny", p_wrong=0.2, device="cpu")
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        sm.generate_pair(tmp_path / "new", preset="tiny", p_wrong=0.5, device="cpu",
                         target_from=tmp_path / "p0.2", **kwargs)
    assert not (tmp_path / "new").exists()


def test_target_from_on_the_command_line(tmp_path, capsys):
    assert sm.main(["--out", str(tmp_path / "a"), "--preset", "tiny", "--device", "cpu"]) == 0
    with pytest.raises(SystemExit) as exc:
        sm.main(["--out", str(tmp_path / "b"), "--preset", "tiny", "--device", "cpu", "--target-from", str(tmp_path / "nope")])
    assert exc.value.code == 2 and "no pair there" in capsys.readouterr().err
    (tmp_path / "c" / "target").mkdir(parents=True)
    (tmp_path / "c" / "target" / "notes.txt").write_text("mine")
    (tmp_path / "c" / "target" / "config.json").write_text("{}")
    with pytest.raises(SystemExit):
        sm.main(["--out", str(tmp_path / "c"), "--preset", "tiny", "--device", "cpu", "--target-from", str(tmp_path / "a")])
    assert "notes.txt, not written by this generator" in capsys.readouterr().err
    # a directory with files of someone else's is left whole
    assert sorted(f.name for f in (tmp_path / "c" / "target").iterdir()) == ["config.json", "notes.txt"]
