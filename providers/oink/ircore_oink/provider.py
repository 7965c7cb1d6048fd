"""The module named by this distribution's ``ircore.providers`` entry point.

Cheap to import and safe anywhere: ``kernelagent_oink`` is imported, and its ops registered
(``kernelagent_oink.register(force=True)``), only by :func:`ircore_check_platform` on a GPU of
compute capability 10.x. The implementations in :mod:`ircore_oink.impls` are loaded by ircore
after that check passed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import ircore
from ircore.kit import call_form_problem, import_vendor, torch_op

if TYPE_CHECKING:
    from ircore.platform import Platform

NEEDS = "needs an NVIDIA Blackwell GPU (compute capability 10.x) and kernelagent-oink"
INSTALL = (
    "KernelAgent-Oink (module kernelagent_oink; not on PyPI: pip install ./oink from a checkout of "
    "github.com/meta-pytorch/KernelAgent)"
)

#: ``torch.ops.oink.<op>`` parameters this adapter passes, positionally (KernelAgent-Oink 0.1.0:
#: ``rmsnorm(Tensor x, Tensor weight, float eps) -> Tensor`` and the in-place
#: ``fused_add_rms_norm(Tensor(a0!) x, Tensor(a1!) residual, Tensor weight, float eps) -> ()``).
CALL_FORMS = {"rmsnorm": ("x", "weight", "eps"), "fused_add_rms_norm": ("x", "residual", "weight", "eps")}

OPS = ("rms_norm", "fused_add_rms_norm")
#: Ahead of vllm_c (10) and triton (20) on Blackwell, as vLLM does with VLLM_USE_OINK_OPS=1.
#: Not measured by ircore (no Blackwell GPU).
DEFAULT_RANK = 5

# Not cache_by_signature: the predicates read the row stride and the storage offset (Oink's
# fast-path rules), which are not facts of the call signature. fused_add_rms_norm works in place.
# rms_norm's output keeps x's row stride: its fake (rms_norm_fake) says so for compiled graphs.
IRCORE_IMPLEMENTATIONS = ircore.impl_table(
    "ircore_oink.impls", OPS, inplace=("fused_add_rms_norm",), rank=DEFAULT_RANK, fakes=("rms_norm",)
)


@ircore.hookimpl
def ircore_check_platform(platform: Platform) -> str | None:
    """None on compute capability 10.x once kernelagent_oink registered both ops, else why not."""
    if platform.kind != "cuda" or platform.capability is None or platform.capability[0] != 10:
        return f"{NEEDS}; found {platform.describe()}"
    oink = import_vendor("kernelagent_oink", needs=INSTALL)
    if isinstance(oink, str):
        return oink
    oink.register(force=True)  # registers only where its own checks pass; says why in its logger
    for name, expected in CALL_FORMS.items():
        op = torch_op("oink", name)
        if op is None:
            return (
                f"kernelagent_oink.register() registered no torch.ops.oink.{name} (it needs cutlass from "
                "nvidia-cutlass-dsl and cuda.bindings from cuda-python; see the kernelagent_oink logger)"
            )
        problem = call_form_problem(f"torch.ops.oink.{name}", op, expected)
        if problem:
            return f"{problem} (supported: kernelagent-oink 0.1)"
    return None
