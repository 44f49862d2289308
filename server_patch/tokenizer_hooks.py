"""Hooks in SGLang's main process (``TokenizerManager``): the HTTP face of the gate.

- ``set_internal_state`` (AROUND): a request carrying gate keys answers
  ``{"updated", "reason", "threshold", "hysteresis"}`` instead of SGLang 0.5.12's bare list of
  booleans (``managers/tokenizer_control_mixin.py:793-800``), so a rejection carries its reason.
- ``_calculate_spec_decoding_metrics`` (AFTER): per-request ``spec_accept_length`` becomes
  ``1 + correct drafts / verifies`` over speculative steps only; SGLang's
  ``completion_tokens / spec_verify_ct`` (``tokenizer_manager.py:2131-2133``) would count
  tokens made while speculation was off.
"""

from __future__ import annotations

from typing import Any, Dict, List

from server_patch.contract import DECODE_STEP_KEY, GATE_KEYS, HYSTERESIS_KEY, REASON_KEY, THRESHOLD_KEY, set_answer

TOKENIZER_MANAGER = "sglang.srt.managers.tokenizer_manager.TokenizerManager"


def merge_gate_replies(replies: List[Any]) -> Dict[str, Any]:
    """Fold the per-DP-rank ``SetInternalStateReqOutput`` replies into the contract's answer."""
    updated = bool(replies) and all(r.updated for r in replies)
    reason = None
    for r in replies:
        if not r.updated:
            reason = (r.server_args or {}).get(REASON_KEY) or "rejected by the scheduler"
            break
    first = (replies[0].server_args if replies else None) or {}
    return set_answer(updated, reason if not updated else None, first.get(THRESHOLD_KEY),
                      first.get(HYSTERESIS_KEY), first.get(DECODE_STEP_KEY))


async def around_set_internal_state(original, manager, obj, *args, **kwargs):
    if not any(k in (obj.server_args or {}) for k in GATE_KEYS):
        return await original(manager, obj, *args, **kwargs)
    manager.auto_create_handle_loop()
    replies = await manager.set_internal_state_communicator(obj)
    return merge_gate_replies(replies)


def after_calculate_spec_decoding_metrics(result, manager, meta_info, recv_obj, i, *args, **kwargs):
    verify_ct = meta_info.get("spec_verify_ct")
    correct = meta_info.get("spec_num_correct_drafts")
    if verify_ct:
        meta_info["spec_accept_length"] = 1 + correct / verify_ct
    return None


HOOKS = [
    (f"{TOKENIZER_MANAGER}.set_internal_state", around_set_internal_state, "AROUND"),
    (
        f"{TOKENIZER_MANAGER}._calculate_spec_decoding_metrics",
        after_calculate_spec_decoding_metrics,
        "AFTER",
    ),
]


def register(registry, hook_type) -> None:
    """Register the main-process hooks with SGLang's ``HookRegistry`` (``hook_type`` = its ``HookType``)."""
    for target, hook, kind in HOOKS:
        registry.register(target, hook, getattr(hook_type, kind))
