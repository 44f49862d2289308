"""Throughput model of the demo server: measured H200 numbers, interpolated by batch size.

Reference measurement (this table is the source; the demo server's ``/server_info`` note and
the console's Load panel cite this module). Measured on one NVIDIA H200 (driver 580.159.04,
torch 2.11.0+cu130, SGLang 0.5.12) on 2026-11-30:

* target: synthetic 8B-shaped Llama (hidden 4096, 32 layers, vocabulary 8192); draft: 1-layer
  EAGLE-3 head with 20% wrong successors;
* EAGLE3 steps 3, topk 1, draft tokens 4 (``EAGLEWorkerV2``, overlap scheduler on); triton
  attention;
* ``python -m sglang.bench_serving --dataset-name random-ids``, 256 input / 256 output tokens,
  ``num-prompts = max(16, 4 * C)`` at max concurrency C (used here as the decode batch size).

| max concurrency | no speculation, tok/s | EAGLE-3, tok/s | EAGLE-3 / none | accept length |
|---|---|---|---|---|
| 1 | 217 | 371 | 1.71 | 2.95 |
| 4 | 743 | 938 | 1.26 | 2.95 |
| 16 | 2871 | 2457 | 0.86 | 2.93 |
| 64 | 8574 | 5980 | 0.70 | 2.94 |
| 128 | 11599 | 6780 | 0.58 | 2.94 |

The crossover lies between 4 and 16 concurrent requests (:func:`crossover_batch_size`): the
regime the dynamic disable threshold exists for. Between rows the model interpolates linearly
in log2(batch size).
"""

from __future__ import annotations

import math

#: (batch size, no speculation tok/s, EAGLE-3 tok/s, EAGLE-3 accept length)
H200_TABLE: tuple[tuple[int, float, float, float], ...] = (
    (1, 217.0, 371.0, 2.95),
    (4, 743.0, 938.0, 2.95),
    (16, 2871.0, 2457.0, 2.93),
    (64, 8574.0, 5980.0, 2.94),
    (128, 11599.0, 6780.0, 2.94),
)

#: One line the console shows in demo mode, so nobody mistakes the numbers for a live GPU.
SOURCE_NOTE = "tok/s measured on an H200, synthetic 8B pair, SGLang 0.5.12 (console/throughput.py)"


def _interp(batch_size: float, column: int) -> float:
    """Interpolate ``column`` of :data:`H200_TABLE` linearly in log2(batch size).

    Below batch size 1 the value scales linearly to 0; above the last row the last segment's
    slope continues (in log2 space), which flattens the curve the way a saturated GPU does.
    """
    if batch_size <= 0:
        return 0.0
    rows = H200_TABLE
    if batch_size <= rows[0][0]:
        return rows[0][column] * batch_size / rows[0][0]
    x = math.log2(batch_size)
    for lo, hi in zip(rows, rows[1:]):
        if batch_size <= hi[0]:
            x0, x1 = math.log2(lo[0]), math.log2(hi[0])
            f = (x - x0) / (x1 - x0)
            return lo[column] + f * (hi[column] - lo[column])
    lo, hi = rows[-2], rows[-1]
    x0, x1 = math.log2(lo[0]), math.log2(hi[0])
    slope = (hi[column] - lo[column]) / (x1 - x0)
    return hi[column] + slope * (x - x1)


def gen_throughput(batch_size: float, speculation_on: bool) -> float:
    """Generation throughput in tok/s of a decode batch of ``batch_size`` running requests.

    Args:
        batch_size: running requests in the decode batch (>= 0).
        speculation_on: EAGLE-3 column if True, no-speculation column if False.

    Returns:
        tok/s summed over the batch (0.0 for an empty batch).
    """
    return _interp(batch_size, 2 if speculation_on else 1)


def accept_length(batch_size: float) -> float:
    """Mean EAGLE-3 accept length (accepted draft tokens + 1 per verify) at ``batch_size``."""
    if batch_size <= 0:
        return H200_TABLE[0][3]
    return min(max(_interp(batch_size, 3), 1.0), 5.0)


def crossover_batch_size() -> float:
    """Smallest batch size (req, 0.25 resolution) at which no speculation beats EAGLE-3."""
    bs = 1.0
    while bs < 1024:
        if gen_throughput(bs, False) > gen_throughput(bs, True):
            return bs
        bs += 0.25
    return math.inf
