"""Shown by plain ``specconsole`` when there is no config file and nothing answers on 127.0.0.1:30000."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Label, Markdown

from server_patch import contract

TEXT = """\
# No server found

{why}, and nothing answers on `{url}`.

**Try it without a GPU** — press `d` to start the demo (a simulated server, same screens).

**Start a server under the console** (it owns the process group and stops it on quit):

```
specconsole launch -- --model-path M \\
    --speculative-algorithm EAGLE3 \\
    --speculative-draft-model-path D \\
    {flag} 32
```

**Watch a running server**:

```
specconsole attach http://HOST:PORT --log server.log
```

**Or write `specconsole.toml`** (here or in `{config_dir}`) and run plain `specconsole`:

```
[server]
args = ["--model-path", "M",
        "--speculative-algorithm", "EAGLE3",
        "--speculative-draft-model-path", "D",
        "{flag}", "32"]
```
"""

#: the keys, shown at the top (the text below scrolls)
KEYS = "d demo · a try {url} again · q quit · ↑ ↓ PgUp PgDn scroll"


class NoServerScreen(Screen[str]):
    """Dismisses with ``"demo"``, ``"retry"`` or ``"quit"``. The text scrolls with the keys."""

    BINDINGS = [
        Binding("d", "choose('demo')", "Start demo"),
        Binding("a", "choose('retry')", "Attach again"),
        Binding("q", "choose('quit')", "Quit"),
    ]

    def __init__(self, url: str, config_dir: str, config_path: str | None = None) -> None:
        """``config_path``: a config file that was read but names no server (else there was none)."""
        super().__init__()
        self.url = url
        self.config_dir = config_dir
        self.why = (f"`{config_path}` names no server (no `args` or `attach` in its `[server]` table)"
                    if config_path else f"No `specconsole.toml` in this directory or in `{config_dir}`")

    def compose(self) -> ComposeResult:
        yield Label(KEYS.format(url=self.url), id="no-server-keys")
        with VerticalScroll(id="no-server-body"):
            yield Markdown(TEXT.format(url=self.url, config_dir=self.config_dir, why=self.why,
                                       flag=contract.THRESHOLD_FLAG))
        yield Footer(show_command_palette=False)

    def on_mount(self) -> None:
        self.query_one("#no-server-body").focus()

    def action_choose(self, what: str) -> None:
        self.dismiss(what)
