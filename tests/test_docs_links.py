"""The docs hold together: every relative link resolves, the README stays short, its install and
test commands are the ones CI runs, and its results table is the one in docs/benchmarks.md."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted([ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "bench" / "results" / "README.md",
               *(ROOT / "docs").glob("*.md")])
README_MAX_LINES = 200

#: ``[text](target)`` and ``![alt](target)``; the target up to the first blank or ``)``
LINK_RE = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE_RE = re.compile(r"^```.*?^```", re.S | re.M)
CODE_SPAN_RE = re.compile(r"`[^`\n]*`")


def relative_links(text: str) -> list[str]:
    """Link targets outside code blocks and code spans that are paths in this repository (no
    scheme, not a bare ``#anchor``), without their ``#fragment``."""
    text = CODE_SPAN_RE.sub("", FENCE_RE.sub("", text))
    out = []
    for target in LINK_RE.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("#"):
            continue
        out.append(target.split("#", 1)[0])
    return out


def test_the_link_finder():
    text = ("[a](docs/a.md) ![b](../b.png) [c](https://x.org/y) [d](#top) [e](f.md#sec) `[g](no.md)`\n"
            "```\n[h](no.md)\n```\n")
    assert relative_links(text) == ["docs/a.md", "../b.png", "f.md"]


def test_the_docs_exist():
    assert {p.name for p in (ROOT / "docs").glob("*.md")} >= {"contract.md", "console.md", "server-patch.md",
                                                              "benchmarks.md"}
    assert (ROOT / "CONTRIBUTING.md").is_file()


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(doc):
    links = relative_links(doc.read_text())
    missing = [t for t in links if not (doc.parent / t).resolve().exists()]
    assert missing == [], f"{doc.relative_to(ROOT)}: {missing}"
    outside = [t for t in links if ROOT not in (doc.parent / t).resolve().parents]
    assert outside == [], f"{doc.relative_to(ROOT)} links outside the repository: {outside}"


def test_readme_is_short_and_links_the_docs():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) < README_MAX_LINES
    links = set(relative_links(text))
    assert {"docs/contract.md", "docs/console.md", "docs/server-patch.md", "docs/benchmarks.md",
            "CONTRIBUTING.md", "docs/screenshot.svg", "bench/results/throughput.png"} <= links


def _readme_commands() -> list[str]:
    """The README's first code block: the commands without their ``# comments``."""
    text = (ROOT / "README.md").read_text()
    block = re.search(r"^```bash\n(.*?)^```", text, re.S | re.M).group(1)
    return [line.split("   #")[0].strip() for line in block.splitlines()]


def test_ci_runs_the_readmes_install_and_test_commands():
    install, tests, console = _readme_commands()
    assert (tests, console) == ("python -m pytest -n auto", "specconsole demo")
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert install in [line.replace(" -q", "") for line in ci]
    assert tests in ci


def _table_after(text: str, marker: str, header: str = "| max concurrency") -> str:
    """The first markdown table after ``marker`` whose header line starts with ``header``."""
    rest = text[text.index(marker):]
    lines = rest.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith(header))
    table = []
    for line in lines[first:]:
        if not line.startswith("|"):
            break
        table.append(line)
    return "\n".join(table)


def test_the_readmes_results_table_is_the_benchmarks_table():
    readme = (ROOT / "README.md").read_text()
    bench = (ROOT / "docs" / "benchmarks.md").read_text()
    table = _table_after(readme, "## Results")
    assert table.count("\n") >= 6
    assert table == _table_after(bench, "## Measured on an H200 (8B-shaped pair, p = 0.2)")
    # the results lead with variable-length traffic, the table of docs/benchmarks.md's real-traffic section
    real = _table_after(readme, "## Results", header="| | c=1 |")
    assert readme.index(real) < readme.index(table) and real.count("\n") >= 5
    assert real == _table_after(bench, "## Real traffic", header="| | c=1 |")
