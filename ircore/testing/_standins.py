"""Stand-ins: testing an adapter for hardware you do not have, against a model of its vendor library.

A stand-in is a test-only distribution with the vendor package's import name and call forms,
computing in torch on the CPU and addressing memory as the real kernel does (so a marshalling
bug gives wrong numbers). :func:`install_standins` installs a folder of them as real
distributions; :func:`simulated_active` then runs ircore as on the vendor's platform, with the
provider loaded and required to be ``active``.
"""

from __future__ import annotations

import contextlib
import importlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ircore.platform import Platform
from ircore.testing._platform import simulated_platform


def install_standins(folder: str | Path, target: str | Path) -> Path:
    """Install every project in ``folder`` (one stand-in per subfolder with a ``pyproject.toml``)
    into ``target`` with pip, and make them importable in this process; returns ``target``.

    Installed as real distributions (metadata, entry points), without dependencies and without
    build isolation; a subprocess sees them with ``target`` on ``PYTHONPATH``.
    """
    folder, target = Path(folder), Path(target)
    projects = sorted(str(p) for p in folder.iterdir() if (p / "pyproject.toml").is_file())
    if not projects:
        raise FileNotFoundError(f"no stand-in projects (folders with a pyproject.toml) in {folder}")
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-compile"]
    subprocess.run([*pip, "--disable-pip-version-check", "--target", str(target), *projects], check=True)
    if str(target) not in sys.path:
        sys.path.insert(0, str(target))
    importlib.invalidate_caches()
    return target


@contextlib.contextmanager
def simulated_active(provider: str, platform: Platform | None = None, /, **fields: Any) -> Iterator[Platform]:
    """This process as on ``platform`` (:func:`simulated_platform`), with ``provider`` loaded and
    ``active``: an ``AssertionError`` with its state and reason otherwise."""
    from ircore.providers._manager import MANAGER

    with simulated_platform(platform, **fields) as simulated:
        MANAGER.ensure_loaded()
        record = MANAGER.records.get(provider)
        assert record is not None, (
            f"provider {provider!r} is not installed (no `ircore.providers` entry point)"
        )
        assert record.state.value == "active", f"provider {provider!r} is {record.state}: {record.reason}"
        yield simulated
