"""Start, drive and stop real SGLang servers on the GPU machine (used by bench/ and the GPU tests).

Nothing here needs a GPU to import; everything that talks to a server uses plain HTTP (httpx).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import httpx

from bench.errors import BenchError

from server_patch.contract import HYSTERESIS_KEY, THRESHOLD_KEY

REPO = Path(__file__).resolve().parent.parent

#: more SGLang arguments for every server a bench tool starts (shell words), put *before* the
#: tool's own so that those win: e.g. ``--max-total-tokens 131072`` with a high
#: ``--mem-fraction`` lets several small servers start together on one GPU (SGLang sizes the KV
#: pool as free - free_before_load x (1 - fraction), then caps it at ``--max-total-tokens``)
EXTRA_ARGS_ENV = "SPECCONSOLE_BENCH_SERVER_ARGS"

#: the three EAGLE-3 worker paths of SGLang 0.5.12 the gate is proven on (name -> eagle3_args
#: keywords, plus the live worker class each must run: ``expect``)
CONFIGS = {
    "v2-topk1": dict(topk=1, num_steps=3, num_draft_tokens=4, overlap=True, expect="EAGLEWorkerV2"),
    "v1-topk1": dict(topk=1, num_steps=3, num_draft_tokens=4, overlap=False, expect="EAGLEWorker"),
    "v1-topk4": dict(topk=4, num_steps=3, num_draft_tokens=8, overlap=False, expect="EAGLEWorker"),
}

# What the GPU machine can serve with the slim wheel set (../shared/gpu/README.md).
BASE_ARGS = [
    "--attention-backend", "triton",
    "--sampling-backend", "pytorch",
    "--grammar-backend", "none",
    "--dtype", "bfloat16",
    "--log-level", "info",
]


def eagle3_args(
    target: str,
    draft: str,
    *,
    topk: int = 1,
    num_steps: int = 3,
    num_draft_tokens: int = 4,
    overlap: bool = True,
    max_running_requests: int = 64,
    cuda_graph_max_bs: int = 64,
    mem_fraction: float = 0.2,
) -> List[str]:
    """SGLang CLI args for an EAGLE-3 server on the synthetic pair.

    ``overlap=False`` adds ``--disable-overlap-schedule`` (SGLang 0.5.12 then runs the v1
    ``EAGLEWorker``); ``topk > 1`` makes SGLang turn overlap off by itself.
    """
    args = [
        "--model-path", target,
        "--speculative-algorithm", "EAGLE3",
        "--speculative-draft-model-path", draft,
        "--speculative-num-steps", str(num_steps),
        "--speculative-eagle-topk", str(topk),
        "--speculative-num-draft-tokens", str(num_draft_tokens),
        "--max-running-requests", str(max_running_requests),
        "--cuda-graph-max-bs", str(cuda_graph_max_bs),
        "--mem-fraction-static", str(mem_fraction),
        *BASE_ARGS,
    ]
    if not overlap:
        args.append("--disable-overlap-schedule")
    return args


def plain_args(target: str, *, max_running_requests: int = 128, cuda_graph_max_bs: int = 128,
               mem_fraction: float = 0.2) -> List[str]:
    """SGLang CLI args for the same target without speculation."""
    return [
        "--model-path", target,
        "--max-running-requests", str(max_running_requests),
        "--cuda-graph-max-bs", str(cuda_graph_max_bs),
        "--mem-fraction-static", str(mem_fraction),
        *BASE_ARGS,
    ]


@dataclasses.dataclass
class Server:
    """A server process started by :func:`start_server`; ``url`` like ``http://127.0.0.1:30000``."""

    name: str
    port: int
    args: List[str]
    log_path: Path
    proc: subprocess.Popen
    started_at: float
    ready_s: Optional[float] = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, n: int = 60) -> str:
        return "\n".join(self.log_text().splitlines()[-n:])


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something accepts TCP connections on ``host:port`` now."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        return sock.connect_ex((host, port)) == 0


def start_server(name: str, args: Sequence[str], port: int, log_dir: Path, *,
                 patched: bool = True, env: Optional[Dict[str, str]] = None,
                 cpus: Optional[Sequence[int]] = None) -> Server:
    """Start ``python -m server_patch.launch_server`` (or plain ``sglang.launch_server``) in its own
    process group, output to ``log_dir/<name>.log``; ``$SPECCONSOLE_BENCH_SERVER_ARGS`` (of the
    environment or ``env``) goes before ``args``. ``cpus``: the CPUs the server and every process it
    starts may run on (Linux CPU affinity, inherited by its scheduler and detokenizer), None: any.

    Raises:
        ValueError: that variable is not valid shell words.
        BenchError: something already listens on 127.0.0.1:``port`` (the new server could not bind
            it, and whatever answers there would be measured in its place).
    """
    if port_in_use(port):
        raise BenchError(f"port {port} is already in use on 127.0.0.1: a server started there could not bind it, "
                         f"and the one answering would be measured instead (stop it or start on another port)")
    full_env = dict(os.environ)
    full_env.update(env or {})
    try:
        extra = shlex.split(full_env.get(EXTRA_ARGS_ENV, ""))
    except ValueError as e:
        raise ValueError(f"{EXTRA_ARGS_ENV}={full_env.get(EXTRA_ARGS_ENV)!r}: {e}") from e
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}.log"
    module = "server_patch.launch_server" if patched else "sglang.launch_server"
    cmd = [sys.executable, "-m", module, *extra, *args, "--port", str(port), "--host", "127.0.0.1"]
    full_env.setdefault("PYTHONUNBUFFERED", "1")
    log = open(log_path, "w")
    log.write("$ " + " ".join(cmd) + "\n")
    log.flush()
    pinned = sorted(set(cpus)) if cpus else None
    if pinned:
        log.write(f"# CPU affinity: {','.join(map(str, pinned))}\n")
        log.flush()
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=full_env, start_new_session=True,
                            cwd=str(REPO), preexec_fn=(lambda: os.sched_setaffinity(0, pinned)) if pinned else None)
    return Server(name, port, list(args), log_path, proc, time.time())


def wait_ready(server: Server, timeout_s: float = 420) -> None:
    """Poll ``/health_generate`` until the server answers 200.

    Raises:
        RuntimeError: the process exited (message has its exit code and log tail) or timed out.
    """
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        code = server.proc.poll()
        if code is not None:
            raise RuntimeError(f"{server.name} exited with {code}:\n{server.log_tail()}")
        try:
            r = httpx.get(server.url + "/health", timeout=5)
            if r.status_code == 200:
                server.ready_s = time.time() - server.started_at
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise RuntimeError(f"{server.name} not ready after {timeout_s}s:\n{server.log_tail()}")


def stop_server(server: Server, timeout_s: float = 30) -> Optional[int]:
    """SIGTERM the server's process group, SIGKILL after ``timeout_s``; return the exit code."""
    if server.proc.poll() is None:
        try:
            os.killpg(server.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            server.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(server.proc.pid, signal.SIGKILL)
            server.proc.wait()
    return server.proc.returncode


def generate(url: str, input_ids: Any, max_new_tokens: int, timeout_s: float = 300) -> Any:
    """Greedy ``/generate`` on token ids (one list, or a list of lists for a batch); returns SGLang's
    JSON (``output_ids``, ``meta_info``; a list of those for a batch)."""
    payload = {
        "input_ids": input_ids,
        "sampling_params": {"temperature": 0.0, "max_new_tokens": max_new_tokens, "ignore_eos": True},
    }
    r = httpx.post(url + "/generate", json=payload, timeout=timeout_s)
    r.raise_for_status()
    return r.json()


def server_info(url: str) -> Dict[str, Any]:
    r = httpx.get(url + "/server_info", timeout=30)
    r.raise_for_status()
    return r.json()


def spec_gate(url: str) -> Dict[str, Any]:
    """``internal_states[0].spec_gate`` of a patched server."""
    return server_info(url)["internal_states"][0]["spec_gate"]


def set_gate(url: str, threshold: Optional[int] = None, hysteresis: Optional[int] = None,
             **server_args: Any) -> Dict[str, Any]:
    """POST a gate change (N and/or H, req; other ``server_args`` keys as given) to
    ``/set_internal_state``; returns the contract's answer (``updated``, ``reason``, ...)."""
    values = dict(server_args)
    if threshold is not None:
        values[THRESHOLD_KEY] = threshold
    if hysteresis is not None:
        values[HYSTERESIS_KEY] = hysteresis
    r = httpx.post(url + "/set_internal_state", json={"server_args": values}, timeout=30)
    r.raise_for_status()
    return r.json()


def add_run_arguments(ap: Any, *, mem_fraction: float, port: int) -> None:
    """The options of a GPU check that starts one server per configuration on a synthetic pair
    (``bench.churn_correctness``, ``bench.logprob_switch``): ``--models --configs --tp
    --mem-fraction --kv-sensitive --log-dir --out --port``; ``ap`` an ``argparse.ArgumentParser``."""
    ap.add_argument("--models", type=Path, required=True, help="dir from bench.synthetic_models")
    ap.add_argument("--configs", default=",".join(CONFIGS), help=f"comma-separated, of {', '.join(CONFIGS)}")
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--mem-fraction", type=float, default=mem_fraction,
                    help="--mem-fraction-static of each server (next to other servers: above the share they use)")
    ap.add_argument("--kv-sensitive", action="store_true", help="--models holds a KV-sensitive pair")
    ap.add_argument("--log-dir", type=Path, default=Path("/tmp/specconsole-logs"))
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--port", type=int, default=port)


def config_names(ap: Any, configs: str) -> List[str]:
    """``--configs`` as a list of CONFIGS names; ``ap.error`` (exit 2) names the unknown ones."""
    names = [c for c in configs.split(",") if c]
    unknown = [c for c in names if c not in CONFIGS]
    if unknown or not names:
        ap.error(f"unknown --configs {', '.join(unknown) or '(none given)'} (known: {', '.join(CONFIGS)})")
    return names


def missing_pair_files(models: Path) -> List[str]:
    """What a synthetic pair's directory (``bench.synthetic_models --out DIR``) lacks of ``target``,
    ``draft`` and ``oracle.json``; empty when all are there."""
    return [n for n in ("target", "draft", "oracle.json") if not (models / n).exists()]


def pair_problem(models: Path) -> Optional[str]:
    """Why ``models`` is not a synthetic pair (for ``--models``: what is missing, or that it is no
    directory), or None."""
    missing = missing_pair_files(models)
    if not missing:
        return None
    what = ("missing: " + ", ".join(missing) if models.is_dir()
            else "not a directory" if models.exists() else "no such directory")
    return f"is not a synthetic pair made by python -m bench.synthetic_models (needs target/, draft/, oracle.json; {what})"


@contextlib.contextmanager
def flipping_threshold(url: str, high: int, every_s: float = 0.01):
    """While the ``with`` body runs, set the gate's threshold to 1 and ``high`` in turn every
    ``every_s`` seconds (speculation OFF / ON for any batch below ``high``), so requests run
    across many switches. Yields a dict, filled as it goes: ``flips`` (changes answered),
    ``errors`` (how many failed or timed out; the flipping goes on), ``first_error`` (its text),
    ``slowest_s`` (the longest answer, s). A change that waits long means the scheduler did not
    reach its next iteration: callers treat a slow or failed flip as a finding, not as noise."""
    stop = threading.Event()
    sent: Dict[str, Any] = {"flips": 0, "errors": 0, "first_error": None, "slowest_s": 0.0}

    def toggler() -> None:
        value = 1
        while not stop.is_set():
            t0 = time.monotonic()
            try:
                set_gate(url, threshold=value)
                sent["flips"] += 1
                value = high if value == 1 else 1
            except (httpx.HTTPError, ValueError) as exc:
                sent["errors"] += 1
                sent["first_error"] = sent["first_error"] or f"{type(exc).__name__}: {exc}"
            sent["slowest_s"] = round(max(sent["slowest_s"], time.monotonic() - t0), 3)
            time.sleep(every_s)

    th = threading.Thread(target=toggler, daemon=True)
    th.start()
    try:
        yield sent
    finally:
        stop.set()
        th.join()


def record_failure(rec: Dict[str, Any], server: Server, exc: BaseException) -> None:
    """Note a failed run in its result record, with the server's log tail, so a batch of runs
    keeps going and the JSON says why this one failed."""
    import traceback

    rec["error"] = f"{type(exc).__name__}: {exc}"
    rec["traceback"] = traceback.format_exc()
    rec["log_tail"] = server.log_tail(80)
    rec["oracle_match"] = False


SPEC_PATH_MARKERS = ("Spec v1 is used", "Spec v2 is enabled")


def spec_path_log_line(log_text: str) -> Optional[str]:
    """SGLang's startup line that names the speculative worker family, if present."""
    for line in log_text.splitlines():
        if any(m in line for m in SPEC_PATH_MARKERS):
            return line.strip()
    return None


def gate_startup_lines(log_text: str) -> List[str]:
    return [l.strip() for l in log_text.splitlines() if "spec_gate: worker=" in l]


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")
