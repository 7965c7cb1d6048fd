"""Run a function once a module has been imported, without importing it.

Why: ircore's DTensor sharding rules need ``torch.distributed.tensor``, which ``import ircore``
must not import (it is slow and most processes never use it), yet a DTensor must never reach
an ircore op before the rules are registered. Every DTensor comes from that package, so
registering right after it is imported is early enough, and costs the eager path nothing.

How: a finder at the front of ``sys.meta_path`` that answers only for the watched name. It lets
the other finders locate the module, then wraps that one module's ``exec_module`` so the callback
runs when the module's code has finished. It removes itself once the module is imported.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import logging
import sys
from collections.abc import Callable, Sequence
from types import ModuleType


def _imported(name: str) -> bool:
    """Whether ``name`` is in ``sys.modules`` and its code has finished running."""
    module = sys.modules.get(name)
    spec = getattr(module, "__spec__", None)
    return module is not None and not getattr(spec, "_initializing", False)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself; hooks ``callback`` onto the import of ``name``."""

    def __init__(self, name: str, callback: Callable[[], None]) -> None:
        self.name = name
        self.callback = callback

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        spec = _spec_from_other_finders(self, fullname, path, target)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None  # let the import fail, or succeed, exactly as it would without us
        exec_module = spec.loader.exec_module

        def exec_then_call(module: ModuleType) -> None:
            exec_module(module)
            _remove(self)
            self.callback()

        # An attribute of this loader instance only: other modules' loaders are untouched.
        spec.loader.exec_module = exec_then_call  # type: ignore[method-assign]
        return spec


def _spec_from_other_finders(
    finder: _AfterImport, fullname: str, path: Sequence[str] | None, target: ModuleType | None
) -> importlib.machinery.ModuleSpec | None:
    """What the import system would find without ``finder``: the next finder's answer."""
    for other in list(sys.meta_path):
        find_spec = getattr(other, "find_spec", None)
        if other is finder or find_spec is None:
            continue
        spec = find_spec(fullname, path, target)
        if spec is not None:
            return spec
    return None


def _remove(finder: _AfterImport) -> None:
    try:
        sys.meta_path.remove(finder)
    except ValueError:
        pass


def call_after_import(name: str, target: str, consequence: str) -> None:
    """Call ``target`` once module ``name`` is imported: now if it already is, else right after.

    ``target`` is ``"module:function"``; the module is imported only then, so a caller's import
    pays for this module alone. The call runs inside the import statement that first imports
    ``name`` (after the module's own code), so a failure never propagates: it is logged at
    WARNING with ``consequence``, what the failure means for the user.
    """
    if _imported(name):
        _call(target, name, consequence)
    else:
        sys.meta_path.insert(0, _AfterImport(name, lambda: _call(target, name, consequence)))


def _call(target: str, after: str, consequence: str) -> None:
    module, _, function = target.partition(":")
    try:
        getattr(importlib.import_module(module), function)()
    except Exception as exc:
        logging.getLogger("ircore").warning(
            "%s() failed after %s was imported (%s: %s); %s. Call %s.%s() to see the traceback.",
            target,
            after,
            type(exc).__name__,
            exc,
            consequence,
            module,
            function,
        )
