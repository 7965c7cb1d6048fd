"""STAND-IN for AMD's AITER (``import aiter``), for ircore's CPU tests; not AITER.

It exposes what ircore's ``aiter`` provider calls, with AITER's call forms and structure: each
function is a ``(*args, **kwargs)`` wrapper around a torch op ``torch.ops.aiter.<name>`` whose
schema is inferred from the Python declaration with every tensor marked mutable (AITER's
``torch_compile_guard``), so the parameters are readable only from the op. The kernels compute
on the CPU but address memory the way AITER's do, so a marshalling mistake gives wrong numbers
or an error here as it would on the GPU:

- norms: ``n = size(-1)``, ``m = numel // n``, rows at ``stride(0)`` of each tensor, unit last
  stride assumed (a 3-D contiguous input is read with its batch stride as the row stride);
  fp16/bf16 only; the weight read as ``n`` contiguous elements of x's dtype whatever its dtype;
- silu_and_mul: contiguous rows of ``2d`` in, ``d`` out, vector width ``min(8, next_pow2(d // 64))``
  (a ``d`` that is not a multiple writes past the row), 16-byte aligned loads;
- a launch with no rows fails, as an empty grid does on HIP.

``IRCORE_STANDIN_AITER_FORM`` picks the release modelled: ``0.1.7`` (default), ``head``
(AITER's head after 0.1.7: ``gemma_norm`` 7th parameter of rmsnorm2d_fwd_with_add, ``limit`` of silu_and_mul) or
``changed`` (a hypothetical release that swapped ``weight`` and ``epsilon``, which ircore must
refuse). ``CALLS`` counts kernel launches per function.
"""

import os
from collections import Counter

import torch
from torch import Tensor

if os.environ.get("IRCORE_FIXTURE_IMPORT_LOG"):
    with open(os.environ["IRCORE_FIXTURE_IMPORT_LOG"], "a") as _log:
        _log.write(__name__ + "\n")

FORM = os.environ.get("IRCORE_STANDIN_AITER_FORM", "0.1.7")
CALLS: Counter = Counter()
_HALF = (torch.float16, torch.bfloat16)
_LIB = torch.library.Library("aiter", "FRAGMENT")


def _launch(name: str, rows: int) -> None:
    if rows == 0:
        raise RuntimeError(f"stand-in aiter.{name}: launch with an empty grid (HIP: invalid configuration)")
    CALLS[name] += 1


def _rows(t: Tensor) -> Tensor:
    """The (m, n) rows an AITER norm kernel reads or writes: row stride = stride(0), unit last."""
    n = t.shape[-1]
    return t.as_strided((t.numel() // n, n), (t.stride(0), 1))


def _check_half(name: str, t: Tensor) -> None:
    if t.dtype not in _HALF:
        raise RuntimeError(f"stand-in aiter.{name}: ck rmsnorm2d only support fp16 and bf16 data type")


def _weight_as(weight: Tensor, x: Tensor, n: int) -> Tensor:
    """n contiguous elements of x's dtype from weight's data (one dtype for x, weight and out)."""
    raw = weight.as_strided((weight.numel(),), (1,)).view(torch.uint8)
    return raw.view(x.dtype)[:n]


def _norm(rows: Tensor, weight: Tensor, epsilon: float, gemma: bool) -> Tensor:
    xf = rows.float()
    w = weight.float() + 1.0 if gemma else weight.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + epsilon) * w).to(rows.dtype)


def _check_epsilon(name: str, epsilon: object) -> None:
    if not isinstance(epsilon, float):  # AITER type-checks the first call against its annotations
        raise TypeError(f"{name}: epsilon needs to be <class 'float'> but got {type(epsilon)}")


# ---------------------------------------------------------------------- kernels (CPU)
def _rms_norm_kernel(input: Tensor, weight: Tensor, epsilon: float, use_model_sensitive_rmsnorm: int = 0) -> Tensor:
    _check_half("rms_norm", input)
    rows = _rows(input)
    _launch("rms_norm", rows.shape[0])
    out = torch.empty_like(input, memory_format=torch.contiguous_format)
    _rows(out).copy_(_norm(rows, _weight_as(weight, input, rows.shape[1]), epsilon, False))
    return out


def _with_add_kernel(out, input, residual_in, residual_out, weight, epsilon, gemma_norm=False) -> None:
    _check_half("rmsnorm2d_fwd_with_add", input)
    x, r = _rows(input), _rows(residual_in)
    _launch("rmsnorm2d_fwd_with_add", x.shape[0])
    total = x.float() + r.float()
    _rows(residual_out).copy_(total.to(input.dtype))
    w = _weight_as(weight, input, x.shape[1])
    _rows(out).copy_(_norm(total.to(input.dtype), w, epsilon, bool(gemma_norm)))


def _next_pow2(v: int) -> int:
    return 1 if v <= 1 else 1 << (v - 1).bit_length()


def _silu_and_mul_kernel(out: Tensor, input: Tensor, limit: float = 0.0) -> None:
    if input.dtype not in _HALF:
        raise RuntimeError(f"stand-in aiter.silu_and_mul: not implemented for '{input.dtype}'")
    d = input.shape[-1] // 2
    tokens = input.numel() // (2 * d)
    _launch("silu_and_mul", tokens)
    vec = min(8, _next_pow2(d // 64))
    if d % vec:
        raise RuntimeError(f"stand-in aiter.silu_and_mul: d={d} is not a multiple of the {vec}-wide stores")
    if input.data_ptr() % 16 or out.data_ptr() % 16:
        raise RuntimeError("stand-in aiter.silu_and_mul: misaligned 16-byte vector access")
    rows = input.as_strided((tokens, 2 * d), (2 * d, 1))
    xf = rows.float()
    y = torch.nn.functional.silu(xf[:, :d]) * xf[:, d:]
    out.as_strided((tokens, d), (d, 1)).copy_(y.to(out.dtype))


# ---------------------------------------------------------------------- declarations per release
def rms_norm(input: Tensor, weight: Tensor, epsilon: float, use_model_sensitive_rmsnorm: int = 0) -> Tensor: ...


if FORM == "head":

    def rmsnorm2d_fwd_with_add(
        out: Tensor,
        input: Tensor,
        residual_in: Tensor,
        residual_out: Tensor,
        weight: Tensor,
        epsilon: float,
        gemma_norm: bool = False,
        use_model_sensitive_rmsnorm: int = 0,
    ) -> None: ...

    def silu_and_mul(out: Tensor, input: Tensor, limit: float = 0.0) -> None: ...

    def _with_add(out, input, residual_in, residual_out, weight, epsilon, gemma_norm=False, msr=0):
        _with_add_kernel(out, input, residual_in, residual_out, weight, epsilon, gemma_norm)

elif FORM == "changed":

    def rmsnorm2d_fwd_with_add(
        out: Tensor, input: Tensor, residual_in: Tensor, residual_out: Tensor, epsilon: float, weight: Tensor
    ) -> None: ...

    def silu_and_mul(out: Tensor, input: Tensor) -> None: ...

    def _with_add(out, input, residual_in, residual_out, epsilon, weight):
        _with_add_kernel(out, input, residual_in, residual_out, weight, epsilon)

else:

    def rmsnorm2d_fwd_with_add(
        out: Tensor,
        input: Tensor,
        residual_in: Tensor,
        residual_out: Tensor,
        weight: Tensor,
        epsilon: float,
        use_model_sensitive_rmsnorm: int = 0,
    ) -> None: ...

    def silu_and_mul(out: Tensor, input: Tensor) -> None: ...

    def _with_add(out, input, residual_in, residual_out, weight, epsilon, msr=0):
        _with_add_kernel(out, input, residual_in, residual_out, weight, epsilon)


def _guard(declaration, kernel, epsilon_at=None):
    """AITER's torch_compile_guard: a torch op aiter::<name>, and a (*args, **kwargs) caller."""
    name = declaration.__name__
    _LIB.define(name + torch.library.infer_schema(declaration, mutates_args="unknown"))
    for key in ("CPU", "CUDA"):
        _LIB.impl(name, kernel, key)
    op = getattr(torch.ops.aiter, name)

    def wrapper_custom(*args, **kwargs):
        if epsilon_at is not None and len(args) > epsilon_at:
            _check_epsilon(name, args[epsilon_at])
        return op(*args, **kwargs)

    return wrapper_custom


rms_norm = _guard(rms_norm, _rms_norm_kernel, epsilon_at=2)
rmsnorm2d_fwd_with_add = _guard(rmsnorm2d_fwd_with_add, _with_add, epsilon_at=5 if FORM != "changed" else 4)
silu_and_mul = _guard(silu_and_mul, _silu_and_mul_kernel)
