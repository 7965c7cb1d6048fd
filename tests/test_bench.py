"""``ircore bench``: the order it derives from measurements (tie margin), the config file it writes
(merged, re-read by the normal loader), and a real measurement of test implementations.

The command itself on real kernels (vllm_c vs native on CPU, then ``ircore list``) is tested in
providers/vllm_c/tests/test_tools.py.
"""

from __future__ import annotations

import time

import pytest
import torch

import ircore
from ircore.config import read_file
from ircore.errors import ConfigError
from ircore.tools import config_file
from ircore.tools.bench import EAGER, Measurement, fastest_order, run_bench


def _m(**times_us: float) -> Measurement:
    m = Measurement("rms_norm", (16, 4096), torch.bfloat16)
    m.times[EAGER] = {name: t * 1e-6 for name, t in times_us.items()}
    return m


def _failed(m: Measurement, name: str) -> Measurement:
    m.failed[name] = "raised RuntimeError: boom"
    return m


@pytest.mark.parametrize(
    "measured, suggested, expected",
    [
        # b is 3% faster than a: within the 5% margin, the suggested order stays
        ([_m(a=10.0, b=9.7, native=50.0)], ["a", "b", "native"], ["a", "b", "native"]),
        # b is 20% faster: it moves ahead
        ([_m(a=10.0, b=8.0, native=50.0)], ["a", "b", "native"], ["b", "a", "native"]),
        # native faster than both by far: first
        ([_m(a=10.0, b=12.0, native=2.0)], ["a", "b", "native"], ["native", "a", "b"]),
        # geometric mean over shapes: b wins one shape by 2x and loses the other by 1.5x -> ahead
        (
            [_m(a=10.0, b=5.0, native=50.0), _m(a=10.0, b=15.0, native=50.0)],
            ["a", "b", "native"],
            ["b", "a", "native"],
        ),
        # b was timed on no shape (declined every one): it keeps its place
        ([_m(a=10.0, native=50.0)], ["a", "b", "native"], ["a", "b", "native"]),
        # ... but is not left behind native when native passes a
        ([_m(a=10.0, native=2.0)], ["a", "b", "native"], ["b", "native", "a"]),
        # a raised on some input: behind native, whatever its times
        ([_m(a=1.0, native=50.0), _failed(_m(native=50.0), "a")], ["a", "b", "native"], ["b", "native", "a"]),
        # a and b never timed on the same shape: no evidence between them
        ([_m(a=10.0, native=50.0), _m(b=1.0, native=50.0)], ["a", "b", "native"], ["a", "b", "native"]),
    ],
    ids=[
        "tie",
        "faster",
        "native-first",
        "geomean",
        "untimed-stays",
        "untimed-ahead-of-native",
        "raised-goes-last",
        "no-common-shape",
    ],
)
def test_fastest_order_moves_only_beyond_the_tie_margin(measured, suggested, expected):
    assert fastest_order(measured, suggested, EAGER, 0.05) == expected


def test_zero_margin_orders_strictly_by_speed():
    assert fastest_order([_m(a=10.0, b=9.9, c=9.8, native=50.0)], ["a", "b", "c", "native"], EAGER, 0.0) == [
        "c",
        "b",
        "a",
        "native",
    ]


# ---------------------------------------------------------------------- the config file
def test_write_priority_creates_a_file_the_loader_reads_back(tmp_path):
    path = tmp_path / "ircore.toml"
    order = {"rms_norm": ["vllm_c", "native"], "silu_and_mul": ["native", "vllm_c"]}
    config_file.write_priority(path, order, note="Measured by a test.")
    text = path.read_text()
    assert text.startswith("# Measured by a test.\n")
    assert read_file(path).values == {"priority": {op: tuple(names) for op, names in order.items()}}


def test_write_priority_keeps_other_settings_and_ops(tmp_path):
    path = tmp_path / "ircore.toml"
    path.write_text(
        '# my comment\nproviders = ["vllm_c", "triton"]\ndisable = ["triton"]\nstrict = true\n\n'
        '[priority]\nrms_norm = ["triton"]\nsilu_and_mul = ["triton", "vllm_c"]\n'
    )
    config_file.write_priority(path, {"rms_norm": ["vllm_c", "native"]})
    assert read_file(path).values == {
        "providers": ("vllm_c", "triton"),
        "disable": ("triton",),
        "strict": True,
        "priority": {"rms_norm": ("vllm_c", "native"), "silu_and_mul": ("triton", "vllm_c")},
    }
    assert not (tmp_path / "ircore.toml.tmp").exists()


def test_write_priority_keeps_every_other_setting_as_it_was(tmp_path):
    """The file's fusions table and booleans come back as they were read: the fusions once came
    back as a list of their names, which switches on every one named and off every other."""
    path = tmp_path / "ircore.toml"
    path.write_text(
        'batch_invariant = true\ntrace_implementations = false\n\n'
        "[fusions]\nadd_rms_norm = false\nrms_norm_reshape = true\n"
    )
    before = read_file(path).values
    config_file.write_priority(path, {"rms_norm": ["vllm_c", "native"]})
    after = dict(read_file(path).values)
    assert after.pop("priority") == {"rms_norm": ("vllm_c", "native")}
    assert after == before and after["fusions"] == {"add_rms_norm": False, "rms_norm_reshape": True}


def test_write_priority_keeps_a_wildcard_entry(tmp_path):
    """``*`` is no bare TOML key: written back quoted, and the measured ops' entries beat it."""
    path = tmp_path / "ircore.toml"
    path.write_text('[priority]\n"*" = ["triton", "vllm_c"]\n')
    config_file.write_priority(path, {"rms_norm": ["vllm_c", "native"]})
    assert read_file(path).values == {
        "priority": {"*": ("triton", "vllm_c"), "rms_norm": ("vllm_c", "native")}
    }


def test_write_priority_refuses_what_it_must_not_touch(tmp_path):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text("[project]\nname = 'x'\n")
    with pytest.raises(ConfigError, match=r"does not rewrite pyproject\.toml"):
        config_file.write_priority(pyproject, {"rms_norm": ["native"]})
    assert pyproject.read_text() == "[project]\nname = 'x'\n"
    broken = tmp_path / "ircore.toml"
    broken.write_text("priorty = 1\n")
    with pytest.raises(ConfigError, match="unknown key 'priorty'"):
        config_file.check_writable(broken)
    assert broken.read_text() == "priorty = 1\n"
    with pytest.raises(ConfigError, match="does not exist"):
        config_file.check_writable(tmp_path / "missing" / "ircore.toml")


# ---------------------------------------------------------------------- measuring
def test_run_bench_times_candidates_and_orders_them(tmp_path):
    def slow(x: torch.Tensor) -> torch.Tensor:
        time.sleep(0.0005)  # far slower than native on a 4x64 input, whatever the noise
        return ircore.ops.silu_and_mul.native(x)

    def declines(x: torch.Tensor) -> torch.Tensor:
        return ircore.ops.silu_and_mul.native(x)

    def broken(x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("no kernel for this GPU")

    ircore.ops.silu_and_mul.register_impl("b_slow", slow)
    ircore.ops.silu_and_mul.register_impl("b_f32", declines, supports_args=lambda x: x.dtype == torch.float32)
    ircore.ops.silu_and_mul.register_impl("b_broken", broken)
    report = run_bench(
        [ircore.ops.silu_and_mul],
        [(4, 64)],
        [torch.bfloat16],
        "cpu",
        rounds=3,
        round_s=0.002,
        graphs=False,
        tie_margin=0.05,
    )
    (m,) = report.measurements
    assert set(m.times[EAGER]) == {"b_slow", "native"}
    assert m.times[EAGER]["b_slow"] > 4e-4
    assert m.skipped == {"b_f32": "supports_args rejected these arguments"}
    assert m.failed == {"b_broken": "raised RuntimeError: no kernel for this GPU"}
    assert report.suggested["silu_and_mul"] == ["b_slow", "b_f32", "b_broken", "native"]
    # b_slow falls behind native; b_f32 (declined every input) keeps its place ahead of native;
    # b_broken (raised) goes last
    assert report.order["silu_and_mul"] == ["b_f32", "native", "b_slow", "b_broken"]
    doc = report.to_dict()
    assert doc["results"][0]["us"]["eager"]["b_slow"] >= 400 and doc["rank_by"] == "eager"
