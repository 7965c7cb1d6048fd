"""op.register_impl: every validation error, and a good registration."""

from __future__ import annotations

import pytest
import torch

import ircore
from ircore.errors import ImplRegistrationError

from .impls import fused_inplace, only_fp32, rms_norm_a

rms_norm = ircore.ops.rms_norm


def test_good_registration_is_listed():
    impl = rms_norm.register_impl("good", rms_norm_a, supports_args=only_fp32)
    assert rms_norm.impls["good"] is impl
    assert impl.provider == "good" and impl.supports_args is only_fp32 and not impl.inplace
    assert "tests/impls.py:" in impl.source


def test_schema_must_equal_native():
    def wrong(
        x: torch.Tensor, weight: torch.Tensor, epsilon: float, variance_size: int | None = None
    ) -> torch.Tensor:
        return x

    with pytest.raises(ImplRegistrationError) as info:
        rms_norm.register_impl("bad", wrong)
    msg = str(info.value)
    assert "provider 'bad'" in msg and "'rms_norm'" in msg and "test_impl_registration.py" in msg
    assert "Tensor weight" in msg and "Tensor? weight" in msg


def test_parameter_names_are_part_of_the_schema():
    def renamed(
        x: torch.Tensor, w: torch.Tensor | None, epsilon: float, variance_size: int | None = None
    ) -> torch.Tensor:
        return x

    with pytest.raises(ImplRegistrationError, match="differs from the native schema"):
        rms_norm.register_impl("bad", renamed)


def test_unannotated_impl_rejected():
    with pytest.raises(ImplRegistrationError, match="cannot infer its schema"):
        rms_norm.register_impl("bad", lambda x, weight, epsilon, variance_size=None: x)


def test_supports_args_must_take_the_same_parameters():
    with pytest.raises(ImplRegistrationError, match=r"supports_args .* takes \(x, weight\) but must take"):
        rms_norm.register_impl("bad", rms_norm_a, supports_args=lambda x, weight: True)


def test_supports_args_must_be_callable():
    with pytest.raises(ImplRegistrationError, match="is not callable"):
        rms_norm.register_impl("bad", rms_norm_a, supports_args=True)


@pytest.mark.parametrize("name", ["native", "unfused"])
def test_reserved_provider_names(name):
    with pytest.raises(ImplRegistrationError, match=f"'{name}' is reserved"):
        rms_norm.register_impl(name, rms_norm_a)


@pytest.mark.parametrize("name", ["Bad", "9x", "with-dash", ""])
def test_provider_name_pattern(name):
    with pytest.raises(ImplRegistrationError, match="must match"):
        rms_norm.register_impl(name, rms_norm_a)


def test_duplicate_provider_per_op_rejected():
    rms_norm.register_impl("dup", rms_norm_a)
    with pytest.raises(ImplRegistrationError, match="already registered an implementation"):
        rms_norm.register_impl("dup", rms_norm_a)


def test_inplace_only_where_the_op_allows():
    with pytest.raises(ImplRegistrationError, match="does not allow in-place implementations"):
        rms_norm.register_impl("bad", rms_norm_a, inplace=True)
    ircore.ops.fused_add_rms_norm.register_impl("ok", fused_inplace, inplace=True)


def test_rejected_registration_leaves_nothing():
    before = dict(rms_norm.impls)
    with pytest.raises(ImplRegistrationError):
        rms_norm.register_impl("bad", rms_norm_a, supports_args=lambda: True)
    assert rms_norm.impls == before
