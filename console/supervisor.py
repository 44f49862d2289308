"""The launched server's watchdog: ends the server's process group when the console disappears.

``prctl(PR_SET_PDEATHSIG, SIGTERM)`` (:mod:`console.process`) only *asks* the server to stop when
the console dies; a server that ignores or hangs on SIGTERM would keep its GPU memory and its
port. So next to every server it starts, :class:`console.process.ServerProcess` starts this
small process (``python -m console.supervisor --pgid G --timeout T``) in a session of its own,
with its stdin the read end of a pipe whose only write end the console holds:

* the console stops the server itself (``q``, a crash, a restart): it writes ``stop`` and
  closes the pipe; the supervisor exits without signalling anything;
* the console dies without doing so (``kill -9``, the OOM killer): the kernel closes the pipe, the
  supervisor reads end-of-file, sends SIGTERM to the group, waits up to ``T`` seconds (the same
  stop timeout as the console's own clean stop, ``--stop-timeout``), then SIGKILLs whatever is
  left and exits once the group is empty.

It imports only the standard library and :func:`console.process.end_group`, so it starts in
well under a second and holds almost no memory while it waits (blocked in ``read``, no polling).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

from console.process import STOP_WORD, end_group


def _say(text: str) -> None:
    """One ``[specconsole supervisor]`` line on stderr (the server's log file)."""
    try:
        sys.stderr.write(f"[specconsole supervisor] {text}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def watch(pgid: int, timeout_s: float, fd: int = 0) -> int:
    """Block until the console writes ``stop`` on ``fd`` or the pipe closes; end the group on a close.

    Returns:
        The exit status: 0 after ``stop`` or once the group is gone, 1 if members survived SIGKILL.
    """
    data = b""
    while True:
        try:
            chunk = os.read(fd, 64)
        except InterruptedError:  # pragma: no cover - PEP 475 retries reads
            continue
        except OSError:
            chunk = b""
        if not chunk:
            break
        data += chunk
        if STOP_WORD in data:
            return 0
    _say(f"the console is gone: stopping server process group {pgid} "
         f"(SIGTERM, SIGKILL after {timeout_s:g} s)")
    def on_kill() -> None:
        _say(f"process group {pgid} still runs {timeout_s:g} s after SIGTERM: SIGKILL")

    return 0 if end_group(pgid, timeout_s, on_kill=on_kill) else 1


def main(argv: list[str] | None = None) -> int:
    """``python -m console.supervisor --pgid G --timeout T``: watch stdin (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m console.supervisor", description=__doc__.split("\n")[0],
                                     allow_abbrev=False)
    parser.add_argument("--pgid", type=int, required=True, help="the server's process group id")
    parser.add_argument("--timeout", type=float, required=True, help="seconds between SIGTERM and SIGKILL")
    args = parser.parse_args(argv)
    # the terminal's signals are not ours to act on: only the pipe decides
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    return watch(args.pgid, args.timeout)


if __name__ == "__main__":  # pragma: no cover - run as a process
    sys.exit(main())
