"""Every SGLang 0.5.12 symbol the server_patch hooks or relies on exists with the expected shape.

Reads the pinned SGLang source with ``ast`` (the README installs ``sglang==0.5.12 --no-deps``;
importing it would need CUDA), so a renamed method, a changed signature or a new field in
``apply_runtime_state`` fails here in CI instead of as a silent no-op on a GPU box.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

from server_patch import SUPPORTED_SGLANG_VERSION, plugin, scheduler_hooks, tokenizer_hooks


def _sglang_root() -> Path:
    spec = importlib.util.find_spec("sglang")
    assert spec is not None and spec.submodule_search_locations, (
        "sglang source not installed: pip install --no-deps sglang==0.5.12"
    )
    return Path(list(spec.submodule_search_locations)[0])


ROOT = _sglang_root()
SRT = ROOT / "srt"


def _module_path(dotted: str) -> Path:
    rel = dotted.split(".")[1:]  # drop "sglang"
    return ROOT.joinpath(*rel).with_suffix(".py")


def _classes(path: Path) -> dict:
    tree = ast.parse(path.read_text())
    return {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}


def _methods(cls: ast.ClassDef) -> dict:
    return {n.name: n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def _params(fn) -> list:
    return [a.arg for a in fn.args.args]


def _find_method(module_file: Path, class_name: str, method: str, seen=None):
    """Find ``method`` on ``class_name`` or its (sglang-local) bases, following imports by name."""
    seen = seen or set()
    classes = _classes(module_file)
    cls = classes[class_name]
    if method in _methods(cls):
        return _methods(cls)[method]
    tree = ast.parse(module_file.read_text())
    imports = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("sglang"):
            for alias in node.names:
                imports[alias.asname or alias.name] = node.module
    for base in cls.bases:
        name = base.id if isinstance(base, ast.Name) else None
        if name is None or name in seen:
            continue
        seen.add(name)
        path = module_file if name in classes else (
            _module_path(imports[name]) if name in imports else None
        )
        if path is None:
            continue
        found = _find_method(path, name, method, seen)
        if found is not None:
            return found
    return None


def test_installed_sglang_is_the_supported_version():
    from importlib.metadata import version

    assert version("sglang") == SUPPORTED_SGLANG_VERSION


EXPECTED_PARAMS = {
    "init_model_worker": ["self"],
    "get_next_batch_to_run": ["self"],
    "process_batch_result_decode": ["self", "batch", "result"],
    "update_spec_metrics": ["self", "bs", "num_correct_drafts"],
    "_resolve_spec_overlap_tokens": ["self", "result", "batch"],
    "report_decode_stats": ["self", "can_run_cuda_graph", "running_batch", "num_correct_drafts"],
    "set_internal_state": ["self", "recv_req"],
    "get_internal_state": ["self", "recv_req"],
    "update_weights_from_disk": ["self", "recv_req"],
    "update_weights_from_distributed": ["self", "recv_req"],
    "update_weights_from_tensor": ["self", "recv_req"],
    "update_weights_from_ipc": ["self", "recv_req"],
    "release_memory_occupation": ["self", "recv_req"],
    "init_overlap": ["self"],
    "prepare_for_decode": ["self", "batch"],  # EagleDraftInputV2Mixin's (kv_reserve)
}


def test_the_draft_input_class_inherits_the_v2_prepare_for_decode_it_is_hooked_on():
    """``kv_reserve`` wraps the mixin's method; ``EagleDraftInput`` must not define its own, and the
    batch calls it on its draft input (``ScheduleBatch.prepare_for_decode``'s v2 branch)."""
    draft = _classes(SRT / "speculative" / "eagle_info.py")["EagleDraftInput"]
    assert "prepare_for_decode" not in _methods(draft)
    assert "EagleDraftInputV2Mixin" in [b.id for b in draft.bases if isinstance(b, ast.Name)]
    batch = _methods(_classes(SRT / "managers" / "schedule_batch.py")["ScheduleBatch"])["prepare_for_decode"]
    assert "draft_input.prepare_for_decode(self)" in ast.unparse(batch)


@pytest.mark.parametrize("target", [t for t, _, _ in scheduler_hooks.HOOKS])
def test_scheduler_hook_target_exists_with_expected_signature(target):
    module, cls, method = target.rsplit(".", 2)
    fn = _find_method(_module_path(module), cls, method)
    assert fn is not None, f"{target} not found"
    assert _params(fn) == EXPECTED_PARAMS[method], (target, _params(fn))


@pytest.mark.parametrize(
    "target,params",
    [
        (tokenizer_hooks.HOOKS[0][0], ["self", "obj"]),
        (tokenizer_hooks.HOOKS[1][0], ["self", "meta_info", "recv_obj", "i"]),
    ],
)
def test_tokenizer_hook_targets(target, params):
    module, cls, method = target.rsplit(".", 2)
    fn = _find_method(_module_path(module), cls, method)
    assert fn is not None, f"{target} not found"
    assert _params(fn) == params
    if method == "set_internal_state":
        assert isinstance(fn, ast.AsyncFunctionDef)  # our AROUND hook is async too


def test_server_args_cli_hook_targets():
    cls = _classes(SRT / "server_args.py")["ServerArgs"]
    methods = _methods(cls)
    add = methods["add_cli_args"]
    frm = methods["from_cli_args"]
    assert [d.id for d in add.decorator_list] == ["staticmethod"] and _params(add) == ["parser"]
    assert [d.id for d in frm.decorator_list] == ["classmethod"] and _params(frm) == ["cls", "args"]
    assert f"{plugin.SERVER_ARGS}".endswith("server_args.ServerArgs")


def _assigned_self_attrs(fn) -> set:
    """Dotted targets assigned in a function body, e.g. {"self.cuda_graph_runner", "dw.draft_attn_backend"}."""
    out = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                out.add(ast.unparse(t))
    return out


@pytest.mark.parametrize(
    "file,cls,expected",
    [
        (
            "speculative/eagle_worker.py",
            "EAGLEWorker",
            {
                "self.speculative_num_steps", "self.speculative_num_draft_tokens",
                "self.draft_attn_backend", "self.draft_model_runner.draft_attn_backend",
                "self.cuda_graph_runner", "self.target_worker.model_runner.attn_backend",
                "self.target_worker.model_runner.graph_runner", "self.draft_extend_attn_backend",
                "self.cuda_graph_runner_for_draft_extend",
                "self.server_args.speculative_num_steps", "self.server_args.speculative_num_draft_tokens",
            },
        ),
        (
            "speculative/eagle_worker_v2.py",
            "EAGLEWorkerV2",
            {
                "self.speculative_num_steps", "self.speculative_num_draft_tokens", "dw",
                "dw.speculative_num_steps", "dw.speculative_num_draft_tokens", "dw.draft_attn_backend",
                "dw.draft_runner.draft_attn_backend", "dw.cuda_graph_runner",
                "dw.draft_extend_attn_backend", "dw.cuda_graph_runner_for_draft_extend",
                "self._target_worker.model_runner.attn_backend",
                "self._target_worker.model_runner.graph_runner",
                "self.server_args.speculative_num_steps", "self.server_args.speculative_num_draft_tokens",
            },
        ),
    ],
)
def test_apply_runtime_state_fields_are_the_ones_off_state_swaps(file, cls, expected):
    """``OffStepRunner._apply`` mirrors the worker's own ``apply_runtime_state`` (minus the
    server_args sync): if SGLang adds a field there, the OFF step would miss it."""
    methods = _methods(_classes(SRT / file)[cls])
    assert _assigned_self_attrs(methods["apply_runtime_state"]) == expected
    build = methods["build_adaptive_runtime_state"]
    assert _params(build) == ["self", "speculative_num_steps", "speculative_num_draft_tokens"]


def test_spec_runtime_state_fields():
    cls = _classes(SRT / "speculative/adaptive_runtime_state.py")["SpecRuntimeState"]
    fields = [n.target.id for n in cls.body if isinstance(n, ast.AnnAssign)]
    assert fields == [
        "speculative_num_steps", "speculative_num_draft_tokens", "draft_attn_backend",
        "cuda_graph_runner", "target_attn_backend", "target_graph_runner",
        "draft_extend_attn_backend", "cuda_graph_runner_for_draft_extend",
    ]


def test_draft_methods_replaced_during_off_steps():
    v1 = _methods(_classes(SRT / "speculative/eagle_worker.py")["EAGLEWorker"])
    v2 = _methods(_classes(SRT / "speculative/eagle_worker_v2.py")["EagleDraftWorker"])
    assert _params(v1["draft"]) == ["self", "batch"]
    assert _params(v2["draft"]) == ["self", "model_worker_batch"]
    assert _params(v1["forward_batch_generation"]) == ["self", "batch"]
    factory = _methods(_classes(SRT / "speculative/draft_utils.py")["DraftBackendFactory"])
    assert _params(factory["create_decode_backend"]) == ["self"]
    base = _methods(_classes(SRT / "layers/attention/base_attn_backend.py")["AttentionBackend"])
    assert "get_verify_buffers_to_fill_after_draft" in base


def test_worker_selection_names_the_two_known_classes():
    """0.5.12 picks EAGLEWorkerV2 with overlap on, EAGLEWorker with it off (spec_info.py:161-169)."""
    src = (SRT / "speculative/spec_info.py").read_text()
    assert "EAGLEWorkerV2" in src and "EAGLEWorker" in src
    from server_patch.compat import KNOWN_WORKERS

    assert KNOWN_WORKERS == {"EAGLEWorker": "v1", "EAGLEWorkerV2": "v2"}


@pytest.mark.parametrize(
    "attr",
    [
        "self.spec_num_forward_ct", "self.spec_num_accept_tokens", "self.spec_total_num_forward_ct",
        "self.spec_total_num_accept_tokens", "self.tp_cpu_group", "self.enable_overlap",
        "self.draft_worker",
    ],
)
def test_scheduler_attributes_the_hooks_read(attr):
    files = [SRT / "managers/scheduler.py", SRT / "observability/scheduler_metrics_mixin.py"]
    assert any(f"{attr} =" in f.read_text() or f"{attr}: " in f.read_text() for f in files), attr


def test_request_spec_counters_exist():
    src = (SRT / "managers/schedule_batch.py").read_text()
    for attr in ("spec_verify_ct", "spec_num_correct_drafts", "spec_correct_drafts_histogram"):
        assert f"self.{attr}" in src


def test_generation_batch_result_accepts_the_off_tag():
    cls = _classes(SRT / "managers/utils.py")["GenerationBatchResult"]
    decos = [ast.unparse(d) for d in cls.decorator_list]
    assert decos == ["dataclasses.dataclass"]  # no slots=True: setattr(result, "_spec_gate_off") works


# -- the decode-kernel OFF verify (server_patch/off_attention.py) ---------------------------

TRITON = SRT / "layers" / "attention" / "triton_backend.py"


@pytest.mark.parametrize("method, params", [
    ("init_forward_metadata", ["self", "forward_batch"]),
    ("init_forward_metadata_capture_cuda_graph",
     ["self", "bs", "num_tokens", "req_pool_indices", "seq_lens", "encoder_lens", "forward_mode", "spec_info"]),
    ("init_forward_metadata_replay_cuda_graph",
     ["self", "bs", "req_pool_indices", "seq_lens", "seq_lens_sum", "encoder_lens", "forward_mode",
      "spec_info", "seq_lens_cpu"]),
    ("forward_extend", ["self", "q", "k", "v", "layer", "forward_batch", "save_kv_cache", "sinks"]),
    ("forward_decode", ["self", "q", "k", "v", "layer", "forward_batch", "save_kv_cache", "sinks"]),
])
def test_triton_backend_methods_the_off_verify_overrides(method, params):
    fn = _methods(_classes(TRITON)["TritonAttnBackend"])[method]
    assert _params(fn) == params


def test_triton_backend_attributes_the_off_verify_reads():
    src = TRITON.read_text()
    for attr in ("self.num_draft_tokens", "self.sliding_window_size", "self.use_mla",
                 "self.enable_deterministic", "self.req_to_token"):
        assert f"{attr} =" in src, attr
    # the eager DECODE branch reads exactly these ForwardBatch fields (our stand-in provides them)
    init = ast.get_source_segment(src, _methods(_classes(TRITON)["TritonAttnBackend"])["init_forward_metadata"])
    decode_branch = init.split("elif forward_batch.forward_mode.is_target_verify()")[0]
    used = set()
    for node in ast.walk(ast.parse("if True:\n" + "\n".join("    " + l for l in decode_branch.splitlines()))):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "forward_batch":
            used.add(node.attr)
    assert used <= {"batch_size", "forward_mode", "spec_info", "seq_lens", "seq_lens_sum", "req_pool_indices"}, used


def test_graph_runner_hands_the_live_batch_to_replay_metadata():
    src = (SRT / "model_executor" / "cuda_graph_runner.py").read_text()
    assert "attn_backend._replay_forward_batch = forward_batch" in src


@pytest.mark.parametrize("file", ["eagle_worker.py", "eagle_worker_v2.py"])
def test_off_state_target_backend_comes_from_get_attention_backend(file):
    src = (SRT / "speculative" / file).read_text()
    fn = ast.get_source_segment(src, next(
        n for n in ast.walk(ast.parse(src))
        if isinstance(n, ast.FunctionDef) and n.name == "build_adaptive_runtime_state"))
    # the backend is built before the CUDA-graph runner that captures with it
    assert fn.index("target_model_runner._get_attention_backend(") < fn.index("CudaGraphRunner(")
    mr = _classes(SRT / "model_executor" / "model_runner.py")["ModelRunner"]
    assert _params(_methods(mr)["_get_attention_backend"]) == ["self", "init_new_workspace"]


def test_off_draft_extend_backend_comes_from_the_factory():
    du = SRT / "speculative" / "draft_utils.py"
    factory = _methods(_classes(du)["DraftBackendFactory"])
    assert _params(factory["create_draft_extend_backend"]) == ["self"]
    assert "TritonAttnBackend(self.draft_model_runner, skip_prefill=False)" in du.read_text()
    for file in ("eagle_worker.py", "eagle_worker_v2.py"):
        assert "create_draft_extend_backend()" in (SRT / "speculative" / file).read_text(), file
    runner = SRT / "speculative" / "eagle_draft_extend_cuda_graph_runner.py"
    assert "self.num_tokens_per_bs = self.speculative_num_steps + 1" in runner.read_text()
    # the v2 draft extend's seq_lens include the new tokens (off_attention's key count)
    assert "batch.seq_lens = batch.seq_lens + num_draft_tokens" in (SRT / "speculative" / "eagle_info_v2.py").read_text()
    # v1: verify adds the accepted tokens to seq_lens before it builds the draft-extend input
    info = (SRT / "speculative" / "eagle_info.py").read_text()
    assert info.index("batch.seq_lens.add_(num_correct_drafts + 1)") < info.index("seq_lens=batch.seq_lens,")


# -- the early next-batch seq_lens of a v2 OFF step (server_patch/off_state.py) ----------------


def test_v2_verify_publishes_seq_lens_plus_accept_lens_and_an_event():
    """The OFF step replaces exactly these two fields; SGLang computes them as assumed."""
    verify = _methods(_classes(SRT / "speculative/eagle_worker_v2.py")["EAGLEWorkerV2"])["verify"]
    src = ast.unparse(verify)
    assert "new_seq_lens = batch.seq_lens + accept_lens" in src
    assert "next_draft_input = EagleDraftInput(bonus_tokens=bonus_tokens, new_seq_lens=new_seq_lens, verify_done=verify_done)" in src
    cls = _classes(SRT / "speculative/eagle_info.py")["EagleDraftInput"]
    fields = [n.target.id for n in cls.body if isinstance(n, ast.AnnAssign)]
    assert "new_seq_lens" in fields and "verify_done" in fields


def test_only_the_scheduler_waits_on_verify_done():
    """Publishing an earlier event is only safe if ``maybe_wait_verify_done`` is its one reader."""
    readers = []
    for path in SRT.rglob("*.py"):
        text = path.read_text()
        if ".verify_done" in text:
            readers.append(str(path.relative_to(SRT)))
    assert sorted(readers) == ["managers/schedule_batch.py"]
    fn = _methods(_classes(SRT / "managers/schedule_batch.py")["ScheduleBatch"])["maybe_wait_verify_done"]
    assert "draft_input.verify_done.synchronize()" in ast.unparse(fn)


def test_scheduler_reads_new_seq_lens_after_the_worker_returns():
    """``run_batch`` stores the result (future map) and takes ``new_seq_lens`` as the next
    ``seq_lens`` only after ``forward_batch_generation`` returned, i.e. after the OFF step's
    wrapper put the early tensor on the result."""
    src = ast.unparse(_methods(_classes(SRT / "managers/scheduler.py")["Scheduler"])["run_batch"])
    fwd = src.index("batch_result = self.model_worker.forward_batch_generation(model_worker_batch)")
    assert fwd < src.index("self.future_map.store_to_map(future_indices, batch_result)")
    assert fwd < src.index("batch.seq_lens = batch_result.next_draft_input.new_seq_lens")
    prep = ast.unparse(_methods(_classes(SRT / "speculative/eagle_info_v2.py")["EagleDraftInputV2Mixin"])["prepare_for_decode"])
    assert prep.index("batch.maybe_wait_verify_done()") < prep.index("batch.seq_lens_cpu = batch.seq_lens.cpu()")


# -- the KV-only OFF draft extend (server_patch/draft_kv_only.py) -------------------------------

EAGLE3 = SRT / "models" / "llama_eagle3.py"


def test_eagle3_draft_structure_the_kv_only_forward_mirrors():
    """``kv_only_forward`` repeats ``LlamaModel.forward`` and the input layer's forward up to the
    attention call; a change to either must show here before it shows as wrong draft K/V."""
    classes = _classes(EAGLE3)
    model_fwd = ast.unparse(_methods(classes["LlamaModel"])["forward"])
    assert _params(_methods(classes["LlamaModel"])["forward"])[:5] == [
        "self", "input_ids", "positions", "forward_batch", "input_embeds"]
    # the draft model's own forward (inherited): input_embeds is the first argument after the batch
    assert "forward" not in _methods(classes["LlamaForCausalLMEagle3"])
    assert _params(_methods(_classes(SRT / "models" / "llama.py")["LlamaForCausalLM"])["forward"])[:5] == [
        "self", "input_ids", "positions", "forward_batch", "input_embeds"]
    for line in ("if input_embeds is None:", "embeds = input_embeds",
                 "embeds = forward_batch.mm_input_embeds",
                 "embeds = torch.cat([embeds[:-1], self.embed_tokens(input_ids[-1].unsqueeze(0))])",
                 "embeds = self.embed_tokens(input_ids)",
                 "hidden_states = forward_batch.spec_info.hidden_states",
                 "if hidden_states.shape[-1] != embeds.shape[-1]:",
                 "chunks = hidden_states.chunk(self.num_aux_hidden_states, dim=-1)",
                 "hidden_states = self.fc(hidden_states)"):
        assert line in model_fwd, line
    layer_fwd = ast.unparse(_methods(classes["LlamaDecoderLayer"])["forward"])
    input_branch = layer_fwd.split("else:")[0]
    for line in ("hidden_states = self.hidden_norm(hidden_states)",
                 "embeds = self.input_layernorm(embeds)",
                 "hidden_states = torch.cat([embeds, hidden_states], dim=-1)"):
        assert line in input_branch, line
    assert "hidden_states = self.self_attn(positions=positions, hidden_states=hidden_states, forward_batch=forward_batch)" in layer_fwd
    init = ast.unparse(_methods(classes["LlamaDecoderLayer"])["__init__"])
    assert "self.is_input_layer = layer_id == 0" in init
    # the attention: qkv + rotary in forward_prepare_native, then RadixAttention, then o_proj
    attn = _methods(_classes(SRT / "models" / "llama.py")["LlamaAttention"])
    assert _params(attn["forward_prepare_native"]) == ["self", "positions", "hidden_states"]
    prep = ast.unparse(attn["forward_prepare_native"])
    assert "q, k = self.rotary_emb(positions, q, k)" in prep and "return (q, k, v)" in prep
    assert "attn_output = self.attn(q, k, v, forward_batch)" in ast.unparse(attn["forward"])


def test_radix_attention_reshapes_kv_and_the_decode_path_stores_them_as_kv_only_does():
    radix = ast.unparse(_methods(_classes(SRT / "layers" / "radix_attention.py")["RadixAttention"])["forward"])
    assert "k = k.view(-1, self.tp_k_head_num, self.qk_head_dim)" in radix
    assert "v = v.view(-1, self.tp_v_head_num, self.v_head_dim)" in radix
    decode = ast.unparse(_methods(_classes(TRITON)["TritonAttnBackend"])["forward_decode"])
    assert ("forward_batch.token_to_kv_pool.set_kv_buffer(layer, forward_batch.out_cache_loc, k, v, "
            "layer.k_scale, layer.v_scale)") in decode


def test_draft_extend_graph_runner_takes_a_backend_and_steps_and_captures_model_forward():
    path = SRT / "speculative" / "eagle_draft_extend_cuda_graph_runner.py"
    init = _methods(_classes(path)["EAGLEDraftExtendCudaGraphRunner"])["__init__"]
    assert [a.arg for a in init.args.kwonlyargs] == ["draft_extend_attn_backend", "speculative_num_steps"]
    src = path.read_text()
    # the capture calls the model's forward through the instance attribute (patched while capturing)
    assert "ret = self.model_runner.model.forward(" in src
    # what the runner asks of its attention backend (NoAttentionBackend answers exactly these)
    from server_patch.draft_kv_only import NoAttentionBackend

    used = {m for m in ("init_cuda_graph_state", "get_cuda_graph_seq_len_fill_value",
                        "init_forward_metadata_capture_cuda_graph",
                        "init_forward_metadata_replay_cuda_graph", "init_forward_metadata")
            if f"draft_extend_attn_backend.{m}(" in src}
    assert used == {"init_cuda_graph_state", "get_cuda_graph_seq_len_fill_value",
                    "init_forward_metadata_capture_cuda_graph", "init_forward_metadata_replay_cuda_graph"}
    assert all(callable(getattr(NoAttentionBackend(1), m)) for m in used)


@pytest.mark.parametrize("file, cls", [("eagle_worker.py", "EAGLEWorker"), ("eagle_worker_v2.py", "EAGLEWorkerV2")])
def test_workers_capture_time_override_that_the_kv_only_build_uses(file, cls):
    fn = _methods(_classes(SRT / "speculative" / file)[cls])["_override_worker_state"]
    assert _params(fn) == ["self", "speculative_num_steps", "speculative_num_draft_tokens"]


def test_kv_pool_buffers_the_kv_only_proof_reads():
    pool = _methods(_classes(SRT / "mem_cache" / "memory_pool.py")["MHATokenToKVPool"])
    assert _params(pool["get_key_buffer"]) == ["self", "layer_id"]
    assert _params(pool["get_value_buffer"]) == ["self", "layer_id"]


def test_the_draft_prefill_the_kv_only_prefill_replaces_is_the_draft_models_own_forward_at_last_rows():
    """``OffStepRunner.run_prefill`` swaps the draft model's ``forward`` during a prefill: the EAGLE
    workers must reach it through the draft runner's forward (not a graph), capture LAST (one row
    per request) and use its logits only for the top-k and its hidden states as they are."""
    v2 = ast.unparse(_methods(_classes(SRT / "speculative/eagle_worker_v2.py")["EagleDraftWorker"])["_draft_extend_for_prefill"])
    for line in ("logits_output = self.draft_runner.forward(forward_batch).logits_output",
                 "probs = torch.softmax(logits_output.next_token_logits, dim=-1)",
                 "next_draft_input.hidden_states = logits_output.hidden_states"):
        assert line in v2, line
    worker_v2 = ast.unparse(_methods(_classes(SRT / "speculative/eagle_worker_v2.py")["EAGLEWorkerV2"])["forward_batch_generation"])
    assert "CaptureHiddenMode.LAST" in worker_v2 and "model_worker_batch.capture_hidden_mode = draft_capture_mode" in worker_v2
    v1 = _methods(_classes(SRT / "speculative/eagle_worker.py")["EAGLEWorker"])
    extend = ast.unparse(v1["forward_draft_extend"])
    for line in ("logits_output = self.draft_model_runner.forward(forward_batch).logits_output",
                 "self.capture_for_decode(logits_output, forward_batch.spec_info)",
                 "else CaptureHiddenMode.LAST"):
        assert line in extend, line
    capture = ast.unparse(v1["capture_for_decode"])
    assert "draft_input.hidden_states = logits_output.hidden_states" in capture


def test_the_draft_extend_post_processing_the_lean_off_step_skips_recomputes_what_the_graph_computed():
    """``OffStepRunner._lean_draft_extend_v2`` repeats ``_draft_extend_for_decode`` up to the replay
    and takes the top-k the graph computed of the same logits: SGLang's index select is
    ``arange * num_draft_tokens + accept_lens - 1`` (the identity for an OFF step) and its top-k is
    ``fast_topk(softmax(logits))``, as the graph's own."""
    ext = ast.unparse(_methods(_classes(SRT / "speculative/eagle_worker_v2.py")["EagleDraftWorker"])["_draft_extend_for_decode"])
    for line in ("draft_input = EagleDraftInput(hidden_states=batch_result.logits_output.hidden_states, "
                 "num_tokens_per_req=self.speculative_num_steps + 1, num_tokens_for_logprob_per_req=self.speculative_num_steps + 1)",
                 "forward_batch = draft_input.prepare_for_extend_to_fill_draft_kvcache(batch, batch_result.next_token_ids, "
                 "self.speculative_num_draft_tokens, self.draft_runner, self.cuda_graph_runner_for_draft_extend)",
                 "torch.get_device_module(self.device).current_stream().wait_stream(self.plan_stream)",
                 "forward_batch.spec_info.num_correct_drafts = batch_result.accept_lens - 1",
                 "select_index = torch.arange(len(batch.seq_lens), device=self.device) * self.speculative_num_draft_tokens "
                 "+ batch_result.accept_lens - 1",
                 "probs = torch.softmax(draft_logits_output.next_token_logits, dim=-1)",
                 "ret_topk_p, ret_topk_index = fast_topk(probs, self.topk, dim=-1)",
                 "next_draft_input = batch_result.next_draft_input"):
        assert line in ext, line
    runner = _methods(_classes(SRT / "speculative/eagle_draft_extend_cuda_graph_runner.py")["EAGLEDraftExtendCudaGraphRunner"])
    capture = ast.unparse(runner["capture_one_batch_size"])
    assert "probs = torch.softmax(ret.next_token_logits, dim=-1)" in capture
    assert "ret.topk_p, ret.topk_index = fast_topk(probs, self.topk, dim=-1)" in capture
    replay = ast.unparse(runner["replay"])
    assert "unpadding_bs = num_tokens" in replay and "out.topk_p = out_copy.topk_p[:unpadding_bs]" in replay
    can_run = ast.unparse(runner["can_run"])
    assert "cuda_graph_bs in self.graphs if self.disable_padding else cuda_graph_bs <= self.max_bs" in can_run


def _forward_batch_reads(fn) -> set:
    """``X`` of every ``forward_batch.X`` (and ``forward_batch.spec_info.X``) that ``fn`` reads."""
    reads = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "forward_batch":
            reads.add(node.attr)
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)
                and isinstance(node.value.value, ast.Name) and node.value.value.id == "forward_batch"
                and node.value.attr == "spec_info" and isinstance(node.ctx, ast.Load)):
            reads.add("spec_info." + node.attr)
    return reads


def test_the_lean_v1_off_step_repeats_sglangs_verify_and_draft_extend_for_a_one_token_accept():
    """``off_step_v1.LeanOffStepV1.run`` repeats ``EAGLEWorker.verify`` up to the target forward, the
    per-request loop of ``EagleVerifyInput.verify`` for one accepted token, the positions
    ``create_extend_after_decode_spec_info`` writes (``seq_len - accept_len + i``: the old seq_len for
    one token) and the next ``EagleDraftInput``; its hand-made forward batch has every field the
    draft-extend graph runner's ``replay`` reads."""
    worker = _methods(_classes(SRT / "speculative/eagle_worker.py")["EAGLEWorker"])
    verify = ast.unparse(worker["verify"])
    for line in ("spec_info.prepare_for_verify(batch, self.page_size)",
                 "spec_info.num_tokens_per_req = self.speculative_num_steps + 1",
                 "model_worker_batch = batch.get_model_worker_batch(seq_lens_cpu_cache=spec_info.seq_lens_cpu)",
                 "batch_result = self.target_worker.forward_batch_generation(model_worker_batch, is_verify=True)"):
        assert line in verify, line
    extend = ast.unparse(worker["forward_draft_extend_after_decode"])
    assert "next_draft_input = EagleDraftInput(bonus_tokens=draft_extend_input.bonus_tokens" in extend
    preprocess = ast.unparse(worker["_draft_preprocess_decode"])
    for line in ("req.decode_batch_idx += 1", "batch.maybe_evict_swa()",
                 "batch.sampling_info.penalizer_orchestrator.cumulate_output_tokens(spec_info.bonus_tokens.to(torch.int64))"):
        assert line in preprocess, line
    loop = ast.unparse(_methods(_classes(SRT / "speculative/eagle_info.py")["EagleVerifyInput"])["verify"])
    for line in ("req.output_ids.append(id)", "req.update_reasoning_tokens(id, think_end_id)",
                 "req.check_finished()", "req.kv_committed_len += num_accept_tokens",
                 "req.kv_allocated_len = req.kv_committed_len", "batch.seq_lens.add_(num_correct_drafts + 1)",
                 "batch.seq_lens_cpu.add_(num_accept_tokens_cpu)"):
        assert line in loop, line
    kernel = (SRT / "speculative/spec_utils.py").read_text()
    assert "tl.store(positions_ptr + offsets, seq_length - accept_len + offsets, mask)" in kernel
    sample = ast.unparse(_methods(_classes(SRT / "model_executor/model_runner.py")["ModelRunner"])["sample"])
    assert "self._preprocess_logits(logits_output, forward_batch.sampling_info)" in sample
    assert "next_token_ids = self.sampler(logits_output, forward_batch.sampling_info, forward_batch.return_logprob" in sample
    replay = _methods(_classes(SRT / "speculative/eagle_draft_extend_cuda_graph_runner.py")["EAGLEDraftExtendCudaGraphRunner"])["replay"]
    given = {"batch_size", "input_ids", "seq_lens", "seq_lens_cpu", "seq_lens_sum", "extend_seq_lens",
             "extend_seq_lens_cpu", "out_cache_loc", "positions", "req_pool_indices", "global_num_tokens_cpu",
             "spec_info", "spec_info.hidden_states", "spec_info.num_correct_drafts", "spec_info.num_accept_tokens"}
    assert _forward_batch_reads(replay) <= given, _forward_batch_reads(replay) - given


def test_what_the_lean_v1_off_step_builds_of_sglangs_classes_and_kernels_exists():
    """The fields of ``EagleDraftExtendInput`` it fills, the positions kernel it re-runs in its proof,
    the idle draft input and the filter that needs the draft input cut to the unfinished rows."""
    info = _classes(SRT / "speculative/eagle_info.py")
    fields = {n.target.id for n in info["EagleDraftExtendInput"].body if isinstance(n, ast.AnnAssign)}
    assert {"hidden_states", "num_correct_drafts", "num_accept_tokens", "num_accept_tokens_cpu", "input_ids",
            "seq_lens", "seq_lens_cpu", "req_pool_indices", "positions", "capture_hidden_mode"} <= fields
    kernel = {n.name: n for n in ast.parse((SRT / "speculative/spec_utils.py").read_text()).body
              if isinstance(n, ast.FunctionDef)}["create_extend_after_decode_spec_info"]
    assert _params(kernel) == ["accept_tokens", "seq_lens", "accept_lens", "positions", "bonus_tokens_ptr", "bs_upper"]
    assert "_draft_preprocess_idle" in _methods(_classes(SRT / "speculative/eagle_worker.py")["EAGLEWorker"])
    draft_filter = ast.unparse(_methods(info["EagleDraftInput"])["filter_batch"])
    assert "if len(new_indices) != len(self.topk_p):" in draft_filter
    assert "batch.filter_batch(v1_spec_info_filtered=True)" in (SRT / "managers/scheduler.py").read_text()


def test_the_lean_replay_of_the_kv_only_graph_repeats_sglangs_replay_for_the_buffers_the_graph_reads():
    """``draft_kv_only.lean_replay``: the capture's forward reads ``input_ids``, ``positions`` and the
    forward batch (whose ``out_cache_loc`` / ``spec_info.hidden_states`` are the buffers' slices); the
    replay's padding, graph choice, output and unpadding lines are the ones it repeats."""
    runner = _methods(_classes(SRT / "speculative/eagle_draft_extend_cuda_graph_runner.py")["EAGLEDraftExtendCudaGraphRunner"])
    capture = ast.unparse(runner["capture_one_batch_size"])
    for line in ("ret = self.model_runner.model.forward(forward_batch.input_ids, forward_batch.positions, forward_batch)",
                 "out_cache_loc = buffers.out_cache_loc[:num_tokens]", "positions = buffers.positions[:num_tokens]",
                 "input_ids = buffers.input_ids[:num_tokens]"):
        assert line in capture, line
    replay = ast.unparse(runner["replay"])
    for line in ("self.deepep_adapter.replay()", "index = bisect.bisect_left(self.capture_bs, raw_bs)",
                 "if bs * self.num_tokens_per_bs != num_tokens:", "buffers.out_cache_loc.zero_()",
                 "buffers.positions.zero_()", "buffers.input_ids[:num_tokens].copy_(forward_batch.input_ids)",
                 "buffers.out_cache_loc[:num_tokens].copy_(forward_batch.out_cache_loc)",
                 "buffers.positions[:num_tokens].copy_(forward_batch.positions)",
                 "buffers.hidden_states[:num_tokens].copy_(forward_batch.spec_info.hidden_states)",
                 "self._replay(forward_batch)", "out = self.output_buffers[bs]", "unpadding_bs = num_tokens",
                 "unpadding_bs = raw_bs", "out.topk_p = out_copy.topk_p[:unpadding_bs]"):
        assert line in replay, line


def test_the_fused_off_verify_metadata_repeats_flashattentions_topk1_verify_branch():
    """``off_fa3``: FlashAttention's TARGET_VERIFY topk-1 replay branch computes ``seq_lens + draft
    tokens``, its cumsum and the page table over ``max_seq_len_k`` pages, which the decode branch's
    fused ``normal_decode_set_metadata`` computes with ``seq_len_delta``; the graph runner calls the
    method with the parameters the wrapper takes."""
    fa = SRT / "layers/attention/flashattention_backend.py"
    cls = _methods(_classes(fa)["FlashAttentionBackend"])
    replay = cls["init_forward_metadata_replay_cuda_graph"]
    assert _params(replay) == ["self", "bs", "req_pool_indices", "seq_lens", "seq_lens_sum", "encoder_lens",
                               "forward_mode", "spec_info", "seq_lens_cpu", "out_cache_loc"]
    text = ast.unparse(replay)
    branch = text[text.index("elif forward_mode.is_target_verify():"):text.index("elif forward_mode.is_draft_extend():")]
    for line in ("metadata = self.target_verify_metadata[bs]",
                 "metadata.cache_seqlens_int32.copy_(seq_lens + self.speculative_num_draft_tokens)",
                 "metadata.max_seq_len_k = seq_lens_cpu.max().item() + self.speculative_num_draft_tokens",
                 "metadata.cu_seqlens_k[1:].copy_(torch.cumsum(metadata.cache_seqlens_int32, dim=0, dtype=torch.int32))",
                 "page_indices = self.req_to_token[req_pool_indices[:, None], self.decode_cuda_graph_metadata['strided_indices'][:max_seq_pages]]",
                 "page_indices //= self.page_size", "metadata.page_table[:, :max_seq_pages].copy_(page_indices)"):
        assert line in branch, line
    assert "self.forward_metadata = metadata" in text and "self.forward_metadata_spec_decode_expand = metadata_expand" in text
    fused = {n.name: n for n in ast.parse(fa.read_text()).body if isinstance(n, ast.FunctionDef)}["normal_decode_set_metadata"]
    assert _params(fused) == ["cache_seqlens_int32", "cu_seqlens_k", "page_table", "req_to_token", "req_pool_indices",
                              "strided_indices", "max_seq_pages", "seq_lens", "seq_len_delta", "page_size",
                              "swa_page_table", "token_to_kv_pool"]
    init = ast.unparse(cls["__init__"])
    for attr in ("self.topk =", "self.speculative_num_draft_tokens =", "self.page_size =", "self.req_to_token =",
                 "self.use_sliding_window_kv_pool =", "self.has_swa ="):
        assert attr in init, attr
    runner = ast.unparse(_methods(_classes(SRT / "model_executor/cuda_graph_runner.py")["CudaGraphRunner"])["replay_prepare"])
    assert "attn_backend.init_forward_metadata_replay_cuda_graph(bs, buffers.req_pool_indices[:bs], buffers.seq_lens[:bs]" in runner


def test_the_v1_draft_extend_triton_mend_targets_the_fixed_stride_sglang_lays_out():
    """``triton_draft_extend``: triton's replay metadata for a draft extend (v1 and v2 alike) lays
    the queries out at a fixed stride of ``num_steps + 1`` in ``self.qo_indptr`` (the buffer the graph
    reads), while v1's verify hands over only the accepted tokens, packed, with ``num_accept_tokens``
    per request, and the eager path (and FlashAttention's graph path) packs the queries by it. If
    SGLang changes any of this, the mend must be looked at again."""
    triton = SRT / "layers/attention/triton_backend.py"
    replay = _methods(_classes(triton)["TritonAttnBackend"])["init_forward_metadata_replay_cuda_graph"]
    assert _params(replay) == ["self", "bs", "req_pool_indices", "seq_lens", "seq_lens_sum", "encoder_lens",
                               "forward_mode", "spec_info", "seq_lens_cpu"]
    from server_patch import triton_draft_extend as tde

    params = _params(replay)[1:]
    assert (params.index("bs"), params.index("forward_mode"), params.index("spec_info")) == (
        tde._BS, tde._FORWARD_MODE, tde._SPEC_INFO)
    text = ast.unparse(replay)
    branch = text[text.index("elif forward_mode.is_draft_extend(include_v2=True):"):]
    for line in ("num_tokens_per_bs = self.speculative_num_steps + 1", "qo_indptr = self.qo_indptr[:bs + 1]",
                 "qo_indptr[:bs + 1] = torch.arange(0, bs * num_tokens_per_bs + 1, step=num_tokens_per_bs"):
        assert line in branch, line
    # the capture keeps a view of the same buffer in forward_metadata, which the replay never reassigns
    capture = ast.unparse(_methods(_classes(triton)["TritonAttnBackend"])["init_forward_metadata_capture_cuda_graph"])
    draft = capture[capture.index("elif forward_mode.is_draft_extend(include_v2=True):"):]
    assert "qo_indptr = self.qo_indptr[:bs + 1]" in draft and "self.forward_metadata = ForwardMetadata(" in capture
    assert "self.forward_metadata = " not in text
    info = SRT / "speculative/eagle_info.py"
    verify = ast.unparse(_methods(_classes(info)["EagleVerifyInput"])["verify"])
    assert "num_accept_tokens=num_correct_drafts + 1" in verify and "input_ids=accept_tokens" in verify
    eager = ast.unparse(_methods(_classes(info)["EagleDraftExtendInput"])["generate_attn_arg_prefill"])
    assert "qo_indptr[1:] = torch.cumsum(self.num_accept_tokens, dim=0)" in eager
    runner = ast.unparse(_methods(_classes(SRT / "speculative/eagle_draft_extend_cuda_graph_runner.py")
                                  ["EAGLEDraftExtendCudaGraphRunner"])["replay"])
    for line in ("buffers.num_accept_tokens.fill_(self.num_tokens_per_bs)",
                 "buffers.input_ids[:num_tokens].copy_(forward_batch.input_ids)",
                 "forward_batch.spec_info.num_accept_tokens = buffers.num_accept_tokens[:bs]",
                 "forward_mode=self.forward_mode, spec_info=forward_batch.spec_info"):
        assert line in runner, line


def test_what_the_deferred_draft_kv_repeats_of_sglangs_draft_extends():
    """``deferred_draft_kv`` (via ``off_state``) queues, instead of ``_draft_extend_for_decode``'s
    extend, the rows it would store: the verify's drawn tokens at the old ``seq_lens`` (positions:
    ``extend_prefix_lens`` = the old ``seq_lens``), the verify's ``out_cache_loc`` (the extend keeps
    it), the target's hidden states; and instead of ``_draft_extend_for_prefill``'s, each request's
    tokens shifted left by one with its drawn token last (written back into ``input_ids``), its
    next draft input's fields, and placeholders shaped as SGLang's idle input."""
    worker = _methods(_classes(SRT / "speculative/eagle_worker_v2.py")["EagleDraftWorker"])
    assert _params(worker["_draft_extend_for_prefill"]) == [
        "self", "batch", "target_hidden_states", "next_token_ids", "mm_input_embeds"]
    assert _params(worker["_draft_extend_for_decode"]) == ["self", "batch", "batch_result"]
    prefill = ast.unparse(worker["_draft_extend_for_prefill"])
    for line in ("for i, extend_len in enumerate(batch.extend_seq_lens):",
                 "batch.input_ids[pt:pt + extend_len] = torch.cat((input_ids[1:], next_token_ids[i].reshape(1)))",
                 "next_draft_input = EagleDraftInput(hidden_states=target_hidden_states, bonus_tokens=next_token_ids, "
                 "new_seq_lens=batch.seq_lens, num_tokens_per_req=1, num_tokens_for_logprob_per_req=1)",
                 "batch.spec_info = next_draft_input"):
        assert line in prefill, line
    fill = ast.unparse(_methods(_classes(SRT / "speculative/eagle_info_v2.py")["EagleDraftInputV2Mixin"])[
        "prepare_for_extend_to_fill_draft_kvcache"])
    for line in ("batch.input_ids = predict", "batch.extend_prefix_lens = seq_lens_cpu_.tolist()",
                 "batch.seq_lens = batch.seq_lens + num_draft_tokens"):
        assert line in fill, line
    assert "out_cache_loc" not in fill  # the extend writes where the verify did
    draft_input = _methods(_classes(SRT / "speculative/eagle_info.py")["EagleDraftInput"])
    idle = ast.unparse(draft_input["create_idle_input"])
    for line in ("topk_p=torch.empty((0, topk), device=device, dtype=torch.float32)",
                 "topk_index=torch.empty((0, topk), device=device, dtype=torch.int64)",
                 "torch.empty((0, hidden_size), device=device, dtype=dtype)"):
        assert line in idle, line
    assert {"hidden_size_for", "dtype_for"} <= set(draft_input)
    # the buffer's width and dtype, as SGLang sizes its draft-extend graph's hidden-state buffer
    extend_input = _methods(_classes(SRT / "speculative/eagle_info.py")["EagleDraftExtendInput"])
    assert {"hidden_size_for", "dtype_for"} <= set(extend_input)
    assert "EagleDraftExtendInput.hidden_size_for(self.eagle_worker)" in (
        SRT / "speculative/eagle_draft_extend_cuda_graph_runner.py").read_text()


def test_what_the_lean_v2_off_verify_repeats_of_sglangs_verify():
    """``off_verify_v2.LeanVerifyV2.run`` repeats ``EAGLEWorkerV2.verify`` up to the target forward
    and builds its result, with the argmax of a greedy 1-node tree as the drawn token; the worker's
    ``forward_batch_generation`` reaches it as ``self.verify``."""
    worker = _methods(_classes(SRT / "speculative/eagle_worker_v2.py")["EAGLEWorkerV2"])
    assert "batch_output = self.verify(model_worker_batch)" in ast.unparse(worker["forward_batch_generation"])
    verify = ast.unparse(worker["verify"])
    for line in ("batch.seq_lens.record_stream(torch.get_device_module(self.device).current_stream())",
                 "verify_input.num_tokens_per_req = self.speculative_num_steps + 1",
                 "self.plan_stream.wait_event(self._draft_done_event)",
                 "verify_forward_batch, can_run_cuda_graph = verify_input.prepare_for_v2_verify("
                 "self.req_to_token_pool, batch, self.target_worker)",
                 "self.target_worker.model_runner.attn_backend.update_verify_buffers_to_fill_after_draft(verify_input, "
                 "self.target_worker.model_runner.graph_runner.bs if can_run_cuda_graph else None)",
                 "forward_batch_output = self.target_worker.forward_batch_generation(model_worker_batch=None, "
                 "forward_batch=verify_forward_batch, is_verify=True, skip_attn_backend_init=True)",
                 "predict, accept_lens, accept_index = verify_input.sample(batch, logits_output, vocab_mask)",
                 "new_seq_lens = batch.seq_lens + accept_lens",
                 "next_draft_input = EagleDraftInput(bonus_tokens=bonus_tokens, new_seq_lens=new_seq_lens, "
                 "verify_done=verify_done)",
                 "return GenerationBatchResult(logits_output=logits_output, next_token_ids=predict, "
                 "can_run_cuda_graph=can_run_cuda_graph, speculative_num_draft_tokens=self.speculative_num_draft_tokens, "
                 "next_draft_input=next_draft_input, accept_lens=accept_lens, "
                 "routed_experts_output=forward_batch_output.routed_experts_output, "
                 "indexer_topk_output=forward_batch_output.indexer_topk_output)"):
        assert line in verify, line
    sample = ast.unparse(_methods(_classes(SRT / "speculative/eagle_info_v2.py")["EagleVerifyInputV2Mixin"])["sample"])
    for line in ("if sampling_info.is_all_greedy or _is_npu or _is_hip:",
                 "target_predict = torch.argmax(next_token_logits, dim=-1)",
                 "predict = torch.zeros(predict_shape, dtype=torch.int32, device=device).flatten()",
                 "return (predict, num_correct_drafts + 1, accept_index)"):
        assert line in sample, line


def test_what_the_off_resolution_repeats_of_sglangs_overlap_token_resolution():
    """``scheduler_hooks.resolve_off_tokens`` is ``_resolve_spec_overlap_tokens`` without the
    per-request speculative counters (its CPU test holds a copy of this body as the reference)."""
    body = ast.unparse(_methods(_classes(SRT / "managers/scheduler_output_processor_mixin.py")[
        "SchedulerOutputProcessorMixin"])["_resolve_spec_overlap_tokens"])
    for line in ("next_token_ids = result.next_token_ids.tolist()",
                 "accept_lens = result.accept_lens.tolist()",
                 "result.num_correct_drafts = sum(accept_lens) - len(batch.reqs)",
                 "result.num_correct_drafts_per_req_cpu = [x - 1 for x in accept_lens]",
                 "self.model_worker.on_verify_complete_cpu(result.num_correct_drafts_per_req_cpu)",
                 "stride = result.speculative_num_draft_tokens",
                 "predict_tokens.append(next_token_ids[i * stride:i * stride + accept_lens[i]])",
                 "if req.is_retracted:", "req.kv_committed_len -= 1",
                 "req.kv_committed_len += accept_lens[i] - 1", "req.spec_verify_ct += 1",
                 "req.spec_num_correct_drafts += num_correct_drafts",
                 "req.update_spec_correct_drafts_histogram(num_correct_drafts)",
                 "return predict_tokens"):
        assert line in body, line
    assert body.count("req.") == 7  # nothing else of a request is touched


def test_the_scheduler_resolves_futures_after_the_gate_decided_and_stores_them_after_the_worker_ran():
    """off_future_map: ``resolve_future`` runs in ``run_batch`` before the worker's forward (the gate's
    decision for the batch, made after ``get_next_batch_to_run``, is known there) and ``store_to_map``
    right after it (the runner's stale flag is this step's); a v2 batch's filter / merge touch only its
    future indices, so the OFF path's views must have the resolved batch size."""
    run_batch = ast.get_source_segment((SRT / "managers" / "scheduler.py").read_text(),
                                       _find_method(SRT / "managers" / "scheduler.py", "Scheduler", "run_batch"))
    resolve = run_batch.index("self.future_map.resolve_future(model_worker_batch)")
    forward = run_batch.index("self.model_worker.forward_batch_generation(", resolve)
    store = run_batch.index("self.future_map.store_to_map(future_indices, batch_result)", forward)
    assert resolve < forward < store
    loop = ast.get_source_segment((SRT / "managers" / "scheduler.py").read_text(),
                                  _find_method(SRT / "managers" / "scheduler.py", "Scheduler", "event_loop_overlap"))
    assert loop.index("self.get_next_batch_to_run()") < loop.index("self.run_batch(batch)")
    info = (SRT / "speculative" / "eagle_info.py").read_text()
    for method in ("filter_batch", "merge_batch"):
        src = ast.get_source_segment(info, _find_method(SRT / "speculative" / "eagle_info.py", "EagleDraftInput", method))
        head = src.split("return", 1)[0]
        assert "if self.future_indices is not None:" in head and "topk_p" not in head
