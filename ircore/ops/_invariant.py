"""Fixed-order reductions: what the native ops run in batch-invariant mode.

torch's own reductions pick their strategy by the whole tensor's shape: on CPU a reduction over a
long last dimension is split across threads once the tensor is large enough and that dimension is
its largest (``rms_norm`` of one 65536-wide row alone differs from the same row in a batch of 3 by
~2e-6 with 8 threads; measured here), and CUDA's reduction kernels choose their split by the row
count. :func:`fixed_order_sum` sums the last dimension as a pairwise tree of elementwise adds
(halves added until one element is left, the row zero-padded to a power of two): every step is
elementwise, so each row is summed in the same order whatever the batch, on any device.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def fixed_order_sum(t: torch.Tensor) -> torch.Tensor:
    """``t.sum(-1, keepdim=True)``, summed in an order that depends on ``t.shape[-1]`` only."""
    n = t.shape[-1]
    if n <= 1:
        return t.sum(-1, keepdim=True)
    width = 1 << (n - 1).bit_length()
    if width != n:
        t = F.pad(t, (0, width - n))
    while t.shape[-1] > 1:
        half = t.shape[-1] // 2
        t = t[..., :half] + t[..., half:]
    return t


def fixed_order_mean(t: torch.Tensor) -> torch.Tensor:
    """``t.mean(-1, keepdim=True)`` by :func:`fixed_order_sum`."""
    return fixed_order_sum(t) / max(t.shape[-1], 1)
