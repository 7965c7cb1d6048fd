"""The object a provider's ``ircore_register`` hook receives: collects, validates, then commits.

Nothing reaches an op until :meth:`Registrar.commit`, so a provider whose second registration is
rejected leaves no trace of its first.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from typing import Any

from ircore import _ownership
from ircore._state import STATE
from ircore.errors import ImplRegistrationError
from ircore.op import Impl, IrOp, attach_impls
from ircore.providers._table import TABLE_ATTRIBUTE, ImplSpec, resolve


class Registrar:
    """Registers one provider's implementations, all or nothing."""

    _provider: str

    def __init__(self, provider: str) -> None:
        object.__setattr__(self, "_provider", provider)
        self._pending: list[tuple[IrOp, Impl]] = []
        #: ranks suggested by table rows (see :meth:`register_table`)
        self.ranks: dict[str, int] = {}

    @property
    def provider(self) -> str:
        """The provider this registrar registers for: fixed (a provider registers as itself)."""
        return self._provider

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("provider", "_provider"):
            _ownership.refuse_inside_provider(f"registrar.{name} = {value!r}", verb="set")
            raise ImplRegistrationError(
                f"Registrar({self.provider!r}).{name} is fixed: a registrar registers for the provider "
                "it was made for"
            )
        object.__setattr__(self, name, value)

    def register(
        self,
        op: str,
        fn: Callable[..., Any],
        supports_args: Callable[..., bool] | None = None,
        inplace: bool = False,
        *,
        cache_by_signature: bool | None = None,
        fake: Callable[..., Any] | None = None,
        batch_invariant: bool | Callable[..., bool] = False,
        invariant_fn: Callable[..., Any] | None = None,
    ) -> None:
        """Offer ``fn`` as this provider's implementation of ``op`` (see ``IrOp.register_impl``)."""
        target = self._op(op)
        if any(pending.op_name == op for _, pending in self._pending):
            raise ImplRegistrationError(f"provider {self.provider!r} registers op {op!r} twice")
        impl = target.validate_impl(
            self.provider,
            fn,
            supports_args,
            inplace,
            cache_by_signature=cache_by_signature,
            fake=fake,
            batch_invariant=batch_invariant,
            invariant_fn=invariant_fn,
        )
        self._pending.append((target, impl))

    def _op(self, op: str) -> IrOp[..., Any]:
        """The op named ``op``; an unknown name is this provider's registration error."""
        target: IrOp[..., Any] | None = STATE.ops.get(op)
        if target is None:
            known = sorted(STATE.ops)
            close = difflib.get_close_matches(op, known, n=1) if isinstance(op, str) else []
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ImplRegistrationError(
                f"provider {self.provider!r} registers unknown op {op!r}; known ops: {known}{hint}"
            )
        return target

    def register_table(self, table: Mapping[str, ImplSpec]) -> None:
        """Register every row of a declarative table ``{op: ImplSpec}`` (see ircore.providers._table)."""
        if not isinstance(table, Mapping):
            raise ImplRegistrationError(
                f"provider {self.provider!r}: {TABLE_ATTRIBUTE} is a {type(table).__name__}; "
                "expected a dict of op name -> ircore.ImplSpec"
            )
        for op, spec in table.items():
            if not isinstance(spec, ImplSpec):
                raise ImplRegistrationError(
                    f"provider {self.provider!r}: {TABLE_ATTRIBUTE}[{op!r}] is {spec!r}; "
                    "expected an ircore.ImplSpec"
                )
            self._op(op)  # an unknown op is named before its functions are looked up
            self.register(
                op,
                resolve(spec.fn, self.provider, op, "fn"),
                resolve(spec.supports_args, self.provider, op, "supports_args"),
                spec.inplace,
                cache_by_signature=spec.cache_by_signature,
                fake=resolve(spec.fake, self.provider, op, "fake"),
                batch_invariant=resolve(spec.batch_invariant, self.provider, op, "batch_invariant"),
                invariant_fn=resolve(spec.invariant_fn, self.provider, op, "invariant_fn"),
            )
            if spec.rank is not None:
                self.ranks[op] = spec.rank

    @property
    def impls(self) -> tuple[Impl, ...]:
        """What was offered so far, validated, in order; nothing reaches an op before commit."""
        return tuple(impl for _, impl in self._pending)

    @property
    def op_names(self) -> tuple[str, ...]:
        return tuple(impl.op_name for _, impl in self._pending)

    def commit(self) -> None:
        """Attach every validated implementation to its op (ircore does, after the hooks return)."""
        _ownership.refuse_inside_provider(f"Registrar({self.provider!r}).commit()")
        attach_impls(self.impls)
