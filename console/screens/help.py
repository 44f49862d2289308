"""``?``: the keys, the modes and what the panels show."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Markdown

HELP = r"""# specconsole — keys

| key | what it does |
|---|---|
| `+` / `=` | threshold + 1 (sent to `/set_internal_state`; shown once `spec_gate` confirms) |
| `-` | threshold - 1 |
| `t` | set threshold and hysteresis exactly |
| `/` | search the log; `n` / `N` next / previous match |
| `f` | show only log lines containing … (`a\|b`: a or b) |
| `x` | hide log lines containing … |
| `c` | clear log filters and search |
| `p` | pause / follow the log (`G` or `End`: follow) |
| `r` | restart the server after a crash (launch / demo) |
| `:` or `Ctrl+P` | command palette (themes, actions) |
| `?` | this help |
| `q` | quit (a launched server is stopped: SIGTERM to its process group, then SIGKILL) |

## What you see

* **Speculation** — SPEC ON / SPEC OFF and why (`batch 37 >= threshold 32`); the live worker
  class from `spec_gate` and whether SGLang's startup log line agrees (`✗ MISMATCH` is an alarm);
  threshold N and hysteresis H (off at batch size >= N, back on below N - H), switches, accept length.
* **Load** — running batch size (req) per poll against the threshold line (`─` N, `┄` N - H),
  queue length (req), generation throughput (tok/s).
* **GPUs** — NVML: utilization, memory, temperature, power / limit, SM clock; `n/a` where the
  GPU or driver does not report a field.
* **Log** — the server log, followed; `spec_gate:` lines, worker lines, switches and errors highlighted.

Modes: `specconsole launch -- <server args>`, `specconsole attach URL [--log FILE]`,
`specconsole demo`, or plain `specconsole` (config file, else 127.0.0.1:30000, else this advice).
Options: `--readonly`, `--interval SECONDS`, `--theme dark|light|ansi`.

Press `Escape` or `?` to close.
"""


class HelpScreen(ModalScreen[None]):
    """Modal help; Escape, q or ? closes it."""

    BINDINGS = [
        Binding("escape,question_mark,q", "dismiss", "Close"),
    ]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-body"):
            yield Markdown(HELP)

    def action_dismiss(self) -> None:  # type: ignore[override]
        self.dismiss(None)
