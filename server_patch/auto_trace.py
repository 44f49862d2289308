"""An opt-in record of every decode result a scheduler processed, for the auto threshold's estimates.

The auto threshold keeps per-bucket moving averages of the step time ON and OFF
(``auto_threshold.StepCosts``) and shows only those. Whether an estimate reads a mode slower than it
runs (h100-2026-12-07d: the ON estimate at batch 1 below the rate the same server produced) can only
be told from the steps themselves: when each result was processed, how it ran, at what context length.
With ``SPECCONSOLE_AUTO_TRACE=PATH`` set in the server's environment, TP rank 0's scheduler appends one
JSON line per decode result to ``PATH`` (``bench.auto_trace`` reads it):

    {"i": forward_iter, "t": perf_counter s, "k": "on" | "off" | "resume", "bs": requests,
     "ctx": tokens in the batch's KV (seq_lens_sum), "tok": output tokens, "clean": no proof check ran,
     "tbl": the auto table was rebuilt since the previous result}

``i`` is null where SGLang's batch has no ``forward_iter`` (such results give no sample). The file is
appended to: a second server run with the same path is pooled with the first by ``bench.auto_trace``
(which says so), so give each server run its own file.

Lines are written in blocks of FLUSH_LINES (a killed server loses at most the last block); a write that
fails turns the record off with one warning, and the server goes on.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any, List, Optional

logger = logging.getLogger(__name__)

ENV = "SPECCONSOLE_AUTO_TRACE"
FLUSH_LINES = 256


class StepTrace:
    """Appends decode results to one file (see the module docstring). ``path``: the file (created or
    appended to)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lines: List[str] = []
        self._file: Optional[Any] = open(path, "a", encoding="utf-8")

    def add(self, forward_iter: Optional[int], now_s: float, kind: str, batch_size: int, context: Optional[int],
            tokens: Optional[int], clean: bool, table: bool) -> None:
        """One decode result (fields as the module docstring names them). Never raises: a value it
        cannot write (a tensor where a number was expected) is written as null, and anything else
        that goes wrong stops the record with one warning, as a failed write does."""
        if self._file is None:
            return
        try:
            self._lines.append(json.dumps({"i": _int(forward_iter), "t": round(float(now_s), 6), "k": kind,
                                           "bs": _int(batch_size), "ctx": _int(context), "tok": _int(tokens),
                                           "clean": bool(clean), "tbl": bool(table)}, separators=(",", ":")))
        except Exception as exc:  # a diagnostic must not take the scheduler down
            logger.warning("spec_gate: the auto trace %s stopped: %s", self.path, exc)
            self._file = None
            return
        if len(self._lines) >= FLUSH_LINES:
            self.flush()

    def flush(self) -> None:
        """Write the lines held; on an error, stop recording (one warning)."""
        if self._file is None or not self._lines:
            return
        try:
            self._file.write("\n".join(self._lines) + "\n")
            self._file.flush()
        except (OSError, ValueError) as exc:
            logger.warning("spec_gate: the auto trace %s stopped: %s", self.path, exc)
            self._file = None
        self._lines.clear()


def _int(x: Any) -> Optional[int]:
    """``x`` as a Python int (an int, a numpy or one-element torch integer), else None."""
    if x is None or isinstance(x, bool):
        return None
    try:
        return int(x) if int(x) == x else None
    except (TypeError, ValueError, OverflowError, RuntimeError):
        return None


def context_tokens(batch: Any) -> Optional[int]:
    """Tokens in the KV cache of ``batch``'s requests when it was launched: ``seq_lens_sum``, or the
    sum of ``seq_lens_cpu`` (a CPU tensor, shape ``[bs]``) where the batch has no ``seq_lens_sum``:
    the copy the overlap scheduler processes results with carries only ``seq_lens_cpu``
    (SGLang 0.5.12 ``ScheduleBatch.copy``). None when neither can be read. Never raises."""
    total = _int(getattr(batch, "seq_lens_sum", None))
    if total is not None:
        return total
    try:
        lens = getattr(batch, "seq_lens_cpu", None)
        return None if lens is None else _int(lens.sum())
    except Exception:  # a diagnostic: an odd batch gives no context, never an error
        return None


def open_for(tp_rank: int, environ=os.environ) -> Optional[StepTrace]:
    """The trace of this scheduler: TP rank 0 only (it alone decides the auto table), when
    ``SPECCONSOLE_AUTO_TRACE`` names a file; None otherwise, or (with a warning) when that file
    cannot be opened."""
    path = environ.get(ENV)
    if not path or tp_rank != 0:
        return None
    try:
        return StepTrace(path)
    except OSError as exc:
        logger.warning("spec_gate: %s=%s cannot be opened (%s): no auto trace", ENV, path, exc)
        return None
