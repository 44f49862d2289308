"""``bench.server_harness.start_server``: the command it runs (no server is started here)."""

import subprocess
import sys

import pytest

from bench import server_harness


class FakePopen:
    def __init__(self, cmd, **kwargs):
        self.cmd, self.env, self.pid = cmd, kwargs["env"], 4242
        self.preexec_fn = kwargs.get("preexec_fn")


def test_extra_args_go_before_the_tools_own(monkeypatch, tmp_path):
    monkeypatch.setattr(subprocess, "Popen", FakePopen)
    monkeypatch.setenv(server_harness.EXTRA_ARGS_ENV, "--max-total-tokens 131072 --soft-watchdog-timeout 20")
    server = server_harness.start_server("s", ["--model-path", "/m", "--max-total-tokens", "4096"], 30500, tmp_path)
    cmd = server.proc.cmd
    assert cmd[:3] == [sys.executable, "-m", "server_patch.launch_server"]
    assert cmd[3:7] == ["--max-total-tokens", "131072", "--soft-watchdog-timeout", "20"]
    # the tool's own value comes later, so SGLang's parser keeps it
    assert cmd.index("4096") > cmd.index("131072")
    assert (tmp_path / "s.log").read_text().startswith("$ " + " ".join(cmd))


def test_a_server_pinned_to_cpus_sets_its_affinity_before_it_runs(monkeypatch, tmp_path):
    """``cpus``: the child sets its CPU affinity before exec (inherited by the scheduler and detokenizer
    it spawns); the log says which; without ``cpus`` nothing is set."""
    monkeypatch.setattr(subprocess, "Popen", FakePopen)
    set_to = []
    monkeypatch.setattr(server_harness.os, "sched_setaffinity", lambda pid, cpus: set_to.append((pid, cpus)),
                        raising=False)
    server = server_harness.start_server("s", ["--model-path", "/m"], 30500, tmp_path, cpus=[5, 4, 4])
    server.proc.preexec_fn()  # what the child runs between fork and exec
    assert set_to == [(0, [4, 5])] and "# CPU affinity: 4,5" in (tmp_path / "s.log").read_text()
    assert server_harness.start_server("t", ["--model-path", "/m"], 30501, tmp_path).proc.preexec_fn is None


def test_no_extra_args_by_default(monkeypatch, tmp_path):
    monkeypatch.setattr(subprocess, "Popen", FakePopen)
    monkeypatch.delenv(server_harness.EXTRA_ARGS_ENV, raising=False)
    server = server_harness.start_server("s", ["--model-path", "/m"], 30500, tmp_path, patched=False)
    assert server.proc.cmd[1:5] == ["-m", "sglang.launch_server", "--model-path", "/m"]


def test_bad_extra_args_are_refused_before_anything_starts(monkeypatch, tmp_path):
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: pytest.fail("must not start"))
    with pytest.raises(ValueError, match=server_harness.EXTRA_ARGS_ENV):
        server_harness.start_server("s", [], 30500, tmp_path, env={server_harness.EXTRA_ARGS_ENV: "--x 'open"})
    assert not (tmp_path / "s.log").exists()


def test_a_port_something_already_listens_on_is_refused_before_anything_starts(monkeypatch, tmp_path):
    """A server started on a taken port cannot bind it, and the benchmark would measure whatever
    answers there (a fresh user's run measured the demo server that held the port)."""
    import socket

    from bench.errors import BenchError

    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: pytest.fail("must not start"))
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        assert server_harness.port_in_use(port)
        with pytest.raises(BenchError, match=f"port {port} is already in use"):
            server_harness.start_server("s", [], port, tmp_path)
    assert not (tmp_path / "s.log").exists()
    assert not server_harness.port_in_use(port)
