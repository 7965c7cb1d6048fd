"""A mapping for users of the ``kernels`` package's ``kernelize``: ircore as a local layer repository.

``kernels.kernelize(model, mode=..., device=...)`` replaces the forward of every module whose
class carries ``kernel_layer_name`` (set by ``use_kernel_forward_from_hub("RMSNorm")`` in
transformers' modeling files when transformers accepts the installed ``kernels``, or by
``kernels.replace_kernel_forward_from_hub(cls, "RMSNorm")``) with the forward of the layer the
mapping names. :func:`kernel_mapping` names :class:`IrcoreRMSNorm`, served by an in-process
repository object (:class:`IrcoreRepository`, no Hub access). Nothing here imports ``kernels``
until :func:`kernel_mapping` is called.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import nn

from ircore.integrations._forwards import norm_forward

#: Device types ``kernels`` knows where ircore has a rule for every op (native runs anywhere).
DEFAULT_DEVICES = ("cpu", "cuda", "rocm", "xpu")


def _class_forward(self: nn.Module, hidden_states: Any) -> Any:
    return type(self).forward(self, hidden_states)


class IrcoreRMSNorm(nn.Module):
    """A ``kernels`` layer: ``ircore.ops.rms_norm(x, self.weight, self.variance_epsilon)``.

    Stateless, as ``kernels`` requires (it copies ``forward`` onto the model's modules): it
    reads the module's ``weight`` and ``variance_epsilon``, and runs the module's own class
    forward when the input's dtype differs from the weight's.
    """

    can_torch_compile = True
    has_backward = False
    forward = norm_forward(_class_forward)


class IrcoreRepository:
    """A ``kernels`` repository object (``load() -> layer class``) for :class:`IrcoreRMSNorm`."""

    layer_name = "IrcoreRMSNorm"

    def load(self) -> type[nn.Module]:
        return IrcoreRMSNorm

    def __repr__(self) -> str:
        return "IrcoreRepository(ircore.integrations.transformers.IrcoreRMSNorm)"


_REPOSITORY = IrcoreRepository()


def kernel_mapping(devices: Sequence[str] = DEFAULT_DEVICES) -> dict[str, Any]:
    """``{"RMSNorm": {device: {mode: repository}}}`` for ``kernels.use_kernel_mapping``.

    Registered for ``Mode.INFERENCE`` and ``Mode.INFERENCE | Mode.TORCH_COMPILE`` (ircore's ops
    have no backward). Use it with ``inherit_mapping=False`` to keep transformers' default Hub
    mapping (which would download) out::

        from kernels import Mode, kernelize, use_kernel_mapping
        with use_kernel_mapping(kernel_mapping(), inherit_mapping=False):
            kernelize(model, mode=Mode.INFERENCE, device="cuda")
    """
    try:
        from kernels import Mode
    except ImportError as exc:
        raise ImportError(
            "ircore.integrations.transformers.kernel_mapping needs the 'kernels' package "
            f"(pip install kernels): {exc}"
        ) from exc
    modes = {Mode.INFERENCE: _REPOSITORY, Mode.INFERENCE | Mode.TORCH_COMPILE: _REPOSITORY}
    return {"RMSNorm": {device: dict(modes) for device in devices}}
