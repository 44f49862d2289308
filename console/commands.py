"""Command palette entries (``Ctrl+P`` or ``:``): the console's actions and its themes."""

from __future__ import annotations

from typing import Any, Iterator

from textual.app import SystemCommand

import themes


def console_commands(app: Any) -> Iterator[SystemCommand]:
    """The palette commands of ``app`` (the :class:`console.app.SpecConsoleApp`); threshold
    commands only when changes are allowed."""
    if not app.cfg.readonly and app.cfg.mode != "none":
        yield SystemCommand("Threshold +1", "Raise the speculation threshold by 1 req", lambda: app.action_threshold_step(1))
        yield SystemCommand("Threshold -1", "Lower the speculation threshold by 1 req", lambda: app.action_threshold_step(-1))
        yield SystemCommand("Set threshold / hysteresis…", "Enter exact values (or auto)", app.action_threshold_dialog)
        yield SystemCommand("Auto threshold on / off", "Let the gate find the crossover, or fix N there",
                            app.action_threshold_auto)
    yield SystemCommand("Search log…", "Highlight lines containing a text", lambda: app.action_log_prompt("search"))
    yield SystemCommand("Filter log…", "Show only lines containing a text", lambda: app.action_log_prompt("include"))
    yield SystemCommand("Hide log lines…", "Hide lines containing a text", lambda: app.action_log_prompt("exclude"))
    yield SystemCommand("Clear log filters", "Show every line, no search", app.action_clear_log_filters)
    yield SystemCommand("Show / hide console polls", "The server's access-log lines of this console's own polls",
                        app.action_toggle_own_lines)
    yield SystemCommand("Pause / follow log", "Toggle following the log", app.action_toggle_follow)
    if app.proc is not None:
        yield SystemCommand("Restart server", "Start the server again after a crash", app.action_restart)
    for info in themes.THEMES.values():
        yield SystemCommand(f"Theme: {info.name}", info.description, lambda n=info.name: app.apply_theme(n))
    yield SystemCommand("Screenshot", "Save an SVG of the screen in the working directory", app.action_save_screenshot)
    yield SystemCommand("Help", "Keys and panels", app.action_help)
