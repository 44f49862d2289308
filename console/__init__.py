"""specconsole: the operator's Textual console for SGLang dynamic speculation disable.

Layering (see README "The console"):

* data layer, UI-free: :mod:`console.client` (HTTP), :mod:`console.logfollow` and
  :mod:`console.logparse` (server log), :mod:`console.nvml` (the only module that calls
  nvidia-ml-py), :mod:`console.process` (the launched server's process group),
  :mod:`console.state` (immutable snapshot dataclasses) and :mod:`console.model`
  (folds samples into one :class:`console.state.ConsoleSnapshot`);
* widgets and screens that only render a snapshot: :mod:`console.widgets`,
  :mod:`console.screens`;
* the app that wires them together: :mod:`console.app`; the entry point: :mod:`console.cli`.

``console`` never imports SGLang or ``server_patch``.
"""

__version__ = "0.1.0"
