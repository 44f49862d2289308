"""pyflakes over every package: an undefined name in code that only a GPU run executes (the
server patch, the GPU benchmarks) would otherwise surface only there, at device-time cost."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_pyflakes_finds_nothing():
    proc = subprocess.run([sys.executable, "-m", "pyflakes", "bench", "console", "server_patch", "themes", "tests"],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout == "", proc.stdout + proc.stderr
