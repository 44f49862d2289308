"""Which GPUs the GPU panel shows: the server's own (each TP rank reports the GPU it runs on,
read with NVML in its scheduler: ``spec_gate.ranks[i].gpu``), then this machine's other GPUs.

A console attached from another machine, or to a server spread over nodes, sees the server's
GPUs only this way; this machine's NVML (:mod:`console.nvml`) adds the GPUs here that the server
does not report (told apart by UUID), so a GPU is never shown twice and this machine's GPUs are
never shown as if they were the server's. Without a report (a server without the gate, or one
that predates the report) the panel shows this machine's GPUs and says so.
"""

from __future__ import annotations

from console import state as st


def short_name(name: str | None) -> str | None:
    """'NVIDIA H200' -> 'H200'; keeps the rest as is."""
    if not name:
        return name
    for prefix in ("NVIDIA ", "Tesla "):
        if name.startswith(prefix):
            name = name[len(prefix):]
    return name


def row_key(row: st.GpuRow) -> str:
    """A row's identity across reads (its utilization history follows it)."""
    if row.uuid:
        return row.uuid
    if row.host is not None:
        return f"{row.host}:TP{row.tp_rank}"
    return f"local:{row.index}"


def server_rows(gate: st.GateState | None) -> tuple[st.GpuRow, ...]:
    """The GPUs the server's TP ranks report, in rank order (empty when none reports one)."""
    if gate is None:
        return ()
    rows = []
    for r in gate.ranks:
        g = r.gpu
        if g is None or not (g.host or r.host) or not (g.uuid or g.name or g.error or g.gpu_id is not None
                                                        or g.nvml_index is not None):
            continue  # nothing says where or which GPU it is (a report outside the contract): no made-up row
        rows.append(st.GpuRow(
            index=g.nvml_index if g.nvml_index is not None else (g.gpu_id or 0), name=short_name(g.name),
            util_pct=g.util_pct, mem_used_mib=g.mem_used_mib, mem_total_mib=g.mem_total_mib, temp_c=g.temp_c,
            power_w=g.power_w, power_limit_w=g.power_limit_w, sm_clock_mhz=g.sm_clock_mhz, uuid=g.uuid,
            host=g.host or r.host, node_rank=g.node_rank if g.node_rank is not None else r.node_rank,
            tp_rank=r.tp_rank, error=g.error, lost=bool(g.error and "lost" in g.error.lower()),
        ))
    return tuple(sorted(rows, key=lambda x: (x.node_rank or 0, x.tp_rank or 0)))


def combine(local: st.GpuPanelState, gate: st.GateState | None) -> st.GpuPanelState:
    """The panel: the server's GPUs, then this machine's GPUs the server does not report."""
    served = server_rows(gate)
    if not served:
        return local
    seen = {r.uuid for r in served if r.uuid}
    extra = tuple(r for r in local.rows if not r.uuid or r.uuid not in seen) if local.status == st.GPU_OK else ()
    if extra and not any(r.uuid for r in local.rows):
        extra = ()  # this machine's GPUs without UUIDs cannot be told apart from the server's: not shown
    return st.GpuPanelState(
        status=st.GPU_OK, message="", driver_version=local.driver_version, rows=served + extra,
        simulated=local.simulated, source=st.GPU_FROM_BOTH if extra else st.GPU_FROM_SERVER,
    )


def title(panel: st.GpuPanelState) -> str:
    """The panel title: ``GPUs · from the server: 2 ranks on 2 hosts`` / ``GPUs · this machine``."""
    if panel.source == st.GPU_FROM_LOCAL:
        base = "GPUs · this machine"
        if panel.simulated:
            return base + " · simulated (demo)"
        return base + (f" · driver {panel.driver_version}" if panel.driver_version else "")
    served = [r for r in panel.rows if r.host is not None]
    hosts = {r.host for r in served}
    where = f"{len(served)} rank{'s' if len(served) != 1 else ''}"
    if len(hosts) > 1:
        where += f" on {len(hosts)} hosts"
    elif hosts:
        where += f" on {next(iter(hosts))}"
    text = f"GPUs · from the server: {where}"
    if panel.source == st.GPU_FROM_BOTH:
        text += " + this machine's others"
    return text
