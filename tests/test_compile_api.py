"""The compile path's pieces that need no compile: maybe_inplace's graph node, settings, cache key."""

from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import ircore
from ircore import config
from ircore.compile._passes import IrcorePostGradPass
from ircore.compile._settings import effective_fusions, normalize_fusions
from ircore.config import FUSIONS
from ircore.ops import fused_add_rms_norm, rms_norm

from . import impls


def _fused_inputs():
    torch.manual_seed(0)
    return torch.randn(4, 16), torch.randn(4, 16), torch.randn(16), 1e-6


# ---------------------------------------------------------------------- maybe_inplace overload
def test_maybe_inplace_overload_schema_declares_the_mutation():
    schema = str(torch.ops.ircore.fused_add_rms_norm.maybe_inplace._schema)
    assert schema.startswith("ircore::fused_add_rms_norm.maybe_inplace(Tensor(a0!) x, Tensor(a1!) x_residual,")
    assert schema.endswith("-> ()")
    assert rms_norm.torch_inplace_op is None  # no in-place arguments, no overload


@pytest.mark.parametrize("provider", ["native", "inplace"])
def test_opcheck_maybe_inplace_overload(provider):
    if provider == "inplace":
        fused_add_rms_norm.register_impl("inplace", impls.fused_inplace, inplace=True)
    with ircore.priority(fused_add_rms_norm=[provider]):
        x, r, w, eps = _fused_inputs()
        torch.library.opcheck(torch.ops.ircore.fused_add_rms_norm.maybe_inplace, (x, r, w, eps))


def test_maybe_inplace_node_leaves_the_results_in_its_arguments():
    x, r, w, eps = _fused_inputs()
    expected = fused_add_rms_norm(x, r, w, eps)
    torch.ops.ircore.fused_add_rms_norm.maybe_inplace(x, r, w, eps)
    torch.testing.assert_close(x, expected[0])
    torch.testing.assert_close(r, expected[1])


def test_symbolic_trace_of_maybe_inplace_records_one_node():
    fused_add_rms_norm.register_impl("inplace", impls.fused_inplace, inplace=True)
    gm = torch.fx.symbolic_trace(lambda x, r, w: fused_add_rms_norm.maybe_inplace(x, r, w, 1e-6))
    calls = [n for n in gm.graph.nodes if n.op == "call_function"]
    assert [str(n.target) for n in calls] == ["ircore.fused_add_rms_norm.maybe_inplace"]
    x, r, w, eps = _fused_inputs()
    expected = fused_add_rms_norm(x, r, w, eps)
    out, res = gm(x, r, w)
    torch.testing.assert_close(out, expected[0])
    torch.testing.assert_close(res, expected[1])


def test_make_fx_of_maybe_inplace_records_the_overload():
    gm = make_fx(lambda x, r, w: fused_add_rms_norm.maybe_inplace(x, r, w, 1e-6))(*_fused_inputs()[:3])
    assert "ircore.fused_add_rms_norm.maybe_inplace" in {str(n.target) for n in gm.graph.nodes}


# ---------------------------------------------------------------------- fusions setting
@pytest.fixture
def clean_api():
    config.reset_api_settings()
    yield
    config.reset_api_settings()


# the other fusions (QK-norm + RoPE, norm/activation + fp8 quant), in the same setting
_OTHERS = ("qk_norm_rope", "hf_qk_norm_rope", "rms_norm_quant", "silu_and_mul_quant")
QK_ON = dict.fromkeys(_OTHERS, True)
QK_OFF = dict.fromkeys(_OTHERS, False)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("all", dict.fromkeys(FUSIONS, True)),
        ("none", dict.fromkeys(FUSIONS, False)),
        ("add_rms_norm=off", {"add_rms_norm": False}),
        ("add_rms_norm=0, rms_norm_reshape=on", {"add_rms_norm": False, "rms_norm_reshape": True}),
        (["rms_norm_reshape"], {**dict.fromkeys(FUSIONS, False), "rms_norm_reshape": True}),
        ({"rms_norm_reshape": False}, {"rms_norm_reshape": False}),
    ],
)
def test_fusion_settings_forms(value, expected):
    assert normalize_fusions(value, "test") == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("add_norm=off", f"test: unknown fusion 'add_norm'; fusions: {', '.join(FUSIONS)}"),
        ("add_rms_norm=maybe", "test: cannot read 'add_rms_norm=maybe'; expected NAME=on|off"),
        ({"add_rms_norm": "no"}, "test: fusion 'add_rms_norm' must be true or false"),
        (3, "test: expected 'all', 'none', a list of fusion names"),
    ],
)
def test_fusion_settings_errors_name_the_source(value, message):
    with pytest.raises(ircore.ConfigError) as err:
        normalize_fusions(value, "test")
    assert message in str(err.value)


def test_fusions_precedence_per_name(clean_api, monkeypatch, tmp_path):
    (tmp_path / "ircore.toml").write_text('providers = "none"\n[fusions]\nadd_rms_norm = false\nrms_norm_reshape = false\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("IRCORE_FUSIONS", "rms_norm_reshape=on")
    config.reset_api_settings()  # read the environment and the file again
    ircore.configure(providers="none")
    assert effective_fusions() == {"add_rms_norm": False, "rms_norm_reshape": True, **QK_ON}
    ircore.configure(fusions={"add_rms_norm": True})
    assert effective_fusions() == {"add_rms_norm": True, "rms_norm_reshape": True, **QK_ON}
    assert effective_fusions("none") == {"add_rms_norm": False, "rms_norm_reshape": False, **QK_OFF}


def test_bad_fusions_in_the_environment_name_the_variable(clean_api, monkeypatch):
    monkeypatch.setenv("IRCORE_FUSIONS", "add_rms_norm=perhaps")
    with pytest.raises(ircore.ConfigError, match="IRCORE_FUSIONS: cannot read 'add_rms_norm=perhaps'"):
        config.read_environment()


# ---------------------------------------------------------------------- the cache key
def test_pass_uuid_covers_everything_that_changes_a_lowering(clean_api):
    def key():
        return IrcorePostGradPass().uuid()

    base = key()
    assert key() == base  # deterministic
    rms_norm.register_impl("prov_a", impls.rms_norm_a)
    with_impl = key()
    assert with_impl != base
    ircore.set_priority(rms_norm=["native"])
    assert key() != with_impl
    ircore.set_priority(rms_norm=None)
    assert key() == with_impl  # going back gives the same key
    ircore.configure(fusions={"add_rms_norm": False})
    assert key() != with_impl
    assert IrcorePostGradPass(fusions="all").uuid() == with_impl  # a per-compile override counts too
    assert IrcorePostGradPass(leave_to_inductor={"rms_norm": 64}).uuid() != with_impl


def test_pass_uuid_is_none_when_a_user_pass_has_no_uuid():
    assert IrcorePostGradPass(user_passes=[lambda graph: None]).uuid() is None


def test_impl_uuid_hashes_its_source_file():
    impl = rms_norm.register_impl("prov_a", impls.rms_norm_a)
    other = fused_add_rms_norm.register_impl("prov_a", impls.fused_inplace, inplace=True)
    assert impl.uuid() == impl.uuid() and len(impl.uuid()) == 32
    assert impl.uuid() != other.uuid()  # another op and function, though the same file


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"rms_nrom": 64}, "unknown op 'rms_nrom'"),
        ({"rms_norm": -1}, "'rms_norm' needs an element count (an int >= 0), got -1"),
        ({"rms_norm": True}, "needs an element count"),
        ({"rms_norm": 1.5}, "needs an element count"),
        (["rms_norm"], "expected a mapping of op name -> element count"),
    ],
)
def test_leave_to_inductor_errors_name_the_argument_at_the_call(value, message):
    with pytest.raises(ircore.ConfigError) as err:
        ircore.compile(lambda x: x, leave_to_inductor=value)
    assert str(err.value).startswith("ircore.compile(leave_to_inductor=...): ") and message in str(err.value)


def test_leave_to_inductor_errors_name_the_function_called():
    # the backend and the pass, used without ircore.compile, say which of them was given the value
    with pytest.raises(ircore.ConfigError, match=r"^ircore\.compile\.backend\(leave_to_inductor=\.\.\.\): unknown op"):
        ircore.compile.backend(None, [], leave_to_inductor={"rms_nrom": 64})
    with pytest.raises(
        ircore.ConfigError, match=r"^ircore\.compile\.post_grad_pass\(leave_to_inductor=\.\.\.\): unknown op"
    ):
        ircore.compile.post_grad_pass(leave_to_inductor={"rms_nrom": 64})
