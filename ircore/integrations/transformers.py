"""Hugging Face transformers models through ircore: patched RMSNorms and gated MLPs.

``apply(model)`` patches a loaded model's instances, as Liger-Kernel does with ``model=``: each
RMSNorm whose forward has a known form (the Llama/Qwen form and two others, see
``ircore.integrations._forms``) calls ``ircore.ops.rms_norm``; with ``mlp=True`` each gated
SiLU MLP runs one merged gate/up matmul and ``ircore.ops.silu_and_mul``. ``apply_to_classes``
patches the classes instead, before a model is built or loaded. ``undo`` and ``undo_classes``
put everything back. The residual add is not rewritten: under ``torch.compile(model,
backend="ircore")`` the add+norm fusion turns each add and the norm after it into
``fused_add_rms_norm``.

Nothing here imports transformers except ``apply_to_classes`` given a model type name; the
patches work on any ``nn.Module`` with these forms.
"""

from __future__ import annotations

import importlib
import logging
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from types import MethodType, ModuleType
from typing import Any, cast

import torch
from torch import nn

from ircore.integrations._forms import form_of
from ircore.integrations._forwards import merge_gate_up, mlp_forward, norm_forward, patch_of, split_gate_up
from ircore.integrations._kernels_mapping import IrcoreRepository, IrcoreRMSNorm, kernel_mapping

__all__ = [
    "IrcoreRMSNorm",
    "IrcoreRepository",
    "PatchSummary",
    "apply",
    "apply_to_classes",
    "kernel_mapping",
    "undo",
    "undo_classes",
]

_log = logging.getLogger("ircore")
_UNKNOWN_FORM = "{}.forward is not a known RMSNorm form (kept as it is)"


@dataclass
class PatchSummary:
    """What ``apply`` or ``apply_to_classes`` did.

    ``rms_norm``: names of the modules (or classes) now calling ``ircore.ops.rms_norm``, with
    the form their forward had in ``forms``. ``mlp``: MLPs now running one gate/up matmul and
    ``ircore.ops.silu_and_mul``. ``left_alone``: name -> why it was not patched (an unknown
    norm form, a forward already replaced on the instance, ...).
    """

    rms_norm: list[str] = field(default_factory=list)
    mlp: list[str] = field(default_factory=list)
    left_alone: dict[str, str] = field(default_factory=dict)
    forms: Counter[str] = field(default_factory=Counter)

    def __str__(self) -> str:
        forms = ", ".join(f"{form} {n}" for form, n in sorted(self.forms.items()))
        lines = [f"{len(self.rms_norm)} RMSNorm -> ircore.ops.rms_norm" + (f" ({forms})" if forms else "")]
        lines.append(f"{len(self.mlp)} MLP -> one gate/up matmul + ircore.ops.silu_and_mul")
        if self.left_alone:
            lines.append(f"{len(self.left_alone)} left alone:")
            lines += [f"  {name}: {why}" for name, why in self.left_alone.items()]
        return "\n".join(lines)


# ---------------------------------------------------------------------- checks
def _norm_problem(module: nn.Module) -> tuple[str | None, str | None]:
    """(form, None) if ``module`` can be patched, else (None, why not)."""
    cls = type(module)
    if patch_of(cls.forward):
        return None, f"its class {cls.__name__} is already patched (apply_to_classes)"
    if patch_of(vars(module).get("forward")):
        return None, "already applied"
    if "forward" in vars(module):
        return None, "its forward was already replaced on the instance (by another library or a hook)"
    form = form_of(cls, "norm")
    if form is None:
        return None, _UNKNOWN_FORM.format(cls.__name__)
    weight = getattr(module, "weight", None)
    if not isinstance(weight, torch.Tensor) or weight.dim() != 1:
        return None, f"{cls.__name__} has no 1-D weight"
    if not isinstance(getattr(module, "variance_epsilon", None), float):
        return None, f"{cls.__name__} has no float variance_epsilon"
    return form, None


def _mlp_problem(module: nn.Module) -> str | None:
    """Why ``module`` cannot be merged, or None."""
    cls = type(module)
    if patch_of(vars(module).get("forward")):
        return "already applied"
    if "forward" in vars(module):
        return "its forward was already replaced on the instance (by another library or a hook)"
    layers = [getattr(module, name, None) for name in ("gate_proj", "up_proj", "down_proj")]
    if not all(isinstance(layer, nn.Linear) for layer in layers):
        return f"{cls.__name__}: gate_proj, up_proj and down_proj are not all nn.Linear"
    gate, up = cast(nn.Linear, layers[0]), cast(nn.Linear, layers[1])
    act = getattr(module, "act_fn", None)
    if not (isinstance(act, nn.SiLU) or (isinstance(act, nn.Module) and form_of(type(act), "silu"))):
        return f"{cls.__name__}: the activation {type(act).__name__} is not SiLU"
    if form_of(cls, "mlp") is None:
        return f"{cls.__name__}.forward is not the gated MLP form down(act(gate(x)) * up(x))"
    if gate.weight.is_meta or up.weight.is_meta:
        return "its weights are not loaded (meta tensors): apply after loading"
    if (gate.weight.shape, gate.weight.dtype, gate.weight.device) != (
        up.weight.shape,
        up.weight.dtype,
        up.weight.device,
    ) or (gate.bias is None) != (up.bias is None):
        return "gate_proj and up_proj differ in shape, dtype, device or bias"
    return None


# ---------------------------------------------------------------------- instance level
def _is_norm_candidate(module: nn.Module) -> bool:
    return type(module).__name__.lower().endswith("rmsnorm")


def _is_mlp_candidate(module: nn.Module) -> bool:
    return all(hasattr(module, name) for name in ("gate_proj", "up_proj", "down_proj"))


def apply(model: nn.Module, *, rms_norm: bool = True, mlp: bool = False) -> PatchSummary:
    """Route a loaded model's RMSNorms (and, with ``mlp=True``, its gated MLPs) to ircore's ops.

    Patches instances, not classes (other models of the same class are untouched). RMSNorm
    modules (class name ending in ``RMSNorm``) whose forward has a known form call
    ``ircore.ops.rms_norm``; a call whose input dtype differs from the weight's runs the
    module's own forward. With ``mlp=True``, modules with ``gate_proj``/``up_proj``/``down_proj``
    linears, a SiLU activation and the forward ``down(act(gate(x)) * up(x))`` run one matmul
    over merged gate/up weights (merged once, here; the two parameters become views of the
    merged tensor) followed by ``ircore.ops.silu_and_mul``. Apply after loading weights and
    after moving the model. Returns what was patched and what was left alone, and why.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(
            f"ircore.integrations.transformers.apply: expected an nn.Module, got {type(model).__name__}"
        )
    summary = PatchSummary()
    for name, module in model.named_modules():
        name = name or type(model).__name__
        if rms_norm and _is_norm_candidate(module):
            form, why = _norm_problem(module)
            if form is None:
                summary.left_alone[name] = why or ""
                continue
            module.forward = MethodType(norm_forward(type(module).forward), module)
            summary.rms_norm.append(name)
            summary.forms[form] += 1
        elif mlp and _is_mlp_candidate(module):
            why = _mlp_problem(module)
            if why is not None:
                summary.left_alone[name] = why
                continue
            merge_gate_up(module)
            module.forward = MethodType(mlp_forward, module)
            summary.mlp.append(name)
    _log.info("ircore.integrations.transformers.apply(%s):\n%s", type(model).__name__, summary)
    return summary


def undo(model: nn.Module) -> int:
    """Put back every module of ``model`` that ``apply`` patched; returns how many.

    Norms get their class's forward again; merged MLPs get their class's forward, and their gate
    and up weights their own storage (as loaded, same values).
    """
    restored = 0
    for module in model.modules():
        kind = patch_of(vars(module).get("forward"))
        if kind is None:
            continue
        del module.forward
        if kind == "mlp":
            split_gate_up(module)
        restored += 1
    return restored


# ---------------------------------------------------------------------- class level
#: class -> its own forward before apply_to_classes (None: it inherited its forward)
_CLASS_PATCHES: dict[type, Any] = {}


def _classes_of(target: str | ModuleType | type) -> tuple[str, list[type]]:
    """The RMSNorm classes a target names: a model type (``"llama"``), a modeling module, a class."""
    if isinstance(target, type):
        return target.__qualname__, [target]
    if isinstance(target, str):
        module_name = f"transformers.models.{target}.modeling_{target}"
        try:
            target = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            raise ValueError(
                f"ircore.integrations.transformers.apply_to_classes: no module {module_name} ({exc}); "
                "pass a model type as in config.model_type ('llama', 'qwen3'), a modeling module or a class"
            ) from exc
    if not isinstance(target, ModuleType):
        raise TypeError(
            "ircore.integrations.transformers.apply_to_classes: expected a model type name, a modeling "
            f"module or a class, got {type(target).__name__}"
        )
    classes = [
        value
        for value in vars(target).values()
        if isinstance(value, type)
        and issubclass(value, nn.Module)
        and value.__module__ == target.__name__
        and value.__name__.lower().endswith("rmsnorm")
    ]
    return target.__name__, classes


def apply_to_classes(*targets: str | ModuleType | type) -> PatchSummary:
    """Route RMSNorm classes to ``ircore.ops.rms_norm``, for models built or loaded afterwards.

    Each target is a model type (``"llama"``, ``"qwen3"``: the RMSNorm classes of
    ``transformers.models.<type>.modeling_<type>``), a modeling module, or a class. Classes whose
    forward has a known form get ircore's forward (every instance, existing ones included);
    the others are listed in ``left_alone``. The MLP merge needs loaded weights: use
    ``apply(model, rms_norm=False, mlp=True)`` after loading for that. ``undo_classes()`` reverts.
    """
    if not targets:
        raise TypeError(
            "ircore.integrations.transformers.apply_to_classes: name at least one model type or class"
        )
    summary = PatchSummary()
    for target in targets:
        where, classes = _classes_of(target)
        if not classes:
            summary.left_alone[where] = "no RMSNorm class defined there"
        for cls in classes:
            name = f"{cls.__module__}.{cls.__qualname__}"
            if cls in _CLASS_PATCHES:
                continue  # applied before: nothing to do
            form = form_of(cls, "norm")
            if form is None:
                summary.left_alone[name] = _UNKNOWN_FORM.format(cls.__name__)
                continue
            _CLASS_PATCHES[cls] = vars(cls).get("forward")
            setattr(cls, "forward", norm_forward(getattr(cls, "forward")))  # noqa: B009, B010 - a class, typed as type
            summary.rms_norm.append(name)
            summary.forms[form] += 1
    _log.info("ircore.integrations.transformers.apply_to_classes:\n%s", summary)
    return summary


def undo_classes(classes: Iterable[type] | None = None) -> int:
    """Give the classes ``apply_to_classes`` patched (all, or these) their own forward back."""
    restored = 0
    for cls in list(_CLASS_PATCHES if classes is None else classes):
        if cls not in _CLASS_PATCHES:
            continue
        own = _CLASS_PATCHES.pop(cls)
        if own is None:
            delattr(cls, "forward")
        else:
            setattr(cls, "forward", own)  # noqa: B010 - a class, typed as type
        restored += 1
    return restored
