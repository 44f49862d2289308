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


def not_a_regular_file(path) -> "str | None":
    """Why ``path`` (symlinks followed) is not a regular file the tools may read or replace, or None
    (it is one, or it does not exist): ``is a directory``, ``is a named pipe`` (reading one waits for
    a writer forever), ``is a socket``, ``is a device`` (renaming a file over /dev/null replaced the
    device node, run as root). An ``OSError`` on the way (a permission) gives its message."""
    import os

    from console.logfollow import file_kind

    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError as exc:
        return (exc.strerror or str(exc)).lower()
    kind = file_kind(mode)
    return None if kind is None else f"is {kind}, not a file"
