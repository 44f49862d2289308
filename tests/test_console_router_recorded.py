"""SGLang's router as recorded (``tests/fixtures/sglang-router/<version>/answers.json``: the real
``sglang-router`` wheels in front of two demo servers, 2026-12-02): the console finds the workers of
0.3.2 and 0.2.4 (``/workers``; their ``/list_workers`` is 404) and of 0.1.9 (``/list_workers``), and
an SGLang server (404 to both) stays a server."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from console.config import AppConfig
from console.servers import expand_routers, router_workers

FIXTURES = Path(__file__).parent / "fixtures" / "sglang-router"
WORKERS = ["http://127.0.0.1:31902", "http://127.0.0.1:31901"]


def _replay(version: str) -> httpx.MockTransport:
    answers = json.loads((FIXTURES / version / "answers.json").read_text())["answers"]

    def handler(request: httpx.Request) -> httpx.Response:
        a = answers.get(request.url.path)
        if a is None:
            return httpx.Response(404)
        body = a["body"]
        if isinstance(body, (dict, list)):
            return httpx.Response(a["status"], json=body)
        return httpx.Response(a["status"], text=body)

    return httpx.MockTransport(handler)


@pytest.mark.parametrize("version", ["0.3.2", "0.2.4", "0.1.9"])
def test_the_workers_of_each_recorded_router_version_are_found(version):
    got = router_workers("http://router:31900", transport=_replay(version))
    assert sorted(got) == sorted(WORKERS)


def test_the_recorded_routers_answer_where_the_console_asks():
    for version, path in (("0.3.2", "/workers"), ("0.2.4", "/workers"), ("0.1.9", "/list_workers")):
        answers = json.loads((FIXTURES / version / "answers.json").read_text())["answers"]
        assert answers[path]["status"] == 200
        assert answers["/list_workers" if path == "/workers" else "/workers"]["status"] == 404


def test_an_sglang_server_is_not_a_router():
    transport = httpx.MockTransport(lambda request: httpx.Response(404, json={"detail": "Not Found"}))
    assert router_workers("http://server:30000", transport=transport) is None


def test_a_router_config_becomes_its_workers_with_the_recorded_answer(monkeypatch):
    import console.servers as servers

    real = servers.router_workers
    monkeypatch.setattr(servers, "router_workers",
                        lambda url, api_key=None: real(url, api_key, transport=_replay("0.3.2")))
    cfg = expand_routers(AppConfig(url="http://router:31900"), lookup=servers.router_workers)
    assert sorted(t.url for t in cfg.servers) == sorted(WORKERS)
    assert "is SGLang's router: watching its 2 worker(s)" in cfg.notes[0]


def test_a_router_with_many_workers_names_the_first_eight_in_its_note():
    """A router of 300 workers: the note counts them all and names eight (the console's notice line
    is one line, not 300 URLs)."""
    from console.config import AppConfig
    from console.servers import WorkerList, expand_routers

    urls = [f"http://10.0.{i // 250}.{i % 250}:30000" for i in range(300)]
    cfg = expand_routers(AppConfig(url="http://router:30000"), lookup=lambda url, key: WorkerList(urls, []))
    note = cfg.notes[0]
    assert "watching its 300 worker(s)" in note and note.endswith(" ...")
    assert note.count("10.0.") == 8
    assert len(cfg.servers) == 300
