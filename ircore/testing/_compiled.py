"""What a compiled graph calls: the test that your kernel, not a fallback, runs under torch.compile."""

from __future__ import annotations

import re
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


# A kernel's source in Inductor's output: C++ (``cpp_pybinding``) or Triton (``async_compile.triton``).
_KERNEL = re.compile(r"(\w+) = async_compile\.(?:cpp_pybinding|triton)\(.*?r?'''(.*?)'''", re.S)
# A plain load into a temporary, and a store of a temporary, in either language.
_LOAD = re.compile(
    r"(?:auto )?(tmp\d+) = "
    r"(?:at::vec::Vectorized<[\w:]+>::loadu\((\w+) \+.*|(\w+)\[[^\]]*\]|tl\.load\((\w+) \+.*)"
)
_STORE = re.compile(
    r"(tmp\d+)\.store\((\w+) \+.*|(\w+)\[[^\]]*\] = (tmp\d+)|tl\.store\((\w+) \+ .*?, (tmp\d+)\b.*"
)
_COPY_CALLS = re.compile(r"\.copy_\(|aten\.copy_|extern_kernels\.copy")


def copied_buffers(code: str) -> int:
    """How many buffers the code Inductor generated copies unchanged (clones it kept, ``copy_``),
    per run of the graph.

    In every kernel (whatever it is named after: Inductor may put a copy in the kernel of the op it
    feeds), each (source, destination) pair whose stored value is a plain load of the source counts
    once, however many loops (vector body, tail) do it, times the calls of the kernel (one kernel
    may serve every layer); plus each ``copy_`` outside kernels. Reads the C++ (CPU) and Triton
    (GPU) kernels of ``compiled_code``'s output.
    """
    total = 0
    for kernel, body in _KERNEL.findall(code):
        loaded: dict[str, str] = {}
        pairs = set()
        for statement in (s.strip() for s in re.split(r"[;{}\n]", body)):
            if load := _LOAD.fullmatch(statement):
                loaded[load[1]] = load[2] or load[3] or load[4]
            elif store := _STORE.fullmatch(statement):
                forms = ((store[1], store[2]), (store[4], store[3]), (store[6], store[5]))
                tmp, dest = next((t, d) for t, d in forms if t)
                if tmp in loaded:
                    pairs.add((loaded[tmp], dest))
        if pairs:
            calls = len(re.findall(rf"^\s*{kernel}(?:\.run)?\(", code, re.M))
            total += len(pairs) * calls
    return total + len(_COPY_CALLS.findall(code))
