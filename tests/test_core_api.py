"""The core's public surface after its restructuring: errors, linecache, isolated(), the provider
kit's pieces, torch ops as implementations, register_op's callback checks."""

from __future__ import annotations

import subprocess
import sys
import traceback
from typing import Optional

import pytest
import torch

import ircore
import ircore.kit as kit
from ircore.errors import ImplRegistrationError, OpDeclarationError
from ircore.testing import assert_close_to_reference, isolated

from .impls import rms_norm_a


def test_testing_kit_and_config_are_attributes_of_ircore_without_importing_them_first():
    code = (
        "import sys, ircore\n"
        "assert 'ircore.testing' not in sys.modules and 'ircore.kit' not in sys.modules\n"
        "ircore.config.reset_api_settings()  # as docs/configuration.md writes it, first thing\n"
        "print(ircore.testing.isolated.__module__, ircore.kit.ImplSpec.__name__)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["ircore.testing._isolated", "ImplSpec"]


def test_unknown_op_error_is_a_key_error_that_says_what_there_is():
    with pytest.raises(ircore.UnknownOpError) as err:
        ircore.get_op("rms_nrom")
    assert isinstance(err.value, KeyError) and isinstance(err.value, ircore.IrcoreError)
    known = sorted(ircore.ops.__all__)  # every op of the library, sorted (the list grows with it)
    assert {"fused_add_rms_norm", "layer_norm", "rms_norm", "rms_norm_gated", "silu_and_mul"} <= set(known)
    assert str(err.value) == f"no ircore op named 'rms_nrom'; known ops: {known}"
    with pytest.raises(ircore.NoToleranceError, match=r"op 'rms_norm' has no tolerance for torch.int8; it has: "):
        ircore.ops.rms_norm.tolerance(torch.int8)


def test_a_traceback_through_the_eager_call_shows_its_generated_lines():
    def broken(x: torch.Tensor, weight: Optional[torch.Tensor], epsilon: float, variance_size: Optional[int] = None) -> torch.Tensor:
        raise RuntimeError("kernel failed")

    ircore.ops.rms_norm.register_impl("broken", broken)
    ircore.set_priority(rms_norm=["broken"])
    with pytest.raises(RuntimeError) as err:
        ircore.ops.rms_norm(torch.randn(2, 8), None, 1e-6)
    text = "".join(traceback.format_exception(err.value))
    _, _, rest = text.partition('File "<ircore eager call of rms_norm>", line ')
    assert rest, text
    shown = rest.splitlines()[1].strip()  # the source line under the frame (the fast call's, or the walk's)
    assert shown in ("_ir_result = _ir_fast(x, weight, epsilon, variance_size)", "return _ir_entry.call(x, weight, epsilon, variance_size)")
    assert "raised in provider 'broken'" in text  # and the note saying whose it was


def test_reference_and_assert_close_take_the_ops_arguments_as_the_op_does():
    x, w = torch.randn(3, 16), torch.randn(16)
    expected = ircore.ops.rms_norm.reference(x, w, 1e-6, None)
    torch.testing.assert_close(ircore.ops.rms_norm.reference(x, w, 1e-6), expected)  # default filled in
    torch.testing.assert_close(ircore.ops.rms_norm.reference(x, weight=w, epsilon=1e-6), expected)
    assert_close_to_reference(ircore.ops.rms_norm, ircore.ops.rms_norm(x, w, 1e-6), (x, w, 1e-6))


def test_register_op_checks_each_callback_against_how_ircore_calls_it():
    def native(x: torch.Tensor, k: float) -> torch.Tensor:
        return x * k

    def samples(dtype):  # ircore calls sample_inputs(dtype, device, seed)
        return iter(())

    with pytest.raises(OpDeclarationError) as err:
        ircore.register_op(native, name="scaled", sample_inputs=samples)
    message = str(err.value)
    assert message.startswith("op 'scaled' (") and "): sample_inputs (" in message
    assert "takes (dtype) but ircore calls it as sample_inputs(dtype, device, seed)" in message

    def check(x):  # takes one argument; the op has two
        pass

    with pytest.raises(OpDeclarationError, match=r"check_args \(.*\) takes \(x\) but ircore calls it as check_args\(x, k\)"):
        ircore.register_op(native, name="scaled", check_args=check)
    assert "scaled" not in ircore.all_ops()  # nothing of a refused declaration stays


def test_isolated_undoes_ops_impls_priorities_and_configuration():
    before_ops, before_prio = set(ircore.all_ops()), ircore.get_priority("rms_norm")
    with isolated() as state:
        @ircore.register_op
        def scratch_op(x: torch.Tensor) -> torch.Tensor:
            return x + 1

        assert hasattr(torch.ops.ircore, "scratch_op") and "scratch_op" in state.ops
        ircore.ops.rms_norm.register_impl("scratch", rms_norm_a)
        ircore.set_priority(rms_norm=["scratch"])
        ircore.configure(fusions={"add_rms_norm": False})
        assert ircore.get_priority("rms_norm") == ["scratch", "native"]
    assert set(ircore.all_ops()) == before_ops and ircore.get_priority("rms_norm") == before_prio
    assert "scratch" not in ircore.ops.rms_norm.impls
    assert not hasattr(torch.ops.ircore, "scratch_op")
    assert "fusions" not in ircore._state.STATE.config_api
    with isolated():  # the name is free again

        @ircore.register_op
        def scratch_op(x: torch.Tensor) -> torch.Tensor:
            return x + 2

        assert torch.equal(scratch_op(torch.zeros(2)), torch.full((2,), 2.0))


def test_predicate_pieces_make_one_function_with_the_ops_parameters():
    pred = kit.supports(
        "rms_norm",
        kit.device("x", "cpu"),
        kit.dtype("x", torch.float32, torch.bfloat16),
        kit.unit_stride("x"),
        kit.same_dtype("weight", "x"),
        kit.is_none("variance_size"),
        kit.last_dim("x", min=8, multiple_of=8),
    )
    x, w = torch.randn(4, 64), torch.randn(64)
    assert pred(x, w, 1e-6, None) and pred(x, None, 1e-6)  # weight None passes the piece on it
    assert not pred(x.half(), None, 1e-6)  # dtype
    assert not pred(x, w.half(), 1e-6)  # same_dtype
    assert not pred(x, w, 1e-6, 32)  # is_none
    assert not pred(torch.randn(64, 4).t(), None, 1e-6)  # unit_stride
    assert not pred(torch.randn(4, 12), None, 1e-6)  # last_dim multiple_of
    impl = ircore.ops.rms_norm.validate_impl("pieces", rms_norm_a, pred)
    assert impl.cache_by_signature  # pieces read only the call signature
    assert not ircore.ops.rms_norm.validate_impl("pieces", rms_norm_a, pred, cache_by_signature=False).cache_by_signature
    with pytest.raises(ImplRegistrationError, match=r"kit.device\('y', \.\.\.\) for op 'rms_norm': the op has no parameter 'y'"):
        kit.supports("rms_norm", kit.device("y", "cpu"))
    with pytest.raises(ImplRegistrationError, match=r"parameter 'epsilon' is <class 'float'>, not a tensor"):
        kit.supports("rms_norm", kit.contiguous("epsilon"))


@pytest.fixture
def torch_ops():
    """A library of torch ops with the schemas (and the in-place one) of rms_norm and fused_add."""
    lib = torch.library.Library("ircore_test_kernels", "DEF")
    lib.define("rms(Tensor x, Tensor? weight, float epsilon, int? variance_size=None) -> Tensor")
    lib.define("rms_wrong(Tensor x, Tensor? weight, float epsilon) -> Tensor")
    lib.define("fused_(Tensor(a!) x, Tensor(b!) residual, Tensor? weight, float epsilon, int? variance_size=None) -> ()")

    def fused_(x, r, w, eps, vs=None):
        out, res = ircore.ops.fused_add_rms_norm.native(x, r, w, eps, vs)
        r.copy_(res)
        x.copy_(out)

    lib.impl("rms", lambda x, w, e, v=None: ircore.ops.rms_norm.native(x, w, e, v).contiguous(), "CPU")
    lib.impl("fused_", fused_, "CPU")
    yield torch.ops.ircore_test_kernels
    lib._destroy()


def test_a_torch_op_is_an_implementation_as_it_is(torch_ops):
    ircore.ops.rms_norm.register_impl("torchop", torch_ops.rms.default)
    impl = ircore.ops.fused_add_rms_norm.register_impl("torchop", torch_ops.fused_.default, inplace=True)
    ircore.set_priority(rms_norm=["torchop"], fused_add_rms_norm=["torchop"])
    x, r, w = torch.randn(3, 32), torch.randn(3, 32), torch.randn(32)
    assert ircore.explain("rms_norm", x, w, 1e-6).chosen == "torchop"
    assert ircore.ops.rms_norm.impls["torchop"].fn is torch_ops.rms.default  # no wrapper
    assert_close_to_reference(ircore.ops.rms_norm, ircore.ops.rms_norm(x, w, 1e-6), (x, w, 1e-6))
    x2, r2 = x.clone(), r.clone()
    out, res = impl.run(x2, r2, w, 1e-6)  # the in-place op returns nothing: ircore returns its arguments
    assert out is x2 and res is r2
    out, res = ircore.ops.fused_add_rms_norm(x, r, w, 1e-6)  # functional: on clones
    assert_close_to_reference(ircore.ops.fused_add_rms_norm, (out, res), (x, r, w, 1e-6))
    # the op gave its fake to the torch op, which had none: it traces on its own
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        assert torch_ops.rms.default(mode.from_tensor(x), None, 1e-6).shape == x.shape


def test_a_torch_op_of_another_schema_is_refused_naming_both(torch_ops):
    with pytest.raises(ImplRegistrationError) as err:
        ircore.ops.rms_norm.register_impl("torchop", torch_ops.rms_wrong.default)
    message = str(err.value)
    assert "by provider 'torchop' (torch.ops.ircore_test_kernels.rms_wrong)" in message
    assert "its schema (Tensor x, Tensor? weight, float epsilon) -> Tensor differs from the schema it must have" in message
    with pytest.raises(ImplRegistrationError, match=r"in place: its schema \(Tensor x"):
        ircore.ops.fused_add_rms_norm.register_impl("torchop", torch_ops.rms.default, inplace=True)


def test_ops_are_typed_for_callers_and_the_type_checker_runs_in_ci():
    """``make test`` runs mypy over tests/typing/check_ops.py (assert_type on ircore.ops.* calls);
    here only that the file is where the configuration says."""
    from pathlib import Path

    import tomllib

    root = Path(__file__).resolve().parent.parent
    config = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["mypy"]
    assert "tests/typing" in config["files"] and (root / "tests/typing/check_ops.py").is_file()
    assert (root / "ircore" / "py.typed").is_file()


def test_a_config_file_number_for_a_boolean_is_refused_without_offering_numbers(tmp_path):
    """``strict = 0`` in TOML: the message must not offer "1/0", which a file cannot use unquoted."""
    from ircore.config import read_environment, read_file

    path = tmp_path / "ircore.toml"
    path.write_text("strict = 0\n")
    with pytest.raises(ircore.ConfigError) as info:
        read_file(path)
    assert str(info.value) == (
        f"{path}: strict: expected true or false, got 0: a boolean (unquoted true/false in TOML, "
        "True/False in Python)"
    )
    with pytest.raises(ircore.ConfigError, match=r"IRCORE_STRICT: expected true or false \(or 1/0, yes/no"):
        read_environment({"IRCORE_STRICT": "maybe"})
