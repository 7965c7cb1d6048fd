"""Checks of a provider module's hook functions, with messages that say what to change.

Pluggy's own errors for these mistakes name neither the valid hooks nor the parameters a hook
may take, and a hook function that is not marked is silently never called; the loader runs
these checks on the imported module before registering it with pluggy.
"""

from __future__ import annotations

import difflib
import inspect
from types import ModuleType
from typing import Any

import pluggy

from ircore.providers import hookspecs

__all__ = ["HOOK_PARAMETERS", "marked_hook_problem", "unmarked_hooks"]

#: Every hook of the contract and the parameters ircore passes it (an implementation takes any of them).
HOOK_PARAMETERS: dict[str, tuple[str, ...]] = {
    name: tuple(inspect.signature(fn).parameters)
    for name, fn in sorted(vars(hookspecs).items())
    if callable(fn) and hasattr(fn, f"{hookspecs.PROJECT_NAME}_spec")
}


def _did_you_mean(name: str, choices: list[str] | tuple[str, ...]) -> str:
    close = difflib.get_close_matches(name, choices, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _required_parameters(fn: Any) -> list[str]:
    """The parameters pluggy fills from the hook call: positional ones without a default."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return []
    return [
        p.name
        for p in parameters
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    ]


def _marked(pm: pluggy.PluginManager, module: ModuleType) -> list[tuple[str, str, Any, bool]]:
    """``(attribute, hook name, function, optional)`` of every function marked ``@ircore.hookimpl``.

    ``optional``: marked ``optionalhook=True``, which pluggy lets name a hook this core lacks (a
    provider written for a later core may implement a hook this one does not call).
    """
    found = []
    for attribute in sorted(dir(module)):
        try:
            opts = pm.parse_hookimpl_opts(module, attribute)
        except Exception:  # an attribute pluggy cannot inspect is no hook
            continue
        if opts is not None:
            hook = opts.get("specname") or attribute
            found.append((attribute, hook, getattr(module, attribute), bool(opts.get("optionalhook"))))
    return found


def marked_hook_problem(pm: pluggy.PluginManager, module: ModuleType) -> str | None:
    """A marked function that names no hook, or takes a parameter its hook does not pass; or None."""
    hooks = list(HOOK_PARAMETERS)
    for attribute, hook, fn, optional in _marked(pm, module):
        where = f"{module.__name__}.{attribute}"
        if hook not in HOOK_PARAMETERS and optional:
            continue
        if hook not in HOOK_PARAMETERS:
            return (
                f"{where} is marked @ircore.hookimpl, but no ircore hook is named {hook!r}"
                f"{_did_you_mean(hook, hooks)}; valid hooks: {', '.join(hooks)}"
            )
        allowed = HOOK_PARAMETERS[hook]
        for parameter in _required_parameters(fn):
            if parameter not in allowed:
                takes = ", ".join(_required_parameters(fn))
                return (
                    f"{where}({takes}): parameter {parameter!r} is not one that ircore passes to {hook}"
                    f"{_did_you_mean(parameter, allowed)}; allowed parameters: {', '.join(allowed)} "
                    "(any of them, by name)"
                )
    return None


def unmarked_hooks(pm: pluggy.PluginManager, module: ModuleType) -> list[str]:
    """Warnings for module-level functions named like a hook that are not marked (never called)."""
    warnings = []
    for name in HOOK_PARAMETERS:
        fn = getattr(module, name, None)
        if fn is None or not callable(fn) or hasattr(fn, f"{hookspecs.PROJECT_NAME}_spec"):
            continue
        try:
            marked = pm.parse_hookimpl_opts(module, name) is not None
        except Exception:
            marked = False
        if not marked:
            warnings.append(
                f"{module.__name__}.{name} is not marked @ircore.hookimpl, so ircore never calls it; "
                "decorate it with @ircore.hookimpl (or rename it if it is not meant as a hook)"
            )
    return warnings
