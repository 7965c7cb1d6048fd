"""The bad-input matrix: every bad argument gets one InvalidArgumentError, whichever provider runs.

One fresh interpreter per eager path (with the compiled signature helper, and the pure-Python
path with ``IRCORE_NO_SIGNATURE=1``) sees the fixture provider ``greedy`` (tests/fixtures/greedy:
accepts every call, records the ones it runs), the repo's own ``vllm_c``, Triton's kernels under
its interpreter (registered as ``triton_cpu``: ``triton`` is unavailable without a GPU) and
native. Each case runs with each of them first in the priority list, by every route a caller has
(positional and keyword eager calls, ``maybe_inplace``, ``explain``, fake tensors, the torch op);
before the bad call, a good call with the same tensors fills the signature cache, so a decision
cached for good arguments cannot let a bad one through. On a CUDA machine the matrix also runs
with CUDA tensors, where the providers are vllm_c's CUDA kernels and the real ``triton``.

Triton 3.6's interpreter fails on numpy >= 2.4 (triton-lang/triton#9171; ``make setup`` pins
numpy below it): where that is the numpy, ``triton_cpu`` is left out and the matrix says why.
"""

from __future__ import annotations

import json
from importlib import metadata

import pytest
import torch

from .provider_env import ProviderEnv, install_fixtures

MATRIX = r"""
import json, os, typing, warnings, numpy as np, torch, ircore
from torch._subclasses.fake_tensor import FakeTensorMode
import ircore_fixture_greedy as greedy

DEVICE = os.environ["MATRIX_DEVICE"]
torch.set_default_device(DEVICE)  # every tensor a case makes
ircore.get_priority("rms_norm")  # loads the providers
providers = ["native", "greedy"] + [p for p in ("vllm_c", "triton") if p in ircore.ops.rms_norm.impls]
left_out = {}
if os.environ.get("TRITON_INTERPRET") == "1":
    from ircore_triton import impls as tri
    try:
        tri.rms_norm(torch.ones(1, 8), None, 1e-6)
    except Exception as exc:  # the interpreter cannot run here: say why
        left_out["triton_cpu"] = f"numpy {np.__version__}: {type(exc).__name__}: {exc}"
    else:
        for name in ("rms_norm", "fused_add_rms_norm", "silu_and_mul", "rms_norm_gated", "layer_norm"):
            ircore.get_op(name).register_impl(
                "triton_cpu", getattr(tri, name), getattr(tri, name + "_supports"),
                inplace=name == "fused_add_rms_norm", cache_by_signature=True)
        providers.append("triton_cpu")

def x(): return torch.randn(2, 8)
def w(): return torch.randn(8)
CASES = [  # (op, label, arguments, whether torch's own parser sees the mistake first)
    ("rms_norm", "epsilon str", lambda: (x(), w(), "1e-6"), True),
    ("rms_norm", "epsilon None", lambda: (x(), w(), None), True),
    ("rms_norm", "epsilon list", lambda: (x(), w(), [1e-6]), True),
    ("rms_norm", "epsilon bool", lambda: (x(), w(), True), True),
    ("rms_norm", "epsilon tensor", lambda: (x(), w(), torch.tensor(1e-6)), True),
    ("rms_norm", "epsilon numpy float32", lambda: (x(), w(), np.float32(1e-6)), True),
    ("rms_norm", "epsilon NaN", lambda: (x(), w(), float("nan")), False),
    ("rms_norm", "epsilon negative", lambda: (x(), w(), -1e-6), False),
    ("rms_norm", "variance_size float", lambda: (x(), w(), 1e-6, 2.5), True),
    ("rms_norm", "variance_size str", lambda: (x(), w(), 1e-6, "8"), True),
    ("rms_norm", "variance_size bool", lambda: (x(), w(), 1e-6, True), True),
    ("rms_norm", "variance_size too big", lambda: (x(), w(), 1e-6, 9), False),
    ("rms_norm", "x list", lambda: (x().tolist(), w(), 1e-6), True),
    ("rms_norm", "x float", lambda: (1.5, w(), 1e-6), True),
    ("rms_norm", "x ndarray", lambda: (x().cpu().numpy(), w(), 1e-6), True),
    ("rms_norm", "x None", lambda: (None, w(), 1e-6), True),
    ("rms_norm", "x int32", lambda: (torch.ones(2, 8, dtype=torch.int32), w(), 1e-6), False),
    ("rms_norm", "x 0-d", lambda: (torch.tensor(1.0), None, 1e-6), False),
    ("rms_norm", "x empty last dim", lambda: (torch.randn(2, 0), None, 1e-6), False),
    ("rms_norm", "weight list", lambda: (x(), w().tolist(), 1e-6), True),
    ("rms_norm", "weight float", lambda: (x(), 1.0, 1e-6), True),
    ("rms_norm", "weight ndarray", lambda: (x(), w().cpu().numpy(), 1e-6), True),
    ("rms_norm", "weight shape", lambda: (x(), torch.randn(7), 1e-6), False),
    ("rms_norm", "weight float64", lambda: (x(), w().double(), 1e-6), False),
    ("rms_norm", "weight on meta", lambda: (x(), torch.randn(8, device="meta"), 1e-6), False),
    ("fused_add_rms_norm", "x_residual list", lambda: (x(), x().tolist(), w(), 1e-6), True),
    ("fused_add_rms_norm", "x_residual float", lambda: (x(), 1.0, w(), 1e-6), True),
    ("fused_add_rms_norm", "x_residual ndarray", lambda: (x(), x().cpu().numpy(), w(), 1e-6), True),
    ("fused_add_rms_norm", "x_residual None", lambda: (x(), None, w(), 1e-6), True),
    ("fused_add_rms_norm", "x_residual shape", lambda: (x(), torch.randn(2, 9), w(), 1e-6), False),
    ("fused_add_rms_norm", "x ndarray", lambda: (x().cpu().numpy(), x(), w(), 1e-6), True),
    ("fused_add_rms_norm", "weight list", lambda: (x(), x(), w().tolist(), 1e-6), True),
    ("fused_add_rms_norm", "epsilon str", lambda: (x(), x(), w(), "1e-6"), True),
    ("fused_add_rms_norm", "epsilon negative", lambda: (x(), x(), w(), -1.0), False),
    ("fused_add_rms_norm", "variance_size float", lambda: (x(), x(), w(), 1e-6, 2.5), True),
    ("silu_and_mul", "x list", lambda: ([[1.0, 2.0]],), True),
    ("silu_and_mul", "x ndarray", lambda: (np.ones((2, 8), dtype=np.float32),), True),
    ("silu_and_mul", "x None", lambda: (None,), True),
    ("silu_and_mul", "x odd last dim", lambda: (torch.randn(2, 7),), False),
    ("rms_norm_gated", "gate list", lambda: (x(), x().tolist(), w(), 1e-6), True),
    ("rms_norm_gated", "gate shape", lambda: (x(), torch.randn(2, 9), w(), 1e-6), False),
    ("rms_norm_gated", "gate dtype", lambda: (x(), x().half(), w(), 1e-6), False),
    ("rms_norm_gated", "weight None", lambda: (x(), x(), None, 1e-6), True),
    ("rms_norm_gated", "group_size not a divisor", lambda: (x(), x(), w(), 1e-6, 3), False),
    ("rms_norm_gated", "group_size bool", lambda: (x(), x(), w(), 1e-6, True), True),
    ("rms_norm_gated", "norm_before_gate int", lambda: (x(), x(), w(), 1e-6, None, 1), True),
    ("rms_norm_gated", "epsilon negative", lambda: (x(), x(), w(), -1.0), False),
    ("layer_norm", "weight dtype", lambda: (x(), w().half(), None, 1e-5), False),
    ("layer_norm", "bias shape", lambda: (x(), w(), torch.randn(7), 1e-5), False),
    ("layer_norm", "bias on meta", lambda: (x(), w(), torch.randn(8, device="meta"), 1e-5), False),
    ("layer_norm", "x empty last dim", lambda: (torch.randn(2, 0), None, None, 1e-5), False),
    ("layer_norm", "epsilon NaN", lambda: (x(), w(), w(), float("nan")), False),
]

# Cases for any op, from its signature (an op declared later gets them too): a sparse tensor for
# each tensor parameter, an int beyond 64 bits (and beyond a double) for each number parameter.
def to_sparse(t):  # fp8 has no sparse form: a float copy (the layout is refused before the dtype)
    return (t.float() if t.element_size() == 1 and t.is_floating_point() else t).to_sparse()

def replaced(op, i, value):
    args = list(op.make_inputs((2, 8), torch.float32, DEVICE))
    args[i] = value(args[i])
    return tuple(args)

for op_name, op in sorted(ircore.all_ops().items()):
    if op.make_inputs is None:
        continue
    hints = typing.get_type_hints(op.native)
    good = op.make_inputs((2, 8), torch.float32, DEVICE)
    for i, name in enumerate(op.param_names):
        kind = hints.get(name)
        if kind in (torch.Tensor, torch.Tensor | None) and good[i] is not None:
            CASES.append((op_name, f"{name} sparse", lambda op=op, i=i: replaced(op, i, to_sparse), False))
        elif kind in (float, float | None, int, int | None):  # torch's parser converts or refuses ints
            CASES.append((op_name, f"{name} int beyond 64 bits", lambda op=op, i=i: replaced(op, i, lambda _: 2**64), True))
            if kind in (float, float | None):
                CASES.append((op_name, f"{name} int beyond a double", lambda op=op, i=i: replaced(op, i, lambda _: 10**400), True))

def outcome(fn):
    try:
        fn()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return "no error"

def fake_call(op, args):
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        return op(*[mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args])

results, leaks = [], []
for op_name, label, make, torch_parses in CASES:
    op = ircore.get_op(op_name)
    for provider in providers:
        with ircore.priority(**{op_name: [provider]}):
            args = make()
            good = op.make_inputs((2, 8), torch.float32, DEVICE)
            op(*good)  # fills this scope's signature cache for these tensors' signature
            greedy.CALLS.clear()
            routes = {
                "eager": lambda: op(*args),
                "keywords": lambda: op(**dict(zip(op.param_names, args))),
                "maybe_inplace": lambda: op.maybe_inplace(*args),
                "explain": lambda: ircore.explain(op, *args),
                "fake": lambda: fake_call(op, args),
            }
            if not torch_parses:
                routes["torch_op"] = lambda: op.torch_op(*args)
            for route, call in routes.items():
                results.append([op_name, label, provider, route, outcome(call)])
                if greedy.CALLS:  # an implementation ran on bad input
                    leaks.append([op_name, label, provider, route])
                    greedy.CALLS.clear()
def same(a, b):
    a, b = (a if isinstance(a, tuple) else (a,)), (b if isinstance(b, tuple) else (b,))
    return len(a) == len(b) and all(torch.allclose(x.float(), y.float(), atol=1e-5, rtol=1e-5, equal_nan=True) for x, y in zip(a, b))

def result_or_error(fn):
    try:
        return fn(), None
    except Exception as exc:
        return None, f"{type(exc).__name__}: {exc}"

# Every provider agrees with native: maybe_inplace with an in-place argument expanded (stride 0,
# which no kernel may write in place), and extreme or non-finite values of float parameters.
agree = []
for op_name, op in sorted(ircore.all_ops().items()):
    if op.make_inputs is None:
        continue
    hints = typing.get_type_hints(op.native)
    variants = []
    for i in op.inplace_indices:
        variants.append((f"maybe_inplace {op.param_names[i]} expanded", i, lambda t: t[:1].expand_as(t), True))
    for i, name in enumerate(op.param_names):
        if hints.get(name) in (float, float | None):
            for value in (float("inf"), 1e308, 2**63 - 1):
                variants.append((f"{name}={value!r}", i, lambda _, v=value: v, False))
    for label, i, value, in_place in variants:
        expected, expected_error = result_or_error(lambda: op.native(*replaced(op, i, value)))
        for provider in providers:
            with ircore.priority(**{op_name: [provider]}):
                args = replaced(op, i, value)
                before = [a.clone() for a in args if isinstance(a, torch.Tensor)]
                got, error = result_or_error(lambda: op.maybe_inplace(*args) if in_place else op(*args))
                if error is not None:
                    verdict = error if not error.startswith("InvalidArgumentError") else "refused: " + error
                elif expected_error is not None:
                    verdict = f"ran where native raised {expected_error}"
                elif not same(got, expected):
                    verdict = "differs from native"
                elif in_place and not all(torch.equal(a, b) for a, b in zip([a for a in args if isinstance(a, torch.Tensor)], before)):
                    verdict = "wrote an input"
                else:
                    verdict = "agrees with native"
                agree.append([op_name, label, provider, verdict])
print("MATRIX" + json.dumps({"providers": providers, "left_out": left_out, "results": results, "leaks": leaks, "agree": agree}))
"""

EXPECTED = {  # a part of each case's one message
    "epsilon str": "argument 'epsilon' must be a real number (a float or an int), got str '1e-6'",
    "epsilon None": "argument 'epsilon' must be a real number (a float or an int), got None",
    "epsilon list": "argument 'epsilon' must be a real number (a float or an int), got list",
    "epsilon bool": "argument 'epsilon' must be a real number (a float or an int), got True",
    "epsilon tensor": "argument 'epsilon' must be a real number (a float or an int), got torch.Tensor",
    "epsilon numpy float32": "argument 'epsilon' must be a real number (a float or an int), got numpy.float32",
    "epsilon NaN": "argument 'epsilon' is nan; expected a number >= 0 (not NaN)",
    "epsilon negative": "argument 'epsilon' is -",
    "variance_size float": "argument 'variance_size' must be an int or None, got 2.5",
    "variance_size str": "argument 'variance_size' must be an int or None, got str '8'",
    "variance_size bool": "argument 'variance_size' must be an int or None, got True",
    "variance_size too big": "argument 'variance_size' is 9; expected 1 <= variance_size <= 8",
    "x list": "argument 'x' must be a torch.Tensor, got list",
    "x float": "argument 'x' must be a torch.Tensor, got 1.5",
    "x ndarray": "argument 'x' must be a torch.Tensor, got numpy.ndarray",
    "x None": "argument 'x' must be a torch.Tensor, got None",
    "x int32": "argument 'x' has dtype torch.int32",
    "x 0-d": "argument 'x' is a 0-d tensor",
    "x empty last dim": "argument 'x' has an empty last dimension",
    "weight list": "argument 'weight' must be a torch.Tensor or None, got list",
    "weight float": "argument 'weight' must be a torch.Tensor or None, got 1.0",
    "weight ndarray": "argument 'weight' must be a torch.Tensor or None, got numpy.ndarray",
    "weight shape": "argument 'weight' has shape (7,); expected (8,)",
    "weight float64": "argument 'weight' has dtype torch.float64; expected one of float32, float16, bfloat16",
    "weight on meta": "argument 'weight' is on meta but x is on cpu",
    "x_residual list": "argument 'x_residual' must be a torch.Tensor, got list",
    "x_residual float": "argument 'x_residual' must be a torch.Tensor, got 1.0",
    "x_residual ndarray": "argument 'x_residual' must be a torch.Tensor, got numpy.ndarray",
    "x_residual None": "argument 'x_residual' must be a torch.Tensor, got None",
    "x_residual shape": "argument 'x_residual' is torch.float32 (2, 9); expected x's dtype and shape",
    "x odd last dim": "argument 'x' has last dimension 7 (shape (2, 7)); it must be even",
    "gate list": "argument 'gate' must be a torch.Tensor, got list",
    "gate shape": "argument 'gate' is torch.float32 (2, 9); expected x's dtype and shape",
    "gate dtype": "argument 'gate' is torch.float16 (2, 8); expected x's dtype and shape",
    "weight None": "argument 'weight' must be a torch.Tensor, got None",
    "group_size not a divisor": "argument 'group_size' is 3; expected None or a divisor of x.shape[-1] = 8",
    "group_size bool": "argument 'group_size' must be an int or None, got True",
    "norm_before_gate int": "argument 'norm_before_gate' must be a bool, got 1",
    "weight dtype": "argument 'weight' has dtype torch.float16; expected x's dtype, torch.float32",
    "bias shape": "argument 'bias' has shape (7,); expected (8,)",
    "bias on meta": "argument 'bias' is on meta but x is on cpu",
}


def _expected(label: str) -> str:
    """The part of a case's message every outcome must hold; generic cases by their form."""
    if label in EXPECTED:
        return EXPECTED[label]
    name, _, what = label.partition(" ")
    if what == "sparse":
        return f"argument {name!r} is a sparse tensor of layout torch.sparse_coo; expected a dense (strided) tensor"
    if what == "int beyond 64 bits":
        return f"argument {name!r} is 18446744073709551616, outside [-2**63, 2**63 - 1]"
    assert what == "int beyond a double", label
    return f"argument {name!r} is an int of about 401 digits, outside [-2**63, 2**63 - 1]"


def _has_vllm_c() -> bool:
    return any(ep.name == "vllm_c" for ep in metadata.entry_points(group="ircore.providers"))


@pytest.fixture(scope="module")
def penv(tmp_path_factory) -> ProviderEnv:
    site = tmp_path_factory.mktemp("site")
    install_fixtures(site, ["greedy"])
    return ProviderEnv(site, tmp_path_factory.mktemp("run"))


def _has_triton() -> bool:
    return any(ep.name == "triton" for ep in metadata.entry_points(group="ircore.providers"))


def _numpy_breaks_triton_interpreter() -> bool:
    """numpy >= 2.4 with Triton 3.6's interpreter (triton-lang/triton#9171)."""
    import numpy

    return tuple(int(v) for v in numpy.__version__.split(".")[:2]) >= (2, 4)


@pytest.mark.parametrize(
    "device",
    [
        pytest.param("cpu", marks=pytest.mark.slow),
        pytest.param(
            "cuda",
            marks=[
                pytest.mark.slow,
                pytest.mark.gpu,
                pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
            ],
        ),
    ],
)
@pytest.mark.parametrize("path", ["signature helper", "pure Python"])
def test_every_bad_argument_gets_one_error_whichever_provider_would_run(penv, path, device):
    cuda = device == "cuda"
    names = ["greedy"] + (["vllm_c"] if _has_vllm_c() else []) + (["triton"] if cuda and _has_triton() else [])
    env = {"IRCORE_PROVIDERS": ",".join(names), "IRCORE_DISABLE": None, "MATRIX_DEVICE": device}
    env["TRITON_INTERPRET"] = None if cuda else "1"
    if path == "pure Python":
        env["IRCORE_NO_SIGNATURE"] = "1"
    run = penv.run(["-c", MATRIX], env)
    line = next((line for line in run.stdout.splitlines() if line.startswith("MATRIX")), None)
    assert line is not None, run.stderr
    matrix = json.loads(line[len("MATRIX") :])
    assert {"native", "greedy"} <= set(matrix["providers"])
    assert ("vllm_c" in matrix["providers"]) == _has_vllm_c()
    if cuda:
        assert ("triton" in matrix["providers"]) == _has_triton()
    elif "triton_cpu" not in matrix["providers"]:  # only for the known breakage, named
        assert _numpy_breaks_triton_interpreter(), matrix["left_out"]
        assert "0-dimensional arrays" in matrix["left_out"]["triton_cpu"], matrix["left_out"]
    by_case: dict[tuple[str, str], set[str]] = {}
    for op, label, provider, route, outcome in matrix["results"]:
        assert outcome.startswith(f"InvalidArgumentError: ircore.ops.{op}: argument "), (op, label, provider, route, outcome)
        expected = _expected(label)
        expected = expected.replace("x is on cpu", "x is on cuda:0") if cuda else expected
        assert expected in outcome, (op, label, provider, route, outcome)
        by_case.setdefault((op, label), set()).add(outcome)
    different = {case: outcomes for case, outcomes in by_case.items() if len(outcomes) > 1}
    assert not different, different  # one message per case: whichever provider, whichever route
    assert matrix["leaks"] == []
    generic = {label for _, label, *_ in matrix["results"] if label not in EXPECTED}
    assert {"x sparse", "weight sparse", "x_residual sparse", "epsilon int beyond 64 bits"} <= generic
    disagree = [row for row in matrix["agree"] if row[3] != "agrees with native" and not row[3].startswith("refused: ")]
    assert not disagree, disagree
    expanded = [row for row in matrix["agree"] if "expanded" in row[1]]
    assert expanded and all(row[3] == "agrees with native" for row in expanded), expanded
    by_value: dict[tuple[str, str], set[str]] = {}
    for op, label, _provider, verdict in matrix["agree"]:
        by_value.setdefault((op, label), set()).add(verdict)
    assert all(len(v) == 1 for v in by_value.values()), by_value  # refused by all or run by all


# ---------------------------------------------------------------------- every op, in process
# Cases that apply to any op, built from its signature and its own good inputs: every op declared
# (now or later, by an op library or by ircore.register_op) gets them. A spy implementation of
# each op, first in the priority list and cached by signature, records any call that reaches it.
import functools  # noqa: E402
import typing  # noqa: E402
import warnings  # noqa: E402

import ircore  # noqa: E402
from ircore.errors import InvalidArgumentError  # noqa: E402

SPIED: list[tuple[str, tuple]] = []


def _good_args(op) -> tuple:
    if op.make_inputs is not None:
        return tuple(op.make_inputs((2, 8), torch.float32, "cpu"))
    return next(iter(op.sample_inputs(torch.float32, "cpu", 0))).args


def _accept_all(op):
    """A predicate with the op's parameters that accepts every call."""
    return functools.wraps(op.native)(lambda *args: True)


def _spy(op, inplace: bool):
    """An implementation of ``op`` with its exact signature that records every call; in place, it
    writes its outputs into the op's in-place arguments (and so fails on an expanded one)."""

    @functools.wraps(op.native)
    def spy(*args):
        SPIED.append((op.name, args))
        out = op.native(*args)
        if not inplace:
            return out
        outs = out if isinstance(out, tuple) else (out,)
        for i, value in zip(op.inplace_indices, outs):
            args[i].copy_(value)
        written = tuple(args[i] for i in op.inplace_indices)
        return written if len(written) > 1 else written[0]

    return spy


@pytest.fixture
def spied():
    """Every op with inputs gets the spy first in its priority (in place where the op allows)."""
    for op in ircore.all_ops().values():
        if op.make_inputs is None and op.sample_inputs is None:
            continue
        op.register_impl(
            "spy",
            _spy(op, bool(op.inplace_args)),
            _accept_all(op),
            inplace=bool(op.inplace_args),
            cache_by_signature=True,
        )
        ircore.set_priority({op.name: ["spy"]})
    SPIED.clear()
    yield
    SPIED.clear()


def _hints(op) -> dict:
    return typing.get_type_hints(op.native)


def _params_of(op, *kinds) -> list[tuple[int, str]]:
    hints = _hints(op)
    return [(i, name) for i, name in enumerate(op.param_names) if hints.get(name) in kinds]


def _with(args: tuple, i: int, value) -> tuple:
    return (*args[:i], value, *args[i + 1 :])


def _replacing(op, i: int, value):
    """Makes the op's good arguments with argument ``i`` replaced by ``value(good[i])``."""

    def make() -> tuple:
        good = _good_args(op)
        return _with(good, i, value(good[i]))

    return make


def _convertible(t: torch.Tensor) -> torch.Tensor:
    """``t``, or a float32 copy where torch cannot make other layouts of its dtype (fp8): the
    layout is refused before the dtype is looked at."""
    return t.float() if t.element_size() == 1 and t.is_floating_point() else t


def _generic_bad_cases(op):
    """``(label, make_args, part of the message)`` for what any op refuses by its annotations.

    An int argument reaches ``torch.ops.ircore.*`` called directly only through torch's parser,
    which converts it to a float for a float parameter or refuses it: that route is left out for
    the int cases (labels with "int").
    """
    good = _good_args(op)
    tensors = [(i, n) for i, n in _params_of(op, torch.Tensor, torch.Tensor | None) if good[i] is not None]
    dense = "expected a dense (strided) tensor"
    for i, name in tensors:
        yield f"{name} sparse", _replacing(op, i, lambda t: _convertible(t).to_sparse()), (
            f"argument {name!r} is a sparse tensor of layout torch.sparse_coo; {dense}: pass .to_dense()"
        )
    two_d = [(i, name) for i, name in tensors if good[i].dim() == 2]
    if two_d:
        i, name = two_d[0]
        yield f"{name} sparse_csr", _replacing(op, i, lambda t: _convertible(t).to_sparse_csr()), (
            f"argument {name!r} is a sparse tensor of layout torch.sparse_csr; {dense}"
        )
        yield f"{name} nested", _replacing(op, i, lambda t: torch.nested.nested_tensor(list(_convertible(t)))), (
            f"argument {name!r} is a nested tensor; {dense}"
        )
        yield f"{name} mkldnn", _replacing(op, i, lambda t: _convertible(t).to_mkldnn()), (
            f"argument {name!r} is a tensor of layout torch._mkldnn; {dense}"
        )
    outside = "outside [-2**63, 2**63 - 1]"
    for i, name in _params_of(op, float, float | None):
        for huge in (10**400, 2**64, 2**63, -(2**63) - 1):
            shown = "an int of about 401 digits" if huge == 10**400 else str(huge)
            yield f"{name} int {huge.bit_length()} bits", _replacing(op, i, lambda _, h=huge: h), (
                f"argument {name!r} is {shown}, {outside}: an int given for a float parameter must fit in "
                "64 bits; pass a float instead"
            )
    for i, name in _params_of(op, int, int | None):
        yield f"{name} int 65 bits", _replacing(op, i, lambda _: 2**64), (
            f"argument {name!r} is 18446744073709551616, {outside}: expected an int that fits in 64 bits"
        )
    for i, name in _params_of(op, list[int]):
        yield f"{name} list int 65 bits", _replacing(op, i, lambda v: [*v[:-1], 2**64]), (
            f"argument {name!r} has element {len(_good_args(op)[i]) - 1} = "
            f"18446744073709551616, {outside}: expected ints that fit in 64 bits (the schema's int[])"
        )


def _routes(op, args: tuple, label: str) -> dict:
    routes = {
        "eager": lambda: op(*args),
        "keywords": lambda: op(**dict(zip(op.param_names, args))),
        "explain": lambda: ircore.explain(op, *args),
    }
    if " int " not in label and not label.endswith(" nested"):
        # torch's parser takes ints first, and its dispatcher refuses a nested tensor before the
        # op's kernel (as with a wrong type: see the matrix above)
        routes["torch_op"] = lambda: op.torch_op(*args)
    if op.inplace_args:
        routes["maybe_inplace"] = lambda: op.maybe_inplace(*args)
    return routes


def _check_refused_everywhere(op, label: str, make, expected: str) -> None:
    op(*_good_args(op))  # fills the signature cache for the good call's signature
    SPIED.clear()
    for route, call in _routes(op, make(), label).items():
        with pytest.raises(InvalidArgumentError) as info:
            call()
        message = str(info.value)
        assert message.startswith(f"ircore.ops.{op.name}: argument "), (route, message)
        assert expected in message, (route, message)
        assert SPIED == [], (route, "an implementation ran on bad input")


OPS_WITH_INPUTS = sorted(
    name for name, op in ircore.all_ops().items() if op.make_inputs is not None or op.sample_inputs is not None
)


@pytest.mark.usefixtures("spied")
@pytest.mark.parametrize("op_name", OPS_WITH_INPUTS)
def test_every_op_refuses_what_its_annotations_rule_out_before_any_implementation(op_name, miss_path):
    """Sparse, nested and MKL-DNN tensors; ints beyond 64 bits for int and float parameters: one
    InvalidArgumentError naming the op, the argument and what to do, by every route, also after a
    good call filled the signature cache (whose helper declines these calls)."""
    op = ircore.get_op(op_name)
    cases = list(_generic_bad_cases(op))
    assert cases
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # sparse CSR and nested tensors are "beta"/"prototype"
        for label, make, expected in cases:
            try:
                _check_refused_everywhere(op, label, make, expected)
            except AssertionError as exc:
                raise AssertionError(f"{op_name} [{label}]: {exc}") from None


@pytest.mark.usefixtures("spied")
@pytest.mark.parametrize("op_name", [n for n in OPS_WITH_INPUTS if _params_of(ircore.get_op(n), float, float | None)])
def test_non_finite_and_extreme_float_arguments_give_one_outcome(op_name):
    """A float parameter given inf, -inf, NaN, +-1e308 or the largest 64-bit int: either the op
    refuses it (InvalidArgumentError naming it), or the spy's result is native's; nothing else."""
    op = ircore.get_op(op_name)
    for i, name in _params_of(op, float, float | None):
        for value in (float("inf"), float("-inf"), float("nan"), 1e308, -1e308, 2**63 - 1, -(2**63)):
            args = _with(_good_args(op), i, value)
            try:
                expected = op.native(*args)
            except Exception:
                expected = None
            try:
                got = op(*args)
            except InvalidArgumentError as exc:
                assert str(exc).startswith(f"ircore.ops.{op_name}: argument {name!r} "), str(exc)
                continue
            assert expected is not None, (name, value, "native fails where ircore ran the spy")
            torch.testing.assert_close(got, expected, equal_nan=True, msg=f"{name}={value!r}")


@pytest.mark.usefixtures("spied")
@pytest.mark.parametrize("op_name", [n for n in OPS_WITH_INPUTS if ircore.get_op(n).inplace_args])
def test_maybe_inplace_never_writes_an_expanded_argument_in_place(op_name):
    """An in-place argument whose elements share memory (stride 0, from expand) cannot be written
    in place: the in-place implementation runs on copies (the spy's copy_ would raise), the
    result is native's, and the caller's tensors are unchanged."""
    op = ircore.get_op(op_name)
    for i in op.inplace_indices:
        good = _good_args(op)
        expanded = good[i][:1].expand_as(good[i])
        assert torch._debug_has_internal_overlap(expanded) == 1
        args = _with(good, i, expanded)
        before = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        expected = op.native(*before)
        SPIED.clear()
        got = op.maybe_inplace(*args)
        assert [name for name, _ in SPIED] == [op_name]  # the spy ran, on copies
        torch.testing.assert_close(got, expected)
        for a, b in zip(args, before):
            if isinstance(a, torch.Tensor):
                assert torch.equal(a, b)


def test_an_op_declared_later_inherits_the_checks(spied):
    """An op declared without check_args: its annotations alone refuse the same calls."""

    @ircore.register_op(inplace_args=("x",), make_inputs=lambda shape, dtype, device: (
        torch.randn(shape, dtype=dtype, device=device), torch.randn(shape[-1], dtype=dtype, device=device), 2.0, 3
    ))
    def scale_shift(x: torch.Tensor, shift: torch.Tensor | None, factor: float, k: int) -> torch.Tensor:
        return x * factor + (0 if shift is None else shift) + k

    scale_shift.register_impl(
        "spy", _spy(scale_shift, True), _accept_all(scale_shift), inplace=True, cache_by_signature=True
    )
    ircore.set_priority(scale_shift=["spy"])
    labels = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for label, make, expected in _generic_bad_cases(scale_shift):
            labels.append(label)
            _check_refused_everywhere(scale_shift, label, make, expected)
    assert {"x sparse", "shift sparse", "x nested", "k int 65 bits", "factor int 65 bits"} <= set(labels)
    with pytest.raises(InvalidArgumentError, match="argument 'factor' must be a real number"):
        scale_shift(torch.ones(2, 8), None, "2", 3)  # types too, though the op has no check_args
