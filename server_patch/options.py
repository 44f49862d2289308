"""The two server options and how their values reach every SGLang process.

SGLang 0.5.12 parses its CLI once, in the main process, and pickles ``ServerArgs`` into each
scheduler process it spawns. The gate's values travel two ways: as plain attributes on the
``ServerArgs`` object (so ``vars(server_args)`` — and thus ``/server_info`` — shows them) and
as the environment variable ``SPECCONSOLE_SPEC_GATE`` (JSON), which spawned children inherit
and which the plugin reads to decide whether to install its hooks at all.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Optional

from server_patch.contract import (
    AUTO,
    DEFAULT_HYSTERESIS,
    HYSTERESIS_FLAG,
    HYSTERESIS_KEY,
    THRESHOLD_FLAG,
    THRESHOLD_KEY,
    threshold_arg,
    GateConfig,
    GateConfigError,
    parse_threshold,
)

ENV_VAR = "SPECCONSOLE_SPEC_GATE"

#: every switch variable the plugin reads (each module names its own; ``tests/test_architecture``
#: checks that this list has them all); ``bench.gate_correctness`` records the ones set
SWITCH_ENV = (
    "SPECCONSOLE_AUTO_TRACE",  # a file, not a switch: the auto threshold's step record (auto_trace)
    "SPECCONSOLE_AUTO_PREFILL",
    "SPECCONSOLE_OFF_DECODE_KERNEL", "SPECCONSOLE_OFF_DEFERRED_DRAFT_KV", "SPECCONSOLE_OFF_DEFERRED_DRAFT_KV_TOKENS",
    "SPECCONSOLE_OFF_DEFERRED_DRAFT_KV_V1",
    "SPECCONSOLE_HOST_COPY_PINNED", "SPECCONSOLE_KV_RESERVE", "SPECCONSOLE_OFF_DRAFT_KV_ONLY", "SPECCONSOLE_OFF_DRAFT_KV_ONLY_EAGER",
    "SPECCONSOLE_OFF_DRAFT_KV_ONLY_GRAPH", "SPECCONSOLE_OFF_EARLY_SEQ_LENS", "SPECCONSOLE_OFF_FA3_FUSED_VERIFY_METADATA",
    "SPECCONSOLE_OFF_KV_ONLY_LEAN_REPLAY",
    "SPECCONSOLE_OFF_LEAN_DRAFT_EXTEND", "SPECCONSOLE_OFF_LEAN_FUTURE_MAP", "SPECCONSOLE_OFF_LEAN_V1",
    "SPECCONSOLE_OFF_LEAN_V2_VERIFY",
    "SPECCONSOLE_OFF_PLAIN_SAMPLING",
    "SPECCONSOLE_OFF_PREFILL_KV_ONLY", "SPECCONSOLE_TARGET_PREFILL_GRAPH", "SPECCONSOLE_TRITON_DRAFT_EXTEND_FIX",
    "SPECCONSOLE_WARM_SAMPLING",
)


def switch(name: str, default: bool, environ=os.environ) -> bool:
    """A switch variable: ``1`` on, ``0`` off, unset or anything else ``default``."""
    value = environ.get(name)
    return value == "1" if value in ("0", "1") else default


def whole_number(name: str, default: int, lo: int, hi: Optional[int] = None, unit: str = "tokens",
                 environ=os.environ) -> int:
    """A count variable: ``default`` when unset or blank, else a whole number in [lo, hi].

    Raises:
        ValueError: anything else, naming the variable, its value and the range."""
    raw = environ.get(name, "").strip()
    if raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        value = None
    if value is None or value < lo or (hi is not None and value > hi):
        span = f"from {lo} to {hi}" if hi is not None else f">= {lo}"
        raise ValueError(f"{name}={raw!r}: expected a whole number of {unit} {span}")
    return value


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    """Add ``--speculative-disable-batch-threshold`` and ``--speculative-disable-hysteresis``."""
    group = parser.add_argument_group("specconsole speculation gate")
    group.add_argument(
        THRESHOLD_FLAG,
        dest=THRESHOLD_KEY,
        type=threshold_arg,
        default=None,
        metavar="N|auto",
        help="Run EAGLE speculation only while the decode batch size is < N; off at >= N. "
        f"{AUTO!r}: decide per decode batch from the server's own measured step times and accept "
        "length. Absent: no gating (specconsole changes nothing).",
    )
    group.add_argument(
        HYSTERESIS_FLAG,
        dest=HYSTERESIS_KEY,
        type=int,
        default=None,
        metavar="H",
        help=f"Once off, resume speculation only when the batch size is < N - H (default {DEFAULT_HYSTERESIS}).",
    )


def config_from_namespace(ns: argparse.Namespace) -> Optional[GateConfig]:
    """The GateConfig asked for on the command line, or None when the threshold is absent.

    Raises:
        GateConfigError: invalid values, or a hysteresis without a threshold.
    """
    threshold = getattr(ns, THRESHOLD_KEY, None)
    hysteresis = getattr(ns, HYSTERESIS_KEY, None)
    if threshold is None:
        if hysteresis is not None:
            raise GateConfigError(f"{HYSTERESIS_FLAG} needs {THRESHOLD_FLAG}")
        return None
    return GateConfig(parse_threshold(threshold),
                      DEFAULT_HYSTERESIS if hysteresis is None else hysteresis).validate()


def export_to_env(config: GateConfig, environ=os.environ) -> None:
    """Publish the config for child processes (they inherit the environment)."""
    threshold = AUTO if config.auto else config.threshold
    environ[ENV_VAR] = json.dumps({"threshold": threshold, "hysteresis": config.hysteresis})


def config_from_env(environ=os.environ) -> Optional[GateConfig]:
    """The config published by :func:`export_to_env`, or None when the gate is not enabled.

    Raises:
        GateConfigError: the variable is set but malformed.
    """
    raw = environ.get(ENV_VAR)
    if not raw:
        return None
    try:
        data = json.loads(raw)
        threshold = data["threshold"] if data["threshold"] == AUTO else int(data["threshold"])
        return GateConfig(parse_threshold(threshold), int(data.get("hysteresis", DEFAULT_HYSTERESIS))).validate()
    except (ValueError, KeyError, TypeError) as exc:
        raise GateConfigError(f"{ENV_VAR}={raw!r} is malformed: {exc}") from exc
