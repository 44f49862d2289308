"""Formatting for the widgets: every number with its unit, ``n/a`` for missing values, text from a
server or a log made printable."""

from __future__ import annotations

NA = "n/a"
BLOCKS = " ▁▂▃▄▅▆▇█"

#: control characters (not tab) in caret notation, as ``less`` shows them: an escape sequence in a
#: server's answer or a log line must not reach the terminal (or Textual's layout) raw
_CARET = {c: "^" + chr(c + 64) for c in range(32) if c != 9} | {127: "^?"}


def printable(text: str) -> str:
    """``text`` with control characters other than tab in caret notation (ESC -> ``^[``, BEL -> ``^G``)."""
    return text.translate(_CARET)


def num(value: float | int | None, unit: str = "", digits: int = 0) -> str:
    """``num(2457.3, "tok/s") -> "2,457 tok/s"``, ``num(8, "%") -> "8%"``; None -> ``n/a``."""
    if value is None:
        return NA
    # a broken or hostile server can send 1e300: keep it one short word, not 300 digits
    text = f"{value:.3g}" if abs(value) >= 1e12 else f"{value:,.{digits}f}"
    if unit == "%":
        return text + "%"
    return f"{text} {unit}" if unit else text


def duration(seconds: float | None) -> str:
    """``12 s``, ``3 min 05 s``, ``1 h 02 min``; None -> ``n/a``."""
    if seconds is None:
        return NA
    s = int(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {(s % 3600) // 60:02d} min"


def mem_gib(used_mib: float | None, total_mib: float | None) -> str:
    """``71.2/140.4 GiB``; a missing side is ``n/a``."""
    if used_mib is None and total_mib is None:
        return NA
    u = f"{used_mib / 1024:.1f}" if used_mib is not None else NA
    t = f"{total_mib / 1024:.1f}" if total_mib is not None else NA
    return f"{u}/{t} GiB"


def pair(a: float | None, b: float | None, unit: str) -> str:
    """``312/700 W``; missing sides are ``n/a``; both missing -> ``n/a``."""
    if a is None and b is None:
        return NA
    left = f"{a:.0f}" if a is not None else NA
    right = f"{b:.0f}" if b is not None else NA
    return f"{left}/{right} {unit}"


def sparkline(values: tuple[float | None, ...] | list[float | None], width: int, top: float | None = None) -> str:
    """The last ``width`` values as block characters scaled to ``top`` (default: their max).

    None values render as spaces. Returns exactly ``width`` characters (left-padded).
    """
    vals = list(values)[-width:] if width > 0 else []
    if top:
        hi = top
    else:
        real = [v for v in vals if v is not None]
        hi = (max(real) if real else 1.0) or 1.0
    chars = _spark_chars(hi)
    out = []
    for v in vals:
        ch = chars.get(v)
        if ch is None:  # each reading once: a GPU's history shifts by one a second
            ch = chars[v] = _spark_char(v, hi)
        out.append(ch)
    return " " * (width - len(out)) + "".join(out)


#: sparkline characters by scale and value, worked out once (bounded: readings are floats)
_SPARK_CHARS: dict[float, dict[float | None, str]] = {}
_SPARK_MAX = 4096


def _spark_chars(hi: float) -> dict[float | None, str]:
    """The characters worked out for the scale ``hi`` (started again when there are many)."""
    chars = _SPARK_CHARS.get(hi)
    if chars is None or len(chars) > _SPARK_MAX:
        if chars is None and len(_SPARK_CHARS) >= 64:
            _SPARK_CHARS.clear()
        chars = _SPARK_CHARS[hi] = {}
    return chars


def _spark_char(v: float | None, hi: float) -> str:
    """One value's sparkline character on a scale up to ``hi``."""
    if v is None:
        return " "
    idx = int(round(max(0.0, min(1.0, v / hi)) * (len(BLOCKS) - 1)))
    return BLOCKS[max(1, idx)] if v > 0 else BLOCKS[1]
