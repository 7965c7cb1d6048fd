"""An op library that declares an op, then raises: none of its ops may stay."""
import torch

import ircore


@ircore.register_op
def broken_scale(x: torch.Tensor, factor: float) -> torch.Tensor:
    return x * factor


raise RuntimeError("the op library's import failed halfway")
