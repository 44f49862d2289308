"""Run SGLang's ``bench_serving`` CLI many times from one Python process.

Why: every ``python -m sglang.bench_serving`` pays SGLang's import chain (torch, triton,
transformers, datasets, ...) and start-up again. On the H200 host that was 14-15 s per run: in
``bench/results/x2-2026-11-30c`` the gate server sat idle that long between consecutive
concurrency levels, and a gate config makes ~30 runs (levels, time-varying stages, forced-off
rows, threshold sweep), so most of a benchmark's device time was imports. Here the module's
``__main__`` block is executed with :func:`runpy.run_module` for each run: the imports are paid
once, the CLI, its defaults and its output file are exactly those of ``python -m``.

If a run fails in-process, it is retried once in a subprocess (``python -m``); when that
succeeds, the driver stays in subprocess mode for the rest of the process and says so (a
benchmark left running unattended on a rented GPU should finish either way). Set
``SPECCONSOLE_BENCH_SERVING=subprocess`` to start in subprocess mode.
"""

from __future__ import annotations

import contextlib
import io
import os
import runpy
import subprocess
import sys
from typing import List, Optional

MODULE = "sglang.bench_serving"
MODE_ENV = "SPECCONSOLE_BENCH_SERVING"
IN_PROCESS = "in-process"
SUBPROCESS = "subprocess"
TAIL_CHARS = 2000


class ServingDriver:
    """Runs ``python -m MODULE ARGV...`` equivalents; see the module docstring.

    Args:
        module: the CLI module (``sglang.bench_serving``; tests pass a stand-in).
        mode: ``"in-process"`` or ``"subprocess"``; default from ``SPECCONSOLE_BENCH_SERVING``,
            else in-process.

    Attributes:
        mode: the mode the next run uses.
        fallback_reason: why the driver moved to subprocess mode, or None.
    """

    def __init__(self, module: str = MODULE, mode: Optional[str] = None):
        self.module = module
        self.mode = mode or (SUBPROCESS if os.environ.get(MODE_ENV) == SUBPROCESS else IN_PROCESS)
        if self.mode not in (IN_PROCESS, SUBPROCESS):
            raise ValueError(f"mode must be {IN_PROCESS!r} or {SUBPROCESS!r}, not {self.mode!r}")
        self.fallback_reason: Optional[str] = None

    def run(self, argv: List[str]) -> str:
        """Run the CLI with ``argv`` (without the program name); return its stdout + stderr.

        Raises:
            RuntimeError: the run failed (non-zero exit or an exception) in the mode it ended in;
                the message holds the last TAIL_CHARS characters of its output.
        """
        if self.mode == SUBPROCESS:
            return self._run_subprocess(argv)
        try:
            return self._run_in_process(argv)
        except RuntimeError as exc:
            in_process_error = str(exc)
        out = self._run_subprocess(argv, also=f"in-process first: {in_process_error}")
        self.mode = SUBPROCESS
        self.fallback_reason = in_process_error[-TAIL_CHARS:]
        print(f"serving_driver: {self.module} failed in-process and passed in a subprocess; "
              f"using subprocesses from now on. In-process error:\n{self.fallback_reason}",
              file=sys.stderr, flush=True)
        return out

    def _run_in_process(self, argv: List[str]) -> str:
        buf = io.StringIO()
        saved_argv = sys.argv
        sys.argv = [self.module] + list(argv)
        try:
            with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
                runpy.run_module(self.module, run_name="__main__", alter_sys=True)
        except SystemExit as exc:  # argparse errors, explicit sys.exit()
            if exc.code not in (None, 0):
                raise RuntimeError(f"{self.module} exited with {exc.code!r} (in-process):\n"
                                   f"{buf.getvalue()[-TAIL_CHARS:]}") from None
        except Exception as exc:  # noqa: BLE001 - any failure of the run is reported with its output
            raise RuntimeError(f"{self.module} raised {exc!r} (in-process):\n"
                               f"{buf.getvalue()[-TAIL_CHARS:]}") from None
        finally:
            sys.argv = saved_argv
        return buf.getvalue()

    def _run_subprocess(self, argv: List[str], also: str = "") -> str:
        proc = subprocess.run([sys.executable, "-m", self.module, *argv], capture_output=True, text=True)
        out = proc.stdout + proc.stderr
        if proc.returncode != 0:
            extra = f"\n({also[-TAIL_CHARS:]})" if also else ""
            raise RuntimeError(f"{self.module} exited with {proc.returncode} (subprocess):\n"
                               f"{proc.stdout[-TAIL_CHARS:]}\n{proc.stderr[-TAIL_CHARS:]}{extra}")
        return out
