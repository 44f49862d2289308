#!/usr/bin/env bash
# Wheels the GPU machine lacks for running the console (textual and the few packages it needs that
# the image does not have; pyte + ptyprocess for bench.console_terminal) and the GPU tests (pytest), and py-spy (SGLang's --soft-watchdog-timeout dumps a stuck scheduler with it), into DEST (a folder your checkout ignores;
# carry it with the call).
# usage: bash bench/fetch-console-wheels.sh .gpuwheels/C
set -euo pipefail
dest=${1:?usage: fetch-console-wheels.sh DEST}
mkdir -p "$dest"
python3 -m pip download -q --no-deps -d "$dest" "textual>=8.2,<8.3" mdit-py-plugins linkify-it-py uc-micro-py platformdirs "rich>=14.2" "markdown-it-py>=3" \
  pytest pluggy iniconfig pyte ptyprocess wcwidth py-spy
du -sh "$dest"
