"""Helpers shared by the console tests (imported by tests/test_console_*.py)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import httpx

from console.config import AppConfig

#: fast demo: short startup, frequent log lines
FAST_DEMO = ["--startup-seconds", "0.2", "--log-interval", "0.3", "--jitter", "0"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def demo_cfg(tmp_path: Path, extra: list[str] | None = None, **overrides: Any) -> AppConfig:
    """A demo-mode AppConfig with a fast simulated server and fast polling, logs under tmp_path."""
    from console.modes import demo_config

    base = AppConfig(log_dir=tmp_path / "logs", interval_s=0.2, handle_signals=False, stop_timeout_s=3.0)
    cfg = demo_config(base, extra=FAST_DEMO + list(extra or []))
    for k, v in overrides.items():
        setattr(cfg, k, v)
    return cfg


async def wait_for(pilot: Any, cond: Callable[[], bool], timeout: float = 30.0, what: str = "condition") -> None:
    """Poll ``cond`` every 50 ms (letting the app run) until true; fail after ``timeout`` seconds (a
    deadline, not a measurement: 10 s timed out on a 2-core machine under another test run's load)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        await pilot.pause(0.05)
    assert cond(), f"timed out after {timeout} s waiting for {what}"


def screen_text(app: Any) -> str:
    """The app's current screen as plain text (one line per terminal row)."""
    strips = app.screen._compositor.render_strips()
    return "\n".join("".join(seg.text for seg in strip) for strip in strips)


class DemoServer:
    """``python -m console.demo_server`` as a child process (for attach-mode and contract tests)."""

    def __init__(self, tmp_path: Path, args: list[str] | None = None, gate: bool = True, port: int | None = None) -> None:
        self.port = port or free_port()
        self.log = tmp_path / f"demo-{self.port}.log"
        cmd = [sys.executable, "-m", "console.demo_server", "--port", str(self.port), "--log", str(self.log), *FAST_DEMO]
        if gate:
            cmd += ["--speculative-disable-batch-threshold", "32", "--speculative-disable-hysteresis", "4"]
        cmd += list(args or [])
        self.proc = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.url = f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout: float = 15.0) -> "DemoServer":
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/health", timeout=0.5).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise AssertionError("demo server did not become ready")

    def get(self, path: str) -> Any:
        return httpx.get(self.url + path, timeout=2).json()

    def post(self, body: Any) -> Any:
        return httpx.post(self.url + "/set_internal_state", json=body, timeout=2).json()

    def stop(self) -> None:
        try:
            os.killpg(self.proc.pid, 9)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=5)


def notifications(app: Any) -> list[str]:
    """Messages of the app's toast notifications that are still shown."""
    return [n.message for n in app._notifications]
