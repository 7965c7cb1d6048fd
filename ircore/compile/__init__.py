"""ircore under ``torch.compile``: the ``ircore`` backend, fusion passes and compile-time lowering.

``torch.compile(model, backend="ircore")`` (found through the ``torch_dynamo_backends`` entry
point, so the script need not import ircore) or ``ircore.compile(model, fusions=..., **kwargs)``
compile with Inductor plus one post-grad pass that:

1. runs a user's own ``post_grad_custom_post_pass``, if one is configured;
2. runs the fusions that are switched on (:data:`FUSIONS`, config key ``fusions``), e.g. the
   residual add written before an RMSNorm becomes ``fused_add_rms_norm``;
3. lowers every ``torch.ops.ircore.*`` node to the implementation that an eager call with the
   same metadata would run: ``native`` is traced in (Inductor fuses it with its neighbours),
   provider kernels stay opaque ops, in-place kernels are functionalized so that Inductor's
   re-inplacing removes their copies.

``report()`` says what the passes did. This module is cheap to import: Inductor is imported on
the first compile. The module itself is callable (``ircore.compile(model)``), so that the
function and ``ircore.compile.report()`` share one name.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Mapping, Sequence
from typing import Any

from ircore import config as _config
from ircore.compile._report import CompileReport, report, reset_report

__all__ = [
    "FUSIONS",
    "CompileReport",
    "backend",
    "compile",
    "post_grad_pass",
    "report",
    "reset_report",
]

#: Every fusion by name, with what it rewrites (:data:`ircore.config.FUSIONS`). All are on by
#: default; switch them with the config key ``fusions`` (``IRCORE_FUSIONS="add_rms_norm=off"``,
#: ``ircore.configure(fusions=...)``, ``[fusions]`` in ircore.toml) or per compile
#: (``ircore.compile(model, fusions=...)``).
FUSIONS = _config.FUSIONS

FusionSetting = Mapping[str, bool] | Sequence[str] | str | None


def backend(
    gm: Any,
    example_inputs: Sequence[Any],
    *,
    mode: str | None = None,
    options: Mapping[str, Any] | None = None,
    fusions: FusionSetting = None,
    leave_to_inductor: Mapping[str, int] | None = None,
) -> Any:
    """The ``ircore`` torch.compile backend: Inductor with ircore's post-grad pass.

    ``mode`` and ``options`` mean what they mean for ``backend="inductor"``. ``fusions``
    overrides the configured fusion switches for this compile (a mapping of name -> bool, a list
    of the names to run, ``"all"`` or ``"none"``). ``leave_to_inductor`` (op name -> element
    count): calls of that op whose largest tensor has at most that many elements are lowered to
    ``native`` whatever the priority, for Inductor to fuse with their neighbours.
    """
    from ircore.compile._backend import compile_graph
    from ircore.compile._settings import normalize_leave_to_inductor

    small = normalize_leave_to_inductor(leave_to_inductor, "ircore.compile.backend(leave_to_inductor=...)")
    return compile_graph(
        gm, example_inputs, mode=mode, options=options, fusions=fusions, leave_to_inductor=small
    )


def compile(
    model: Any = None,
    *,
    fusions: FusionSetting = None,
    leave_to_inductor: Mapping[str, int] | None = None,
    **torch_compile_kwargs: Any,
) -> Any:
    """``torch.compile(model, backend="ircore", **torch_compile_kwargs)`` with these fusions.

    ``leave_to_inductor={"rms_norm": 65536}``: calls of ``rms_norm`` whose largest tensor has at
    most 65536 elements are lowered to ``native`` (aten ops Inductor fuses with their neighbours)
    instead of a provider's kernel: a launch fewer where kernels are short (decode at small
    batches), the providers' kernels where they are long. ``mode=``, ``options=``, ``dynamic=``,
    ``fullgraph=`` ... are passed to ``torch.compile``. Without ``model`` it returns a decorator,
    as ``torch.compile`` does.
    """
    import functools

    import torch

    from ircore.compile._settings import normalize_leave_to_inductor

    if "backend" in torch_compile_kwargs:
        raise TypeError("ircore.compile() always uses the ircore backend; use torch.compile for others")
    # fail here, not at the first call
    if fusions is not None:
        _config.normalize_fusions(fusions, "ircore.compile(fusions=...)")
    small = normalize_leave_to_inductor(leave_to_inductor, "ircore.compile(leave_to_inductor=...)")
    if fusions is None and not small:
        chosen: Any = "ircore"
    else:
        chosen = functools.partial(backend, fusions=fusions, leave_to_inductor=small)
        chosen.__name__ = "ircore"
    return torch.compile(model, backend=chosen, **torch_compile_kwargs)


def post_grad_pass(fusions: FusionSetting = None, leave_to_inductor: Mapping[str, int] | None = None) -> Any:
    """ircore's pass as a ``CustomGraphPass``, for your own Inductor configuration.

    ``torch._inductor.config.post_grad_custom_post_pass = ircore.compile.post_grad_pass()`` gives
    plain ``backend="inductor"`` ircore's fusions and lowering (the ``ircore`` backend does this
    for you, and also guards compiled graphs against later priority changes).
    """
    from ircore.compile._passes import IrcorePostGradPass
    from ircore.compile._settings import normalize_leave_to_inductor

    small = normalize_leave_to_inductor(
        leave_to_inductor, "ircore.compile.post_grad_pass(leave_to_inductor=...)"
    )
    return IrcorePostGradPass(fusions=fusions, leave_to_inductor=small)


class _CallableModule(types.ModuleType):
    """Lets ``ircore.compile(model)`` call :func:`compile` while the package holds the rest."""

    def __call__(self, model: Any = None, **kwargs: Any) -> Any:
        return compile(model, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
