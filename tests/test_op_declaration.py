"""register_op: what becomes an op, and every way a declaration is refused."""

from __future__ import annotations

import re

import pytest
import torch

import ircore
from ircore.errors import OpDeclarationError


def test_declared_op_is_a_torch_custom_op():
    name = "scale"

    def native(x: torch.Tensor, factor: float) -> torch.Tensor:
        return x * factor

    op = ircore.register_op(native, name=name)
    assert op is ircore.get_op(name)
    torch_op = getattr(torch.ops.ircore, name)
    x = torch.randn(3)
    torch.testing.assert_close(torch_op(x, 2.0), x * 2)
    torch.testing.assert_close(op(x, 2.0), x * 2)
    assert op.schema == "(Tensor x, float factor) -> Tensor"


def test_decorator_form_and_custom_fake():
    name = "twice"
    seen = []

    def fake(x):
        seen.append("fake")
        return torch.empty_like(x)

    @ircore.register_op(name=name, fake=fake)
    def twice(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        out = twice(mode.from_tensor(torch.randn(4)))
    assert seen == ["fake"] and out.shape == (4,)


def test_default_fake_runs_native_on_fake_tensors():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.empty(5, 64, dtype=torch.bfloat16)
        out, res = ircore.ops.fused_add_rms_norm(x, torch.empty_like(x), torch.empty(64), 1e-6)
        half = ircore.ops.silu_and_mul(torch.empty(3, 10))
    assert out.shape == (5, 64) and out.dtype == torch.bfloat16 and res.shape == (5, 64)
    assert half.shape == (3, 5)


@pytest.mark.parametrize("bad", ["Upper", "1abc", "has-dash", "", "sp ace"])
def test_name_must_match_pattern(bad):
    def native(x: torch.Tensor) -> torch.Tensor:
        return x

    with pytest.raises(OpDeclarationError, match=r"must match \^\[a-z\]"):
        ircore.register_op(native, name=bad)


def test_name_with_a_trailing_newline_is_refused_saying_so():
    def native(x: torch.Tensor) -> torch.Tensor:
        return x

    with pytest.raises(OpDeclarationError) as info:
        ircore.register_op(native, name="scale\n")
    assert str(info.value).startswith(
        "op name 'scale\\n' ends with whitespace or a control character ('\\n'); a name must match "
        "^[a-z][a-z0-9_]*$: lower-case ASCII letters, digits and underscores, starting with a letter, "
        "e.g. 'my_op' ("
    )
    assert "scale\n" not in ircore.all_ops()


def test_any_layout_args_must_name_tensor_parameters():
    def native(x: torch.Tensor, k: float) -> torch.Tensor:
        return x

    with pytest.raises(OpDeclarationError, match=r"any_layout_args names 'k', which is not a tensor parameter"):
        ircore.register_op(native, name="anylayout", any_layout_args=("k",))


def test_any_layout_args_let_a_sparse_tensor_through_to_the_ops_check():
    @ircore.register_op(any_layout_args=("x",))
    def total(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (x.to_dense() if x.is_sparse else x).sum(-1) * w

    x = torch.randn(2, 8)
    torch.testing.assert_close(total(x.to_sparse(), torch.ones(2)), x.sum(-1))
    with pytest.raises(ircore.InvalidArgumentError, match="argument 'w' is a sparse tensor"):
        total(x, torch.ones(2).to_sparse())


def test_duplicate_name_rejected_with_both_places():
    def rms_norm(x: torch.Tensor) -> torch.Tensor:
        return x

    with pytest.raises(OpDeclarationError, match=r"'rms_norm'.*already declared by .*_norm\.py"):
        ircore.register_op(rms_norm)


def test_keyword_only_parameter_rejected():
    def native(x: torch.Tensor, *, eps: float) -> torch.Tensor:
        return x

    with pytest.raises(OpDeclarationError, match="'eps' is keyword-only"):
        ircore.register_op(native, name="op")


def test_var_args_rejected():
    def native(x: torch.Tensor, *rest: torch.Tensor) -> torch.Tensor:
        return x

    with pytest.raises(OpDeclarationError, match=r"\*args/\*\*kwargs parameter 'rest'"):
        ircore.register_op(native, name="op")


def test_unannotated_native_rejected():
    def native(x):
        return x

    with pytest.raises(OpDeclarationError, match="cannot infer a torch schema"):
        ircore.register_op(native, name="op")


def test_inplace_args_must_name_parameters():
    def native(x: torch.Tensor, y: torch.Tensor | None) -> torch.Tensor:
        return x

    with pytest.raises(OpDeclarationError, match="inplace_args names 'z'"):
        ircore.register_op(native, name="op", inplace_args=("z",))


def test_failed_declaration_leaves_nothing():
    name = "op"

    def native(x: torch.Tensor, *, k: int) -> torch.Tensor:
        return x

    with pytest.raises(OpDeclarationError):
        ircore.register_op(native, name=name)
    assert name not in ircore.all_ops()
    assert not hasattr(torch.ops.ircore, name)


def test_get_op_unknown_lists_known():
    with pytest.raises(KeyError, match=r"known ops: \['fatrelu_and_mul', 'fused_add_rms_norm', .*'rms_norm', .*'silu_and_mul'"):
        ircore.get_op("group_norm")


def test_an_op_without_tolerances_gets_the_dtype_defaults():
    def native(x: torch.Tensor) -> torch.Tensor:
        return x

    op = ircore.register_op(native, name="plain")
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        assert op.tolerance(dtype) == ircore.op.DEFAULT_TOLERANCES[dtype]
    assert op.tolerance(torch.float32) == ircore.Tolerance(atol=1e-5, rtol=1.3e-6)


def test_declared_tolerances_extend_the_defaults():
    def native(x: torch.Tensor) -> torch.Tensor:
        return x

    loose = ircore.Tolerance(atol=1e-2, rtol=1e-2)
    op = ircore.register_op(native, name="loose", tolerances={torch.float32: loose})
    assert op.tolerance(torch.float32) == loose
    assert op.tolerance(torch.float16) == ircore.op.DEFAULT_TOLERANCES[torch.float16]


def test_every_op_checks_its_argument_types_from_its_annotations():
    def native(x: torch.Tensor, factor: float, times: int | None = None) -> torch.Tensor:
        return x * factor

    op = ircore.register_op(native, name="typed")
    x = torch.randn(3)
    for args, message in [
        (([1.0], 2.0), "argument 'x' must be a torch.Tensor, got list"),
        ((x, "2"), "argument 'factor' must be a real number (a float or an int), got str '2'"),
        ((x, 2.0, 1.5), "argument 'times' must be an int or None, got 1.5"),
    ]:
        with pytest.raises(ircore.InvalidArgumentError, match=re.escape(f"ircore.ops.{op.name}: {message}")):
            op.check_types(*args)
    with pytest.raises(ircore.InvalidArgumentError, match=r"argument 'x' must be a torch\.Tensor"):
        op([1.0], 2.0)  # the eager call, before torch's own argument parser could answer
    op.check_types(x, 2, None)


def test_string_dtype_and_int_list_parameters_are_checked_in_every_call():
    """The kinds the second op wave needs (a mode string, an fp8 dtype, a group shape)."""

    def native(x: torch.Tensor, mode: str, dtype: torch.dtype, shape: list[int]) -> torch.Tensor:
        return (x * len(mode) + sum(shape)).to(dtype)

    op = ircore.register_op(native, name="kinds")
    x = torch.ones(2, 3)
    assert op(x, "ab", torch.float16, [1, 2]).dtype == torch.float16
    assert op(x, "ab", torch.float16, (1, 2))[0, 0] == 5  # a tuple of ints, as torch schemas take
    for args, message in [
        ((x, 3, torch.float16, [1]), "argument 'mode' must be a str, got 3"),
        ((x, "a", "float16", [1]), "argument 'dtype' must be a torch.dtype, got str 'float16'"),
        ((x, "a", torch.float16, [1.5]), "argument 'shape' must be a list of ints, got list"),
        ((x, "a", torch.float16, [True]), "argument 'shape' must be a list of ints, got list"),
        ((x, "a", torch.float16, 3), "argument 'shape' must be a list of ints, got 3"),
    ]:
        with pytest.raises(ircore.InvalidArgumentError, match=re.escape(f"ircore.ops.{op.name}: {message}")):
            op(*args)
