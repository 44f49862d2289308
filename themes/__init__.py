"""Colour themes of specconsole, one Textual CSS file each.

Every theme file scopes its rules under ``.theme-<name>`` (a class the app puts on itself), so
all themes load together and switching is a class change. Each theme also names the built-in
Textual theme used for Textual's own widgets (footer, inputs, command palette).

* ``dark``  — default, for 256-colour / truecolour terminals with a dark background;
* ``light`` — for light terminal backgrounds;
* ``ansi``  — only the 8 standard ANSI colours (``ansi_*``) on the terminal's own background:
  safe on ``TERM=xterm``/``screen``, old ssh clients and monochrome-ish setups.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class ThemeInfo:
    """A console theme: its name, its ``.tcss`` file and the Textual base theme it pairs with."""

    name: str
    path: Path
    textual_theme: str
    description: str

    @property
    def css_class(self) -> str:
        """The class the app sets on itself to activate this theme."""
        return f"theme-{self.name}"


THEMES: dict[str, ThemeInfo] = {
    "dark": ThemeInfo("dark", HERE / "dark.tcss", "textual-dark", "dark background, 256 colours or more"),
    "light": ThemeInfo("light", HERE / "light.tcss", "textual-light", "light background"),
    "ansi": ThemeInfo("ansi", HERE / "ansi.tcss", "ansi-dark", "8 ANSI colours only, terminal background"),
}

DEFAULT_THEME = "dark"


def get(name: str) -> ThemeInfo:
    """The theme called ``name``; raises KeyError with the known names otherwise."""
    try:
        return THEMES[name]
    except KeyError:
        raise KeyError(f"unknown theme {name!r}; known: {', '.join(THEMES)}") from None


def css_paths() -> list[Path]:
    """All theme files (the app loads all of them; the active one is selected by class)."""
    return [t.path for t in THEMES.values()]
