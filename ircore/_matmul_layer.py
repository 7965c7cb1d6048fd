"""The matmul layer of batch-invariant mode: ``aten::mm``/``addmm``/``bmm`` on CUDA, routed to a
provider's persistent matmul with a fixed tile order while ``ircore.batch_invariant(matmul=True)``
blocks are open.

cuBLAS picks its split-K strategy (and so its summation order) by the problem's M, the number of
rows: a row's bits change with the batch. A persistent kernel whose tile sizes and K loop depend
only on K and N (never on M) sums every output element in the same order whatever M is.

The layer is process-wide while held (an ``aten`` kernel override cannot be per thread): it is
installed when the first such block is entered and removed when the last one is left. It comes
from an active provider whose entry-point module names it in ``IRCORE_MATMUL_LAYER``
(``"module:attribute"``, an object with ``install()`` returning an uninstall function): the
triton provider's ``ircore_triton.matmul_layer:LAYER``. Off CUDA, or with no provider offering
one, entering the block raises :class:`~ircore.errors.BatchInvariantError` saying so: the promise
of bitwise logits cannot be kept there.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ircore.errors import BatchInvariantError

#: The attribute of a provider's entry-point module that names its matmul layer.
LAYER_ATTRIBUTE = "IRCORE_MATMUL_LAYER"

_lock = threading.Lock()
_held = 0
_uninstall: Callable[[], None] | None = None


def find_layer() -> tuple[str, Any] | tuple[None, str]:
    """The first active provider's matmul layer as ``(provider, layer)``, else ``(None, why)``."""
    from ircore._state import STATE
    from ircore.platform import current_platform

    platform = current_platform()
    if platform.kind != "cuda":
        return None, f"the matmul layer runs on CUDA only; this is {platform.describe()}"
    return STATE.providers.matmul_layer(LAYER_ATTRIBUTE)


def hold(delta: int) -> None:
    """A ``batch_invariant(matmul=True)`` block entered (+1) or left (-1)."""
    global _held, _uninstall
    with _lock:
        if delta > 0 and _held == 0:
            provider, layer = find_layer()
            if provider is None:
                raise BatchInvariantError(
                    f"ircore.batch_invariant(matmul=True): no batch-invariant matmul layer: {layer}. "
                    "Use ircore.batch_invariant() without matmul=True for the ops' invariance alone"
                )
            installer: Any = layer
            _uninstall = installer.install()
        _held += delta
        if _held == 0 and _uninstall is not None:
            uninstall, _uninstall = _uninstall, None
            uninstall()


def installed() -> bool:
    """Whether the layer is in place now (some ``matmul=True`` block is open)."""
    return _uninstall is not None
