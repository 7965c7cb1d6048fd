"""The conformance kit: does a provider compute its ops' semantics on every input it accepts?

``check_provider("vllm_c", device="cuda")`` runs each of the provider's implementations on the
op's sample inputs (odd sizes, ``weight=None``, ``variance_size``, non-contiguous rows, every
dtype), wherever its ``supports_args`` accepts them, and checks: the result is within the op's
tolerance of the fp64 reference; a functional call leaves every input unchanged; an in-place
implementation writes its outputs into the op's ``inplace_args`` and returns them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import torch

from ircore import dispatch
from ircore.op import Impl, IrOp, all_ops
from ircore.testing._compare import assert_close_to_reference

DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@dataclass
class ConformanceReport:
    """How many samples each op was checked on, and which it declined (``supports_args``)."""

    provider: str
    checked: dict[str, int] = field(default_factory=dict)
    declined: dict[str, list[str]] = field(default_factory=dict)

    def __str__(self) -> str:
        parts = [
            f"{op}: {n} checked, {len(self.declined.get(op, []))} declined"
            for op, n in self.checked.items()
        ]
        return f"provider {self.provider!r}: " + "; ".join(parts)


def _clone_args(args: tuple) -> tuple:
    return tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)


def _same_layout_clone(t: torch.Tensor) -> torch.Tensor:
    out = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device)
    return out.copy_(t)


def _check_inplace(op: IrOp, impl: Impl, args: tuple, where: str) -> None:
    work = tuple(_same_layout_clone(a) if isinstance(a, torch.Tensor) else a for a in args)
    returned = impl.fn(*work)
    outs = returned if isinstance(returned, tuple) else (returned,)
    assert_close_to_reference(op, returned, args, label=where + " (in place)")
    for name, out in zip(op.inplace_args, outs):
        target = work[op.param_names.index(name)]
        assert out.data_ptr() == target.data_ptr() or torch.equal(out, target), (
            f"{where}: in-place implementation returned a tensor that is not its argument {name!r} "
            "and does not hold the same values"
        )


def check_provider(
    provider: str,
    *,
    device: str = "cpu",
    dtypes: Sequence[torch.dtype] = DTYPES,
    seeds: Iterable[int] = (0, 1),
    ops: Sequence[str] | None = None,
) -> ConformanceReport:
    """Check every implementation ``provider`` registered; raise ``AssertionError`` on the first miss."""
    dispatch.ensure_loaded()
    report = ConformanceReport(provider)
    for name, op in sorted(all_ops().items()):
        impl = op.impls.get(provider)
        if impl is None or (ops is not None and name not in ops) or op.sample_inputs is None:
            continue
        report.checked[name] = 0
        for dtype in dtypes:
            for seed in seeds:
                for sample in op.sample_inputs(dtype, device, seed):
                    args = sample.args
                    where = f"{provider}.{name} [{sample.label}] {dtype} seed={seed}"
                    if impl.supports_args is not None and not impl.supports_args(*args):
                        report.declined.setdefault(name, []).append(where)
                        continue
                    before = _clone_args(args)
                    with dispatch.priority(**{name: [provider]}):
                        chosen = op.explain(*args).chosen
                        assert chosen == provider, f"{where}: dispatch chose {chosen}, not {provider}"
                        out = op(*args)
                    for i, (a, b) in enumerate(zip(args, before)):
                        if isinstance(a, torch.Tensor):
                            assert torch.equal(a, b), (
                                f"{where}: the functional call changed argument {op.param_names[i]!r}"
                            )
                    assert_close_to_reference(op, out, args, label=where)
                    if impl.inplace:
                        _check_inplace(op, impl, args, where)
                    report.checked[name] += 1
    return report
