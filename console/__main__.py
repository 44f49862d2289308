"""``python -m console`` is the same as the ``specconsole`` command."""

from console.cli import main

raise SystemExit(main())
