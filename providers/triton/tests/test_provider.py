"""The hook module: light to import, honest platform check, all-three registration, ranks.

Until the core exports ``ircore.hookimpl``, a stand-in ``ircore`` module with the same pluggy
marker is used, so the hooks are tested either way.
"""

import subprocess
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import pluggy
import pytest

PROVIDER_ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class FakePlatform:
    kind: str
    name: str = "test"

    def describe(self) -> str:
        return {"cpu": f"CPU ({self.name})", "cuda": f"CUDA sm_90 ({self.name})"}.get(self.kind, self.name)


@pytest.fixture
def provider(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    try:
        from ircore import hookimpl  # noqa: F401
    except ImportError:
        stub = types.ModuleType("ircore")
        stub.hookimpl = pluggy.HookimplMarker("ircore")  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "ircore", stub)
    monkeypatch.delitem(sys.modules, "ircore_triton.provider", raising=False)
    import ircore_triton.provider as mod

    yield mod
    sys.modules.pop("ircore_triton.provider", None)


class Registrar:
    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.cached: list[bool] = []  # every predicate reads signature facts only: all True

    def register(self, op, fn, supports_args=None, inplace=False, *, cache_by_signature=False) -> None:
        self.calls.append((op, fn, supports_args, inplace))
        self.cached.append(cache_by_signature)


def test_hooks_are_marked(provider: types.ModuleType) -> None:
    for name in ("ircore_check_platform", "ircore_register", "ircore_default_priority"):
        assert hasattr(getattr(provider, name), "ircore_impl"), name


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


def test_register(provider: types.ModuleType) -> None:
    from ircore_triton import impls

    reg = Registrar()
    provider.ircore_register(reg, FakePlatform("cuda"))
    assert reg.cached == [True, True, True]
    assert reg.calls == [
        ("rms_norm", impls.rms_norm, impls.rms_norm_supports, False),
        ("fused_add_rms_norm", impls.fused_add_rms_norm, impls.fused_add_rms_norm_supports, True),
        ("silu_and_mul", impls.silu_and_mul, impls.silu_and_mul_supports, False),
    ]


def test_default_priority(provider: types.ModuleType) -> None:
    """Measured on the H200: vllm_c (rank 10) first for every op on CUDA; triton first elsewhere."""
    ranks = provider.ircore_default_priority(FakePlatform("cuda"))
    assert ranks == {"rms_norm": 20, "fused_add_rms_norm": 20, "silu_and_mul": 20}
    for kind in ("rocm", "xpu"):
        ranks = provider.ircore_default_priority(FakePlatform(kind))
        assert ranks == {"rms_norm": 20, "fused_add_rms_norm": 20, "silu_and_mul": 20}


def test_import_is_light() -> None:
    """Importing the hook module imports neither triton nor the kernels."""
    code = (
        "import sys, types, pluggy\n"
        "try:\n    from ircore import hookimpl\n"
        "except ImportError:\n"
        "    m = types.ModuleType('ircore'); m.hookimpl = pluggy.HookimplMarker('ircore')\n"
        "    sys.modules['ircore'] = m\n"
        "import ircore_triton.provider\n"
        "heavy = ('triton', 'ircore_triton.kernels', 'ircore_triton.impls')\n"
        "bad = [m for m in heavy if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        cwd=PROVIDER_ROOT,
        env={"PYTHONPATH": str(PROVIDER_ROOT)},
    )


def test_hooks_match_the_core_specs(provider: types.ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """pluggy validates our hook signatures against the core's hookspecs (when importable)."""
    try:
        from ircore.plugins import hookspecs
    except ImportError:
        pytest.skip("the ircore core package (hookspecs) is not importable")
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    pm.register(provider, name="triton")
    pm.check_pending()
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert pm.hook.ircore_check_platform(platform=FakePlatform("cpu", "x86_64")).startswith("no GPU")
    reg = Registrar()
    pm.hook.ircore_register(registrar=reg, platform=FakePlatform("cuda"))
    assert [c[0] for c in reg.calls] == ["rms_norm", "fused_add_rms_norm", "silu_and_mul"]
    assert pm.hook.ircore_default_priority(platform=FakePlatform("cuda"))["rms_norm"] == 20
