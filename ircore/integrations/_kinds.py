"""What kind of norm or feed-forward module a module is, as far as ``apply`` is concerned.

``apply`` patches RMSNorms (classes named ``*RMSNorm``), gated RMSNorms (``*RMSNormGated``),
``nn.LayerNorm`` and its subclasses that keep its forward, gated MLPs (``gate_proj``,
``up_proj``, ``down_proj``), MLPs with one fused ``gate_up_proj`` and MoE experts held in 3-D
parameters, where their forwards have a known form. Every other norm and feed-forward module
it meets is named in the summary with the reason it is kept: the functions here give that
reason, or None for a module that is none of these (a Linear, an attention block, ...).
"""

from __future__ import annotations

import re

from torch import nn

_GATED = ("gate_proj", "up_proj", "down_proj")
#: Class names of norm layers: ``...Norm``, ``...NormGated``, ``...Norm1P`` (Nemotron), ``...Norm2d``.
_NORM_NAME = re.compile(r"norm(gated|1p|2d)?$", re.IGNORECASE)
#: Class names of feed-forward blocks.
_FFN_NAME = re.compile(r"mlp|feedforward|ffn$", re.IGNORECASE)
_TORCH_NORMS = (nn.GroupNorm, nn.LocalResponseNorm, nn.modules.batchnorm._NormBase)


def is_rmsnorm(cls: type) -> bool:
    """A class ``apply`` tries as an RMSNorm: its name ends in ``RMSNorm``."""
    return cls.__name__.lower().endswith("rmsnorm")


def is_gated_mlp(module: nn.Module) -> bool:
    """A module ``apply(mlp=True)`` tries to merge: it has ``gate_proj``, ``up_proj``, ``down_proj``."""
    return all(hasattr(module, name) for name in _GATED)


def is_gated_rmsnorm(cls: type) -> bool:
    """A class ``apply`` tries as a gated RMSNorm: its name ends in ``RMSNormGated``."""
    return cls.__name__.lower().endswith("rmsnormgated")


def is_layer_norm(cls: type) -> bool:
    """A class ``apply`` tries as a LayerNorm: ``nn.LayerNorm`` or a subclass."""
    return issubclass(cls, nn.LayerNorm)


def other_norm(cls: type) -> str | None:
    """Why a norm class that is no RMSNorm, gated RMSNorm or LayerNorm candidate is kept, or None
    if it is no norm (or one of those candidates: ``apply`` gives their reasons itself)."""
    name = cls.__name__
    if is_rmsnorm(cls) or is_gated_rmsnorm(cls) or is_layer_norm(cls):
        return None
    if issubclass(cls, _TORCH_NORMS):
        return f"{name} is a batch, group or local response norm: ircore has no op for it"
    if _NORM_NAME.search(name):
        return (
            f"{name} is not named *RMSNorm or *RMSNormGated nor an nn.LayerNorm (only those, with a "
            "known forward, are patched)"
        )
    return None


def is_fused_mlp(module: nn.Module) -> bool:
    """An MLP with one fused ``gate_up_proj`` module (a linear) and a ``down_proj``."""
    return isinstance(getattr(module, "gate_up_proj", None), nn.Module) and hasattr(module, "down_proj")


def fused_experts(module: nn.Module) -> str | None:
    """``"<E> experts in 3-D parameters (names)"`` for MoE experts held in 3-D parameters, else None."""
    if "expert" not in type(module).__name__.lower():  # MixtralExperts, DbrxExpertGLU (not Conv1d)
        return None
    fused = {name: p for name, p in module.named_parameters(recurse=False) if p.dim() == 3}
    if not fused:
        return None
    count = next(iter(fused.values())).shape[0]
    return f"{count} experts in 3-D parameters ({', '.join(fused)})"


def other_feed_forward(module: nn.Module) -> str | None:
    """Why a feed-forward module that is no gated MLP, fused MLP or experts module is kept, or None.

    Modules named ``*MLP``/``*FeedForward``/``*FFN`` that are not gated; a block whose children
    are reported themselves (an MoE block's experts) is not reported again.
    """
    cls = type(module).__name__
    if is_gated_mlp(module) or is_fused_mlp(module) or fused_experts(module):
        return None
    if not _FFN_NAME.search(cls):
        return None
    parts = list(module.modules())[1:]
    if any(is_gated_mlp(m) or fused_experts(m) or hasattr(m, "gate_up_proj") for m in parts):
        return None  # its parts are reported on their own
    missing = ", ".join(name for name in _GATED if not hasattr(module, name))
    return f"{cls} has no {missing}: not a gated MLP"
