"""The architecture, checked from the source: no import circles, the console reads the server only
through the contract, and each rule and key list of the contract is written once.

Static (``ast``), so it sees lazy imports inside functions too and needs neither SGLang nor a GPU.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from server_patch import contract

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("console", "server_patch", "themes", "bench")
CONTRACT_FILE = ROOT / "server_patch" / "contract.py"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _sources() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def _imports(path: Path, known: set[str]) -> set[str]:
    """Project modules that ``path`` imports anywhere (module level or inside a function)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # "from pkg import mod" imports pkg.mod when that is a module, else a name of pkg
            names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known else node.module
                     for a in node.names]
        else:
            continue
        out.update(n for n in names if n in known)
    return out


def import_graph() -> dict[str, set[str]]:
    """``{module: project modules it imports}`` for every module of PACKAGES."""
    sources = _sources()
    known = set(sources)
    return {name: _imports(path, known) - {name} for name, path in sources.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_cycle_finder_finds_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_circles():
    assert cycles(import_graph()) == []


def test_the_console_reads_the_server_only_through_the_contract():
    """console/ imports of server_patch are exactly the contract (the simulated server also drives
    server_patch's pure gate); server_patch knows nothing of the console or Textual."""
    graph = import_graph()
    for module, deps in graph.items():
        theirs = {d for d in deps if d.split(".")[0] == "server_patch"} - {"server_patch"}
        if module.startswith("console."):
            allowed = {"server_patch.contract"}
            if module == "console.demo_server":
                allowed |= {"server_patch.gate", "server_patch.auto_threshold"}
            assert theirs <= allowed, (module, theirs - allowed)
        if module.startswith("server_patch"):
            assert not {d for d in deps if d.split(".")[0] in ("console", "themes", "bench")}, module
    for path in (ROOT / "server_patch").rglob("*.py"):
        tree = ast.parse(path.read_text())
        mods = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        mods |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert not {m for m in mods if m.split(".")[0] in ("textual", "rich")}, path
    contract_deps = _imports(CONTRACT_FILE, set(_sources()))
    assert contract_deps == set(), "the contract depends on nothing of the project"


# -- one home per rule ---------------------------------------------------------------------------

#: strings that only the contract may spell out: its keys and flags ...
CONTRACT_STRINGS = (contract.THRESHOLD_KEY, contract.HYSTERESIS_KEY, contract.THRESHOLD_FLAG,
                    contract.HYSTERESIS_FLAG)
#: ... and the wording of its rules and warnings (matched in a literal string, or in an f-string
#: with its placeholders read as ``{}``)
RULE_PATTERNS = [re.compile(p) for p in (
    r"\b(threshold|hysteresis)( \{\})? (must be|refused)\b",
    r"\b(above|>) max running requests\b",
    r"never fires|could never reach|never turn off",
    r"\bthreshold( \{\})? > cuda graph max bs",
)]
#: a literal list/tuple/set/dict restates the spec_gate key list when at least KEY_LIST_MIN of its
#: strings, and KEY_LIST_SHARE of them, are spec_gate field names
KEY_LIST_MIN = 5
KEY_LIST_SHARE = 0.75


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = getattr(node, "body", [])
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def _text(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    return None


def contract_literals(path: Path) -> list[str]:
    """Where ``path`` restates the contract: its keys, flags or rule wording in a string literal
    (docstrings aside: prose may name a flag), or a literal list/tuple/set/dict of spec_gate keys."""
    tree = ast.parse(path.read_text(), str(path))
    docs = _docstrings(tree)
    inside_fstring = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
    found = []
    fields = set(contract.SPEC_GATE_FIELDS)
    for node in ast.walk(tree):
        text = _text(node)
        if text is not None and id(node) not in docs and id(node) not in inside_fstring:
            hits = [t for t in CONTRACT_STRINGS if t in text] + [p.pattern for p in RULE_PATTERNS if p.search(text)]
            found += [f"{path.name}:{node.lineno}: {hit!r} in {text[:60]!r}" for hit in hits]
        elts = None
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            elts = node.elts
        elif isinstance(node, ast.Dict):
            elts = [k for k in node.keys if k is not None]
        if elts is not None:
            names = [e.value for e in elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            ours = set(names) & fields
            if len(ours) >= KEY_LIST_MIN and len(ours) >= KEY_LIST_SHARE * len(set(names)):
                found.append(f"{path.name}:{node.lineno}: a list of {len(ours)} spec_gate keys")
    return found


def test_the_literal_finder_finds_restated_rules(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text('"""--speculative-disable-batch-threshold in prose is fine."""\n'
                   'A = "speculative_disable_batch_threshold"\n'
                   'B = f"threshold {1} refused: must be >= 1"\n'
                   'C = ("spec_enabled", "threshold", "hysteresis", "switches", "topk")\n'
                   'D = "--port must be >= 1"\n')
    found = contract_literals(bad)
    assert len(found) == 3 and all(f.startswith("bad.py:") for f in found), found


@pytest.mark.parametrize("path", [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))
                                  if p != CONTRACT_FILE], ids=lambda p: str(p.relative_to(ROOT)))
def test_contract_literals_live_only_in_the_contract(path):
    assert contract_literals(path) == []


def test_every_switch_variable_the_plugin_reads_is_in_the_one_list():
    """``server_patch.options.SWITCH_ENV`` names every ``SPECCONSOLE_*`` switch of the plugin (what
    ``bench.gate_correctness`` records), and only those."""
    from server_patch import options

    found = set()
    for path in (ROOT / "server_patch").glob("*.py"):
        found |= set(re.findall(r'"(SPECCONSOLE_[A-Z0-9_]+)"', path.read_text()))
    found -= {options.ENV_VAR}  # the gate's values, not a switch
    assert found == set(options.SWITCH_ENV)


def test_a_switch_is_1_or_0_and_anything_else_is_its_default():
    from server_patch import options

    env = {"A": "1", "B": "0", "C": "true"}
    assert options.switch("A", False, env) and not options.switch("B", True, env)
    assert options.switch("C", True, env) and not options.switch("C", False, env) and options.switch("D", True, env)
