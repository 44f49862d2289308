"""CLI options, their transport to scheduler processes, and the supported-setup checks."""

import argparse
import types

import pytest

from server_patch import compat, options
from server_patch.contract import GateConfig, GateConfigError, capacity_warnings


def parse(argv):
    parser = argparse.ArgumentParser()
    options.add_cli_args(parser)
    return parser.parse_args(argv)


def test_no_threshold_means_no_gate():
    assert options.config_from_namespace(parse([])) is None


def test_threshold_and_hysteresis_parse():
    ns = parse(["--speculative-disable-batch-threshold", "32", "--speculative-disable-hysteresis", "4"])
    assert options.config_from_namespace(ns) == GateConfig(32, 4)
    ns = parse(["--speculative-disable-batch-threshold", "8"])
    assert options.config_from_namespace(ns) == GateConfig(8, 0)


def test_bad_cli_values_are_refused():
    with pytest.raises(GateConfigError, match="needs --speculative-disable-batch-threshold"):
        options.config_from_namespace(parse(["--speculative-disable-hysteresis", "2"]))
    with pytest.raises(GateConfigError, match="must be < threshold"):
        options.config_from_namespace(
            parse(["--speculative-disable-batch-threshold", "4", "--speculative-disable-hysteresis", "4"])
        )
    with pytest.raises(SystemExit):  # argparse: not an integer
        parse(["--speculative-disable-batch-threshold", "lots"])


def test_env_roundtrip_and_malformed_env():
    env = {}
    assert options.config_from_env(env) is None
    options.export_to_env(GateConfig(16, 2), env)
    assert options.config_from_env(env) == GateConfig(16, 2)
    with pytest.raises(GateConfigError, match="malformed"):
        options.config_from_env({options.ENV_VAR: "{not json"})
    with pytest.raises(GateConfigError):
        options.config_from_env({options.ENV_VAR: '{"threshold": 0}'})


def args(**kw):
    base = dict(speculative_algorithm="EAGLE3", enable_dp_attention=False, enable_multi_layer_eagle=False,
                enable_two_batch_overlap=False, speculative_adaptive=False, enable_pdmux=False, pp_size=1,
                page_size=1)
    base.update(kw)
    return types.SimpleNamespace(**base)


def test_supported_setup_has_no_reasons():
    assert compat.unsupported_reasons(args()) == []
    assert compat.unsupported_reasons(args(speculative_algorithm="EAGLE")) == []


@pytest.mark.parametrize(
    "override,needle",
    [
        (dict(speculative_algorithm=None), "needs --speculative-algorithm EAGLE or EAGLE3"),
        (dict(speculative_algorithm="NGRAM"), "NGRAM"),
        (dict(enable_dp_attention=True), "data-parallel attention"),
        (dict(enable_multi_layer_eagle=True), "multi-layer EAGLE"),
        (dict(enable_two_batch_overlap=True), "two-batch overlap"),
        (dict(speculative_adaptive=True), "--speculative-adaptive"),
        (dict(enable_pdmux=True), "PD multiplexing"),
        (dict(pp_size=2), "pipeline parallelism"),
        (dict(page_size=16), "--page-size"),
        (dict(disaggregation_mode="decode"), "PD disaggregation (--disaggregation-mode decode)"),
        (dict(disaggregation_mode="prefill"), "get_next_disagg_decode_batch_to_run"),
    ],
)
def test_unsupported_setups_refuse_with_the_reason(override, needle):
    with pytest.raises(compat.UnsupportedSetup, match="refused") as info:
        compat.check_server_args(args(**override))
    assert needle in str(info.value)


def test_hybrid_linear_attention_targets_are_refused_by_any_of_sglangs_markers():
    import types

    class Runner:
        mamba2_config = hybrid_gdn_config = kimi_linear_config = hybrid_lightning_config = None

        @property
        def mambaish_config(self):
            return self.registry

    plain = Runner()
    plain.registry = None
    assert compat.target_model_reason(plain) is None
    registry = Runner()
    registry.registry = type("KimiLinearConfig", (), {})()  # e.g. found by SGLang's registry only
    assert "KimiLinearConfig, ModelRunner.mambaish_config" in compat.target_model_reason(registry)
    older = types.SimpleNamespace(hybrid_gdn_config=type("Qwen3NextConfig", (), {})())  # no mambaish_config
    assert "Qwen3NextConfig" in compat.target_model_reason(older)

    class Broken(Runner):
        @property
        def mambaish_config(self):
            raise AttributeError("hf_config")

    assert compat.target_model_reason(Broken()) is None


def test_batches_beyond_the_cuda_graphs_warn_whatever_the_threshold():
    from server_patch.contract import graph_coverage_warning

    assert graph_coverage_warning(128, 128) is None and graph_coverage_warning(None, 64) is None
    w = graph_coverage_warning(256, 128)
    assert w.long == ("max running requests 256 > cuda graph max bs 128: decode batches of 129-256 "
                      "requests run without CUDA graphs, ON and OFF (set --cuda-graph-max-bs 256)")
    assert "large batches eager" in w.short


def test_version_check():
    compat.check_sglang_version("0.5.12")
    with pytest.raises(compat.UnsupportedSetup, match="supports SGLang 0.5.12 only; found 0.5.23"):
        compat.check_sglang_version("0.5.23")


def test_worker_classification_uses_the_exact_class_name():
    EAGLEWorker = type("EAGLEWorker", (), {})
    EAGLEWorkerV2 = type("EAGLEWorkerV2", (), {})
    MultiLayerEagleWorkerV2 = type("MultiLayerEagleWorkerV2", (EAGLEWorkerV2,), {})
    assert compat.classify_worker(EAGLEWorker()) == ("EAGLEWorker", "v1")
    assert compat.classify_worker(EAGLEWorkerV2()) == ("EAGLEWorkerV2", "v2")
    with pytest.raises(compat.UnsupportedSetup, match="unknown speculative worker class MultiLayerEagleWorkerV2"):
        compat.classify_worker(MultiLayerEagleWorkerV2())


def test_capacity_warnings():
    assert capacity_warnings(32, 64, 64) == []
    w = [x.long for x in capacity_warnings(100, 48, 64)]
    assert any("max running requests 48" in x for x in w) and any("cuda graph max bs 64" in x for x in w)


def test_launcher_without_sglang_dependencies_exits_with_one_clear_line(monkeypatch):
    import builtins

    from server_patch import launch_server

    real_import = builtins.__import__

    def no_sglang(name, *args, **kwargs):
        if name.startswith("sglang.srt"):
            raise ModuleNotFoundError("No module named 'orjson'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_sglang)
    with pytest.raises(SystemExit) as info:
        launch_server.main(["--help"])
    assert "needs SGLang 0.5.12 with its dependencies" in str(info.value)
    assert "orjson" in str(info.value)


def test_a_count_variable_is_its_default_when_blank_else_a_whole_number_in_range():
    assert options.whole_number("N", 7, 1, environ={}) == 7
    assert options.whole_number("N", 7, 1, environ={"N": "  "}) == 7
    assert options.whole_number("N", 7, 0, 9, environ={"N": " 9 "}) == 9
    for raw, span in (("0", ">= 1"), ("x", ">= 1"), ("1.5", ">= 1")):
        with pytest.raises(ValueError, match=f"N='{raw}': expected a whole number of tokens {span}"):
            options.whole_number("N", 7, 1, environ={"N": raw})
    with pytest.raises(ValueError, match="from 0 to 9"):
        options.whole_number("N", 7, 0, 9, environ={"N": "10"})
