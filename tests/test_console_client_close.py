"""The console's HTTP client against servers that answer and close the connection (Python's
http.server speaks HTTP/1.0): a clear answer, not an internal error (fresh-user finding: attach
stayed at "connecting..." with "OSError: [Errno 9] Bad file descriptor")."""

from __future__ import annotations

import asyncio
import http.server
import json
import threading

import pytest

from console.client import ServerClient, ServerUnreachable


def serve(handler_cls):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler_cls)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


class Json(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        body = json.dumps({"hello": "world"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)


@pytest.mark.parametrize("handler", [http.server.SimpleHTTPRequestHandler, Json])
def test_a_server_that_closes_after_answering_gets_a_clear_answer(handler, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # SimpleHTTPRequestHandler serves the working directory
    srv = serve(handler)

    async def poll():
        client = ServerClient(f"http://127.0.0.1:{srv.server_address[1]}", timeout_s=5)
        try:
            return await client.poll()
        finally:
            await client.aclose()

    try:
        with pytest.raises(ServerUnreachable) as exc:
            asyncio.run(poll())
    finally:
        srv.shutdown()
        srv.server_close()
    assert "Bad file descriptor" not in str(exc.value)
    want = "not an SGLang server" if handler is Json else "HTTP 404: no SGLang server at this URL"
    assert want in str(exc.value), str(exc.value)
