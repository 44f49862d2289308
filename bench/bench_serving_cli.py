"""SGLang's ``bench_serving`` command line, read from its source: which flags and values it takes,
and which keys its JSON result line has, so that ``bench.traffic`` can check its arguments
before a device call spends server time (and the tests can play bench_serving with exactly its
parser).

``sglang/bench_serving.py`` cannot be imported cheaply (aiohttp, transformers, numpy at load time)
and builds its parser under ``if __name__ == "__main__":``, so this reads it with :mod:`ast`.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence

from bench.errors import BenchError

# bench_serving's result-line keys that a traffic row is made of (bench.traffic.build_row)
RESULT_KEYS = ("output_throughput", "mean_tpot_ms", "p99_tpot_ms", "mean_e2e_latency_ms", "p99_e2e_latency_ms",
               "mean_ttft_ms", "duration", "completed", "accept_length")


def bench_serving_source() -> Optional[Path]:
    """``sglang/bench_serving.py`` of the installed SGLang, found without importing SGLang; None
    when SGLang is not installed."""
    try:
        spec = importlib.util.find_spec("sglang")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "bench_serving.py"
    return path if path.is_file() else None


VALUELESS_ACTIONS = ("store_true", "store_false", "store_const", "count", "help", "version")


def cli_spec(source: str) -> Dict[str, Any]:
    """bench_serving's command line and result keys, read from its source without importing it
    (the module imports aiohttp, transformers, numpy at load time; its parser is built under
    ``if __name__ == "__main__":``, so importing would not give it anyway).

    Returns ``{"options": {"--flag": {...}}, "result_keys": [...]}``: for every ``add_argument``
    call in the ``__main__`` block its option strings with ``action`` (a string, or the custom
    action class's name), ``nargs``, ``type`` (``"int"``, ``"float"``, ``"str"`` or None),
    ``choices`` (a list, or None; ``list(D.keys())`` of a module-level dict D is resolved) and
    ``takes_value``; and the keys of the ``result = {...}`` dict in ``benchmark()`` (the JSON line
    ``--output-file`` gets).
    """
    tree = ast.parse(source)
    dicts = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    dicts[target.id] = [k.value for k in node.value.keys if isinstance(k, ast.Constant)]

    def const(node: Optional[ast.AST]) -> Any:
        if node is None:
            return None
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, ast.Attribute):
            return node.attr
        try:
            return ast.literal_eval(node)
        except ValueError:
            pass
        # list(NAME.keys()) of a module-level dict literal
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "list"
                and len(node.args) == 1 and isinstance(node.args[0], ast.Call)
                and isinstance(node.args[0].func, ast.Attribute) and node.args[0].func.attr == "keys"
                and isinstance(node.args[0].func.value, ast.Name)):
            return dicts.get(node.args[0].func.value.id)
        return None

    main_blocks = [n for n in tree.body if isinstance(n, ast.If) and isinstance(n.test, ast.Compare)
                   and isinstance(n.test.left, ast.Name) and n.test.left.id == "__name__"]
    options: Dict[str, Dict[str, Any]] = {}
    for block in main_blocks:
        for node in ast.walk(block):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "add_argument"):
                continue
            flags = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
                     and a.value.startswith("-")]
            kw = {k.arg: k.value for k in node.keywords if k.arg}
            action = const(kw.get("action"))
            typ = const(kw.get("type"))
            choices = const(kw.get("choices"))
            info = {
                "action": action, "nargs": const(kw.get("nargs")),
                "type": typ if typ in ("int", "float", "str") else None,
                "choices": list(choices) if isinstance(choices, (list, tuple)) else None,
                "takes_value": action not in VALUELESS_ACTIONS,
            }
            for flag in flags:
                options[flag] = info
    result_keys: List[str] = []
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.name == "benchmark":
            for node in ast.walk(fn):
                if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)
                        and any(isinstance(t, ast.Name) and t.id == "result" for t in node.targets)):
                    result_keys += [k.value for k in node.value.keys if isinstance(k, ast.Constant)]
    return {"options": options, "result_keys": result_keys}


def argv_problems(argv: Sequence[str], spec: Dict[str, Any]) -> List[str]:
    """What the real bench_serving CLI (``spec`` from :func:`cli_spec`) would refuse in ``argv``,
    or miss in its result line: unknown flags, a value missing after a flag that takes one, a value
    after one that takes none, a value outside the flag's choices or not of its type; and the
    :data:`RESULT_KEYS` its result line lacks. (A flag with ``nargs`` is read with one value: this
    tool passes none of those.)"""
    options, out, i = spec["options"], [], 0
    while i < len(argv):
        flag = argv[i]
        opt = options.get(flag)
        if opt is None:  # (argparse would take an abbreviation; this tool writes flags in full)
            out.append(f"unknown flag {flag}")
            i += 2 if i + 1 < len(argv) and not argv[i + 1].startswith("--") else 1
            continue
        if not opt["takes_value"]:
            if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                out.append(f"{flag} takes no value, got {argv[i + 1]!r}")
                i += 1
            i += 1
            continue
        if i + 1 >= len(argv) or argv[i + 1].startswith("--"):
            out.append(f"{flag} needs a value")
            i += 1
            continue
        value = argv[i + 1]
        if opt["choices"] is not None and value not in [str(c) for c in opt["choices"]]:
            out.append(f"{flag} {value!r} is not one of its choices")
        if opt["type"] in ("int", "float"):
            try:
                int(value) if opt["type"] == "int" else float(value)
            except ValueError:
                out.append(f"{flag} {value!r} is not {'an int' if opt['type'] == 'int' else 'a float'}")
        i += 2
    missing = [k for k in RESULT_KEYS if k not in spec["result_keys"]]
    if missing:
        out.append(f"its result line lacks {', '.join(missing)}")
    return out


def check_bench_serving_cli(sample_argvs: Iterable[List[str]]) -> str:
    """Check ``sample_argvs`` against the installed ``sglang/bench_serving.py`` before any
    server time is spent; return what was checked (for the run's JSON).

    Raises:
        BenchError: the installed bench_serving would refuse one of them (another SGLang?).
    """
    path = bench_serving_source()
    if path is None:
        return "not checked: sglang is not installed here"
    spec = cli_spec(path.read_text(encoding="utf-8"))
    problems = sorted({p for argv in sample_argvs for p in argv_problems(argv, spec)})
    if problems:
        raise BenchError(f"{path} does not take this tool's arguments: {'; '.join(problems)}")
    return f"checked against {path}"
