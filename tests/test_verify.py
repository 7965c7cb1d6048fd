"""``ircore verify`` and the conformance case runner it shares with the kit and the pytest plugin.

In-process: implementations registered by the test (exact, 1% off, bad predicates). End to end:
the ``ircore verify`` command in a fresh interpreter over installed fixture providers (``sloppy``
is 1% off in rms_norm; ``good`` is exact).
"""

from __future__ import annotations

import io
import json
import re
from typing import Optional

import numpy as np
import pytest
import torch

import ircore
from ircore.testing import check_provider, iter_cases, run_case
from ircore.tools.progress import Progress
from ircore.tools.verify import verify

from .impls import fused_inplace, only_fp32, rms_norm_a
from .provider_env import FIXTURES, TOOL_FIXTURES, ProviderEnv, install_fixtures

F32 = (torch.float32,)


def sloppy_rms_norm(
    x: torch.Tensor, weight: Optional[torch.Tensor], epsilon: float, variance_size: Optional[int] = None
) -> torch.Tensor:
    return (ircore.ops.rms_norm.native(x, weight, epsilon, variance_size).float() * 1.01).to(x.dtype).contiguous()


def sloppy_silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    return (ircore.ops.silu_and_mul.native(x).float() * 1.01).to(x.dtype).contiguous()


# ---------------------------------------------------------------------- in process
def test_verify_reports_every_case_with_the_worst_error():
    ircore.ops.rms_norm.register_impl("v_ok", rms_norm_a, supports_args=only_fp32)
    ircore.ops.fused_add_rms_norm.register_impl("v_ok", fused_inplace, inplace=True)
    ircore.ops.rms_norm.register_impl("v_sloppy", sloppy_rms_norm)
    report = verify(["v_ok", "v_sloppy"], devices=["cpu"], dtypes=(torch.float32, torch.bfloat16), seeds=(0,))
    rows = {(r.provider, r.op): r for r in report.rows()}
    ok_norm, ok_fused, sloppy = (
        rows["v_ok", "rms_norm"],
        rows["v_ok", "fused_add_rms_norm"],
        rows["v_sloppy", "rms_norm"],
    )
    n = sum(1 for _ in ircore.ops.rms_norm.sample_inputs(torch.float32, "cpu", 0))
    n_bf16 = sum(1 for _ in ircore.ops.rms_norm.sample_inputs(torch.bfloat16, "cpu", 0))
    assert (ok_norm.passed, ok_norm.failed) == (n, 0) and ok_norm.declined > 0  # bf16 declined
    assert ok_fused.failed == 0 and ok_fused.passed > 0 and 0 <= ok_fused.worst <= 1
    # 1% off: every fp32 case fails (tolerance 1e-5) but the empty one (0x32), bf16 (1.6e-2) passes
    assert sloppy.failed == n - 1 and sloppy.passed == 1 + n_bf16 and sloppy.worst > 100
    assert not report.ok
    failure = next(f for f in report.failures if "[5x256 variance_size=96]" in f.message)
    assert failure.message.startswith("v_sloppy.rms_norm [5x256 variance_size=96] cpu float32 seed=0")
    assert "elements outside the tolerance" in failure.message and "x the tolerance" in failure.message
    doc = report.to_dict()
    assert doc["ok"] is False and len(doc["failures"]) == n - 1
    assert {f["dtype"] for f in doc["failures"]} == {"float32"}
    json.dumps(doc)  # serialisable, no inf


def test_the_summary_counts_declined_cases_apart_from_passed_ones():
    ircore.ops.rms_norm.register_impl("v_half", rms_norm_a, supports_args=only_fp32)
    ircore.ops.silu_and_mul.register_impl("v_half", sloppy_silu_and_mul)
    n = sum(1 for _ in ircore.ops.rms_norm.sample_inputs(torch.float32, "cpu", 0))
    d = sum(1 for _ in ircore.ops.rms_norm.sample_inputs(torch.bfloat16, "cpu", 0))
    report = verify(["v_half"], ops=["rms_norm"], devices=["cpu"], dtypes=(torch.float32, torch.bfloat16), seeds=(0,))
    assert report.counts() == {"passed": n, "failed": 0, "declined": d}
    assert report.summary() == (
        f"{n} cases passed, {d} declined by supports_args (not run), none failed ({n + d} cases on cpu)"
    )
    doc = report.to_dict()
    assert (doc["cases"], doc["passed"], doc["failed"], doc["declined"]) == (n + d, n, 0, d)
    report = verify(["v_half"], ops=["rms_norm"], devices=["cpu"], dtypes=(torch.bfloat16,), seeds=(0,))
    assert report.summary() == f"nothing compared: all {d} cases were declined by supports_args on cpu"
    report = verify(["v_half"], devices=["cpu"], dtypes=(torch.float32, torch.bfloat16), seeds=(0,))
    s = report.counts()
    assert s["failed"] > 0 and s["declined"] == d
    assert report.summary() == (
        f"{s['failed']} of {len(report.results)} cases failed on cpu; {s['passed']} passed, "
        f"{d} declined by supports_args (not run)"
    )


@pytest.mark.parametrize(
    "predicate, message",
    [
        (lambda x, w, e, v: (_ for _ in ()).throw(KeyError("boom")), "supports_args raised KeyError: 'boom'"),
        (lambda x, w, e, v: torch.tensor(True), "supports_args returned tensor(True) of type torch.Tensor"),
        (lambda x, w, e, v: np.bool_(True), "of type numpy.bool"),
        (lambda x, w, e, v: None, "supports_args returned None of type NoneType"),
    ],
    ids=["raises", "tensor", "numpy-bool", "none"],
)
def test_predicates_must_return_a_plain_bool_and_never_raise(predicate, message):
    def pred(x, weight, epsilon, variance_size):
        return predicate(x, weight, epsilon, variance_size)

    ircore.ops.rms_norm.register_impl("v_pred", rms_norm_a, supports_args=pred)
    report = verify(["v_pred"], devices=["cpu"], dtypes=F32, seeds=(0,))
    assert report.failures and all(message in f.message for f in report.failures)
    with pytest.raises(AssertionError, match=message.replace("(", r"\(").replace(")", r"\)")):
        check_provider("v_pred", dtypes=F32, seeds=(0,))


def test_an_implementation_that_raises_is_a_failing_case_not_a_crash():
    def broken(x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("kernel launch failed")

    ircore.ops.silu_and_mul.register_impl("v_raise", broken)
    report = verify(["v_raise"], devices=["cpu"], dtypes=F32, seeds=(0,))
    assert report.failures and all(
        "raised RuntimeError: kernel launch failed" in f.message for f in report.failures
    )


def _raises(exc: BaseException):
    def kernel(x: torch.Tensor) -> torch.Tensor:
        raise exc

    return kernel


@pytest.mark.parametrize(
    "exc, message",
    [
        (SystemExit(3), "raised SystemExit: 3 (provider code must raise an Exception: SystemExit would end"),
        (GeneratorExit(), "raised GeneratorExit (provider code must raise an Exception: GeneratorExit would end"),
    ],
    ids=["SystemExit", "GeneratorExit"],
)
def test_a_kernel_raising_systemexit_or_generatorexit_is_a_failing_case(exc, message):
    """Each case fails naming the exception, and verify goes on to the next (every case is run);
    the conformance kit raises its AssertionError, and a case run as a test (the pytest plugin's
    ircore_case.check()) too."""
    ircore.ops.silu_and_mul.register_impl("v_exit", _raises(exc))
    report = verify(["v_exit"], devices=["cpu"], dtypes=F32, seeds=(0,))
    n = sum(1 for _ in ircore.ops.silu_and_mul.sample_inputs(torch.float32, "cpu", 0))
    assert report.counts() == {"passed": 0, "failed": n, "declined": 0}
    assert all(message in f.message for f in report.failures), report.failures[0].message
    with pytest.raises(AssertionError, match=re.escape(message)):
        check_provider("v_exit", dtypes=F32, seeds=(0,))
    case, _ = next(iter_cases("v_exit", dtypes=F32, seeds=(0,)))
    with pytest.raises(AssertionError, match=re.escape(message)):
        case.check()


def test_keyboard_interrupt_in_a_kernel_still_stops_verify():
    ircore.ops.silu_and_mul.register_impl("v_interrupt", _raises(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        verify(["v_interrupt"], devices=["cpu"], dtypes=F32, seeds=(0,))


def test_a_wrong_shape_or_nan_fails_with_infinite_error():
    def nan_out(x: torch.Tensor) -> torch.Tensor:
        out = ircore.ops.silu_and_mul.native(x)
        return out.fill_(float("nan")) if out.numel() else out

    ircore.ops.silu_and_mul.register_impl("v_nan", nan_out)
    case, args = next((c, a) for c, a in iter_cases("v_nan", dtypes=F32, seeds=(0,)) if c.label == "4x256")
    result = run_case(case, args)
    assert result.status == "failed" and result.worst == float("inf")
    assert "got nan" in result.message


def test_cases_regenerate_their_arguments():
    ircore.ops.rms_norm.register_impl("v_regen", rms_norm_a)
    case, args = list(iter_cases("v_regen", dtypes=F32, seeds=(1,)))[3]
    again = case.args()
    assert all(torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b for a, b in zip(args, again))
    assert case.test_id == f"rms_norm[cpu-float32-seed1-{case.label}]"


def test_progress_bar_draws_only_when_asked():
    stream = io.StringIO()
    with Progress(3, "verify", enabled=True, stream=stream) as bar:
        for note in ("a", "b", "c"):
            bar.advance(note)
    text = stream.getvalue()
    assert "verify [" in text and "3/3  c" in text and text.endswith("\r")
    quiet = io.StringIO()  # not a terminal: nothing drawn
    with Progress(3, "verify", stream=quiet) as bar:
        bar.advance("a")
    assert quiet.getvalue() == ""


# ---------------------------------------------------------------------- the command
@pytest.fixture(scope="module")
def tools_env(tmp_path_factory) -> ProviderEnv:
    site = tmp_path_factory.mktemp("tools_site")
    install_fixtures(site, [FIXTURES / "good", FIXTURES / "unavailable", TOOL_FIXTURES / "sloppy"])
    return ProviderEnv(site, tmp_path_factory.mktemp("tools_run"))


@pytest.mark.slow
def test_verify_command_fails_the_sloppy_provider_naming_each_case(tools_env):
    run = tools_env.cli("verify", "--json", "--seeds", "1")
    assert run.returncode == 1, run.stderr
    doc = json.loads(run.stdout)
    assert doc["ok"] is False and doc["devices"] == ["cpu"]
    assert doc["passed"] + doc["failed"] + doc["declined"] == doc["cases"]
    assert doc["failed"] == len(doc["failures"]) and doc["declined"] == sum(r["declined"] for r in doc["rows"])
    rows = {(r["provider"], r["op"]): r for r in doc["rows"]}
    assert rows["good", "rms_norm"]["failed"] == 0 and rows["good", "fused_add_rms_norm"]["failed"] == 0
    assert rows["sloppy", "silu_and_mul"]["failed"] == 0 and rows["sloppy", "silu_and_mul"]["passed"] > 0
    sloppy = rows["sloppy", "rms_norm"]
    assert sloppy["failed"] > 0 and sloppy["passed"] > 0 and sloppy["declined"] > 0 and sloppy["worst"] > 1
    cases = {f["case"] for f in doc["failures"]}
    assert "sloppy.rms_norm [7x4096] cpu float32 seed=0" in cases
    assert all(f["provider"] == "sloppy" and f["dtype"] in ("float32", "float16") for f in doc["failures"])
    others = {o["name"]: o for o in doc["not_verified"]}
    assert others["unavailable"]["state"] == "unavailable" and "needs ROCm" in others["unavailable"]["reason"]


@pytest.mark.slow
def test_verify_command_passes_a_correct_provider_with_a_table(tools_env):
    run = tools_env.cli("verify", "--provider", "good", "--seeds", "1")
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].split() == [
        "provider",
        "op",
        "device",
        "passed",
        "failed",
        "declined",
        "worst",
        "error/tolerance",
    ]
    assert any(line.split()[:2] == ["good", "rms_norm"] for line in lines)
    summary = re.fullmatch(
        r"(\d+) cases passed, (\d+) declined by supports_args \(not run\), none failed \((\d+) cases on cpu\)",
        lines[-1],
    )
    assert summary, lines[-1]
    passed, declined, cases = map(int, summary.groups())
    assert declined > 0 and passed + declined == cases  # good declines bf16 and fp16 rms_norm
    assert "\r" not in run.stderr  # not a terminal: no progress bar


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--provider", "unavailable"], "provider 'unavailable' is unavailable: needs ROCm"),
        (
            ["--provider", "nope"],
            "unknown provider 'nope': no installed distribution has an entry point named 'nope' in the "
            "group 'ircore.providers', where ircore finds providers; installed providers: [",
        ),
        (["--op", "group_norm"], "unknown op 'group_norm'; known ops: "),
        (["--device", "cuda:7"], "--device 'cuda:7' is not usable here"),
    ],
)
@pytest.mark.slow
def test_verify_command_usage_errors(tools_env, argv, message):
    run = tools_env.cli("verify", *argv)
    assert run.returncode == 2 and message in run.stderr, run.stderr


@pytest.mark.slow
def test_verify_command_reports_kernels_that_exit_and_goes_on(tmp_path_factory):
    """A kernel raising SystemExit(3) or GeneratorExit: failing cases in the table, exit 1."""
    site = tmp_path_factory.mktemp("exits_site")
    install_fixtures(site, [TOOL_FIXTURES / "exits"])
    run = ProviderEnv(site, tmp_path_factory.mktemp("exits_run")).cli(
        "verify", "--provider", "exits", "--seeds", "1", "--dtype", "float32"
    )
    assert run.returncode == 1, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].split()[:3] == ["provider", "op", "device"]
    rows = {tuple(line.split()[:2]): line.split() for line in lines[1:3]}
    assert rows["exits", "rms_norm"][3] == "0" and int(rows["exits", "rms_norm"][4]) > 0
    assert rows["exits", "silu_and_mul"][3] == "0" and int(rows["exits", "silu_and_mul"][4]) > 0
    text = run.stdout
    assert "FAILED exits.silu_and_mul [1x16] cpu float32 seed=0: raised SystemExit: 3" in text
    assert "FAILED exits.rms_norm [1x8] cpu float32 seed=0: raised GeneratorExit" in text
    assert re.search(r"^\d+ of \d+ cases failed on cpu; 0 passed", lines[-1]), lines[-1]
    assert "Traceback" not in run.stderr


def test_the_dtype_option_takes_the_dtypes_the_ops_have_tolerances_for():
    """float64 is a float dtype but no op declares a tolerance for it: refused as a usage error
    (exit 2), not run to fail every case (exit 1)."""
    import argparse

    from ircore.tools.common import parse_dtype

    assert [parse_dtype(t) for t in ("fp32", "half", "bfloat16")] == [torch.float32, torch.float16, torch.bfloat16]
    for text in ("float64", "int8", "nosuch"):
        with pytest.raises(argparse.ArgumentTypeError, match=rf"--dtype '{text}': expected float32, float16 or bfloat16"):
            parse_dtype(text)
