"""Mistakes a provider author makes, and the message that says what to change.

The fixtures under ``tests/fixtures/messages`` are installed as real distributions and loaded in
fresh interpreters (see provider_env.py), one mistake each: a misspelt hook, a hook parameter the
hook does not pass, a hook left unmarked, an entry point naming an attribute, a table row naming
a module that does not exist, a table row for an unknown op. In-process tests check the same
messages where they are made.
"""

from __future__ import annotations

import json
import types

import pluggy
import pytest

import ircore
from ircore.errors import ImplRegistrationError
from ircore.kit import Registrar
from ircore.providers import hookspecs
from ircore.providers._discovery import value_problem
from ircore.providers._hooks import marked_hook_problem, unmarked_hooks

from .provider_env import FIXTURES, ProviderEnv, install_fixtures

MESSAGES = FIXTURES / "messages"
KNOWN_OPS = str(sorted(ircore.ops.__all__))  # every op of the library, as the message lists them
UNMARKED = (
    "ircore_fixture_unmarked.ircore_check_platform is not marked @ircore.hookimpl, so ircore never "
    "calls it; decorate it with @ircore.hookimpl (or rename it if it is not meant as a hook)"
)
UNBOUNDED = (
    "ircore-fixture-unmarked 1.0.0 requires ircore>=0.1 with no upper bound, so a future ircore with "
    "an incompatible provider API would still load it; its next release should pin a range, e.g. "
    "ircore>=0.1,<0.2"
)


@pytest.fixture(scope="module")
def penv(tmp_path_factory) -> ProviderEnv:
    site = tmp_path_factory.mktemp("site")
    install_fixtures(site, MESSAGES)
    return ProviderEnv(site, tmp_path_factory.mktemp("run"))


@pytest.fixture(scope="module")
def listed(penv) -> tuple[dict, object]:
    """``ircore list --json`` over every fixture: name -> record, and the run (stderr, imports)."""
    run = penv.cli("list", "--json")
    assert run.returncode == 0, run.stderr
    return {p["name"]: p for p in json.loads(run.stdout)["providers"]}, run


def _state(listed, name: str) -> tuple[str, str]:
    record = listed[0][name]
    return record["state"], record["reason"]


# ---------------------------------------------------------------------- hooks
@pytest.mark.slow  # fresh interpreters over installed fixtures
def test_misspelt_hook_names_the_valid_hooks_and_the_nearest(listed):
    assert _state(listed, "hook_typo") == (
        "invalid",
        "ircore_fixture_hook_typo.ircore_registr is marked @ircore.hookimpl, but no ircore hook is named "
        "'ircore_registr' (did you mean 'ircore_register'?); valid hooks: ircore_check_platform, "
        "ircore_default_priority, ircore_register",
    )


@pytest.mark.slow  # fresh interpreters over installed fixtures
def test_hook_parameter_not_in_the_spec_names_the_allowed_ones(listed):
    assert _state(listed, "hook_param") == (
        "invalid",
        "ircore_fixture_hook_param.ircore_register(registrar, platfrom): parameter 'platfrom' is not one "
        "that ircore passes to ircore_register (did you mean 'platform'?); allowed parameters: registrar, "
        "platform (any of them, by name)",
    )


@pytest.mark.slow  # fresh interpreters over installed fixtures
def test_unmarked_hook_function_is_a_warning_in_the_log_and_the_record(listed):
    records, run = listed
    # it still loads (its table registers), but its platform check never runs
    assert records["unmarked"]["state"] == "active"
    assert records["unmarked"]["warnings"] == [UNMARKED]
    assert f"provider unmarked: {UNMARKED}" in run.stderr.splitlines()  # logger "ircore", WARNING
    assert all(r["warnings"] == [] for name, r in records.items() if name != "unmarked")


@pytest.mark.slow  # fresh interpreters over installed fixtures
def test_list_and_doctor_show_the_warnings(penv):
    run = penv.cli("list")
    assert run.returncode == 0, run.stderr
    assert f"  warning: unmarked: {UNMARKED}" in run.stdout.splitlines()
    run = penv.cli("doctor", env={"IRCORE_PROVIDERS": "unmarked"})
    assert run.returncode == 0, run.stdout  # warnings are no problems
    lines = run.stdout.splitlines()
    assert f"  warning: unmarked: {UNMARKED}" in lines
    # the distribution's Requires-Dist: ircore>=0.1 has no upper bound (the other fixtures' have)
    assert f"  warning: unmarked: {UNBOUNDED}" in lines
    assert [line for line in lines if "no upper bound" in line] == [f"  warning: unmarked: {UNBOUNDED}"]
    doc = json.loads(penv.cli("doctor", "--json", env={"IRCORE_PROVIDERS": "unmarked"}).stdout)
    assert doc["warnings"] == [
        {"provider": "unmarked", "warning": UNMARKED},
        {"provider": "unmarked", "warning": UNBOUNDED},
    ]


def test_hook_checks_in_process():
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    module = types.ModuleType("prov")

    @ircore.hookimpl(specname="ircore_check_platfrom")
    def check(platform):
        return None

    module.check = check
    assert marked_hook_problem(pm, module) == (
        "prov.check is marked @ircore.hookimpl, but no ircore hook is named 'ircore_check_platfrom' "
        "(did you mean 'ircore_check_platform'?); valid hooks: ircore_check_platform, "
        "ircore_default_priority, ircore_register"
    )
    del module.check

    @ircore.hookimpl
    def ircore_default_priority(platform, ops, scale=1.0):  # a parameter with a default is never passed
        return {}

    module.ircore_default_priority = ircore_default_priority
    assert marked_hook_problem(pm, module) == (
        "prov.ircore_default_priority(platform, ops): parameter 'ops' is not one that ircore passes to "
        "ircore_default_priority; allowed parameters: platform (any of them, by name)"
    )
    module.ircore_default_priority = ircore.hookimpl(lambda platform, scale=1.0: {})
    # optionalhook: pluggy lets a provider implement a hook this core lacks (one of a later core)
    module.ircore_later_hook = ircore.hookimpl(optionalhook=True)(lambda platform: None)
    assert marked_hook_problem(pm, module) is None and unmarked_hooks(pm, module) == []
    pm.register(module)  # what the loader does next: pluggy agrees
    module.ircore_register = lambda registrar: None
    assert unmarked_hooks(pm, module) == [
        "prov.ircore_register is not marked @ircore.hookimpl, so ircore never calls it; decorate it with "
        "@ircore.hookimpl (or rename it if it is not meant as a hook)"
    ]


def test_an_unmarked_register_hook_without_a_table_says_to_mark_it():
    from ircore.providers._manager import ProviderManager

    warning = (
        "prov.ircore_register is not marked @ircore.hookimpl, so ircore never calls it; decorate it with "
        "@ircore.hookimpl (or rename it if it is not meant as a hook)"
    )
    assert ProviderManager._registration_problem("prov", False, None, [warning]) == (
        "prov.ircore_register is not marked @ircore.hookimpl, so nothing registers; decorate it with @ircore.hookimpl"
    )
    assert ProviderManager._registration_problem("prov", False, {}, [warning]) is None  # its table registers


# ---------------------------------------------------------------------- entry points and tables
@pytest.mark.slow  # fresh interpreters over installed fixtures
def test_entry_point_naming_an_attribute_is_invalid_and_never_imported(listed):
    assert _state(listed, "ep_attr") == (
        "invalid",
        "entry point value 'ircore_fixture_ep_attr:provider' must be a module, not a module:attribute "
        "reference: write 'ircore_fixture_ep_attr.provider' if 'provider' is a module of 'ircore_fixture_ep_attr', "
        "else 'ircore_fixture_ep_attr' (pkg.provider, not pkg.provider:attr); ircore imports "
        "that module and reads its hooks or its IRCORE_IMPLEMENTATIONS table",
    )
    assert "ircore_fixture_ep_attr" not in listed[1].imported
    assert value_problem("pkg.provider") is None
    assert value_problem("pkg..provider") == (
        "entry point value 'pkg..provider' is not a module name (expected a dotted module path, e.g. pkg.provider)"
    )


@pytest.mark.slow  # fresh interpreters over installed fixtures
def test_table_row_naming_a_missing_module_names_the_row_and_the_reference(listed):
    assert _state(listed, "typo_module") == (
        "invalid",
        "provider 'typo_module', op 'rms_norm': fn 'ircore_fixture_typo_module.kernel:rms_norm' names "
        "module 'ircore_fixture_typo_module.kernel', which cannot be imported: no module named "
        "'ircore_fixture_typo_module.kernel'; did you mean 'ircore_fixture_typo_module.kernels'?",
    )


@pytest.mark.slow  # fresh interpreters over installed fixtures
def test_table_row_for_an_unknown_op_says_so_before_looking_up_its_functions(listed):
    # impl_table("...", ["rms_nrom"]) names functions the module lacks too: the op is reported
    assert _state(listed, "table_unknown_op") == (
        "invalid",
        f"provider 'table_unknown_op' registers unknown op 'rms_nrom'; known ops: {KNOWN_OPS}; "
        "did you mean 'rms_norm'?",
    )


def test_table_messages_in_process():
    with pytest.raises(ImplRegistrationError) as info:
        Registrar("p").register_table(ircore.impl_table("tests.impls", ["silu_and_mull"]))
    assert str(info.value) == (
        f"provider 'p' registers unknown op 'silu_and_mull'; known ops: {KNOWN_OPS}; did you mean 'silu_and_mul'?"
    )
    with pytest.raises(ImplRegistrationError) as info:
        Registrar("p").register_table({"rms_norm": ircore.ImplSpec("tests.implz:rms_norm_a")})
    assert str(info.value) == (
        "provider 'p', op 'rms_norm': fn 'tests.implz:rms_norm_a' names module 'tests.implz', which cannot "
        "be imported: no module named 'tests.implz'; did you mean 'tests.impls'?"
    )
    with pytest.raises(ImplRegistrationError) as info:
        Registrar("p").register_table({"rms_norm": ircore.ImplSpec("tests.impls:rms_norm_opaqe")})
    assert str(info.value).endswith("has no attribute 'rms_norm_opaqe'; did you mean 'rms_norm_opaque'?")


# ---------------------------------------------------------------------- ircore verify
@pytest.mark.slow  # fresh interpreters over installed fixtures
def test_verify_unknown_provider_names_the_entry_point_group_and_the_installed(penv):
    run = penv.cli("verify", "--provider", "unmarkd")
    assert run.returncode == 2
    installed = sorted(
        ["ep_attr", "hook_param", "hook_typo", "table_unknown_op", "typo_module", "unmarked", *penv.real]
    )
    assert run.stderr.strip().splitlines()[-1] == (
        "ircore: error: unknown provider 'unmarkd': no installed distribution has an entry point named "
        "'unmarkd' in the group 'ircore.providers', where ircore finds providers; installed providers: "
        f"{installed}"
    )
