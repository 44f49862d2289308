"""``?``: the keys, the modes and what the panels show."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Label, Markdown

HELP = r"""# specconsole — keys

| key | what it does |
|---|---|
| `+` / `=` | threshold + 1 req: each press steps the pending target and sends it; shown as `→ N pending` until `spec_gate` confirms N |
| `-` | threshold - 1 req (refused before sending outside [1, max running requests] or at/below the hysteresis) |
| `t` | set threshold and hysteresis exactly (plain integers; the threshold may be `auto`) |
| `a` | auto threshold on (the gate finds the crossover from its own step times), or off again at the learned crossover (H at or above it comes down to (N - 1) // 2) |
| `[` / `]` | several servers (`attach URL URL ...`): focus the previous / next server in the server list; the panels, the log pane and the threshold keys follow the focus |
| `T` | several servers: one threshold and hysteresis for all of them, after a confirm; each server checks it against its own limits and confirms it by its own `spec_gate` (the outcome is shown per server) |
| `/` | search the log; `n` / `N` next / previous match, in the whole file (a match above the lines held is shown with the lines around it; `End` returns) |
| `f` | show only log lines containing … (`a\|b`: a or b) |
| `x` | hide log lines containing … |
| `c` | clear log filters and search |
| `o` | show / hide the server's access-log lines of the console's own polls (`GET /server_info`, `GET /v1/loads?include=core%2Cspec`; hidden by default) |
| `p` | pause / follow the log (`G` or `End`: follow; `↑`, `PgUp`, `Home` pause) |
| `Tab` | focus the next panel: `↑` `↓` `PgUp` `PgDn` scroll it (Speculation details, GPUs, log) |
| `r` | restart the server after a crash (launch / demo) |
| `:` or `Ctrl+P` | command palette (themes, actions) |
| `?` | this help |
| `q` | quit (a launched server is stopped: SIGTERM to its process group, then SIGKILL) |

## What you see

* **Speculation** — SPEC ON / SPEC OFF with `N · H` next to it, and why (`decode batch 37 >=
  threshold 32`: the last decode batch from `spec_gate`); the live worker class from `spec_gate` and whether SGLang's
  startup log line agrees (`✗ MISMATCH` is an alarm); threshold N and hysteresis H (off at
  decode batch >= N, back on below N - H; `N-H = 1` is warned: once off, never back on),
  switches, accept length; with the auto threshold `N auto (≈24)`, why it runs as it does
  (`auto: OFF at batch 48 (est. ON 6,100 vs OFF 7,900 tok/s)`) and the learned curve (ON vs
  OFF tok/s per batch size, the live batch marked `◀`); the details scroll (`Tab` to the panel,
  then `↑` `↓`).
* **Load** — running requests (from `/v1/loads`) per poll as bars against the threshold line
  (`─` N: the row of sizes >= N; `┄` N - H), queue length (req), generation throughput (tok/s).
  Greyed and marked `stale` while the server is down.
* **GPUs** — NVML: utilization, memory, temperature, power / limit, SM clock; `n/a` where the
  GPU or driver does not report a field.
* **Log** — the server log, followed; `spec_gate:` lines, worker lines, switches and errors
  highlighted. `←` `→` scroll long lines. Active filters and search show on a line above it.
  It holds the last 20,000 lines (the title says `last 20,000 of 249,780` when the file has more);
  a filter and `n` / `N` read the rest of the file in the background.

Modes: `specconsole launch -- <server args>`, `specconsole attach URL [URL ...] [--log FILE ...]`
(several URLs: a server list; SGLang's router URL: its workers),
`specconsole demo`, or plain `specconsole` (config file, else 127.0.0.1:30000, else this advice).
Options: `--readonly` (no threshold keys), `--interval SECONDS`, `--theme dark|light|ansi`.
`launch` / `demo` refuse to start on a port something else holds, and show and change only the
server they started.
"""

#: shown at the top of the help, above the scrolling text
CLOSE_HINT = "Escape or ? closes · ↑ ↓ PgUp PgDn scroll"


class HelpScreen(ModalScreen[None]):
    """Modal help; Escape, q or ? closes it. The text scrolls with the keys (it has focus)."""

    BINDINGS = [
        Binding("escape,question_mark,q", "dismiss", "Close"),
    ]

    def compose(self) -> ComposeResult:
        with Vertical(id="help-frame") as frame:
            frame.border_title = "Help"
            yield Label(CLOSE_HINT, id="help-hint")
            with VerticalScroll(id="help-body"):
                yield Markdown(HELP)

    def on_mount(self) -> None:
        self.query_one("#help-body").focus()

    def action_dismiss(self) -> None:  # type: ignore[override]
        self.dismiss(None)
