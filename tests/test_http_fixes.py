"""server_patch/http_fixes.py: /v1/loads with --enable-metrics on FastAPI >= 0.137.

SGLang itself cannot be imported here (it needs CUDA), so the middleware is rebuilt from its
0.5.12 source: the test reads ``_get_fastapi_request_path`` from the installed file with ``ast``,
runs it against a real FastAPI app that includes a router the way SGLang does, and shows the
HTTP 500 that the fixture recorded, then the same app with the replacement answering 200.
"""

from __future__ import annotations

import ast
import importlib.util
import textwrap
from pathlib import Path

import pytest

fastapi = pytest.importorskip("fastapi")
from fastapi import APIRouter, FastAPI, Request  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

from server_patch import http_fixes  # noqa: E402


def _sglang_function(name: str):
    """The source of ``name`` from sglang/srt/utils/common.py 0.5.12, compiled on its own."""
    spec = importlib.util.find_spec("sglang")
    path = Path(list(spec.submodule_search_locations)[0]) / "srt" / "utils" / "common.py"
    tree = ast.parse(path.read_text())
    (fn,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
    namespace: dict = {}
    exec(compile(ast.Module([fn], []), str(path), "exec"), namespace)  # noqa: S102 - SGLang's own code
    return namespace[name]


def _app(request_path) -> FastAPI:
    """An app shaped like SGLang's: /v1/loads on an included router, the rest on the app, and
    the metrics middleware labelling each request with ``request_path``."""
    app = FastAPI()
    router = APIRouter()

    @router.get("/v1/loads")
    async def loads():
        return {"loads": []}

    app.include_router(router)  # http_server.py:416-418

    @app.get("/server_info")
    async def server_info():
        return {"internal_states": []}

    seen = []

    @app.middleware("http")
    async def track_http_status_code(request: Request, call_next):  # utils/common.py:1533-1537
        path, _ = request_path(request)
        seen.append(path)
        return await call_next(request)

    app.state.seen = seen
    return app


def test_sglangs_own_function_fails_on_v1_loads_with_this_fastapi():
    if not http_fixes.fastapi_needs_mend(fastapi.__version__):
        pytest.skip(f"FastAPI {fastapi.__version__} predates the problem")
    client = TestClient(_app(_sglang_function("_get_fastapi_request_path")), raise_server_exceptions=False)
    assert client.get("/server_info").status_code == 200
    assert client.get("/v1/loads?include=core,spec").status_code == 500  # the fixture's answer


def test_the_replacement_labels_every_route_and_never_fails():
    app = _app(http_fixes.fastapi_request_path)
    client = TestClient(app, raise_server_exceptions=False)
    assert client.get("/v1/loads?include=core,spec").status_code == 200
    assert client.get("/server_info").status_code == 200
    assert client.get("/nothing-here").status_code == 404
    assert app.state.seen == ["/v1/loads", "/server_info", "/nothing-here"]


def test_it_is_registered_only_where_fastapi_needs_it():
    assert http_fixes.fastapi_needs_mend("0.137.0") and http_fixes.fastapi_needs_mend("0.141.1")
    assert not http_fixes.fastapi_needs_mend("0.136.3") and not http_fixes.fastapi_needs_mend("x")

    class Registry:
        calls: list = []

        @classmethod
        def register(cls, target, hook, kind):
            cls.calls.append((target, hook, kind))

    class HookType:
        REPLACE = "replace"

    done = http_fixes.register(Registry, HookType)
    assert done == http_fixes.fastapi_needs_mend(fastapi.__version__)
    if done:
        assert Registry.calls == [(http_fixes.TARGET, http_fixes.fastapi_request_path, "replace")]


def test_the_target_exists_in_sglang_0_5_12_with_the_signature_replaced():
    fn = _sglang_function("_get_fastapi_request_path")
    import inspect

    assert list(inspect.signature(fn).parameters) == ["request"]
    assert http_fixes.TARGET == "sglang.srt.utils.common._get_fastapi_request_path"
    assert textwrap.dedent(inspect.getsource(http_fixes.fastapi_request_path)).startswith("def fastapi_request_path(request")
