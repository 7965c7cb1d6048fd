"""The exceptions ircore raises, one class per kind of mistake, so callers can catch precisely."""

from __future__ import annotations

import traceback
from types import TracebackType

__all__ = [
    "IrcoreError",
    "OpDeclarationError",
    "ImplRegistrationError",
    "InvalidArgumentError",
    "PriorityError",
    "ConfigError",
    "ProviderLoadError",
    "ProviderIsolationError",
    "UnknownOpError",
    "NoToleranceError",
    "ProviderError",
    "DonatedInputError",
    "BatchInvariantError",
    "CONTAINED",
]

#: What ircore contains when a provider's code raises it (its import, hooks, predicates, kernels):
#: every ``Exception``, and ``SystemExit`` and ``GeneratorExit``, which a library raising them
#: cannot mean for the user's process. Any other ``BaseException`` (``KeyboardInterrupt``, an
#: ``asyncio.CancelledError``, a test framework's outcome) is the caller's control flow and
#: propagates, after ircore undid what the provider changed.
CONTAINED: tuple[type[BaseException], ...] = (Exception, SystemExit, GeneratorExit)


class IrcoreError(Exception):
    """Base class of every error ircore raises on purpose."""


class OpDeclarationError(IrcoreError, ValueError):
    """``register_op`` was given a function or name it cannot turn into an op."""


class ImplRegistrationError(IrcoreError, ValueError):
    """An implementation does not fit its op (schema, predicate, provider name, in-place)."""


class InvalidArgumentError(IrcoreError, ValueError):
    """An op was called with bad input; the message names the op and the argument."""


class PriorityError(IrcoreError, ValueError):
    """A priority list names an unknown op or provider."""


class ConfigError(IrcoreError, ValueError):
    """Configuration from a file, the environment or the API is wrong; names source and key."""


class ProviderLoadError(IrcoreError, RuntimeError):
    """Strict mode (``IRCORE_STRICT=1``) found a provider that is not active or disabled."""


class ProviderIsolationError(IrcoreError, RuntimeError):
    """A provider's code tried to change what only the user or its own registrar may change.

    Raised inside a provider's import or hooks by ``register_impl``, ``unregister_impl``,
    ``set_priority`` and ``configure``; the provider is then ``invalid`` and rolled back.
    """


class UnknownOpError(IrcoreError, KeyError):
    """No op has this name; the message lists the ops there are.

    A ``KeyError`` too, so ``except KeyError`` around ``ircore.get_op`` keeps working.
    """

    def __str__(self) -> str:  # KeyError's own str() would quote the message
        return str(self.args[0]) if self.args else ""


class NoToleranceError(IrcoreError, KeyError):
    """An op declares no tolerance for this dtype; the message names the dtypes it has."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class ProviderError(IrcoreError, RuntimeError):
    """A provider's kernel raised ``SystemExit`` or ``GeneratorExit`` in a call of an op.

    The original is its ``__cause__``; the message names the provider and the op.
    """


class DonatedInputError(IrcoreError, RuntimeError):
    """A tensor given to ``op.maybe_inplace`` is read after the call (found when compiling)."""


class BatchInvariantError(IrcoreError, RuntimeError):
    """Batch-invariant mode is on and no implementation of the op claims invariance for the call.

    Raised instead of running a batch-variant kernel; the message names the op, the call, why
    each implementation does not qualify and what would.
    """


def raised_at(tb: TracebackType | None, skip: tuple[str, ...] = ()) -> str | None:
    """``file:line`` of the deepest frame of ``tb`` whose file starts with none of ``skip`` (folders:
    ircore's own, the loader's libraries, torch) and is no frozen importlib module: the line of a
    provider's code that raised, or called what raised, for messages that say where; None when
    every frame is skipped."""
    for frame in reversed(traceback.extract_tb(tb)):
        if not frame.filename.startswith("<frozen") and not frame.filename.startswith(skip):
            return f"{frame.filename}:{frame.lineno}"
    return None
