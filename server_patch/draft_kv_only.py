"""The OFF step's draft extend, KV cache only (EAGLE-3 draft, SGLang 0.5.12).

Why: an OFF step must keep the draft model's KV cache current (``off_state``), but the only
thing later steps read from an OFF step's draft forward is the K and V it stores for the new
token. EAGLE-3's draft K/V at a position depend only on that position's *input* (``fc`` of the
target's aux hidden states and the token's embedding, through the first layer's two input
norms, ``qkv_proj`` and the rotary embedding: ``models/llama_eagle3.py:86-110`` and
``models/llama.py:205-209,246`` in 0.5.12), not on the layer's attention output, MLP, final
norm or ``lm_head``. On the 8B-shaped pair those skipped parts are ~70% of the draft layer's
weight bytes (MLP 352 MB, ``o_proj`` 34 MB, ``lm_head`` 67 MB against ``fc`` + ``qkv_proj``
200 MB), read once per OFF step whatever the batch size.

What is *not* produced: the draft's output hidden state and top-k for the token after the new
one, which the first speculative step after an OFF stretch drafts from. So the gate runs one
full OFF step (the existing 1-token draft extend, its own CUDA graph) before speculation
resumes (``scheduler_hooks``: ``off_resume_steps``).

Proof at run time (``KvOnlyRunner``): on sampled KV-only steps the full OFF draft-extend graph
is replayed on the same batch right after, and the K/V it stores at the batch's cache slots must
equal, bit for bit, what the KV-only graph stored (same kernels on the same shapes). Where SGLang
captures no full OFF draft-extend graph (v2 on fa3 and every backend but triton:
``eagle_worker_v2.py`` ``init_cuda_graphs``, "TODO: support draft extend cuda graph for more
attention backends") the KV-only graph is captured all the same on v2 (``SPECCONSOLE_OFF_DRAFT_KV_ONLY_GRAPH``:
``0`` runs it eagerly; ``1`` asks for it on v1), since it calls no
attention (``NoAttentionBackend``), and its reference is SGLang's eager full draft extend
(``EagerDraftExtend``); the two run their GEMMs at different batch sizes (the graph's padded
one), so cuBLAS may pick other tiles and the K/V may differ by bf16 rounding: that proof accepts
``ROUNDING_RTOL``/``ROUNDING_ATOL`` and counts such checks (``inexact``); a wrong cache slot,
position or input differs by far more. The
synthetic test pair cannot show wrong draft K/V through outputs or accept length (its draft
``o_proj`` is zero), so this check is what proves it on the GPU. A mismatch turns KV-only steps
off for the rest of the server's life (logged as an error).

Supported draft: ``LlamaForCausalLMEagle3`` with one decoder layer (multi-layer EAGLE is refused
by the gate anyway), no multimodal RoPE, no sliding window, no quantized (scaled) KV cache. Any
other draft keeps the full OFF draft extend, and the startup log line says which one runs.
"""

from __future__ import annotations

import bisect
import contextlib
from typing import Any, Callable, Optional

from server_patch import options
from server_patch.proof import SampledProof

#: "0" keeps the full 1-token draft extend on every OFF step (escape hatch; costs OFF-step speed)
ENV_SWITCH = "SPECCONSOLE_OFF_DRAFT_KV_ONLY"
#: "0" keeps the full eager draft extend where SGLang has no OFF draft-extend CUDA graph (v2 + fa3,
#: ``--disable-cuda-graph``); by default the KV-only extend runs there eagerly where it gets no graph of
#: its own (:data:`GRAPH_ENV_SWITCH`; proven on v2 + fa3, 83 sampled checks; forced off 0.92-0.96x of
#: no speculation against 0.85-0.92x with the full extend: ``bench/results/h200-2026-12-03c/``)
EAGER_ENV_SWITCH = "SPECCONSOLE_OFF_DRAFT_KV_ONLY_EAGER"
#: "1" runs the KV-only extend on its own CUDA graph where SGLang captures no full OFF draft-extend
#: graph (v2 on fa3) instead of eagerly; "0" eagerly; unset: on for v2. Alone it was not faster on
#: the H200 (``bench/results/h200-2026-12-04/README.md``); with the lean draft-extend post-processing
#: it needs and the KV-only prefill, forced off on fa3 ran 0.934 / 0.960 / 0.945x of no speculation at
#: 32 / 64 / 128 requests against 0.933 / 0.901 / 0.928x without them, same run
#: (``bench/results/h200-2026-12-04b/``); proven bit for bit (97 + 156 checks)
GRAPH_ENV_SWITCH = "SPECCONSOLE_OFF_DRAFT_KV_ONLY_GRAPH"
#: "1" (unset: on for v2, off for v1 until proven there): while the gate is off, a prefill's draft
#: extend over the prompt stores only the draft's K/V
#: (``OffStepRunner.run_prefill``): a request that arrives while speculation is off pays no draft
#: attention, MLP or lm_head over its prompt; the decode batch after an off->on switch is the full
#: OFF step that refreshes what the first speculative step drafts from (as after KV-only OFF steps)
PREFILL_ENV_SWITCH = "SPECCONSOLE_OFF_PREFILL_KV_ONLY"
KV_ONLY = "kv-only"
FULL = "full"
#: how the KV-only extend runs (``spec_gate.off_kv_only_runs``)
CUDA_GRAPH = "cuda-graph"
EAGER = "eager"
#: what a proof against a reference at another batch size accepts, per token: |diff| <= ATOL + RTOL *
#: the token's largest |K| (or |V|): bf16 has 8 significant bits (2**-8 relative); 2**-6 allows a
#: few roundings of the fc / qkv_proj outputs
ROUNDING_RTOL = 2 ** -6
ROUNDING_ATOL = 2 ** -6


def unsupported_reason(model: Any) -> Optional[str]:
    """Why ``model`` (the draft model object) cannot run a KV-only extend, or None if it can."""
    if type(model).__name__ != "LlamaForCausalLMEagle3":
        return f"draft model {type(model).__name__} is not LlamaForCausalLMEagle3"
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if layers is None or len(layers) != 1:
        return "draft model does not have exactly one decoder layer"
    layer = layers[0]
    if not getattr(layer, "is_input_layer", False):
        return "draft layer 0 is not an EAGLE-3 input layer"
    if getattr(inner, "is_mrope_enabled", False):
        return "draft model uses multimodal RoPE"
    attn = getattr(getattr(layer, "self_attn", None), "attn", None)
    if attn is None or not hasattr(layer.self_attn, "forward_prepare_native"):
        return "draft attention has no forward_prepare_native"
    window = getattr(attn, "sliding_window_size", None)
    if window is not None and window != -1:
        return "draft attention uses a sliding window"
    if getattr(attn, "k_scale", None) is not None or getattr(attn, "v_scale", None) is not None:
        return "draft KV cache is scaled (quantized)"
    return None


def kv_store(model: Any) -> Callable:
    """The K/V-storing part of :func:`kv_only_forward`, for ``model`` (``LlamaForCausalLMEagle3``):
    ``store(input_ids, positions, hidden, token_to_kv_pool, out_cache_loc, embeds=None)`` computes
    the draft layer's K and V for T tokens and stores them at ``out_cache_loc``; returns the ``fc``
    output (T, hidden). Shapes: ``input_ids`` / ``positions`` / ``out_cache_loc`` (T,), ``hidden``
    (T, 3 * target_hidden) (the target's aux hidden states) or (T, hidden); ``embeds`` (T, hidden)
    replaces the token embeddings where given. Any number of tokens from any requests: a token's K/V
    depend on its own inputs only (module docstring)."""
    import torch

    inner = model.model
    layer = inner.layers[0]
    attn = layer.self_attn
    radix = attn.attn

    def store(input_ids, positions, hidden, token_to_kv_pool, out_cache_loc, embeds=None):
        if embeds is None:
            embeds = inner.embed_tokens(input_ids)
        if hidden.shape[-1] != embeds.shape[-1]:
            if inner.fc_norm is not None:
                chunks = hidden.chunk(inner.num_aux_hidden_states, dim=-1)
                hidden = torch.cat([norm(c) for norm, c in zip(inner.fc_norm, chunks)], dim=-1)
            hidden = inner.fc(hidden)
        x = torch.cat([layer.input_layernorm(embeds), layer.hidden_norm(hidden)], dim=-1)
        _, k, v = attn.forward_prepare_native(positions=positions, hidden_states=x)
        token_to_kv_pool.set_kv_buffer(
            radix,
            out_cache_loc,
            k.view(-1, radix.tp_k_head_num, radix.qk_head_dim),
            v.view(-1, radix.tp_v_head_num, radix.v_head_dim),
            radix.k_scale,
            radix.v_scale,
        )
        return hidden

    return store


def kv_only_forward(model: Any, output_cls: Any = None, last_of_each_request: bool = False) -> Callable:
    """A replacement for ``model.forward`` (``LlamaForCausalLMEagle3``) that only stores K/V.

    Same signature as ``LlamaForCausalLM.forward(input_ids, positions, forward_batch, ...)``.
    Shapes: ``input_ids`` / ``positions`` (T,), ``forward_batch.spec_info.hidden_states``
    (T, 3 * target_hidden) or (T, hidden). Stores the draft layer's K and V for the T tokens at
    ``forward_batch.out_cache_loc`` and returns a ``LogitsProcessorOutput`` of the shapes the
    draft-extend graph runner expects, with content that is not meaningful:
    ``next_token_logits`` = ``forward_batch.next_token_logits_buffer`` as it is (R, vocab), and
    ``hidden_states`` = the ``fc`` output (T, hidden). The computation mirrors
    ``LlamaModel.forward`` and the input layer of ``LlamaDecoderLayer.forward``
    (``models/llama_eagle3.py``) up to ``self_attn``'s ``qkv_proj`` and rotary embedding, then
    ``set_kv_buffer`` as the triton backend's ``forward_decode`` stores them.
    ``output_cls``: SGLang's ``LogitsProcessorOutput`` unless given (tests).

    ``last_of_each_request``: for a draft *prefill* (EXTEND over R prompts of T tokens in all,
    ``forward_batch.extend_seq_lens`` (R,)): the output has the R rows a ``CaptureHiddenMode.LAST``
    forward returns, ``hidden_states`` (R, hidden) the ``fc`` output at each request's last token and
    ``next_token_logits`` zeros (R, vocab) (never a (T, vocab) tensor: T can be thousands).
    """
    import torch

    if output_cls is None:
        from sglang.srt.layers.logits_processor import LogitsProcessorOutput as output_cls

    inner = model.model
    vocab = model.config.draft_vocab_size or model.config.vocab_size
    store = kv_store(model)

    def forward(input_ids, positions, forward_batch, *args, **kwargs):
        # LlamaForCausalLM.forward(input_ids, positions, forward_batch, input_embeds=None, ...): the
        # runner passes input_embeds for requests sent as embeddings or with embedding overrides
        # (model_runner.py forward_extend), and LlamaModel.forward then uses them as they are
        embeds = kwargs.get("input_embeds", args[0] if args else None)
        if embeds is None:
            embeds = getattr(forward_batch, "mm_input_embeds", None)
            if embeds is not None:  # a multimodal prefill, as LlamaModel.forward builds its embeddings
                mode = forward_batch.forward_mode
                if (mode.is_extend() and forward_batch.contains_mm_inputs()
                        and not mode.is_draft_extend(include_v2=True)):
                    embeds = torch.cat([embeds[:-1], inner.embed_tokens(input_ids[-1].unsqueeze(0))])
        hidden = store(input_ids, positions, forward_batch.spec_info.hidden_states,
                       forward_batch.token_to_kv_pool, forward_batch.out_cache_loc, embeds)
        if last_of_each_request:
            hidden = hidden[torch.cumsum(forward_batch.extend_seq_lens, dim=0) - 1]
            logits = hidden.new_zeros((hidden.shape[0], vocab), dtype=torch.float32)
            return output_cls(next_token_logits=logits, hidden_states=hidden)
        logits = getattr(forward_batch, "next_token_logits_buffer", None)
        if logits is None:
            logits = hidden.new_zeros((hidden.shape[0], vocab), dtype=torch.float32)
        return output_cls(next_token_logits=logits, hidden_states=hidden)

    return forward


class NoAttentionBackend:
    """The attention backend handed to the KV-only graph runner: the KV-only forward calls no
    attention, so there is no metadata to build at capture or replay (saves the per-step
    ``kv_indices`` kernel and its CPU work). ``seq_len_fill_value`` is the real backend's."""

    def __init__(self, seq_len_fill_value: int):
        self._fill = seq_len_fill_value

    def init_cuda_graph_state(self, *args, **kwargs) -> None:
        return None

    def get_cuda_graph_seq_len_fill_value(self) -> int:
        return self._fill

    def init_forward_metadata_capture_cuda_graph(self, *args, **kwargs) -> None:
        return None

    def init_forward_metadata_replay_cuda_graph(self, *args, **kwargs) -> None:
        return None


@contextlib.contextmanager
def _model_forward(model: Any, forward: Callable):
    model.forward = forward  # an instance attribute shadows the class's forward
    try:
        yield
    finally:
        del model.forward


def build_kv_only_graph_runner(runner_cls: type, seq_len_fill_value: int, worker_for_runner: Any,
                               model: Any) -> Any:
    """Capture a draft-extend CUDA graph runner of ``runner_cls`` (SGLang's
    ``EAGLEDraftExtendCudaGraphRunner``, or the full OFF runner's class) whose graphs run
    :func:`kv_only_forward`, for SGLang's CUDA-graph batch sizes and 1 token per request.

    ``seq_len_fill_value``: what padded requests' ``seq_lens`` hold (the real attention backend's
    ``get_cuda_graph_seq_len_fill_value``). ``worker_for_runner``: what SGLang constructs its
    draft-extend runner with (v1 the ``EAGLEWorker``, v2 the ``EagleDraftWorker``), while its
    runtime fields are the OFF state's.

    Raises:
        RuntimeError: the capture never called the KV-only forward (its graphs would be the
            full draft's), or what SGLang's capture raises.
    """
    kv_forward = kv_only_forward(model)
    calls = [0]

    def counted(*args, **kwargs):  # Python runs only while capturing, never at replay
        calls[0] += 1
        return kv_forward(*args, **kwargs)

    with _model_forward(model, counted):
        runner = runner_cls(
            worker_for_runner,
            draft_extend_attn_backend=NoAttentionBackend(seq_len_fill_value),
            speculative_num_steps=0,
        )
    if calls[0] == 0:  # the graphs would be the full draft's: never report them as KV-only
        raise RuntimeError("the draft-extend capture did not call the KV-only forward")
    if lean_replay_enabled_by_env():
        runner.replay = lean_replay(runner)
    return runner


#: "1": the KV-only graph replays with :func:`lean_replay` (opt-in until measured on the GPU); unset
#: or "0": SGLang's own replay (all of its input buffers copied)
LEAN_REPLAY_ENV_SWITCH = "SPECCONSOLE_OFF_KV_ONLY_LEAN_REPLAY"


def lean_replay_enabled_by_env() -> bool:
    """True when ``SPECCONSOLE_OFF_KV_ONLY_LEAN_REPLAY=1`` asks for :func:`lean_replay`."""
    return options.switch(LEAN_REPLAY_ENV_SWITCH, False)


def lean_replay(runner: Any) -> Callable:
    """``replay`` for a KV-only draft-extend graph runner: the steps of SGLang's
    ``EAGLEDraftExtendCudaGraphRunner.replay`` (0.5.12) for the four input buffers the KV-only graph
    reads (``input_ids``, ``positions``, ``out_cache_loc``, ``hidden_states``: what
    :func:`kv_only_forward` and the capture's top-k read), without the copies of the seven the graph
    never reads (``seq_lens``, ``seq_lens_cpu``, ``extend_seq_lens``, ``num_correct_drafts``,
    ``num_accept_tokens``, ``req_pool_indices``, the CPU ``extend_seq_lens``) and the attention
    backend's replay metadata (``NoAttentionBackend``: nothing). A padded batch zeroes
    ``out_cache_loc`` and ``positions`` first, as SGLang does, so padded rows write only the dummy
    slot 0. Same output as SGLang's replay (unpadded to the raw batch). DP attention (gathered
    buffers): SGLang's replay.

    Why: a CPU-bound OFF step pays each launch (``bench/results/h200-2026-12-04b/README.md``: the
    replay's copies were +2.3 / +3.0 ms of CPU per 1,000 tokens on v1 / fa3)."""
    original = runner.replay

    def replay(forward_batch: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(runner, "require_mlp_tp_gather", False) or getattr(runner, "require_gathered_buffer", False):
            return original(forward_batch, *args, **kwargs)
        runner.deepep_adapter.replay()
        buffers = runner.buffers
        raw_bs = forward_batch.batch_size
        num_tokens = forward_batch.input_ids.shape[0]
        bs = runner.capture_bs[bisect.bisect_left(runner.capture_bs, raw_bs)]
        if bs * runner.num_tokens_per_bs != num_tokens:
            buffers.out_cache_loc.zero_()
            buffers.positions.zero_()
        buffers.input_ids[:num_tokens].copy_(forward_batch.input_ids)
        buffers.out_cache_loc[:num_tokens].copy_(forward_batch.out_cache_loc)
        buffers.positions[:num_tokens].copy_(forward_batch.positions)
        hidden = forward_batch.spec_info.hidden_states
        if buffers.hidden_states is not None and hidden is not None and hidden.shape[1] == buffers.hidden_states.shape[1]:
            buffers.hidden_states[:num_tokens].copy_(hidden)
        runner.raw_bs, runner.bs = raw_bs, bs
        runner._replay(forward_batch)
        out = runner.output_buffers[bs]
        if getattr(runner.forward_mode, "name", None) == "DRAFT_EXTEND_V2":
            unpadding_bs = num_tokens
        else:
            unpadding_bs = raw_bs if bs != raw_bs else None
        if unpadding_bs is None:
            return out
        sliced = type(out)(next_token_logits=out.next_token_logits[:unpadding_bs],
                           hidden_states=out.hidden_states[:unpadding_bs])
        sliced.topk_p, sliced.topk_index = out.topk_p[:unpadding_bs], out.topk_index[:unpadding_bs]
        return sliced

    return replay


def sglang_draft_extend_runner_cls() -> type:
    """SGLang's draft-extend CUDA graph runner class (CUDA; what ``init_cuda_graphs`` builds)."""
    from sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner import EAGLEDraftExtendCudaGraphRunner

    return EAGLEDraftExtendCudaGraphRunner


class EagerDraftExtend:
    """SGLang's eager full draft extend for one forward batch, as an object with ``replay``: the
    reference of a KV-only graph where SGLang captured no full OFF draft-extend graph.

    ``replay(forward_batch)`` does what SGLang's eager path does (v2
    ``EagleDraftInput.prepare_for_extend_to_fill_draft_kvcache`` then ``_draft_extend_for_decode``,
    ``eagle_info_v2.py`` / ``eagle_worker_v2.py`` in 0.5.12): ``backend.init_forward_metadata``,
    then ``model_runner.forward(forward_batch, skip_attn_backend_init=True)``, which stores the
    draft's K/V for the batch's tokens at ``out_cache_loc``. It keeps the batch's
    ``out_cache_loc``, ``spec_info.hidden_states`` and ``attn_backend`` as they were (SGLang's
    graph capture backs up the first two around the draft forward too). Returns the forward's
    output (not meaningful to the caller: the KV-only graph's output is the step's).
    """

    def __init__(self, model_runner: Any, backend: Any):
        self.model_runner = model_runner
        self.backend = backend

    def replay(self, forward_batch: Any) -> Any:
        out_cache_loc = forward_batch.out_cache_loc
        hidden = forward_batch.spec_info.hidden_states
        attn_backend = getattr(forward_batch, "attn_backend", None)
        try:
            self.backend.init_forward_metadata(forward_batch)
            forward_batch.attn_backend = self.backend
            return self.model_runner.forward(forward_batch, skip_attn_backend_init=True)
        finally:
            forward_batch.out_cache_loc = out_cache_loc
            forward_batch.spec_info.hidden_states = hidden
            forward_batch.attn_backend = attn_backend


def prefill_enabled_by_env(default: bool = False) -> bool:
    """KV-only draft prefills while the gate is off (``SPECCONSOLE_OFF_PREFILL_KV_ONLY`` 1 / 0;
    unset: ``default``, which the runner makes True on v2, where the H200 proved it oracle-exact on
    triton and bit for bit on fa3 (``bench/results/h200-2026-12-04b/``), and on v1 only with the
    lean v1 step it was measured with)."""
    return options.switch(PREFILL_ENV_SWITCH, default)


def graph_enabled_by_env(default: bool = False) -> bool:
    """The KV-only graph where SGLang captures no full OFF draft-extend graph, v2 on fa3
    (``SPECCONSOLE_OFF_DRAFT_KV_ONLY_GRAPH`` 1 / 0; unset: ``default``, True on v2)."""
    return options.switch(GRAPH_ENV_SWITCH, default)


def enabled_by_env() -> bool:
    """False when ``SPECCONSOLE_OFF_DRAFT_KV_ONLY=0`` asks for the full OFF draft extend."""
    return options.switch(ENV_SWITCH, True)


def eager_enabled_by_env() -> bool:
    """False when ``SPECCONSOLE_OFF_DRAFT_KV_ONLY_EAGER=0`` asks for the full eager draft extend
    where no OFF draft-extend CUDA graph exists (the eager KV-only extend is the default)."""
    return options.switch(EAGER_ENV_SWITCH, True)


#: ``spec_info`` fields that a draft-extend graph replay reassigns (0.5.12
#: ``eagle_draft_extend_cuda_graph_runner.py`` ``replay``: padded to the graph's batch size)
REPLAY_FIELDS = ("positions", "num_correct_drafts", "num_accept_tokens", "extend_seq_lens_cpu",
                 "extend_seq_lens_tensor")


def _replay_fields(forward_batch: Any) -> dict:
    info = forward_batch.spec_info
    return {f: getattr(info, f) for f in REPLAY_FIELDS if hasattr(info, f)}


def _set_replay_fields(forward_batch: Any, fields: dict) -> None:
    for name, value in fields.items():
        setattr(forward_batch.spec_info, name, value)


def _row_tolerance(reference: Any) -> Any:
    """Per token (dim 0): ``ROUNDING_ATOL + ROUNDING_RTOL * max|reference|`` over that token's heads
    and channels, shaped to broadcast. A GEMM's rounding error scales with its output row's size, not
    with each element's (a near-zero entry of a large row may carry the row's rounding)."""
    ref = reference.float().abs()
    scale = ref.reshape(ref.shape[0], -1).amax(dim=1) if ref.dim() > 1 else ref
    return (ROUNDING_ATOL + ROUNDING_RTOL * scale).reshape((-1,) + (1,) * (ref.dim() - 1))


class KvProof(SampledProof):
    """The sampled bit-for-bit proof of a KV-only draft extend against the full one, and its
    counters: ``count`` (KV-only extends run), ``checks``, ``mismatches`` (this rank's) and ``ok``,
    which turns False at the first mismatch on any TP rank (``any_rank(flag)``: True when some rank
    passed True, an all-reduce at TP > 1; every rank checks the same step numbers, so the calls line
    up), because the KV-only and the full draft extend run different collectives and one rank
    alone falling back would hang the others. ``layer``: the draft's attention layer (its
    ``layer_id`` indexes the draft KV pool); ``sampled(n)``: whether extend number n (1-based) is
    checked (``contract.sampled``: the first 64, then every 256th). ``rounding``: the reference
    runs other GEMM shapes, so K/V within ``ROUNDING_RTOL``/``ROUNDING_ATOL`` of it pass (counted in
    ``inexact``); otherwise only bit-for-bit equal K/V pass."""

    #: what the log's error line calls the checked extend
    what = "KV-only draft extend"

    def __init__(self, layer: Any, sampled: Callable[[int], bool], any_rank: Callable[[bool], bool] = bool,
                 rounding: bool = False):
        super().__init__(any_rank)
        self.layer = layer
        self.sampled = sampled
        self.rounding = rounding
        self.count = 0
        self.inexact = 0  # checks that passed within rounding, not bit for bit
        self.max_abs_diff = 0.0

    def _agree(self, kv_only: tuple, reference: tuple) -> bool:
        """Whether the KV-only (K, V) pass against the reference's; counts ``inexact``."""
        import torch

        if all(torch.equal(a, b) for a, b in zip(kv_only, reference)):
            return True
        if not self.rounding:
            return False
        diffs = [(a.float() - b.float()).abs() for a, b in zip(kv_only, reference)]
        close = all(bool(d.le(_row_tolerance(b)).all()) for d, b in zip(diffs, reference))
        self.max_abs_diff = max([self.max_abs_diff] + [float(d.max()) for d in diffs])
        if close:
            self.inexact += 1
        return close

    def prove(self, forward_batch: Any, run_full: Callable[[], Any]) -> None:
        """Compare the K/V the KV-only extend stored at ``forward_batch.out_cache_loc`` with what
        ``run_full()`` (the full extend on the same batch) stores there; waits for the GPU."""
        pool = forward_batch.token_to_kv_pool
        loc = forward_batch.out_cache_loc
        layer_id = self.layer.layer_id
        k_kv = pool.get_key_buffer(layer_id)[loc].clone()
        v_kv = pool.get_value_buffer(layer_id)[loc].clone()
        run_full()  # rewrites the same slots the full way
        self.judge((k_kv, v_kv), (pool.get_key_buffer(layer_id)[loc], pool.get_value_buffer(layer_id)[loc]))

    #: what the K/V are checked against, and what OFF steps do after a failed check (log lines)
    reference = "the full draft extend's"
    fallback = "OFF steps run the full draft extend from now on"

    def judge(self, stored: tuple, reference: tuple) -> None:
        """Count one check of ``stored`` (K, V) against ``reference`` (K, V); a mismatch on any TP
        rank turns ``ok`` False, logged as an error. Waits for the GPU."""
        differ = not self._agree(stored, reference)
        diff = f", max |diff| {self.max_abs_diff:.3g}" if self.rounding else ""
        self.verdict(f"OFF step {self.what} stored K/V that differ from {self.reference} (check {self.checks + 1}{diff})"
                     if differ else None, self.fallback)


class KvOnlyRunner(KvProof):
    """Wraps the KV-only graph runner's ``replay``: counts replays (``count``) and, on sampled
    replays, proves the stored K/V against the full OFF draft extend (:class:`KvProof`: a check
    calls ``full_runner.replay`` on the same batch and waits for the GPU). ``full_runner``: SGLang's
    full OFF draft-extend graph runner (a bit-for-bit proof), or an :class:`EagerDraftExtend` with
    ``rounding=True`` where SGLang captured none."""

    runs = CUDA_GRAPH

    def __init__(self, runner: Any, full_runner: Any, layer: Any, sampled: Callable[[int], bool],
                 any_rank: Callable[[bool], bool] = bool, rounding: bool = False):
        super().__init__(layer, sampled, any_rank, rounding)
        self.runner = runner
        self.full_runner = full_runner
        original = runner.replay

        def replay(forward_batch, *args, **kwargs):
            self.count += 1
            check = self.sampled(self.count)
            before = _replay_fields(forward_batch) if check else None
            out = original(forward_batch, *args, **kwargs)
            if check:
                # a replay of a padded batch leaves spec_info fields padded (v2 keeps them so);
                # the full replay must see the batch as the KV-only one did, the caller as left
                after = _replay_fields(forward_batch)
                _set_replay_fields(forward_batch, before)
                try:
                    self.prove(forward_batch, lambda: self.full_runner.replay(forward_batch))
                finally:
                    _set_replay_fields(forward_batch, after)
            return out

        runner.replay = replay


class EagerKvOnly(KvProof):
    """The KV-only OFF draft extend without a CUDA graph (SGLang's eager draft extend, e.g. v2 on
    fa3, which captures no OFF draft-extend graph): while :meth:`installed` is active the draft
    model's ``forward`` is :func:`kv_only_forward`, so the eager ``draft_runner.forward`` stores
    only the new tokens' K/V (the attention metadata SGLang built for the step goes unused).

    Same counters and proof as :class:`KvOnlyRunner`: ``count`` (KV-only forwards), ``checks``,
    ``mismatches``, ``ok``; on sampled forwards (``sampled(n)``) the full eager forward runs on
    the same batch right after (its metadata is the step's) and the K/V at the batch's slots must
    equal, bit for bit, what the KV-only forward stored (same kernels on the same shapes). A
    mismatch on any TP rank (``any_rank``) turns ``ok`` False: OFF steps run the full extend.
    """

    what = "eager KV-only draft extend"
    runs = EAGER

    def __init__(self, model: Any, layer: Any, sampled: Callable[[int], bool],
                 any_rank: Callable[[bool], bool] = bool, kv_forward: Optional[Callable] = None,
                 what: Optional[str] = None):
        super().__init__(layer, sampled, any_rank)
        self.model = model
        self.kv_forward = kv_forward if kv_forward is not None else kv_only_forward(model)
        if what is not None:
            self.what = what

    @contextlib.contextmanager
    def installed(self):
        """The draft model's forward is the KV-only one (with the sampled proof) for the body."""
        full = self.model.forward  # the class's bound forward (nothing shadows it outside this)

        def forward(input_ids, positions, forward_batch, *args, **kwargs):
            self.count += 1
            out = self.kv_forward(input_ids, positions, forward_batch, *args, **kwargs)
            if self.sampled(self.count):
                self.prove(forward_batch, lambda: full(input_ids, positions, forward_batch, *args, **kwargs))
            return out

        with _model_forward(self.model, forward):
            yield self
