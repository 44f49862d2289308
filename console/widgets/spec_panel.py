"""The speculation panel: a large SPEC ON / SPEC OFF badge with its reason, then the details.

Details, most important first: the worker class and how it is known, threshold and hysteresis
(with a pending target), alarms, the last threshold-control outcome, switches and accept length,
then decode steps, last switch, CUDA graph facts, per-TP-rank states and the worker
check detail. Parts that do not fit side by side go under each other and long ones wrap
(nothing is cut off); the details scroll inside the panel (Tab to it, then ↑ ↓ PgUp PgDn).
The batch size here is the gate's own: the last decode batch from ``spec_gate``.
"""

from __future__ import annotations

import math

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll

from console import fmt
from console import state as st
from console.widgets.base import LinesWidget, SnapshotWidget, pack
from server_patch import contract

# 3-row block font for the badge on tall terminals (only the letters it needs)
_FONT = {
    "S": ("█▀▀", "▀▀█", "▀▀▀"),
    "P": ("█▀█", "█▀▀", "▀  "),
    "E": ("█▀▀", "█▀▀", "▀▀▀"),
    "C": ("█▀▀", "█  ", "▀▀▀"),
    "O": ("█▀█", "█ █", "▀▀▀"),
    "N": ("█▀▄", "█ █", "▀ ▀"),
    "F": ("█▀▀", "█▀ ", "▀  "),
    " ": ("  ", "  ", "  "),
}


def big_text(word: str) -> list[str] | None:
    """``word`` in the 3-row block font, or None if it has a letter the font lacks."""
    if any(ch not in _FONT for ch in word):
        return None
    return [" ".join(_FONT[ch][row] for ch in word) for row in range(3)]


def badge_variants(s: st.ConsoleSnapshot) -> tuple[str, list[str], str]:
    """``(label, reasons, css class)``: the reason in decreasing length (the badge shows the
    longest that fits). Classes: -on, -off, -unknown, -alarm."""
    p = s.process
    if p is not None and p.phase == st.PHASE_CRASHED and p.error:
        short = "port in use" if "already in use" in p.error else "could not start"
        return "NOT STARTED", [f"{short}: see the top line · r retries", f"{short} · r retries"], "-alarm"
    if p is not None and p.phase == st.PHASE_CRASHED:
        return "SERVER DOWN", [f"exit code {p.exit_code} · r restart"], "-alarm"
    if p is not None and s.connection.foreign:
        return "PORT TAKEN", ["another process answers on the port", "not this console's server"], "-alarm"
    if p is not None and p.phase in (st.PHASE_STOPPING, st.PHASE_STOPPED):
        return "STOPPING" if p.phase == st.PHASE_STOPPING else "STOPPED", ["server process group"], "-unknown"
    if p is not None and not s.sample_seen and p.phase != st.PHASE_READY:
        return "STARTING", [p.phase], "-unknown"
    if s.connection.auth_refused:
        err = s.connection.last_error or ""
        code = "HTTP 403" if "HTTP 403" in err else "HTTP 401"
        short = f"API key rejected ({code})" if "rejected" in err else f"{code}: pass --api-key"
        return "NO ACCESS", [err, short], "-alarm"
    if s.connection.reachable is False:
        return "NO DATA", [f"{s.connection.down_word} for {fmt.duration(s.down_for_s)}"], \
            "-alarm" if s.sample_seen else "-unknown"
    if not s.sample_seen:
        return "CONNECTING", [s.url, s.url.removeprefix("http://")], "-unknown"
    g = s.gate
    if g is None:
        return "NO GATE", [f"server runs without {contract.THRESHOLD_FLAG}",
                           "gate not enabled on this server"], "-unknown"
    bs = s.decode_batch
    n, h = g.threshold, g.hysteresis or 0
    if g.mode == contract.MODE_AUTO and g.spec_enabled is not None:
        label = "SPEC ON" if g.spec_enabled else "SPEC OFF"
        reasons = [r for r in (g.auto_reason,) if r] + auto_estimates(g, bs) + [
            f"auto: decode batch {fmt.num(bs)}", f"auto: batch {fmt.num(bs)}"]
        return label, reasons, "-on" if g.spec_enabled else "-off"
    if g.spec_enabled is True:
        return "SPEC ON", [f"decode batch {fmt.num(bs)} < threshold {fmt.num(n)}", f"batch {fmt.num(bs)} < N {fmt.num(n)}"], "-on"
    if g.spec_enabled is False:
        if bs is not None and n is not None and bs < n:
            low = contract.resume_below(n, h)
            return "SPEC OFF", [
                f"decode batch {bs}: back on below {low} (threshold {n} - hysteresis {h})",
                f"decode batch {bs}: back on below {low} (N - H)",
                f"decode batch {bs}: back on below {low}",
                f"batch {bs}: on below {low}",
            ], "-off"
        return "SPEC OFF", [f"decode batch {fmt.num(bs)} >= threshold {fmt.num(n)}", f"batch {fmt.num(bs)} >= N {fmt.num(n)}"], "-off"
    return "SPEC ?", ["spec_gate gives no true/false spec_enabled"], "-unknown"


def live_bucket(g: st.GateState, bs: int | None) -> st.Bucket | None:
    """The learned-curve bucket holding decode batch ``bs``, None when none does."""
    if bs is None:
        return None
    for b in g.auto_buckets or ():
        if b.lo is not None and b.lo <= bs and (b.hi is None or bs <= b.hi):
            return b
    return None


def _k(tok_s: float) -> str:
    """``10,929`` -> ``10.9k`` (tok/s, for the shortest reasons)."""
    return f"{tok_s / 1000:.1f}k" if tok_s >= 1000 else f"{tok_s:.0f}"


def auto_estimates(g: st.GateState, bs: int | None) -> list[str]:
    """Shorter forms of ``spec_gate.auto_reason`` from the live batch's learned bucket, longest
    first: ``auto: OFF at batch 109 (ON 6,323 vs OFF 10,929 tok/s)``, then ``batch 109: ON 6.3k vs
    OFF 10.9k tok/s`` (the full reason is ~75 columns, the panel's line ~60). Empty when the
    bucket has not been measured both ways."""
    b = live_bucket(g, bs)
    if b is None or b.on_tok_s is None or b.off_tok_s is None:
        return []
    mode = "ON" if g.spec_enabled else "OFF"
    return [f"auto: {mode} at batch {bs} (ON {fmt.num(b.on_tok_s)} vs OFF {fmt.num(b.off_tok_s)} tok/s)",
            f"batch {bs}: ON {_k(b.on_tok_s)} vs OFF {_k(b.off_tok_s)} tok/s"]


def pinned_values(s: st.ConsoleSnapshot) -> str:
    """``N 32 · H 4`` (``N 32→33`` while a change is pending): shown next to SPEC ON/OFF, so the
    threshold stays in view however far the details are scrolled. Empty without a gate."""
    g = s.gate
    if g is None or s.stale or (g.threshold is None and g.mode != contract.MODE_AUTO):
        return ""
    p = s.pending
    if g.mode == contract.MODE_AUTO:
        n = f"N auto (≈{g.threshold})" if g.threshold is not None else "N auto (learning)"
        if p is not None and p.threshold is not None and p.threshold != contract.AUTO:
            n += f"→{p.threshold}"
        return n
    n = f"N {g.threshold}"
    if p is not None and p.threshold is not None and p.threshold != g.threshold:
        n += f"→{p.threshold}"
    h = f"H {fmt.num(g.hysteresis)}"
    if p is not None and p.hysteresis is not None and p.hysteresis != g.hysteresis:
        h += f"→{p.hysteresis}"
    return f"{n} · {h}"


def badge_state(s: st.ConsoleSnapshot, width: int | None = None) -> tuple[str, str, str]:
    """``(label, reason, css class)``: the longest reason that fits ``width`` (None: the full one)."""
    label, reasons, cls = badge_variants(s)
    if width is not None:
        for reason in reasons:
            if len(reason) <= width:
                return label, reason, cls
        return label, reasons[-1], cls
    return label, reasons[0], cls


class SpecBadge(SnapshotWidget):
    """The large state: one bold line plus reason, or a 3-row block font when there is room."""

    DIRECT_LINES = True  # the reason (the decode batch) changes every second
    CENTER = True

    COMPONENT_CLASSES = {"spec-badge--reason"}

    def watch_snapshot(self, snapshot: st.ConsoleSnapshot) -> None:
        _, _, cls = badge_state(snapshot)
        for c in ("-on", "-off", "-unknown", "-alarm"):
            self.set_class(c == cls, c)

    def render(self) -> Text:
        width, height = self.size.width, self.size.height
        label, reason, _ = badge_state(self.snapshot, width)
        pinned = pinned_values(self.snapshot)
        text = Text(justify="center", no_wrap=True, overflow="ellipsis")
        glyphs = big_text(label) if height >= 5 else None
        if glyphs and len(glyphs[0]) <= width:
            for row in glyphs:
                text.append(row + "\n", "bold")
            # the plain words too: block letters are invisible to copy-paste, grep and screen readers
            _, reason, _ = badge_state(self.snapshot, max(1, width - len(label) - 3))
            text.append(label + " · ", "bold")
            text.append(reason, self.style_of("spec-badge--reason"))
            if pinned:
                text.append("\n" + pinned, "bold")
            return text
        text.append(label, "bold")
        if pinned and len(label) + 3 + len(pinned) <= width:
            text.append("   " + pinned, "bold")
        text.append("\n")
        text.append(reason, self.style_of("spec-badge--reason"))
        return text


#: switches per minute from which the rate is shown, as an alarm: the gate thrashes around the
#: threshold (a switch every 2 s or more often; load changes alone switch far less often)
THRASH_PER_MIN = 30.0


def gate_warnings(s: st.ConsoleSnapshot) -> list[str]:
    """Known operational traps, from the live values.

    * a threshold above max running requests never fires;
    * a decode batch above cuda graph max bs runs without CUDA graphs;
    * TP ranks that disagree about the gate;
    * an OFF step whose decode-kernel attention failed its key-index check (server log has it);
    * N - H <= 1: valid, but speculation, once off, comes back only below batch size 1, i.e.
      never while a request runs (decode batches have at least one request).
    """
    g = s.gate
    out = []
    if g is None:
        return out
    auto = g.mode == contract.MODE_AUTO
    if not auto and contract.never_back_on(g.threshold, g.hysteresis):
        out.append(f"N-H = {contract.resume_below(g.threshold, g.hysteresis)}: once off, never back on")
    if g.threshold is not None and not auto:
        out.extend(w.short for w in contract.capacity_warnings(g.threshold, s.max_running_requests, None))
    bs = s.decode_batch
    if bs is not None and g.cuda_graph_max_bs is not None and bs > g.cuda_graph_max_bs:
        out.append(f"decode batch {bs} > cuda graph max bs {g.cuda_graph_max_bs}: no CUDA graph")
    if g.ranks_disagree:
        out.append("TP ranks disagree about the gate")
    if g.off_attention_mismatches:
        out.append(f"OFF-step attention read wrong keys on {g.off_attention_mismatches} checked steps (see log)")
    if g.off_early_seq_lens_mismatches:
        out.append(f"OFF-step early seq_lens differed on {g.off_early_seq_lens_mismatches} checked steps (see log)")
    if g.off_kv_only_mismatches:
        out.append(f"OFF-step KV-only draft K/V differed on {g.off_kv_only_mismatches} checked steps (see log)")
    return out


def _t(*pieces: tuple[str, object]) -> Text:
    text = Text()
    for content, style in pieces:
        text.append(content, style)  # type: ignore[arg-type]
    return text


def _checked(checks, mismatches) -> str:
    """``, N checked, M wrong``: a run-time proof's counts as the details show them."""
    return f", {fmt.num(checks)} checked, {fmt.num(mismatches)} wrong"


def _cut_row(d: dict, label: str, status: str, on: str, on_value: str, on_proof: str, off_value: str) -> list:
    """A details row for an OFF-path cut (server_patch): ``on_value`` and its proof while ``status``
    is ``on``, else ``off_value`` and ``status`` (why not) in parentheses."""
    value, proof = (on_value, on_proof) if status == on else (off_value, f" ({status})")
    return [_t((label, d["label"]), (value, d["value"]), (proof, d["dim"]))]


def _worker_part(s: st.ConsoleSnapshot, d: dict) -> list[Text]:
    w = s.worker
    if w.live_class is None:
        return [_t(("worker ", d["label"]), (fmt.NA, d["dim"]))]
    head = _t(("worker ", d["label"]), (w.live_class, d["value"]))
    if w.status == st.CHECK_VERIFIED:
        return [head + _t((" ✓ log agrees", d["ok"]))]
    if w.status == st.CHECK_MISMATCH:
        return [head + _t((" ✗ MISMATCH", d["alarm"]))]
    if w.status == st.CHECK_UNVERIFIED:
        return [head + _t((" ? live only", d["dim"]))]
    return [head]


def detail_rows(s: st.ConsoleSnapshot, d: dict) -> list[list[Text]]:
    """The details as rows of parts (a row's parts share a line when they fit), most important first.

    ``d`` maps style names (label, value, dim, ok, alarm, pending) to Rich styles. While the
    server is down the values are drawn in the dim style (they are from before the outage).
    """
    g = s.gate
    if s.stale:
        d = {**d, "value": d["dim"]}
    rows: list[list[Text]] = [_worker_part(s, d)]
    message: list[list[Text]] = []
    if s.message:
        level = {"error": "alarm", "ok": "ok"}.get(s.message_level, "value")
        message = [[Text(s.message, d[level])]]
    if g is None:
        rows.extend(message)
        if s.sample_seen:
            rows.append([Text(f"started without {contract.THRESHOLD_FLAG}: no gate to show or change", d["dim"])])
        if s.worker.status == st.CHECK_MISMATCH:
            rows.append([Text("⚠ " + s.worker.detail, d["alarm"])])
        return rows
    p = s.pending
    auto = g.mode == contract.MODE_AUTO
    if auto:
        crossing = f" (crossover ≈ {fmt.num(g.threshold, 'req')})" if g.threshold is not None else " (learning)"
        thr = _t(("threshold ", d["label"]), ("auto", d["value"]), (crossing, d["dim"]))
    else:
        thr = _t(("threshold ", d["label"]), (fmt.num(g.threshold, "req"), d["value"]))
    shown = contract.AUTO if auto else g.threshold
    if p is not None and p.threshold is not None and p.threshold != shown:
        thr.append(f" → {p.threshold} pending", d["pending"])
    hys = _t(("hysteresis ", d["label"]), (fmt.num(g.hysteresis, "req"), d["value"]))
    if p is not None and p.hysteresis is not None and p.hysteresis != g.hysteresis:
        hys.append(f" → {p.hysteresis} pending", d["pending"])
    rows.append([thr, hys])
    # standing alarms before the last control outcome: that one is also a notice and a log line,
    # and on a short panel it pushed "N-H = 1: never back on" below the fold
    if s.worker.status == st.CHECK_MISMATCH:
        rows.append([Text("⚠ " + s.worker.detail, d["alarm"])])
    for warning in gate_warnings(s):
        rows.append([Text("⚠ " + warning, d["alarm"])])
    rows.extend(message)
    sw = _t(("switches ", d["label"]), (fmt.num(g.switches), d["value"]))
    if s.switches_per_min is not None and s.switches_per_min >= THRASH_PER_MIN:
        sw.append(f" ({s.switches_per_min:.0f}/min: thrashing)", d["alarm"])
    al = g.accept_length_recent
    if al is None and s.load is not None:
        al = s.load.accept_length
    accept = _t(("accept ", d["label"]), (fmt.num(al, "tok/step", 2), d["value"]))
    problem = contract.accept_length_problem(al, g.num_steps)
    if problem:
        accept.append(f" ⚠ {problem}", d["alarm"])
    rows.append([sw, accept])
    if auto and g.auto_probes is not None:
        share = ""
        if g.auto_probe_share is not None:
            time_share = ("" if g.auto_probe_time_share is None
                          else f", ~{g.auto_probe_time_share * 100:.1f}% of decode time")
            share = f" ({g.auto_probe_share * 100:.1f}% of decode steps{time_share})"
        rows.append([_t(("auto probes ", d["label"]), (f"{fmt.num(g.auto_probes)}{share}", d["value"]))])
    rows.extend(learned_curve(s, d))
    # the rest: below the fold on small terminals (scroll)
    rows.append([
        _t(("max running ", d["label"]), (fmt.num(s.max_running_requests, "req"), d["value"])),
        _t(("cuda graph max bs ", d["label"]), (fmt.num(g.cuda_graph_max_bs, "req"), d["value"])),
    ])
    rows.append([
        _t(("decode batch ", d["label"]), (fmt.num(g.last_decode_batch_size, "req"), d["value"])),
        _t(("steps on ", d["label"]), (fmt.num(g.decode_steps_on), d["value"]),
           ("  off ", d["label"]), (fmt.num(g.decode_steps_off), d["value"])),
    ])
    if g.last_switch is not None:
        ls = g.last_switch
        rows.append([_t(("last switch ", d["label"]),
                        (f"{ls.direction or '?'} at step {fmt.num(ls.step)}, decode batch {fmt.num(ls.batch_size)} req", d["value"]))])
    if g.steps_since_on or g.accept_length_first_on_step is not None:
        rows.append([_t(
            ("accept after ON ", d["label"]),
            (f"first {fmt.num(g.accept_length_first_on_step, digits=2)}, "
             f"{fmt.num(g.steps_since_on)} steps {fmt.num(g.accept_length_since_on, digits=2)}", d["value"]),
        )])
    rows.append([_t(
        ("OFF-step CUDA graph ", d["label"]),
        ({True: "captured", False: "not captured", None: fmt.NA}[g.off_cuda_graph], d["value"]),
        (f", replayed by {fmt.num(g.off_steps_cuda_graph)} OFF steps"
         + (f" + {fmt.num(g.off_resume_steps)} resume" if g.off_resume_steps else ""), d["dim"]),
    )])
    if g.off_target_attention is not None:
        kernels = g.off_target_attention
        if g.off_draft_extend_attention and g.off_draft_extend_attention != g.off_target_attention:
            kernels += f" / draft {g.off_draft_extend_attention}"
        proof = (_checked(g.off_attention_checks, g.off_attention_mismatches)
                 if "decode-kernel" in kernels else "")
        rows.append([_t(("OFF-step attention ", d["label"]), (kernels, d["value"]), (proof, d["dim"]))])
    if g.off_draft_extend is not None:
        # KV-only: OFF steps store only the draft's K/V; resume steps refresh its top-k (draft_kv_only)
        value = g.off_draft_extend
        if g.off_draft_extend == "kv-only":
            if g.off_kv_only_runs == "eager":  # no CUDA graph for it (v2 on fa3, --disable-cuda-graph)
                value += " (eager)"
            proof = (_checked(g.off_kv_only_checks, g.off_kv_only_mismatches) + ", "
                     f"{fmt.num(g.off_resume_steps)} resume step{'' if g.off_resume_steps == 1 else 's'}")
            if g.off_kv_only_prefills:  # prompts prefilled while OFF (draft_kv_only: KV-only draft prefill)
                proof += f", {fmt.num(g.off_kv_only_prefills)} KV-only prefills"
        else:
            proof = f" ({g.off_draft_extend_reason})" if g.off_draft_extend_reason else ""
        rows.append([_t(("OFF draft extend ", d["label"]), (value, d["value"]), (proof, d["dim"]))])
    if g.off_deferred_draft_kv is not None:
        # v2: OFF steps and prefills while OFF queue the draft's K/V, stored many at a time (deferred_draft_kv)
        rows.append(_cut_row(d, "OFF draft K/V ", g.off_deferred_draft_kv, "on", "deferred",
                             f", {fmt.num(g.off_deferred_draft_kv_rows)} rows in "
                             f"{fmt.num(g.off_deferred_draft_kv_flushes)} flushes", "stored at once"))
    if g.off_lean_v2_verify is not None:
        # v2: an all-greedy OFF batch verified as an argmax (off_verify_v2)
        rows.append(_cut_row(d, "OFF verify ", g.off_lean_v2_verify, "on", "argmax of greedy batches",
                             f", {fmt.num(g.off_lean_v2_verify_steps)} steps"
                             + _checked(g.off_lean_v2_verify_checks, g.off_lean_v2_verify_mismatches),
                             "SGLang's tree verify"))
    if g.off_verify_metadata is not None:
        # fa3, SPECCONSOLE_OFF_FA3_FUSED_VERIFY_METADATA=1: the OFF verify's replay metadata fused (server_patch/off_fa3.py)
        rows.append(_cut_row(d, "OFF verify metadata ", g.off_verify_metadata, "fused", "fused",
                             _checked(g.off_verify_metadata_checks, g.off_verify_metadata_mismatches),
                             "FlashAttention's"))
    if g.off_lean_future_map is not None:
        # v2 overlap, SPECCONSOLE_OFF_LEAN_FUTURE_MAP=1: OFF steps move 2 of the FutureMap's 5 fields (off_future_map)
        rows.append(_cut_row(d, "OFF future map ", g.off_lean_future_map, "on", "tokens and seq_lens only",
                             f", {fmt.num(g.off_lean_future_map_steps)} steps"
                             + _checked(g.off_lean_future_map_checks, g.off_lean_future_map_mismatches),
                             "SGLang's"))
    if g.kv_reserve is not None:
        # v2, SPECCONSOLE_KV_RESERVE=R: decode steps allocate KV slots R tokens ahead (server_patch/kv_reserve.py)
        rows.append(_cut_row(d, "KV reserve ", g.kv_reserve, "on", f"{fmt.num(g.kv_reserve_tokens)} tokens a request",
                             f", {fmt.num(g.kv_reserve_skipped_steps)} steps without allocating, "
                             f"{fmt.num(g.kv_reserve_topups)} top-ups"
                             + _checked(g.kv_reserve_checks, g.kv_reserve_mismatches), "SGLang's allocation"))
    if g.off_lean_v1 is not None:
        # v1 (default; =0 off): OFF steps without SGLang's mid-step syncs (server_patch/off_step_v1.py)
        rows.append(_cut_row(d, "OFF step path ", g.off_lean_v1, "on", "lean",
                             f", {fmt.num(g.off_lean_v1_steps)} steps"
                             + _checked(g.off_lean_v1_checks, g.off_lean_v1_mismatches), "SGLang's verify path"))
    if g.off_early_seq_lens is not None:
        # v2: does the scheduler prepare the next batch while an OFF verify runs (server_patch/off_state.py)
        when = "during the OFF verify" if g.off_early_seq_lens else "after the OFF verify"
        proof = (_checked(g.off_early_seq_lens_checks, g.off_early_seq_lens_mismatches)
                 if g.off_early_seq_lens else "")
        rows.append([_t(("next batch prepared ", d["label"]), (when, d["value"]), (proof, d["dim"]))])
    if g.target_prefill is not None:
        # the target's prefills on SGLang's piecewise CUDA graph, checked against the eager forward
        proof = (_checked(g.target_prefill_checks, g.target_prefill_mismatches)
                 if g.target_prefill_reason is None else f" ({g.target_prefill_reason})")
        rows.append([_t(("target prefill ", d["label"]), (g.target_prefill, d["value"]), (proof, d["dim"]))])
    if g.off_target_graph_replays is not None or g.on_target_graph_replays is not None:
        rows.append([_t(
            ("graph replays ", d["label"]),
            (f"OFF target {fmt.num(g.off_target_graph_replays)}, draft extend "
             f"{fmt.num(g.off_draft_extend_graph_replays)}"
             + (f" + KV-only {fmt.num(g.off_kv_only_graph_replays)}" if g.off_kv_only_graph_replays is not None else "")
             + f"; ON target {fmt.num(g.on_target_graph_replays)}", d["value"]),
        )])
    overlap = {True: "on", False: "off", None: fmt.NA}[g.overlap]
    rows.append([
        _t(("spec ", d["label"]), (f"{g.spec_version or fmt.NA}, overlap {overlap}", d["value"])),
        _t((f"{g.speculative_algorithm or fmt.NA} steps {fmt.num(g.num_steps)} topk {fmt.num(g.topk)} "
            f"draft {fmt.num(g.num_draft_tokens)}", d["value"])),
    ])
    if g.spec_version == "v1":
        # measured on the H200 (README, Results): forced off 0.64x of the default server without
        # speculation on SGLang's OFF path, 0.77x with the lean OFF step
        share = "~3/4" if g.off_lean_v1 == "on" else "~2/3"
        # the lean step takes topk 1 only, and says why not where it was asked for
        hint = "; SPECCONSOLE_OFF_LEAN_V1=1 gives ~3/4" if g.off_lean_v1 is None and g.topk == 1 else ""
        rows.append([Text(f"v1 runs without the overlap scheduler, OFF steps too: expect {share} of the tok/s of an "
                          f"overlapped server without speculation{hint} (README, Results)", d["dim"])])
    if g.ranks:
        t = _t((f"TP ranks {fmt.num(g.tp_size)}: ", d["label"]))
        for r in g.ranks:
            state = "on" if r.spec_enabled else "off" if r.spec_enabled is False else "?"
            t.append(f"TP{r.tp_rank} {state} ", d["alarm"] if g.ranks_disagree else d["value"])
        t.rstrip()
        rows.append([t])
    rows.append([Text(s.worker.detail, d["dim"])])
    return rows


def bucket_note(b: st.Bucket) -> str:
    """Why a bucket's mode may look at odds with its own two estimates: ``≈`` when they are within
    ``contract.AUTO_MARGIN`` (a tie: it does not vote), ``outvoted`` when its own estimates favour
    the other mode by more (the one crossover fitted to every bucket puts it on the other side)."""
    if b.on is None or not b.on_tok_s or not b.off_tok_s:
        return ""
    ratio = b.on_tok_s / b.off_tok_s
    if abs(math.log(ratio)) < math.log(1 + contract.AUTO_MARGIN):
        return "≈"
    return "" if (ratio > 1) == bool(b.on) else "outvoted"


def learned_curve(s: st.ConsoleSnapshot, d: dict) -> list[list[Text]]:
    """The auto threshold's learned curve, one row per measured batch-size bucket: its batch sizes,
    the estimated output tok/s with speculation on and off, the mode the fitted crossover gives it
    (with :func:`bucket_note`), the live decode batch marked ``◀``; shown in auto mode (the server
    measures it in manual mode too)."""
    g = s.gate
    if g is None or not g.auto_buckets or g.mode != contract.MODE_AUTO:
        return []
    margin = f"{contract.AUTO_MARGIN * 100:.0f}%"
    rows = [[_t(("learned  batch   ON tok/s  OFF tok/s  mode", d["label"]))]]
    bs = g.last_decode_batch_size
    live = live_bucket(g, bs)
    for b in g.auto_buckets:
        span = f"{b.lo}" if b.hi in (b.lo, None) else f"{b.lo}-{b.hi}"
        mode = {True: "ON", False: "OFF", None: "?"}[b.on]
        line = _t((f"  {span:>10}  {fmt.num(b.on_tok_s):>8}  {fmt.num(b.off_tok_s):>9}  ", d["value"]),
                  (f"{mode:<3}", d["ok"] if b.on else d["value"]))
        note = bucket_note(b)
        if note:
            line.append(f" {note}", d["dim"])
        if b is live:
            line.append(f" ◀ batch {bs}", d["pending"])
        rows.append([line])
    rows.append([_t((f"mode: one crossover fitted to all buckets; ≈ within {margin} (no vote), "
                     "outvoted: its own estimates lost the fit", d["dim"]))])
    return rows


def detail_lines(s: st.ConsoleSnapshot, d: dict, width: int = 80) -> list[Text]:
    """:func:`detail_rows` laid out ``width`` cells wide (side by side where they fit, else wrapped)."""
    lines: list[Text] = []
    for row in detail_rows(s, d):
        lines.extend(pack(row, width))
    return lines


class SpecDetails(LinesWidget):
    """Detail lines under the badge, all of them (its scroll container shows what fits)."""

    DIRECT_LINES = True  # the step counts change every second

    COMPONENT_CLASSES = {
        "spec-details--label",
        "spec-details--value",
        "spec-details--dim",
        "spec-details--ok",
        "spec-details--alarm",
        "spec-details--pending",
    }

    def lines(self, width: int) -> list[Text]:
        d = {name: self.style_of(f"spec-details--{name}") for name in ("label", "value", "dim", "ok", "alarm", "pending")}
        return detail_lines(self.snapshot, d, max(10, width))


class SpecPanel(Vertical):
    """Bordered container: :class:`SpecBadge` over :class:`SpecDetails` in a focusable scroll area."""

    def compose(self) -> ComposeResult:
        yield SpecBadge(id="spec-badge")
        with VerticalScroll(id="spec-scroll"):
            yield SpecDetails(id="spec-details")
