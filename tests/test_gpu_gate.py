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
