"""Builds ircore's one optional compiled piece, the call-signature helper (``ircore/csrc``).

Why optional: ircore is pure Python and works without it; the helper makes the eager call of an op
about 3x cheaper (benchmarks/dispatch_overhead.py). It is compiled against torch's headers, so it
is built only when the build environment has torch and a C++ compiler, that is with
``pip install --no-build-isolation`` (the Makefile does this). ``_signature_build.json`` records the
torch version it was built for; ``ircore._signature`` uses the build only when that matches at run
time. A failed build is a warning, never an install failure. ``IRCORE_NO_BUILD=1`` skips it.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from setuptools import setup

META = "_signature_build.json"


def _warn(msg: str) -> None:
    print(f"ircore: {msg}", file=sys.stderr, flush=True)


def _build() -> dict:
    if os.environ.get("IRCORE_NO_BUILD"):
        return {}
    try:
        import torch
        from torch.utils import cpp_extension
    except ImportError:
        return {}  # build isolation: a pure-Python install
    if shutil.which(os.environ.get("CXX") or "c++") is None:
        _warn("no C++ compiler: the call-signature helper is not built (ircore works without it)")
        return {}
    ext = cpp_extension.CppExtension(
        "ircore._signature_ext",
        sources=["ircore/csrc/signature.cpp", "ircore/csrc/fast_call.cpp", "ircore/csrc/scope_block.cpp"],
        extra_compile_args={"cxx": ["-O2"]},
    )
    base = cpp_extension.BuildExtension.with_options(no_python_abi_suffix=True)

    class BuildOptional(base):
        """Builds the helper if it can, and records the torch version it was built against."""

        built = False

        def build_extension(self, ext):
            _warn("building the call-signature helper (ircore/csrc/*.cpp) ...")
            try:
                super().build_extension(ext)
            except Exception as exc:
                _warn(f"building the call-signature helper failed ({exc}); ircore works without it")
                return
            self.built = True

        def run(self):
            super().run()
            if not self.built:
                return
            meta = json.dumps({"torch": torch.__version__}) + "\n"
            targets = {Path(self.get_ext_fullpath("ircore._signature_ext")).parent}
            if self.inplace or getattr(self, "editable_mode", False):  # the .so is copied to the source
                targets.add(Path(self.get_finalized_command("build_py").get_package_dir("ircore")))
            for target in targets:
                (target / META).write_text(meta)

    return {"ext_modules": [ext], "cmdclass": {"build_ext": BuildOptional}}


setup(**_build())
