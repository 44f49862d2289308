"""What the UI-free session tells the app: typed events, and the outcome of a threshold request.

The session (:mod:`console.session`) never touches a widget; it hands these to the app's sink,
and the app (:mod:`console.app`) decides how each one shows: the snapshot goes to the screens,
log lines to the log pane, an :class:`Outcome`'s notice to a toast, a crash to the crash screen.
"""

from __future__ import annotations

from dataclasses import dataclass

from console.logfilter import LogRequest
from console.state import ConsoleSnapshot, ProcessState

#: Outcome.kind of an outcome caused by the server being unreachable: its notice goes away as soon
#: as the server answers again
KIND_CONNECTION = "connection"
#: Outcome.kind of a server rejection (stale once the confirmed N/H change)
KIND_REJECTED = "rejected"
#: Outcome.kind of a refusal because the auto threshold has no crossover yet (stale once it has one)
KIND_NO_CROSSOVER = "no-crossover"


@dataclass(frozen=True)
class Outcome:
    """What a threshold request (or the server's answer to one) came to.

    ``ok``: the request was queued for sending / the server accepted it. ``level`` ``info``,
    ``ok``, ``warning`` (refused before sending) or ``error`` (rejected, no answer). ``panel``:
    the text the Speculation panel now shows (the model has set it), None when it did not change.
    ``log_lines``: lines for the log pane, in order. ``notice``: a toast's text (``notice_title``
    its title), None for none. ``kind``: ``connection`` or ``rejected`` (see above), else "".
    """

    ok: bool
    level: str = "info"
    panel: str | None = None
    log_lines: tuple[str, ...] = ()
    notice: str | None = None
    notice_title: str = ""
    kind: str = ""


#: an outcome that changes nothing on screen
NOTHING = Outcome(ok=True)


@dataclass(frozen=True)
class Published:
    """A new snapshot for the screens.

    ``soon``: it may wait for the screen's next update (the next poll's snapshot, at most one poll
    interval later): NVML reads and log reads. Else it is shown at once: the poll's own snapshot
    (the screen's regular update) and anything an operator's key or the server's process caused.
    """

    snapshot: ConsoleSnapshot
    soon: bool = False


@dataclass(frozen=True)
class ConsoleLine:
    """A line the console itself writes into the log pane (its actions, confirmations)."""

    text: str


@dataclass(frozen=True)
class LogLines:
    """Server log lines, ``(kind, text)`` pairs in file order (kinds: :mod:`console.logparse`).

    ``numbers``: each line's number in the file of ``file_id`` (None: not in it any more), or
    empty when unknown; ``total_lines``: the complete lines of that file so far.
    """

    lines: tuple[tuple[str, str], ...]
    numbers: tuple[int | None, ...] = ()
    file_id: int = 0
    total_lines: int = 0


@dataclass(frozen=True)
class LogFound:
    """The answer to a :class:`console.logfilter.LogRequest`: ``lines`` as ``(number, kind, text)``
    in file order; ``line``: the line found (FIND; None: no match there); ``count``: lines that
    pass the filter (FILTERED); ``stale``: the file was replaced or truncated since the request
    (its line numbers are of another file: nothing was read)."""

    request: LogRequest
    lines: tuple[tuple[int, str, str], ...] = ()
    line: int | None = None
    count: int = 0
    stale: bool = False


@dataclass(frozen=True)
class ChangeOutcome:
    """The outcome of a threshold request: refused, sent, answered, confirmed."""

    outcome: Outcome


@dataclass(frozen=True)
class ServerNotStarted:
    """Launch/demo: the server was not started (``short`` on screen, ``notice`` as a toast)."""

    short: str
    notice: str


@dataclass(frozen=True)
class ServerCrashed:
    """Launch/demo: the server this console started exited on its own."""

    process: ProcessState


@dataclass(frozen=True)
class PortTaken:
    """Launch/demo: another process answers on the server's port (nothing is shown or sent there)."""

    port: int | None


@dataclass(frozen=True)
class ServerStopping:
    """The console is stopping the server's process group (SIGTERM, SIGKILL after ``timeout_s``)."""

    timeout_s: float


@dataclass(frozen=True)
class Reconnected:
    """The server answers again after an outage: notices of kind ``connection`` are over."""


@dataclass(frozen=True)
class WorkerMismatch:
    """The live worker class and the server log disagree (an alarm)."""

    detail: str


@dataclass(frozen=True)
class InternalError:
    """A bug in the console itself (``where``: which part); it is reported and that part restarted."""

    where: str
    text: str
