"""What hardware this process runs on, asked once and only when someone needs it.

``import ircore`` must not touch a GPU, so nothing here runs at import time:
:func:`current_platform` probes torch on first call and caches the answer.
"""

from __future__ import annotations

import functools
import platform as _stdlib_platform
from dataclasses import dataclass

import torch

__all__ = ["Platform", "current_platform", "detect_platform"]


@dataclass(frozen=True)
class Platform:
    """The accelerator (or CPU) that ops run on by default in this process.

    ``kind`` is one of ``"cuda"``, ``"rocm"``, ``"xpu"``, ``"cpu"``; ``device_type`` is the torch
    device type that tensors on it have (``"cuda"`` for both NVIDIA and ROCm builds).
    """

    kind: str
    device_type: str
    device_name: str
    capability: tuple[int, int] | None
    torch_version: str
    device_count: int = 0
    gcn_arch: str | None = None

    @property
    def is_gpu(self) -> bool:
        return self.kind != "cpu"

    def describe(self) -> str:
        """One line for messages: ``CUDA sm_90 (NVIDIA H200)``, ``CPU (x86_64)``."""
        if self.kind == "cuda" and self.capability is not None:
            major, minor = self.capability
            return f"CUDA sm_{major}{minor} ({self.device_name})"
        if self.kind == "rocm":
            return f"ROCm {self.gcn_arch or ''} ({self.device_name})".replace("  ", " ")
        if self.kind == "xpu":
            return f"XPU ({self.device_name})"
        return f"CPU ({self.device_name})"


def detect_platform() -> Platform:
    """Probe torch for the best available device; never raises."""
    torch_version = torch.__version__
    try:
        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            if getattr(torch.version, "hip", None):
                return Platform(
                    kind="rocm",
                    device_type="cuda",
                    device_name=props.name,
                    capability=(props.major, props.minor),
                    torch_version=torch_version,
                    device_count=torch.cuda.device_count(),
                    gcn_arch=getattr(props, "gcnArchName", None),
                )
            return Platform(
                kind="cuda",
                device_type="cuda",
                device_name=props.name,
                capability=(props.major, props.minor),
                torch_version=torch_version,
                device_count=torch.cuda.device_count(),
            )
        xpu = getattr(torch, "xpu", None)
        if xpu is not None and xpu.is_available():
            return Platform(
                kind="xpu",
                device_type="xpu",
                device_name=xpu.get_device_name(0),
                capability=None,
                torch_version=torch_version,
                device_count=xpu.device_count(),
            )
    except Exception:  # a broken driver is a CPU-only machine for our purposes
        pass
    return Platform(
        kind="cpu",
        device_type="cpu",
        device_name=_stdlib_platform.machine() or "unknown",
        capability=None,
        torch_version=torch_version,
    )


# Set only by ircore.testing.simulated_platform: providers then run as if on this platform.
_simulated: Platform | None = None


def current_platform() -> Platform:
    """The platform of this process, detected on first call and cached.

    Inside :func:`ircore.testing.simulated_platform` it is the simulated platform instead.
    """
    return _simulated or _detected_platform()


@functools.lru_cache(maxsize=1)
def _detected_platform() -> Platform:
    return detect_platform()


def set_simulated_platform(platform: Platform | None) -> None:
    """Make :func:`current_platform` answer ``platform`` (``None``: the real one again).

    The public way is :func:`ircore.testing.simulated_platform`, which also reloads providers.
    """
    global _simulated
    _simulated = platform
