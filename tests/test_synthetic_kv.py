"""CPU tests of the KV-sensitive synthetic pair (``bench.synthetic_models --kv-sensitive``), tiny preset.

The pair's target predicts pi of the token one position back (layer 0's heads read it through the
K/V cache), its draft reads the sequence through its own K/V cache, and the oracle predicts both.
These tests run the built weights through the pure-torch reference forward
(bench/reference_forward.py, SGLang 0.5.12's math) and check that

* the oracle equals the reference: greedy continuations, the draft's proposals, accept lengths of
  the full speculative loop, with and without OFF steps (float32 and bf16);
* a wrong or stale K/V changes what comes out: the target's next token when its K/V of the
  previous position is replaced, the accept length after OFF steps that left the draft's K/V
  unwritten or written for the wrong token -- where the default pair, whose attention adds
  nothing, gives the same output and accept lengths either way (the weakness this pair removes).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from bench import gate_correctness as gc  # noqa: E402
from bench import synthetic_models as sm  # noqa: E402
from bench.oracle_check import check_output  # noqa: E402
from bench.recovery_oracle import annotate, oracle_from_maps, predict_recovery  # noqa: E402
from bench.reference_forward import (  # noqa: E402
    DraftModel,
    KVCache,
    TargetModel,
    eagle3_generate,
    gated_generate,
    load_safetensors_dir,
    logit_margin,
)
from bench.server_harness import CONFIGS  # noqa: E402

P = sm.PRESETS["tiny"]
V = P.vocab  # 128
SEED = 4321
STEPS = 3


def _models(d: Path, act=torch.float32):
    t = TargetModel(d / "target", act_dtype=act)
    return t, DraftModel(d / "draft", act_dtype=act, embed=t.w["model.embed_tokens.weight"])


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    """Tiny KV-sensitive pairs for p_wrong in {0.0, 0.2, 0.5}: {p: (dir, oracle, target, draft)}."""
    out = {}
    for p in (0.0, 0.2, 0.5):
        d = tmp_path_factory.mktemp(f"kv_p{int(p * 100)}")
        o = sm.generate_pair(d, preset="tiny", p_wrong=p, seed=SEED, device="cpu", kv_sensitive=True)
        out[p] = (d, o, *_models(d))
    return out


@pytest.fixture(scope="module")
def default_pair(tmp_path_factory):
    """The default (not KV-sensitive) tiny pair of the same maps: (dir, oracle, target, draft)."""
    d = tmp_path_factory.mktemp("default")
    o = sm.generate_pair(d, preset="tiny", p_wrong=0.2, seed=SEED, device="cpu")
    return (d, o, *_models(d))


def _forward(t: TargetModel, seq, cache=None):
    with torch.no_grad():
        return t.forward(torch.tensor(seq), torch.arange(len(seq)), cache)


# --------------------------------------------------------------------------------------------
# oracle (no weights)
# --------------------------------------------------------------------------------------------


def test_continuation_is_pi_of_the_token_two_back():
    o = oracle_from_maps(V, 0.2, SEED, kv_sensitive=True)
    a, b = 7, 40
    c = o.continuation([3, a, b], 6)
    assert c == [o.pi[a], o.pi[b], o.pi[o.pi[a]], o.pi[o.pi[b]], o.pi[o.pi[o.pi[a]]], o.pi[o.pi[o.pi[b]]]]
    seq = [3, a, b] + c
    assert all(seq[i] == o.pi[seq[i - 2]] for i in range(3, len(seq)))
    assert o.next_after([a, b]) == o.pi[a] and o.continuation([a, b], 0) == []
    assert o.continuation([9, a, b], 6) == c  # only the last two tokens matter
    for bad in ([b], [a, V]):
        with pytest.raises(ValueError):
            o.continuation(bad, 3)
    # the one-key methods refuse: their answer would be the default pair's
    for call in (lambda: o.draft_chain(a, 3), lambda: o.accepted_drafts(a, 3),
                 lambda: o.simulate_spec_decode(a, 10, 3)):
        with pytest.raises(ValueError, match="KV-sensitive"):
            call()
    assert o.min_prompt_length == 3
    with pytest.raises(ValueError):
        o.spec_decode([a, b], 10, 3)
    with pytest.raises(ValueError):
        o.accept_lengths_from([a, b], 4, 2, 3)


def test_draft_proposals_and_acceptance_follow_the_sequence():
    o = oracle_from_maps(V, 0.3, SEED, kv_sensitive=True)
    corrupted = set(o.corrupted)
    for i, prompt in enumerate(o.random_prompts(40, 5, seed=9)):
        seq = prompt + o.continuation(prompt, 1 + i % 4)
        prop = o.draft_proposals(seq, 5)
        keys = [seq[-2], seq[-1]] + o.continuation(seq, 3)
        truth = o.continuation(seq, 5)  # d_i should be truth[i]
        n = o.accepted_after(seq, 5)
        assert n == next((j for j, k in enumerate(keys) if k in corrupted), 5)
        assert prop[:n] == truth[:n]
        if n < 5:
            assert prop[n] != truth[n] and prop[n] == o.draft_successor[keys[n]]


@pytest.mark.parametrize("kv", [False, True])
def test_spec_decode_with_off_rounds_agrees_with_accept_lengths_from(kv):
    """Two derivations of "what speculation accepts after OFF steps": a gated trace, and
    accept_lengths_from (bench/recovery_oracle.py's prediction) once `committed` tokens exist."""
    o = oracle_from_maps(V, 0.25, 3, kv_sensitive=kv)
    for committed in (1, 2, 7, 30):
        for prompt in o.random_prompts(5, 6, seed=committed):
            trace = o.spec_decode(prompt, committed + 40, STEPS, on=lambda i, c=committed: i >= c - 1)
            assert trace["rounds"][: committed - 1] == ["off"] * (committed - 1)
            assert trace["tokens"] == o.continuation(prompt, committed + 40)
            rounds = 6
            assert trace["accept_lengths"][:rounds] == o.accept_lengths_from(prompt, committed, rounds, STEPS)


def test_the_sequence_methods_are_the_old_ones_on_the_default_pair():
    o = oracle_from_maps(V, 0.25, 3)
    assert not o.kv_sensitive and o.min_prompt_length == 1
    for prompt in o.random_prompts(10, 4, seed=2):
        assert o.continuation(prompt, 20) == o.chain(prompt[-1], 20)
        assert o.next_after(prompt) == o.next_token(prompt[-1])
        seq = prompt + o.chain(prompt[-1], 3)
        assert o.draft_proposals(seq, 4) == o.draft_chain(seq[-2], 4)
        assert o.accepted_after(seq, 4) == o.accepted_drafts(seq[-2], 4)
        sim, tr = o.simulate_spec_decode(prompt[-1], 50, STEPS), o.spec_decode(prompt, 50, STEPS)
        assert tr == {**sim, "rounds": ["on"] * sim["verify_ct"]}


def test_oracle_json_format_3_roundtrip_and_refusals(pairs, tmp_path):
    d, o, _, _ = pairs[0.2]
    j = json.loads((d / "oracle.json").read_text())
    assert j["format_version"] == 3 and j["kv_sensitive"] is True
    kc = j["kv_construction"]
    assert kc["layout"] == {"code_dims": [0, 127], "prev_dims": [127, 254], "bias_dim": 254}
    assert kc["positional_head"]["min_gap_nats"] == pytest.approx(sm.KV_ATTENTION_GAP)
    o2 = sm.Oracle.load(d)
    assert o2.kv_sensitive and o2.to_json() == o.to_json()
    assert o2.continuation([1, 2, 3], 9) == o.continuation([1, 2, 3], 9)
    # a default pair's oracle.json has no KV keys (format 1 bytes unchanged)
    plain = oracle_from_maps(V, 0.2, SEED).to_json()
    assert "kv_sensitive" not in plain and "kv_construction" not in plain and plain["format_version"] == 1
    bad = tmp_path / "oracle.json"
    for wrong in ({**j, "kv_sensitive": False}, {**plain, "kv_sensitive": True}):
        bad.write_text(json.dumps(wrong))
        with pytest.raises(ValueError, match="kv_sensitive"):
            sm.Oracle.load(bad)


def test_families_work_with_the_kv_pair(tmp_path):
    o = sm.generate_pair(tmp_path, preset="tiny", p_wrong_families=[0.1, 0.6], seed=2, device="cpu",
                         kv_sensitive=True)
    assert o.format_version == 3 and o.num_families == 2
    assert [f["token_ids"] for f in json.loads((tmp_path / "oracle.json").read_text())["families"]] == [[0, 64], [64, 128]]
    t, dr = _models(tmp_path)
    for k in (0, 1):
        for prompt in o.family_prompt_ids(k, 2, 6, seed=k):
            with torch.no_grad():
                r = eagle3_generate(t, dr, prompt, 40, STEPS)
            assert r["tokens"] == o.continuation(prompt, 40) and all(o.family_of(x) == k for x in r["tokens"])
            assert r["accept_lengths"] == o.spec_decode(prompt, 40, STEPS)["accept_lengths"]


# --------------------------------------------------------------------------------------------
# the positional heads
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("preset", sorted(sm.PRESETS))
def test_positional_head_picks_exactly_the_key_offset_back(preset):
    p = sm.PRESETS[preset]
    h = sm.PositionalHead.build(p.head_dim, p.rope_theta, p.max_position_embeddings)
    assert h.min_gap == pytest.approx(sm.KV_ATTENTION_GAP)
    for offset in (1, 2):
        for t in (offset, offset + 1, 50, 1000, p.max_position_embeddings - 1):
            rel = list(range(-t, 1))  # every key s = 0..t, causal
            lg = h.logits(rel, offset)
            best = int(lg.argmax())
            assert rel[best] == -offset
            assert lg[best] - max(x for i, x in enumerate(lg) if i != best) >= sm.KV_ATTENTION_GAP - 1e-6


@pytest.mark.parametrize("preset", ["tiny", "8b"])
def test_positional_head_survives_bf16_q_k_and_rope_tables(preset):
    """SGLang keeps q/k in bf16 and may cast its cos/sin cache to bf16: the wanted key still wins
    by nearly the whole gap at every distance up to max_position_embeddings."""
    p = sm.PRESETS[preset]
    h = sm.PositionalHead.build(p.head_dim, p.rope_theta, p.max_position_embeddings)
    hd, bf = p.head_dim, torch.bfloat16
    inv = 1.0 / p.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float) / hd)  # SGLang's inv_freq
    ang = torch.arange(p.max_position_embeddings).float()[:, None] * inv[None, :]
    cos, sin = ang.cos().to(bf).float(), ang.sin().to(bf).float()

    def rope(x0):  # [hd] -> [positions, hd], neox halves, rounded to bf16 like SGLang's q/k
        x = torch.tensor(x0, dtype=torch.float32).to(bf).float()
        x1, x2 = x[: hd // 2], x[hd // 2:]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(bf).float()

    k = rope(h.key())
    for offset in (1, 2):
        q = rope(h.query(offset))
        for t in (offset, offset + 3, 777, p.max_position_embeddings - 1):
            lg = (k[: t + 1] @ q[t]) * hd**-0.5
            want = lg[t - offset].clone()
            lg[t - offset] = -float("inf")
            assert want - lg.max() > sm.KV_ATTENTION_GAP - 1.0, (offset, t)


def test_kv_layout_refuses_shapes_that_cannot_hold_it():
    assert sm.kv_layout(P).code_dim == 127 and sm.kv_layout(sm.PRESETS["8b"]).code_dim == 1024
    odd = sm.Preset("odd", 256, 8, 6, 2, 512, 128, 4096, "float32")  # 3 query heads per KV head
    with pytest.raises(ValueError, match="even number of query heads"):
        sm.kv_layout(odd)


# --------------------------------------------------------------------------------------------
# the built weights through the reference forward
# --------------------------------------------------------------------------------------------


def test_target_greedy_equals_the_oracle_continuation(pairs):
    _, o, t, _ = pairs[0.2]
    for n in (2, 3, 5, 17, 40):
        prompt = o.random_prompts(1, n, seed=n)[0]
        assert t.greedy(prompt, 24) == o.continuation(prompt, 24), prompt


def test_target_reads_the_previous_position_in_any_sequence(pairs):
    d, o, t, _ = pairs[0.0]
    seq = o.random_prompts(1, 400, seed=1)[0]
    out = _forward(t, seq)
    exp = torch.tensor([o.next_after(seq[: i + 1]) for i in range(1, len(seq))])
    assert torch.equal(out.logits[1:].argmax(-1), exp)
    assert logit_margin(out.logits[1:], exp).min() > 5.0  # ~ sqrt(D) = 11.3 minus the cross terms
    assert torch.all(out.logits[:, V:] == 0)  # specials and padding never win
    # aux state = own code (C dims) + the copied code of the token one back (P dims), all layers
    lay = sm.kv_layout(P)
    E = t.w["model.embed_tokens.weight"]
    for aux in out.aux_hidden.split(P.hidden_size, dim=-1):
        torch.testing.assert_close(aux[:, lay.code], E[torch.tensor(seq)][:, lay.code])
        torch.testing.assert_close(aux[1:, lay.prev], E[torch.tensor(seq[:-1])][:, lay.code], atol=1e-3, rtol=1e-3)
    assert o.kv_sensitive and json.loads((d / "oracle.json").read_text())["kv_sensitive"] is True


@pytest.mark.parametrize("p", [0.2, 0.5])
def test_draft_step_proposes_the_successor_of_the_token_it_reads(pairs, p):
    _, o, t, dr = pairs[p]
    seq = o.random_prompts(1, 300, seed=2)[0]
    out = _forward(t, seq)
    full = seq + [o.next_after(seq)]
    with torch.no_grad():
        d = dr.forward(torch.tensor(full[1:]), out.aux_hidden, torch.arange(len(seq)))
    corrupted = set(o.corrupted)
    assert len(corrupted) == round(p * V)
    for pos in range(2, len(seq)):
        tok = d.tokens[pos]
        assert tok == o.draft_proposals(full[: pos + 2], 1)[0]
        assert (tok == o.pi[seq[pos]]) == (seq[pos] not in corrupted)  # x_{p+2} = pi(x_p)
    # a corrupted key pushes the right token far down: never another branch of a topk <= 8 tree
    for pos in range(2, len(seq)):
        right = o.pi[seq[pos]]
        rank = int((d.logits[pos] > d.logits[pos, right]).sum())
        assert (rank == 0) if seq[pos] not in corrupted else (rank >= 8)


def test_draft_decode_steps_read_their_own_kv(pairs):
    _, o, t, dr = pairs[0.2]
    corrupted = set(o.corrupted)
    steps = 6
    for i, prompt in enumerate(o.random_prompts(12, 5, seed=30)):
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
        seq = prompt + [nxt]
        want = o.draft_proposals(seq, steps)
        n = o.accepted_after(seq, steps)
        assert toks[: n + 1] == want[: n + 1], i  # exact up to and including the first wrong one
        keys = [seq[-2], seq[-1]] + o.continuation(seq, steps)
        assert n == next((j for j, k in enumerate(keys[:steps]) if k in corrupted), steps)


@pytest.mark.parametrize("p", [0.0, 0.2, 0.5])
def test_speculative_loop_output_and_accept_lengths(pairs, p):
    _, o, t, dr = pairs[p]
    n_new, lengths = 48, []
    for prompt in o.random_prompts(4, 6, seed=100):
        with torch.no_grad():
            r = eagle3_generate(t, dr, prompt, n_new, STEPS)
        sim = o.spec_decode(prompt, n_new, STEPS)
        assert r["tokens"] == o.continuation(prompt, n_new) == sim["tokens"]
        assert r["accept_lengths"] == sim["accept_lengths"]
        lengths += r["accept_lengths"]
    if p == 0.0:
        assert all(n == STEPS + 1 for n in lengths)
    assert abs(sum(lengths) / len(lengths) - o.expected_accept_length(STEPS)) < 0.5


def test_bfloat16_pair_with_bf16_activations_and_a_long_context(tmp_path):
    """bf16 storage and bf16-rounded activations (SGLang's arithmetic), keys up to position 2047."""
    o = sm.generate_pair(tmp_path, preset="tiny", p_wrong=0.3, seed=7, device="cpu", dtype="bfloat16",
                         kv_sensitive=True)
    t, dr = _models(tmp_path, torch.bfloat16)
    seq = o.random_prompts(1, 2048, seed=4)[0]
    out = _forward(t, seq)
    exp = torch.tensor([o.pi[x] for x in seq[:-1]])
    assert torch.equal(out.logits[1:].argmax(-1), exp)
    full = seq + [o.next_after(seq)]
    with torch.no_grad():
        d = dr.forward(torch.tensor(full[1:]), out.aux_hidden, torch.arange(len(seq)))
    assert d.tokens[2:] == [o.draft_successor[x] for x in seq[2:]]
    prompt = seq[-12:]
    with torch.no_grad():
        r = eagle3_generate(t, dr, prompt, 30, 4)
    assert r["tokens"] == o.continuation(prompt, 30)
    assert r["accept_lengths"] == o.spec_decode(prompt, 30, 4)["accept_lengths"]


# --------------------------------------------------------------------------------------------
# wrong or stale K/V shows in the output (target) or the accept length (draft)
# --------------------------------------------------------------------------------------------


def _next_with_cache(t: TargetModel, prompt, cache: KVCache) -> int:
    """Decode the last prompt token against ``cache`` (holding prompt[:-1]) -> the next token."""
    T = len(prompt)
    with torch.no_grad():
        out = t.forward(torch.tensor([prompt[-1]]), torch.tensor([T - 1]), cache)
    return int(out.logits[-1].argmax())


def _prefill(t: TargetModel, seq) -> KVCache:
    cache = KVCache()
    _forward(t, seq, cache)
    return cache


def _overwrite(cache: KVCache, other: KVCache, pos: int, src: int | None = None) -> None:
    """Every layer's K/V at ``pos`` <- ``other``'s at ``src`` (default ``pos``), as a slot holding
    another token's (or another position's) K/V would."""
    src = pos if src is None else src
    for layer in cache.k:
        cache.k[layer][pos] = other.k[layer][src]
        cache.v[layer][pos] = other.v[layer][src]


@pytest.mark.parametrize("kind", ["kv", "default"])
def test_a_wrong_target_kv_of_the_previous_position_changes_the_next_token(pairs, default_pair, kind):
    _, o, t, _ = pairs[0.2] if kind == "kv" else default_pair
    changed = 0
    for prompt in o.random_prompts(8, 12, seed=50):
        T, want = len(prompt), o.continuation(prompt, 1)[0]
        assert _next_with_cache(t, prompt, _prefill(t, prompt[:-1])) == want
        # the K/V of position T-2 as another token left it there (a stale or misplaced write)
        other = list(prompt)
        other[T - 2] = (prompt[T - 2] + 1) % V
        bad = _prefill(t, prompt[:-1])
        _overwrite(bad, _prefill(t, other[:-1]), T - 2)
        got = _next_with_cache(t, prompt, bad)
        # position T-2's slot holding position T-3's K/V (one step behind)
        late = _prefill(t, prompt[:-1])
        _overwrite(late, late, T - 2, T - 3)
        got_late = _next_with_cache(t, prompt, late)
        if kind == "kv":
            assert got == o.pi[other[T - 2]] != want
            assert got_late != want
            changed += 1
        else:  # the default pair's attention adds nothing: no K/V can change its output
            assert got == got_late == want
        # older positions: the target reads exactly the previous one
        old = _prefill(t, prompt[:-1])
        older = list(prompt)
        older[T - 5] = (prompt[T - 5] + 1) % V
        _overwrite(old, _prefill(t, older[:-1]), T - 5)
        assert _next_with_cache(t, prompt, old) == want
    assert changed == (8 if kind == "kv" else 0)


def _off_window(i: int) -> bool:
    """Rounds 2..29 OFF (28 OFF steps), the rest ON."""
    return not 2 <= i < 30


def test_off_steps_that_leave_the_draft_kv_wrong_change_the_accept_length(pairs):
    _, o, t, dr = pairs[0.2]
    checked = 0
    for prompt in o.random_prompts(8, 8, seed=7):
        want = o.spec_decode(prompt, 80, STEPS, on=_off_window)
        with torch.no_grad():
            runs = {m: gated_generate(t, dr, prompt, 80, STEPS, _off_window, m) for m in ("write", "skip", "stale")}
        for m, r in runs.items():
            assert r["tokens"] == o.continuation(prompt, 80), m  # the target verifies: output exact
        assert runs["write"]["accept_lengths"] == want["accept_lengths"]
        assert runs["write"]["rounds"] == want["rounds"]
        first_on = want["rounds"][:30].count("on")  # index of the first ON round after the window
        if want["accept_lengths"][first_on] == 1:
            continue  # a corrupted key there: a current draft accepts nothing either
        checked += 1
        for m in ("skip", "stale"):
            # the first ON round after the window drafts from K/V the OFF steps did not write right
            assert runs[m]["accept_lengths"][first_on] != want["accept_lengths"][first_on], m
    assert checked >= 5


def test_the_default_pair_cannot_see_a_wrong_draft_kv(default_pair):
    """The weakness: the default draft's o_proj is 0, so K/V written wrong during OFF steps changes
    nothing; only the sampled run-time proofs of the gate could notice."""
    _, o, t, dr = default_pair
    for prompt in o.random_prompts(3, 8, seed=7):
        with torch.no_grad():
            runs = [gated_generate(t, dr, prompt, 80, STEPS, _off_window, m) for m in ("write", "skip", "stale")]
        assert runs[0]["accept_lengths"] == runs[1]["accept_lengths"] == runs[2]["accept_lengths"]
        assert all(r["tokens"] == o.continuation(prompt, 80) for r in runs)


def test_switching_every_few_rounds_keeps_output_and_accept_lengths_exact(pairs):
    _, o, t, dr = pairs[0.5]
    for k, prompt in enumerate(o.random_prompts(3, 10, seed=11)):
        on = (lambda i, k=k: (i // (k + 2)) % 2 == 0)
        with torch.no_grad():
            r = gated_generate(t, dr, prompt, 90, STEPS, on)
        want = o.spec_decode(prompt, 90, STEPS, on=on)
        assert r["tokens"] == want["tokens"] == o.continuation(prompt, 90)
        assert r["accept_lengths"] == want["accept_lengths"] and r["rounds"] == want["rounds"]
        assert "off" in r["rounds"] and "on" in r["rounds"]


def test_gated_generate_always_on_is_eagle3_generate(pairs):
    _, o, t, dr = pairs[0.2]
    prompt = o.random_prompts(1, 9, seed=3)[0]
    with torch.no_grad():
        a = eagle3_generate(t, dr, prompt, 40, STEPS)
        b = gated_generate(t, dr, prompt, 40, STEPS, lambda _i: True, "skip")
    assert a == {k: b[k] for k in a} and b["rounds"] == ["on"] * len(a["accept_lengths"])
    with pytest.raises(ValueError):
        gated_generate(t, dr, prompt, 4, STEPS, lambda _i: True, "bogus")


# --------------------------------------------------------------------------------------------
# files, CLI, margins, the GPU runner's wiring
# --------------------------------------------------------------------------------------------


def test_same_files_names_and_shapes_as_the_default_pair(pairs, default_pair):
    d_kv, d_def = pairs[0.2][0], default_pair[0]
    assert sorted(x.name for x in d_kv.iterdir()) == sorted(x.name for x in d_def.iterdir())
    for sub in ("target", "draft"):
        assert sorted(x.name for x in (d_kv / sub).iterdir()) == sorted(x.name for x in (d_def / sub).iterdir())
        for f in ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
            assert (d_kv / sub / f).read_bytes() == (d_def / sub / f).read_bytes(), f  # SGLang loads it as before
        a, b = load_safetensors_dir(d_kv / sub), load_safetensors_dir(d_def / sub)
        assert {k: (tuple(v.shape), v.dtype) for k, v in a.items()} == {k: (tuple(v.shape), v.dtype) for k, v in b.items()}
    w = load_safetensors_dir(d_kv / "target")
    assert w["model.layers.0.self_attn.o_proj.weight"].any()  # layer 0's attention writes the residual
    assert not any(w[f"model.layers.{i}.self_attn.o_proj.weight"].any() for i in range(1, P.num_layers))
    assert not any(w[f"model.layers.{i}.mlp.down_proj.weight"].any() for i in range(P.num_layers))
    dw = load_safetensors_dir(d_kv / "draft")
    assert dw["midlayer.self_attn.o_proj.weight"].any() and not dw["d2t"].any()


def test_cli_kv_sensitive_and_its_refusals(tmp_path, capsys):
    out = tmp_path / "cli"
    assert sm.main(["--out", str(out), "--preset", "tiny", "--vocab", "96", "--p-wrong", "0.25",
                    "--device", "cpu", "--kv-sensitive"]) == 0
    assert "kv_sensitive" in capsys.readouterr().err
    o = sm.Oracle.load(out)
    assert o.kv_sensitive and o.vocab == 96 and len(o.corrupted) == 24
    t, _ = _models(out)
    assert t.greedy([3, 50, 7], 20) == o.continuation([3, 50, 7], 20)
    with pytest.raises(SystemExit):
        sm.main(["--out", str(out), "--preset", "tiny", "--kv-sensitive", "--proj-noise", "0.01"])
    with pytest.raises(ValueError, match="proj_noise"):
        sm.generate_pair(tmp_path / "x", preset="tiny", device="cpu", kv_sensitive=True, proj_noise=0.01)


def test_margin_check_of_the_kv_pair(tmp_path):
    from bench import margin_check

    sm.generate_pair(tmp_path, preset="tiny", p_wrong=0.2, seed=9, device="cpu", dtype="bfloat16", kv_sensitive=True)
    res = margin_check.check(str(tmp_path), tokens=200, steps=3, starts=24)
    mem = margin_check.check_in_memory("tiny", p_wrong=0.2, seed=9, tokens=200, steps=3, kv_sensitive=True, starts=24)
    assert [r["what"] for r in res] == ["target", "draft step 1", "draft step 2", "draft step 3"]
    assert [r["what"] for r in mem][0] == "target (layers 0-1)"
    for r in res + mem:
        assert r["n"] > 0 and r["wrong"] == 0 and r["gap_min"] > 5.0 and r["gap_ulp_min"] > 50
    assert res[0]["n"] == 199 and res[1]["n"] == 198


def test_oracle_check_compares_against_the_continuation():
    o = oracle_from_maps(V, 0.2, SEED, kv_sensitive=True)
    prompt = [5, 9, 77]
    good = {"output_ids": o.continuation(prompt, 12), "meta_info": {"spec_verify_ct": 4}}
    assert check_output(o, prompt, good, 12)["match"] is True
    pi_chain = {"output_ids": o.chain(prompt[-1], 12)}  # what the default pair would say
    assert check_output(o, prompt, pi_chain, 12)["first_mismatch"] == 0


def test_recovery_prediction_and_annotation_know_the_kind_of_pair():
    kv, plain = oracle_from_maps(V, 0.2, SEED, kv_sensitive=True), oracle_from_maps(V, 0.2, SEED)
    prompts = kv.random_prompts(4, 32, seed=3)
    pred = predict_recovery(kv, prompts, 221, 5, STEPS)
    rounds = [kv.spec_decode(p, 260, STEPS, on=lambda i: i >= 220)["accept_lengths"][:5] for p in prompts]
    assert pred["first_on_step"] == sum(r[0] for r in rounds) / 4
    assert pred["first_on_steps"] == sum(map(sum, rounds)) / 20
    phase = {"off_steps_before_on": 220, "steps_counted": 5, "accept_length_first_on_step": 2.0,
             "accept_length_first_on_steps": 2.0}
    entries = [{"config": "v1-topk1", "tp": 1, "kv_sensitive": True, "phases": {"C_recovery": dict(phase)}},
               {"config": "v1-topk1", "tp": 1, "phases": {"C_recovery": dict(phase)}}]
    lines = annotate(entries, kv, CONFIGS)
    assert "skipped" not in lines[0] and "the default pair" in lines[1] and "skipped" in lines[1]
    assert entries[1]["recovery_matches_oracle"] is None
    lines = annotate(entries, plain, CONFIGS)
    assert "a KV-sensitive pair" in lines[0] and "skipped" not in lines[1]


def test_gate_correctness_builds_and_refuses_by_kind(tmp_path, monkeypatch, capsys):
    seen = []

    def fake_run(name, models, oracle, *a, **k):
        seen.append(oracle)
        return {"config": name, "tp": 1, "kv_sensitive": oracle.kv_sensitive, "phases": {}}

    monkeypatch.setattr(gc, "run_config", fake_run)
    models, out = tmp_path / "m", tmp_path / "gc.json"
    base = ["--models", str(models), "--out", str(out), "--configs", "v1-topk1", "--parallel", "1"]
    with pytest.raises(SystemExit) as exc:  # nothing there yet
        gc.main(base + ["--kv-sensitive"])
    assert exc.value.code == 2 and "--build" in capsys.readouterr().err
    gc.main(base + ["--kv-sensitive", "--build", "tiny", "--p-wrong", "0.3", "--skip-auto"])
    assert seen[-1].kv_sensitive and seen[-1].preset == "tiny" and seen[-1].p_wrong == 0.3
    line = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert line["kv_sensitive"] is True
    with pytest.raises(SystemExit) as exc:  # a KV-sensitive pair without the flag
        gc.main(base)
    assert exc.value.code == 2 and "pass --kv-sensitive" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        gc.main(base + ["--build", "70b"])
    # one file holds both kinds: an entry of one kind never replaces one of the other
    gc.main(base + ["--build", "tiny", "--skip-auto"])
    assert not seen[-1].kv_sensitive
    got = json.loads(out.read_text())
    assert [(e["config"], e["kv_sensitive"]) for e in got] == [("v1-topk1", True), ("v1-topk1", False)]
    gc.merge_result(out, {"config": "v1-topk1", "tp": 1, "kv_sensitive": True, "phases": {}, "switches": 5})
    got = json.loads(out.read_text())
    assert len(got) == 2 and [e.get("switches") for e in got if e["kv_sensitive"]] == [5]


def test_forced_on_verify_counts_against_the_oracle():
    o = oracle_from_maps(V, 0.2, SEED, kv_sensitive=True)
    prompts = o.random_prompts(3, 32, seed=1)
    want = [o.spec_decode(p, 128, STEPS)["verify_ct"] for p in prompts]
    got = gc.forced_on_verify_ct(o, prompts, [{"spec_verify_ct": n} for n in want], 128, STEPS)
    assert got == {"spec_verify_ct": want, "spec_verify_ct_oracle": want, "spec_verify_ct_matches_oracle": True}
    off = gc.forced_on_verify_ct(o, prompts, [{"spec_verify_ct": n + (i == 1)} for i, n in enumerate(want)], 128, STEPS)
    assert off["spec_verify_ct_matches_oracle"] is False
