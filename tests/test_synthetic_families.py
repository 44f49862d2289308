"""Prompt families ("shifting draft") of the synthetic EAGLE-3 pair, and the pin of the default pair.

bench/synthetic_models.py can split the V words into K contiguous families, each with its own
cycle of ``pi`` and its own fraction of wrong draft keys. These tests check, on CPU at the tiny
preset with the reference forward (bench/reference_forward.py), that a greedy continuation stays
in its prompt's family and equals the pi chain, that each family's measured draft acceptance is
``1 - p_wrong[k]`` to within a few points, and that the oracle records and predicts all of it.
They also pin the default pair (no families) to the bytes the single-cycle generator wrote before
families existed (hashes recorded from commit a0b514e).
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from bench import synthetic_models as sm  # noqa: E402
from bench.recovery_oracle import main as recovery_main  # noqa: E402
from bench.recovery_oracle import oracle_from_maps, predict_recovery  # noqa: E402
from bench.reference_forward import DraftModel, TargetModel, eagle3_generate  # noqa: E402

P = sm.PRESETS["tiny"]
V = P.vocab  # 128
SEED = 1234
P_WRONG_FAMILIES = (0.1, 0.6)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --------------------------------------------------------------------------------------------
# default mode == the original single-cycle generator
# --------------------------------------------------------------------------------------------


def _original_build_maps(vocab: int, p_wrong: float, seed: int):
    """bench.synthetic_models.build_maps as it was before families (commit a0b514e), verbatim."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(vocab)
    pi = np.empty(vocab, dtype=np.int64)
    pi[order] = np.roll(order, -1)
    n_wrong = int(math.floor(p_wrong * vocab + 0.5))
    corrupted = np.sort(rng.choice(vocab, size=n_wrong, replace=False)) if n_wrong else np.array([], np.int64)
    succ = pi.copy()
    for c in corrupted:
        w = int(rng.integers(vocab - 1))
        if w >= pi[c]:
            w += 1
        succ[c] = w
    return pi.tolist(), succ.tolist(), [int(c) for c in corrupted]


# sha256 of json.dumps(build_maps(vocab, p_wrong, seed)), recorded with the original generator.
PINNED_MAPS = {
    (128, 0.2, 1234): "28e5f88eb70edbb6fa7ad882b8fc82a7649ae0d7d6e9102940a24cce10559181",
    (1000, 0.25, 5): "4952f6aabf818d2ad9167d0c5cb11753971a74124f8c6d492cdd3896d678aa6e",
    (8192, 0.2, 0): "38fac5843e9d64bdacd1144b880f9d387891a0f726576ddf030adcffa7f3740a",
    (8192, 0.5, 3): "19695ddf5346ab69dd31b5234cf096b9fb34a5ac822d7136b1cbd75e9efaf544",
    (96, 0.25, 2): "5b217e8c7fbad627e34efb0afd0bcb84cab0b3439e15f81005616c325edc54f0",
}

# sha256 of every file of generate_pair(preset="tiny", p_wrong=0.2, seed=1234, device="cpu"),
# recorded with the original generator. The files made of numpy draws and JSON only:
PINNED_FILES_JSON = {
    "oracle.json": "cf2aa432cdcb59f6bf9a9467a63ad661070cb83d5fb7a98ae3009e8aabdfe3df",
    "target/config.json": "cfc7ccb92bb8bf156dca7ea316153e82494c3ab20ec59ab9b98bfaee1eff97e8",
    "target/generation_config.json": "81eb625de8b7ec520fc86962693df768ca93697f0bb2e97532aeaf779c070ae2",
    "target/tokenizer_config.json": "0f547f798ad918e31aa4a9550feb91b23a4441dea0c69f53ff94bf1e0149d656",
    "target/special_tokens_map.json": "54fde84784eb856e013193ec35ab3e6b801d7fde6f363405298c447bb634a130",
    "draft/config.json": "024a766c9f76c9cc290a1ff66fe3c4b5bd2bdfef20a1c0940e8bf77daebd72dd",
    "draft/tokenizer_config.json": "0f547f798ad918e31aa4a9550feb91b23a4441dea0c69f53ff94bf1e0149d656",
    "draft/special_tokens_map.json": "54fde84784eb856e013193ec35ab3e6b801d7fde6f363405298c447bb634a130",
}
# ... and those whose bytes also depend on torch's CPU generator / the tokenizers serialiser,
# pinned under the versions they were recorded with.
PINNED_VERSIONS = {"torch": "2.13.0+cpu", "tokenizers": "0.23.3"}
PINNED_FILES_LIBRARY = {
    "target/model.safetensors": "003e58abc9d759d794c94dc9700a25b9c51c08e330ff1b23057d5a6641aafe37",
    "draft/model.safetensors": "152774a0c05fa72eed2eec8d27783021db6b1236179734738d7dd23560924b90",
    "target/tokenizer.json": "865dc00e6593372fa7f344655e59b8aa55896ee391a57a9e96c65cae22a64ef1",
    "draft/tokenizer.json": "865dc00e6593372fa7f344655e59b8aa55896ee391a57a9e96c65cae22a64ef1",
}


@pytest.fixture(scope="module")
def default_pair(tmp_path_factory):
    """The default (single-family) tiny pair at p_wrong 0.2: (dir, oracle)."""
    d = tmp_path_factory.mktemp("default_p20")
    return d, sm.generate_pair(d, preset="tiny", p_wrong=0.2, seed=SEED, device="cpu")


def test_default_maps_equal_the_original_draw():
    for (vocab, p, seed), digest in PINNED_MAPS.items():
        assert _sha256(json.dumps(sm.build_maps(vocab, p, seed)).encode()) == digest, (vocab, p, seed)
    for vocab in (2, 3, 50, 128, 1000):
        for p in (0.0, 0.2, 0.5, 1.0):
            for seed in (0, 1, 77):
                want = _original_build_maps(vocab, p, seed)
                assert sm.build_maps(vocab, p, seed) == want
                assert sm.build_maps(vocab, p, seed, families=1) == want  # K = 1 is the default
                assert sm.build_maps(vocab, 0.0, seed, p_wrong_families=[p]) == want


def test_default_prompts_equal_the_original_draw():
    want = np.random.default_rng(4).integers(0, 50, size=(8, 30)).tolist()
    assert sm.random_prompt_ids(50, 8, 30, seed=4) == want
    o = oracle_from_maps(50, 0.2, 0)
    assert o.random_prompts(8, 30, seed=4) == o.family_prompt_ids(0, 8, 30, seed=4) == want


def test_default_pair_files_equal_the_original(default_pair):
    d, _ = default_pair
    for name, digest in PINNED_FILES_JSON.items():
        assert _sha256((d / name).read_bytes()) == digest, name
    oj = json.loads((d / "oracle.json").read_text())
    assert oj["format_version"] == 1 and "families" not in oj


def test_default_pair_weights_and_tokenizer_equal_the_original(default_pair):
    import tokenizers

    have = {"torch": torch.__version__, "tokenizers": tokenizers.__version__}
    if have != PINNED_VERSIONS:
        pytest.skip(f"byte pins recorded under {PINNED_VERSIONS}, running {have}")
    d, _ = default_pair
    for name, digest in PINNED_FILES_LIBRARY.items():
        assert _sha256((d / name).read_bytes()) == digest, name


def test_default_oracle_is_one_family(default_pair):
    d, o = default_pair
    loaded = sm.Oracle.load(d)
    for x in (o, loaded):
        assert x.num_families == 1 and x.format_version == 1
        assert x.families == [sm.PromptFamily(0, V, 0.2)]
        assert x.family_accept_rate(0) == x.accept_rate
        assert x.expected_accept_length(3, family=0) == x.expected_accept_length(3)
        assert x.family_of(0) == x.family_of(V - 1) == 0
    assert loaded.to_json() == o.to_json()


# --------------------------------------------------------------------------------------------
# family maps
# --------------------------------------------------------------------------------------------


def _cycle_of(pi: list[int], start: int) -> list[int]:
    out, x = [start], pi[start]
    while x != start:
        out.append(x)
        x = pi[x]
    return out


def test_family_maps_one_cycle_per_family_and_corruption_inside():
    ps = [0.1, 0.5, 0.9]
    fams = sm.prompt_families(1000, p_wrong_families=ps)
    assert [(f.start, f.stop) for f in fams] == [(0, 333), (333, 666), (666, 1000)]
    pi, succ, cor = sm.build_maps(1000, 0.0, 5, p_wrong_families=ps)
    assert sm.build_maps(1000, 0.0, 5, families=3, p_wrong_families=ps) == (pi, succ, cor)
    assert cor == sorted(cor) and len(set(cor)) == len(cor)
    for f in fams:
        ids = set(range(f.start, f.stop))
        assert set(_cycle_of(pi, f.start)) == ids  # one cycle over exactly the family
        assert all(succ[x] in ids for x in ids)  # wrong successors stay in the family too
        fam_cor = [c for c in cor if f.contains(c)]
        assert len(fam_cor) == f.corrupted_count == math.floor(f.p_wrong * f.size + 0.5)  # halves up
    assert [x for x in range(1000) if succ[x] != pi[x]] == cor
    assert sm.build_maps(1000, 0.0, 6, p_wrong_families=ps) != (pi, succ, cor)
    # families=K alone: every family gets p_wrong
    same_p = sm.prompt_families(128, 0.25, families=4)
    assert [(f.start, f.stop, f.p_wrong) for f in same_p] == [(32 * k, 32 * k + 32, 0.25) for k in range(4)]


@pytest.mark.parametrize("kwargs", [
    dict(p_wrong=0.0, families=3, p_wrong_families=[0.1, 0.2]),  # K mismatch
    dict(p_wrong=0.2, p_wrong_families=[0.1, 0.2]),  # ambiguous
    dict(p_wrong=0.0, p_wrong_families=[0.1, 1.2]),  # p out of range
    dict(p_wrong=0.0, p_wrong_families=[]),  # no family
    dict(p_wrong=0.0, families=65),  # 128 words cannot make 65 families of >= 2
    dict(p_wrong=0.0, families=0),
])
def test_bad_family_options_raise(kwargs):
    with pytest.raises(ValueError):
        sm.build_maps(128, seed=0, **kwargs)


# --------------------------------------------------------------------------------------------
# the tiny pair with two families, through the reference forward
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fam_pair(tmp_path_factory):
    """Tiny pair, families (0..63, p 0.1) and (64..127, p 0.6): (dir, oracle, target, draft)."""
    d = tmp_path_factory.mktemp("tiny_families")
    o = sm.generate_pair(d, preset="tiny", seed=SEED, device="cpu", p_wrong_families=P_WRONG_FAMILIES)
    t = TargetModel(d / "target")
    dr = DraftModel(d / "draft", embed=t.w["model.embed_tokens.weight"])
    return d, o, t, dr


@pytest.mark.parametrize("family", [0, 1])
def test_greedy_continuation_stays_in_family_and_equals_chain(fam_pair, family):
    _, o, t, _ = fam_pair
    fam = o.families[family]
    for prompt in o.family_prompt_ids(family, 3, 7, seed=family):
        assert all(fam.contains(x) for x in prompt)
        out = t.greedy(prompt, 80)  # > family size: wraps around the family's cycle
        assert out == o.chain(prompt[-1], 80)
        assert all(fam.contains(x) for x in out)
        assert set(out) == set(range(fam.start, fam.stop))
    # only the last token decides: a prompt of the other family ending in this one
    other = o.family_prompt_ids(1 - family, 1, 6, seed=9)[0] + o.family_prompt_ids(family, 1, 1, seed=9)[0]
    out = t.greedy(other, 20)
    assert out == o.chain(other[-1], 20) and all(fam.contains(x) for x in out)


def test_measured_draft_acceptance_per_family(fam_pair):
    _, o, t, dr = fam_pair
    for k, fam in enumerate(o.families):
        seq = [fam.start] + o.chain(fam.start, fam.size)  # every key of the family once
        with torch.no_grad():
            out = t.forward(torch.tensor(seq), torch.arange(len(seq)))
            d = dr.forward(torch.tensor(seq[1:] + [o.pi[seq[-1]]]), out.aux_hidden, torch.arange(len(seq)))
        assert out.logits.argmax(-1).tolist() == [o.pi[x] for x in seq]
        proposals = d.tokens[:-1]
        assert proposals == [o.draft_chain(key, 1)[0] for key in seq[:-1]]
        assert all(fam.contains(x) for x in proposals)
        hits = [tok == o.pi[o.pi[key]] for key, tok in zip(seq[:-1], proposals)]
        measured = sum(hits) / len(hits)
        assert abs(measured - (1 - P_WRONG_FAMILIES[k])) <= 0.03, k
        assert measured == pytest.approx(o.family_accept_rate(k))


def test_speculative_loop_per_family(fam_pair):
    """Reference EAGLE-3 loop: output == chain, accept lengths == the oracle's simulation, and the
    family sets the accept length (the shift an auto-threshold controller must see)."""
    _, o, t, dr = fam_pair
    steps, n_new = 3, 48
    pooled = []
    for k in range(o.num_families):
        accepted = []
        for prompt in o.family_prompt_ids(k, 3, 5, seed=100 + k):
            with torch.no_grad():
                r = eagle3_generate(t, dr, prompt, n_new, steps)
            sim = o.simulate_spec_decode(prompt[-1], n_new, steps)
            assert r["tokens"] == o.chain(prompt[-1], n_new) == sim["tokens"]
            assert r["accept_lengths"] == sim["accept_lengths"]
            accepted += r["accept_lengths"]
        mean = sum(accepted) / len(accepted)
        assert abs(mean - o.expected_accept_length(steps, family=k)) < 0.45, k
        pooled.append(mean)
    assert pooled[0] > pooled[1] + 1.0


# --------------------------------------------------------------------------------------------
# oracle: format, loading, per-family predictions
# --------------------------------------------------------------------------------------------


def test_oracle_json_records_families_and_loads(fam_pair, tmp_path):
    d, o, _, _ = fam_pair
    oj = json.loads((d / "oracle.json").read_text())
    assert oj["format_version"] == sm.ORACLE_FORMAT_VERSION_FAMILIES == 2
    assert [f["token_ids"] for f in oj["families"]] == [[0, 64], [64, 128]]
    assert [f["p_wrong"] for f in oj["families"]] == list(P_WRONG_FAMILIES)
    assert [f["corrupted_count"] for f in oj["families"]] == [6, 38]  # round(6.4), round(38.4)
    assert oj["families"][1]["expected_accept_length"]["3"] == o.expected_accept_length(3, family=1)
    assert oj["p_wrong"] == pytest.approx(0.35)  # size-weighted mean
    # every format-1 key is still there, with the same meaning
    for key in ("pi", "corrupted", "draft_successor", "accept_rate", "expected_accept_length", "word_token_ids"):
        assert key in oj
    loaded = sm.Oracle.load(d)
    assert loaded.to_json() == o.to_json()
    assert loaded.families == [sm.PromptFamily(0, 64, 0.1), sm.PromptFamily(64, 128, 0.6)]
    no_families = tmp_path / "oracle.json"
    no_families.write_text(json.dumps({k: v for k, v in oj.items() if k != "families"}))
    with pytest.raises(ValueError):
        sm.Oracle.load(no_families)


def test_per_family_helpers(fam_pair):
    _, o, _, _ = fam_pair
    assert [o.family_of(x) for x in (0, 63, 64, 127)] == [0, 0, 1, 1]
    lengths = o.expected_accept_lengths_by_family(3)
    a0, a1 = o.family_accept_rate(0), o.family_accept_rate(1)
    assert (a0, a1) == (1 - 6 / 64, 1 - 38 / 64)
    assert lengths == [pytest.approx(1 + a + a**2 + a**3) for a in (a0, a1)]
    assert o.expected_accept_length(3) == pytest.approx(1 / (0.5 / lengths[0] + 0.5 / lengths[1]))
    assert o.expected_accept_rate(3, family=1) == pytest.approx((lengths[1] - 1) / 3)
    assert o.accept_rate == 1 - 44 / 128
    prompts = o.family_prompt_ids(1, 5, 9, seed=2)
    assert len(prompts) == 5 and all(len(p) == 9 and all(64 <= x < 128 for x in p) for p in prompts)
    assert prompts == o.family_prompt_ids(1, 5, 9, seed=2)
    assert prompts == sm.random_prompt_ids(V, 5, 9, seed=2, family=o.families[1])
    for bad in (-1, 2):
        with pytest.raises(ValueError):
            o.family_prompt_ids(bad, 1, 4)
        with pytest.raises(ValueError):
            o.expected_accept_length(3, family=bad)
    with pytest.raises(ValueError):
        sm.random_prompt_ids(32, 1, 4, family=o.families[1])  # family outside the vocab


def test_expected_accept_length_per_family_matches_simulation():
    """At a realistic vocabulary the per-family formula is what a family's prompts accept, and
    an equal mix of both families gives the pooled value."""
    o = oracle_from_maps(8192, 0.0, 0, [0.1, 0.6])
    totals = []
    for k in range(2):
        tokens = verifies = 0
        for prompt in o.family_prompt_ids(k, 40, 4, seed=k):
            sim = o.simulate_spec_decode(prompt[-1], 400, 3)
            tokens, verifies = tokens + sum(sim["accept_lengths"]), verifies + sim["verify_ct"]
        assert tokens / verifies == pytest.approx(o.expected_accept_length(3, family=k), abs=0.06), k
        totals.append((tokens, verifies))
    mixed = sum(t for t, _ in totals) / sum(v for _, v in totals)
    assert mixed == pytest.approx(o.expected_accept_length(3), abs=0.06)


def test_recovery_prediction_with_families():
    o = oracle_from_maps(8192, 0.0, 0, [0.1, 0.6])
    assert (o.pi, o.draft_successor, o.corrupted) == sm.build_maps(8192, 0.0, 0, p_wrong_families=[0.1, 0.6])
    assert oracle_from_maps(512, 0.2, 7).to_json() == oracle_from_maps(512, 0.2, 7, None).to_json()
    high = predict_recovery(o, o.family_prompt_ids(0, 4, 32, seed=3), 200, 20, 3)
    low = predict_recovery(o, o.family_prompt_ids(1, 4, 32, seed=3), 200, 20, 3)
    assert high["first_on_steps"] > low["first_on_steps"] + 1.0
    for p in o.family_prompt_ids(1, 3, 8, seed=1):
        seq = [p[-1]] + o.chain(p[-1], 37)
        lengths = o.accept_lengths_from(p, 37, 10, 3)
        for n in lengths:  # each round: the leading uncorrupted keys from seq[-2]
            assert n - 1 == o.accepted_drafts(seq[-2], 3)
            seq += o.chain(seq[-1], n)
        assert all(o.family_of(x) == 1 for x in seq)


def test_recovery_cli_refuses_both_p_options(tmp_path):
    f = tmp_path / "g.json"
    f.write_text("[]")
    with pytest.raises(SystemExit):
        recovery_main([str(f), "--p-wrong", "0.2", "--p-wrong-families", "0.1,0.6", "--dry-run"])
    assert recovery_main([str(f), "--vocab", "512", "--p-wrong-families", "0.1,0.6", "--dry-run"]) == 1  # no entries


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------


def test_cli_families(tmp_path, capsys):
    out = tmp_path / "fam"
    assert sm.main(["--out", str(out), "--families", "2", "--p-wrong-families", "0.1,0.6",
                    "--seed", str(SEED), "--device", "cpu"]) == 0
    assert "family 1: ids 64..127 p_wrong=0.6" in capsys.readouterr().err
    o = sm.Oracle.load(out)
    assert o.families == [sm.PromptFamily(0, 64, 0.1), sm.PromptFamily(64, 128, 0.6)]
    out3 = tmp_path / "fam3"
    assert sm.main(["--out", str(out3), "--families", "3", "--p-wrong", "0.25", "--device", "cpu"]) == 0
    assert [(f.start, f.stop, f.p_wrong) for f in sm.Oracle.load(out3).families] == [
        (0, 42, 0.25), (42, 85, 0.25), (85, 128, 0.25)]


def test_cli_one_family_is_the_default_pair(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    assert sm.main(["--out", str(a), "--p-wrong", "0.2", "--seed", "3", "--device", "cpu"]) == 0
    assert sm.main(["--out", str(b), "--families", "1", "--p-wrong", "0.2", "--seed", "3", "--device", "cpu"]) == 0
    for name in ("oracle.json", "target/model.safetensors", "draft/model.safetensors"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


@pytest.mark.parametrize("argv", [
    ["--families", "3", "--p-wrong-families", "0.1,0.6"],
    ["--p-wrong", "0.1", "--p-wrong-families", "0.1,0.6"],
    ["--p-wrong-families", "0.1,x"],
    ["--families", "65"],
])
def test_cli_bad_family_options(tmp_path, argv):
    with pytest.raises(SystemExit):
        sm.main(["--out", str(tmp_path / "x"), "--device", "cpu", *argv])
    assert not (tmp_path / "x").exists()  # refused before writing anything


def test_cli_help_names_families(capsys):
    with pytest.raises(SystemExit):
        sm.main(["--help"])
    text = capsys.readouterr().out
    assert "--families K" in text and "--p-wrong-families" in text
