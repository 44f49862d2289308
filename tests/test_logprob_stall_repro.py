"""The log signature of the 82 s v2 stall (bench/results/h200-2026-12-02c/logprob-stall-analysis.md),
replayed through the plugin's scheduler hooks inside a miniature of SGLang 0.5.12's overlap loop.

What it pins (CPU, no SGLang, no GPU): in ``event_loop_overlap`` (``scheduler.py:1575-1613``) a
prefill's ``Prefill batch`` line is written by ``process_batch_result_prefill``
(``scheduler_output_processor_mixin.py:402``), i.e. one iteration *after* the prefill was launched,
after the next batch was decided and launched; its ``#running-req`` is counted when the prefill
batch was built (``scheduler.py:2835``). So the stalled log's ``speculation off (batch 12 >= 1)``
before ``Prefill batch, #new-seq: 11, ... #running-req: 1`` is the normal order: the 11 requests
were prefilled at 17:50:06 (merged with the 1 running request into the decode batch of 12), and the
scheduler stopped between the gate's OFF decision for that batch and the end of processing the
11-request prefill's result. This does not reproduce a hang (none is known on the CPU); it shows
which code the stall window contains: the OFF step's launch and SGLang's prefill-result processing.
"""

from __future__ import annotations

import collections
import logging
import types

from server_patch import scheduler_hooks as sh
from server_patch.contract import GateConfig
from server_patch.gate import SpecGate

SGLANG_LOG = logging.getLogger("mini_sglang.scheduler")


class Mode:
    def __init__(self, decode: bool):
        self.decode = decode

    def is_decode(self) -> bool:
        return self.decode

    def is_extend(self) -> bool:
        return not self.decode


class Batch:
    def __init__(self, reqs, decode: bool, running_at_build: int = 0):
        self.reqs = list(reqs)
        self.forward_mode = Mode(decode)
        self.running_at_build = running_at_build  # PrefillStats.num_running_reqs (scheduler.py:2835)

    def batch_size(self) -> int:
        return len(self.reqs)


class Runner:
    """Stands in for OffStepRunner: records which decode batches ran as OFF steps."""

    def __init__(self, worker, version, any_rank=bool):
        self.off_batches = []
        self.draft_stale = False
        self.has_off_cuda_graph = True

    def run_off_step(self, forward, batch, resume=False):
        self.off_batches.append(batch.batch_size())
        return forward(batch)


class Worker:
    """EAGLEWorkerV2 stand-in (the class name decides the spec version)."""

    topk, speculative_num_steps, speculative_num_draft_tokens = 1, 3, 4

    def forward_batch_generation(self, batch):
        return types.SimpleNamespace()


class MiniOverlapLoop:
    """The order of 0.5.12's ``event_loop_overlap``: recv -> get_next_batch_to_run (+ the plugin's
    AFTER hook) -> run_batch -> process the *previous* batch's result -> last_batch = batch."""

    def __init__(self, threshold: int):
        worker = type("EAGLEWorkerV2", (Worker,), {})()
        self.sched = types.SimpleNamespace(
            draft_worker=worker, enable_overlap=True, tp_rank=0, tp_size=1, max_running_requests=64,
            server_args=types.SimpleNamespace(speculative_algorithm="EAGLE3", cuda_graph_max_bs=64))
        self.runtime = sh.GateRuntime(self.sched, SpecGate(GateConfig(threshold, 0)), runner_factory=Runner)
        setattr(self.sched, sh.GATE_ATTR, self.runtime)
        self.inbox = collections.deque()
        self.waiting, self.running = [], []
        self.last_batch = None
        self.result_queue = collections.deque()

    def recv(self):
        while self.inbox:
            kind, value = self.inbox.popleft()
            if kind == "generate":
                self.waiting.extend(value)
            else:  # set_internal_state: the plugin's AROUND hook answers it
                sh.around_set_internal_state(None, self.sched, types.SimpleNamespace(
                    server_args={sh.THRESHOLD_KEY: value}))

    def get_next_batch_to_run(self):
        if self.last_batch is not None and self.last_batch.forward_mode.is_extend():
            self.running.extend(self.last_batch.reqs)  # merge the last prefill (scheduler.py:2522-2549)
        if self.waiting:
            ret = Batch(self.waiting, decode=False, running_at_build=len(self.running))
            self.waiting = []
        elif self.running:
            ret = Batch(self.running, decode=True)
        else:
            ret = None
        sh.after_get_next_batch_to_run(ret, self.sched)
        return ret

    def process(self, batch, result):
        if batch.forward_mode.is_extend():  # process_batch_result_prefill ends with its stats line
            SGLANG_LOG.info("Prefill batch, #new-seq: %d, #running-req: %d", batch.batch_size(),
                            batch.running_at_build)

    def iteration(self):
        self.recv()
        batch = self.get_next_batch_to_run()
        if batch is not None:
            result = self.sched.draft_worker.forward_batch_generation(batch)  # run_batch
            self.result_queue.append((batch, result))
        if self.last_batch is not None:
            self.process(*self.result_queue.popleft())
        self.last_batch = batch


def test_the_stalled_logs_order_is_the_overlap_loops_normal_order(monkeypatch, caplog):
    monkeypatch.setattr(sh, "_reply", lambda updated, args: (updated, args))
    monkeypatch.setattr(sh, "_global_server_args", lambda: types.SimpleNamespace())
    caplog.set_level(logging.INFO)
    loop = MiniOverlapLoop(threshold=64)  # 17:50:05 threshold 1 -> 64, server idle
    loop.inbox.append(("generate", ["r0"]))  # the second wave's first request
    loop.iteration()  # P1 built (1 seq, 0 running) and launched; nothing logged yet
    loop.inbox.append(("generate", [f"r{i}" for i in range(1, 12)]))
    loop.iteration()  # P1 merged; P2 built (11 seqs, 1 running) and launched; P1's line
    loop.inbox.append(("set", 1))  # the POST answered at 17:50:06
    loop.iteration()  # threshold line; decode batch 1 + 11 = 12 -> OFF; OFF step launched; P2's line

    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "Prefill batch, #new-seq: 1, #running-req: 0",
        "spec_gate: threshold 64 -> 1",
        "spec_gate: speculation off (batch 12 >= 1)",
        # in the GPU log this line came 82 s late (17:51:28): the stall lies between the OFF
        # decision above and the end of process_batch_result_prefill for these 11 requests
        "Prefill batch, #new-seq: 11, #running-req: 1",
    ]
    assert loop.runtime.runner.off_batches == [12]  # the batch of 12 ran the plugin's OFF step
    assert not loop.waiting  # no request was left in the queue
