"""A closed-loop load of greedy ``/generate`` requests, checked against the synthetic pair's oracle.

Used by ``bench.auto_shift`` (C requests in flight, the prompt family switched between phases) and
by ``bench.gate_correctness``'s auto phase (the number in flight following a triangle wave). No
GPU, no SGLang: plain HTTP (httpx), one client per worker thread.

A worker ``i`` runs while ``i < active(elapsed seconds)``: it sends one request, waits for its
answer, checks it and sends the next; an inactive worker finishes the request it has in flight and
then waits. :meth:`ClosedLoop.stop` lets every request in flight finish.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Dict, List, Optional

#: a worker with nothing to do (inactive, or after a failed request) looks again after this long (s)
IDLE_S = 0.005
ERROR_PAUSE_S = 0.1


def triangle_concurrency(elapsed_s: float, peak: int, period_s: float, low: int = 1) -> int:
    """Requests in flight at ``elapsed_s`` for a load that ramps ``low -> peak -> low`` once every
    ``period_s`` seconds (a triangle wave, rounded to whole requests)."""
    if period_s <= 0 or peak <= low:
        return max(low, peak)
    phase = (elapsed_s % period_s) / period_s
    tri = 1.0 - abs(2.0 * phase - 1.0)
    return low + int(round((peak - low) * tri))


def generate_payload(input_ids: List[int], max_new_tokens: int) -> Dict[str, Any]:
    """The body of one greedy ``/generate`` request on token ids (EOS ignored: exactly
    ``max_new_tokens`` tokens come back)."""
    return {"input_ids": list(input_ids),
            "sampling_params": {"max_new_tokens": int(max_new_tokens), "temperature": 0, "ignore_eos": True}}


def check_ids(oracle: Any, prompt: List[int], output_ids: Any, max_new_tokens: int) -> Optional[int]:
    """Index of the first output token that is not the oracle's continuation of ``prompt`` (the
    length when one is short or long), or None when the output is it exactly."""
    got = list(output_ids or [])
    want = oracle.continuation(prompt, max_new_tokens)
    bad = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None)
    if bad is None and len(got) != len(want):
        bad = min(len(got), len(want))
    return bad


class ClosedLoop:
    """``workers`` threads, each calling ``send(worker_index)`` back to back while it is active
    (``active(elapsed_s)`` workers are, default all). ``send`` makes one request and returns its
    record (a dict, kept in :attr:`records`); an exception is counted in :attr:`errors` (its
    first 200 characters) and the worker pauses ERROR_PAUSE_S before it tries again."""

    def __init__(self, send: Callable[[int], Dict[str, Any]], workers: int,
                 active: Optional[Callable[[float], int]] = None):
        if workers < 1:
            raise ValueError(f"a closed loop needs >= 1 worker, got {workers}")
        self.send = send
        self.workers = workers
        self.active = active or (lambda _t: workers)
        self.records: List[Dict[str, Any]] = []
        self.errors: List[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: List[threading.Thread] = []
        self.started_at: Optional[float] = None

    def elapsed(self) -> float:
        """Seconds since :meth:`start` (0 before)."""
        return 0.0 if self.started_at is None else time.monotonic() - self.started_at

    def start(self) -> "ClosedLoop":
        self.started_at = time.monotonic()
        for i in range(self.workers):
            t = threading.Thread(target=self._run, args=(i,), name=f"closed-loop-{i}", daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def _run(self, i: int) -> None:
        while not self._stop.is_set():
            if i >= self.active(self.elapsed()):
                time.sleep(IDLE_S)
                continue
            try:
                rec = self.send(i)
            except Exception as exc:  # noqa: BLE001 - counted; the load goes on
                with self._lock:
                    self.errors.append(f"{type(exc).__name__}: {exc}"[:200])
                time.sleep(ERROR_PAUSE_S)
                continue
            with self._lock:
                self.records.append(rec)

    def stop(self, timeout_s: float = 600.0) -> bool:
        """Send no new request, wait for those in flight; False if one is still running after
        ``timeout_s``."""
        self._stop.set()
        deadline = time.monotonic() + timeout_s
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self._threads)

    def snapshot(self) -> List[Dict[str, Any]]:
        """The records so far (a copy)."""
        with self._lock:
            return list(self.records)
