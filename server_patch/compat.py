"""What the gate supports, checked loudly: an unsupported setup refuses to start, with the reason.

The gate never guesses which EAGLE worker runs: :func:`classify_worker` reads the class of the
live ``scheduler.draft_worker`` object (SGLang 0.5.12 picks ``EAGLEWorkerV2`` when the overlap
scheduler is on, else ``EAGLEWorker``: ``speculative/spec_info.py:115-191``).
"""

from __future__ import annotations

from typing import Any, List, Tuple

from server_patch import SUPPORTED_SGLANG_VERSION
from server_patch.contract import THRESHOLD_FLAG, WORKER_FAMILIES

# Exact class names: a subclass (e.g. a multi-layer or standalone worker) has other draft logic.
KNOWN_WORKERS = WORKER_FAMILIES
SUPPORTED_ALGORITHMS = ("EAGLE", "EAGLE3")


class UnsupportedSetup(RuntimeError):
    """The server asked for the speculation gate in a setup the gate cannot run correctly."""


def sglang_version() -> str:
    """The installed SGLang version string, or "not installed"."""
    try:
        from importlib.metadata import version

        return version("sglang")
    except Exception:  # PackageNotFoundError and broken metadata alike
        return "not installed"


def check_sglang_version(found: str) -> None:
    """Raise :class:`UnsupportedSetup` unless ``found`` is the supported SGLang version."""
    if found != SUPPORTED_SGLANG_VERSION:
        raise UnsupportedSetup(
            f"specconsole's speculation gate supports SGLang {SUPPORTED_SGLANG_VERSION} only; "
            f"found {found}. Install sglang=={SUPPORTED_SGLANG_VERSION} or drop "
            f"{THRESHOLD_FLAG}."
        )


def unsupported_reasons(server_args: Any) -> List[str]:
    """Why the gate cannot run with these (post-``__post_init__``) ``ServerArgs``; empty = fine."""
    g = lambda name, default=None: getattr(server_args, name, default)  # noqa: E731
    reasons = []
    algo = g("speculative_algorithm")
    if algo not in SUPPORTED_ALGORITHMS:
        reasons.append(
            f"speculative algorithm {algo!r}: the gate needs --speculative-algorithm EAGLE or EAGLE3"
        )
    if g("enable_dp_attention", False):
        reasons.append("data-parallel attention (--enable-dp-attention) is not supported")
    if g("enable_multi_layer_eagle", False):
        reasons.append("multi-layer EAGLE is not supported")
    if g("enable_two_batch_overlap", False):
        reasons.append("two-batch overlap (--enable-two-batch-overlap) is not supported")
    if g("speculative_adaptive", False):
        reasons.append(
            "--speculative-adaptive swaps the same runtime states; combine it with the gate is not supported"
        )
    if g("enable_pdmux", False):
        reasons.append("PD multiplexing (--enable-pdmux) is not supported")
    if (g("pp_size", 1) or 1) > 1:
        reasons.append("pipeline parallelism (--pp-size > 1) is not supported")
    if (g("page_size", 1) or 1) > 1:
        reasons.append("--page-size > 1 is not supported (the OFF step is validated with page size 1)")
    return reasons


def check_server_args(server_args: Any) -> None:
    """Raise :class:`UnsupportedSetup` listing every reason the setup is unsupported."""
    reasons = unsupported_reasons(server_args)
    if reasons:
        raise UnsupportedSetup("speculation gate refused: " + "; ".join(reasons))


def classify_worker(worker: Any) -> Tuple[str, str]:
    """``(class name, "v1"|"v2")`` of the live draft worker object.

    Raises:
        UnsupportedSetup: a worker class the gate does not know.
    """
    name = type(worker).__name__
    version = KNOWN_WORKERS.get(name)
    if version is None:
        raise UnsupportedSetup(
            f"speculation gate refused: unknown speculative worker class {name} "
            f"(supported: {', '.join(KNOWN_WORKERS)})"
        )
    return name, version
