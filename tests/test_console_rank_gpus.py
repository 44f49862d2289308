"""The GPU panel shows the server's own GPUs (each TP rank's report), labelled with host, node and
TP rank, and this machine's GPUs only where the server does not report them."""

from __future__ import annotations

from console import gpu_sources
from console import state as st
from console.app import SpecConsoleApp
from console.config import AppConfig
from console.nvml_sim import SimDevice, SimulatedNvml
from console_support import DemoServer, screen_text, wait_for

SIZE = (120, 40)


def _local(n: int) -> SimulatedNvml:
    return SimulatedNvml(devices=[SimDevice(util_pct=11.0) for _ in range(n)])


async def _screen(tmp_path, server_args, local_gpus: int, gate: bool = True) -> tuple[str, st.ConsoleSnapshot]:
    srv = DemoServer(tmp_path, server_args, gate=gate).wait_ready()
    try:
        app = SpecConsoleApp(AppConfig(mode="attach", url=srv.url, interval_s=0.2, handle_signals=False),
                             nvml_module=_local(local_gpus))
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: app.model.sample is not None and app.model.gpus.rows, what="a poll and NVML")
            await pilot.pause(0.3)
            return screen_text(app), app.model.snapshot()
    finally:
        srv.stop()


async def test_two_nodes_show_the_servers_gpus_by_host_and_rank(tmp_path):
    text, snap = await _screen(tmp_path, ["--load", "fixed:8", "--tp-size", "2", "--nnodes", "2"], local_gpus=2)
    rows = snap.gpus.rows
    # rank 0 runs on this machine's GPU 0 (the same UUID: shown once, as the server's); rank 1 on
    # demo-node1; this machine's GPU 1, which the server does not use, is listed after them
    assert [(r.tp_rank, r.node_rank) for r in rows if r.host] == [(0, 0), (1, 1)]
    assert [r.index for r in rows if r.host is None] == [1]
    assert "GPUs · from the server: 2 ranks on 2 hosts + this machine's others" in text
    assert "demo-node1 (node 1)" in text and "TP0" in text and "TP1" in text and "this machine" in text


async def test_a_server_without_the_gate_shows_this_machines_gpus_and_says_so(tmp_path):
    text, _ = await _screen(tmp_path, ["--load", "fixed:8"], local_gpus=1, gate=False)
    assert "GPUs · this machine" in text and "from the server" not in text


def test_the_servers_nvml_error_shows_on_its_row():
    gate = st.GateState.from_json({"ranks": [{"tp_rank": 0, "host": "h", "gpu": {"host": "h", "error": "NVMLError: Unknown"}}]})
    (row,) = gpu_sources.server_rows(gate)
    assert row.error == "NVMLError: Unknown" and row.host == "h"


async def test_demo_with_real_gpus_shows_this_machines_gpus_not_a_simulated_h200(tmp_path):
    """Fresh-user finding: `specconsole demo --gpus real` on a machine without GPUs still showed the
    demo server's simulated "TP0 H200" under "from the server"."""
    from console import cli

    cfg = cli.resolve(["demo", "--gpus", "real", "--log-dir", str(tmp_path)])
    assert "--no-rank-gpus" in cfg.server_command and cfg.nvml == "real"
    assert "--no-rank-gpus" not in cli.resolve(["demo", "--log-dir", str(tmp_path)]).server_command
    text, _ = await _screen(tmp_path, ["--load", "fixed:8", "--no-rank-gpus"], local_gpus=1)
    assert "GPUs · this machine" in text and "from the server" not in text


def test_ranks_outside_the_contract_make_no_gpu_row_and_no_error():
    """Fresh-user find: ``ranks: [{"tp_rank": "z", "gpu": {"util_pct": "lots", "mem_used_mib": -1, "name": null}}, 7]``
    raised StopIteration in the panel title (no host anywhere) and showed a made-up ``0 n/a -0.0 GiB`` row."""
    gate = st.GateState.from_json({"ranks": [{"tp_rank": "z", "gpu": {"util_pct": "lots", "mem_used_mib": -1,
                                                                      "name": None}}, 7]})
    assert gpu_sources.server_rows(gate) == ()
    named = {"name": "NVIDIA H200", "mem_used_mib": -1, "util_pct": 40}
    assert gpu_sources.server_rows(st.GateState.from_json({"ranks": [{"tp_rank": 0, "gpu": named}]})) == ()  # where?
    (row,) = gpu_sources.server_rows(st.GateState.from_json({"ranks": [{"tp_rank": 0, "host": "h", "gpu": named}]}))
    assert row.mem_used_mib is None and row.util_pct == 40.0  # a negative amount is not shown
    panel = st.GpuPanelState(status=st.GPU_OK, message="", rows=(row,), source=st.GPU_FROM_SERVER)
    assert gpu_sources.title(panel) == "GPUs · from the server: 1 rank on h"
    assert gpu_sources.title(st.GpuPanelState(status=st.GPU_OK, message="", rows=(), source=st.GPU_FROM_SERVER)) \
        == "GPUs · from the server: 0 ranks"  # no host at all: no StopIteration

