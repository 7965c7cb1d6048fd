"""A provider whose kernels raise what a library must never raise: SystemExit and GeneratorExit.

The conformance tools must report each case as failed, naming the exception, and go on.
"""

from typing import Optional

import torch

import ircore


def rms_norm(
    x: torch.Tensor, weight: Optional[torch.Tensor], epsilon: float, variance_size: Optional[int] = None
) -> torch.Tensor:
    raise GeneratorExit


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    raise SystemExit(3)


@ircore.hookimpl
def ircore_register(registrar):
    registrar.register("rms_norm", rms_norm)
    registrar.register("silu_and_mul", silu_and_mul)
