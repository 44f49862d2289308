"""The OFF step's decode-kernel verify (server_patch/off_attention.py), against stand-in backends.

The kernels themselves are SGLang's; what is ours is the routing: which backends are converted,
that TARGET_VERIFY metadata becomes DECODE metadata over ``seq_lens + 1`` (eager, capture and
replay), that attention goes to ``forward_decode``, that every other mode is untouched, and the
sampled ``req_to_token[r, seq_len] == out_cache_loc`` proof. The kernel-level equivalence runs
on the GPU in ``test_gpu_off_attention.py``.
"""

from __future__ import annotations

import types

import pytest
import torch

from server_patch import contract, off_attention


class Mode:
    def __init__(self, name):
        self.name = name

    def is_target_verify(self):
        return self.name == "verify"

    def is_draft_extend(self, include_v2=False):
        return self.name == "draft_extend" or (include_v2 and self.name == "draft_extend_v2")

    def __repr__(self):
        return self.name


DECODE, VERIFY, EXTEND = Mode("decode"), Mode("verify"), Mode("extend")
DRAFT_EXTEND, DRAFT_EXTEND_V2 = Mode("draft_extend"), Mode("draft_extend_v2")


class FakeTriton:
    """Records what the base class is asked; same method signatures as SGLang 0.5.12's."""

    def __init__(self, req_to_token=None, **attrs):
        self.calls = []
        self.num_draft_tokens = 1
        self.speculative_num_steps = 0
        self.sliding_window_size = None
        self.use_mla = False
        self.enable_deterministic = False
        self.req_to_token = req_to_token
        self.__dict__.update(attrs)

    def init_forward_metadata(self, forward_batch):
        self.calls.append(("eager", forward_batch.forward_mode, forward_batch.seq_lens.tolist(),
                           forward_batch.seq_lens_sum, forward_batch.spec_info))

    def init_forward_metadata_capture_cuda_graph(self, bs, num_tokens, req_pool_indices, seq_lens,
                                                 encoder_lens, forward_mode, spec_info):
        self.calls.append(("capture", bs, num_tokens, seq_lens.tolist(), forward_mode, spec_info))

    def init_forward_metadata_replay_cuda_graph(self, bs, req_pool_indices, seq_lens, seq_lens_sum,
                                                encoder_lens, forward_mode, spec_info, seq_lens_cpu):
        self.calls.append(("replay", bs, seq_lens.tolist(), seq_lens_sum, forward_mode, spec_info,
                           None if seq_lens_cpu is None else seq_lens_cpu.tolist()))

    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True, sinks=None):
        self.calls.append(("extend", forward_batch.forward_mode, sinks))
        return "extend-out"

    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True, sinks=None):
        self.calls.append(("decode", forward_batch.forward_mode, save_kv_cache, sinks))
        return "decode-out"


def convert(backend, role=off_attention.TARGET):
    return off_attention.use_decode_kernel(backend, triton_cls=FakeTriton, decode_mode=DECODE, role=role)


def verify_batch(req_to_token, rows, seq_lens, out_cache_loc, mode=VERIFY):
    return types.SimpleNamespace(
        forward_mode=mode, batch_size=len(rows), req_pool_indices=torch.tensor(rows),
        seq_lens=torch.tensor(seq_lens), seq_lens_sum=sum(seq_lens),
        out_cache_loc=torch.tensor(out_cache_loc), spec_info="verify-input")


@pytest.fixture
def pool():
    # 4 request rows, 8 positions; slot numbers are unique so a wrong read is visible
    return torch.arange(32, dtype=torch.int32).reshape(4, 8) + 100


def test_only_a_plain_one_token_triton_backend_is_converted():
    class Sub(FakeTriton):
        pass

    cases = [
        (FakeTriton(), None),
        (Sub(), "is not TritonAttnBackend"),
        (FakeTriton(num_draft_tokens=4), "num_draft_tokens=4"),
        (FakeTriton(sliding_window_size=128), "sliding-window"),
        (FakeTriton(use_mla=True), "MLA"),
        (FakeTriton(enable_deterministic=True), "deterministic"),
    ]
    for backend, reason in cases:
        got = off_attention.decode_kernel_reason(backend, FakeTriton)
        if reason is None:
            assert got is None
        else:
            assert reason in got
    kept = FakeTriton(num_draft_tokens=4)
    assert convert(kept) == off_attention.EXTEND_KERNEL and type(kept) is FakeTriton
    b = FakeTriton()
    assert convert(b) == off_attention.DECODE_KERNEL
    assert isinstance(b, FakeTriton) and type(b) is not FakeTriton


def test_verify_metadata_becomes_decode_metadata_over_one_more_key(pool):
    b = FakeTriton(pool)
    convert(b)
    fb = verify_batch(pool, [2, 0], [3, 5], [int(pool[2, 3]), int(pool[0, 5])])
    b.init_forward_metadata(fb)
    kind, mode, seq_lens, seq_lens_sum, spec_info = b.calls[-1]
    assert (kind, mode, seq_lens, seq_lens_sum, spec_info) == ("eager", DECODE, [4, 6], 10, None)

    b.init_forward_metadata_capture_cuda_graph(8, 8, torch.zeros(8, dtype=torch.long),
                                               torch.ones(8, dtype=torch.long), None, VERIFY, "dummy")
    assert b.calls[-1] == ("capture", 8, 8, [2] * 8, DECODE, None)

    b._replay_forward_batch = fb
    b.init_forward_metadata_replay_cuda_graph(4, torch.tensor([2, 0, 0, 0]), torch.tensor([3, 5, 1, 1]),
                                              10, None, VERIFY, "verify-input", torch.tensor([3, 5, 1, 1]))
    assert b.calls[-1] == ("replay", 4, [4, 6, 2, 2], 14, DECODE, None, [4, 6, 2, 2])


def test_other_modes_pass_through_unchanged(pool):
    b = FakeTriton(pool)
    convert(b)
    fb = verify_batch(pool, [1], [4], [0], mode=EXTEND)
    b.init_forward_metadata(fb)
    assert b.calls[-1] == ("eager", EXTEND, [4], 4, "verify-input")
    b.init_forward_metadata_capture_cuda_graph(2, 2, None, torch.tensor([1, 1]), None, DECODE, "s")
    assert b.calls[-1] == ("capture", 2, 2, [1, 1], DECODE, "s")
    b.init_forward_metadata_replay_cuda_graph(2, None, torch.tensor([3, 4]), 7, None, EXTEND, "s", None)
    assert b.calls[-1] == ("replay", 2, [3, 4], 7, EXTEND, "s", None)
    assert b.forward_extend(torch.zeros(1, 8), None, None, None, fb, sinks="x") == "extend-out"
    assert b.calls[-1] == ("extend", EXTEND, "x")


def test_verify_attention_runs_the_decode_kernel(pool):
    b = FakeTriton(pool)
    convert(b)
    fb = verify_batch(pool, [1], [4], [int(pool[1, 4])])
    assert b.forward_extend(torch.zeros(1, 8), None, None, None, fb, save_kv_cache=True, sinks=None) == "decode-out"
    assert b.calls[-1] == ("decode", VERIFY, True, None)


def test_index_check_proves_the_own_key_and_counts_a_wrong_one(pool):
    b = FakeTriton(pool)
    convert(b)
    good = verify_batch(pool, [3, 1], [0, 6], [int(pool[3, 0]), int(pool[1, 6])])
    b.init_forward_metadata(good)
    assert (b.spec_gate_checks, b.spec_gate_mismatches) == (1, 0)
    bad = verify_batch(pool, [3, 1], [0, 6], [int(pool[3, 0]), int(pool[1, 5])])
    b._replay_forward_batch = bad
    b.init_forward_metadata_replay_cuda_graph(2, bad.req_pool_indices, bad.seq_lens, 6, None, VERIFY, None, None)
    assert (b.spec_gate_checks, b.spec_gate_mismatches) == (2, 1)


def test_index_check_is_sampled_after_the_first_steps(pool):
    b = FakeTriton(pool)
    convert(b)
    fb = verify_batch(pool, [0], [2], [int(pool[0, 2])])
    n = contract.PROOF_FIRST + 2 * contract.PROOF_EVERY
    for _ in range(n):
        b.init_forward_metadata(fb)
    # the first CHECK_FIRST calls, then calls 256 and 512 (multiples of CHECK_EVERY)
    assert b.spec_gate_checks == contract.PROOF_FIRST + 2
    assert b.spec_gate_calls == n


def test_off_state_reports_kernel_and_checks_from_its_backend():
    from server_patch.off_state import OffStepRunner

    runner = OffStepRunner.__new__(OffStepRunner)
    backend = FakeTriton()
    convert(backend)
    backend.spec_gate_checks, backend.spec_gate_mismatches = 7, 0
    runner.off_state = types.SimpleNamespace(target_attn_backend=backend)
    assert (runner.off_attention_checks, runner.off_attention_mismatches) == (7, 0)
    runner.off_state = types.SimpleNamespace(target_attn_backend=object())  # verify-kernel backend
    assert (runner.off_attention_checks, runner.off_attention_mismatches) == (0, 0)


def test_only_the_off_state_build_sees_the_converted_backend(monkeypatch):
    """The wrapper around ``_get_attention_backend`` lives only while the OFF state is built."""
    from server_patch.off_state import OffStepRunner

    class TargetRunner:
        def _get_attention_backend(self, init_new_workspace=False):
            return FakeTriton()

    real = off_attention.use_decode_kernel
    monkeypatch.setattr(off_attention, "use_decode_kernel",
                        lambda b: real(b, triton_cls=FakeTriton, decode_mode=DECODE))
    target = TargetRunner()
    runner = OffStepRunner.__new__(OffStepRunner)
    runner.off_target_attention = off_attention.EXTEND_KERNEL
    with runner._decode_kernel_for_off_target(target):
        built = target._get_attention_backend(init_new_workspace=True)
    assert runner.off_target_attention == off_attention.DECODE_KERNEL
    assert type(built) is not FakeTriton and isinstance(built, FakeTriton)
    assert "_get_attention_backend" not in vars(target)  # the class method is back
    assert type(target._get_attention_backend()) is FakeTriton


def test_escape_hatch_keeps_the_extend_kernel(monkeypatch):
    monkeypatch.setenv(off_attention.ENV_SWITCH, "0")
    b = FakeTriton()
    assert convert(b) == off_attention.EXTEND_KERNEL and type(b) is FakeTriton
    monkeypatch.setenv(off_attention.ENV_SWITCH, "target")
    assert convert(FakeTriton(), off_attention.DRAFT_EXTEND) == off_attention.EXTEND_KERNEL
    assert convert(FakeTriton(), off_attention.TARGET) == off_attention.DECODE_KERNEL


def test_draft_extend_backend_needs_zero_draft_steps():
    assert off_attention.decode_kernel_reason(FakeTriton(num_draft_tokens=4), FakeTriton,
                                              off_attention.DRAFT_EXTEND) is None
    assert "speculative_num_steps=3" in off_attention.decode_kernel_reason(
        FakeTriton(speculative_num_steps=3), FakeTriton, off_attention.DRAFT_EXTEND)


@pytest.mark.parametrize("mode", [DRAFT_EXTEND, DRAFT_EXTEND_V2])
def test_draft_extend_attends_over_its_seq_lens_which_include_the_new_token(pool, mode):
    b = FakeTriton(pool)
    convert(b, off_attention.DRAFT_EXTEND)
    # draft-extend seq_lens include the new token: its key is the last one, at seq_len - 1
    fb = verify_batch(pool, [2, 0], [4, 6], [int(pool[2, 3]), int(pool[0, 5])], mode=mode)
    b.init_forward_metadata(fb)
    assert b.calls[-1] == ("eager", DECODE, [4, 6], 10, None)
    assert (b.spec_gate_checks, b.spec_gate_mismatches) == (1, 0)
    b.init_forward_metadata_capture_cuda_graph(4, 4, None, torch.ones(4, dtype=torch.long), None, mode, "s")
    assert b.calls[-1] == ("capture", 4, 4, [1, 1, 1, 1], DECODE, None)
    b._replay_forward_batch = fb
    b.init_forward_metadata_replay_cuda_graph(4, None, torch.tensor([4, 6, 1, 1]), 12, None, mode, "s", None)
    assert b.calls[-1] == ("replay", 4, [4, 6, 1, 1], 12, DECODE, None, None)
    assert b.forward_extend(torch.zeros(2, 8), None, None, None, fb) == "decode-out"
    # a target-verify batch on the draft-extend backend is not its business
    vb = verify_batch(pool, [2], [3], [int(pool[2, 3])])
    b.init_forward_metadata(vb)
    assert b.calls[-1][1] is VERIFY


def test_more_than_one_token_per_request_keeps_the_extend_kernel(pool):
    b = FakeTriton(pool)
    convert(b, off_attention.DRAFT_EXTEND)
    fb = verify_batch(pool, [2], [5], [1, 2], mode=DRAFT_EXTEND)  # 2 tokens for 1 request
    b.init_forward_metadata(fb)
    assert b.calls[-1] == ("eager", DRAFT_EXTEND, [5], 5, "verify-input")
    assert b.forward_extend(torch.zeros(2, 8), None, None, None, fb) == "extend-out"
    b.init_forward_metadata_capture_cuda_graph(2, 4, None, torch.ones(2, dtype=torch.long), None, DRAFT_EXTEND, "s")
    assert b.calls[-1][4] is DRAFT_EXTEND


def test_replay_counter_hands_the_batch_to_the_backend_during_replay():
    from server_patch.off_state import _ReplayCounter

    backend = types.SimpleNamespace(_replay_forward_batch=None)
    seen = []

    class Runner:
        def replay(self, forward_batch):
            seen.append(backend._replay_forward_batch)
            return "out"

    r = Runner()
    counter = _ReplayCounter(r, hand_batch_to=backend)
    assert r.replay("fb") == "out" and seen == ["fb"] and counter.count == 1
    assert backend._replay_forward_batch is None
