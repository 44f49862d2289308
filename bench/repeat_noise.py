"""How far one repeat of an A/B row moves: the noise the benchmark's acceptance lines must clear.

``bench.ab_traffic`` runs with ``--repeats 2`` or more record, per row, each repeat's ratio of a
side's output tok/s to side A's (``b_over_a``, ``c_over_a`` in ``ab-summary.json``). Two repeats of
one row measure the same two servers on the same requests, so their spread is the measurement's own
noise. This pools it over every row of the runs given:

    sigma^2 = mean over rows of the sample variance of ln(ratio) across that row's repeats,

rescaled to rows of ``--row-seconds`` (noise taken to fall as 1 / sqrt(row length): the run's
``--row-seconds`` over the target's; an assumption, stated because slow drift does not average out
that way). From it, for a true ratio ``--true`` (e.g. an auto threshold 1% behind the better static
mode), the chance that one row's mean over ``n`` repeats reads at least ``--line`` (normal in the log
ratio), and that all ``--rows`` rows of an acceptance list do (rows independent).

    python -m bench.repeat_noise bench/results/*/ab-*/ab-summary.json --row-seconds 10 --true 0.99 --rows 12

Not counted: C against the better of A and B (``c_over_best``) takes the larger of two noisy sides,
which biases it down a little more where the two are close.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from bench.errors import BenchError, not_a_regular_file

#: the tok/s ratio keys of ``ab-summary.json`` rows pooled here (per repeat, side over A)
RATIO_KEYS = ("b_over_a", "c_over_a")


def _row_seconds(argv: Sequence[str]) -> float:
    """The ``--row-seconds`` of a recorded ``bench.ab_traffic`` argv (its default 16 when absent)."""
    argv = list(argv)
    for i, item in enumerate(argv):
        if item == "--row-seconds" and i + 1 < len(argv):
            return float(argv[i + 1])
        if item.startswith("--row-seconds="):
            return float(item.split("=", 1)[1])
    return 16.0


def row_spreads(summary: Dict) -> List[Tuple[float, int, float]]:
    """``(sample variance of ln ratio, repeats, row seconds)`` for every row and side of one
    ``ab-summary.json`` (a dict as ``bench.ab_traffic`` writes it) measured in two or more repeats.

    Raises:
        BenchError: ``summary`` is not such a dict (no ``summary`` list), or a ratio is not > 0.
    """
    rows = summary.get("summary") if isinstance(summary, dict) else None
    if not isinstance(rows, list):
        raise BenchError("not a bench.ab_traffic ab-summary.json (no 'summary' list)")
    seconds = _row_seconds(summary.get("argv") or [])
    out = []
    for row in rows:
        for key in RATIO_KEYS:
            ratios = row.get(key) if isinstance(row, dict) else None
            if not isinstance(ratios, list) or len(ratios) < 2:
                continue
            if not all(isinstance(x, (int, float)) and x > 0 and math.isfinite(x) for x in ratios):
                raise BenchError(f"{key} holds a ratio that is not a number > 0: {ratios}")
            logs = [math.log(x) for x in ratios]
            mean = sum(logs) / len(logs)
            out.append((sum((x - mean) ** 2 for x in logs) / (len(logs) - 1), len(logs), seconds))
    return out


def pooled_sigma(spreads: Iterable[Tuple[float, int, float]], row_seconds: Optional[float] = None) -> float:
    """One repeat's standard deviation of ln(ratio), pooled over ``spreads`` (:func:`row_spreads`),
    each weighted by its degrees of freedom (repeats - 1); with ``row_seconds`` each row's variance is
    first scaled by its own row length over that one (noise ~ 1 / sqrt(seconds)).

    Raises:
        BenchError: no row with two or more repeats.
    """
    num = den = 0.0
    for var, n, seconds in spreads:
        scale = seconds / row_seconds if row_seconds else 1.0
        num += var * scale * (n - 1)
        den += n - 1
    if not den:
        raise BenchError("no row measured in two or more repeats: nothing to pool (give runs made with --repeats 2 or more)")
    return math.sqrt(num / den)


def pass_chance(sigma: float, true_ratio: float, line: float, repeats: int) -> float:
    """P(a row's geometric mean over ``repeats`` repeats >= ``line``) when its true ratio is
    ``true_ratio`` and one repeat's ln ratio has standard deviation ``sigma`` (normal)."""
    z = (math.log(true_ratio) - math.log(line)) / (sigma / math.sqrt(repeats))
    return 0.5 * (1 + math.erf(z / math.sqrt(2)))


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m bench.repeat_noise", description=__doc__.split("\n\n")[0],
                                 allow_abbrev=False)
    ap.add_argument("summaries", nargs="+", type=Path, metavar="AB_SUMMARY",
                    help="bench.ab_traffic ab-summary.json files (or run directories holding one)")
    ap.add_argument("--row-seconds", type=float, default=None,
                    help="rescale to rows of this many seconds (default: pool as measured)")
    ap.add_argument("--true", type=float, default=0.99, help="the true ratio to judge (default 0.99)")
    ap.add_argument("--line", type=float, default=0.97, help="the acceptance line (default 0.97)")
    ap.add_argument("--rows", type=int, default=12, help="rows that must all clear it (default 12)")
    return ap


def main(argv: Optional[List[str]] = None) -> int:
    ap = _parser()
    a = ap.parse_args(argv)
    for flag, value in (("--row-seconds", a.row_seconds), ("--true", a.true), ("--line", a.line)):
        if value is not None and not (math.isfinite(value) and value > 0):
            ap.error(f"{flag} must be a finite number > 0, got {value}")
    if a.rows < 1:
        ap.error(f"--rows must be >= 1, got {a.rows}")
    spreads = []
    try:
        for path in a.summaries:
            path = path / "ab-summary.json" if path.is_dir() else path
            why = not_a_regular_file(path)
            if why or not path.exists():
                raise BenchError(f"{path}: {why or 'no such file'}")
            try:
                spreads += row_spreads(json.loads(path.read_text(encoding="utf-8")))
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise BenchError(f"{path}: not JSON ({exc})") from None
            except BenchError as exc:
                raise BenchError(f"{path}: {exc}") from None
        sigma = pooled_sigma(spreads, a.row_seconds)
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    rows = len(spreads)
    print(f"{rows} row-sides with 2+ repeats: one repeat's sigma of ln(ratio) = {sigma:.4f}"
          + (f" (rows of {a.row_seconds:g} s)" if a.row_seconds else " (rows as measured)"))
    print(f"true ratio {a.true:g}, line {a.line:g}, {a.rows} rows:")
    for n in (1, 2, 3, 4):
        one = pass_chance(sigma, a.true, a.line, n)
        print(f"  {n} repeat(s): one row clears it {one:.1%}, all {a.rows} rows {one ** a.rows:.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
