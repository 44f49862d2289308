"""``t``: enter an exact threshold and hysteresis (both in requests)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.validation import ValidationResult, Validator
from textual.widgets import Button, Input, Label

from console.model import validate_hysteresis, validate_threshold
from console.textual_compat import OrderedInput
from server_patch import contract


@dataclass(frozen=True)
class ThresholdRequest:
    """What to send; None means "leave unchanged"; ``threshold`` ``"auto"``: the auto threshold."""

    threshold: int | str | None
    hysteresis: int | None


#: a plain integer: optional minus sign, ASCII digits only (no "2.5", "3e1", "1_000", "+5")
_INTEGER = re.compile(r"-?[0-9]+")
#: more digits than any batch size can have
MAX_DIGITS = 9
#: characters a field holds: every valid value is shorter; an unbounded field made each key cost
#: its whole length in Textual's Input (100,000 typed characters hung the console)
FIELD_MAX_CHARS = 16


#: the hysteresis field's limit in words (its number is the other field's, threshold - 1)
HYSTERESIS_BOUND = "below the threshold"


def parse_int_field(name: str, text: str, upper: int | None = None, auto: bool = False,
                    bound: str | None = None) -> int | None | str:
    """The field's integer, None when empty (unchanged), or why it is refused (a str).
    ``upper``: the largest value that makes sense, named when the number is absurdly long (``bound``:
    that limit in words where it is no fixed number);
    ``auto``: the word ``auto`` is a value too (the threshold field), returned as ``"auto"``
    -- told apart from a refusal by the caller's check ``== contract.AUTO``."""
    value = text.strip()
    if not value:
        return None
    if auto and value.lower() == contract.AUTO:
        return contract.AUTO
    if re.fullmatch(r"\+[0-9]+", value):
        # "+5" may mean "5 more": the field takes the new value itself, never a step
        example = int(value[1:]) if len(value) <= MAX_DIGITS else 32
        return f"{name}: the value itself, e.g. {example}, no sign"  # short: a longer one was cut at the edge
    if not _INTEGER.fullmatch(value):
        return f"{name} {value!r} is not a whole number (e.g. 32)"
    if len(value.lstrip("-")) > MAX_DIGITS:
        shown = value if len(value) <= 12 else value[:12] + "…"
        limit = f"at most {upper}" if upper is not None else bound or f"at most {MAX_DIGITS} digits"
        return f"{name} {shown} is out of range ({limit})"
    return int(value)


def parse_request(
    threshold_text: str, hysteresis_text: str, current_threshold: int | None, current_hysteresis: int | None,
    max_running_requests: int | None,
) -> ThresholdRequest | str:
    """Validate the dialog's fields.

    Returns:
        A :class:`ThresholdRequest` with only the changed values, or an error message. Both
        fields must be plain integers (``2.5``, ``3e1``, ``1_000`` are refused, not reduced to
        their digits); the threshold must lie in [1, max running requests] and the hysteresis in
        [0, threshold - 1], with ``auto`` [0, max running requests - 1] (the README's contract;
        refused here, before sending).
    """
    thr = parse_int_field("threshold", threshold_text, max_running_requests, auto=True)
    if isinstance(thr, str) and thr != contract.AUTO:
        return thr
    hys = parse_int_field("hysteresis", hysteresis_text, bound=HYSTERESIS_BOUND)
    if isinstance(hys, str):
        return hys
    thr = current_threshold if thr is None else thr
    hys = current_hysteresis if hys is None else hys
    manual = thr if isinstance(thr, int) else None
    if manual is not None:
        err = validate_threshold(manual, max_running_requests)
        if err:
            return err
    if hys is not None:
        err = validate_hysteresis(hys, manual, max_running_requests)
        if err:
            return err
    req = ThresholdRequest(
        thr if thr != current_threshold else None,
        hys if hys != current_hysteresis else None,
    )
    if req.threshold is None and req.hysteresis is None:
        return "nothing changed"
    return req


class WholeNumber(Validator):
    """A field of the dialog: empty (unchanged) or a plain integer (``parse_int_field``; the
    threshold also ``auto``); the range against the other field is the contract's, checked on
    send (:func:`parse_request`)."""

    def __init__(self, name: str, upper: int | None = None, auto: bool = False, bound: str | None = None) -> None:
        super().__init__()
        self.field_name = name
        self.upper = upper
        self.auto = auto
        self.bound = bound

    def validate(self, value: str) -> ValidationResult:
        result = parse_int_field(self.field_name, value, self.upper, self.auto, self.bound)
        return self.failure(result) if isinstance(result, str) and result != contract.AUTO else self.success()


class DialogField(OrderedInput):
    """A field of the dialog: Escape is its own key too, so it is handled in the order typed after
    the keys before it (a screen binding would run on arrival, before an Enter queued here)."""

    BINDINGS = [Binding("escape", "screen.cancel", "Cancel", show=False)]


class ThresholdDialog(ModalScreen["ThresholdRequest | None"]):
    """Two inputs; Enter sends, Escape cancels. Dismisses with a request or None."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]
    keys_frozen = False  # set by the fields at Enter (textual_compat.OrderedInput)

    def __init__(self, threshold: int | None, hysteresis: int | None, max_running_requests: int | None) -> None:
        super().__init__()
        self._answered = False
        self.threshold = threshold
        self.hysteresis = hysteresis
        self.max_running = max_running_requests

    def compose(self) -> ComposeResult:
        span = f"1..{self.max_running}" if self.max_running is not None else ">= 1"
        with Vertical(id="threshold-body"):
            # two short lines: one long line was cut at the dialog's edge (70 columns)
            yield Label(f"SPEC OFF at batch size >= N (N: {span} req, or auto)\n"
                        "ON again below N - H (H: 0..N-1 req)", id="threshold-help")
            with Horizontal(classes="field"):
                yield Label("threshold N (req)", classes="field-label")
                yield DialogField(str(self.threshold if self.threshold is not None else ""), id="threshold-input",
                                   validators=[WholeNumber("threshold", self.max_running, auto=True)],
                                   validate_on=["changed"], max_length=FIELD_MAX_CHARS)
            with Horizontal(classes="field"):
                yield Label("hysteresis H (req)", classes="field-label")
                yield DialogField(str(self.hysteresis if self.hysteresis is not None else ""), id="hysteresis-input",
                                   validators=[WholeNumber("hysteresis", bound=HYSTERESIS_BOUND)], validate_on=["changed"],
                                   max_length=FIELD_MAX_CHARS)
            yield Label("", id="threshold-error")
            with Horizontal(id="threshold-buttons"):
                yield Button("Send", id="send", variant="primary")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        field = self.query_one("#threshold-input", Input)
        field.focus()
        field.select_all() if hasattr(field, "select_all") else None

    @on(Input.Changed)
    def check_fields(self) -> None:
        """Say at once when a field is not a plain integer (nothing typed is silently dropped)."""
        error = ""
        for name in ("threshold", "hysteresis"):
            field = self.query_one(f"#{name}-input", Input)
            result = field.validate(field.value)
            if result is not None and not result.is_valid:
                error = result.failure_descriptions[0]
                break
        self.query_one("#threshold-error", Label).update(error)

    @on(Input.Submitted)
    @on(Button.Pressed, "#send")
    def send(self) -> None:
        """Validate; dismiss with the request, or show why it is refused and stay open. The fields
        are read as they were at Enter; the keys typed after it in the same burst (held by the app
        since the Enter) then act where the focus is: on the main screen after the request is
        sent, in this dialog's field after a refusal."""
        if self._answered:
            return
        result = parse_request(
            self.query_one("#threshold-input", Input).value,
            self.query_one("#hysteresis-input", Input).value,
            self.threshold, self.hysteresis, self.max_running,
        )
        release = getattr(self.app, "release_held_keys", None)
        if isinstance(result, str):
            self.query_one("#threshold-error", Label).update(result)
            self.keys_frozen = False
            if release is not None:
                release()
            return
        self._answered = True
        self.dismiss(result)
        if release is not None:
            self.app.call_next(release)  # after the result callback (it is called next too)

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        if not self._answered and not self.keys_frozen:  # an Escape after Enter is lost with the rest
            self._answered = True
            self.dismiss(None)
