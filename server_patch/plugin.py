"""The ``sglang.srt.plugins`` entry point (``spec_gate = server_patch.plugin:register``).

SGLang calls ``load_plugins()`` at the top of every process it runs (main process, each
scheduler / TP rank: ``managers/scheduler.py:3999``), which calls :func:`register` and then
applies the registered hooks. What gets registered:

- always, and only in the main process's argument parsing: two ``ServerArgs`` hooks that add
  ``--speculative-disable-batch-threshold`` / ``--speculative-disable-hysteresis`` to SGLang's CLI.
  Without those options they change nothing.
- always, where the installed FastAPI is 0.137 or newer: the mend of SGLang's metrics middleware
  that makes ``/v1/loads`` answer with ``--enable-metrics`` (``server_patch/http_fixes.py``).
- always in SGLang's child processes (unless ``SPECCONSOLE_TRITON_DRAFT_EXTEND_FIX=0``): the mend of triton's CUDA-graph
  metadata for v1's draft extend, whose fixed query stride makes a v1 EAGLE server on triton draft
  from the wrong rows (``server_patch/triton_draft_extend.py``).
- only when the gate was asked for (``SPECCONSOLE_SPEC_GATE`` set, which the CLI hook does
  before SGLang spawns its schedulers): the scheduler and tokenizer-manager hooks.
"""

from __future__ import annotations

import logging
import os
from importlib.metadata import entry_points

from server_patch import compat, contract, http_fixes, options, scheduler_hooks, tokenizer_hooks, triton_draft_extend
from server_patch.contract import HYSTERESIS_KEY, THRESHOLD_KEY

logger = logging.getLogger("server_patch.spec_gate")

PLUGIN_NAME = "spec_gate"
PLUGIN_GROUP = "sglang.srt.plugins"
SERVER_ARGS = "sglang.srt.server_args.ServerArgs"

_cli_registered = False
_runtime_registered = False


def register() -> None:
    """Entry point called by SGLang's ``load_plugins()`` in every process. Idempotent."""
    global _cli_registered
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    if not _cli_registered:
        _cli_registered = True
        HookRegistry.register(f"{SERVER_ARGS}.add_cli_args", after_add_cli_args, HookType.AFTER)
        HookRegistry.register(f"{SERVER_ARGS}.from_cli_args", after_from_cli_args, HookType.AFTER)
        http_fixes.register(HookRegistry, HookType)  # /v1/loads with --enable-metrics on FastAPI >= 0.137
        triton_draft_extend.register(HookRegistry, HookType)  # v1's draft extend on triton CUDA graphs
    if os.environ.get(options.ENV_VAR):
        enable_runtime_hooks()


def runtime_targets():
    """Dotted paths of every hook the gate needs at run time."""
    return [t for t, _, _ in scheduler_hooks.HOOKS + tokenizer_hooks.HOOKS]


def enable_runtime_hooks() -> None:
    """Register and apply the scheduler/tokenizer hooks; exit loudly if any could not be applied.

    ``HookRegistry.apply_hooks`` only logs a target it cannot patch, and ``load_plugins`` only
    logs a plugin that raises; a gate that silently did nothing is worse than no server, so a
    missing target raises ``SystemExit``, which neither of them catches.
    """
    global _runtime_registered
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    if not _runtime_registered:
        _runtime_registered = True
        scheduler_hooks.register(HookRegistry, HookType)
        tokenizer_hooks.register(HookRegistry, HookType)
    HookRegistry.apply_hooks()
    missing = [t for t in runtime_targets() if t not in HookRegistry._patched]
    if missing:
        message = f"spec_gate: could not hook {', '.join(missing)} (SGLang {compat.sglang_version()})"
        logger.error(message)
        raise SystemExit(message)


def require_plugin_visible(environ=os.environ) -> None:
    """Scheduler processes only get the gate through SGLang's plugin loader: refuse if it cannot
    find this entry point, or if ``SGLANG_PLUGINS`` filters it out.

    Raises:
        compat.UnsupportedSetup: with the fix in the message.
    """
    names = {ep.name for ep in entry_points(group=PLUGIN_GROUP)}
    if PLUGIN_NAME not in names:
        raise compat.UnsupportedSetup(
            f"speculation gate refused: the '{PLUGIN_NAME}' entry point of group {PLUGIN_GROUP} is "
            "not installed, so SGLang's scheduler processes would run unpatched. "
            "Install the package (pip install specconsole / pip install -e .)."
        )
    allowed = environ.get("SGLANG_PLUGINS")
    if allowed and PLUGIN_NAME not in {x.strip() for x in allowed.split(",")}:
        raise compat.UnsupportedSetup(
            f"speculation gate refused: SGLANG_PLUGINS={allowed!r} excludes '{PLUGIN_NAME}'"
        )


def after_add_cli_args(result, parser, *args, **kwargs):
    options.add_cli_args(parser)
    return None


def after_from_cli_args(server_args, cls, cli_args, *args, **kwargs):
    """Runs in the main process right after ``ServerArgs.__post_init__``: validate, refuse
    unsupported setups, and publish the config for the scheduler processes."""
    config = options.config_from_namespace(cli_args)
    if config is None:
        return None
    compat.check_sglang_version(compat.sglang_version())
    compat.check_server_args(server_args)
    require_plugin_visible()
    setattr(server_args, THRESHOLD_KEY, contract.wire_threshold(config))
    setattr(server_args, HYSTERESIS_KEY, config.hysteresis)
    options.export_to_env(config)
    enable_runtime_hooks()
    logger.info(
        "spec_gate: enabled threshold=%s hysteresis=%d (decided per decode batch in every scheduler)",
        contract.wire_threshold(config),
        config.hysteresis,
    )
    return None
