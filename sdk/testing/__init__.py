"""The conformance kit: every contract test of a dialect, for its author to run.

A dialect's test module needs a :class:`Harness` fixture and one import::

    import os
    import pytest
    from sdk.testing import Harness
    from sdk.testing.suite import *  # noqa: F403

    class MyHarness(Harness):
        dialect = "mydb"
        ...

    @pytest.fixture(scope="session")
    def harness():
        return MyHarness(os.environ.get("SDK_TEST_MYDB_URL"))

See CONTRIBUTING.md and docs/conformance.md for the groups of tests and the harness verbs.
"""

from .harness import Feature, GoldenColumn, Harness
from .kit import Kit, KitError

__all__ = ["Feature", "GoldenColumn", "Harness", "Kit", "KitError"]
