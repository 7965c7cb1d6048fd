"""Providers cannot touch each other or the user's configuration; strict mode and doctor.

The broken-provider matrix: the fixture distribution ``hostile`` has one entry point per thing a
provider may not do (tests/fixtures/hostile), installed as a real distribution next to the
well-behaved ``good``, and loaded in one fresh interpreter; each test reads its part of that one
run (fast: one interpreter for the whole matrix).
"""

from __future__ import annotations

import json

import pytest

from .provider_env import ProviderEnv, install_fixtures

pytestmark = pytest.mark.slow  # fresh interpreters over pip-installed fixtures (the matrix and the CLI)

HOSTILE = [
    "evil_impersonate", "evil_swallow", "evil_set_priority", "evil_configure", "evil_rank_hook",
    "evil_import", "evil_direct", "evil_layers", "evil_forge", "evil_signature", "evil_kwonly", "evil_default",
    "evil_calls_op", "rogue_impersonate", "rogue_unregister", "rogue_replace",
]  # fmt: skip
#: The second pass: identity, BaseExceptions, configuration leaks, threads, the guard's reach.
SECOND = [
    "evil_identity", "evil_forced_identity", "evil_exit_import", "evil_generator_exit", "evil_exit_predicate",
    "evil_exit_kernel", "evil_open_scope", "evil_environ", "evil_late_thread", "evil_worker",
    "evil_replace_native", "evil_force_native", "evil_replace_dispatch", "evil_kernel_config",
    "rogue_mutate_impl", "rogue_exit_after_write",
]  # fmt: skip
ALL_HOSTILE = [*HOSTILE, *SECOND, "rogue_interrupt"]
RULE = "a provider registers only through the registrar its ircore_register hook receives"

# What each scenario script starts with: the CLI's output as [exit code, text], and what a call raised.
PRELUDE = r"""
import contextlib, io, json, os, torch, ircore, ircore.dispatch
from ircore import cli
from ircore.providers._manager import MANAGER

def cli_text(*argv):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = cli.main(list(argv))
    return [code, buf.getvalue()]

def attempt(fn):
    try:
        fn()
        return "no error"
    except Exception as exc:
        cause = "" if exc.__cause__ is None else f" | cause: {exc.__cause__!r}"
        return f"{type(exc).__name__}: {exc}{cause}"
"""

MATRIX = PRELUDE + r"""
import ircore_fixture_good as good

out = {}
x = torch.randn(2, 8)
out["priority"] = {op: ircore.get_priority(op) for op in ("rms_norm", "silu_and_mul")}
out["states"] = {n: [r.state.value, r.reason] for n, r in MANAGER.records.items()}
out["impls"] = {n: {p: i.fn.__module__ for p, i in op.impls.items()} for n, op in ircore.all_ops().items()}
out["explain"] = ircore.explain("rms_norm", x, None, 1e-6).to_dict()
out["correct"] = torch.equal(ircore.ops.rms_norm(x, None, 1e-6), ircore.ops.rms_norm.native(x, None, 1e-6))
out["good_calls"] = list(good.CALLS)
import ircore_fixture_hostile.evil_calls_op as calls_op
out["checked_in_hook"] = calls_op.CHECKED
out["list"] = cli_text("list")
# the user, outside any hook: an installed provider's name is not theirs to take; removing is
# theirs to do, and list, explain and doctor say so
out["user_register"] = attempt(lambda: ircore.ops.rms_norm.register_impl("good", good.rms_norm))
out["user_register_invalid"] = attempt(
    lambda: ircore.ops.rms_norm.register_impl("evil_kwonly", good.rms_norm))
ircore.ops.rms_norm.unregister_impl("good")
out["removed"] = {
    "explain": ircore.explain("rms_norm", x, None, 1e-6).to_dict(),
    "list": cli_text("list", "--json"),
    "list_text": cli_text("list"),
    "doctor": cli_text("doctor"),
}
ircore.configure(disable=["good"])
out["disabled_explain"] = ircore.explain("fused_add_rms_norm", x, x.clone(), None, 1e-6).to_dict()
print("MATRIX" + json.dumps(out))
"""


@pytest.fixture(scope="module")
def penv(tmp_path_factory) -> ProviderEnv:
    site = tmp_path_factory.mktemp("site")
    install_fixtures(site, ["good", "hostile", "unavailable", "incompatible"])
    return ProviderEnv(site, tmp_path_factory.mktemp("run"))


@pytest.fixture(scope="module")
def matrix(penv) -> dict:
    # The user's own priority: hooks that try to change it must leave it as it is.
    env = {"IRCORE_PROVIDERS": ",".join(["good", *HOSTILE]), "IRCORE_PRIORITY": "rms_norm=good"}
    run = penv.run(["-c", MATRIX], env)
    line = next((line for line in run.stdout.splitlines() if line.startswith("MATRIX")), None)
    assert line is not None, run.stderr
    return json.loads(line[len("MATRIX") :])


def _state(matrix: dict, name: str) -> tuple[str, str]:
    state, reason = matrix["states"][name]
    return state, reason


# ---------------------------------------------------------------------- registrations (items 1, 2)
def test_impersonation_is_refused_and_the_real_provider_keeps_its_name(matrix):
    for name in ("evil_impersonate", "rogue_impersonate"):  # it loads before "good", and after
        state, reason = _state(matrix, name)
        assert state == "invalid", (name, reason)
        assert reason.startswith("called ircore.ops.rms_norm.register_impl('good', ...) (at "), reason
        assert f"ircore_fixture_hostile/{name}.py:" in reason and "in ircore_register" in reason
        assert RULE in reason
    assert _state(matrix, "good")[0] == "active"
    assert matrix["impls"]["rms_norm"] == {"good": "ircore_fixture_good"}
    assert matrix["explain"]["chosen"] == "good" and matrix["correct"] and matrix["good_calls"]


def test_a_swallowed_refusal_still_rejects_the_provider_and_keeps_nothing_of_it(matrix):
    state, reason = _state(matrix, "evil_swallow")
    assert state == "invalid" and "register_impl('good', ...)" in reason
    assert "evil_swallow" not in matrix["impls"]["silu_and_mul"]


def test_removing_another_providers_implementation_from_a_hook_is_refused(matrix):
    state, reason = _state(matrix, "rogue_unregister")
    assert state == "invalid"
    assert reason.startswith("called ircore.ops.rms_norm.unregister_impl('good') (at ")


def test_writing_the_op_tables_directly_is_found_and_undone(matrix):
    state, reason = _state(matrix, "evil_direct")
    assert state == "invalid"
    assert reason.startswith("changed the implementations of rms_norm directly, while ircore loaded it; ")
    assert reason.endswith("(all undone)")
    state, reason = _state(matrix, "rogue_replace")  # it also raised: rejected for the change
    assert state == "invalid" and "changed the implementations of rms_norm directly" in reason
    state, reason = _state(matrix, "evil_layers")  # the user's IRCORE_PRIORITY: see the next test
    assert state == "invalid" and reason.startswith("changed the configured priorities directly")


def test_a_forged_registrar_cannot_commit(matrix):
    state, reason = _state(matrix, "evil_forge")
    assert state == "invalid" and reason.startswith("called Registrar('good').commit() (at ")


def test_an_op_called_from_a_hook_runs_without_loading_providers_inside_the_hook(matrix):
    state, _ = _state(matrix, "evil_calls_op")
    assert state == "active"
    assert matrix["checked_in_hook"] == [[[0.7310585975646973, 0.7310585975646973]]]


# ---------------------------------------------------------------------- configuration (item 3)
def test_configuration_from_hooks_is_refused_and_the_users_stays(matrix):
    expected = {
        "evil_set_priority": "called ircore.set_priority() (at ",
        "evil_configure": "called ircore.configure() (at ",
        "evil_rank_hook": "called ircore.set_priority() (at ",
        "evil_import": "called ircore.set_priority() (at ",
    }
    for name, start in expected.items():
        state, reason = _state(matrix, name)
        assert state == "invalid" and reason.startswith(start), (name, reason)
    assert "in ircore_default_priority" in _state(matrix, "evil_rank_hook")[1]
    assert "while being imported" in _state(matrix, "evil_import")[1]
    assert matrix["priority"]["rms_norm"] == ["good", "native"]  # IRCORE_PRIORITY, untouched
    assert matrix["priority"]["silu_and_mul"] == ["evil_calls_op", "native"]
    assert matrix["explain"]["source"] == "IRCORE_PRIORITY"


# ---------------------------------------------------------------------- registration checks
def test_bad_hook_signature_reason_names_the_parameter_in_list_text(matrix):
    state, reason = _state(matrix, "evil_signature")
    assert state == "invalid" and "\n" not in reason
    assert reason == (
        "ircore_fixture_hostile.evil_signature.ircore_register(registrar, extra): parameter 'extra' is not "
        "one that ircore passes to ircore_register; allowed parameters: registrar, platform (any of them, by name)"
    )
    code, text = matrix["list"]
    assert code == 0
    line = next(line for line in text.splitlines() if line.split()[:1] == ["evil_signature"])
    assert "parameter 'extra' is not one that ircore passes to ircore_register" in line


def test_predicates_with_keyword_only_parameters_or_other_defaults_are_rejected(matrix):
    state, reason = _state(matrix, "evil_kwonly")
    assert state == "invalid"
    assert "has keyword-only parameter 'x'; every parameter must be positional" in reason
    state, reason = _state(matrix, "evil_default")
    assert state == "invalid"
    assert "gives 'variance_size' the default 4; expected the native default None (or none)" in reason


# ---------------------------------------------------------------------- what the user may do
def test_the_user_cannot_register_under_an_installed_providers_name(matrix):
    for key in ("user_register", "user_register_invalid"):
        assert matrix[key].startswith("ImplRegistrationError: cannot register the implementation of op"), key
        assert "is the name of an installed provider" in matrix[key]


def test_a_removed_implementation_is_reported_by_list_explain_and_doctor(matrix):
    removed = matrix["removed"]
    step = next(s for s in removed["explain"]["steps"] if s["provider"] == "good")
    assert step["outcome"] == "skipped"
    assert step["reason"].startswith("removed by ircore.ops.rms_norm.unregister_impl() at <string>:")
    good = next(p for p in json.loads(removed["list"][1])["providers"] if p["name"] == "good")
    assert good["state"] == "active" and good["ops"] == ["fused_add_rms_norm"]
    assert good["removed"] == {"rms_norm": step["reason"]}
    assert good["reason"].startswith("implements fused_add_rms_norm on CPU")
    assert "; rms_norm removed by ircore.ops.rms_norm.unregister_impl() at" in good["reason"]
    assert "rms_norm removed by" in removed["list_text"][1]
    assert "good: its implementation of rms_norm was removed by" in removed["doctor"][1]


def test_explain_names_a_disabled_provider_once(penv, matrix):
    step = matrix["disabled_explain"]["steps"][0]  # disabled after it loaded
    assert step["reason"] == "provider 'good' is disabled: listed in ircore.configure(): disable"
    disable = ",".join([*penv.real, "good", "incompatible", *ALL_HOSTILE])
    env = {"IRCORE_DISABLE": disable, "IRCORE_PRIORITY": "rms_norm=good"}
    run = penv.cli("explain", "rms_norm", "--shape", "2x8", "--dtype", "float32", env=env)  # never loaded
    assert run.returncode == 0, run.stderr
    assert "  good         skipped         provider 'good' is disabled: listed in IRCORE_DISABLE\n" in run.stdout


# ---------------------------------------------------------------------- strict mode and doctor
def test_strict_mode_refuses_broken_providers_and_unavailable_ones_the_user_named(penv):
    run = penv.cli("doctor", "--json", env={"IRCORE_STRICT": "1", "IRCORE_PROVIDERS": "good,unavailable,incompatible"})
    assert run.returncode == 1, run.stdout
    report = json.loads(run.stdout)
    assert report["broken"] == ["incompatible", "unavailable"]
    error = report["config_error"]
    assert error.startswith("strict mode (IRCORE_STRICT): 2 provider(s) broken, or named in the configuration")
    assert "  incompatible (" in error and "  unavailable (" in error


def test_strict_mode_passes_with_an_unavailable_provider_nobody_named(penv):
    # the repo's own providers too: on a machine without a GPU, triton is unavailable
    everything_else = ",".join(["incompatible", *ALL_HOSTILE])
    run = penv.cli("doctor", "--json", env={"IRCORE_STRICT": "1", "IRCORE_DISABLE": everything_else})
    assert run.returncode == 0, run.stdout
    report = json.loads(run.stdout)
    states = {p["name"]: p["state"] for p in report["providers"]}
    assert states["good"] == "active" and states["unavailable"] == "unavailable"
    assert report["config_error"] is None and report["broken"] == []


def test_doctor_reports_an_incompatible_provider(penv):
    run = penv.cli("doctor", env={"IRCORE_PROVIDERS": "good,incompatible"})
    assert run.returncode == 1
    assert "no problems found" not in run.stdout
    assert "problems: incompatible; see the reasons above" in run.stdout
    assert "incompatible (ircore-fixture-incompatible 1.0.0): incompatible: " in run.stdout



# ---------------------------------------------------------------------- the second pass
SECOND_MATRIX = PRELUDE + r"""

def states(*names):
    return {n: [r.state.value, r.reason] for n, r in MANAGER.records.items() if not names or n in names}

out = {}
x, s = torch.randn(2, 8), torch.randn(2, 8)
out["correct"] = torch.equal(ircore.ops.rms_norm(x, None, 1e-6), ircore.ops.rms_norm.native(x, None, 1e-6))
out["states"] = states()
out["impls"] = {n: {p: i.fn.__module__ for p, i in op.impls.items()} for n, op in ircore.all_ops().items()}
out["explain"] = ircore.explain("rms_norm", x, None, 1e-6).to_dict()
out["native"] = ircore.ops.rms_norm.native.__module__
out["first_supported"] = ircore.dispatch.first_supported.__module__
out["silu"] = torch.equal(ircore.ops.silu_and_mul(s), ircore.ops.silu_and_mul.native(s))
out["silu_explain"] = ircore.explain("silu_and_mul", s).to_dict()
out["kernel_exit"] = attempt(lambda: ircore.ops.fused_add_rms_norm(x.clone(), x.clone(), None, 1e-6))
import ircore_fixture_hostile.evil_worker as worker
out["worker"] = worker.RESULT
import ircore_fixture_hostile.evil_late_thread as late
late.GO.set()
late.THREAD.join(30)
out["late"] = late.OUTCOME
import ircore_fixture_hostile.evil_kernel_config as kernel_config
x16 = torch.randn(2, 8, dtype=torch.bfloat16)
out["bf16"] = torch.equal(ircore.ops.rms_norm(x16, None, 1e-6), ircore.ops.rms_norm.native(x16, None, 1e-6))
out["kernel_config"] = kernel_config.OUTCOME
out["priority"] = {op: ircore.get_priority(op) for op in ("rms_norm", "silu_and_mul")}
ircore.ops.rms_norm(x, None, 1e-6)  # the next use: what was refused since makes its provider invalid
out["states_after"] = states("evil_late_thread", "evil_kernel_config")
out["bf16_after"] = ircore.explain("rms_norm", x16, None, 1e-6).chosen
ircore.configure(fusions={"add_rms_norm": True})  # the loader decides again; the environment stays as read
out["after_configure"] = ircore.explain("rms_norm", x, None, 1e-6).to_dict()
out["environ"] = os.environ.get("IRCORE_PRIORITY")
out["doctor"] = cli_text("doctor")
out["list"] = cli_text("list")
print("SECOND" + json.dumps(out))
"""


@pytest.fixture(scope="module")
def second(penv) -> dict:
    env = {
        "IRCORE_PROVIDERS": ",".join(["good", *SECOND]),
        "IRCORE_PRIORITY": "rms_norm=good,evil_kernel_config",
    }
    run = penv.run(["-c", SECOND_MATRIX], env)
    line = next((line for line in run.stdout.splitlines() if line.startswith("SECOND")), None)
    assert line is not None, run.stdout + run.stderr
    return json.loads(line[len("SECOND") :])


def _unchanged(second: dict) -> None:
    """What every hostile provider of the second pass must leave: good's results and the user's priority."""
    assert second["states"]["good"][0] == "active"
    assert second["impls"]["rms_norm"]["good"] == "ircore_fixture_good"
    assert second["correct"] and second["explain"]["chosen"] == "good"
    assert second["explain"]["source"] == "IRCORE_PRIORITY"


def test_a_registrar_cannot_be_renamed_to_another_provider(second):
    _unchanged(second)
    state, reason = second["states"]["evil_identity"]
    assert state == "invalid" and reason.startswith("set registrar.provider = 'good' (at "), reason
    assert "ircore_fixture_hostile/evil_identity.py:" in reason and RULE in reason
    state, reason = second["states"]["evil_forced_identity"]
    assert state == "invalid"
    assert reason.startswith("registered rms_norm under the name 'good' (its registrar's provider was changed)")


def test_an_implementation_changed_in_place_is_found_and_undone(second):
    _unchanged(second)
    state, reason = second["states"]["rogue_mutate_impl"]
    assert state == "invalid" and reason.startswith("changed the implementations of rms_norm directly"), reason
    assert reason.endswith("(all undone)")


def test_system_exit_and_generator_exit_from_providers_are_contained(second):
    state, reason = second["states"]["evil_exit_import"]
    assert state == "failed"
    assert reason.startswith("SystemExit: 3 (at ") and "evil_exit_import.py:4, importing " in reason, reason
    state, reason = second["states"]["evil_generator_exit"]
    assert state == "failed" and reason.startswith("GeneratorExit: from a hook (at "), reason
    assert reason.endswith("in ircore_register)")
    # a direct write and then SystemExit: rejected for the write, which is undone
    state, reason = second["states"]["rogue_exit_after_write"]
    assert state == "invalid" and "changed the implementations of rms_norm directly" in reason
    _unchanged(second)
    # a predicate that exits declines the call; a kernel that exits raises an error the caller can catch
    steps = {step["provider"]: step for step in second["silu_explain"]["steps"]}
    assert steps["evil_exit_predicate"]["outcome"] == "skipped"
    assert steps["evil_exit_predicate"]["reason"] == "supports_args raised SystemExit: 4"
    assert second["silu"]
    assert second["kernel_exit"].startswith(
        "ProviderError: the implementation of ircore op 'fused_add_rms_norm' by provider 'evil_exit_kernel' "
        "raised SystemExit(5), which ircore does not let end the caller's program"
    ), second["kernel_exit"]
    assert second["kernel_exit"].endswith("| cause: SystemExit(5)")
    # and the tools report them
    code, text = second["doctor"]
    assert code == 1 and "evil_exit_import (ircore-fixture-hostile 1.0.0): failed: SystemExit: 3" in text
    code, text = second["list"]
    assert code == 0 and "SystemExit: 3" in text and "GeneratorExit: from a hook" in text


def test_a_priority_scope_left_open_by_a_hook_is_refused_and_closed(second):
    _unchanged(second)
    state, reason = second["states"]["evil_open_scope"]
    assert state == "invalid"
    assert reason.startswith("entered a priority scope (with ircore.priority(...)) and did not leave it")


def test_the_environment_a_hook_writes_changes_no_configuration(second):
    # the environment was read once, before any provider's code ran
    assert second["environ"] == "rms_norm=native"  # what evil_environ wrote
    assert second["after_configure"]["chosen"] == "good"
    assert second["after_configure"]["source"] == "IRCORE_PRIORITY"
    assert second["priority"]["rms_norm"][0] == "good"


def test_configuration_calls_from_provider_threads_and_kernels_are_refused_later_too(second):
    (late,) = second["late"]
    assert late.startswith("ProviderIsolationError: provider 'evil_late_thread' called ircore.set_priority() (at ")
    assert "from thread 'evil-later', which its code started" in late
    (kernel,) = second["kernel_config"]
    assert kernel.startswith("ProviderIsolationError: provider 'evil_kernel_config' called ircore.set_priority()")
    assert "evil_kernel_config.py:" in kernel and "from its code" in kernel
    assert second["bf16"]  # the kernel swallowed the refusal and returned the right result
    assert second["priority"]["silu_and_mul"][-1] == "native" and second["priority"]["silu_and_mul"] != ["native"]
    # each is invalid from the next use on, with the refused call as its reason
    for name in ("evil_late_thread", "evil_kernel_config"):
        state, reason = second["states_after"][name]
        assert state == "invalid" and reason.startswith("called ircore.set_priority() (at "), (name, reason)
    assert second["bf16_after"] == "native"
    _unchanged(second)


def test_an_op_called_from_a_hooks_worker_thread_does_not_deadlock(second):
    assert second["worker"] == [[[0.7310585975646973, 0.7310585975646973]], "joined"]
    assert second["states"]["evil_worker"][0] == "active"


def test_an_ops_declaration_and_the_dispatch_functions_cannot_be_replaced(second):
    _unchanged(second)
    assert second["native"] == "ircore.ops._norms" or second["native"].startswith("ircore.")
    assert second["first_supported"] == "ircore.dispatch"
    state, reason = second["states"]["evil_replace_native"]
    assert state == "invalid" and reason.startswith("set ircore.ops.rms_norm.native = ... (at "), reason
    state, reason = second["states"]["evil_force_native"]
    assert state == "invalid"
    assert reason.startswith("changed the declared attributes of rms_norm (an op is what its declaration made it)")
    state, reason = second["states"]["evil_replace_dispatch"]
    assert state == "invalid" and reason.startswith("replaced ircore.dispatch.first_supported, while ircore loaded it")


INTERRUPTED = r"""
import json, torch, ircore
from ircore.providers._manager import MANAGER
x = torch.randn(2, 8)
out = {}
try:
    ircore.ops.rms_norm(x, None, 1e-6)
    out["first"] = "no error"
except KeyboardInterrupt:
    out["first"] = "KeyboardInterrupt"
out["second"] = torch.equal(ircore.ops.rms_norm(x, None, 1e-6), ircore.ops.rms_norm.native(x, None, 1e-6))
out["chosen"] = ircore.explain("rms_norm", x, None, 1e-6).chosen
out["states"] = {n: [r.state.value, r.reason] for n, r in MANAGER.records.items()}
print("INTERRUPTED" + json.dumps(out))
"""


def test_a_keyboard_interrupt_in_a_hook_propagates_and_leaves_nothing_of_the_provider(penv):
    env = {"IRCORE_PROVIDERS": "good,rogue_interrupt", "IRCORE_PRIORITY": "rms_norm=good"}
    run = penv.run(["-c", INTERRUPTED], env)
    line = next((line for line in run.stdout.splitlines() if line.startswith("INTERRUPTED")), None)
    assert line is not None, run.stdout + run.stderr
    out = json.loads(line[len("INTERRUPTED") :])
    assert out["first"] == "KeyboardInterrupt"  # a real Ctrl-C reaches the user
    assert out["second"] and out["chosen"] == "good"  # its direct write was undone
    assert out["states"]["rogue_interrupt"] == [
        "failed",
        "interrupted by KeyboardInterrupt (in ircore_register); nothing of it is registered, and it stays "
        "failed in this process",
    ]
    assert out["states"]["good"][0] == "active"


def test_the_pytest_plugin_reports_a_provider_that_exits_on_import(penv, tmp_path):
    env = {"IRCORE_PROVIDERS": "good,evil_exit_import"}
    run = penv.run(["-m", "pytest", "-q", "-p", "no:cacheprovider", "--ircore-provider", "evil_exit_import"], env, tmp_path)
    assert run.returncode == 1, run.stdout + run.stderr  # tests failed; not 3 (INTERNALERROR)
    assert "INTERNALERROR" not in run.stdout + run.stderr
    assert "provider 'evil_exit_import' is failed: SystemExit: 3 (at " in run.stdout
