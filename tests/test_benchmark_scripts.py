"""The GPU benchmark's own logic that runs without a GPU: benchmarks/kernels_gpu.py's re-timing of
close rows (the figures in benchmarks/README.md rest on it)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import kernels_gpu as kg


def _cell(impl: str, us: float, tokens: int = 16) -> kg.Cell:
    return kg.Cell("rms_norm", "bf16", tokens, 4096, impl, status="ok", graph_us=us, graph_calls=20)


def test_close_rows_are_retimed_together_and_reported():
    # row T=16: ours 1.04x of the best anchor in turn (close: re-timed); row T=1: 1.5x (not close)
    cells = [
        _cell("triton", 10.4), _cell("vllm_c", 11.0), _cell("liger", 10.0), _cell("eager", 30.0),
        _cell("triton", 15.0, tokens=1), _cell("liger", 10.0, tokens=1),
    ]  # fmt: skip
    interleaved = {"triton": 9.9e-6, "liger": 10.0e-6}  # what the same rounds measure
    asked = []

    def make_runner(cell: kg.Cell):
        asked.append((cell.tokens, cell.impl))
        return lambda n: interleaved[cell.impl]

    assert kg.retime_close_rows(cells, make_runner, time.monotonic() + 10) == 1
    assert sorted(asked) == [(16, "liger"), (16, "triton")]  # the row's best of each side, only
    table = "\n".join(kg.retimed_table(cells))
    assert "| rms_norm | bf16 | 16x4096 | triton | Liger | 1.040x | 0.990x |" in table
    assert "1x4096" not in table
    assert cells[0].extra["interleaved_with"] == "liger"


def test_retiming_stops_at_its_deadline_and_survives_a_failing_capture():
    cells = [_cell("triton", 10.2), _cell("liger", 10.0)]

    def broken(cell: kg.Cell):
        raise RuntimeError("capture failed")

    assert kg.retime_close_rows(cells, broken, time.monotonic() + 10) == 0
    assert kg.retime_close_rows(cells, lambda c: (lambda n: 1e-5), time.monotonic() - 1) == 0
    assert kg.retimed_table(cells) == []



class _Build:
    """A background build that is over once ``finished`` is set (kernels_gpu.Build's ``done``)."""

    def __init__(self) -> None:
        self.finished = False

    def done(self) -> bool:
        return self.finished


def test_a_built_column_is_measured_once_its_build_is_done_not_last():
    args = kg.argparse.Namespace(
        dtypes=["bf16"], ops=["rms_norm_static_fp8_quant"], hidden=[4096], tokens=[1, 16],
        anchors=["eager", "compile"], providers=["vllm_c", "triton"], unfused_ab=True,
    )  # fmt: skip
    pending = kg.plan(args)
    cols = [c.impl for c in pending]
    # both providers' columns come before the A/B column a short budget may leave out
    assert cols.index("vllm_c") < cols.index("triton_unfused")
    build = _Build()
    taken = [kg.next_cell(pending, {"vllm_c": build}).impl for _ in range(7)]
    # its build runs: the other columns go on meanwhile, past it
    assert taken == ["eager", "eager", "triton", "triton", "compile", "compile", "triton_unfused"]
    build.finished = True
    rest = [kg.next_cell(pending, {"vllm_c": build}).impl for _ in range(len(pending))]
    assert rest == ["vllm_c", "vllm_c", "triton_unfused"] and not pending  # then first


def test_when_every_cell_left_waits_on_a_build_the_first_is_taken():
    pending = [_cell("vllm_c", 1.0), _cell("flashinfer", 1.0)]
    running = {"vllm_c": _Build(), "flashinfer": _Build()}
    assert kg.next_cell(pending, running).impl == "vllm_c"  # measuring waits on its build


def test_compiled_launches_counts_what_an_inductor_call_launches():
    import compiled_launches as cl

    code = '''
def helper():
    cpp_fused_not_in_call_0(a)

def call(args):
    cpp_fused_add_rms_norm_0(buf0, buf1)
    buf2 = extern_kernels.mm(buf1, w)
    buf3 = torch.ops.ircore_vllm_c.rms_norm.default(buf2, w2, 1e-06)
    triton_poi_fused_cat_1.run(buf3, buf4, stream=stream0)
    extern_kernels.addmm(b, buf4, w3, out=buf5)
    return (buf5,)

def benchmark_compiled_module():
    cpp_fused_add_rms_norm_0(x, y)
'''
    counts = cl.count_launches(code)
    assert counts == {"inductor kernel": 2, "matmul (mm)": 1, "matmul (addmm)": 1, "ircore_vllm_c.rms_norm": 1}
    assert cl.count_launches("no call function here") == {}


def test_a_lost_cuda_context_ends_the_retiming_at_once():
    cells = [_cell("triton", 10.2), _cell("liger", 10.0), _cell("triton", 10.3, tokens=1), _cell("liger", 10.0, tokens=1)]
    asked = []

    def poisoned(cell: kg.Cell):
        asked.append(cell.tokens)
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    assert kg.retime_close_rows(cells, poisoned, time.monotonic() + 10) == 0
    assert asked == [1]  # the first close row only: every later capture would fail the same way
    assert not kg.context_lost(RuntimeError("capture failed"))


def test_flashinfer_quant_anchor_passes_its_tensors_in_flashinfers_order():
    # A stand-in for flashinfer.norm with its two static-scale functions' signatures
    # (out, input[, residual], weight, scale, eps): the column must hand them the benchmark's
    # tensors in that order and return the op's outputs (q[, residual sum]), which the op's own
    # comparison then accepts.
    import types

    import torch

    def quant(y, out, scale):
        out.copy_((y / scale).clamp(-448, 448).to(out.dtype))

    def rmsnorm_quant(out, x, w, scale, eps):
        n = torch.nn.functional.rms_norm(x.float(), (x.shape[-1],), eps=eps).to(x.dtype)
        quant((n * w).float(), out, scale)

    def fused_add_rmsnorm_quant(out, x, r, w, scale, eps):
        r.copy_(x + r)
        rmsnorm_quant(out, r, w, scale, eps)

    stub = types.SimpleNamespace(rmsnorm_quant=rmsnorm_quant, fused_add_rmsnorm_quant=fused_add_rmsnorm_quant)
    g = torch.Generator().manual_seed(0)
    x, r = torch.randn(4, 256, generator=g).bfloat16(), torch.randn(4, 256, generator=g).bfloat16()
    w, scale = (1 + 0.1 * torch.randn(256, generator=g)).bfloat16(), torch.full((1,), 0.02)
    impls = kg.Impls({}, 0)
    for op, inputs in (
        ("rms_norm_static_fp8_quant", (x, w, scale)),
        ("fused_add_rms_norm_static_fp8_quant", (x, r, w, scale)),
    ):
        assert "flashinfer" in [i for i in kg.APPLIES if op in kg.APPLIES[i]]
        outs = impls._quant_fn("flashinfer", op, stub)(*[a.clone() for a in inputs])
        assert len(outs) == len(kg.reference(op, inputs, 256))
        assert kg.quant_problem(op, inputs, outs) is None
    # the residual form writes its sum into r: timed on work buffers reset before each timing
    assert ("fused_add_rms_norm_static_fp8_quant", "flashinfer") in kg.INPLACE
