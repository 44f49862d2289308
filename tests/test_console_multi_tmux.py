"""End to end in a real terminal: ``specconsole attach URL1 URL2`` against two demo servers in
tmux at 80x24: the server list, the focus switch, a threshold change to one and to all."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from console_support import DemoServer
import test_console_e2e_tmux as e2e

pytestmark = e2e.pytestmark  # skipped without tmux
tmux = e2e.tmux  # the fixture: a private tmux server per test

#: this checkout's console (not whichever one the ``specconsole`` script was installed from)
REPO = Path(__file__).resolve().parents[1]


def test_attach_two_servers_in_tmux(tmux, tmp_path):
    a = DemoServer(tmp_path, ["--load", "fixed:8"]).wait_ready()
    b = DemoServer(tmp_path, ["--load", "fixed:12"]).wait_ready()
    ha, hb = a.url.removeprefix("http://"), b.url.removeprefix("http://")

    def threshold(server: DemoServer) -> int:
        return server.get("/server_info")["internal_states"][0]["spec_gate"]["threshold"]

    try:
        s = "multi"
        tmux.start(s, f"cd {tmp_path} && TERM=xterm-256color PYTHONPATH={REPO} {sys.executable} -m console attach {a.url} {b.url} "
                      f"--log {a.log} --log {b.log} --interval 0.3; echo EXITED $?; sleep 60")
        text = tmux.wait(s, lambda t: f"▶ {ha}" in t and f"  {hb}" in t and t.count("EAGLEWorkerV2") >= 2
                         and "SPEC ON" in t, what="server list")
        lines = text.splitlines()
        assert len(lines) <= 24 and all(len(line) <= 80 for line in lines)
        assert f"ATTACH │ {ha}" in text and f"demo-{a.port}.log" in text

        tmux.keys(s, "]")
        text = tmux.wait(s, lambda t: f"▶ {hb}" in t and f"ATTACH │ {hb}" in t and "running 12" in t,
                         what="focus on the second server")
        assert f"demo-{b.port}.log" in text

        tmux.keys(s, "+")  # to the focused server only
        tmux.wait(s, lambda t: "33·4" in t and "→33·4" not in t, what="second server's row at 33")
        assert threshold(b) == 33 and threshold(a) == 32

        tmux.keys(s, "T")
        tmux.wait(s, lambda t: "Threshold for ALL 2 servers" in t, what="dialog for all")
        time.sleep(0.5)  # let the dialog take focus
        for key in ("C-u", "4", "0", "Enter"):
            tmux.keys(s, key)
            time.sleep(0.2)
        tmux.wait(s, lambda t: "to all 2 servers?" in t, what="confirm")
        tmux.keys(s, "y")
        # confirmed on both rows: the pending form of a row is "33·4→40·4" (console/servers.py)
        text = tmux.wait(s, lambda t: t.count("40·4") >= 2 and "→40·4" not in t, what="both rows at 40")
        assert threshold(a) == threshold(b) == 40

        tmux.keys(s, "[")
        tmux.wait(s, lambda t: f"▶ {ha}" in t and f"ATTACH │ {ha}" in t, what="focus back on the first")
        tmux.keys(s, "q")
        tmux.wait(s, lambda t: "EXITED 0" in t, what="exit")
        assert threshold(a) == threshold(b) == 40  # attached servers keep running, untouched by quit
    finally:
        a.stop()
        b.stop()
