"""The hooks, the core's view of the registrations, the fakes (torch.compile) and the loader."""

import json
import os
import subprocess
import sys
from pathlib import Path

import _ref
import pytest
import torch
from ircore_vllm_c import impls, kernels, scaled_mm

ircore = pytest.importorskip("ircore", reason="the ircore core package is not importable")
if not hasattr(ircore, "hookimpl"):
    pytest.skip("this ircore has no hookimpl", allow_module_level=True)

from ircore_vllm_c import provider  # noqa: E402

from ircore.kit import Registrar  # noqa: E402
from ircore.platform import Platform  # noqa: E402

CPU = Platform(kind="cpu", device_type="cpu", device_name="x86_64", capability=None, torch_version="2")
ROCM = Platform(
    kind="rocm",
    device_type="cuda",
    device_name="MI300X",
    capability=(9, 4),
    torch_version="2",
    gcn_arch="gfx942",
)
XPU = Platform(kind="xpu", device_type="xpu", device_name="Max 1550", capability=None, torch_version="2")


def test_check_platform():
    assert provider.ircore_check_platform(CPU) is None
    assert provider.ircore_check_platform(ROCM) == "needs an NVIDIA GPU or a CPU; found ROCm gfx942 (MI300X)"
    assert "needs an NVIDIA GPU or a CPU; found XPU" in provider.ircore_check_platform(XPU)


@pytest.fixture
def vllm_c_not_registered():
    """The registrar validates rows against the ops' registrations, and an earlier test of this
    process may have loaded the installed provider: a scratch copy of ircore's state without it."""
    with ircore.testing.isolated():
        for op in ircore.all_ops().values():
            if "vllm_c" in op.impls:
                op.unregister_impl("vllm_c")
        yield


@pytest.mark.usefixtures("vllm_c_not_registered")
def test_table_registers_every_op_with_its_rank():
    """The declarative table, read by the core's own registrar: functions, in place, cache, ranks."""
    registrar = Registrar("vllm_c")
    registrar.register_table(provider.IRCORE_IMPLEMENTATIONS)
    got = {impl.op_name: impl for impl in registrar.impls}
    rope = ["rotary_embedding", "rotary_embedding_query_only", "rotary_pos_emb", "fused_qk_norm_rope"]
    kernels = ["rms_norm", "fused_add_rms_norm", "silu_and_mul", "rms_norm_gated", "layer_norm"]
    kernels += ["gelu_and_mul", "mul_and_silu", "fatrelu_and_mul", "swigluoai_and_mul", *rope]
    matmuls = ["scaled_mm_fp8", "block_scaled_mm_fp8"]
    quant = list(provider.QUANT_OPS)
    assert list(got) == kernels + matmuls + quant
    for name, impl in got.items():
        module = scaled_mm if name in matmuls else impls
        assert impl.fn is getattr(module, name)
        assert impl.supports_args is getattr(module, f"{name}_supports")
        assert impl.inplace == (name in ("fused_add_rms_norm", *rope))
        # the kernels' predicates read signature facts only; the matmuls' read block_size too,
        # the quant ops' fp8_dtype (a dtype value)
        assert impl.cache_by_signature == (name in kernels)
    # 10: ahead of triton (20); the quant ops 30, behind it (measured slower on CUDA at every row)
    assert registrar.ranks == {**dict.fromkeys(kernels + matmuls, 10), **dict.fromkeys(quant, 30)}


@pytest.mark.skipif(not hasattr(ircore, "get_op"), reason="this ircore has no get_op")
@pytest.mark.parametrize("dtype", _ref.DTYPES, ids=str)
@pytest.mark.parametrize(
    "name",
    [
        "rms_norm",
        "fused_add_rms_norm",
        "silu_and_mul",
        "rms_norm_gated",
        "layer_norm",
        "gelu_and_mul",
        "mul_and_silu",
        "fatrelu_and_mul",
        "swigluoai_and_mul",
    ],
)
def test_core_samples(name, dtype):
    """Every core sample the predicate accepts matches the core's reference at its tolerance."""
    op = ircore.get_op(name)
    # what dispatch runs for the kernel (the in-place torch op returns nothing; this returns x, r)
    fn = op.validate_impl("check_vllm_c", getattr(impls, name), inplace=name == "fused_add_rms_norm").run
    pred = getattr(impls, f"{name}_supports")
    tol = op.tolerances[dtype]
    ran = 0
    for sample in op.sample_inputs(dtype, "cpu"):
        args = tuple(
            torch.empty_strided(a.shape, a.stride(), dtype=a.dtype).copy_(a)
            if isinstance(a, torch.Tensor)
            else a
            for a in sample.args
        )
        if not pred(*args):
            continue
        expected = op.reference(*sample.args)
        got = fn(*args)
        got = got if isinstance(got, tuple) else (got,)
        expected = expected if isinstance(expected, tuple) else (expected,)
        for g, e in zip(got, expected, strict=True):
            torch.testing.assert_close(g.double(), e.double(), atol=tol.atol, rtol=tol.rtol, msg=sample.label)
        ran += 1
    assert ran > 0


def test_opcheck_and_compile():
    """Schemas, fakes and functionalization hold up (what torch.compile relies on). The ops'
    fakes are the ircore ops' own, which ircore gives them when the provider registers."""
    ircore.dispatch.ensure_loaded()
    assert "vllm_c" in ircore.ops.rms_norm.impls
    x = torch.randn(4, 64, dtype=torch.bfloat16)
    w = torch.randn(64, dtype=torch.bfloat16)
    r = torch.randn(4, 64, dtype=torch.bfloat16)
    ops = torch.ops.ircore_vllm_c
    torch.library.opcheck(ops.rms_norm.default, (x, w, 1e-6, None))
    torch.library.opcheck(ops.rms_norm.default, (x, None, 1e-6, 32))
    torch.library.opcheck(ops.fused_add_rms_norm.default, (x.clone(), r.clone(), w, 1e-6, None))
    torch.library.opcheck(ops.silu_and_mul.default, (x,))

    def f(x, r, w):
        y = ops.silu_and_mul(torch.cat([x, r], dim=-1))
        ops.fused_add_rms_norm(y, r, w, 1e-6, None)
        return ops.rms_norm(y, w, 1e-6, None), r

    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
    got = compiled(x.clone(), r.clone(), w)
    expected = f(x.clone(), r.clone(), w)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, atol=0, rtol=0)


# ------------------------------------------------------------------------------------ loader


def _run_fresh(code: str, env: dict) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **env, "PYTHONPATH": str(Path(kernels.PACKAGE_DIR).parent)}
    return subprocess.run(
        [sys.executable, "-c", code], env=full_env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow
def test_missing_compiler_is_a_reason_not_a_crash(tmp_path):
    proc = _run_fresh(
        "import ircore_vllm_c; print(repr(ircore_vllm_c.load_kernels(cuda=False)))",
        {"IRCORE_CACHE_DIR": str(tmp_path), "CXX": "/nonexistent/c++", "IRCORE_VLLM_C_FORCE_JIT": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == repr("no C++ compiler found (set CXX or install g++)")


@pytest.mark.slow
def test_failed_build_names_the_error_and_the_log(tmp_path):
    cxx = tmp_path / "bad-c++"
    cxx.write_text(  # a compiler that answers version probes but fails every compile
        "#!/bin/sh\ncase \"$*\" in *.cpp*) echo 'cpu_ops.cpp:1:1: error: this compiler is broken' >&2; exit 1;; esac\n"
        'exec g++ "$@"\n'
    )
    cxx.chmod(0o755)
    proc = _run_fresh(
        "import ircore_vllm_c; print(ircore_vllm_c.load_kernels(cuda=False))",
        {"IRCORE_CACHE_DIR": str(tmp_path / "cache"), "CXX": str(cxx), "IRCORE_VLLM_C_FORCE_JIT": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    line = proc.stdout.strip().splitlines()[-1]
    assert line.startswith("CPU kernels failed to build: "), line
    assert "error" in line and "; log at " in line
    assert Path(line.split("; log at ")[-1]).is_file()
    assert "building CPU kernels" in proc.stderr


def test_aot_build_is_used_only_when_it_matches(tmp_path, monkeypatch):
    monkeypatch.delenv("IRCORE_VLLM_C_FORCE_JIT", raising=False)
    monkeypatch.setattr(kernels, "PACKAGE_DIR", tmp_path)
    (tmp_path / "_C.so").write_bytes(b"")
    meta = {"torch": torch.__version__, "sources": kernels.source_hash(), "cuda_archs": []}
    (tmp_path / kernels.AOT_META).write_text(json.dumps(meta))
    assert kernels._aot_library("cpu") == tmp_path / "_C.so"
    (tmp_path / kernels.AOT_META).write_text(json.dumps({**meta, "torch": "2.0.0"}))
    assert kernels._aot_library("cpu") is None
    (tmp_path / kernels.AOT_META).write_text(json.dumps({**meta, "sources": "0"}))
    assert kernels._aot_library("cpu") is None


def test_resolve_cuda_home_sees_through_a_wrapper(tmp_path, monkeypatch):
    toolkit = tmp_path / "cuda-13.0"
    (toolkit / "bin").mkdir(parents=True)
    (toolkit / "include").mkdir()
    (toolkit / "include" / "cuda_runtime.h").write_text("")
    real = toolkit / "bin" / "nvcc"
    real.write_bytes(Path(sys.executable).resolve().read_bytes()[:64] + b"\0" * 64)  # an ELF header
    bindir = tmp_path / "bin"
    bindir.mkdir()
    wrapper = bindir / "nvcc"
    wrapper.write_text(f'#!/bin/sh\nexec {real} "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setenv("PATH", str(bindir))
    assert kernels.resolve_cuda_home() == str(toolkit.resolve())
    monkeypatch.setenv("CUDA_HOME", str(bindir.parent))  # not a toolkit: skipped
    assert kernels.resolve_cuda_home() == str(toolkit.resolve())


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_conformance_kit(device):
    """The core's own conformance kit, when this provider is installed (entry point found)."""
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no GPU")
    testing = pytest.importorskip("ircore.testing")
    if not hasattr(testing, "check_provider"):
        pytest.skip("this ircore has no conformance kit")
    report = testing.check_provider("vllm_c", device=device)
    if not report.checked:
        pytest.skip("ircore-provider-vllm-c is not installed (no entry point), or not active here")
    # the fp8 quant ops and the fp8 matmuls have CPU kernels for every sample (both fp8 dtypes):
    # none declined there, and block_scaled_mm_fp8's CPU claim of batch invariance is checked
    assert all(n > 0 for n in report.checked.values()), str(report)
    if device == "cpu":
        cpu_kernels = (*provider.QUANT_OPS, *provider.CPU_MATMUL_OPS)
        assert all(report.checked[op] > 0 and not report.declined.get(op) for op in cpu_kernels), str(report)
        assert report.invariant.get("block_scaled_mm_fp8", 0) > 0, str(report)


def _with_vllm_c_first(name):
    ircore.dispatch.ensure_loaded()
    if "vllm_c" not in ircore.get_op(name).impls:
        pytest.skip("ircore-provider-vllm-c is not installed (no entry point), or not active here")
    return ircore.priority(**{name: ["vllm_c"]})


@pytest.mark.parametrize("expanded", ["x", "x_residual"])
def test_maybe_inplace_with_an_expanded_argument_runs_the_kernel_on_copies(expanded):
    """A stride-0 (expanded) in-place argument cannot be written in place: the core hands the
    in-place kernel copies, so the result is native's and the inputs are unchanged."""
    op = ircore.ops.fused_add_rms_norm
    x, r, w = torch.randn(4, 64), torch.randn(4, 64), torch.randn(64)
    args = {"x": x, "x_residual": r}
    args[expanded] = args[expanded][:1].expand(4, 64)
    before = {k: v.clone() for k, v in args.items()}
    expected = op.native(args["x"], args["x_residual"], w, 1e-6)
    with _with_vllm_c_first("fused_add_rms_norm"):
        assert op.explain(args["x"], args["x_residual"], w, 1e-6).chosen == "vllm_c"
        out = op.maybe_inplace(args["x"], args["x_residual"], w, 1e-6)
    torch.testing.assert_close(out, expected)
    assert all(torch.equal(args[k], before[k]) for k in args)


@pytest.mark.parametrize(
    "args, message",
    [
        (
            lambda x, w: (x, w, 2**64),
            "argument 'epsilon' is 18446744073709551616, outside [-2**63, 2**63 - 1]",
        ),
        (lambda x, w: (x, w, 10**400), "argument 'epsilon' is an int of about 401 digits, outside"),
        (lambda x, w: (x.to_sparse(), w, 1e-6), "argument 'x' is a sparse tensor of layout torch.sparse_coo"),
        (
            lambda x, w: (x, w.to_sparse(), 1e-6),
            "argument 'weight' is a sparse tensor of layout torch.sparse_coo",
        ),
    ],
    ids=["epsilon 2**64", "epsilon 10**400", "sparse x", "sparse weight"],
)
def test_bad_input_the_kernel_would_take_is_refused_first(args, message):
    """Ints beyond 64 bits and sparse tensors: refused by the core (after a good call filled the
    signature cache), as with native, not run (2**64) or failed on by the kernel."""
    x, w = torch.randn(2, 8), torch.randn(8)
    with _with_vllm_c_first("rms_norm"):
        ircore.ops.rms_norm(x, w, 1.0)  # an int-free good call with a non-negative epsilon: cached
        with pytest.raises(ircore.InvalidArgumentError) as info:
            ircore.ops.rms_norm(*args(x, w))
    assert str(info.value).startswith("ircore.ops.rms_norm: ") and message in str(info.value)
