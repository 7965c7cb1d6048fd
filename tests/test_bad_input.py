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
import json, os, numpy as np, torch, ircore
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
        for name in ("rms_norm", "fused_add_rms_norm", "silu_and_mul"):
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
]

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
print("MATRIX" + json.dumps({"providers": providers, "left_out": left_out, "results": results, "leaks": leaks}))
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
}


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
        expected = EXPECTED[label].replace("x is on cpu", "x is on cuda:0") if cuda else EXPECTED[label]
        assert expected in outcome, (op, label, provider, route, outcome)
        by_case.setdefault((op, label), set()).add(outcome)
    different = {case: outcomes for case, outcomes in by_case.items() if len(outcomes) > 1}
    assert not different, different  # one message per case: whichever provider, whichever route
    assert matrix["leaks"] == []
