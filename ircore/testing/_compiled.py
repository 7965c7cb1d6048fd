"""What a compiled graph calls: the test that your kernel, not a fallback, runs under torch.compile."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def compiled_code(fn: Callable[..., Any], args: tuple[Any, ...], backend: str = "ircore") -> tuple[Any, str]:
    """``torch.compile(fn, backend=backend, fullgraph=True)(*args)`` with no cached graph, so the
    lowering runs in this process: its outputs and the Python code Inductor generated.

    The code names each op a graph calls (``torch.ops.ircore_<provider>.<op>.default(``), so a test
    can assert that its provider's implementation was lowered into the graph. Dynamo is reset
    first, and Inductor's FX graph and autograd caches are off for the call (a cached graph
    skips the lowering, and with it ``ircore.compile.report()``'s last lowering).
    """
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    with (
        torch._inductor.config.patch(fx_graph_cache=False),
        torch._functorch.config.patch(enable_autograd_cache=False),
    ):
        out, codes = run_and_get_code(torch.compile(fn, backend=backend, fullgraph=True), *args)
    return out, "\n".join(codes)
