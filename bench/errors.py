"""The one exception type of the benchmark CLIs' bad-input path (``bench.throughput``, ``bench.traffic``).

It lives in its own module so that ``python -m bench.throughput`` (whose module is ``__main__``) and
``bench.traffic`` (which cannot import ``__main__``) raise and catch the same class.
"""


class BenchError(Exception):
    """Bad input the user can fix (a CSV, a path, a missing optional package, a server that is not
    the configuration asked for): ``bench.throughput.main`` prints the message on stderr and exits 1,
    without a traceback."""


def first_line(exc: BaseException) -> str:
    """``TYPE: the first line of its message`` (a subprocess failure's message may hold a whole log tail)."""
    return f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}"
