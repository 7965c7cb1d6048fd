"""The pytest plugin shipped with the core (entry point ``pytest11``), run by pytest's own
``pytester`` in fresh pytest processes over installed fixture providers: ``good`` (exact) and
``sloppy`` (rms_norm 1% off)."""

from __future__ import annotations

import pytest

from .provider_env import FIXTURES, TOOL_FIXTURES, ProviderEnv, install_fixtures

pytestmark = pytest.mark.slow  # fresh pytest processes over pip-installed fixtures

pytest_plugins = ["pytester"]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    target = tmp_path_factory.mktemp("plugin_site")
    fixtures = [FIXTURES / "good", FIXTURES / "unavailable", TOOL_FIXTURES / "sloppy", TOOL_FIXTURES / "exits"]
    install_fixtures(target, fixtures)
    return target


@pytest.fixture
def run(pytester: pytest.Pytester, site, monkeypatch, tmp_path):
    """``pytest ARGS`` in a fresh process that sees the fixture providers (and not this repo's)."""
    env = ProviderEnv(site, tmp_path).env()
    for var in [v for v in list(__import__("os").environ) if v.startswith("IRCORE_")]:
        monkeypatch.delenv(var)
    for var in ("PYTHONPATH", "IRCORE_DISABLE"):
        if var in env:
            monkeypatch.setenv(var, env[var])
    return lambda *args: pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)


def test_option_adds_one_test_per_case_and_names_the_failing_ones(run):
    result = run("--ircore-provider", "good", "--ircore-provider", "sloppy", "-rfs")
    outcomes = result.parseoutcomes()
    assert outcomes["failed"] > 0 and outcomes["passed"] > 0 and outcomes["skipped"] > 0
    text = result.stdout.str()
    # every failure is sloppy's rms_norm in fp32 or fp16 (1% is inside the bf16 tolerance)
    failed = [line for line in result.stdout.lines if line.startswith("FAILED ")]
    assert len(failed) == outcomes["failed"]
    assert all(line.startswith("FAILED ircore-conformance[sloppy]::rms_norm[cpu-float") for line in failed)
    assert "FAILED ircore-conformance[sloppy]::rms_norm[cpu-float32-seed0-7x4096]" in text
    assert "sloppy.rms_norm [7x4096] cpu float32 seed=0: output 0:" in text
    assert "elements outside the tolerance" in text
    # declined samples are skipped with the reason; good's cases all pass
    assert "SKIPPED" in text and "supports_args declined it" in text
    assert "ircore-conformance[good]" not in "\n".join(failed)


def test_a_provider_that_is_not_active_fails_with_its_reason(run):
    result = run("--ircore-provider", "unavailable")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*ircore provider 'unavailable': provider 'unavailable' is unavailable: needs ROCm*"]
    )


def test_kernels_raising_systemexit_or_generatorexit_are_failing_tests(run):
    """Not an INTERNALERROR, not the end of the session: each case fails naming the exception."""
    result = run("--ircore-provider", "exits", "-k", "seed0 and float32 and (1x8 or 1x16)", "-rf")
    result.assert_outcomes(failed=2)
    text = result.stdout.str()
    assert "INTERNALERROR" not in text
    assert "exits.silu_and_mul [1x16] cpu float32 seed=0: raised SystemExit: 3" in text
    assert "exits.rms_norm [1x8] cpu float32 seed=0: raised GeneratorExit" in text


def test_fixture_runs_a_test_once_per_case(run, pytester):
    pytester.makepyfile(
        test_conformance="""
        import pytest

        @pytest.mark.ircore_provider("sloppy")
        def test_sloppy(ircore_case):
            ircore_case.check()
        """
    )
    result = run("-k", "rms_norm and seed1 and (3x64 or variance_size)", "-rfs")
    # 3x64: float32 and float16 fail, bfloat16 passes; the variance_size sample is declined in each dtype
    result.assert_outcomes(failed=2, passed=1, skipped=3)
    assert "supports_args declined it" in result.stdout.str()
    # pytest appends " - <message>" to the summary line when the terminal is wide enough
    failed = "FAILED test_conformance.py::test_sloppy[sloppy-rms_norm[cpu-float32-seed1-3x64]]"
    assert any(line == failed or line.startswith(failed + " - ") for line in result.stdout.lines)
    assert "AssertionError: sloppy.rms_norm [3x64] cpu float32 seed=1: output 0: " in result.stdout.str()


def test_fixture_without_a_provider_is_a_usage_error(run, pytester):
    pytester.makepyfile(test_x="def test_x(ircore_case):\n    ircore_case.check()\n")
    result = run()
    assert result.ret != 0
    result.stdout.fnmatch_lines(
        ["*test_x.py::test_x: the ircore_case fixture needs a provider*ircore_provider*"]
    )


def test_unrelated_runs_do_not_import_ircore(run, pytester):
    """The plugin is loaded (its option exists) but imports neither ircore nor torch."""
    pytester.makepyfile(
        test_plain="""
        import sys

        def test_plain(pytestconfig):
            assert pytestconfig.getoption("ircore_provider") == []
            assert "ircore" not in sys.modules and "torch" not in sys.modules
        """
    )
    run().assert_outcomes(passed=1)
