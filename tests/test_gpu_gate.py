"""GPU: the gate on a real SGLang 0.5.12 server with the synthetic pair (runs on the GPU machine).

Same code path as ``bench/gate_correctness.py`` (whose full run, 1000+ switches per configuration,
is committed as ``bench/results/gate-correctness.json``), at a smaller switch count.
"""

from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from bench.synthetic_models import generate_pair

    out = tmp_path_factory.mktemp("models") / "p0.2"
    generate_pair(out, preset="1b", p_wrong=0.2, device="cuda")
    return out


@pytest.mark.parametrize("config", ["v2-topk1", "v1-topk1", "v1-topk4"])
def test_gate_keeps_greedy_output_exact_on_every_worker_path(models, config, tmp_path):
    from bench.gate_correctness import run_config
    from bench.server_harness import CONFIGS
    from bench.synthetic_models import Oracle

    oracle = Oracle.load(Path(models) / "oracle.json")
    rec = run_config(config, Path(models), oracle, 32000, tmp_path, tp=1, switches_target=100,
                     mem_fraction=0.4)
    assert rec.get("error") is None, rec.get("log_tail")
    assert rec["worker_class"] == CONFIGS[config]["expect"]
    assert rec["oracle_match"] is True
    assert rec["off_steps_used_cuda_graph"] is True
    assert rec["off_target_attention"] == "triton-decode-kernel"
    assert rec["off_attention_proof_ok"] is True, (rec["off_attention_checks"], rec["off_attention_mismatches"])
    # OFF steps stored the draft's K/V only, bit for bit as SGLang's full draft extend does
    assert rec["off_draft_extend"] == "kv-only", rec["off_draft_extend_reason"]
    assert rec["off_kv_only_proof_ok"] is True, (rec["off_kv_only_checks"], rec["off_kv_only_mismatches"])
    assert min(rec["off_resume_steps"]) > 0
    assert rec["switches"] >= 100
    assert rec["phases"]["F_runtime_change"]["delay_steps"] == 0
    # the draft stays warm across 200+ OFF steps: the first ON steps accept exactly what a current
    # draft state accepts at that position (bench/recovery_oracle.py), not just "about as much"
    assert rec["recovery_matches_oracle"] is True, rec["phases"]["C_recovery"]


@pytest.fixture(scope="module")
def models_kv(tmp_path_factory):
    """The KV-sensitive 1b pair (bench.synthetic_models --kv-sensitive): a wrong or stale K/V of the
    target changes outputs, one of the draft changes phase C's accept lengths."""
    from bench.synthetic_models import generate_pair

    out = tmp_path_factory.mktemp("models") / "p0.2-kv"
    generate_pair(out, preset="1b", p_wrong=0.2, device="cuda", kv_sensitive=True)
    return out


@pytest.mark.parametrize("config", ["v2-topk1", "v1-topk1", "v1-topk4"])
def test_gate_keeps_kv_exact_with_the_kv_sensitive_pair(models_kv, config, tmp_path):
    from bench.gate_correctness import CLASSIC_ONLY, run_config
    from bench.synthetic_models import Oracle

    oracle = Oracle.load(Path(models_kv) / "oracle.json")
    assert oracle.kv_sensitive
    rec = run_config(config, Path(models_kv), oracle, 32100, tmp_path, tp=1, switches_target=100,
                     mem_fraction=0.4, phases=CLASSIC_ONLY)
    assert rec.get("error") is None, rec.get("log_tail")
    assert rec["kv_sensitive"] is True
    # every output of A-F equals the continuation, which reads the target's K/V one position back
    assert rec["oracle_match"] is True, {k: v.get("oracle_match") for k, v in rec["phases"].items()}
    assert rec["switches"] >= 100
    # speculation on throughout: every request verifies exactly as often as the oracle's trace says
    # (SGLang's own loop drafts from the K/V as the reference forward does: the baseline for C)
    assert rec["forced_on_verify_ct_matches_oracle"] is True, rec["phases"]["A_forced_on"]
    # the draft reads its own K/V of the OFF positions: exact only if the OFF steps wrote it right
    assert rec["recovery_matches_oracle"] is True, rec["phases"]["C_recovery"]
