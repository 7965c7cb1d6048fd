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


def test_supports_args_with_keyword_only_parameters_is_rejected():
    def pred(x, weight, *, epsilon, variance_size=None):
        return True

    with pytest.raises(ImplRegistrationError, match="has keyword-only parameter 'epsilon'; every parameter"):
        rms_norm.register_impl("bad", rms_norm_a, supports_args=pred)


def test_supports_args_defaults_must_be_the_native_ones_or_none():
    def other_default(x, weight, epsilon, variance_size=4):
        return True

    def default_native_lacks(x, weight, epsilon=1e-6, variance_size=None):
        return True

    with pytest.raises(ImplRegistrationError, match="gives 'variance_size' the default 4; expected the native"):
        rms_norm.register_impl("bad", rms_norm_a, supports_args=other_default)
    with pytest.raises(ImplRegistrationError, match="gives 'epsilon' the default 1e-06; expected no default"):
        rms_norm.register_impl("bad", rms_norm_a, supports_args=default_native_lacks)
    rms_norm.register_impl("ok", rms_norm_a, supports_args=only_fp32)  # no defaults: fine (all passed)
    rms_norm.register_impl("ok2", rms_norm_a, supports_args=lambda x, weight, epsilon, variance_size=None: True)


def test_an_installed_providers_name_is_not_the_users(monkeypatch):
    monkeypatch.setattr(ircore.dispatch.STATE.providers, "discovered", lambda: frozenset({"someone_installed"}))
    with pytest.raises(ImplRegistrationError, match="'someone_installed' is the name of an installed provider"):
        rms_norm.register_impl("someone_installed", rms_norm_a)
    assert "someone_installed" not in rms_norm.impls


def test_removal_is_recorded_and_explained():
    rms_norm.register_impl("gone", rms_norm_a)
    ircore.set_priority(rms_norm=["gone"])
    rms_norm.unregister_impl("gone")
    how = rms_norm.removed["gone"]
    assert how.startswith("removed by ircore.ops.rms_norm.unregister_impl() at ")
    assert "test_impl_registration.py:" in how
    x = torch.randn(2, 8)
    step = ircore.explain("rms_norm", x, None, 1e-6).steps[0]
    assert (step.provider, step.outcome, step.reason) == ("gone", "skipped", how)
    ircore.set_priority(rms_norm=None)


@pytest.mark.parametrize(
    "name, what",
    [
        ("vllm_c\n", "'vllm_c\\n' ends with whitespace or a control character ('\\n')"),
        ("native\n", "'native\\n' ends with whitespace or a control character ('\\n')"),
        ("mine ", "'mine ' ends with whitespace or a control character (' ')"),
        ("my\tkernels", "'my\\tkernels' contains whitespace or a control character ('\\t')"),
        ("x\x00", "'x\\x00' ends with whitespace or a control character ('\\x00')"),
    ],
)
def test_names_with_whitespace_or_control_characters_are_refused_saying_so(name, what):
    """A trailing newline passed the pattern's "$" (and so the reserved and installed-name checks)."""
    with pytest.raises(ImplRegistrationError) as info:
        rms_norm.register_impl(name, rms_norm_a)
    message = str(info.value)
    assert f"provider name {what}; a name must match ^[a-z][a-z0-9_]*$: lower-case ASCII letters" in message
    assert name not in rms_norm.impls and name.strip() not in rms_norm.impls


def test_a_value_that_is_not_a_function_is_not_given_a_location():
    with pytest.raises(ImplRegistrationError) as info:
        rms_norm.register_impl("mine", 42)
    assert str(info.value) == (
        "cannot register the implementation of op 'rms_norm' by provider 'mine': fn 42 (of type int) is "
        "not callable; pass the function, or the torch op, that computes rms_norm"
    )
