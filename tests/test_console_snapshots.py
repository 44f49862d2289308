"""Snapshot tests (pytest-textual-snapshot) of the main screen with frozen, deterministic data.

The app runs without any data source (no HTTP, NVML or log polling); the test feeds the model
a fixed series of samples, GPU reads and log lines, so every run renders the same screen.
Update after an intended change with ``pytest tests/test_console_snapshots.py --snapshot-update``
and look at the SVGs in ``tests/__snapshots__/test_console_snapshots/``.
"""

from __future__ import annotations

import pytest

from console import logparse
from console import state as st
from console.app import SpecConsoleApp
from console.client import parse_server_info
from console.config import AppConfig
from console.nvml import NvmlReader
from console.nvml_sim import SimDevice, SimulatedNvml
from console.widgets.log_view import LogView

LOG = [
    "[2026-11-30 12:00:00] Spec v2 is enabled by default for eagle/eagle3/standalone speculative decoding.",
    "[2026-11-30 12:00:04 TP0] Load weight begin. avail mem=139.21 GB",
    "[2026-11-30 12:00:19 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=22.10 GB",
    "[2026-11-30 12:00:41 TP0] spec_gate: worker=EAGLEWorkerV2 spec=v2 overlap=on threshold=32 hysteresis=4",
    "[2026-11-30 12:00:42] The server is fired up and ready to roll!",
    "[2026-11-30 12:01:10 TP0] Decode batch, #running-req: 12, #token: 4608, token usage: 0.05, accept len: 2.93, "
    "accept rate: 0.64, cuda graph: True, gen throughput (token/s): 2142.00, #queue-req: 0",
    "[2026-11-30 12:01:31 TP0] spec_gate: speculation off (batch 37 >= 32)",
    "[2026-11-30 12:01:40 TP0] spec_gate: rejected {'speculative_disable_hysteresis': 40}: hysteresis 40 must be < threshold 32",
    "[2026-11-30 12:01:52 TP0] spec_gate: speculation on (batch 20 < 28)",
    "[2026-11-30 12:02:03 TP0] WARNING: request 17 aborted by client",
    "[2026-11-30 12:02:05 TP0] Decode batch, #running-req: 21, #token: 8064, token usage: 0.08, accept len: 2.94, "
    "accept rate: 0.65, cuda graph: True, gen throughput (token/s): 3210.00, #queue-req: 0",
]
BATCHES = [1, 2, 4, 8, 12, 18, 24, 30, 37, 44, 52, 60, 64, 64, 62, 55, 46, 37, 30, 26, 22, 20, 21] * 3


def _gate(bs: int, spec_enabled: bool, poll: int = 0) -> dict:
    """spec_gate of a busy server (its decode steps advance by 50 per poll)."""
    return {
        "worker_class": "EAGLEWorkerV2", "spec_version": "v2", "overlap": True, "sglang_version": "0.5.12",
        "speculative_algorithm": "EAGLE3", "topk": 1, "num_steps": 3, "num_draft_tokens": 4,
        "spec_enabled": spec_enabled, "threshold": 32, "hysteresis": 4, "max_running_requests": 96,
        "cuda_graph_max_bs": 96, "last_decode_batch_size": bs, "decode_steps_on": 81234 + 50 * poll, "decode_steps_off": 40321,
        "switches": 6, "last_switch": {"step": 120111, "direction": "on", "batch_size": 20},
        "accept_length_recent": 2.94, "off_cuda_graph": True, "off_steps_cuda_graph": 40321, "tp_rank": 0,
        "tp_size": 2, "ranks": [
            {"tp_rank": r, "spec_enabled": spec_enabled, "threshold": 32, "hysteresis": 4, "switches": 6,
             "decode_steps_on": 81234, "decode_steps_off": 40321} for r in (0, 1)
        ],
    }


class FrozenApp(SpecConsoleApp):
    """The console with its data sources switched off: the test feeds the model."""

    def start_session(self) -> None:  # no HTTP, no log follower, no server child
        pass

    def start_gpu_reads(self) -> None:  # no NVML polling
        pass

    def wall_clock(self) -> str:  # no clock text in snapshots
        return "12:00:00"


def frozen_app(theme: str = "dark") -> FrozenApp:
    cfg = AppConfig(mode="attach", url="http://127.0.0.1:30000", interval_s=1.0, theme=theme, handle_signals=False,
                    log_path=None)
    app = FrozenApp(cfg)
    app.model.clock = lambda: 1000.0
    app.model.log_path = "/var/log/sglang/server.log"
    return app


def feed(app: FrozenApp) -> None:
    m = app.model
    for line in LOG:
        m.on_log_line(line)
    spec = True
    for poll, bs in enumerate(BATCHES):  # follow the gate rule so the states are consistent
        if spec and bs >= 32:
            spec = False
        elif not spec and bs < 28:
            spec = True
        loads = {"loads": [{"dp_rank": 0, "num_running_reqs": bs, "num_waiting_reqs": 0,
                            "gen_throughput": 3210.0, "max_running_requests": 96, "token_usage": 0.08,
                            "speculative": {"accept_length": 2.94, "accept_rate": 0.65}}]}
        m.on_sample(parse_server_info({"version": "0.5.12", "internal_states": [{"spec_gate": _gate(bs, spec, poll)}]}, loads))
    fake = SimulatedNvml([
        SimDevice(util_pct=0.0, temp_c=54, power_w=412),
        SimDevice(util_pct=0.0, temp_c=83, power_w=0, unsupported={"power", "power_limit"}),
    ])
    reader = NvmlReader(fake)
    reader.simulated = False  # render it like a real GPU
    fake.driver_version = "580.159.04"
    for i in range(40):
        fake.devices[0].util_pct = float((i * 7) % 100)
        fake.devices[1].util_pct = float((i * 3) % 100)
        m.on_gpus(reader.read())
    m.set_message("threshold 31 -> 32 confirmed by spec_gate", "ok")
    app.main_screen.query_one(LogView).add_lines([(logparse.classify(x), x) for x in LOG])
    app.publish()


async def _run_before(pilot) -> None:
    await pilot.pause()
    feed(pilot.app)
    await pilot.pause()


def test_main_screen_80x24(snap_compare):
    assert snap_compare(frozen_app(), terminal_size=(80, 24), run_before=_run_before)


def test_main_screen_160x50(snap_compare):
    assert snap_compare(frozen_app(), terminal_size=(160, 50), run_before=_run_before)


def test_main_screen_light_80x24(snap_compare):
    assert snap_compare(frozen_app("light"), terminal_size=(80, 24), run_before=_run_before)


def test_main_screen_ansi_80x24(snap_compare):
    assert snap_compare(frozen_app("ansi"), terminal_size=(80, 24), run_before=_run_before)


def test_alarms_80x24(snap_compare):
    """Worker mismatch, server unreachable, NVML driver/library mismatch, all at once."""

    async def run_before(pilot) -> None:
        app = pilot.app
        await pilot.pause()
        feed(app)
        m = app.model
        m.facts.family = "v1"  # the startup line said Spec v1, the live object is EAGLEWorkerV2
        m.on_failure("connection refused")
        m.clock = lambda: 1012.0
        m.on_gpus(st.GpuPanelState(status=st.GPU_DRIVER_MISMATCH,
                                   message="driver/library version mismatch: driver updated without reboot?"))
        m.set_message(None)
        app.publish()
        await pilot.pause()

    assert snap_compare(frozen_app(), terminal_size=(80, 24), run_before=run_before)


async def _screen_80x24(setup) -> str:
    from console_support import screen_text

    app = frozen_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        feed(app)
        setup(app.model)
        app.publish()
        await pilot.pause()
        await pilot.pause(0.05)
        return screen_text(app)


def _pending(m) -> None:
    m.request_change(33, None)
    m.request_change(None, 2)


def _down(m) -> None:
    m.on_failure("HTTP 401 unauthorized: pass --api-key")
    m.clock = lambda: 1012.0


def _thrash(m) -> None:
    m.switch_samples.clear()
    m.switch_samples.extend([(940.0, 0), (1000.0, 45)])


def _held_off(m) -> None:
    gate = {**_gate(30, False), "last_decode_batch_size": 130, "cuda_graph_max_bs": 96}
    loads = {"loads": [{"num_running_reqs": 10_255, "num_waiting_reqs": 10_255, "gen_throughput": 11_599.0,
                        "max_running_requests": 96}]}
    m.on_sample(parse_server_info({"version": "0.5.12", "internal_states": [{"spec_gate": gate}]}, loads))


@pytest.mark.parametrize("setup", [lambda m: None, _pending, _down, _thrash, _held_off],
                         ids=["normal", "pending", "down-401", "thrash", "big-numbers"])
async def test_nothing_is_cut_off_at_80x24(setup):
    """Every line fits: no ellipsis anywhere on the main screen at 80x24 (log lines scroll sideways)."""
    text = await _screen_80x24(setup)
    lines = text.splitlines()
    assert len(lines) == 24 and all(len(line) <= 80 for line in lines)
    assert "…" not in text, text
    assert "every 1 s" in text
    if setup is _pending:
        assert "threshold 32 req → 33 pending" in text and "hysteresis 4 req → 2 pending" in text
    if setup is _down:
        assert "HTTP 401 unauthorized: pass --api-key" in text and "Load · requests · stale" in text
    if setup is _thrash:
        assert "switches 6 (45/min: thrashing)" in text
    if setup is _held_off:
        assert "running 10,255  queue 10,255" in text and "11,599 tok/s" in text  # wrapped, not cut
        assert "decode batch 130 >= threshold 32" in text


async def test_filters_and_threshold_stay_visible_at_80x24():
    """Item 7: the search/include/exclude state is never cut off, and N / H stay next to SPEC ON
    when the Speculation details are scrolled to their end."""
    from console_support import screen_text

    app = frozen_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        feed(app)
        await pilot.pause()
        view = app.main_screen.query_one(LogView)
        view.include, view.exclude, view.search = "spec_gate|console", "worker=", "speculation"
        app.main_screen.query_one("#spec-scroll").scroll_end(animate=False)
        await pilot.pause()
        await pilot.pause(0.05)
        text = screen_text(app)
        assert "only: spec_gate|console · hide: worker= · search: speculation (2 matches)" in text
        assert "…" not in text
        assert "SPEC ON   N 32 · H 4" in text
        assert "threshold 32 req" not in text  # the details row scrolled away, N and H did not
