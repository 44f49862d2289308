"""CPU cost per decode step of the gate's scheduler hooks on an ON (speculating) step.

Why: at 1-8 concurrent requests speculative decoding is CPU-bound (the GPU waits for the
scheduler's launches), so any CPU time the gate adds to an ON step shows in tok/s. In
``bench/results/x2-2026-11-30c`` the gate read 3-7% below always-on at 1-4 requests; this
measures how much of that the hooks can be. It drives the real hook functions of
``server_patch.scheduler_hooks`` around stand-in scheduler/worker objects (no SGLang, no GPU), so
the number is the hooks' own Python cost, timed per step with ``timeit`` (best of ``--repeat``):

- ``bare``: the stand-in originals called directly (the floor of this harness);
- ``no_gate``: the hooks on a scheduler without a gate (``python -m sglang.launch_server`` with
  this package installed: every hook is a pass-through);
- ``gate_on``: the gate enabled, batch below the threshold (the ON path: one decision, the
  forward wrapper, the metrics hooks).

    python -m bench.hook_overhead [--bs 1,64] [--steps 20000] [--repeat 5] [--out FILE]

Prints (and with ``--out`` writes) JSON: microseconds per decode step per variant and batch
size, and the gate's extra over ``no_gate``. Not included: SGLang's ``HookRegistry`` wrapper
calls (present in ``no_gate`` and ``gate_on`` alike on a real server).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import timeit
import types
from pathlib import Path
from typing import Any, Dict, List, Optional

from server_patch import scheduler_hooks as sh
from server_patch.contract import GateConfig
from server_patch.gate import SpecGate


class _Mode:
    def is_decode(self) -> bool:
        return True


class _Batch:
    def __init__(self, bs: int):
        self.forward_mode = _Mode()
        self.forward_iter = 0  # advanced a step at a time: the step timer and prefill estimate see contiguous results
        self.reqs = [types.SimpleNamespace(spec_verify_ct=0, spec_num_correct_drafts=0,
                                           spec_correct_drafts_histogram=[]) for _ in range(bs)]

    def batch_size(self) -> int:
        return len(self.reqs)


class EAGLEWorkerV2:  # the class name is what the gate classifies
    topk, speculative_num_steps, speculative_num_draft_tokens = 1, 3, 4

    def forward_batch_generation(self, batch):
        return types.SimpleNamespace()


class _Runner:
    has_off_cuda_graph = True
    off_steps_cuda_graph = 0

    def __init__(self, worker, version, any_rank=bool):
        self.off_target_graph = self.off_draft_extend_graph = self.on_target_graph = types.SimpleNamespace(count=0)


def _scheduler(gate: bool, threshold: int = 10_000):
    sched = types.SimpleNamespace(
        draft_worker=EAGLEWorkerV2(), enable_overlap=True, tp_rank=0, tp_size=1, max_running_requests=128,
        server_args=types.SimpleNamespace(speculative_algorithm="EAGLE3", cuda_graph_max_bs=128),
        spec_num_forward_ct=1, spec_num_accept_tokens=3, spec_total_num_forward_ct=0,
        spec_total_num_accept_tokens=0)
    if gate:
        runtime = sh.GateRuntime(sched, SpecGate(GateConfig(threshold=threshold, hysteresis=0)), runner_factory=_Runner)
        setattr(sched, sh.GATE_ATTR, runtime)
    return sched


def _originals():
    def process_batch_result_decode(self, batch, result):
        return None

    def update_spec_metrics(self, bs, num_correct_drafts):
        return None

    def resolve_spec_overlap_tokens(self, result, batch):
        return None

    return process_batch_result_decode, update_spec_metrics, resolve_spec_overlap_tokens


def step_functions(bs: int) -> Dict[str, Any]:
    """One decode step per variant as a no-argument callable (see the module docstring)."""
    process, update, resolve = _originals()
    batch, result = _Batch(bs), types.SimpleNamespace()
    correct = 2 * bs

    def bare_step(sched=_scheduler(False)):
        sched.draft_worker.forward_batch_generation(batch)
        resolve(sched, result, batch)
        process(sched, batch, result)
        update(sched, bs, correct)

    def hooked_step(sched):
        batch.forward_iter += 1
        sh.after_get_next_batch_to_run(batch, sched)
        res = sched.draft_worker.forward_batch_generation(batch)
        sh.around_resolve_spec_overlap_tokens(resolve, sched, res, batch)
        sh.around_process_batch_result_decode(process, sched, batch, res)
        sh.around_update_spec_metrics(update, sched, bs, correct)

    no_gate, gate_on = _scheduler(False), _scheduler(True, threshold=bs + 1)  # above the batch: ON

    def gate_step():
        hooked_step(gate_on)

    gate_step.runtime = getattr(gate_on, sh.GATE_ATTR)  # for tests: the gate this step drives
    return {"bare": bare_step, "no_gate": lambda: hooked_step(no_gate), "gate_on": gate_step}


def measure(sizes: List[int], steps: int, repeat: int) -> Dict[str, Any]:
    """``{str(bs): {variant: us_per_step, "gate_extra_us": gate_on - no_gate}}`` (best of ``repeat``)."""
    out: Dict[str, Any] = {}
    for bs in sizes:
        row = {}
        for name, fn in step_functions(bs).items():
            best = min(timeit.repeat(fn, number=steps, repeat=repeat))
            row[name] = round(1e6 * best / steps, 3)
        row["gate_extra_us"] = round(row["gate_on"] - row["no_gate"], 3)
        out[str(bs)] = row
    return out


def main(argv: Optional[List[str]] = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.hook_overhead", description=__doc__.splitlines()[0])
    ap.add_argument("--bs", default="1,64", help="decode batch sizes (requests), comma-separated")
    ap.add_argument("--steps", type=int, default=20_000, help="decode steps per timing")
    ap.add_argument("--repeat", type=int, default=5, help="timings per variant; the best is kept")
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    a = ap.parse_args(argv)
    try:
        sizes = [int(x) for x in a.bs.split(",") if x.strip()]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1:
        ap.error(f"--bs must be comma-separated batch sizes >= 1, got {a.bs!r}")
    if a.steps < 1 or a.repeat < 1:
        ap.error("--steps and --repeat must be >= 1")
    if a.out is not None:
        if a.out.is_dir() or not a.out.parent.is_dir():
            ap.error(f"--out {a.out}: give a file in an existing directory")
        try:  # before measuring, not after
            a.out.touch()
        except OSError as exc:
            ap.error(f"--out {a.out}: cannot write it ({exc.strerror or exc})")
    result = {
        "what": "CPU microseconds per decode step of the gate's scheduler hooks (ON path), stand-in "
                "scheduler; see bench/hook_overhead.py",
        "command": "python -m bench.hook_overhead " + " ".join(argv if argv is not None else sys.argv[1:]),
        "python": platform.python_version(), "cpu": platform.processor() or platform.machine(),
        "us_per_step": measure(sizes, a.steps, a.repeat),
    }
    text = json.dumps(result, indent=1)
    print(text)
    if a.out is not None:
        a.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
