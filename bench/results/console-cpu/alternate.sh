for size in 160x50 80x24; do for i in 1 2 3 4; do
  (cd /work/main && timeout 300 .venv/bin/python -m bench.console_cpu --size $size --seconds 30 --repeat 1 --out /tmp/alt-wip-$size-$i.json >/dev/null 2>&1)
  (cd /tmp/head && timeout 300 /work/main/.venv/bin/python -m bench.console_cpu --size $size --seconds 30 --repeat 1 --out /tmp/alt-head-$size-$i.json >/dev/null 2>&1)
done; done
echo ALTDONE
