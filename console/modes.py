"""The console's session kinds as :class:`console.config.AppConfig` values: the demo (the simulated
server on a free port) and launch (SGLang with the gate, or ``$SPECCONSOLE_SERVER_CMD``)."""

from __future__ import annotations

import os
import socket
import time
from dataclasses import replace
from pathlib import Path

from console.config import AppConfig, api_key_from_server_args, url_from_server_args
from console.process import default_server_command, demo_server_command
from server_patch import contract

#: the demo server's gate (threshold and hysteresis, req): the load it simulates crosses both
DEMO_THRESHOLD, DEMO_HYSTERESIS = 32, 4


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _log_file(log_dir: Path, stem: str) -> Path:
    return log_dir / f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"


def demo_config(base: AppConfig, port: int | None = None, extra: list[str] | None = None) -> AppConfig:
    """The demo session: the simulated server on ``port`` (default: free), threshold 32, hysteresis 4.

    ``extra`` arguments go to ``python -m console.demo_server`` after the defaults (so they win).
    """
    port = port or free_port()
    extra = list(extra if extra is not None else base.demo_args)
    log_path = _log_file(base.log_dir, "demo")
    server_args = [
        "--port", str(port),
        contract.THRESHOLD_FLAG, str(DEMO_THRESHOLD),
        contract.HYSTERESIS_FLAG, str(DEMO_HYSTERESIS),
        *extra,
    ]
    return replace(
        base, mode="demo", url=url_from_server_args(server_args), log_path=log_path,
        server_command=demo_server_command() + server_args,
        nvml="sim" if base.nvml != "real" else "real", api_key=api_key_from_server_args(server_args),
    )


def launch_config(base: AppConfig, server_args: list[str]) -> AppConfig:
    """The launch session: ``python -m server_patch.launch_server <server_args>`` (or $SPECCONSOLE_SERVER_CMD)."""
    return replace(
        base,
        mode="launch",
        url=url_from_server_args(server_args),
        api_key=api_key_from_server_args(server_args),
        log_path=_log_file(base.log_dir, "server"),
        server_command=default_server_command() + list(server_args),
    )
