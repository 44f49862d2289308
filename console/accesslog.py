"""Uvicorn access-log lines, and which of them are the console's own polls.

SGLang writes one line per HTTP request (``utils/common.py`` ``set_uvicorn_logging_configs``)::

    [2026-12-01 20:00:39] INFO:     127.0.0.1:44022 - "GET /v1/loads?include=core%2Cspec HTTP/1.1" 200 OK

so a console polling once a second adds two lines a second to the log it shows. A line is the
console's own when its request line is exactly one the console sends
(:data:`console.client.OWN_REQUEST_LINES`), it was answered without an error (a failing poll
stays visible), and it came from an address the console's client used -- once the log has shown
one of those: before that (the server may see the console through NAT or a proxy) the exact
request line alone decides. The console's one-off probes that a server answers 404 by design
(:data:`console.servers.ROUTER_PROBE_LINES`: is this URL SGLang's router?) are its own when
answered 404, from any address (another connection sent them). Pure: no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

_ACCESS = re.compile(
    r'^(?:\[[^\]]*\]\s*)?INFO:\s+(?P<client>\S+) - "(?P<request>[^"]*)" (?P<status>\d{3})\b'
)


@dataclass(frozen=True)
class AccessLine:
    """One access-log line: client ``host:port`` as uvicorn prints it, request line, HTTP status."""

    client: str
    request: str
    status: int


def access_line(line: str) -> AccessLine | None:
    """Parse a uvicorn access-log line (with or without SGLang's ``[timestamp]``), else None."""
    m = _ACCESS.match(line)
    if m is None:
        return None
    return AccessLine(m.group("client"), m.group("request"), int(m.group("status")))


@dataclass(frozen=True)
class OwnRequests:
    """Tells the console's own poll lines (a frozen snapshot: safe to use from a search thread).

    ``request_lines``: the exact request lines the console sends; ``addresses``: the client
    addresses (``host:port``) its lines must come from, empty for "any".
    """

    request_lines: frozenset[str]
    addresses: frozenset[str] = frozenset()
    #: request lines of one-off probes whose 404 is the expected answer
    probe_lines: frozenset[str] = frozenset()

    def matches(self, line: str) -> bool:
        """``line`` is an access line of one of the console's own successful polls (or a probe
        answered 404)."""
        a = access_line(line)
        return a is not None and self._own(a)

    def _own(self, a: AccessLine) -> bool:
        if a.request in self.probe_lines and a.status == 404:
            return True
        if a.request not in self.request_lines or a.status >= 400:
            return False
        return not self.addresses or a.client in self.addresses


class OwnRequestTracker:
    """Decides, line by line in file order, which lines are the console's own polls.

    Args:
        request_lines: the exact request lines the console sends.
        probe_lines: request lines of one-off probes whose 404 is the expected answer.
    """

    def __init__(self, request_lines: Iterable[str], probe_lines: Iterable[str] = ()) -> None:
        self.request_lines = frozenset(request_lines)
        self.probe_lines = frozenset(probe_lines)
        #: an own request line came from one of the client's addresses: addresses decide from now on
        self.address_seen = False

    def snapshot(self, addresses: Iterable[str]) -> OwnRequests:
        """The matcher for now, given the addresses the client used so far."""
        addrs = frozenset(addresses)
        return OwnRequests(self.request_lines, addrs if self.address_seen else frozenset(), self.probe_lines)

    def is_own(self, line: str, addresses: Iterable[str]) -> bool:
        """Whether ``line`` (the next line of the log) is one of the console's own polls."""
        a = access_line(line)
        if a is None or a.request not in self.request_lines | self.probe_lines:
            return False
        addrs = frozenset(addresses)
        if not self.address_seen and a.client in addrs:
            self.address_seen = True
        return self.snapshot(addrs)._own(a)
