"""server_patch: dynamic speculation disable for SGLang EAGLE/EAGLE-3 (SGLang 0.5.12).

Layout (SGLang-facing code only; nothing here knows about the console):

- ``gate``          pure policy: threshold + hysteresis state machine, runtime-update validation, counters
- ``options``       the two CLI options and how their values travel to every scheduler process
- ``compat``        which SGLang versions / server configurations / worker classes are supported
- ``off_state``     the speculation-OFF decode step (degenerate 1-token verify + 1-token draft extend)
- ``scheduler_hooks`` / ``tokenizer_hooks``  the SGLang HookRegistry hooks
- ``plugin``        the ``sglang.srt.plugins`` entry point
- ``launch_server`` ``python -m server_patch.launch_server <sglang args> --speculative-disable-batch-threshold N``
"""

SUPPORTED_SGLANG_VERSION = "0.5.12"
