"""Op libraries: distributions that declare ops of their own, loaded before any provider.

A distribution names a module in the entry-point group ``ircore.ops``; importing it declares its
ops with ``ircore.register_op``. Each is imported once, inside the same guard as a provider
(:mod:`ircore._ownership`), which lets it declare ops and nothing else: an import that raises,
an op name already taken, or a call only the user may make leaves none of its ops declared and
the library ``failed`` or ``invalid`` with the reason. Its ops are then ``ircore.ops.<name>``
and ``torch.ops.ircore.<name>``, and any provider can implement them.
"""

from __future__ import annotations

import importlib
import sys

from ircore import _ownership, _torch_ops
from ircore._version import __version__
from ircore.errors import CONTAINED, IrcoreError
from ircore.providers._discovery import OPS_ENTRY_POINT_GROUP, discover, refusal
from ircore.providers._records import ProviderRecord, ProviderState, describe_failure, records_by_name


class OpLibraries:
    """The ``ircore.ops`` entry points and what became of each (the provider manager's part)."""

    def __init__(self) -> None:
        self.records: dict[str, ProviderRecord] = {}

    def load(self) -> None:
        """Import every op library not imported yet; each settles in a state with a reason."""
        for record, cands in records_by_name(discover(OPS_ENTRY_POINT_GROUP), self.records):
            if record.imported:
                continue
            refused = refusal(record.name, cands, __version__, kind="op library")
            if refused is not None:
                record.state, record.reason = refused
                continue
            self._import(record)

    def _import(self, record: ProviderRecord) -> None:
        """Import the library's module in the guard; keep its ops only if all went well."""
        record.imported = True
        module = record.module
        failure: str | None = None
        state = ProviderState.ACTIVE
        with _ownership.provider_code(record.name, declares_ops=True) as run:
            try:
                if module in sys.modules:  # imported before, its ops undone since: declare them again
                    importlib.reload(sys.modules[module])
                else:
                    importlib.import_module(module)
            except IrcoreError as exc:  # a declaration refused (a name taken, a bad signature)
                state, failure = ProviderState.INVALID, str(exc)
            except CONTAINED as exc:
                state, failure = ProviderState.FAILED, describe_failure(exc, f"importing {module}")
            except BaseException as exc:  # not contained (a KeyboardInterrupt): undo, say so, go on up
                self._undo(run, record, f"interrupted by {type(exc).__name__} (importing {module})")
                raise
        declared = run.declared()
        refused = run.verdict()
        if refused:
            state, failure = ProviderState.INVALID, refused
        if failure is not None:
            self._undo(run, record, failure, state)
            return
        record.state, record.ops = ProviderState.ACTIVE, tuple(declared)
        record.reason = f"declares {', '.join(declared) or 'no op'}"

    @staticmethod
    def _undo(
        run: _ownership.ProviderRun,
        record: ProviderRecord,
        reason: str,
        state: ProviderState = ProviderState.FAILED,
    ) -> None:
        """Leave none of the library's ops (nor anything else it changed); settle it with ``reason``."""
        declared = run.declared()
        run.undo()
        for name in declared:
            _torch_ops.undefine(name)
        record.state, record.reason, record.ops = state, reason, ()
