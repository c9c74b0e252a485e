"""The conformance kit's pytest plugin (registered through the ``pytest11`` entry point).

It provides the fixtures the contract tests in :mod:`sdk.testing.suite` use: ``sdk_dialect``
(the dialect the ``harness`` fixture names, loaded like users load it) and ``kit`` (that
dialect connected to the harness's database, with the kit's tables dropped afterwards). The
test module supplies ``harness``. The marker ``sdk_requires(name)`` skips a test unless the
dialect has capability ``name`` (given by its hooks or declared), implements hook ``name``, or
the harness has feature ``name``; a name that is none of these fails the test.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "sdk_requires(name): needs a dialect capability, hook or harness feature")


@pytest.fixture
def sdk_dialect(harness: Any) -> Any:
    """The dialect under test; fails naming the hooks an incomplete plugin still lacks."""
    from .kit import load_dialect

    return load_dialect(harness)


def _missing(request: pytest.FixtureRequest, dialect: Any, harness: Any) -> list[str]:
    """What the test's ``sdk_requires`` markers ask for that the dialect or harness lacks; a
    name that is none of these fails the test (a typo must not skip it)."""
    from ..dialect.types import Capability
    from .harness import Feature
    from .kit import requirement_kind

    missing = []
    for marker in request.node.iter_markers("sdk_requires"):
        for name in map(str, marker.args):
            kind = requirement_kind(name)
            if kind == "capability" and not dialect.has(Capability(name)):
                missing.append(f"dialect {dialect.name!r} has no capability {name}")
            elif kind == "feature" and Feature(name) not in harness.features:
                missing.append(f"harness {type(harness).__name__} lacks feature {name}")
            elif kind == "hook" and not dialect.implements(name):
                missing.append(f"dialect {dialect.name!r} does not implement hook {name}")
    return missing


@pytest.fixture
def kit(request: pytest.FixtureRequest, harness: Any, sdk_dialect: Any) -> Iterator[Any]:
    """The dialect under test connected to the harness's database."""
    from .kit import Kit

    missing = _missing(request, sdk_dialect, harness)
    if missing:
        pytest.skip("; ".join(missing))
    if harness.url is None:
        pytest.skip(harness.skip_reason)
    kit = Kit(harness, sdk_dialect)
    try:
        yield kit
    finally:
        kit.close()
