"""Several servers at once, without a UI: the server list's rows, the focus, each server's log
lines kept for when it gets the focus, and SGLang's router (its workers instead of itself).

``specconsole attach URL URL ...`` (or ``[[servers]]`` in the config file) runs one
:class:`console.session.ConsoleSession` per server; the app (:mod:`console.multi_app`) shows
the focused one in the panels and every one as a row (:func:`server_row`).

SGLang's router (``sglang-router``) lists its workers at ``GET /workers`` from 0.2 on
(``{"workers": [{"url": "http://worker:port", "is_healthy": true, ...}], "total": N}``; 0.2.4 and
0.3.2 recorded in ``tests/fixtures/sglang-router/``, where ``/list_workers`` is 404) and at
``GET /list_workers`` before (``{"urls": [...]}``, 0.1.9). A URL that answers either is replaced
by its workers (:func:`expand_routers`); any other answer (an SGLang server says 404 to both)
leaves it a server.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace
from typing import Any, Iterable

from console import fmt
from console.client import auth_headers
from console import state as st
from console.config import AppConfig, ConfigError, ServerTarget, normalize_url
from server_patch import contract

#: the router's endpoints that list its workers: sglang-router >= 0.2 (``{"workers": [{"url": ...}]}``),
#: then < 0.2 (``{"urls": [...]}``), asked in this order
WORKERS, LIST_WORKERS = "/workers", "/list_workers"
#: the access-log request lines of :func:`router_workers`' probes (an SGLang server answers 404)
ROUTER_PROBE_LINES = tuple(f"GET {path} HTTP/1.1" for path in (WORKERS, LIST_WORKERS))
#: seconds to wait for a router's answer at start (a server that does not answer stays a row)
ROUTER_TIMEOUT_S = 1.5


def short_url(url: str) -> str:
    """``url`` without ``http://`` (``https://`` stays: it says something)."""
    return url.removeprefix("http://")


@dataclass(frozen=True)
class ServerRow:
    """One row of the server list (every cell already text; ``n/a`` for unknown)."""

    url: str
    connected: str
    spec: str
    n_h: str
    batch: str
    tok_s: str
    accept: str
    worker: str


#: the server list's column heads, in row order
HEADERS = ServerRow("server · [ ] · T", "conn", "SPEC", "N·H", "batch", "tok/s", "accept", "worker")


def server_row(s: st.ConsoleSnapshot) -> ServerRow:
    """The server list row for one server's snapshot."""
    c = s.connection
    if c.reachable is True:
        connected = "ok"
    elif c.reachable is False:
        connected = "DOWN"
    else:
        connected = "…"
    g = s.gate
    spec = "n/a"
    n_h = "n/a"
    accept = None
    if g is not None and not s.stale:
        spec = {True: "ON", False: "OFF"}.get(g.spec_enabled, "?")
        n = "auto" if g.mode == contract.MODE_AUTO else fmt.num(g.threshold)
        n_h = f"{n}·{fmt.num(g.hysteresis)}"
        p = s.pending
        if p is not None and (p.threshold is not None or p.hysteresis is not None):
            pn = p.threshold if p.threshold is not None else n
            ph = p.hysteresis if p.hysteresis is not None else g.hysteresis
            n_h += f"→{pn}·{fmt.num(ph)}"
        accept = g.accept_length_recent
    elif s.sample_seen and not s.stale:
        spec = "none"
    if accept is None and s.load is not None and not s.stale:
        accept = s.load.accept_length
    tput = s.figures.throughput.value if not s.stale else None
    batch = s.decode_batch if not s.stale else None
    worker = (g.worker_class if g is not None else None) or s.worker.live_class or "n/a"
    return ServerRow(
        url=short_url(s.url),
        connected=connected,
        spec=spec,
        n_h=n_h,
        batch=fmt.num(batch),
        tok_s=fmt.num(None if tput is None else round(tput)),
        accept=fmt.num(accept, digits=2) + ("!" if contract.accept_length_problem(
            accept, g.num_steps if g is not None else None) else ""),
        worker=worker,
    )


class ServerFocus:
    """Which of ``count`` servers is in focus (moves wrap around)."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.index = 0

    def move(self, delta: int) -> int:
        """Move the focus by ``delta`` rows (wrapping); returns the new index."""
        if self.count:
            self.index = (self.index + delta) % self.count
        return self.index


class LogBuffer:
    """What the log pane showed for one server, to show again when it gets the focus back:
    ``(lines, numbers, file_id, total)`` batches in order, at most about ``max_lines`` lines."""

    def __init__(self, max_lines: int = 20_000) -> None:
        self.max_lines = max_lines
        self.batches: deque[tuple[tuple, tuple, int | None, int | None]] = deque()
        self.lines = 0

    def add(self, lines: Iterable, numbers: Iterable = (), file_id: int | None = None,
            total: int | None = None) -> None:
        """Keep one batch (the arguments of :meth:`console.widgets.log_view.LogView.add_lines`)."""
        batch = (tuple(lines), tuple(numbers), file_id, total)
        self.batches.append(batch)
        self.lines += len(batch[0])
        while self.lines > self.max_lines and len(self.batches) > 1:
            self.lines -= len(self.batches.popleft()[0])


    def runs(self) -> list[tuple[list, list, int | None, int | None]]:
        """The batches merged into as few ``add_lines`` calls as keep their meaning: a new
        run where another file's lines begin (console lines join any run, without numbers)."""
        out: list[tuple[list, list, int | None, int | None]] = []
        for lines, numbers, file_id, total in self.batches:
            if not out or (file_id is not None and out[-1][2] is not None and file_id != out[-1][2]):
                out.append(([], [], file_id, total))
            run_lines, run_numbers, run_file, run_total = out[-1]
            run_numbers += [None] * (len(run_lines) - len(run_numbers))
            run_lines += lines
            run_numbers += list(numbers[: len(lines)])
            out[-1] = (run_lines, run_numbers, run_file if file_id is None else file_id,
                       run_total if total is None else total)
        return out


class SharedGpus:
    """An NVML reader for the second and later servers: this machine's GPUs are read once, by
    the first server's session; the others show that read (``read``/``close`` as
    :class:`console.nvml.NvmlReader`)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.simulated = False

    def read(self) -> st.GpuPanelState:
        """The first server's latest NVML read."""
        return self.model.gpus

    def close(self) -> None:
        """Nothing to close (the first session owns NVML)."""


class WorkerList(list):
    """A router's worker URLs (a list of ``str``), and in ``left_out`` the entries of its answer
    that are not URLs the console can watch (shown as they were sent, e.g. ``'ftp://h:1'``, ``None``)."""

    def __init__(self, urls: list[str], left_out: list[str]) -> None:
        super().__init__(urls)
        self.left_out = left_out


def router_workers(url: str, api_key: str | None = None, timeout_s: float = ROUTER_TIMEOUT_S,
                   transport: Any = None) -> WorkerList | None:
    """The worker URLs of SGLang's router at ``url`` (``GET /workers``, else ``GET /list_workers``:
    see the module docstring), or None when ``url`` answers neither so (a server, or nothing there).
    Entries that are not URLs are left out (:attr:`WorkerList.left_out` says which); unhealthy
    workers stay (they show as DOWN rows)."""
    import httpx

    headers = auth_headers(api_key)
    try:
        with httpx.Client(timeout=timeout_s, headers=headers, trust_env=False, transport=transport) as client:
            for path in (WORKERS, LIST_WORKERS):
                resp = client.get(url + path)
                entries = _worker_entries(resp.json()) if resp.status_code == 200 else None
                if entries is not None:
                    break
    except (httpx.HTTPError, ValueError):
        return None
    if entries is None:
        return None
    workers, left_out = [], []
    for entry in entries:
        try:
            if not isinstance(entry, str):
                raise ConfigError("not a string")
            worker = normalize_url(entry)
            if worker == url:
                raise ConfigError("the router itself")
            workers.append(worker)
        except ConfigError:
            left_out.append(repr(entry)[:80])
    return WorkerList(workers, left_out)


def _worker_entries(body: Any) -> list[Any] | None:
    """The worker entries (URL strings, or whatever stands in their place) of a ``/workers`` or
    ``/list_workers`` answer, or None for a body of another shape (not a router)."""
    if not isinstance(body, dict):
        return None
    if isinstance(body.get("workers"), list):
        return [w.get("url") if isinstance(w, dict) else w for w in body["workers"]]
    urls = body.get("urls")
    return urls if isinstance(urls, list) else None


def _listed(items: list[str], n: int) -> str:
    """The first ``n`` of ``items``, comma-separated, `` ...`` after them when there are more."""
    return ", ".join(items[:n]) + (" ..." if len(items) > n else "")


def expand_routers(cfg: AppConfig, lookup=router_workers) -> AppConfig:
    """Attach mode: every URL that is SGLang's router replaced by its workers (each worker once;
    a router without workers stays a row of its own). One server left: the plain single-server
    config. ``lookup(url, api_key)`` is :func:`router_workers` (tests give another)."""
    targets = cfg.servers or (ServerTarget(cfg.url, cfg.log_path, cfg.api_key),)
    out: list[ServerTarget] = []
    notes: list[str] = list(cfg.notes)
    for t in targets:
        workers = lookup(t.url, t.api_key)
        if not workers:
            if workers is not None:
                left_out = getattr(workers, "left_out", [])
                notes.append(f"{t.url} is SGLang's router but lists no workers"
                             + (f" the console can watch (left out: {', '.join(left_out[:5])})" if left_out else "")
                             + ": shown as a server")
            out.append(t)
            continue
        notes.append(f"{t.url} is SGLang's router: watching its {len(workers)} worker(s) "
                     f"{_listed([short_url(w) for w in workers], 8)}"
                     + (" (the router's --log is not a worker's: no log)" if t.log_path else ""))
        left_out = getattr(workers, "left_out", [])
        if left_out:
            notes.append(f"{t.url} listed {len(left_out)} worker(s) the console cannot watch (not an http(s) "
                         f"URL): {_listed(left_out, 5)}")
        out += [ServerTarget(w, None, t.api_key) for w in workers]
    unique: list[ServerTarget] = []
    where: dict[str, int] = {}
    for t in out:
        if t.url in where:
            notes.append(f"{t.url} is listed twice (a router's worker and a URL given): shown once")
            kept = unique[where[t.url]]
            if kept.log_path is None and t.log_path is not None:  # the URL given with its --log wins
                unique[where[t.url]] = replace(kept, log_path=t.log_path)
            continue
        where[t.url] = len(unique)
        unique.append(t)
    if [t.url for t in unique] == [t.url for t in targets]:
        return replace(cfg, notes=tuple(notes))  # nothing was a router
    first = unique[0]
    return replace(cfg, url=first.url, log_path=first.log_path, api_key=first.api_key,
                   servers=tuple(unique) if len(unique) > 1 else (), notes=tuple(notes))
