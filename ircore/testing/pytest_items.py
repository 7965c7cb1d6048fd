"""The pytest plugin's work (see ``ircore_pytest``): conformance cases as pytest tests.

Each case becomes one test named by op, device, dtype, seed and sample, e.g.
``ircore-conformance[acme]::rms_norm[cpu-float32-seed0-5x256 variance_size=96]``: it fails with
the kit's message (which output, how far off, where), and is skipped when the provider's
``supports_args`` declines the sample. A provider that is not active gives one failing test that
says why, rather than no tests.
"""

from __future__ import annotations

from typing import Any

import pytest

from ircore.errors import IrcoreError
from ircore.testing._conformance import (
    DECLINED,
    FAILED,
    Case,
    iter_cases,
    present_devices,
    run_case,
    select_providers,
)


class CaseFailed(AssertionError):
    """A conformance case failed; its message is the whole report (no traceback needed)."""


def _devices(config: pytest.Config) -> list[str]:
    return list(config.getoption("ircore_device")) or present_devices()


def _provider_problem(name: str) -> str | None:
    try:
        select_providers([name])
    except IrcoreError as exc:
        return f"ircore provider {name!r}: {exc}"
    return None


class ProviderNode(pytest.Collector):
    """The tests of one provider, under the session."""

    def collect(self) -> list[pytest.Item]:  # the items are made in collect() below
        return []


class CaseItem(pytest.Item):
    """One conformance case."""

    def __init__(self, *, case: Case, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.case = case

    def runtest(self) -> None:
        result = run_case(self.case)
        if result.status == FAILED:
            raise CaseFailed(result.message)
        if result.status == DECLINED:
            pytest.skip(result.message)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, CaseFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self) -> tuple[Any, int | None, str]:
        return self.path, None, f"ircore conformance {self.case}"


class ProblemItem(pytest.Item):
    """Stands for a provider that cannot be checked here: fails with the reason."""

    def __init__(self, *, message: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.message = message

    def runtest(self) -> None:
        raise CaseFailed(self.message)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        return str(excinfo.value)

    def reportinfo(self) -> tuple[Any, int | None, str]:
        return self.path, None, self.name


def collect(session: pytest.Session, config: pytest.Config) -> list[pytest.Item]:
    """The tests for every ``--ircore-provider``."""
    items: list[pytest.Item] = []
    devices = _devices(config)
    for name in dict.fromkeys(config.getoption("ircore_provider")):
        node = f"ircore-conformance[{name}]"
        parent = ProviderNode.from_parent(session, name=node, nodeid=node)  # not "::" + name
        problem = _provider_problem(name)
        if problem is not None:
            items.append(ProblemItem.from_parent(parent, name="provider-is-active", message=problem))
            continue
        for case, _args in iter_cases(name, devices=devices):
            items.append(CaseItem.from_parent(parent, name=case.test_id, case=case))
    return items


def parametrize(metafunc: pytest.Metafunc) -> None:
    """Run a test that takes ``ircore_case`` once per case of the marked (or named) providers."""
    marker = metafunc.definition.get_closest_marker("ircore_provider")
    names = list(marker.args) if marker is not None else list(metafunc.config.getoption("ircore_provider"))
    if not names:
        pytest.fail(
            f"{metafunc.definition.nodeid}: the ircore_case fixture needs a provider: mark the test with "
            "@pytest.mark.ircore_provider('NAME') or run pytest --ircore-provider NAME",
            pytrace=False,
        )
    cases: list[Case] = []
    for name in names:
        problem = _provider_problem(name)
        if problem is not None:
            pytest.fail(problem, pytrace=False)
        cases += [case for case, _args in iter_cases(name, devices=_devices(metafunc.config))]
    metafunc.parametrize(
        "ircore_case", cases, ids=[f"{c.provider}-{c.test_id}" for c in cases], indirect=True
    )
