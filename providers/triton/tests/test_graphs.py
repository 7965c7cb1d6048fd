"""What graphs hold for this provider: the ops the core builds from its functions.

The provider defines no torch op of its own. For each implementation the core defines
``torch.ops.ircore_triton.<op>`` (the op's schema; for the in-place ``fused_add_rms_norm`` the
op's in-place schema), whose kernel calls the function on real tensors. Traces record
``torch.ops.ircore.<op>``; the ``ircore`` backend lowers each such node to the provider's op. These
tests check that the installed provider (loaded through its entry point; under Triton's CPU
interpreter on a machine without a GPU) fits that: the ops' schemas and fakes agree with the
kernels, compiled graphs call one provider op per call, and the kernels only ever see real tensors.
"""

import pytest
import torch
from _ref import assert_close, assert_residual, rms_norm_ref, silu_and_mul_ref
from conftest import GPU
from ircore_triton import kernels

import ircore

DEVICE = GPU or "cpu"
EPS = 1e-6


def _randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, device=DEVICE)


def _weight(n: int) -> torch.Tensor:
    return 1.0 + 0.5 * torch.randn(n, device=DEVICE)


@pytest.fixture
def kernel_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, type]]:
    """Every call of the launchers the implementations call: (launcher, type of its first argument)."""
    calls: list[tuple[str, type]] = []
    for name in ("rms_norm", "fused_add_rms_norm_", "silu_and_mul"):
        launcher = getattr(kernels, name)

        def record(*args, _launcher=launcher, _name=name, **kwargs):
            calls.append((_name, type(args[0])))
            return _launcher(*args, **kwargs)

        monkeypatch.setattr(kernels, name, record)
    return calls


@pytest.mark.usefixtures("triton_first")
def test_the_core_builds_one_op_per_implementation() -> None:
    """``torch.ops.ircore_triton.<op>``: the op's schema, and for the in-place implementation the
    in-place schema (x and x_residual written, nothing returned); the old names are gone."""
    ns = torch.ops.ircore_triton
    for name in ("rms_norm", "silu_and_mul"):
        ours, core = getattr(ns, name).default._schema, getattr(torch.ops.ircore, name).default._schema
        assert [(a.name, str(a.type), a.alias_info) for a in ours.arguments] == [
            (a.name, str(a.type), a.alias_info) for a in core.arguments
        ]
        assert [str(r.type) for r in ours.returns] == [str(r.type) for r in core.returns] == ["Tensor"]
    schema = ns.fused_add_rms_norm.default._schema
    assert [a.name for a in schema.arguments] == ["x", "x_residual", "weight", "epsilon", "variance_size"]
    assert [a.alias_info is not None and a.alias_info.is_write for a in schema.arguments] == [
        True,
        True,
        False,
        False,
        False,
    ]
    assert len(schema.returns) == 0
    assert not torch._C._jit_get_schemas_for_operator("ircore_triton::fused_add_rms_norm_inplace")


@pytest.mark.usefixtures("triton_first")
def test_provider_ops_run_the_kernels() -> None:
    """Called directly, the provider's ops give the kernels' results; the in-place one writes them
    into x and x_residual."""
    x, r, w = _randn(3, 40), _randn(3, 40), _weight(40)
    ns = torch.ops.ircore_triton
    assert_close(ns.rms_norm.default(x, w, EPS, None), rms_norm_ref(x, w, EPS), torch.float32)
    assert_close(ns.silu_and_mul.default(x), silu_and_mul_ref(x), torch.float32)
    xa, ra = x.clone(), r.clone()
    assert ns.fused_add_rms_norm.default(xa, ra, w, EPS, 20) is None
    assert_residual(ra, x + r)
    assert_close(xa, rms_norm_ref(x + r, w, EPS, 20), torch.float32)


def _padded(*shape: int) -> torch.Tensor:
    """Rows padded by 24 elements: unit last-dim stride, row stride != hidden size."""
    return _randn(*shape[:-1], shape[-1] + 24)[..., : shape[-1]]


@pytest.mark.usefixtures("triton_first")
@pytest.mark.parametrize(
    "op,args",
    [
        ("rms_norm", lambda: (_randn(3, 40), _weight(40), EPS, None)),
        ("rms_norm", lambda: (_randn(3, 40), None, EPS, 20)),
        ("rms_norm", lambda: (_padded(2, 3, 40), _weight(40), EPS, None)),
        ("fused_add_rms_norm", lambda: (_randn(3, 40), _randn(3, 40), _weight(40), EPS, None)),
        ("fused_add_rms_norm", lambda: (_randn(3, 40), _randn(3, 40), None, EPS, 10)),
        ("fused_add_rms_norm", lambda: (_padded(3, 40), _padded(3, 40), _weight(40), EPS, None)),
        ("silu_and_mul", lambda: (_randn(3, 40),)),
        ("silu_and_mul", lambda: (_padded(2, 3, 40),)),
    ],
    ids=["rms_norm", "rms_norm_vs", "rms_norm_padded", "fused_add", "fused_add_vs", "fused_add_padded",
         "silu_and_mul", "silu_and_mul_padded"],
)  # fmt: skip
def test_opcheck(op: str, args) -> None:
    """Schema (what the kernel writes and aliases), fake (the core's, contiguous outputs) and
    functionalization of the provider's op agree with the real kernel, also for padded rows."""
    torch.library.opcheck(getattr(torch.ops.ircore_triton, op).default, args())


@pytest.mark.usefixtures("triton_first")
def test_make_fx_records_the_ircore_ops(kernel_calls: list) -> None:
    """A trace of the eager calls records ``torch.ops.ircore.<op>``, once per call; running the
    trace runs the kernels (the provider is first), on real tensors only, and a fake trace never
    reaches them."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(x: torch.Tensor, r: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        out, res = ircore.ops.fused_add_rms_norm(x, r, w, EPS)
        y = ircore.ops.rms_norm(res, w, EPS, 32)
        return ircore.ops.silu_and_mul(ircore.ops.rms_norm(y, None, EPS)) + out[..., :32]

    x, r, w = _randn(4, 64), _randn(4, 64), _weight(64)
    expected = f(x, r, w)
    launchers = ["fused_add_rms_norm_", "rms_norm", "rms_norm", "silu_and_mul"]
    assert [name for name, _ in kernel_calls] == launchers
    kernel_calls.clear()

    gm = make_fx(f, tracing_mode="fake")(x, r, w)
    assert kernel_calls == []
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert targets.count(torch.ops.ircore.fused_add_rms_norm.default) == 1
    assert targets.count(torch.ops.ircore.rms_norm.default) == 2
    assert targets.count(torch.ops.ircore.silu_and_mul.default) == 1
    assert not [t for t in targets if "ircore_triton" in str(t)]  # chosen at lowering, not in traces

    x0, r0 = x.clone(), r.clone()
    assert_close(gm(x, r, w), expected.double(), torch.float32)
    assert torch.equal(x, x0) and torch.equal(r, r0)  # the functional op: on clones
    assert kernel_calls == [(name, torch.Tensor) for name in launchers]


@pytest.mark.usefixtures("triton_first")
def test_fake_tensors_never_reach_the_kernels(kernel_calls: list) -> None:
    """Under fake tensors the ops (ircore's and the provider's) give outputs from their fakes."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        fx = mode.from_tensor(torch.empty(2, 3, 64, device=DEVICE))
        fr = mode.from_tensor(torch.empty(2, 3, 64, device=DEVICE))
        fw = mode.from_tensor(torch.empty(64, device=DEVICE))
        assert ircore.ops.rms_norm(fx, None, EPS).shape == (2, 3, 64)
        assert ircore.ops.silu_and_mul(fx).shape == (2, 3, 32)
        out, res = ircore.ops.fused_add_rms_norm(fx, fr, fw, EPS)
        assert out.shape == res.shape == (2, 3, 64)
        y = torch.ops.ircore_triton.rms_norm.default(fx, fw, EPS, None)
        assert (y.shape, y.stride()) == ((2, 3, 64), (192, 64, 1))
        assert torch.ops.ircore_triton.silu_and_mul.default(fx).stride() == (96, 32, 1)
        assert torch.ops.ircore_triton.fused_add_rms_norm.default(fx, fr, fw, EPS, None) is None
    assert kernel_calls == []


def _compiled(f, *args):
    """``f`` compiled with the ircore backend and run: (its result, Inductor's generated code)."""
    from torch._inductor import config as inductor_config
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    ircore.compile.reset_report()
    try:
        with inductor_config.patch(fx_graph_cache=False):  # a cache hit runs no pass
            out, (code,) = run_and_get_code(torch.compile(f, backend="ircore", fullgraph=True), *args)
    finally:
        torch._dynamo.reset()
    return out, code


@pytest.mark.slow  # an Inductor compile
@pytest.mark.usefixtures("triton_first")
def test_ircore_backend_calls_the_provider_ops() -> None:
    """Compiled with ``backend="ircore"``, each call becomes one node of the provider's op (the
    in-place implementation's op on buffers Inductor owns: the caller's tensors are unchanged)."""

    def f(x: torch.Tensor, r: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        out, res = ircore.ops.fused_add_rms_norm(x, r, w, EPS)
        y = ircore.ops.rms_norm(res, w, EPS) * out  # not an add: the core would fuse add + norm
        y = ircore.ops.rms_norm(y, None, EPS, 32)
        return ircore.ops.silu_and_mul(torch.cat([y, y], dim=-1))

    x, r, w = _randn(4, 64), _randn(4, 64), _weight(64)
    expected = f(x, r, w)
    x0, r0 = x.clone(), r.clone()
    got, code = _compiled(f, x, r, w)
    assert_close(got, expected.double(), torch.float32)
    assert torch.equal(x, x0) and torch.equal(r, r0)
    report = ircore.compile.report()
    assert report.left == 0
    assert {op: dict(c) for op, c in report.lowered.items()} == {
        "fused_add_rms_norm": {"triton": 1},
        "rms_norm": {"triton": 2},
        "silu_and_mul": {"triton": 1},
    }
    assert code.count("torch.ops.ircore_triton.fused_add_rms_norm.default(") == 1
    assert code.count("torch.ops.ircore_triton.rms_norm.default(") == 2
    assert code.count("torch.ops.ircore_triton.silu_and_mul.default(") == 1
    assert "torch.ops.ircore." not in code  # no node left to dispatch at run time


@pytest.mark.slow  # an Inductor compile
@pytest.mark.usefixtures("triton_first")
def test_maybe_inplace_writes_into_the_callers_tensors() -> None:
    """``fused_add_rms_norm.maybe_inplace`` compiled: the provider's in-place op, its results in
    x and x_residual as in the eager call (the mutation is visible to the caller)."""

    def f(x: torch.Tensor, r: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        out, res = ircore.ops.fused_add_rms_norm.maybe_inplace(x, r, w, EPS)
        return ircore.ops.rms_norm(res, w, EPS) + out

    x, r, w = _randn(4, 64), _randn(4, 64), _weight(64)
    xe, re = x.clone(), r.clone()
    expected = f(xe, re, w)
    assert_residual(re, x + r)  # eager: the in-place kernel ran on the caller's tensors
    x2, r2 = x.clone(), r.clone()
    got, code = _compiled(f, x2, r2, w)
    assert_close(got, expected.double(), torch.float32)
    assert_residual(r2, x + r)
    assert_close(x2, rms_norm_ref(x + r, w, EPS), torch.float32)
    assert code.count("torch.ops.ircore_triton.fused_add_rms_norm.default(") == 1
    assert code.count("torch.ops.ircore_triton.rms_norm.default(") == 1
