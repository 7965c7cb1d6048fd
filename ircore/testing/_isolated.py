"""A scratch copy of ircore's state, for tests: everything changed inside is undone on exit."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from ircore import _torch_ops, config
from ircore import platform as _platform
from ircore._state import SCOPE, STATE, State
from ircore.providers._manager import MANAGER


@contextlib.contextmanager
def isolated() -> Iterator[State]:
    """Within the block, change anything; on exit ircore is as it was.

    Undone on exit: ops declared inside (gone from ``ircore.all_ops()`` and from
    ``torch.ops.ircore``, so the name can be declared again), implementations registered or
    removed, priorities (``set_priority``, ``configure``, a ``with ircore.priority`` block left
    open), configuration, provider states (loaded, reloaded, disabled) and a simulated platform.
    The block starts outside any priority scope. Yields the state (``ircore._state.State``), for
    tests that inspect it. Blocks nest.

    Example::

        with ircore.testing.isolated():
            @ircore.register_op
            def scale(x: torch.Tensor, factor: float) -> torch.Tensor:
                return x * factor

            ircore.set_priority(rms_norm=["native"])
        # scale and the priority are gone here

    As a pytest fixture: ``ircore_isolated`` (from ircore's pytest plugin).
    """
    snapshot, loader, simulated = STATE.snapshot(), MANAGER.snapshot(), _platform._simulated
    sources = config.remembered_sources()
    token = SCOPE.set(None)
    try:
        yield STATE
    finally:
        SCOPE.reset(token)
        config.restore_sources(sources)
        _platform.set_simulated_platform(simulated)
        declared = set(STATE.ops) - set(snapshot.ops)
        MANAGER.restore(loader)
        STATE.restore(snapshot)
        for name in declared:
            _torch_ops.undefine(name)
