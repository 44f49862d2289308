"""bench.gate_correctness with extra SGLang arguments (``-- --attention-backend fa3``,
``--disable-cuda-graph``, ``--cuda-graph-max-bs N``): what each entry records, that entries of
different variants of one configuration are kept side by side, and that a bad flag is refused
before a server starts."""

from __future__ import annotations

import json

import pytest

from bench import gate_correctness as gc


def test_the_default_variant_is_the_harness_triton_with_cuda_graphs():
    v = gc.server_variant([])
    assert v == {"attention_backend": "triton", "cuda_graph": True, "cuda_graph_max_bs": gc.MAX_RR,
                 "extra_server_args": []}
    assert gc.variant_label(v) == ""


def test_the_last_value_of_a_repeated_flag_counts_as_in_sglang():
    v = gc.server_variant(["--attention-backend", "flashinfer", "--attention-backend=fa3", "--cuda-graph-max-bs", "8"])
    assert (v["attention_backend"], v["cuda_graph_max_bs"]) == ("fa3", 8)
    assert gc.variant_label(v) == "-fa3-maxbs8"
    assert gc.variant_label(gc.server_variant(["--disable-cuda-graph"])) == "-eager"


def test_the_extra_arguments_come_last_in_the_server_command(tmp_path):
    args = gc.config_server_args("v1-topk1", tmp_path, 1, 0.2, ["--attention-backend", "fa3"])
    assert args[-2:] == ["--attention-backend", "fa3"]
    assert args.index("--attention-backend") < len(args) - 2  # the harness's own triton comes first


def test_entries_of_two_variants_of_one_config_are_kept_side_by_side(tmp_path):
    out = tmp_path / "gate.json"
    base = {"config": "v2-topk1", "tp": 1, "kv_sensitive": True}
    gc.merge_result(out, {**base, **gc.server_variant([]), "run": 1})
    gc.merge_result(out, {**base, **gc.server_variant(["--attention-backend", "fa3"]), "run": 2})
    gc.merge_result(out, {**base, **gc.server_variant(["--attention-backend", "fa3"]), "run": 3})
    entries = json.loads(out.read_text())
    assert sorted((e["attention_backend"], e["run"]) for e in entries) == [("fa3", 3), ("triton", 1)]


def test_an_entry_written_before_variants_existed_is_the_default_variant(tmp_path):
    out = tmp_path / "gate.json"
    out.write_text(json.dumps([{"config": "v2-topk1", "tp": 1, "run": 0}]))
    gc.merge_result(out, {"config": "v2-topk1", "tp": 1, **gc.server_variant([]), "run": 1})
    assert [e["run"] for e in json.loads(out.read_text())] == [1]


def test_a_run_whose_off_path_differs_under_new_plugin_defaults_is_another_entry(tmp_path):
    """An entry without ``off_path`` ran under older defaults (e.g. the eager KV-only extend on fa3):
    a run of the same config and flags that ran the KV-only graph and prefills keeps it beside."""
    out = tmp_path / "gate.json"
    out.write_text(json.dumps([{"config": "v2-topk1", "tp": 1, "attention_backend": "fa3",
                                "extra_server_args": ["--attention-backend", "fa3"], "run": 0}]))
    off_path = {"kv_only_runs": "cuda-graph", "kv_only_prefills": True, "lean_draft_extend": True, "lean_v1": None}
    gc.merge_result(out, {"config": "v2-topk1", "tp": 1, **gc.server_variant(["--attention-backend", "fa3"]),
                          "off_path": off_path, "run": 1})
    gc.merge_result(out, {"config": "v2-topk1", "tp": 1, **gc.server_variant(["--attention-backend", "fa3"]),
                          "off_path": off_path, "run": 2})
    assert sorted(e["run"] for e in json.loads(out.read_text())) == [0, 2]


@pytest.mark.parametrize("extra, message", [
    (["--attention-backend"], "--attention-backend needs a value"),
    (["--cuda-graph-max-bs", "many"], "invalid literal"),
])
def test_a_bad_extra_flag_is_refused_before_any_server_starts(extra, message, tmp_path, monkeypatch, capsys):
    started = []
    monkeypatch.setattr(gc, "run_config", lambda *a, **k: started.append(a))
    with pytest.raises(SystemExit) as exc:
        gc.main(["--models", str(tmp_path), "--out", str(tmp_path / "o.json"), "--", *extra])
    assert exc.value.code == 2 and message in capsys.readouterr().err and not started


def test_a_check_on_a_config_server_records_its_failure_and_stops_the_server(tmp_path, monkeypatch):
    stopped, started = [], []

    class FakeServer:
        url = "http://127.0.0.1:1"

        def log_tail(self, n=60):
            return "the log"

    def start(name, args, port, log_dir, env=None, cpus=None):
        started.append((name, args[-2:], env))
        return FakeServer()

    monkeypatch.setattr(gc, "start_server", start)
    monkeypatch.setattr(gc, "wait_ready", lambda server: None)
    monkeypatch.setattr(gc, "spec_gate", lambda url: {"worker_class": "EAGLEWorker"})
    monkeypatch.setattr(gc, "stop_server", lambda server: stopped.append(server) or 0)
    monkeypatch.setattr(gc, "record_failure", lambda rec, server, exc: rec.update(error=f"{type(exc).__name__}: {exc}"))

    class Oracle:
        kv_sensitive = True

    def body(server, rec):
        rec["phase"] = "ran"
        raise RuntimeError("a request timed out")

    rec = gc.run_on_config_server("churn", "v1-topk1", tmp_path, Oracle(), 31500, tmp_path, tp=1, mem_fraction=0.5,
                                  body=body, extra=["--attention-backend", "fa3"], env={"X": "1"}, fields={"k": 2})
    assert started == [("churn-v1-topk1-tp1-kv-fa3", ["--attention-backend", "fa3"], {"X": "1"})]
    assert rec["worker_class"] == "EAGLEWorker" and rec["phase"] == "ran" and rec["k"] == 2
    assert rec["ok"] is False and rec["error"] == "RuntimeError: a request timed out"
    assert rec["attention_backend"] == "fa3" and rec["kv_sensitive"] is True and len(stopped) == 1


def test_an_opt_in_switch_makes_its_own_entry(tmp_path, monkeypatch):
    monkeypatch.delenv("SPECCONSOLE_OFF_DRAFT_KV_ONLY_EAGER", raising=False)
    plain = {"config": "v2-topk1", "tp": 1, "kv_sensitive": True, **gc.server_variant(["--attention-backend", "fa3"])}
    monkeypatch.setenv("SPECCONSOLE_OFF_DRAFT_KV_ONLY_EAGER", "1")
    eager_kv = {"config": "v2-topk1", "tp": 1, "kv_sensitive": True, **gc.server_variant(["--attention-backend", "fa3"])}
    assert "server_env" not in plain and eager_kv["server_env"] == {"SPECCONSOLE_OFF_DRAFT_KV_ONLY_EAGER": "1"}
    out = tmp_path / "g.json"
    gc.merge_result(out, plain)
    gc.merge_result(out, eager_kv)
    gc.merge_result(out, dict(eager_kv, ok=True))
    import json
    entries = json.loads(out.read_text())
    assert len(entries) == 2 and entries[-1].get("ok") is True
