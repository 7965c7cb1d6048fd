"""Provider discovery, states, safe registration, configuration sources and precedence.

Every scenario runs in a fresh interpreter over fixture providers installed as real
distributions (see provider_env.py): one provider per failure kind, plus a good one.
"""

from __future__ import annotations

import json

import pytest

import ircore

from .provider_env import FIXTURES, ProviderEnv, install_fixtures

pytestmark = pytest.mark.slow  # every scenario runs in fresh interpreters over pip-installed fixtures

BROKEN = ["bad_arity", "bad_schema", "boom_hook", "boom_import", "dup", "native", "unknown_op"]
# The fixture distributions these scenarios install (tests/fixtures/<name>).
FIXTURE_DISTRIBUTIONS = [
    "bad_arity", "bad_schema", "boom_hook", "boom_import", "dup_one", "dup_two", "good",
    "incompatible", "reserved", "unavailable", "unknown_op",
]  # fmt: skip


@pytest.fixture(scope="module")
def penv(tmp_path_factory) -> ProviderEnv:
    site = tmp_path_factory.mktemp("site")
    install_fixtures(site, FIXTURE_DISTRIBUTIONS)
    return ProviderEnv(site, tmp_path_factory.mktemp("run"))


@pytest.fixture(scope="module")
def default_run(penv):
    return penv.probe()


def _raise_line(fixture: str, module: str) -> str:
    """``module/__init__.py:N`` where N is the fixture's ``raise`` line."""
    lines = (FIXTURES / fixture / module / "__init__.py").read_text().splitlines()
    number = next(i for i, line in enumerate(lines, 1) if line.strip().startswith("raise "))
    return f"{module}/__init__.py:{number}"


def _disable(penv: ProviderEnv, *names: str) -> dict[str, str]:
    return {"IRCORE_DISABLE": ",".join([*penv.real, *names])}


# ---------------------------------------------------------------------- states
def test_good_provider_is_active_and_dispatches(default_run):
    state, reason = default_run.state("good")
    assert state == "active"
    assert reason == "implements rms_norm, fused_add_rms_norm on CPU (x86_64)" or reason.startswith(
        "implements rms_norm, fused_add_rms_norm on CPU"
    )
    probe = default_run.probe
    assert probe["error"] is None
    assert probe["chosen"] == "good"
    assert probe["impls"]["rms_norm"] == ["good"]
    assert probe["impls"]["fused_add_rms_norm"] == ["good"]
    assert probe["priority"] == ["good", "native"]


def test_raises_on_import_is_failed_with_type_message_and_place(default_run):
    state, reason = default_run.state("boom_import")
    assert state == "failed"
    assert reason.startswith("RuntimeError: cannot load libboom.so: no such file (at ")
    assert _raise_line("boom_import", "ircore_fixture_boom_import") in reason
    assert "importing ircore_fixture_boom_import" in reason


def test_raises_in_hook_is_failed(default_run):
    state, reason = default_run.state("boom_hook")
    assert state == "failed"
    assert reason.startswith("ValueError: hook bug: kernel table is empty (at ")
    assert _raise_line("boom_hook", "ircore_fixture_boom_hook") in reason and "in ircore_register" in reason


def test_wrong_schema_is_invalid_and_nothing_of_it_stays(default_run):
    state, reason = default_run.state("bad_schema")
    assert state == "invalid"
    assert "provider 'bad_schema'" in reason and "'rms_norm'" in reason
    assert "differs from the native schema" in reason
    # its valid silu_and_mul was registered first, and must be gone too (all-or-nothing)
    assert "bad_schema" not in default_run.probe["impls"]["silu_and_mul"]


def test_unknown_op_is_invalid(default_run):
    state, reason = default_run.state("unknown_op")
    assert state == "invalid"
    assert f"registers unknown op 'group_norm'; known ops: {sorted(ircore.ops.__all__)}" in reason


def test_reserved_name_is_invalid_and_never_imported(default_run):
    state, reason = default_run.state("native")
    assert state == "invalid"
    assert "entry point name 'native' is reserved" in reason
    assert "ircore_fixture_reserved" not in default_run.imported


def test_name_claimed_twice_is_a_conflict_and_neither_loads(default_run):
    state, reason = default_run.state("dup")
    assert state == "conflict"
    assert "ircore-fixture-dup-one 1.0.0" in reason and "ircore-fixture-dup-two 1.0.0" in reason
    assert not {"ircore_fixture_dup_one", "ircore_fixture_dup_two"} & set(default_run.imported)


def test_incompatible_requirement_is_never_imported(default_run):
    state, reason = default_run.state("incompatible")
    assert state == "incompatible"
    assert "requires ircore>=99 but ircore 0.1.0 is running" in reason
    assert "ircore_fixture_incompatible" not in default_run.imported


def test_predicate_with_wrong_arity_is_invalid(default_run):
    state, reason = default_run.state("bad_arity")
    assert state == "invalid"
    assert (
        "supports_args" in reason
        and "takes (x, weight) but must take the op's parameters (x, weight, epsilon, variance_size)"
        in reason
    )


def test_unavailable_platform(default_run):
    state, reason = default_run.state("unavailable")
    assert state == "unavailable"
    assert reason == "needs ROCm and the aiter package; found CPU (x86_64)" or reason.startswith(
        "needs ROCm and the aiter package; found CPU"
    )
    assert "unavailable" not in default_run.probe["impls"]["rms_norm"]


def test_import_ircore_imports_no_provider(penv):
    run = penv.run(["-c", "import sys, ircore; print(sorted(m for m in sys.modules if 'fixture' in m))"])
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]" and run.imported == []


# ---------------------------------------------------------------------- enablement
def test_disabled_provider_is_never_imported(penv):
    run = penv.probe(_disable(penv, "good"))
    assert run.state("good") == ("disabled", "listed in IRCORE_DISABLE")
    assert "ircore_fixture_good" not in run.imported
    assert run.probe["chosen"] == "native"


def test_allowlist_imports_only_listed(penv):
    run = penv.probe({"IRCORE_PROVIDERS": "good"})
    assert run.imported == ["ircore_fixture_good"]
    assert run.state("boom_import") == ("disabled", "not in IRCORE_PROVIDERS (good)")
    assert run.state("good")[0] == "active"


def test_allowlist_none(penv):
    run = penv.probe({"IRCORE_PROVIDERS": "none"})
    assert run.imported == []
    assert {r["state"] for r in run.probe["providers"].values()} <= {
        "disabled",
        "conflict",
        "invalid",
        "incompatible",
    }
    assert run.state("good") == ("disabled", "IRCORE_PROVIDERS is 'none'")


def test_strict_mode_raises_at_load_time(penv):
    run = penv.probe({"IRCORE_STRICT": "1"})
    error = run.probe["error"]
    assert error.startswith("ProviderLoadError: strict mode (IRCORE_STRICT)")
    for name in ["boom_import", "boom_hook", "bad_schema", "dup", "incompatible"]:
        assert f"  {name} (" in error
    assert "  unavailable (" not in error  # unavailable is no fault unless configuration names it


def test_strict_mode_passes_when_all_are_active_or_disabled(penv):
    run = penv.probe({"IRCORE_STRICT": "1", "IRCORE_PROVIDERS": "good"})
    assert run.probe["error"] is None and run.probe["chosen"] == "good"


def test_configure_disables_and_reenables_at_run_time(penv):
    code = (
        "import torch, ircore\n"
        "x = torch.randn(2, 8)\n"
        "a = ircore.explain('rms_norm', x, None, 1e-6).chosen\n"
        "ircore.configure(disable=[])\n"  # the env's denylist no longer applies: API outranks it
        "ircore.configure(providers=['good', 'bad_arity'], disable=['good'])\n"
        "b = ircore.explain('rms_norm', x, None, 1e-6)\n"
        "ircore.configure(disable=[])\n"
        "c = ircore.explain('rms_norm', x, None, 1e-6).chosen\n"
        "print('OUT', a, b.chosen, c, '|', b.steps[0].reason if b.steps else '')\n"
    )
    run = penv.run(["-c", code], {"IRCORE_PROVIDERS": "good"})
    assert run.returncode == 0, run.stderr
    out = run.stdout.split("OUT", 1)[1]
    assert out.split("|")[0].split() == ["good", "native", "good"]
    assert run.imported == ["ircore_fixture_good", "ircore_fixture_bad_arity"]


# ---------------------------------------------------------------------- priority sources
def test_env_priority(penv):
    run = penv.probe({"IRCORE_PRIORITY": "rms_norm=native;fused_add_rms_norm=good"})
    assert run.probe["chosen"] == "native"
    assert run.probe["explain_source"] == "IRCORE_PRIORITY"


def test_config_file_in_cwd(penv, tmp_path):
    (tmp_path / "ircore.toml").write_text(f"disable = {[*penv.real, 'good']!r}\n".replace("'", '"'))
    run = penv.probe({"IRCORE_DISABLE": None}, cwd=tmp_path)
    assert run.state("good") == ("disabled", f"listed in {tmp_path / 'ircore.toml'}: disable")
    assert "ircore_fixture_good" not in run.imported


def test_pyproject_tool_section(penv, tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\n\n[tool.ircore.priority]\nrms_norm = ["native"]\n'
    )
    run = penv.probe(cwd=tmp_path)
    assert run.probe["chosen"] == "native"
    assert run.probe["explain_source"] == f"{tmp_path / 'pyproject.toml'} [tool.ircore]: priority"


def test_ircore_config_variable_wins_over_cwd_file(penv, tmp_path):
    (tmp_path / "ircore.toml").write_text('providers = "none"\n')
    other = tmp_path / "deploy.toml"
    other.write_text('[priority]\nrms_norm = ["native"]\n')
    run = penv.probe({"IRCORE_CONFIG": str(other)}, cwd=tmp_path)
    assert run.state("good")[0] == "active"
    assert run.probe["explain_source"] == f"{other}: priority"


def test_precedence_api_over_env_over_file(penv, tmp_path):
    (tmp_path / "ircore.toml").write_text(
        '[priority]\nrms_norm = ["native"]\nfused_add_rms_norm = ["native"]\n'
    )
    env = {"IRCORE_PRIORITY": "rms_norm=good"}
    run = penv.probe(env, cwd=tmp_path)
    assert run.probe["chosen"] == "good" and run.probe["explain_source"] == "IRCORE_PRIORITY"
    run = penv.probe(
        env, cwd=tmp_path, prelude="import ircore; ircore.configure(priority={'rms_norm': ['native']})\n"
    )
    assert run.probe["chosen"] == "native"
    assert run.probe["explain_source"] == "ircore.set_priority()/configure()"
    code = (
        "import ircore\nfrom ircore import dispatch\nimport torch\n"
        "print('SRC', dispatch.effective_priority(ircore.get_op('fused_add_rms_norm'), None)[1])\n"
        "ircore.get_priority('rms_norm')\n"
        "print('SRC', dispatch.effective_priority(ircore.get_op('fused_add_rms_norm'), None)[1])\n"
    )
    run = penv.run(["-c", code], env, cwd=tmp_path)
    assert run.stdout.split("SRC")[-1].strip() == f"{tmp_path / 'ircore.toml'}: priority"


def test_wildcard_priority_in_the_environment_and_the_file(penv, tmp_path):
    """``*`` with an installed provider: an op's own entry beats its source's ``*``, a higher
    source's ``*`` beats a lower source's op entry, an op the provider lacks runs native (no
    error), and ``ircore list`` says where each order came from."""
    (tmp_path / "ircore.toml").write_text('[priority]\n"*" = ["native"]\nrms_norm = ["good"]\n')
    file = f"{tmp_path / 'ircore.toml'}: priority"

    def ops(env):
        run = penv.cli("list", "--json", env=env, cwd=tmp_path)
        assert run.returncode == 0, run.stderr
        return {o["op"]: (o["priority"], o["source"]) for o in json.loads(run.stdout)["ops"]}

    listed = ops({})
    assert listed["rms_norm"] == (["good", "native"], file)
    assert listed["fused_add_rms_norm"] == (["native"], f"{file} *")
    listed = ops({"IRCORE_PRIORITY": "*=good"})  # the environment outranks the file, '*' or not
    assert listed["rms_norm"] == (["good", "native"], "IRCORE_PRIORITY *")
    assert listed["fused_add_rms_norm"] == (["good", "native"], "IRCORE_PRIORITY *")
    assert listed["silu_and_mul"] == (["good", "native"], "IRCORE_PRIORITY *")  # good lacks it
    run = penv.probe({"IRCORE_PRIORITY": "*=good;rms_norm=native"}, cwd=tmp_path)
    assert run.probe["error"] is None
    assert run.probe["chosen"] == "native" and run.probe["explain_source"] == "IRCORE_PRIORITY"
    code = (
        "import torch, ircore\n"
        "print('OUT', ircore.ops.silu_and_mul(torch.randn(2, 8)).shape)\n"
        "print('OUT', ircore.explain('fused_add_rms_norm', *[torch.randn(2, 8)] * 2, None, 1e-6))\n"
    )
    run = penv.run(["-c", code], {"IRCORE_PRIORITY": "*=good"}, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "torch.Size([2, 4])" in run.stdout
    assert "fused_add_rms_norm: runs good" in run.stdout and "(from IRCORE_PRIORITY *)" in run.stdout


def test_env_allowlist_beats_file_allowlist(penv, tmp_path):
    (tmp_path / "ircore.toml").write_text('providers = "none"\n')
    run = penv.probe({"IRCORE_PROVIDERS": "good"}, cwd=tmp_path)
    assert run.state("good")[0] == "active"


# ---------------------------------------------------------------------- config errors
@pytest.mark.parametrize(
    ("files", "env", "expected"),
    [
        (
            {"ircore.toml": 'provider = ["good"]\n'},
            {},
            "ircore.toml: unknown key 'provider'; known keys: providers, disable, priority, strict",
        ),
        ({"ircore.toml": "disable = [\n"}, {}, "ircore.toml: invalid TOML"),
        (
            {"ircore.toml": '[priority]\nrms_norm = ["nope"]\n'},
            {},
            "ircore.toml: priority: unknown provider 'nope' for op 'rms_norm'; known providers: [",
        ),
        (
            {"ircore.toml": '[priority]\ngroup_norm = ["good"]\n'},
            {},
            f"ircore.toml: priority: unknown op 'group_norm'; known ops: {sorted(ircore.ops.__all__)}",
        ),
        (
            {},
            {"IRCORE_DISABLE": "nope"},
            "IRCORE_DISABLE: unknown provider 'nope'; known providers: ['aiter', 'bad_arity', 'bad_schema'",
        ),
        ({}, {"IRCORE_PROVIDERS": "good,nope"}, "IRCORE_PROVIDERS: unknown provider 'nope'"),
        (
            {},
            {"IRCORE_PRIORITY": "rms_norm"},
            "IRCORE_PRIORITY: cannot read 'rms_norm'; expected OP=PROVIDER",
        ),
        ({}, {"IRCORE_PRIORITY": "group_norm=good"}, "IRCORE_PRIORITY: unknown op 'group_norm'"),
        (
            {},
            {"IRCORE_PRIORITY": "*=good,nope"},
            "IRCORE_PRIORITY: unknown provider 'nope' for every op ('*'); known providers: [",
        ),
        (
            {"ircore.toml": '[priority]\n"*" = ["nope"]\n'},
            {},
            "ircore.toml: priority: unknown provider 'nope' for every op ('*'); known providers: [",
        ),
        ({}, {"IRCORE_STRICT": "maybe"}, "IRCORE_STRICT: expected true or false"),
        (
            {},
            {"IRCORE_CONFIG": "/nonexistent/ircore.toml"},
            "IRCORE_CONFIG: no such file '/nonexistent/ircore.toml'",
        ),
        (
            {"pyproject.toml": "[tool.ircore]\nstrict = 3\n"},
            {},
            "pyproject.toml [tool.ircore]: strict: expected true or false",
        ),
    ],
    ids=lambda v: v if isinstance(v, str) and len(v) < 40 else None,
)
def test_config_errors_name_source_key_and_known_names(penv, tmp_path, files, env, expected):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    run = penv.probe({**_disable(penv), **env}, cwd=tmp_path)
    assert run.probe["error"] is not None and run.probe["error"].startswith("ConfigError: ")
    assert expected in run.probe["error"]
    assert run.imported == []  # a bad configuration imports nothing


# ---------------------------------------------------------------------- the CLI
def test_cli_list_json(penv):
    run = penv.cli("list", "--json")
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout)
    states = {p["name"]: p["state"] for p in data["providers"]}
    assert (
        states["good"] == "active"
        and states["dup"] == "conflict"
        and states["incompatible"] == "incompatible"
    )
    good = next(p for p in data["providers"] if p["name"] == "good")
    assert good["distribution"] == "ircore-fixture-good" and good["version"] == "1.0.0"
    ops = {o["op"]: o for o in data["ops"]}
    assert ops["rms_norm"]["priority"] == ["good", "native"]
    assert ops["rms_norm"]["implementations"] == ["native", "good"]


def test_cli_list_text(penv):
    run = penv.cli("list")
    assert run.returncode == 0, run.stderr
    assert "ircore-fixture-good 1.0.0" in run.stdout and "conflict" in run.stdout
    assert "rms_norm" in run.stdout and "good, native" in run.stdout


def test_cli_explain(penv):
    run = penv.cli("explain", "rms_norm", "--shape", "4x64", "--dtype", "float32", "--device", "cpu")
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("rms_norm: runs good")
    run = penv.cli("explain", "rms_norm", "--shape", "4x64", "--dtype", "bfloat16", "--json")
    data = json.loads(run.stdout)
    assert data["chosen"] == "native"
    assert data["steps"][0] == {
        "provider": "good",
        "outcome": "skipped",
        "reason": "supports_args rejected these arguments",
    }


def test_cli_explain_bad_usage(penv):
    run = penv.cli("explain", "group_norm")
    assert run.returncode == 2 and "no ircore op named 'group_norm'" in run.stderr
    run = penv.cli("explain", "rms_norm", "--dtype", "int7")
    assert run.returncode == 2 and "--dtype 'int7'" in run.stderr


def test_cli_doctor_exit_code(penv):
    run = penv.cli("doctor")
    assert run.returncode == 1
    for name in ("boom_import", "bad_schema", "dup"):
        assert f"  {name} (" in run.stdout
    assert "RuntimeError: cannot load libboom.so" in run.stdout
    # a provider owns IRCORE_<NAME>_* (good: IRCORE_GOOD_*); anything else is reported as ignored
    env = {"IRCORE_PROVIDERS": "good", "IRCORE_GOOD_FLAG": "1", "IRCORE_PRIORTY": "x"}
    run = penv.cli("doctor", "--json", env=env)
    assert run.returncode == 0, run.stdout
    report = json.loads(run.stdout)
    assert report["broken"] == [] and report["environment"]["IRCORE_PROVIDERS"] == "good"
    unknown = report["unknown_environment"]  # (also the fixtures' own IRCORE_FIXTURE_IMPORT_LOG)
    assert report["environment"]["IRCORE_GOOD_FLAG"] == "1"
    assert "IRCORE_PRIORTY" in unknown and "IRCORE_GOOD_FLAG" not in unknown and "IRCORE_PROVIDERS" not in unknown
    assert "IRCORE_PRIORTY (did you mean IRCORE_PRIORITY?)" in run.stderr and "IRCORE_GOOD_FLAG" not in run.stderr
    assert report["platform_kind"] == "cpu"
    # a configuration ircore cannot read stops it before any provider loads: said, not "none active"
    run = penv.cli("doctor", env={"IRCORE_PRIORITY": "rms_norm"})
    assert run.returncode == 1
    assert "configuration error: IRCORE_PRIORITY: cannot read 'rms_norm'" in run.stdout
    assert "active providers" not in run.stdout
    line = next(ln for ln in run.stdout.splitlines() if ln.startswith("providers: "))
    assert line.startswith("providers: not loaded, because of the configuration error above (installed: ")
    assert "good" in line and "boom_import" in line


def test_cli_help_and_version(penv):
    run = penv.cli("--help")
    assert run.returncode == 0 and "list" in run.stdout and "doctor" in run.stdout
    run = penv.cli("--version")
    assert run.returncode == 0 and run.stdout.strip() == "ircore 0.1.0"
