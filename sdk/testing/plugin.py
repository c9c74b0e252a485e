"""The conformance kit's pytest plugin (registered through the ``pytest11`` entry point).

It provides the fixtures the contract tests in :mod:`sdk.testing.suite` use: ``sdk_dialect``
(the dialect the ``harness`` fixture names, loaded like users load it) and ``kit`` (that
dialect connected to the harness's database, with the kit's tables dropped afterwards). The
test module supplies ``harness``. The marker ``sdk_requires(name)`` skips a test unless the
dialect declares capability ``name``, implements hook ``name``, or the harness has feature
``name``.
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
    """What the test's ``sdk_requires`` markers ask for that the dialect or harness lacks."""
    from ..types import Capability
    from .harness import Feature

    capabilities = {c.value for c in Capability}
    features = {f.value for f in Feature}
    missing = []
    for marker in request.node.iter_markers("sdk_requires"):
        for name in map(str, marker.args):
            if name in capabilities:
                if not dialect.has(Capability(name)):
                    missing.append(f"dialect {dialect.name!r} does not declare capability "
                                   f"{name}")
            elif name in features:
                if Feature(name) not in harness.features:
                    missing.append(f"harness {type(harness).__name__} lacks feature {name}")
            elif not dialect.implements(name):
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
