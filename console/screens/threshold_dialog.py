"""``t``: enter an exact threshold and hysteresis (both in requests)."""

from __future__ import annotations

from dataclasses import dataclass

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label

from console.model import validate_threshold


@dataclass(frozen=True)
class ThresholdRequest:
    """What to send; None means "leave unchanged"."""

    threshold: int | None
    hysteresis: int | None


def parse_request(
    threshold_text: str, hysteresis_text: str, current_threshold: int | None, current_hysteresis: int | None,
    max_running_requests: int | None,
) -> ThresholdRequest | str:
    """Validate the dialog's fields.

    Returns:
        A :class:`ThresholdRequest` with only the changed values, or an error message. The
        threshold must lie in [1, max running requests] (refused here, before sending);
        the hysteresis is checked by the server, which knows the rules in force.
    """
    try:
        thr = int(threshold_text.strip()) if threshold_text.strip() else current_threshold
    except ValueError:
        return f"threshold {threshold_text.strip()!r} is not an integer"
    try:
        hys = int(hysteresis_text.strip()) if hysteresis_text.strip() else current_hysteresis
    except ValueError:
        return f"hysteresis {hysteresis_text.strip()!r} is not an integer"
    if thr is not None:
        err = validate_threshold(thr, max_running_requests)
        if err:
            return err
    req = ThresholdRequest(
        thr if thr != current_threshold else None,
        hys if hys != current_hysteresis else None,
    )
    if req.threshold is None and req.hysteresis is None:
        return "nothing changed"
    return req


class ThresholdDialog(ModalScreen["ThresholdRequest | None"]):
    """Two inputs; Enter sends, Escape cancels. Dismisses with a request or None."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, threshold: int | None, hysteresis: int | None, max_running_requests: int | None) -> None:
        super().__init__()
        self.threshold = threshold
        self.hysteresis = hysteresis
        self.max_running = max_running_requests

    def compose(self) -> ComposeResult:
        upper = self.max_running if self.max_running is not None else "max running requests"
        with Vertical(id="threshold-body"):
            yield Label(f"SPEC OFF at batch size >= N (1..{upper} req), ON again below N - H.", id="threshold-help")
            with Horizontal(classes="field"):
                yield Label("threshold N (req)", classes="field-label")
                yield Input(str(self.threshold if self.threshold is not None else ""), id="threshold-input", type="integer")
            with Horizontal(classes="field"):
                yield Label("hysteresis H (req)", classes="field-label")
                yield Input(str(self.hysteresis if self.hysteresis is not None else ""), id="hysteresis-input", type="integer")
            yield Label("", id="threshold-error")
            with Horizontal(id="threshold-buttons"):
                yield Button("Send", id="send", variant="primary")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        field = self.query_one("#threshold-input", Input)
        field.focus()
        field.select_all() if hasattr(field, "select_all") else None

    @on(Input.Submitted)
    @on(Button.Pressed, "#send")
    def send(self) -> None:
        """Validate; dismiss with the request, or show why it is refused and stay open."""
        result = parse_request(
            self.query_one("#threshold-input", Input).value,
            self.query_one("#hysteresis-input", Input).value,
            self.threshold, self.hysteresis, self.max_running,
        )
        if isinstance(result, str):
            self.query_one("#threshold-error", Label).update(result)
            return
        self.dismiss(result)

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)
