"""Hugging Face transformers models through ircore: patched norms, gated MLPs and MoE experts.

``apply(model)`` patches a loaded model's instances, as Liger-Kernel does with ``model=``: each
RMSNorm whose forward has a known form (the Llama/Qwen form and two others, see
``ircore.integrations._forms``) calls ``ircore.ops.rms_norm``, each ``nn.LayerNorm``
``ircore.ops.layer_norm``, each gated RMSNorm of the Mamba2, Qwen3-Next or Falcon-H1 form
``ircore.ops.rms_norm_gated``; with ``mlp=True`` each gated
SiLU MLP runs one merged gate/up matmul and ``ircore.ops.silu_and_mul``, and MLPs with one fused
``gate_up_proj`` and MoE experts held in 3-D parameters apply ``ircore.ops.silu_and_mul`` to
their ``[gate | up]`` matmul output. ``apply_to_classes`` patches the classes instead, before a
model is built or loaded. ``undo`` and ``undo_classes`` put everything back. The residual add is
not rewritten: under ``torch.compile(model, backend="ircore")`` the add+norm fusion turns each
add and the norm after it into ``fused_add_rms_norm``.

Nothing here imports transformers except ``apply_to_classes`` given a model type name; the
patches work on any ``nn.Module`` with these forms.
"""

from __future__ import annotations

import inspect
import logging
import re
import sys
import types
import weakref
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from types import MethodType, ModuleType
from typing import Any, cast

import torch
from torch import nn

from ircore.integrations import _merge
from ircore.integrations._forms import (
    FUSED_MLP_ACTIVATION,
    MLP_ACTIVATION,
    NORM_FORMS,
    form_of,
    function_form,
)
from ircore.integrations._forwards import (
    experts_forward,
    experts_gate,
    fused_mlp_forward,
    gated_norm_forward,
    gelu_approximate,
    gelu_mlp_forward,
    is_silu,
    layer_norm_forward,
    mlp_forward,
    norm_forward,
    patch_of,
    rope_function,
)
from ircore.integrations._fp8 import (
    FP8_EXPERTS_LEFT,
    fp8_linear_forward,
    fp8_linear_problem,
    fp8_model,
    is_fp8_experts,
    is_fp8_linear,
)
from ircore.integrations._kernels_mapping import IrcoreRepository, IrcoreRMSNorm, kernel_mapping
from ircore.integrations._kinds import (
    fused_experts,
    is_fused_mlp,
    is_gated_mlp,
    is_gated_rmsnorm,
    is_layer_norm,
    is_rmsnorm,
    other_feed_forward,
    other_norm,
)
from ircore.integrations._model_types import modeling_module

__all__ = [
    "IrcoreRMSNorm",
    "IrcoreRepository",
    "PatchSummary",
    "apply",
    "apply_to_classes",
    "fp8_model",
    "kernel_mapping",
    "undo",
    "undo_classes",
]

_log = logging.getLogger("ircore.integrations.transformers")
_UNKNOWN_FORM = "{}.forward is not a known RMSNorm form (kept as it is)"
_UNKNOWN_GATED_FORM = (
    "{}.forward is not a known gated RMSNorm form (Mamba2's, Qwen3-Next's or Falcon-H1's): kept as it is"
)
_OWN_LAYER_NORM = (
    "{} is an nn.LayerNorm subclass with a forward of its own (not nn.LayerNorm's): kept as it is"
)


@dataclass
class PatchSummary:
    """What ``apply`` or ``apply_to_classes`` did.

    ``rms_norm``: names of the modules (or classes) now calling ``ircore.ops.rms_norm``, with
    the form their forward had in ``forms``. ``layer_norm``: ``nn.LayerNorm`` modules (or
    subclasses keeping its forward) now calling ``ircore.ops.layer_norm``. ``rms_norm_gated``:
    gated RMSNorms (``*RMSNormGated`` of the Mamba2, Qwen3-Next or Falcon-H1 form, counted in
    ``forms`` too) now calling ``ircore.ops.rms_norm_gated``. ``mlp``: MLPs now running one gate/up matmul and
    ``ircore.ops.silu_and_mul``. ``fused_mlp``: MLPs with one fused ``gate_up_proj`` now calling
    ``ircore.ops.silu_and_mul`` on its output. ``experts``: MoE experts modules (3-D weights) now
    calling ``ircore.ops.silu_and_mul`` between their two matmuls. ``fp8_linear``: transformers'
    block-wise ``FP8Linear`` modules now running ``ircore.ops.dynamic_group_quant_fp8`` and
    ``ircore.ops.block_scaled_mm_fp8`` (no Hub kernel). ``left_alone``: name -> why it
    was not patched, for every norm and (with ``mlp=True``) every feed-forward module not
    patched: an unknown norm form, a LayerNorm subclass with its own forward, experts with another
    gating (a clamped SwiGLU), a non-SiLU activation, a forward already replaced on the instance,
    ... ``own_forward``: patched norms that run their own forward, not ircore's, because their
    weight's dtype is not their input's (or a gated norm was called without a gate): found by
    ``apply`` where a norm's weight has another dtype than the model's (weights the model keeps
    in fp32), and added at the first such call otherwise (Mamba's ``norm_f`` gets the fp32
    residual).
    """

    rms_norm: list[str] = field(default_factory=list)
    layer_norm: list[str] = field(default_factory=list)
    rms_norm_gated: list[str] = field(default_factory=list)
    mlp: list[str] = field(default_factory=list)
    fused_mlp: list[str] = field(default_factory=list)
    experts: list[str] = field(default_factory=list)
    fp8_linear: list[str] = field(default_factory=list)
    left_alone: dict[str, str] = field(default_factory=dict)
    forms: Counter[str] = field(default_factory=Counter)
    own_forward: dict[str, str] = field(default_factory=dict)
    #: with ``rope=True``: attention modules whose ``apply_rotary_pos_emb`` now calls
    #: ``ircore.ops.rotary_pos_emb``, and the modeling modules whose function that is
    rope: list[str] = field(default_factory=list)
    rope_modules: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        forms = ", ".join(f"{form} {n}" for form, n in sorted(self.forms.items()) if form in NORM_FORMS)
        gated = ", ".join(f"{form} {n}" for form, n in sorted(self.forms.items()) if form not in NORM_FORMS)
        lines = [f"{len(self.rms_norm)} RMSNorm -> ircore.ops.rms_norm" + (f" ({forms})" if forms else "")]
        if self.layer_norm:
            lines.append(f"{len(self.layer_norm)} LayerNorm -> ircore.ops.layer_norm")
        if self.rms_norm_gated:
            lines.append(f"{len(self.rms_norm_gated)} gated RMSNorm -> ircore.ops.rms_norm_gated ({gated})")
        lines.append(f"{len(self.mlp)} MLP -> one gate/up matmul + ircore.ops.silu_and_mul or gelu_and_mul")
        if self.rope:
            where = ", ".join(self.rope_modules)
            lines.append(
                f"{len(self.rope)} attention -> ircore.ops.rotary_pos_emb (apply_rotary_pos_emb of {where})"
            )
        if self.fused_mlp:
            lines.append(f"{len(self.fused_mlp)} fused gate_up_proj MLP -> ircore.ops.silu_and_mul")
        if self.experts:
            lines.append(f"{len(self.experts)} MoE experts -> ircore.ops.silu_and_mul between their matmuls")
        if self.fp8_linear:
            lines.append(
                f"{len(self.fp8_linear)} FP8Linear -> ircore.ops.dynamic_group_quant_fp8 + "
                "block_scaled_mm_fp8"
            )
        own = "patched, but run their own forward"
        for title, entries in (("left alone", self.left_alone), (own, self.own_forward)):
            if entries:
                lines.append(f"{len(entries)} {title}:")
                lines += _grouped(entries)
        return "\n".join(lines)


def _grouped(entries: dict[str, str]) -> list[str]:
    """``  reason: name, name, ...`` lines; names differing only in layer numbers as one pattern."""
    by_reason: dict[str, list[str]] = {}
    for name, why in entries.items():
        pattern = re.sub(r"\.\d+\.", ".*.", name)
        names = by_reason.setdefault(why, [])
        if pattern not in names:
            names.append(pattern)
    return [f"  {', '.join(names)}: {why}" for why, names in by_reason.items()]


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
    """Why ``module`` cannot be merged, or None. Checked in this order, so each reason is true."""
    cls = type(module)
    if patch_of(vars(module).get("forward")):
        return "already applied"
    if "forward" in vars(module):
        return "its forward was already replaced on the instance (by another library or a hook)"
    form = form_of(cls, "mlp")
    if form is None:
        return f"{cls.__name__}.forward is not the gated MLP form down(act(gate(x)) * up(x))"
    if not isinstance(module._modules.get("down_proj"), nn.Linear):
        return f"{cls.__name__}: down_proj is not an nn.Linear"
    act_name = MLP_ACTIVATION[form]
    act = getattr(module, act_name, None)
    silu = isinstance(act, nn.SiLU) or (isinstance(act, nn.Module) and form_of(type(act), "silu"))
    if not silu and gelu_approximate(act) is None:
        return (
            f"{cls.__name__}: the activation {type(act).__name__} is neither SiLU nor torch's GELU (erf or "
            "tanh): ircore has no gated op for it"
        )
    why = _merge.merge_problem(module)
    if why is not None:
        if "meta device" in why:
            return "its weights are not loaded (meta tensors): apply after loading"
        return f"{cls.__name__}: {why}"
    return None


def _replaced(module: nn.Module) -> str | None:
    """Why ``module``'s forward is not its class's to replace, or None."""
    cls = type(module)
    if patch_of(cls.forward):
        return f"its class {cls.__name__} is already patched (apply_to_classes)"
    if patch_of(vars(module).get("forward")):
        return "already applied"
    if "forward" in vars(module):
        return "its forward was already replaced on the instance (by another library or a hook)"
    return None


def _layer_norm_class_problem(cls: type) -> str | None:
    """Why instances of an ``nn.LayerNorm`` class cannot call ``ircore.ops.layer_norm``, or None."""
    forward = getattr(cls, "forward", None)
    if patch_of(forward) is None and forward is not nn.LayerNorm.forward:
        return _OWN_LAYER_NORM.format(cls.__name__)
    return None


def _layer_norm_problem(module: nn.Module) -> str | None:
    """Why an ``nn.LayerNorm`` cannot call ``ircore.ops.layer_norm``, or None."""
    why = _replaced(module)
    if why is not None:
        return why
    cls = type(module)
    why = _layer_norm_class_problem(cls)
    if why is not None:
        return why
    shape = tuple(getattr(module, "normalized_shape", ()))
    if len(shape) != 1:
        return (
            f"{cls.__name__}: normalized_shape {shape} is not 1-D (ircore.ops.layer_norm normalises "
            "the last dimension only)"
        )
    if not isinstance(getattr(module, "eps", None), float):
        return f"{cls.__name__} has no float eps"
    return None


def _gated_norm_problem(module: nn.Module) -> tuple[str | None, str | None]:
    """(form, None) if a gated RMSNorm can call ``ircore.ops.rms_norm_gated``, else (None, why)."""
    why = _replaced(module)
    if why is not None:
        return None, why
    cls = type(module)
    form = form_of(cls, "gated_norm")
    if form is None:
        return None, _UNKNOWN_GATED_FORM.format(cls.__name__)
    weight = getattr(module, "weight", None)
    if not isinstance(weight, torch.Tensor) or weight.dim() != 1:
        return None, f"{cls.__name__} has no 1-D weight"
    if not isinstance(getattr(module, "variance_epsilon", None), float):
        return None, f"{cls.__name__} has no float variance_epsilon"
    if form == "qwen3_next" and getattr(module, "activation", None) != "silu":
        return None, (
            f"{cls.__name__}: the activation {getattr(module, 'activation', None)!r} is not silu "
            "(ircore.ops.rms_norm_gated gates with SiLU)"
        )
    for attr in {"mamba2": ("group_size",), "falcon_h1": ("n_groups",)}.get(form, ()):
        value = getattr(module, attr, None)
        if not (isinstance(value, int) and value > 0 and weight.shape[0] % value == 0):
            return None, f"{cls.__name__}: {attr} {value!r} does not divide the hidden size {weight.shape[0]}"
    return form, None


def _not_silu(cls: type, act: Any) -> str:
    named = isinstance(act, nn.Module) or act is None
    what = type(act).__name__ if named else getattr(act, "__name__", repr(act))
    return (
        f"{cls.__name__}: the activation {what} is not SiLU (fused gate_up_proj MLPs and MoE experts "
        "run silu_and_mul only)"
    )


def _fused_mlp_problem(module: nn.Module) -> str | None:
    """Why an MLP with one fused ``gate_up_proj`` cannot call ``silu_and_mul``, or None."""
    why = _replaced(module)
    if why is not None:
        return why
    cls = type(module)
    form = form_of(cls, "fused_mlp")
    if form is None:
        return (
            f"{cls.__name__}.forward is not the fused MLP form down(up * act(gate)) with "
            "gate, up = gate_up_proj(x).chunk(2)"
        )
    act = getattr(module, FUSED_MLP_ACTIVATION[form], None)
    return None if is_silu(act) else _not_silu(cls, act)


def _experts_problem(module: nn.Module) -> tuple[str | None, str | None]:
    """(form, None) if MoE experts in 3-D parameters can call ``silu_and_mul``, else (None, why)."""
    why = _replaced(module)
    if why is not None:
        return None, why
    cls = type(module)
    if "_apply_gate" in vars(module):
        return None, "its _apply_gate was already replaced on the instance (by another library)"
    if getattr(cls, "_apply_gate", None) is not None and form_of(cls, "gate", "_apply_gate") is None:
        return None, (
            f"{cls.__name__}._apply_gate is not act(gate) * up over [gate | up] (clamped, interleaved or "
            "another gating): apply routes it to no op"
        )
    form = form_of(cls, "experts")
    if form is None:
        return None, f"{cls.__name__}.forward is not a known experts form (kept as it is)"
    if getattr(module, "has_gate", True) is not True or getattr(module, "is_concatenated", True) is not True:
        return None, f"{cls.__name__}: its experts are not gated, or gate and up are interleaved"
    act = getattr(module, "act_fn", None)
    if not is_silu(act):
        return None, _not_silu(cls, act)
    return form, None


def _patch_experts(module: nn.Module, form: str) -> None:
    cls: Any = type(module)
    module.forward = MethodType(experts_forward(cls.forward, form), module)
    if getattr(cls, "_apply_gate", None) is not None:  # what grouped_mm & co. call between matmuls
        module.__dict__["_apply_gate"] = MethodType(experts_gate(cls._apply_gate), module)


def _model_dtype(model: nn.Module) -> torch.dtype | None:
    """The floating dtype holding most of ``model``'s parameter elements (fp8 weights of an FP8
    model left out: its activations, norms and embeddings have the dtype that matters here)."""
    sizes: Counter[torch.dtype] = Counter()
    for param in model.parameters():
        if param.is_floating_point() and param.element_size() > 1:
            sizes[param.dtype] += param.numel()
    return sizes.most_common(1)[0][0] if sizes else None


def _kept_in_fp32(model: nn.Module, name: str) -> str:
    """`` (the model keeps it in fp32: _keep_in_fp32_modules_strict)`` where that names ``name``."""
    for attr in ("_keep_in_fp32_modules_strict", "_keep_in_fp32_modules"):
        for key in getattr(model, attr, None) or ():
            if re.search(rf"(^|\.){re.escape(key)}($|\.)", name):
                return f" (the model keeps it in fp32: {attr})"
    return ""


class _OwnForwardNote:
    """Records, once, that a patched norm ran its own forward (input dtype != weight dtype, ...)."""

    def __init__(self, summary: PatchSummary, name: str) -> None:
        self.summary, self.name = summary, name

    def __call__(self, module: Any, x: torch.Tensor, why: str) -> None:
        if self.name in self.summary.own_forward:
            return
        why = f"{why}: ran its own forward, not ircore's"
        self.summary.own_forward[self.name] = why
        _log.info("ircore: %s: %s (recorded once)", self.name, why)


def _note_param_dtype(
    summary: PatchSummary, model: nn.Module, name: str, module: nn.Module, model_dtype: torch.dtype | None
) -> None:
    """List a patched norm whose weight (or bias) has another dtype than the model's in ``own_forward``."""
    params = [p for p in (getattr(module, "weight", None), getattr(module, "bias", None)) if p is not None]
    if model_dtype is None or not params:
        return
    dtype = cast(torch.Tensor, params[0]).dtype
    if dtype != model_dtype:
        summary.own_forward[name] = (
            f"weight {dtype}, the model's {model_dtype}{_kept_in_fp32(model, name)}: "
            f"{model_dtype} inputs run its own forward, not ircore's"
        )


# ---------------------------------------------------------------------- instance level
# ---------------------------------------------------------------------- rotary embedding
#: modeling module name -> (its own apply_rotary_pos_emb, the models ``apply`` routed through it)
_ROPE_ROUTES: dict[str, tuple[Any, weakref.WeakSet[nn.Module]]] = {}


def _rope_module(cls: type) -> types.ModuleType | None:
    """The modeling module whose ``apply_rotary_pos_emb`` ``cls.forward`` calls by name, or None."""
    forward: Any = getattr(cls, "forward", None)
    if forward is None:
        return None
    try:
        function = inspect.unwrap(getattr(forward, "__func__", forward))
    except ValueError:
        return None
    code = getattr(function, "__code__", None)
    if code is None or "apply_rotary_pos_emb" not in code.co_names:
        return None
    module = sys.modules.get(getattr(function, "__module__", None) or "")
    return module if module is not None and "apply_rotary_pos_emb" in vars(module) else None


def _rope_problem(modeling: types.ModuleType) -> str | None:
    """Why a modeling module's ``apply_rotary_pos_emb`` cannot call ``rotary_pos_emb``, or None."""
    where = modeling.__name__
    fn = vars(modeling)["apply_rotary_pos_emb"]
    if patch_of(fn) == "rope":
        return None
    if not isinstance(fn, types.FunctionType):
        return (
            f"{where}.apply_rotary_pos_emb is a {type(fn).__name__}, not a function (replaced by a hub "
            "kernel or another library): kept as it is"
        )
    if function_form(fn, "rope") is None:
        return (
            f"{where}.apply_rotary_pos_emb is not the standard form (q * cos + rotate_half(q) * sin, "
            "k likewise, cos/sin unsqueezed at unsqueeze_dim): kept as it is"
        )
    if function_form(vars(modeling).get("rotate_half"), "rotate_half") is None:
        return f"{where}.rotate_half is not cat((-x2, x1), dim=-1) (neox pairs): kept as it is"
    return None


def _route_rope(model: nn.Module, modeling: types.ModuleType) -> None:
    """Make ``modeling.apply_rotary_pos_emb`` call ``rotary_pos_emb`` while ``model`` is applied."""
    where = modeling.__name__
    if where not in _ROPE_ROUTES:
        own = vars(modeling)["apply_rotary_pos_emb"]
        _ROPE_ROUTES[where] = (own, weakref.WeakSet())
        modeling.apply_rotary_pos_emb = rope_function(own)  # type: ignore[attr-defined]
    _ROPE_ROUTES[where][1].add(model)


def _unroute_rope(model: nn.Module) -> int:
    """Drop ``model`` from the routes; put back each module function no applied model needs."""
    dropped = 0
    for where, (own, models) in list(_ROPE_ROUTES.items()):
        if model not in models:
            continue
        models.discard(model)
        dropped += 1
        if not models:
            modeling = sys.modules.get(where)
            if modeling is not None:
                modeling.apply_rotary_pos_emb = own  # type: ignore[attr-defined]
            del _ROPE_ROUTES[where]
    return dropped


def apply(
    model: nn.Module, *, rms_norm: bool = True, mlp: bool = False, fp8: bool = True, rope: bool = False
) -> PatchSummary:
    """Route a loaded model's norms (and, with ``mlp=True``, its gated MLPs) to ircore's ops.

    Patches instances, not classes (other models of the same class are untouched). With
    ``rms_norm=True``: RMSNorm modules (class name ending in ``RMSNorm``) whose forward has a
    known form call ``ircore.ops.rms_norm``, ``nn.LayerNorm`` modules (and subclasses keeping its
    forward) ``ircore.ops.layer_norm``, gated RMSNorms (``*RMSNormGated``) of the Mamba2,
    Qwen3-Next or Falcon-H1 form ``ircore.ops.rms_norm_gated``; a call the op would refuse (an
    input dtype other than the weight's, a gated norm without a gate) runs the module's own
    forward. With ``mlp=True``, modules with ``gate_proj``/``up_proj``/``down_proj``
    linears, a SiLU or GELU activation and the forward ``down(act(gate(x)) * up(x))`` run one matmul
    over merged gate/up weights (the two parameters become views of the merged tensor; merged
    again at the next call if they get new storage, from ``.to()`` or anything else) followed by
    ``ircore.ops.silu_and_mul`` (``ircore.ops.gelu_and_mul`` for a GELU activation: Gemma's
    ``gelu_pytorch_tanh`` is ``approximate="tanh"``); MLPs with one fused ``gate_up_proj`` (gate
    first) and MoE experts in 3-D parameters of a known form with a SiLU activation call
    ``silu_and_mul`` on their ``[gate | up]`` matmul output (no merge: nothing else changes). With
    ``fp8=True``, transformers' block-wise ``FP8Linear`` modules (``FineGrainedFP8Config``) quantize
    their input per token and group with ``ircore.ops.dynamic_group_quant_fp8`` and multiply with
    ``ircore.ops.block_scaled_mm_fp8`` (transformers' own forward needs a Hub kernel).

    With ``rope=True``, attention modules whose forward calls its modeling module's
    ``apply_rotary_pos_emb`` of the standard form (``_forms.ROPE_FORMS``; Llama, Qwen2/3, Mistral,
    Gemma 1-3 and ~110 others in transformers 5.23) call ``ircore.ops.rotary_pos_emb``. Attention
    forwards call that function by its global name, so it is replaced in the modeling module (as
    Liger-Kernel does): while a model is applied, every model of that family in the process routes
    its rotary embedding to ircore (the op computes HF's function bit for bit with its native
    implementation); ``undo`` of the last applied model puts the function back. Calls the op would
    refuse (cos/sin in another dtype, fp64) and calls under grad mode with q or k requiring grad run
    the original. Other families are in ``left_alone`` with the reason. Returns what was patched,
    and every other norm (and, with ``mlp=True``, feed-forward module; with ``fp8=True``, FP8
    linear; with ``rope=True``, attention module) with the reason it was left alone.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(
            f"ircore.integrations.transformers.apply: expected an nn.Module, got {type(model).__name__}"
        )
    summary = PatchSummary()
    model_dtype = _model_dtype(model)
    for name, module in model.named_modules():
        name = name or type(model).__name__
        modeling = _rope_module(type(module)) if rope else None
        if modeling is not None:
            why = _rope_problem(modeling)
            if why is not None:
                summary.left_alone[name] = why
            else:
                _route_rope(model, modeling)
                summary.rope.append(name)
                if modeling.__name__ not in summary.rope_modules:
                    summary.rope_modules.append(modeling.__name__)
        if rms_norm and is_rmsnorm(type(module)):
            form, why = _norm_problem(module)
            if form is None:
                summary.left_alone[name] = why or ""
                continue
            note = _OwnForwardNote(summary, name)
            module.forward = MethodType(norm_forward(type(module).forward, note), module)
            summary.rms_norm.append(name)
            summary.forms[form] += 1
            _note_param_dtype(summary, model, name, module, model_dtype)
        elif rms_norm and is_layer_norm(type(module)):
            why = _layer_norm_problem(module)
            if why is not None:
                summary.left_alone[name] = why
                continue
            note = _OwnForwardNote(summary, name)
            module.forward = MethodType(layer_norm_forward(type(module).forward, note), module)
            summary.layer_norm.append(name)
            _note_param_dtype(summary, model, name, module, model_dtype)
        elif rms_norm and is_gated_rmsnorm(type(module)):
            form, why = _gated_norm_problem(module)
            if form is None:
                summary.left_alone[name] = why or ""
                continue
            note = _OwnForwardNote(summary, name)
            module.forward = MethodType(gated_norm_forward(type(module).forward, form, note), module)
            summary.rms_norm_gated.append(name)
            summary.forms[form] += 1
            _note_param_dtype(summary, model, name, module, model_dtype)
        elif mlp and is_gated_mlp(module):
            why = _mlp_problem(module)
            if why is not None:
                summary.left_alone[name] = why
                continue
            _merge.merge(module, name)
            approximate = gelu_approximate(
                getattr(module, MLP_ACTIVATION[form_of(type(module), "mlp") or ""], None)
            )
            forward = mlp_forward if approximate is None else gelu_mlp_forward(approximate)
            module.forward = MethodType(forward, module)
            summary.mlp.append(name)
        elif mlp and is_fused_mlp(module):
            why = _fused_mlp_problem(module)
            if why is not None:
                summary.left_alone[name] = why
                continue
            module.forward = MethodType(fused_mlp_forward(type(module).forward), module)
            summary.fused_mlp.append(name)
        elif fp8 and is_fp8_experts(module):
            summary.left_alone[name] = FP8_EXPERTS_LEFT
        elif fp8 and is_fp8_linear(module):
            why = fp8_linear_problem(module)
            if why is not None:
                summary.left_alone[name] = why
                continue
            module.forward = MethodType(fp8_linear_forward, module)
            summary.fp8_linear.append(name)
        elif mlp and fused_experts(module):
            form, why = _experts_problem(module)
            if form is None:
                summary.left_alone[name] = why or ""
                continue
            _patch_experts(module, form)
            summary.experts.append(name)
        else:
            why = other_norm(type(module)) if rms_norm and not module._modules else None
            if why is None and mlp:
                why = other_feed_forward(module)
            if why is not None:
                summary.left_alone[name] = why
    _log.info("ircore.integrations.transformers.apply(%s):\n%s", type(model).__name__, summary)
    return summary


def undo(model: nn.Module) -> int:
    """Put back every module of ``model`` that ``apply`` patched; returns how many.

    Attention modules stop calling ``rotary_pos_emb`` (the modeling module's own
    ``apply_rotary_pos_emb`` comes back when no other applied model uses it). Norms, fused MLPs
    and experts get their class's forward (and experts their class's
    ``_apply_gate``) again; merged MLPs get their class's forward, and their gate and up weights
    their own storage (same values as now).
    """
    restored = 0
    if _unroute_rope(model):
        restored += sum(1 for module in model.modules() if _rope_module(type(module)) is not None)
    for module in model.modules():
        kind = patch_of(vars(module).get("forward"))
        if kind is None:
            continue
        del module.forward
        if kind == "mlp":
            _merge.split(module)
        if kind == "experts" and patch_of(vars(module).get("_apply_gate")) == "experts":
            del module.__dict__["_apply_gate"]
        restored += 1
    return restored


# ---------------------------------------------------------------------- class level
#: class -> {attribute: its own value before apply_to_classes (None: it inherited it)}
_CLASS_PATCHES: dict[type, dict[str, Any]] = {}
_FEED_FORWARD_NAME = re.compile(r"mlp|feedforward|ffn|swiglu|experts$", re.IGNORECASE)


def _feed_forward_class(cls: type) -> bool:
    return any(form_of(cls, kind) for kind in ("fused_mlp", "experts", "mlp")) or bool(
        _FEED_FORWARD_NAME.search(cls.__name__)
    )


def _classes_of(target: str | ModuleType | type, mlp: bool) -> tuple[str, list[type]]:
    """The norm (and, with ``mlp``, feed-forward) classes a target names: a model type
    (``"llama"``), a modeling module, a class."""
    if isinstance(target, type):
        return target.__qualname__, [target]
    if isinstance(target, str):
        target = modeling_module(target)
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
        and (
            is_rmsnorm(value)
            or is_gated_rmsnorm(value)
            or is_layer_norm(value)
            or other_norm(value) is not None
            or (mlp and _feed_forward_class(value))
        )
    ]
    return target.__name__, classes


def _patch_class(cls: type, patches: dict[str, Any]) -> None:
    _CLASS_PATCHES[cls] = {attr: vars(cls).get(attr) for attr in patches}
    for attr, value in patches.items():
        setattr(cls, attr, value)


def _patch_feed_forward_class(cls: Any, summary: PatchSummary, name: str) -> None:
    """Patch a fused MLP or experts class of a known form, or say in ``summary`` why not."""
    if form_of(cls, "fused_mlp"):
        _patch_class(cls, {"forward": fused_mlp_forward(cls.forward)})
        summary.fused_mlp.append(name)
        return
    if "expert" in cls.__name__.lower():
        if getattr(cls, "_apply_gate", None) is not None and form_of(cls, "gate", "_apply_gate") is None:
            summary.left_alone[name] = (
                f"{cls.__name__}._apply_gate is not act(gate) * up over [gate | up] (clamped, interleaved "
                "or another gating): apply routes it to no op"
            )
            return
        form = form_of(cls, "experts")
        if form is not None:
            patches = {"forward": experts_forward(cls.forward, form)}
            if getattr(cls, "_apply_gate", None) is not None:
                patches["_apply_gate"] = experts_gate(cls._apply_gate)
            _patch_class(cls, patches)
            summary.experts.append(name)
            return
    if form_of(cls, "mlp"):
        summary.left_alone[name] = (
            f"{cls.__name__}: merging gate_proj and up_proj needs loaded weights: apply(model, mlp=True) "
            "after loading"
        )
        return
    summary.left_alone[name] = (
        f"{cls.__name__}.forward is not a known fused MLP or experts form (kept as it is)"
    )


def apply_to_classes(*targets: str | ModuleType | type, mlp: bool = False) -> PatchSummary:
    """Route norm classes to ircore's norm ops, for models built or loaded afterwards.

    Each target is a model type as in ``config.model_type`` (``"llama"``, ``"gemma3_text"``,
    ``"internlm3"``: resolved to a modeling module as transformers' auto classes do), a modeling
    module, or a class. RMSNorm and gated RMSNorm classes whose forward has a known form, and
    ``nn.LayerNorm`` subclasses that keep its forward, get ircore's forward (every instance,
    existing ones included; a call the op cannot take runs the class's own forward); the other
    norm classes defined there are listed in ``left_alone`` with the reason. With ``mlp=True``,
    MLP classes with one fused ``gate_up_proj`` and MoE experts classes of a known form call
    ``ircore.ops.silu_and_mul``
    (instances whose activation is not SiLU run their own forward); the other feed-forward
    classes are listed in ``left_alone``. The gate/up merge of MLPs with separate ``gate_proj``
    and ``up_proj`` needs loaded weights: use ``apply(model, rms_norm=False, mlp=True)`` after
    loading for that. ``undo_classes()`` reverts.
    """
    if not targets:
        raise TypeError(
            "ircore.integrations.transformers.apply_to_classes: name at least one model type or class"
        )
    summary = PatchSummary()
    for target in targets:
        where, classes = _classes_of(target, mlp)
        if not any(is_rmsnorm(cls) or is_gated_rmsnorm(cls) for cls in classes) and not (mlp and classes):
            summary.left_alone[where] = "no RMSNorm class defined there"
        for cls in classes:
            name = f"{cls.__module__}.{cls.__qualname__}"
            if cls in _CLASS_PATCHES:
                continue  # applied before: nothing to do
            if is_layer_norm(cls):
                why = _layer_norm_class_problem(cls)
                if why is not None:
                    summary.left_alone[name] = why
                    continue
                _patch_class(cls, {"forward": layer_norm_forward(nn.LayerNorm.forward)})
                summary.layer_norm.append(name)
                continue
            if is_gated_rmsnorm(cls):
                gated = form_of(cls, "gated_norm")
                if gated is None:
                    summary.left_alone[name] = _UNKNOWN_GATED_FORM.format(cls.__name__)
                    continue
                _patch_class(cls, {"forward": gated_norm_forward(getattr(cls, "forward"), gated)})  # noqa: B009
                summary.rms_norm_gated.append(name)
                summary.forms[gated] += 1
                continue
            if not is_rmsnorm(cls):
                if other_norm(cls) is not None:
                    summary.left_alone[name] = other_norm(cls) or ""
                else:
                    _patch_feed_forward_class(cls, summary, name)
                continue
            form = form_of(cls, "norm")
            if form is None:
                summary.left_alone[name] = _UNKNOWN_FORM.format(cls.__name__)
                continue
            _patch_class(cls, {"forward": norm_forward(getattr(cls, "forward"))})  # noqa: B009
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
        for attr, own in _CLASS_PATCHES.pop(cls).items():
            if own is None:
                delattr(cls, attr)
            else:
                setattr(cls, attr, own)
        restored += 1
    return restored
