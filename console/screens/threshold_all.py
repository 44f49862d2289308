"""``T`` (several servers): one threshold and hysteresis for every server, then a confirm.

:class:`AllThresholdDialog` is the ``t`` dialog with absolute values (a value typed is sent to
every server, also to those that have it already; an empty field leaves each server's own).
:class:`ConfirmAllScreen` asks before anything is sent; each server then validates the change
against its own limits and confirms it by its own ``spec_gate``.
"""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label

from console.model import target_text
from console.screens.threshold_dialog import ThresholdDialog, ThresholdRequest


class AllThresholdDialog(ThresholdDialog):
    """The threshold dialog for all ``count`` servers, prefilled with the focused one's values;
    ``max_running_requests``: the largest of the servers' (a value above it every server refuses).

    Its "current" values are None, so every value in a field is sent as it is (to a server
    that has it already, too); an empty field leaves each server's own value.
    """

    def __init__(self, threshold: int | None, hysteresis: int | None, max_running_requests: int | None,
                 count: int) -> None:
        super().__init__(None, None, max_running_requests)
        self.prefill = (threshold, hysteresis)
        self.count = count

    def on_mount(self) -> None:
        for name, value in zip(("threshold", "hysteresis"), self.prefill):
            self.query_one(f"#{name}-input", Input).value = "" if value is None else str(value)
        super().on_mount()
        self.query_one("#threshold-body").border_title = f"Threshold for ALL {self.count} servers"


def describe(req: ThresholdRequest) -> str:
    """``threshold 40, hysteresis 4`` (only the values being set)."""
    return target_text(req.threshold, req.hysteresis, ", ")


class ConfirmAllScreen(ModalScreen[bool]):
    """Send ``req`` to every server? ``y`` / Enter sends, ``n`` / Escape cancels. ``refusing``: the
    servers whose max running requests is below the threshold (named: they will refuse it)."""

    BINDINGS = [Binding("y", "answer(True)", "Send"), Binding("n,escape", "answer(False)", "Cancel")]

    def __init__(self, req: ThresholdRequest, urls: list[str], refusing: list[str] | None = None) -> None:
        super().__init__()
        self.req = req
        self.urls = urls
        self.refusing = refusing or []

    @property
    def text(self) -> str:
        """What the screen asks: the change, the servers, and those that will refuse it."""
        shown = ", ".join(self.urls[:4]) + (f" and {len(self.urls) - 4} more" if len(self.urls) > 4 else "")
        refuse = (f"\nAbove the max running requests of {', '.join(self.refusing)}: "
                  f"{'it' if len(self.refusing) == 1 else 'they'} will refuse it." if self.refusing else "")
        return (f"Send {describe(self.req)} to all {len(self.urls)} servers?\n{shown}\n"
                "Each server checks it against its own limits and confirms it by its own spec_gate." + refuse)

    def compose(self) -> ComposeResult:
        with Vertical(id="threshold-body") as body:
            body.border_title = "Confirm: change every server"
            yield Label(self.text, id="confirm-all-text")
            with Horizontal(id="threshold-buttons"):
                yield Button("Send to all (y)", id="confirm-yes", variant="warning")
                yield Button("Cancel (n)", id="confirm-no")

    def on_mount(self) -> None:
        self.query_one("#confirm-no", Button).focus()  # Enter on the default does nothing harmful

    def action_answer(self, yes: bool) -> None:
        """Dismiss with the answer."""
        self.dismiss(yes)

    @on(Button.Pressed, "#confirm-yes")
    def _yes(self) -> None:
        self.dismiss(True)

    @on(Button.Pressed, "#confirm-no")
    def _no(self) -> None:
        self.dismiss(False)
