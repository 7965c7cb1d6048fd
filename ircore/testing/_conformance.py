"""The conformance kit: does a provider compute its ops' semantics on every input it accepts?

``check_provider("vllm_c", device="cuda")`` runs each of the provider's implementations on the
op's sample inputs (odd sizes, ``weight=None``, ``variance_size``, non-contiguous rows, every
dtype), wherever its ``supports_args`` accepts them, and checks: ``supports_args`` returns a plain
bool and does not raise; dispatch picks the provider; the result is within the op's tolerance
of the fp64 reference; a functional call leaves every input unchanged; an in-place
implementation writes its outputs into the op's ``inplace_args`` and returns them; and (in
:func:`check_provider`, once per op) that a call needing grad runs native and is
differentiable (ircore's rule, whatever the provider).

One :class:`Case` is one implementation on one sample (device, dtype, seed, sample). The same
case runner serves :func:`check_provider` (first failure raises), ``ircore verify`` (a table of
every case) and the pytest plugin (one test item per case).
"""

from __future__ import annotations

import unittest
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch._prims_common import make_contiguous_strides_for

from ircore import _signature, _torch_ops, dispatch
from ircore.errors import CONTAINED, IrcoreError, ProviderError
from ircore.op import Impl, IrOp, all_ops, get_op
from ircore.providers._discovery import ENTRY_POINT_GROUP
from ircore.providers._manager import MANAGER
from ircore.providers._records import ProviderState
from ircore.testing._compare import compare_to_reference
from ircore.testing._invariance import BATCH_SIZES, check_invariance

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
PASSED, FAILED, DECLINED = "passed", "failed", "declined"


def present_devices() -> list[str]:
    """``cpu`` and, on a GPU machine, its device type (``cuda`` for NVIDIA and ROCm, ``xpu``)."""
    from ircore.platform import current_platform

    plat = current_platform()
    return ["cpu", plat.device_type] if plat.is_gpu else ["cpu"]


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


@dataclass(frozen=True)
class Case:
    """One implementation on one sample input: enough to regenerate the sample and run it."""

    provider: str
    op: str
    device: str
    dtype: torch.dtype
    seed: int
    index: int  # position in op.sample_inputs(dtype, device, seed)
    label: str

    def __str__(self) -> str:
        where = f"{self.device} {dtype_name(self.dtype)} seed={self.seed}"
        return f"{self.provider}.{self.op} [{self.label}] {where}"

    @property
    def test_id(self) -> str:
        """A short test name: ``rms_norm[cpu-float32-seed0-5x256 variance_size=96]``."""
        return f"{self.op}[{self.device}-{dtype_name(self.dtype)}-seed{self.seed}-{self.label}]"

    def args(self) -> tuple[Any, ...]:
        """The sample's arguments, generated again (samples are deterministic per seed)."""
        op = get_op(self.op)
        assert op.sample_inputs is not None
        for i, sample in enumerate(op.sample_inputs(self.dtype, self.device, self.seed)):
            if i == self.index:
                return sample.args
        raise LookupError(f"{self}: op {self.op!r} no longer yields sample {self.index}")

    def check(self) -> CaseResult:
        """Run the case as a test: raise ``AssertionError`` naming it if it fails; skip (with
        ``unittest.SkipTest``, which pytest reports as a skip) if ``supports_args`` declines it."""
        result = run_case(self)
        if result.status == FAILED:
            raise AssertionError(result.message)
        if result.status == DECLINED:
            raise unittest.SkipTest(result.message)
        return result


@dataclass(frozen=True)
class CaseResult:
    """What became of a case: passed, failed or declined (by ``supports_args``), and why."""

    case: Case
    status: str
    message: str = ""
    # the largest |out - ref| / (atol + rtol*|ref|) seen; None when nothing was compared
    worst: float | None = None


@dataclass
class ConformanceReport:
    """How many samples each op was checked on, and which it declined (``supports_args``)."""

    provider: str
    checked: dict[str, int] = field(default_factory=dict)
    declined: dict[str, list[str]] = field(default_factory=dict)
    #: op -> samples whose batch-invariance claim was checked (ops without a claim: absent)
    invariant: dict[str, int] = field(default_factory=dict)

    def __str__(self) -> str:
        parts = [
            f"{op}: {n} checked, {len(self.declined.get(op, []))} declined" for op, n in self.checked.items()
        ]
        return f"provider {self.provider!r}: " + "; ".join(parts)


def iter_cases(
    provider: str,
    *,
    devices: Sequence[str] = ("cpu",),
    dtypes: Sequence[torch.dtype] = DTYPES,
    seeds: Iterable[int] = (0, 1),
    ops: Sequence[str] | None = None,
) -> Iterator[tuple[Case, tuple[Any, ...]]]:
    """Every case of ``provider``'s registered implementations, with its sample's arguments."""
    dispatch.ensure_loaded()
    seeds = tuple(seeds)
    for name, op in sorted(all_ops().items()):
        if provider not in op.impls or (ops is not None and name not in ops) or op.sample_inputs is None:
            continue
        for device in devices:
            for dtype in dtypes:
                for seed in seeds:
                    for index, sample in enumerate(op.sample_inputs(dtype, device, seed)):
                        yield Case(provider, name, device, dtype, seed, index, sample.label), sample.args


def _same_layout_clone(t: torch.Tensor) -> torch.Tensor:
    out = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device)
    return out.copy_(t)


def _clone_args(args: tuple) -> tuple:
    return tuple(_same_layout_clone(a) if isinstance(a, torch.Tensor) else a for a in args)


def raised(exc: BaseException) -> str:
    """``raised RuntimeError: message``: what a case says of provider code that raised ``exc``
    (one of :data:`ircore.errors.CONTAINED`; anything else, ``KeyboardInterrupt`` say, stops the run).
    A kernel's ``SystemExit`` reaches here as the :class:`~ircore.errors.ProviderError` dispatch made
    of it: the kernel's own exception is named."""
    if isinstance(exc, ProviderError) and isinstance(exc.__cause__, (SystemExit, GeneratorExit)):
        exc = exc.__cause__
    text = f"raised {type(exc).__name__}" + (f": {exc}" if str(exc) else "")
    if not isinstance(exc, Exception):
        text += (
            f" (provider code must raise an Exception: {type(exc).__name__} would end the caller's "
            f"{'process' if isinstance(exc, SystemExit) else 'generator'})"
        )
    return text


def _predicate_problem(impl: Impl, args: tuple) -> tuple[bool, str | None]:
    """``supports_args``' verdict, or why the predicate itself is at fault."""
    if impl.supports_args is None:
        return True, None
    try:
        verdict = impl.supports_args(*args)
    except CONTAINED as exc:
        return False, f"supports_args {raised(exc)} (it must return True or False)"
    if type(verdict) is not bool:
        kind = type(verdict)
        kind_name = (
            kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
        )
        return False, (
            f"supports_args returned {verdict!r} of type {kind_name}; it must return a plain bool "
            "(wrap the expression in bool(...))"
        )
    return verdict, None


def _inplace_problem(op: IrOp, impl: Impl, args: tuple, where: str) -> tuple[float, str | None]:
    work = _clone_args(args)
    returned = impl.run(*work)
    outs = returned if isinstance(returned, tuple) else (returned,)
    comparison = compare_to_reference(op, returned, args, where=where + " (in place)")
    if comparison.problem is not None:
        return comparison.worst, comparison.problem
    for name, out in zip(op.inplace_args, outs):
        target = work[op.param_names.index(name)]
        if not (out.data_ptr() == target.data_ptr() or torch.equal(out, target)):
            return comparison.worst, (
                f"{where}: in-place implementation returned a tensor that is not its argument {name!r} "
                "and does not hold the same values"
            )
    return comparison.worst, None


def _fake_problem(op: IrOp, impl: Impl, args: tuple, out: Any) -> str | None:
    """What ``torch.compile`` would trip over in the op graphs hold for ``impl``, or None.

    That op (``ircore._torch_ops.impl_op``) is run on fake copies of ``args``, as the compile-time
    lowering runs it: its fake must not raise, and a functional one must say what the kernel
    returned (shape, dtype, strides), or a compiled graph fails (Inductor checks the layout of
    each output against the fake's) or reads it wrongly.
    """
    from torch._subclasses.fake_tensor import FakeTensorMode

    target = _torch_ops.impl_op(op, impl)
    name = getattr(target, "_name", repr(target)).replace("::", ".")
    try:
        with FakeTensorMode() as mode:
            fake_args = tuple(mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args)
            fake_out = target(*fake_args)
    except CONTAINED as exc:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return (
            f"torch.ops.{name} (what compiled graphs hold for it) fails on fake tensors: "
            f"{type(exc).__name__}: {message}; torch.compile would fail (or, with backend='ircore', "
            "lower this call to the next implementation); give ImplSpec(fake=...) or fix its fake"
        )
    if fake_out is None:  # an in-place op: its outputs are its arguments
        return None
    reals = out if isinstance(out, tuple) else (out,)
    fakes = fake_out if isinstance(fake_out, tuple) else (fake_out,)
    for i, (real, fake) in enumerate(zip(reals, fakes)):
        got = (tuple(real.shape), real.dtype, real.stride())
        said = (tuple(fake.shape), fake.dtype, fake.stride())
        if got[:2] != said[:2] or not _torch_ops.same_strides(got[0], got[2], said[2]):
            if _torch_ops.same_strides(said[0], said[2], make_contiguous_strides_for(said[0])):
                fix = (
                    "return contiguous outputs (what the core's op declares), or give ImplSpec(fake=...) "
                    "that says what the kernel returns"
                )
            else:  # a layout of the op's own (column-major group scales): the contract, not a choice
                fix = f"return output {i} in that layout, strides {said[2]} (the op's: its native's)"
            return (
                f"output {i} is {got[1]} of shape {got[0]}, strides {got[2]}, but torch.ops.{name} "
                f"(what compiled graphs hold for it) says {said[1]} of shape {said[0]}, strides {said[2]}: "
                f"a compiled graph would fail or misread it; {fix}"
            )
    return None


def _layout_problem(op: IrOp, args: tuple, out: Any) -> str | None:
    """For an op with fp8 outputs (``quantized_outputs``): a scale (or other non-fp8 output) that
    native returns in a layout of its own (``_torch_ops.contract_layout``: column-major group
    scales, with their TMA-aligned stride) must come back in that layout, which its readers
    (cuBLASLt, DeepGEMM) depend on. The fp8 values' own layout is free."""
    if op.quantized_outputs is None:
        return None
    native_out = _torch_ops.fake_outputs(op, args)  # the op's own fake: native on fake tensors
    reals = out if isinstance(out, tuple) else (out,)
    natives = native_out if isinstance(native_out, tuple) else (native_out,)
    for i, (real, native) in enumerate(zip(reals, natives)):
        if not _torch_ops.contract_layout(native):
            continue
        if _torch_ops.same_strides(native.shape, real.stride(), native.stride()):
            continue
        return (
            f"output {op.name}[{i}] has strides {real.stride()} where the op returns {native.stride()} "
            f"(shape {tuple(native.shape)}: a layout of the op's contract, such as column-major group "
            "scales, which their readers depend on); return that layout (the fake ircore builds "
            "declares it: a fake=, if you give one, must declare it too)"
        )
    return None


def _signature_variants(op: IrOp, args: tuple) -> Iterator[tuple[str, tuple]]:
    """Arguments with the call signature of ``args`` but other values: other row counts (every
    tensor with the first tensor's shape sliced or repeated alike along dimension 0), and every
    float argument scaled. ``(what differs, arguments)``."""
    first = next((a for a in args if isinstance(a, torch.Tensor)), None)
    if first is not None and first.dim() >= 2 and first.shape[0] >= 1:
        shape = first.shape

        def rows(fn: Any) -> tuple:
            return tuple(fn(a) if isinstance(a, torch.Tensor) and a.shape == shape else a for a in args)

        yield "the number of rows", rows(lambda t: t[:1])
        yield "the number of rows", rows(lambda t: torch.cat([t, t]) if t.is_contiguous() else t)
    floats = [i for i, a in enumerate(args) if isinstance(a, float)]
    if floats:
        yield (
            "the value of a float argument",
            tuple(a * 10 + 1e-3 if i in floats else a for i, a in enumerate(args)),
        )


def _cache_claim_problem(op: IrOp, impl: Impl, args: tuple, verdict: bool) -> str | None:
    """A ``cache_by_signature`` claim that does not hold: ``supports_args`` answers differently
    for arguments of the same call signature (ircore would reuse the first answer for both)."""
    if not impl.cache_by_signature or impl.supports_args is None or op.signature_spec is None:
        return None
    if _signature.signature is None:  # no compiled helper: no signatures to compare
        return None
    key = _signature.signature(op.signature_spec, *args)
    for what, variant in _signature_variants(op, args):
        if _signature.signature(op.signature_spec, *variant) != key:
            continue
        try:
            answer = bool(impl.supports_args(*variant))
        except CONTAINED:
            continue  # reported as its own failure where it matters
        if answer != verdict:
            return (
                f"supports_args answers {verdict} here and {answer} for the same call signature with "
                f"another {what.removeprefix('the ')}; it is registered with cache_by_signature=True, so "
                "ircore would reuse one answer for both (and explain, the lowering and the eager call "
                "would disagree): read only what the call signature holds, or drop the claim"
            )
    return None


def run_case(case: Case, args: tuple[Any, ...] | None = None) -> CaseResult:
    """Run one case through dispatch (priority forced to its provider) and judge the result."""
    dispatch.ensure_loaded()  # the providers (a simulated_platform block may have reloaded them)
    op = get_op(case.op)
    impl = op.impls.get(case.provider)
    where = str(case)
    if impl is None:
        return CaseResult(
            case, FAILED, f"{where}: provider {case.provider!r} has no implementation of {op.name}"
        )
    args = case.args() if args is None else args
    accepted, problem = _predicate_problem(impl, args)
    problem = problem or _cache_claim_problem(op, impl, args, accepted)
    if problem is not None:
        return CaseResult(case, FAILED, f"{where}: {problem}")
    if not accepted:
        return CaseResult(case, DECLINED, f"{where}: supports_args declined it")
    before = _clone_args(args)
    try:
        with dispatch.priority(**{op.name: [case.provider]}):
            chosen = op.explain(*args).chosen
            if chosen != case.provider:
                return CaseResult(case, FAILED, f"{where}: dispatch chose {chosen}, not {case.provider}")
            out = op(*args)
        for i, (a, b) in enumerate(zip(args, before)):
            if isinstance(a, torch.Tensor) and not torch.equal(a, b):
                return CaseResult(
                    case, FAILED, f"{where}: the functional call changed argument {op.param_names[i]!r}"
                )
        comparison = compare_to_reference(op, out, args, where=where)
        worst, problem = comparison.worst, comparison.problem
        if problem is None and impl.inplace:
            inplace_worst, problem = _inplace_problem(op, impl, args, where)
            worst = max(worst, inplace_worst)
        if problem is None:
            fake_problem = _fake_problem(op, impl, args, out) or _layout_problem(op, args, out)
            problem = f"{where}: {fake_problem}" if fake_problem else None
    except CONTAINED as exc:  # KeyboardInterrupt (and the like) stops the run
        return CaseResult(case, FAILED, f"{where}: {raised(exc)}")
    return CaseResult(case, FAILED if problem else PASSED, problem or "", worst)


def _grad_probe(args: tuple) -> int | None:
    """The argument a gradient is asked of: the first tensor of a differentiable dtype (floating
    point, wider than a byte: not integer positions, not fp8 operands, whose grads torch cannot
    check), if it has elements."""
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor) and a.is_floating_point() and a.element_size() > 1:
            return i if a.numel() else None
    return None


#: The upstream gradient of the gradient probe (on the output cast to fp32): small enough that no
#: op's gradient overflows fp16 (an fp8 output's 1/scale, up to 448 * 512, times it is 3.5).
_UPSTREAM_GRAD = 2.0**-16


def _check_differentiable_call(op: IrOp, provider: str, args: tuple, where: str) -> None:
    """With ``provider`` first and the probe argument (:func:`_grad_probe`) requiring grad (grad
    mode on), native runs: gradients flow."""
    i = _grad_probe(args)
    if i is None:
        return
    leaf = args[i].detach().clone().requires_grad_()
    call_args = (*args[:i], leaf, *args[i + 1 :])
    with dispatch.priority(**{op.name: [provider]}), torch.enable_grad():
        chosen = op.explain(*call_args).chosen
        assert chosen == "native", f"{where}: a call that needs grad chose {chosen}, not native"
        out = op(*call_args)
        # a small upstream gradient: an fp8 output's gradient is 1/scale (448 * 512 at the scale
        # floor), which overflows fp16 under an upstream gradient of one
        ((out[0] if isinstance(out, tuple) else out).float() * _UPSTREAM_GRAD).sum().backward()
    assert leaf.grad is not None and bool(torch.isfinite(leaf.grad).all()), f"{where}: no gradient"


def check_provider(
    provider: str,
    *,
    device: str = "cpu",
    dtypes: Sequence[torch.dtype] = DTYPES,
    seeds: Iterable[int] = (0, 1),
    ops: Sequence[str] | None = None,
    batch_sizes: Sequence[int] | None = BATCH_SIZES,
    invariance_samples: int | None = 1,
) -> ConformanceReport:
    """Check every implementation ``provider`` registered; raise ``AssertionError`` on the first miss.

    Every batch-invariance claim too (``ircore.testing.check_invariance``): the row alone against
    the row at the start, middle and end of batches of ``batch_sizes`` rows (None: not checked),
    contiguous and strided, on up to ``invariance_samples`` distinct samples per op and dtype.
    """
    report = ConformanceReport(provider)
    if batch_sizes is not None:
        report.invariant = check_invariance(
            provider, device=device, dtypes=dtypes, ops=ops, sizes=batch_sizes, max_samples=invariance_samples
        )
    for case, args in iter_cases(provider, devices=(device,), dtypes=dtypes, seeds=seeds, ops=ops):
        report.checked.setdefault(case.op, 0)
        result = run_case(case, args)
        if result.status == FAILED:
            raise AssertionError(result.message)
        if result.status == DECLINED:
            report.declined.setdefault(case.op, []).append(str(case))
            continue
        if not report.checked[case.op] and _grad_probe(args) is not None:
            _check_differentiable_call(get_op(case.op), provider, args, str(case))
        report.checked[case.op] += 1
    return report


def select_providers(requested: Sequence[str] | None) -> tuple[list[str], list[dict[str, str]]]:
    """The active providers to verify (all, or those named), and the others with their state.

    A named provider that is unknown or not active is a usage error naming its state and reason.
    """
    MANAGER.ensure_loaded()
    records = {record.name: record for record in MANAGER.current_records()}
    for name in requested or ():
        if name not in records:
            raise IrcoreError(
                f"unknown provider {name!r}: no installed distribution has an entry point named {name!r} "
                f"in the group {ENTRY_POINT_GROUP!r}, where ircore finds providers; installed providers: "
                f"{sorted(records) or 'none'}"
            )
        record = records[name]
        if record.state is not ProviderState.ACTIVE:
            raise IrcoreError(
                f"provider {name!r} is {record.state}: {record.reason}; nothing to verify "
                "(`ircore list` shows every provider)"
            )
    names = sorted(requested or records)
    active = [n for n in names if records[n].state is ProviderState.ACTIVE]
    others = [
        {"name": n, "state": records[n].state.value, "reason": records[n].reason}
        for n in names
        if records[n].state is not ProviderState.ACTIVE
    ]
    return active, others
