"""The verdict of a sampled run-time proof, one rule for every mechanism that has one.

Every OFF-path cut that puts together state SGLang would have built (the lean v1 step, the lean v2
verify, the KV-only and deferred draft K/V, the fused fa3 verify metadata) checks itself on the
steps ``contract.sampled`` picks and stops for the server's life at the first failure. At TP > 1
the ranks must stop together (the cut and SGLang's path run different kernels and collectives, so
one rank alone falling back would hang the others): every rank checks the same step numbers and
the verdict is an all-reduce of "this rank failed".

A check waits for the GPU (and some run a reference forward), so the decode step it runs in is
slower than the mechanism it proves: :func:`note_check` counts every check this process ran, and
the auto threshold leaves the step times of the periods with a check out of its estimates
(``scheduler_hooks.on_decode_result``; the first PROOF_FIRST OFF steps of a server are all checked).
"""

from __future__ import annotations

import logging
from typing import Callable, Optional

logger = logging.getLogger("server_patch.spec_gate")


_checks_run = 0


def note_check() -> None:
    """Count one sampled check (a sync, maybe a reference forward) run in this process now."""
    global _checks_run
    _checks_run += 1


def checks_run() -> int:
    """How many sampled checks this process has run (:func:`note_check`)."""
    return _checks_run


class SampledProof:
    """Counters of a sampled run-time proof: ``checks``, ``mismatches`` (this rank's) and ``ok``,
    False from the first failed check on any TP rank on.

    Args:
        any_rank: ``any_rank(flag)`` is True on every rank when some rank passed True (an
            all-reduce on the TP CPU group at TP > 1; ``bool`` at TP 1).
    """

    def __init__(self, any_rank: Callable[[bool], bool] = bool):
        self.any_rank = any_rank
        self.checks = 0
        self.mismatches = 0
        self.ok = True

    def verdict(self, failure: Optional[str], fallback: str) -> bool:
        """Count one check whose outcome is ``failure`` (None: passed; else what differed, logged as
        an error with ``fallback``, what the server does instead from now on). Every TP rank must
        call it at the same check. Returns ``ok``."""
        self.checks += 1
        note_check()
        if failure is not None:
            self.mismatches += 1
            logger.error("spec_gate: %s; %s, on every TP rank", failure, fallback)
        if self.any_rank(failure is not None) and self.ok:
            self.ok = False
            if failure is None:
                logger.error("spec_gate: another TP rank's check failed (check %d); %s", self.checks, fallback)
        return self.ok
