"""Plugin registration (what a server without the option gets: nothing but two CLI flags) and the
main-process hooks that shape the HTTP answers."""

import argparse
import asyncio
import sys
import types

import pytest

from server_patch import options, plugin, tokenizer_hooks as th


class FakeRegistry:
    def __init__(self):
        self.hooks = []
        self._patched = set()
        self.applied = 0

    def register(self, target, hook, kind):
        self.hooks.append((target, kind))

    def apply_hooks(self):
        self.applied += 1
        self._patched |= {t for t, _ in self.hooks}


@pytest.fixture
def registry(monkeypatch):
    reg = FakeRegistry()
    hook_type = types.SimpleNamespace(AFTER="AFTER", AROUND="AROUND", BEFORE="BEFORE", REPLACE="REPLACE")
    fake = types.ModuleType("sglang.srt.plugins.hook_registry")
    fake.HookRegistry, fake.HookType = reg, hook_type
    monkeypatch.setitem(sys.modules, "sglang.srt.plugins.hook_registry", fake)
    monkeypatch.setattr(plugin, "_cli_registered", False)
    monkeypatch.setattr(plugin, "_runtime_registered", False)
    return reg


def test_without_the_option_only_the_cli_flags_and_the_mends_of_sglang_are_registered(registry, monkeypatch):
    """... the mends: where FastAPI >= 0.137 is installed the /v1/loads one (server_patch/http_fixes.py),
    and unless switched off the v1 triton draft-extend one (server_patch/triton_draft_extend.py)."""
    from server_patch import http_fixes, triton_draft_extend

    monkeypatch.setattr(http_fixes, "fastapi_needs_mend", lambda version: False)
    monkeypatch.delenv(options.ENV_VAR, raising=False)
    monkeypatch.delenv(triton_draft_extend.ENV_SWITCH, raising=False)
    monkeypatch.setattr(triton_draft_extend.multiprocessing, "parent_process", lambda: object())  # a scheduler
    plugin.register()
    plugin.register()  # idempotent
    assert registry.hooks == [
        ("sglang.srt.server_args.ServerArgs.add_cli_args", "AFTER"),
        ("sglang.srt.server_args.ServerArgs.from_cli_args", "AFTER"),
        (triton_draft_extend.TARGET, "AFTER"),
    ]
    assert registry.applied == 0
    monkeypatch.setattr(plugin, "_cli_registered", False)
    monkeypatch.setattr(http_fixes, "fastapi_needs_mend", lambda version: True)
    monkeypatch.setenv(triton_draft_extend.ENV_SWITCH, "0")
    registry.hooks.clear()
    plugin.register()
    assert (http_fixes.TARGET, "REPLACE") in registry.hooks
    assert not any(t == triton_draft_extend.TARGET for t, _ in registry.hooks)


def test_scheduler_processes_get_every_runtime_hook_when_enabled(registry, monkeypatch):
    monkeypatch.setenv(options.ENV_VAR, '{"threshold": 8, "hysteresis": 0}')
    plugin.register()
    targets = {t for t, _ in registry.hooks}
    assert set(plugin.runtime_targets()) <= targets
    assert "sglang.srt.managers.scheduler.Scheduler.get_next_batch_to_run" in targets
    assert registry.applied == 1


def test_a_hook_that_could_not_be_applied_stops_the_process(registry, monkeypatch):
    monkeypatch.setenv(options.ENV_VAR, '{"threshold": 8, "hysteresis": 0}')
    registry.apply_hooks = lambda: None  # SGLang only logs targets it cannot patch
    with pytest.raises(SystemExit, match="could not hook"):
        plugin.register()


def cli_namespace(argv):
    parser = argparse.ArgumentParser()
    plugin.after_add_cli_args(None, parser)
    return parser.parse_args(argv)


def test_from_cli_args_hook_enables_and_publishes(monkeypatch):
    env = {}
    monkeypatch.setattr(options, "export_to_env", lambda cfg, environ=env: env.update(gate=cfg))
    monkeypatch.setattr(plugin.compat, "sglang_version", lambda: "0.5.12")
    monkeypatch.setattr(plugin, "require_plugin_visible", lambda: None)
    enabled = []
    monkeypatch.setattr(plugin, "enable_runtime_hooks", lambda: enabled.append(True))
    server_args = types.SimpleNamespace(speculative_algorithm="EAGLE3")
    assert plugin.after_from_cli_args(server_args, None, cli_namespace([])) is None
    assert enabled == [] and env == {}
    ns = cli_namespace(["--speculative-disable-batch-threshold", "32", "--speculative-disable-hysteresis", "4"])
    plugin.after_from_cli_args(server_args, None, ns)
    assert server_args.speculative_disable_batch_threshold == 32
    assert server_args.speculative_disable_hysteresis == 4
    assert env["gate"].threshold == 32 and enabled == [True]


def test_from_cli_args_hook_refuses_unsupported_setups(monkeypatch):
    monkeypatch.setattr(plugin.compat, "sglang_version", lambda: "0.5.12")
    ns = cli_namespace(["--speculative-disable-batch-threshold", "32"])
    with pytest.raises(plugin.compat.UnsupportedSetup, match="needs --speculative-algorithm"):
        plugin.after_from_cli_args(types.SimpleNamespace(speculative_algorithm=None), None, ns)


def test_plugin_entry_point_is_installed_and_sglang_plugins_filter_is_honoured():
    plugin.require_plugin_visible({})
    plugin.require_plugin_visible({"SGLANG_PLUGINS": "other, spec_gate"})
    with pytest.raises(plugin.compat.UnsupportedSetup, match="excludes 'spec_gate'"):
        plugin.require_plugin_visible({"SGLANG_PLUGINS": "other"})


def reply(updated, **server_args):
    return types.SimpleNamespace(updated=updated, server_args=server_args)


def test_merge_gate_replies():
    ok = th.merge_gate_replies([reply(True, speculative_disable_batch_threshold=16,
                                      speculative_disable_hysteresis=2, spec_gate_decode_step=40)])
    assert ok == {"updated": True, "reason": None, "threshold": 16, "hysteresis": 2, "decode_step": 40}
    bad = th.merge_gate_replies([reply(False, spec_gate_reason="threshold must be >= 1",
                                       speculative_disable_batch_threshold=32)])
    assert bad["updated"] is False and bad["reason"] == "threshold must be >= 1" and bad["threshold"] == 32
    assert th.merge_gate_replies([])["updated"] is False


def test_tokenizer_set_internal_state_hook():
    class Manager:
        def auto_create_handle_loop(self):
            pass

        async def set_internal_state_communicator(self, obj):
            return [reply(True, speculative_disable_batch_threshold=obj.server_args["speculative_disable_batch_threshold"])]

    async def original(manager, obj):
        return ["plain"]

    gate_req = types.SimpleNamespace(server_args={"speculative_disable_batch_threshold": 8})
    other = types.SimpleNamespace(server_args={"pp_max_micro_batch_size": 8})
    assert asyncio.run(th.around_set_internal_state(original, Manager(), gate_req))["threshold"] == 8
    assert asyncio.run(th.around_set_internal_state(original, Manager(), other)) == ["plain"]


def test_per_request_accept_length_counts_speculative_steps_only():
    meta = {"spec_verify_ct": 10, "spec_num_correct_drafts": 19, "spec_accept_length": 4.7}
    th.after_calculate_spec_decoding_metrics(None, None, meta, None, 0)
    assert meta["spec_accept_length"] == pytest.approx(2.9)
    empty = {}
    th.after_calculate_spec_decoding_metrics(None, None, empty, None, 0)
    assert empty == {}
