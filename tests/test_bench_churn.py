"""bench.churn_correctness on CPU: the log parsing, the oracle checks and each phase's bookkeeping on
scripted answers (the phases themselves run on the GPU)."""

from __future__ import annotations

import json

import pytest

from bench import churn_correctness as cc
from bench.recovery_oracle import oracle_from_maps


@pytest.fixture(scope="module")
def oracle():
    return oracle_from_maps(512, 0.2, 0)


def test_retractions_are_counted_from_sglangs_own_log_lines():
    # the two messages of scheduler.py:2955-2967 in SGLang 0.5.12
    log = ("[2026-12-02 10:00:00] Testing retraction. #retracted_reqs: 1, #new_tokens_gained: 37\n"
           "[2026-12-02 10:00:01] KV cache pool is full. Retract requests. #retracted_reqs: 3, #new_tokens_gained: 9, "
           "#new_token_ratio: 0.4000 -> 0.5000\nDecode batch, #running-req: 5\n")
    assert cc.retractions(log) == 4 and cc.retractions("") == 0


def test_sglang_0_5_12_has_the_retraction_hook_and_messages():
    import importlib.util
    from pathlib import Path

    root = Path(importlib.util.find_spec("sglang").submodule_search_locations[0]) / "srt"
    sched = (root / "managers" / "scheduler.py").read_text()
    assert "TEST_RETRACT and self.forward_ct % TEST_RETRACT_INTERVAL == 0" in sched
    assert '"Testing retraction. "' in sched and '"KV cache pool is full. Retract requests. "' in sched
    assert 'f"#retracted_reqs: {len(retracted_reqs)}' in sched
    env = (root / "environ.py").read_text()
    for name in ("SGLANG_TEST_RETRACT", "SGLANG_TEST_RETRACT_INTERVAL", "SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_IDLE"):
        assert name in env
    assert '@app.post("/abort_request")' in (root / "entrypoints" / "http_server.py").read_text()


def test_a_cut_short_answer_is_right_only_as_a_start_of_the_oracles_continuation(oracle):
    prompt = [5, 9, 11]
    want = oracle.continuation(prompt, 20)
    assert cc.prefix_of_oracle(oracle, prompt, want[:7]) and cc.prefix_of_oracle(oracle, prompt, [])
    assert not cc.prefix_of_oracle(oracle, prompt, want[:6] + [(want[6] + 1) % 512])


def test_the_churn_requests_are_varied_and_fixed(oracle):
    reqs = cc.churn_requests(oracle.vocab)
    assert reqs == cc.churn_requests(oracle.vocab) and len(reqs) == cc.CHURN_REQUESTS
    assert len({len(p) for p, _ in reqs}) > 10 and len({n for _, n in reqs}) > 10


def test_the_abort_phase_aborts_half_in_the_middle_of_off_steps(monkeypatch, oracle):
    calls = []
    monkeypatch.setattr(cc, "set_gate", lambda url, **kw: calls.append(("set", kw)))
    monkeypatch.setattr(cc, "spec_gate", lambda url: {"decode_steps_off": 500})
    monkeypatch.setattr(cc, "check_batch", lambda url, o, prompts, n: (True, []))

    def generate(url, prompt, n, rid):
        k = 37 if "abort-0-" in rid or "abort-1-" in rid or "abort-2-" in rid or "abort-3-" in rid else n
        return {"output_ids": oracle.continuation(prompt, n)[:k], "meta_info": {"finish_reason": {"type": "abort" if k < n else "length"}}}

    class Reply:
        status_code = 200

    monkeypatch.setattr(cc, "generate_with_rid", generate)
    monkeypatch.setattr(cc.httpx, "post", lambda url, json, timeout: calls.append(("abort", json["rid"])) or Reply())
    waited = []
    rec = cc.phase_aborts("http://x", oracle, waited.append)
    assert calls[0] == ("set", {"threshold": 1, "hysteresis": 0}) and waited == [500 + cc.ABORT_AFTER_OFF_STEPS]
    assert [c[1].split("-")[2] for c in calls if c[0] == "abort"] == ["0", "1", "2", "3"]
    assert rec["oracle_match"] and rec["aborted_cut_short"] and rec["aborted_finish"] == ["abort"] * 4
    assert rec["aborted_tokens"] == [37] * 4 and rec["abort_http_status"] == [200] * 4


def test_the_radix_phase_checks_output_and_verify_count_of_the_request_on_the_cached_prefix(monkeypatch, oracle):
    sets = []
    monkeypatch.setattr(cc, "set_gate", lambda url, **kw: sets.append(kw))
    monkeypatch.setattr(cc, "check_one", lambda url, o, p, n: {"match": True})
    seen = {}

    def generate(url, prompt, n, rid):
        seen["prompt"] = prompt
        want = oracle.spec_decode(prompt, n, 3)["verify_ct"]
        return {"output_ids": oracle.continuation(prompt, n), "meta_info": {"spec_verify_ct": want, "cached_tokens": 189}}

    monkeypatch.setattr(cc, "generate_with_rid", generate)
    rec = cc.phase_radix("http://x", oracle, 3)
    assert sets == [{"threshold": 1, "hysteresis": 0}, {"threshold": cc.MAX_RR}]
    assert len(seen["prompt"]) == 40 + cc.RADIX_PREFIX_TOKENS
    assert rec["oracle_match"] and rec["verify_ct_matches_oracle"] and rec["cached_tokens"] == 189


def test_entries_replace_those_of_the_same_config_and_pair_kind(tmp_path):
    out = tmp_path / "churn.json"
    cc.merge_result(out, {"config": "v2-topk1", "tp": 1, "kv_sensitive": True, "ok": False})
    cc.merge_result(out, {"config": "v2-topk1", "tp": 1, "kv_sensitive": False, "ok": True})
    cc.merge_result(out, {"config": "v2-topk1", "tp": 1, "kv_sensitive": True, "ok": True})
    assert [(r["kv_sensitive"], r["ok"]) for r in json.loads(out.read_text())] == [(False, True), (True, True)]


def test_bad_options_are_refused_before_anything_starts(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        cc.main(["--models", str(tmp_path), "--out", str(tmp_path / "o.json")])
    assert e.value.code == 2 and "python -m bench.synthetic_models" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cc.main(["--models", str(tmp_path), "--configs", "v3", "--out", str(tmp_path / "o.json")])
    assert "unknown --configs v3" in capsys.readouterr().err
