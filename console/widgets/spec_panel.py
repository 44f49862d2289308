"""The speculation panel: a large SPEC ON / SPEC OFF badge with its reason, then the details.

Details, most important first (lines that do not fit the panel's height are dropped from the
end): the worker class and how it is known, threshold / hysteresis / max running requests,
switches and accept length, the last threshold-control outcome, then (taller terminals)
decode steps, last switch, CUDA graph facts, per-TP-rank states and the worker check detail.
"""

from __future__ import annotations

import textwrap

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical

from console import fmt
from console import state as st
from console.widgets.base import SnapshotWidget

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


def badge_state(s: st.ConsoleSnapshot) -> tuple[str, str, str]:
    """``(label, reason, css class)`` for the badge. Classes: -on, -off, -unknown, -alarm."""
    p = s.process
    if p is not None and p.phase == st.PHASE_CRASHED:
        return "SERVER DOWN", f"exit code {p.exit_code} · r restart", "-alarm"
    if p is not None and p.phase in (st.PHASE_STOPPING, st.PHASE_STOPPED):
        return "STOPPING" if p.phase == st.PHASE_STOPPING else "STOPPED", "server process group", "-unknown"
    if p is not None and not s.sample_seen and p.phase != st.PHASE_READY:
        return "STARTING", p.phase, "-unknown"
    if s.connection.reachable is False:
        return "NO DATA", f"unreachable for {fmt.duration(s.down_for_s)}", "-alarm" if s.sample_seen else "-unknown"
    if not s.sample_seen:
        return "CONNECTING", s.url, "-unknown"
    g = s.gate
    if g is None:
        return "NO GATE", "server runs without --speculative-disable-batch-threshold", "-unknown"
    bs = g.last_decode_batch_size
    if bs is None:
        bs = s.running_batch
    n, h = g.threshold, g.hysteresis or 0
    if g.spec_enabled is True:
        return "SPEC ON", f"batch {fmt.num(bs)} < threshold {fmt.num(n)}", "-on"
    if g.spec_enabled is False:
        if bs is not None and n is not None and bs < n:
            return "SPEC OFF", f"batch {bs}: back on below {n - h} (threshold {n} - hysteresis {h})", "-off"
        return "SPEC OFF", f"batch {fmt.num(bs)} >= threshold {fmt.num(n)}", "-off"
    return "SPEC ?", "spec_gate has no spec_enabled", "-unknown"


class SpecBadge(SnapshotWidget):
    """The large state: one bold line plus reason, or a 3-row block font when there is room."""

    COMPONENT_CLASSES = {"spec-badge--reason"}

    def watch_snapshot(self, snapshot: st.ConsoleSnapshot) -> None:
        _, _, cls = badge_state(snapshot)
        for c in ("-on", "-off", "-unknown", "-alarm"):
            self.set_class(c == cls, c)

    def render(self) -> Text:
        label, reason, _ = badge_state(self.snapshot)
        width, height = self.size.width, self.size.height
        text = Text(justify="center", no_wrap=True, overflow="ellipsis")
        glyphs = big_text(label) if height >= 4 else None
        if glyphs and len(glyphs[0]) <= width:
            for row in glyphs:
                text.append(row + "\n", "bold")
        else:
            text.append(label + "\n", "bold")
        text.append(reason, self.style_of("spec-badge--reason"))
        return text


#: switches per minute from which the rate is shown as an alarm (thrash around the threshold)
THRASH_PER_MIN = 6.0


def gate_warnings(s: st.ConsoleSnapshot) -> list[str]:
    """Known operational traps, from the live values.

    * a threshold above max running requests never fires;
    * a batch above cuda graph max bs runs without CUDA graphs;
    * TP ranks that disagree about the gate.
    """
    g = s.gate
    out = []
    if g is None:
        return out
    mrr = s.max_running_requests
    if g.threshold is not None and mrr is not None and g.threshold > mrr:
        out.append(f"threshold {g.threshold} > max running {mrr}: never fires")
    bs = s.running_batch
    if bs is not None and g.cuda_graph_max_bs is not None and bs > g.cuda_graph_max_bs:
        out.append(f"batch {bs} > cuda graph max bs {g.cuda_graph_max_bs}: no CUDA graph")
    if g.ranks_disagree:
        out.append("TP ranks disagree about the gate")
    return out


def _worker_line(s: st.ConsoleSnapshot, d: dict) -> Text:
    w = s.worker
    g = s.gate
    t = Text(no_wrap=True, overflow="ellipsis")
    t.append("worker ", d["label"])
    if w.live_class is None:
        t.append(fmt.NA, d["dim"])
        return t
    t.append(w.live_class, d["value"])
    if w.status == st.CHECK_VERIFIED:
        t.append(" ✓ log agrees", d["ok"])
    elif w.status == st.CHECK_MISMATCH:
        t.append(" ✗ MISMATCH", d["alarm"])
    elif w.status == st.CHECK_UNVERIFIED:
        t.append(" ? live only", d["dim"])
    return t


def detail_lines(s: st.ConsoleSnapshot, d: dict, width: int = 80) -> list[Text]:
    """The detail lines, most important first. ``d`` maps style names to Rich styles.

    The last threshold-control message (e.g. the server's reason for a rejection) comes third
    and wraps onto two lines of ``width`` cells if needed.
    """
    g = s.gate
    lines: list[Text] = [_worker_line(s, d)]
    message: list[Text] = []
    if s.message:
        level = {"error": "alarm", "ok": "ok"}.get(s.message_level, "value")
        wrapped = textwrap.wrap(s.message, max(10, width)) or [""]
        if len(wrapped) > 2:
            wrapped = [wrapped[0], textwrap.shorten(" ".join(wrapped[1:]), max(10, width), placeholder="…")]
        message = [Text(part, d[level], no_wrap=True, overflow="ellipsis") for part in wrapped]
    if g is not None:
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append("threshold ", d["label"])
        t.append(fmt.num(g.threshold, "req"), d["value"])
        if s.pending is not None and s.pending.threshold is not None and s.pending.threshold != g.threshold:
            t.append(f" → {s.pending.threshold} pending", d["pending"])
        t.append("  hysteresis ", d["label"])
        t.append(fmt.num(g.hysteresis, "req"), d["value"])
        if s.pending is not None and s.pending.hysteresis is not None and s.pending.hysteresis != g.hysteresis:
            t.append(f" → {s.pending.hysteresis}", d["pending"])
        lines.append(t)
        lines.extend(message)
        message = []
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append("switches ", d["label"])
        t.append(fmt.num(g.switches), d["value"])
        if s.switches_per_min is not None and s.switches_per_min >= 1:
            t.append(f" ({s.switches_per_min:.0f}/min)", d["alarm"] if s.switches_per_min >= THRASH_PER_MIN else d["dim"])
        t.append("  accept ", d["label"])
        al = g.accept_length_recent
        if al is None and s.load is not None:
            al = s.load.accept_length
        t.append(fmt.num(al, "tok/step", 2), d["value"])
        lines.append(t)
    lines.extend(message)  # no gate: right after the worker line
    if s.worker.status == st.CHECK_MISMATCH:
        lines.append(Text("⚠ " + s.worker.detail, d["alarm"], no_wrap=True, overflow="ellipsis"))
    for warning in gate_warnings(s):
        lines.append(Text("⚠ " + warning, d["alarm"], no_wrap=True, overflow="ellipsis"))
    if g is None:
        return lines
    # extras for taller panels
    t = Text(no_wrap=True, overflow="ellipsis")
    t.append("max running ", d["label"])
    t.append(fmt.num(s.max_running_requests, "req"), d["value"])
    t.append("  cuda graph max bs ", d["label"])
    t.append(fmt.num(g.cuda_graph_max_bs), d["value"])
    lines.append(t)
    t = Text(no_wrap=True, overflow="ellipsis")
    t.append("decode steps on ", d["label"])
    t.append(fmt.num(g.decode_steps_on), d["value"])
    t.append("  off ", d["label"])
    t.append(fmt.num(g.decode_steps_off), d["value"])
    lines.append(t)
    if g.last_switch is not None:
        ls = g.last_switch
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append("last switch ", d["label"])
        t.append(f"{ls.direction or '?'} at step {fmt.num(ls.step)}, batch {fmt.num(ls.batch_size)} req", d["value"])
        lines.append(t)
    t = Text(no_wrap=True, overflow="ellipsis")
    t.append("OFF cuda graph ", d["label"])
    t.append({True: "captured", False: "not captured", None: fmt.NA}[g.off_cuda_graph], d["value"])
    t.append(f", {fmt.num(g.off_steps_cuda_graph)} steps replayed", d["dim"])
    lines.append(t)
    t = Text(no_wrap=True, overflow="ellipsis")
    t.append("spec ", d["label"])
    overlap = {True: "on", False: "off", None: fmt.NA}[g.overlap]
    t.append(f"{g.spec_version or fmt.NA}, overlap {overlap}, ", d["value"])
    t.append(
        f"{g.speculative_algorithm or fmt.NA} steps {fmt.num(g.num_steps)} topk {fmt.num(g.topk)} "
        f"draft {fmt.num(g.num_draft_tokens)}",
        d["value"],
    )
    lines.append(t)
    if g.ranks:
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append(f"TP ranks {fmt.num(g.tp_size)}: ", d["label"])
        for r in g.ranks:
            state = "on" if r.spec_enabled else "off" if r.spec_enabled is False else "?"
            t.append(f"TP{r.tp_rank} {state} ", d["alarm"] if g.ranks_disagree else d["value"])
        lines.append(t)
    lines.append(Text(s.worker.detail, d["dim"], no_wrap=True, overflow="ellipsis"))
    return lines


class SpecDetails(SnapshotWidget):
    """Detail lines under the badge (as many as fit)."""

    COMPONENT_CLASSES = {
        "spec-details--label",
        "spec-details--value",
        "spec-details--dim",
        "spec-details--ok",
        "spec-details--alarm",
        "spec-details--pending",
    }

    def render(self) -> Text:
        d = {name: self.style_of(f"spec-details--{name}") for name in ("label", "value", "dim", "ok", "alarm", "pending")}
        lines = detail_lines(self.snapshot, d, self.size.width)[: max(1, self.size.height)]
        text = Text("\n", no_wrap=True, overflow="ellipsis").join(lines)
        text.no_wrap, text.overflow = True, "ellipsis"
        return text


class SpecPanel(Vertical):
    """Bordered container: :class:`SpecBadge` over :class:`SpecDetails`."""

    def compose(self) -> ComposeResult:
        yield SpecBadge(id="spec-badge")
        yield SpecDetails(id="spec-details")
