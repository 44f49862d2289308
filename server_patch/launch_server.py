"""``python -m server_patch.launch_server <sglang server args> --speculative-disable-batch-threshold N``

The documented way to start SGLang 0.5.12 with the speculation gate: SGLang's own
``launch_server`` with this package's plugin registered first, so the two gate options parse
and every scheduler process is patched. All other arguments are SGLang's.
"""

from __future__ import annotations

import os
import sys
from typing import List, Optional

from server_patch import SUPPORTED_SGLANG_VERSION


def _require_sglang() -> None:
    """Exit with a one-line reason when SGLang (with its dependencies) cannot be imported."""
    import importlib

    try:
        for module in ("sglang.srt.plugins", "sglang.srt.server_args"):  # pull in SGLang's runtime deps
            importlib.import_module(module)
    except ImportError as exc:
        sys.exit(
            f"server_patch.launch_server needs SGLang {SUPPORTED_SGLANG_VERSION} with its dependencies "
            f"(pip install 'specconsole[server]'): {type(exc).__name__}: {exc}"
        )


def main(argv: Optional[List[str]] = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    _require_sglang()
    from server_patch import plugin

    plugin.register()  # also via the entry point; explicit so the CLI options always parse

    from sglang.srt.plugins import load_plugins

    load_plugins()

    from sglang.srt.server_args import prepare_server_args

    server_args = prepare_server_args(argv)

    from sglang.launch_server import run_server
    from sglang.srt.utils import kill_process_tree

    try:
        run_server(server_args)
    finally:
        kill_process_tree(os.getpid(), include_parent=False)


if __name__ == "__main__":
    main()
