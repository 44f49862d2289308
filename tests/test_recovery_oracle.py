"""The exact recovery prediction (bench/recovery_oracle.py) and the batched oracle check."""

from __future__ import annotations

import copy
import json

import pytest

from bench import oracle_check
from bench.server_harness import CONFIGS
from bench.recovery_oracle import (
    annotate,
    check_recovery,
    committed_at_on,
    main,
    oracle_from_maps,
    predict_recovery,
    recovery_prompts,
)


@pytest.fixture(scope="module")
def o02():
    return oracle_from_maps(512, 0.2, 7)


def _accepts_via_draft_map(o, prompt, committed, rounds, num_steps):
    """Independent derivation: run the draft's own proposals (draft_successor) against the chain."""
    seq = [prompt[-1]] + o.chain(prompt[-1], committed)
    out = []
    for _ in range(rounds):
        proposal = o.draft_chain(seq[-2], num_steps)
        truth = o.chain(seq[-1], num_steps)
        n = 0
        while n < num_steps and proposal[n] == truth[n]:
            n += 1
        out.append(n + 1)
        seq += o.chain(seq[-1], n + 1)
    return out


def test_accept_lengths_from_agrees_with_the_draft_map_and_the_simulation(o02):
    prompts = o02.random_prompts(6, 8, seed=1)
    for p in prompts:
        for committed in (1, 2, 37, 240):
            assert o02.accept_lengths_from(p, committed, 20, 3) == _accepts_via_draft_map(o02, p, committed, 20, 3)
    # from the prefill's one token it is the whole-request simulation
    sim = o02.simulate_spec_decode(prompts[0][-1], 200, 3)
    assert o02.accept_lengths_from(prompts[0], 1, 10, 3) == sim["accept_lengths"][:10]
    with pytest.raises(ValueError):
        o02.accept_lengths_from(prompts[0], 0, 4, 3)


def test_predict_recovery_limits():
    p = [[1, 2, 3], [4, 5, 6]]
    perfect = predict_recovery(oracle_from_maps(64, 0.0, 0), p, 10, 5, 3)
    assert perfect == {"first_on_step": 4.0, "first_on_steps": 4.0}
    useless = predict_recovery(oracle_from_maps(64, 1.0, 0), p, 10, 5, 3)
    assert useless == {"first_on_step": 1.0, "first_on_steps": 1.0}
    with pytest.raises(ValueError):
        predict_recovery(oracle_from_maps(64, 0.0, 0), [], 10, 5, 3)


def test_committed_at_on_counts_prefill_off_and_resume_tokens():
    assert committed_at_on(238, 1) == 240
    assert committed_at_on(238, 0) == 239


def test_h200_tp2_v1_topk1_recovery_is_the_oracle_value():
    """bench/results/x2-2026-11-30e: v1-topk1 at TP=2 measured 1.25 on its first ON step after 238
    OFF steps, low against the configured 2.95 but exactly what a current draft state accepts at
    that position (three of the four requests meet a corrupted key)."""
    o = oracle_from_maps(8192, 0.2, 0)
    phase = {"off_steps_before_on": 238, "steps_counted": 16,
             "accept_length_first_on_step": 1.25, "accept_length_first_on_steps": 2.65625}
    r = check_recovery(o, phase, 3, resume_steps=1)
    assert r["committed_at_on"] == 240 and r["recovery_matches_oracle"] is True
    # a stale draft state (every first draft token wrong) does not pass, nor does one position off
    assert check_recovery(o, {**phase, "accept_length_first_on_step": 1.0}, 3, 1)["recovery_matches_oracle"] is False
    assert check_recovery(o, phase, 3, resume_steps=0)["recovery_matches_oracle"] is False


def test_check_recovery_without_on_steps_says_none(o02):
    r = check_recovery(o02, {"off_steps_before_on": 230, "steps_counted": 0,
                             "accept_length_first_on_step": None, "accept_length_first_on_steps": None}, 3, 1)
    assert r["committed_at_on"] == 232 and r["recovery_matches_oracle"] is None


def _entry(o, config, off, resume_field=None, kv_only=True, shift=0):
    """A gate_correctness entry whose phase C measured what the oracle predicts ``shift`` tokens on."""
    committed = committed_at_on(off, 1 if kv_only else 0) + shift
    pred = predict_recovery(o, recovery_prompts(o.vocab), committed, 16, CONFIGS[config]["num_steps"])
    phase = {"off_steps_before_on": off, "steps_counted": 16, "accept_length_first_on_step": pred["first_on_step"],
             "accept_length_first_on_steps": pred["first_on_steps"]}
    if resume_field is not None:
        phase["resume_steps"] = resume_field
    return {"config": config, "tp": 2, "off_draft_extend": "kv-only" if kv_only else "full",
            "phases": {"C_recovery": phase}}


def test_annotate_infers_the_resume_step_and_flags_a_shifted_entry():
    o = oracle_from_maps(8192, 0.2, 0)
    entries = [_entry(o, "v2-topk1", 244), _entry(o, "v1-topk4", 250, kv_only=False),
               _entry(o, "v1-topk1", 238, resume_field=1), _entry(o, "v1-topk1", 238, shift=-1),
               {"config": "v9", "tp": 1, "phases": {}}]
    lines = annotate(entries, o, CONFIGS)
    assert [e["phases"].get("C_recovery", {}).get("recovery_matches_oracle") for e in entries] == [True, True, True, False, None]
    assert entries[0]["accept_length_after_on_oracle"] == entries[0]["phases"]["C_recovery"]["accept_length_first_on_steps"]
    assert [e.get("recovery_matches_oracle") for e in entries] == [True, True, True, False, None]
    assert lines[3].endswith("NOT equal") and "skipped" in lines[4]


def test_cli_rewrites_unless_dry_run_and_its_exit_status_is_the_verdict(tmp_path, capsys):
    o = oracle_from_maps(8192, 0.2, 0)
    f = tmp_path / "gc.json"
    f.write_text(json.dumps([_entry(o, "v1-topk1", 238)]))
    before = f.read_text()
    assert main([str(f), "--dry-run"]) == 0
    assert f.read_text() == before and "equal" in capsys.readouterr().out
    assert main([str(f)]) == 0
    assert json.loads(f.read_text())[0]["phases"]["C_recovery"]["recovery_matches_oracle"] is True
    # one entry off the prediction fails the whole file (it exited 0 before)
    f.write_text(json.dumps([_entry(o, "v1-topk1", 238), _entry(o, "v2-topk1", 238, shift=-1)]))
    assert main([str(f), "--dry-run"]) == 1
    # nothing checkable is not a pass
    f.write_text("[]")
    assert main([str(f)]) == 1


@pytest.mark.parametrize("content,says", [
    (b"", "cannot read"), (b'[{"config": ', "cannot read"), (b"\xff\xfe[", "cannot read"),
    (b"{}", "not a JSON list"), (b'"x"', "not a JSON list"),
])
def test_cli_refuses_an_unreadable_file_in_one_line(tmp_path, capsys, content, says):
    f = tmp_path / "gc.json"
    f.write_bytes(content)
    with pytest.raises(SystemExit) as exc:
        main([str(f)])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and says in err and "Traceback" not in err


def test_cli_skips_malformed_entries_and_refuses_a_bad_oracle(tmp_path, capsys):
    o = oracle_from_maps(8192, 0.2, 0)
    bad = _entry(o, "v1-topk1", 238)
    bad["phases"]["C_recovery"]["accept_length_first_on_step"] = "1.25"
    f = tmp_path / "gc.json"
    f.write_text(json.dumps([1, bad, {"config": "v1-topk1", "phases": []}]))
    assert main([str(f), "--dry-run"]) == 1
    out = capsys.readouterr().out
    assert "entry 0" in out and "malformed C_recovery (TypeError" in out and out.count("skipped") == 3
    for argv in (["--vocab", "0"], ["--p-wrong", "2"], ["--models", str(tmp_path / "nowhere")]):
        with pytest.raises(SystemExit) as exc:
            main([str(f), *argv])
        assert exc.value.code == 2 and "no oracle" in capsys.readouterr().err


def test_check_batch_sends_one_request_and_checks_each_output(monkeypatch, o02):
    prompts = o02.random_prompts(3, 5, seed=2)
    sent = []

    def fake_generate(url, input_ids, max_new_tokens):
        sent.append(copy.deepcopy(input_ids))
        return [{"output_ids": o02.chain(p[-1], max_new_tokens), "meta_info": {"spec_verify_ct": 2}} for p in input_ids]

    monkeypatch.setattr(oracle_check, "generate", fake_generate)
    ok, res = oracle_check.check_batch("http://x", o02, prompts, 6)
    assert ok and sent == [prompts] and [r["spec_verify_ct"] for r in res] == [2, 2, 2]

    def one_wrong(url, input_ids, max_new_tokens):
        outs = fake_generate(url, input_ids, max_new_tokens)
        outs[1]["output_ids"][4] += 1
        return outs

    monkeypatch.setattr(oracle_check, "generate", one_wrong)
    ok, res = oracle_check.check_batch("http://x", o02, prompts, 6)
    assert not ok and [r["first_mismatch"] for r in res] == [None, 4, None]

    monkeypatch.setattr(oracle_check, "generate", lambda *a: {"output_ids": []})
    with pytest.raises(ValueError, match="not 3 outputs"):
        oracle_check.check_batch("http://x", o02, prompts, 6)


def test_cli_an_unmeasured_or_unchecked_entry_is_not_a_pass(tmp_path, capsys):
    """Second fresh-user pass: a null accept length printed 'NOT equal', exited 0 and wiped the
    stored prediction; an entry that cannot be checked must not pass on a stale verdict either."""
    o = oracle_from_maps(8192, 0.2, 0)
    good, unmeasured = _entry(o, "v1-topk1", 238), _entry(o, "v2-topk1", 244)
    unmeasured["phases"]["C_recovery"]["accept_length_first_on_step"] = None
    f = tmp_path / "gc.json"
    f.write_text(json.dumps([good, unmeasured]))
    assert main([str(f)]) == 1
    assert "not measured" in capsys.readouterr().out
    phase = json.loads(f.read_text())[1]["phases"]["C_recovery"]
    assert phase["recovery_matches_oracle"] is None and phase["accept_length_first_on_steps_oracle"] is not None
    stale = {"config": "v1-topk1", "tp": 1, "recovery_matches_oracle": True, "phases": {"C_recovery": "x"}}
    f.write_text(json.dumps([good, stale]))
    assert main([str(f), "--dry-run"]) == 1
