"""Declarative providers (an ``IRCORE_IMPLEMENTATIONS`` table) and ``ircore.testing.simulated_platform``.

The fixtures under ``tests/fixtures/declarative`` are installed as real distributions, and each
scenario runs in a fresh interpreter (see provider_env.py), like tests/test_plugins.py.
"""

from __future__ import annotations

import json

import pytest
import torch

import ircore
from ircore.errors import ImplRegistrationError
from ircore.kit import Registrar
from ircore.platform import Platform, current_platform
from ircore.testing import simulated_platform

from .provider_env import FIXTURES, ProviderEnv, install_fixtures

DECLARATIVE = FIXTURES / "declarative"
# entered for the rest of the scenario (kept referenced: a collected generator would exit it)
SIMULATED_ROCM = (
    "import ircore.testing\n"
    "_simulated = ircore.testing.simulated_platform(kind='rocm', gcn_arch='gfx942')\n"
    "_simulated.__enter__()\n"
)


@pytest.fixture(scope="module")
def penv(tmp_path_factory) -> ProviderEnv:
    site = tmp_path_factory.mktemp("site")
    install_fixtures(site, DECLARATIVE)
    return ProviderEnv(site, tmp_path_factory.mktemp("run"))


@pytest.fixture(scope="module")
def default_run(penv):
    return penv.probe()


def _line_of(fixture: str, module: str, startswith: str) -> str:
    path = DECLARATIVE / fixture / f"ircore_fixture_{fixture}" / module
    number = next(i for i, line in enumerate(path.read_text().splitlines(), 1) if line.startswith(startswith))
    return f"{path.name}:{number}"


# ---------------------------------------------------------------------- the table convention
@pytest.mark.slow
def test_table_provider_without_its_hardware_never_imports_its_functions(default_run):
    assert default_run.state("lazy") == ("unavailable", f"needs ROCm; found {current_platform().describe()}")
    assert "ircore_fixture_lazy" in default_run.imported
    assert "ircore_fixture_lazy.impls" not in default_run.imported


@pytest.mark.slow
def test_table_provider_registers_lazily_with_its_ranks(penv):
    run = penv.probe(prelude=SIMULATED_ROCM)
    probe = run.probe
    assert run.state("lazy") == ("active", "implements rms_norm on ROCm gfx942 (simulated)")
    assert "ircore_fixture_lazy.impls" in run.imported
    assert probe["error"] is None
    # its row's rank 5 ranks it after hooked_table (3, from its hook) and before native
    assert probe["priority"] == ["hooked_table", "lazy", "native"]
    assert probe["providers"]["lazy"]["ranks"] == {"rms_norm": 5}


@pytest.mark.slow
def test_hook_can_register_a_table_and_its_hook_ranks_win(default_run):
    state, reason = default_run.state("hooked_table")
    assert state == "active" and reason.startswith("implements rms_norm on CPU")
    assert default_run.probe["providers"]["hooked_table"]["ranks"] == {"rms_norm": 3}  # not the row's 7
    assert default_run.probe["chosen"] == "hooked_table"


@pytest.mark.slow
def test_table_and_hook_together_are_invalid(default_run):
    state, reason = default_run.state("both")
    assert state == "invalid"
    assert reason == (
        "ircore_fixture_both has both an ircore_register hook and an IRCORE_IMPLEMENTATIONS table; "
        "keep one (the hook may call registrar.register_table)"
    )
    assert "both" not in default_run.probe["impls"]["rms_norm"]


@pytest.mark.slow
def test_reference_to_a_missing_function_is_invalid_and_names_it(default_run):
    state, reason = default_run.state("bad_ref")
    assert state == "invalid"
    assert "provider 'bad_ref', op 'rms_norm': supports_args 'ircore_fixture_bad_ref:rms_norm_support'" in reason
    assert "has no attribute 'rms_norm_support'" in reason
    assert "bad_ref" not in default_run.probe["impls"]["rms_norm"]


@pytest.mark.slow
def test_row_rank_that_is_not_an_int_is_invalid(default_run):
    state, reason = default_run.state("bad_rank")
    assert state == "invalid"
    assert reason == (
        "the ranks of its ImplSpec rows: rank of 'rms_norm' is 'first'; expected an int (lower runs first)"
    )
    assert "bad_rank" not in default_run.probe["impls"]["rms_norm"]


@pytest.mark.slow
def test_function_module_that_raises_on_import_is_failed_with_its_line(default_run):
    state, reason = default_run.state("boom_table")
    assert state == "failed"
    assert reason.startswith("OSError: libkernels.so: cannot open shared object file (at ")
    assert _line_of("boom_table", "impls.py", "raise ") in reason
    assert reason.endswith(", in IRCORE_IMPLEMENTATIONS)")


@pytest.mark.slow
def test_cli_lists_table_providers(penv):
    run = penv.cli("list", "--json")
    states = {p["name"]: p["state"] for p in json.loads(run.stdout)["providers"]}
    assert states["lazy"] == "unavailable" and states["hooked_table"] == "active"


# ---------------------------------------------------------------------- simulated_platform
@pytest.mark.slow
def test_simulated_platform_reloads_providers_on_entry_and_exit(penv):
    code = (
        "import torch, ircore, ircore.testing\n"
        "from ircore.providers._manager import MANAGER\n"
        "x = torch.randn(2, 8)\n"
        "def now():\n"
        "    MANAGER.ensure_loaded()\n"
        "    return [MANAGER.records['lazy'].state.value, list(ircore.ops.rms_norm.impls),"
        " ircore.explain('rms_norm', x, None, 1e-6).chosen]\n"
        "before = now()\n"
        "with ircore.testing.simulated_platform(kind='rocm', device_name='stand-in MI300X') as p:\n"
        "    inside = now() + [ircore.current_platform() is p, p.describe()]\n"
        "after = now()\n"
        "print('OUT', before, inside, after)\n"
    )
    run = penv.run(["-c", code], env={"IRCORE_PROVIDERS": "lazy"})
    assert run.returncode == 0, run.stderr
    out = run.stdout.split("OUT", 1)[1].strip()
    assert out == (
        "['unavailable', [], 'native'] "
        "['active', ['lazy'], 'lazy', True, 'ROCm (stand-in MI300X)'] "
        "['unavailable', [], 'native']"
    )


def test_simulated_platform_fields_nesting_and_restore():
    real = current_platform()
    with simulated_platform(kind="cuda", capability=(10, 0), device_name="stand-in B200") as outer:
        assert outer == Platform(
            kind="cuda",
            device_type="cpu",
            device_name="stand-in B200",
            capability=(10, 0),
            torch_version=torch.__version__,
            device_count=1,
        )
        assert ircore.current_platform() is outer and outer.describe() == "CUDA sm_100 (stand-in B200)"
        xpu = Platform(kind="xpu", device_type="cpu", device_name="sim", capability=None, torch_version="2")
        with simulated_platform(xpu) as inner:
            assert inner is xpu and current_platform() is xpu
        assert current_platform() is outer
    assert current_platform() is real


def test_simulated_platform_usage_errors():
    with pytest.raises(TypeError, match="needs a Platform or at least kind="):
        with simulated_platform(device_type="cpu"):
            pass
    with pytest.raises(TypeError, match="not both"):
        with simulated_platform(current_platform(), kind="rocm"):
            pass


# ---------------------------------------------------------------------- Registrar.register_table
def test_register_table_rejects_what_is_not_a_table_of_implspecs():
    with pytest.raises(ImplRegistrationError, match=r"IRCORE_IMPLEMENTATIONS is a list; expected a dict"):
        Registrar("p").register_table([("rms_norm", None)])
    with pytest.raises(ImplRegistrationError, match=r"IRCORE_IMPLEMENTATIONS\['rms_norm'\] is .*expected an ircore.ImplSpec"):
        Registrar("p").register_table({"rms_norm": ircore.ops.rms_norm.native})
    with pytest.raises(ImplRegistrationError, match="'no_colon' is not a 'module:attribute' reference"):
        Registrar("p").register_table({"rms_norm": ircore.ImplSpec("no_colon")})


def test_impl_table_follows_the_naming_convention():
    table = ircore.impl_table(
        "tests.impls", ["rms_norm", "silu_and_mul"], inplace=("rms_norm",), rank={"rms_norm": 4}
    )
    assert table == {
        "rms_norm": ircore.ImplSpec("tests.impls:rms_norm", "tests.impls:rms_norm_supports", inplace=True, rank=4),
        "silu_and_mul": ircore.ImplSpec("tests.impls:silu_and_mul", "tests.impls:silu_and_mul_supports"),
    }
    assert ircore.impl_table("m", ["rms_norm"], cache_by_signature=True, rank=9)["rms_norm"] == ircore.ImplSpec(
        "m:rms_norm", "m:rms_norm_supports", cache_by_signature=True, rank=9
    )
