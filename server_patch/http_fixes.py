"""A mend of SGLang 0.5.12's HTTP layer in the main process: ``/v1/loads`` with ``--enable-metrics``.

With ``--enable-metrics`` SGLang adds a middleware (``track_http_status_code``,
``utils/common.py:1533-1537``) that labels each request with the route it matched, via
``_get_fastapi_request_path`` (``utils/common.py:1562-1571``): it walks ``app.routes`` and returns
``route.path`` of the first full match. Since FastAPI 0.137, ``include_router`` adds one lazy
``_IncludedRouter`` node instead of copying its routes, and that node has no ``path``; SGLang's only
included router serves ``/v1/loads`` (``http_server.py:416-418``), so every ``/v1/loads`` request
fails with HTTP 500 (sgl-project/sglang issue 28887; fixes proposed in PRs 31287 and 31331, not
in 0.5.12). The console polls ``/v1/loads`` for the live running requests and queue.

:func:`fastapi_request_path` is the function with the two upstream fixes combined: it matches the
leaf routes (``fastapi.routing.iter_route_contexts``, FastAPI >= 0.137.2) and skips a matching
node without a path (0.137.0/0.137.1), falling back to the request's path, as SGLang does for an
unmatched request. It replaces SGLang's only where the installed FastAPI has the problem.
"""

from __future__ import annotations

import logging
from typing import Any, Tuple

logger = logging.getLogger("server_patch.spec_gate")

TARGET = "sglang.srt.utils.common._get_fastapi_request_path"
#: the first FastAPI release whose include_router leaves path-less nodes in app.routes
BROKEN_SINCE = (0, 137)


def fastapi_request_path(request: Any) -> Tuple[str, bool]:
    """``(route path template, matched)`` of a Starlette/FastAPI ``request``, as SGLang's
    ``_get_fastapi_request_path``: the path of the first route that matches fully, else the
    request's own path and False."""
    from starlette.routing import Match

    try:
        from fastapi.routing import iter_route_contexts  # FastAPI >= 0.137.2: the leaf routes

        routes = iter_route_contexts(request.app.routes)
    except ImportError:  # flat routes (< 0.137), or 0.137.0/0.137.1
        routes = request.app.routes
    for route in routes:
        match, _ = route.matches(request.scope)
        if match == Match.FULL:
            path = getattr(route, "path", None)
            if path:
                return path, True
            break  # a path-less node (0.137.0/0.137.1): label with the request's path
    return request.url.path, False


def fastapi_needs_mend(version: str) -> bool:
    """True for a FastAPI ``version`` whose ``include_router`` breaks SGLang 0.5.12's middleware."""
    try:
        major, minor = (int(x) for x in version.split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= BROKEN_SINCE


def register(registry: Any, hook_type: Any) -> bool:
    """Replace SGLang's function when the installed FastAPI needs it; returns whether it did."""
    try:
        from importlib.metadata import version

        fastapi_version = version("fastapi")
    except Exception:  # noqa: BLE001 - no FastAPI: nothing to mend
        return False
    if not fastapi_needs_mend(fastapi_version):
        return False
    registry.register(TARGET, fastapi_request_path, hook_type.REPLACE)
    logger.info("specconsole: /v1/loads with --enable-metrics mended for FastAPI %s (sglang issue 28887)",
                fastapi_version)
    return True
