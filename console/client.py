"""HTTP client for the server contract in README ("The HTTP + log contract").

Async (httpx.AsyncClient) so polling runs in a Textual async worker without blocking the UI.
Endpoints used: ``GET /health``, ``GET /server_info``, ``GET /v1/loads?include=core,spec``,
``GET /metrics`` (only with ``--enable-metrics``), ``POST /set_internal_state``. Nothing else
about the server is assumed. The requests of each poll are :data:`POLL_REQUESTS`;
:data:`OWN_REQUEST_LINES` is how the server's access log prints them (the log pane hides those
lines), and :attr:`ServerClient.local_addresses` the client addresses they came from.

Errors: every failure to get an answer (connection refused, timeout, HTTP 5xx, not JSON)
raises :class:`ServerUnreachable` with a short human reason; :class:`Backoff` turns a run of
failures into growing poll delays.
"""

from __future__ import annotations

import importlib.util
import json
import re
import socket
import ssl
import sys
from dataclasses import dataclass
from typing import Any

import httpx

from console import fmt
from console.state import BROKEN_JSON_REASON, NO_ANSWER_REASON, NOT_JSON_REASON, GateState, LoadState, MetricsState, ServerSample, SetResult
from server_patch import contract


def _sniffio_absent_fast() -> None:
    """Where ``sniffio`` is not installed, make ``import sniffio`` fail at once.

    httpcore imports it in every request and every response close (to tell asyncio from trio),
    and a module that is not installed is searched for along ``sys.path`` each time: eight failed
    imports per poll, about a tenth of the poll's CPU. A ``None`` in ``sys.modules`` is Python's
    way of saying "not importable": the import raises ``ImportError`` as before, without the search.
    """
    if "sniffio" not in sys.modules and importlib.util.find_spec("sniffio") is None:
        sys.modules["sniffio"] = None  # type: ignore[assignment]


_sniffio_absent_fast()

#: HTTP timeout per request, seconds
DEFAULT_TIMEOUT_S = 5.0

#: each poll's requests, in order: (method, path, query parameters). A request added to the
#: poll goes here, so that its access-log lines are known as the console's own too
POLL_SERVER_INFO = ("GET", "/server_info", None)
POLL_LOADS = ("GET", "/v1/loads", {"include": "core,spec"})
POLL_METRICS = ("GET", "/metrics", None)  # only with --enable-metrics
POLL_REQUESTS = (POLL_SERVER_INFO, POLL_LOADS, POLL_METRICS)
#: local addresses of the client's connections that are remembered (a keep-alive connection
#: keeps one; a reconnect after an outage adds one)
MAX_LOCAL_ADDRESSES = 32


def request_line(method: str, path: str, params: dict[str, str] | None = None) -> str:
    """The request line as uvicorn's access log prints it: httpx's encoding of the query
    (``include=core%2Cspec``), HTTP/1.1 (the client does not speak HTTP/2)."""
    target = httpx.URL(path, params=params).raw_path.decode("ascii")
    return f"{method} {target} HTTP/1.1"


#: the access-log request lines of the console's polls, exactly
OWN_REQUEST_LINES = tuple(request_line(*r) for r in POLL_REQUESTS)


class ServerUnreachable(Exception):
    """The server did not answer usefully (down, slow, auth, or not an SGLang server)."""


def status_reason(code: int, api_key_given: bool = False) -> str:
    """A short human reason for an HTTP error status (auth errors say what to do).

    401/403 say ``pass --api-key`` when no key was given, and that the key was rejected when
    one was.
    """
    if code == 401:
        return "the API key was rejected (HTTP 401)" if api_key_given else "HTTP 401 unauthorized: pass --api-key"
    if code == 403:
        if api_key_given:
            return "the API key was rejected (HTTP 403): this needs the server's --admin-api-key"
        return "HTTP 403 forbidden: pass the server's --admin-api-key as --api-key"
    if code == 404:
        return "HTTP 404: no SGLang server at this URL (another program on this port, or not the server's root URL)"
    if code == 431:
        return ("HTTP 431: request headers too large (is the API key that long?)" if api_key_given
                else "HTTP 431: request headers too large")
    return f"HTTP {code}"


def answer_summary(resp: httpx.Response) -> str:
    """One line for an answer that is not the contract's JSON, e.g. ``HTTP 501 with an HTML page
    (not SGLang's JSON)``: never the page itself (it would flood the panel, toast and log pane)."""
    text = resp.text.strip()
    if "html" in resp.headers.get("content-type", "").lower() or text[:15].lower().startswith(("<!doctype", "<html")):
        body = "an HTML page (not SGLang's JSON)"
    elif not text:
        body = "an empty body"
    else:
        first = " ".join(text.split())
        body = repr(first if len(first) <= 60 else first[:60] + "…") + " (not the expected JSON)"
    return f"HTTP {resp.status_code} with {body}"


def _chain(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in out and len(out) < 8:
        out.append(cur)
        cur = cur.__cause__ or cur.__context__
    return out


_BYTES_REPR = re.compile(r"(?:bytearray\()?b(['\"])(.*?)\1\)?")


def _first_line(exc: BaseException) -> str:
    """The exception's first line, with a ``bytearray(b'...')`` / ``b'...'`` repr (h11 quotes what it
    received so) shown as the text it holds, unprintable bytes as ``?``, at most 60 characters."""
    text = str(exc).strip().splitlines()
    if not text:
        return type(exc).__name__

    def plain(m: "re.Match[str]") -> str:
        raw = re.sub(r"\\x[0-9a-fA-F]{2}|\\[rnt0]", "?", m.group(2))
        return repr(raw[:60] + ("..." if len(raw) > 60 else ""))

    return _BYTES_REPR.sub(plain, text[0])


def connect_reason(exc: BaseException) -> str:
    """Why a connection failed, from the exception chain: refused, TLS, unknown host, other."""
    chain = _chain(exc)
    text = " ".join(str(e) for e in chain)
    if any(isinstance(e, ssl.SSLError) for e in chain) or "SSL" in text or "TLS" in text:
        detail = _first_line(next((e for e in chain if isinstance(e, ssl.SSLError)), exc))
        hint = " (a plain http:// server?)" if "WRONG_VERSION_NUMBER" in text or "wrong version" in text else ""
        return f"TLS error: {detail}{hint}"
    if any(isinstance(e, ConnectionRefusedError) for e in chain) or "refused" in text.lower():
        return "connection refused"
    if any(isinstance(e, socket.gaierror) for e in chain) or "Name or service not known" in text \
            or "nodename nor servname" in text or "getaddrinfo" in text:
        return f"host not found ({_first_line(exc)})"
    return f"cannot connect: {_first_line(exc)}"


def _reason(exc: BaseException, api_key_given: bool = False) -> str:
    if isinstance(exc, httpx.ConnectError):
        return connect_reason(exc)
    if isinstance(exc, httpx.ConnectTimeout):
        return "connect timed out"
    if isinstance(exc, httpx.TimeoutException):  # connected, no answer in time: a busy or hung server
        return NO_ANSWER_REASON
    if isinstance(exc, httpx.HTTPStatusError):
        return status_reason(exc.response.status_code, api_key_given)
    if isinstance(exc, httpx.UnsupportedProtocol):
        return "unsupported URL scheme (use http:// or https://)"
    if isinstance(exc, (httpx.ReadError, httpx.WriteError)):
        detail = f": {_first_line(exc)}" if str(exc).strip() else ""
        return f"protocol error: connection closed without an HTTP answer{detail} (an https:// server?)"
    if isinstance(exc, httpx.ProtocolError):
        first = _first_line(exc)
        if "SSH-" in first:  # an sshd's banner where the status line should be
            return f"protocol error: {first} (an SSH server on this port, not HTTP)"
        return f"protocol error: {first} (not an HTTP server, or an https:// one?)"
    if isinstance(exc, json.JSONDecodeError) and exc.doc.lstrip()[:1] in ("{", "["):
        return BROKEN_JSON_REASON
    if isinstance(exc, ValueError):
        return NOT_JSON_REASON
    return type(exc).__name__ + (f": {exc}" if str(exc) else "")


#: the /metrics series the console reads (name -> MetricsState field); the counter is
#: exposed as ``<name>_total``, and only its ``mode="decode"`` samples count
METRIC_SERIES = {
    "sglang:num_running_reqs": "running_reqs",
    "sglang:num_queue_reqs": "queue_reqs",
    "sglang:gen_throughput": "gen_throughput",
    "sglang:realtime_tokens_total": "decode_tokens_total",
    "sglang:spec_accept_length": "accept_length",
}


def parse_metrics(text: str) -> MetricsState:
    """The console's series of a Prometheus text body (SGLang's ``/metrics``), summed over ranks
    (the accept length averaged). Lines of other series are skipped before parsing (the body is
    ~70 KB); a malformed body gives a MetricsState of None values."""
    from prometheus_client.parser import text_string_to_metric_families

    wanted = tuple(METRIC_SERIES)
    kept = "\n".join(line for line in text.splitlines() if line.startswith(wanted)) + "\n"
    values: dict[str, list[float]] = {}
    try:
        for family in text_string_to_metric_families(kept):
            for sample in family.samples:
                name = METRIC_SERIES.get(sample.name)
                if name is None or (name == "decode_tokens_total" and sample.labels.get("mode") != "decode"):
                    continue
                values.setdefault(name, []).append(float(sample.value))
    except ValueError:
        return MetricsState()

    def total(name: str) -> float | None:
        vals = values.get(name)
        return sum(vals) if vals else None

    running, queue = total("running_reqs"), total("queue_reqs")
    accept = values.get("accept_length")
    return MetricsState(
        running_reqs=int(running) if running is not None else None,
        queue_reqs=int(queue) if queue is not None else None,
        gen_throughput=total("gen_throughput"),
        decode_tokens_total=total("decode_tokens_total"),
        accept_length=sum(accept) / len(accept) if accept else None,
    )


def _first_state(info: dict[str, Any]) -> dict[str, Any]:
    states = info.get("internal_states")
    if isinstance(states, list) and states and isinstance(states[0], dict):
        return states[0]
    return {}


def metrics_enabled(info: dict[str, Any]) -> bool | None:
    """Whether the server runs with ``--enable-metrics`` (its server args in ``/server_info``)."""
    value = _first_state(info).get("enable_metrics", info.get("enable_metrics"))
    return value if isinstance(value, bool) else None


def parse_server_info(info: dict[str, Any], loads: dict[str, Any] | None, metrics: MetricsState | None = None,
                      loads_error: str | None = None) -> ServerSample:
    """Turn ``/server_info`` (+ optional ``/v1/loads`` JSON and ``/metrics``) into a :class:`ServerSample`.

    ``gate`` is None when ``internal_states[0]`` has no ``spec_gate`` (gate not enabled).
    """
    gate = None
    first = _first_state(info)
    if isinstance(first.get("spec_gate"), dict):
        gate = GateState.from_json(first["spec_gate"])
    tput = first.get("last_gen_throughput")
    version = fmt.printable(info["version"]) if isinstance(info.get("version"), str) else None
    if version is None and gate is not None:
        version = gate.sglang_version
    load = LoadState.from_json(loads) if isinstance(loads, dict) else None
    sim = info.get("simulated")
    return ServerSample(
        version=version,
        gate=gate,
        load=load,
        simulated=bool(sim),
        simulated_note=fmt.printable(sim["note"]) if isinstance(sim, dict) and isinstance(sim.get("note"), str) else None,
        metrics=metrics,
        last_gen_throughput=float(tput) if isinstance(tput, (int, float)) and not isinstance(tput, bool) else None,
        metrics_enabled=metrics_enabled(info),
        loads_error=loads_error,
    )


def parse_set_result(data: Any) -> SetResult:
    """Parse the ``/set_internal_state`` answer; raises ValueError when it is not the contract's shape."""
    if not isinstance(data, dict) or not isinstance(data.get("updated"), bool):
        raise ValueError(f"unexpected answer: {str(data)[:200]}")

    def _int(v: Any) -> int | None:
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    reason = data.get("reason")
    return SetResult(updated=data["updated"], reason=fmt.printable(reason) if isinstance(reason, str) else None,
                     **{key: _int(data.get(key)) for key in contract.SET_ANSWER_KEYS[2:]})


def auth_headers(api_key: str | None) -> dict[str, str]:
    """The request headers for SGLang's ``--api-key`` (``Authorization: Bearer <key>``); none
    without a key."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


class ServerClient:
    """Talks to one server.

    Args:
        base_url: e.g. ``http://127.0.0.1:30000`` (trailing slash ignored).
        api_key: sent as ``Authorization: Bearer <key>`` when set (SGLang's --api-key).
        timeout_s: per-request timeout in seconds.
        transport: an httpx transport (tests); None for the network.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key_given = bool(api_key)
        self._client = httpx.AsyncClient(
            base_url=self.base_url, headers=auth_headers(api_key), timeout=timeout_s, transport=transport,
            trust_env=False,
        )
        self._loads_supported = True
        #: client addresses (``host:port``, as uvicorn prints them) of the connections used, oldest first
        self.local_addresses: list[str] = []

    def _note_address(self, resp: httpx.Response) -> None:
        """Remember the local address of the connection that carried ``resp`` (none in tests, nor
        when the server already closed that connection: its socket has no address any more)."""
        stream = resp.extensions.get("network_stream")
        try:
            addr = stream.get_extra_info("client_addr") if stream is not None else None
        except OSError:  # EBADF: a server that answers and closes (http.server, Connection: close)
            return
        if not addr or len(addr) < 2:
            return
        text = f"{addr[0]}:{addr[1]}"  # uvicorn's "%s:%d" % scope["client"]
        if text not in self.local_addresses:
            self.local_addresses = (self.local_addresses + [text])[-MAX_LOCAL_ADDRESSES:]

    async def _get(self, request: tuple[str, str, dict[str, str] | None]) -> httpx.Response:
        method, path, params = request
        resp = await self._client.request(method, path, params=params)
        self._note_address(resp)
        return resp

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._client.aclose()

    async def _get_json(self, request: tuple[str, str, dict[str, str] | None]) -> Any:
        try:
            resp = await self._get(request)
            resp.raise_for_status()
            return resp.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise ServerUnreachable(_reason(exc, self.api_key_given)) from exc

    async def health(self) -> bool:
        """True when ``GET /health`` answers 200."""
        try:
            resp = await self._client.get("/health")
        except httpx.HTTPError:
            return False
        return resp.status_code == 200

    async def poll(self) -> ServerSample:
        """One poll: ``/server_info``, then ``/v1/loads?include=core,spec``, then ``/metrics`` when
        the server runs with ``--enable-metrics``.

        Only ``/server_info`` must answer: a ``/v1/loads`` that fails (SGLang 0.5.12 with
        ``--enable-metrics`` on FastAPI >= 0.137 answers HTTP 500 there) or is missing (404)
        leaves ``load=None`` with the reason in ``loads_error``; a failing ``/metrics`` leaves
        ``metrics=None``.

        Raises:
            ServerUnreachable: ``/server_info`` did not answer with JSON.
        """
        info = await self._get_json(POLL_SERVER_INFO)
        # "HTTP 200: ..." reads as an answer that is not SGLang's (state.answered_not_sglang)
        if not isinstance(info, dict):
            raise ServerUnreachable("HTTP 200: /server_info is not a JSON object (not an SGLang server?)")
        if "internal_states" not in info:  # every SGLang 0.5.x /server_info has it
            raise ServerUnreachable("HTTP 200: /server_info has no internal_states (not an SGLang server?)")
        states = info["internal_states"]
        if not isinstance(states, list) or (states and not isinstance(states[0], dict)):
            # SGLang sends a list of objects; anything else is not "no gate" (a new user's report)
            what = type(states).__name__ if not isinstance(states, list) else f"list of {type(states[0]).__name__}"
            raise ServerUnreachable(f"HTTP 200: /server_info's internal_states is a JSON {what}, "
                                    f"not SGLang's list of objects")
        gate = _first_state(info).get("spec_gate")
        if gate is not None and not isinstance(gate, dict):  # not "no gate": a gate this console cannot read
            raise ServerUnreachable(f"HTTP 200: /server_info's spec_gate is a JSON {type(gate).__name__}, not the "
                                    f"plugin's object (server_patch of another specconsole version?)")
        loads, loads_error = None, None
        if self._loads_supported:
            try:
                resp = await self._get(POLL_LOADS)
                if resp.status_code == 404:
                    self._loads_supported = False
                    loads_error = status_reason(404, self.api_key_given)
                else:
                    resp.raise_for_status()
                    loads = resp.json()
            except (httpx.HTTPError, ValueError) as exc:
                loads_error = _reason(exc, self.api_key_given)
        metrics = None
        if metrics_enabled(info):
            try:
                resp = await self._get(POLL_METRICS)
                resp.raise_for_status()
                metrics = parse_metrics(resp.text)
            except httpx.HTTPError:
                pass
        return parse_server_info(info, loads if isinstance(loads, dict) else None, metrics, loads_error)

    async def set_gate(self, threshold: int | None = None, hysteresis: int | None = None) -> SetResult:
        """``POST /set_internal_state`` with the gate keys given (either or both).

        Returns:
            The server's :class:`SetResult` (``updated`` False with its ``reason`` when rejected).

        Raises:
            ServerUnreachable: no answer, or an answer that is not the contract's shape.
        """
        args: dict[str, int] = {}
        if threshold is not None:
            args[contract.THRESHOLD_KEY] = threshold
        if hysteresis is not None:
            args[contract.HYSTERESIS_KEY] = hysteresis
        try:
            resp = await self._client.post("/set_internal_state", json={"server_args": args})
            self._note_address(resp)
        except httpx.HTTPError as exc:
            raise ServerUnreachable(_reason(exc, self.api_key_given)) from exc
        if resp.status_code in (401, 403):
            raise ServerUnreachable(status_reason(resp.status_code, self.api_key_given))
        try:
            return parse_set_result(resp.json())
        except ValueError as exc:
            raise ServerUnreachable(answer_summary(resp)) from exc


@dataclass
class Backoff:
    """Poll delay after failures: ``interval * 2**(failures-1)``, capped at ``max_s`` seconds.

    ``delay(0)`` is the normal interval.
    """

    interval_s: float = 1.0
    max_s: float = 10.0

    def delay(self, failures: int) -> float:
        """Seconds to wait before the next poll after ``failures`` consecutive failures."""
        if failures <= 0:
            return self.interval_s
        return min(self.max_s, max(self.interval_s, self.interval_s * 2 ** (failures - 1)))


def probe(url: str, timeout_s: float = 0.7) -> bool:
    """Blocking ``GET {url}/health`` (used by the CLI before the UI exists). True on HTTP 200."""
    try:
        return httpx.get(url.rstrip("/") + "/health", timeout=timeout_s, trust_env=False).status_code == 200
    except httpx.HTTPError:
        return False
