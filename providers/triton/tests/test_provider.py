"""The hook module: light to import, honest platform check, the declarative table, ranks."""

import subprocess
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import pluggy
import pytest

from ircore.kit import Registrar
from ircore.providers import hookspecs

PROVIDER_ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class FakePlatform:
    kind: str
    name: str = "test"

    def describe(self) -> str:
        return {"cpu": f"CPU ({self.name})", "cuda": f"CUDA sm_90 ({self.name})"}.get(self.kind, self.name)


@pytest.fixture
def provider(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    monkeypatch.delitem(sys.modules, "ircore_triton.provider", raising=False)
    import ircore_triton.provider as mod

    yield mod
    sys.modules.pop("ircore_triton.provider", None)


def test_check_platform_is_marked(provider: types.ModuleType) -> None:
    assert hasattr(provider.ircore_check_platform, "ircore_impl")


def test_check_platform(provider: types.ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    reason = provider.ircore_check_platform(FakePlatform("cpu", "x86_64"))
    assert reason == "no GPU: Triton kernels need a CUDA, ROCm or XPU device; found CPU (x86_64)"
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # the interpreter runs the kernels on the CPU
    assert provider.ircore_check_platform(FakePlatform("cpu", "x86_64")) is None
    for kind in ("cuda", "rocm", "xpu"):
        assert provider.ircore_check_platform(FakePlatform(kind)) is None  # triton is installed here


def test_check_platform_without_triton(provider: types.ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "triton", None)  # makes `import triton` raise ImportError
    reason = provider.ircore_check_platform(FakePlatform("cuda"))
    assert reason is not None and reason.startswith("needs the triton package: ")


@pytest.fixture
def triton_not_registered():
    """The registrar validates rows against the ops' registrations, and an earlier test of this
    process (the conformance kit loads the installed providers; under ``TRITON_INTERPRET=1`` the
    installed triton provider is active on CPU) may have registered ``triton`` for real: a
    scratch copy of ircore's state without it."""
    import ircore

    with ircore.testing.isolated():
        for op in ircore.all_ops().values():
            if "triton" in op.impls:
                op.unregister_impl("triton")
        yield


@pytest.mark.usefixtures("triton_not_registered")
def test_table_registers_every_op_with_rank_20(provider: types.ModuleType) -> None:
    """Measured on the H200: vllm_c (rank 10) first for every op on CUDA; triton first elsewhere."""
    from ircore_triton import impls

    registrar = Registrar("triton")
    registrar.register_table(provider.IRCORE_IMPLEMENTATIONS)
    got = {impl.op_name: impl for impl in registrar.impls}
    norms = ["rms_norm", "fused_add_rms_norm", "silu_and_mul", "rms_norm_gated", "layer_norm"]
    acts = ["gelu_and_mul", "mul_and_silu", "fatrelu_and_mul", "swigluoai_and_mul"]
    rope = ["rotary_embedding", "rotary_embedding_query_only", "rotary_pos_emb", "fused_qk_norm_rope"]
    quant = list(provider.QUANT_OPS)  # the fp8 quant ops (quant_kernels.py)
    assert len(quant) == 12
    assert list(got) == [*norms, *acts, *rope, "scaled_mm_fp8", "block_scaled_mm_fp8", *quant]
    for name, impl in got.items():
        assert impl.fn is getattr(impls, name)
        assert impl.supports_args is getattr(impls, f"{name}_supports")
        assert impl.inplace == (name == "fused_add_rms_norm" or name in rope)
        # the norms' and gated activations' predicates read signature facts only; the position ops'
        # read strides, the matmuls' block_size
        assert impl.cache_by_signature == (name in norms or name in acts)
    assert registrar.ranks == dict.fromkeys(got, 20)
    for name in quant:  # no fakes of their own: ircore's default declares the group scales' layout
        impl = got[name]  # (the conformance kit checks it); every one claims invariance (the ops
        assert impl.fake is None  # themselves refuse their batch-dependent calls: per-tensor dynamic)
        assert impl.batch_invariant is True


@pytest.mark.slow
def test_import_is_light() -> None:
    """Importing the hook module imports neither triton nor the kernels."""
    code = (
        "import sys\n"
        "import ircore_triton.provider\n"
        "heavy = ('triton', 'ircore_triton.kernels', 'ircore_triton.impls')\n"
        "bad = [m for m in heavy if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=PROVIDER_ROOT)


def test_impls_define_no_torch_ops() -> None:
    """The implementations are plain functions: importing them defines no ``torch.ops.ircore_triton``
    op (the core builds those when it attaches the implementations, and refuses a name already taken)."""
    code = (
        "import torch\n"
        "import ircore_triton.impls\n"
        "names = ['rms_norm', 'fused_add_rms_norm', 'fused_add_rms_norm_inplace', 'silu_and_mul']\n"
        "taken = [n for n in names if torch._C._jit_get_schemas_for_operator('ircore_triton::' + n)]\n"
        "assert not taken, taken\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=PROVIDER_ROOT)


def test_hooks_match_the_core_specs(provider: types.ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """pluggy validates our hook signatures against the core's hookspecs."""
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    pm.register(provider, name="triton")
    pm.check_pending()
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert pm.hook.ircore_check_platform(platform=FakePlatform("cpu", "x86_64")).startswith("no GPU")
