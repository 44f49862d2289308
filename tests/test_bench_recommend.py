"""The benchmark's threshold recommendation rule (pure arithmetic over result rows)."""

import pytest

from bench.throughput import recommend


def row(config, c, tok_s, tpot, threshold=""):
    return {"config": config, "p_wrong": "0.2", "concurrency": str(c), "output_tok_s": str(tok_s),
            "mean_tpot_ms": str(tpot), "p99_tpot_ms": str(tpot), "accept_length": "", "threshold": str(threshold)}


STATIC = [
    row("none", 1, 200, 5.0), row("always", 1, 370, 2.7),
    row("none", 16, 2800, 5.7), row("always", 16, 2400, 6.6),
]


def summarize_output(rows, path, monkeypatch, capsys) -> str:
    """Write ``rows`` as a throughput CSV at ``path``; what ``summarize`` prints for it."""
    import csv
    import sys

    from bench import throughput

    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=throughput.CSV_COLUMNS)
        w.writeheader()
        w.writerows(rows)
    monkeypatch.setattr(sys, "argv", ["throughput", "summarize", str(path)])
    throughput.main()
    return capsys.readouterr().out


def test_recommend_picks_the_threshold_closest_to_the_best_static_config():
    rows = STATIC + [
        row("gate-n4", 1, 368, 2.7, 4), row("gate-n4", 16, 2750, 5.8, 4),    # ratios ~0.99, ~0.98
        row("gate-n32", 1, 369, 2.7, 32), row("gate-n32", 16, 2390, 6.7, 32),  # ~1.0, ~0.85
    ]
    best = recommend(rows, 0.2)
    assert best["threshold"] == 4 and best["concurrencies"] == [1, 16]


def test_recommend_rejects_thresholds_that_slow_down_low_concurrency():
    rows = STATIC + [
        row("gate-n1", 1, 200, 5.0, 1), row("gate-n1", 16, 2800, 5.7, 1),  # off even at bs 1: TPOT +85%
        row("gate-n8", 1, 366, 2.75, 8), row("gate-n8", 16, 2700, 5.9, 8),
    ]
    assert recommend(rows, 0.2)["threshold"] == 8


def test_recommend_without_candidates_is_none():
    assert recommend(STATIC, 0.2) is None


def test_off_step_cost_pairs_forced_off_with_no_speculation_at_the_same_concurrency():
    from bench.throughput import off_step_cost

    rows = [
        {"config": "none", "p_wrong": "0.2", "concurrency": "64", "output_tok_s": "8000", "mean_tpot_ms": "6"},
        {"config": "none", "p_wrong": "0.2", "concurrency": "128", "output_tok_s": "12000", "mean_tpot_ms": "9"},
        {"config": "gate-forced-off", "p_wrong": "0.2", "concurrency": "64", "output_tok_s": "7600", "mean_tpot_ms": "6.3"},
        {"config": "gate-forced-off", "p_wrong": "0.5", "concurrency": "128", "output_tok_s": "1", "mean_tpot_ms": "1"},
        {"config": "always", "p_wrong": "0.2", "concurrency": "64", "output_tok_s": "5000", "mean_tpot_ms": "9"},
    ]
    cost = off_step_cost(rows)
    assert [(c["concurrency"], c["ratio"]) for c in cost] == [(64, 0.95)]  # p=0.5 row has no baseline


def test_an_operators_own_pair_is_grouped_by_its_label(tmp_path, capsys, monkeypatch):
    from bench import throughput

    rows = [dict(r, p_wrong="prod-70b") for r in STATIC] + [
        row("gate-n8", 1, 360, 2.75, 8), row("gate-n8", 16, 2700, 5.9, 8),
    ]
    rows = [dict(r, p_wrong="prod-70b") for r in rows]
    assert throughput.recommend(rows, "prod-70b")["threshold"] == 8
    assert throughput.recommend(rows, 0.2) is None
    out = summarize_output(rows, tmp_path / "throughput.csv", monkeypatch, capsys)
    assert "p_wrong=prod-70b" in out and "recommended threshold: N = 8 (" in out


def test_run_needs_a_draft_with_an_own_target(monkeypatch, capsys):
    import sys

    import pytest

    from bench import throughput

    monkeypatch.setattr(sys, "argv", ["throughput", "run", "--config", "gate", "--target", "/m/t", "--out", "/tmp/x",
                                      "--", "--tp-size", "8"])
    with pytest.raises(SystemExit) as exc:
        throughput.main()
    assert exc.value.code == 2
    assert "--target needs --draft" in capsys.readouterr().err


def test_recommend_needs_a_static_row_at_some_swept_concurrency():
    rows = STATIC + [row("gate-n4", 4, 1000, 3.0, 4), row("gate-n4", 8, 1900, 3.5, 4)]  # static rows at 1, 16 only
    assert recommend(rows, 0.2) is None


@pytest.mark.parametrize("rows, why", [
    (STATIC, "no gate-n* sweep rows: run --config gate --recommend"),
    (STATIC + [row("gate-n4", 4, 1000, 3.0, 4)], "no none and always rows at the same swept concurrency [4]"),
    # the second fresh-user pass: without the none rows it recommended N = 32 at "1.1378" of best
    # static, i.e. against always-on alone
    ([r for r in STATIC if r["config"] == "always"] + [row("gate-n4", 1, 368, 2.7, 4), row("gate-n4", 16, 2750, 5.8, 4)],
     "no none and always rows at the same swept concurrency [1, 16]"),
    (STATIC + [row("gate-n1", 1, 200, 5.0, 1), row("gate-n1", 16, 2800, 5.7, 1)],
     "no threshold keeps the mean TPOT at the lowest swept concurrency within 5% of always-on"),
])
def test_summarize_says_why_there_is_no_recommendation(tmp_path, capsys, monkeypatch, rows, why):
    import csv
    import sys

    from bench import throughput

    assert recommend(rows, 0.2) is None
    with (tmp_path / "throughput.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=throughput.CSV_COLUMNS)
        w.writeheader()
        w.writerows(rows)
    monkeypatch.setattr(sys, "argv", ["throughput", "summarize", "--results", str(tmp_path)])
    throughput.main()
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == f"recommended threshold: none ({why})"
    assert "None" not in out


def test_summarize_reports_the_time_varying_load_from_the_runs_json(tmp_path, capsys, monkeypatch):
    import json

    for config, wall, threshold in (("none", 57.4, None), ("always", 53.9, None), ("gate", 43.2, 48)):
        (tmp_path / f"throughput-{config}-p0.2.json").write_text(json.dumps({
            "config": config, "p_wrong": 0.2, "threshold": threshold,
            "time_varying": {"wall_s": wall, "total_output_tokens": 212992}}))
    (tmp_path / "throughput-broken-p0.2.json").write_text("{not json")  # skipped, not fatal
    (tmp_path / "throughput-gate-p0.5.json").write_text(json.dumps({"config": "gate", "p_wrong": 0.5}))  # no load
    out = summarize_output(STATIC + [row("gate", 1, 360, 2.8, 48)], tmp_path / "throughput.csv", monkeypatch, capsys)
    assert "time-varying load: always 53.9 s, gate N=48 43.2 s, none 57.4 s; fastest: gate" in out
    # a CSV without none/always rows: their JSON is not its run
    out = summarize_output([row("gate", 1, 360, 2.8, 48)], tmp_path / "gate-only.csv", monkeypatch, capsys)
    assert "time-varying load: gate N=48 43.2 s; fastest: gate" in out


def test_gate_over_best_static_needs_both_static_configs(tmp_path, capsys, monkeypatch):
    rows = [row("none", 1, 200, 5.0), row("gate", 1, 380, 2.7, 48),
            row("none", 16, 2800, 5.7), row("always", 16, 2400, 6.6), row("gate", 16, 2700, 5.9, 48)]
    out = summarize_output(rows, tmp_path / "throughput.csv", monkeypatch, capsys)
    assert "| 1 | 200.0 | n/a | 380.0 | n/a |" in out  # not 1.900 against none alone
    assert "| 16 | 2800.0 | 2400.0 | 2700.0 | 0.964 |" in out


def test_summarize_prints_every_swept_thresholds_score_and_the_forced_off_rows(tmp_path, capsys, monkeypatch):
    rows = STATIC + [
        row("gate-n4", 1, 368, 2.7, 4), row("gate-n4", 16, 2750, 5.8, 4),
        row("gate-n8", 1, 300, 3.0, 8), row("gate-n8", 16, 2800, 5.7, 8),  # TPOT at 1: 1.11x always-on
        row("gate-forced-off", 16, 2660, 6.0, 1),
    ]
    out = summarize_output(rows, tmp_path / "t.csv", monkeypatch, capsys)
    assert "gate forced off: 16 req 2660.0 tok/s (0.950x none)" in out
    n4 = (368 / 370 + 2750 / 2800) / 2
    assert f"sweep N=4: mean gate / best static {n4:.4f} at [1, 16] req, TPOT at 1 req 1.00x always-on\n" in out
    assert "sweep N=8: mean gate / best static" in out and "1.11x always-on (refused: TPOT over 1.05x always-on)" in out
    assert f"recommended threshold: N = 4 (mean gate / best static {n4:.4f} at 1, 16 req)\n" in out
