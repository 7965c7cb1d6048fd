"""ircore's pytest plugin (entry point group ``pytest11``, shipped with the core).

``pytest --ircore-provider NAME`` adds one test per op, device, dtype, seed and sample of the
conformance kit for provider ``NAME``, so a failure names its exact case. A test function that
takes the ``ircore_case`` fixture runs once per case instead (providers from
``@pytest.mark.ircore_provider("NAME")`` or ``--ircore-provider``); its body calls
``ircore_case.check()``.

pytest imports this module in every run of an environment where ircore is installed, so it
imports nothing heavy: ircore (and torch) load only when the option or the fixture is used.
The work is in :mod:`ircore.testing.pytest_items`.
"""

from __future__ import annotations

from typing import Any

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("ircore", "ircore provider conformance")
    group.addoption(
        "--ircore-provider",
        action="append",
        default=[],
        metavar="NAME",
        help="add the ircore conformance tests of installed provider NAME (repeatable)",
    )
    group.addoption(
        "--ircore-device",
        action="append",
        default=[],
        metavar="DEV",
        help="run ircore conformance tests on this device only (repeatable; default: every device present)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "ircore_provider(*names): the providers whose cases the ircore_case fixture runs"
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "ircore_case" in metafunc.fixturenames:
        from ircore.testing import pytest_items

        pytest_items.parametrize(metafunc)


@pytest.hookimpl(tryfirst=True)  # before -k/-m deselection, so that they apply to these tests too
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[Any]) -> None:
    if config.getoption("ircore_provider"):
        from ircore.testing import pytest_items

        items.extend(pytest_items.collect(session, config))


@pytest.fixture
def ircore_isolated() -> Any:
    """ircore's state as a scratch copy for the test (``ircore.testing.isolated()``); yields it."""
    from ircore.testing import isolated

    with isolated() as state:
        yield state


@pytest.fixture
def ircore_case(request: pytest.FixtureRequest) -> Any:
    """One conformance case (an ``ircore.testing.Case``); ``ircore_case.check()`` runs it."""
    return request.param
