"""Helpers for vendor adapters (ircore.kit), on this CPU build of torch.

Among them the answer to "the XPU dispatch key needs safe registration": a kernel registered for
a device this build lacks neither fails nor disturbs other devices, and a second registration is
refused with the place of the first, where ``Library.impl`` would replace it with a warning.
"""

from __future__ import annotations

import sys

import pytest
import torch

from ircore.errors import ImplRegistrationError
from ircore.kit import call_form_problem, import_vendor, register_device_kernel, torch_op, unit_weight


@pytest.fixture
def lib():
    namespace = "ircore_test_vendorns"
    library = torch.library.Library(namespace, "DEF")
    library.define("f(Tensor x) -> Tensor")
    library.impl("f", lambda x: x + 1, "CPU")
    yield library
    library._destroy()


def test_xpu_kernel_on_a_build_without_xpu_leaves_other_devices_alone(lib):
    assert not torch.xpu.is_available()
    op = getattr(torch.ops, lib.ns).f
    register_device_kernel(lib, "f", lambda x: x + 2, "xpu")  # no error on a CPU build
    assert torch._C._dispatch_has_kernel_for_dispatch_key(f"{lib.ns}::f", "XPU")
    assert torch.equal(op(torch.zeros(2)), torch.ones(2))  # CPU calls keep the CPU kernel


def test_second_registration_is_refused_with_the_first_place(lib):
    register_device_kernel(lib, "f", lambda x: x + 2, "xpu")
    with pytest.raises(ImplRegistrationError) as info:
        register_device_kernel(lib, "f", lambda x: x + 3, "xpu")
    assert str(info.value).startswith(f"{lib.ns}::f already has a XPU kernel (registered at ")
    assert "test_vendor.py:" in str(info.value)  # the first registration, in this file
    with pytest.raises(ImplRegistrationError, match=r"already has a CPU kernel"):
        register_device_kernel(lib, "f", lambda x: x, "cpu")  # the one Library.impl made


def test_unknown_device_type_is_refused(lib):
    with pytest.raises(ImplRegistrationError, match="'gpu': not a torch device type"):
        register_device_kernel(lib, "f", lambda x: x, "gpu")


def test_torch_op_sees_ops_not_namespaces():
    assert hasattr(torch.ops, "surely_no_such_namespace")  # why hasattr(torch.ops, ns) says nothing
    assert torch_op("surely_no_such_namespace", "rms_norm") is None
    assert torch_op("aten", "relu") is torch.ops.aten.relu


def test_import_vendor_reasons(tmp_path, monkeypatch):
    assert import_vendor("no_such_vendor_pkg", needs="X (pip install x)") == (
        "X (pip install x) is not installed: no module named 'no_such_vendor_pkg'"
    )
    (tmp_path / "raising_vendor_pkg.py").write_text("raise RuntimeError('ROCm version file not found')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert import_vendor("raising_vendor_pkg", needs="X") == (
        "import raising_vendor_pkg failed: RuntimeError: ROCm version file not found"
    )
    assert "raising_vendor_pkg" not in sys.modules
    assert import_vendor("json", needs="X") is sys.modules["json"]


def test_call_form_problem(lib):
    def current(out, input, residual, weight, epsilon, gemma_norm=False):
        pass

    def required_extra(out, input, residual, weight, epsilon, gemma_norm):
        pass

    expected = ("out", "input", "residual", "weight", "epsilon")
    assert call_form_problem("f", current, expected) is None
    assert call_form_problem("f", required_extra, expected) == (
        "f takes (out, input, residual, weight, epsilon, gemma_norm); "
        "this provider calls it as (out, input, residual, weight, epsilon)"
    )
    assert call_form_problem("g", lambda *a, **k: None, ("x",)) == "cannot read the parameters of g"
    op = getattr(torch.ops, lib.ns).f  # a torch op: parameters from its schema
    assert call_form_problem("op", op, ("x",)) is None
    assert call_form_problem("op", op, ("input",)) == "op takes (x); this provider calls it as (input)"


def test_unit_weight_is_cached_but_never_a_traced_one():
    x = torch.randn(2, 8)
    assert unit_weight(x) is unit_weight(x) and torch.equal(unit_weight(x), torch.ones(8))
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        fake = torch.empty(2, 16)
        assert type(unit_weight(fake)) is not torch.Tensor
    real = unit_weight(torch.randn(2, 16))
    assert type(real) is torch.Tensor and torch.equal(real, torch.ones(16))  # the fake was not kept


def test_kit_has_no_opaque_op_helpers():
    """Compiled graphs hold the op ircore builds for every implementation: adapters need neither
    an opaque op of their own nor a tracing() branch, and the kit offers neither."""
    import ircore.kit

    assert not {"opaque_op", "tracing"} & set(dir(ircore.kit))
