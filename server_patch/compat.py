"""What the gate supports, checked loudly: an unsupported setup refuses to start, with the reason.

The gate never guesses which EAGLE worker runs: :func:`classify_worker` reads the class of the
live ``scheduler.draft_worker`` object (SGLang 0.5.12 picks ``EAGLEWorkerV2`` when the overlap
scheduler is on, else ``EAGLEWorker``: ``speculative/spec_info.py:115-191``).
"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

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
    mode = g("disaggregation_mode", "null") or "null"
    if mode != "null":
        reasons.append(
            f"PD disaggregation (--disaggregation-mode {mode}) is not supported: its decode event loop "
            "schedules through get_next_disagg_decode_batch_to_run, which the gate does not hook, so it "
            "would never decide"
        )
    return reasons


#: ``ModelRunner`` properties of SGLang 0.5.12 that name a hybrid linear-attention / mamba target
#: (``model_executor/model_runner.py``): ``mambaish_config`` covers all of them and the registry
HYBRID_CONFIGS = ("mambaish_config", "hybrid_gdn_config", "mamba2_config", "kimi_linear_config",
                  "hybrid_lightning_config")


def target_model_reason(target_runner: Any) -> Optional[str]:
    """Why the gate cannot run with this target ``ModelRunner``, or None. A hybrid
    linear-attention or mamba target keeps per-request recurrent state, which SGLang's verify
    handles on paths of its own (intermediate states per draft token); the OFF step has been
    validated on full-attention targets only, so such a target is refused, not guessed at."""
    for name in HYBRID_CONFIGS:
        try:
            config = getattr(target_runner, name, None)
        except Exception:  # a property that cannot answer for this model: not that kind
            config = None
        if config is not None:
            kind = type(config).__name__
            return (f"hybrid linear-attention / mamba targets ({kind}, ModelRunner.{name}) are not "
                    "supported: the OFF step is validated on full-attention targets only")
    return None


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
