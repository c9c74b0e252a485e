"""The conformance kit against the reference SQLite dialect (no server needed)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.harnesses import SqliteHarness

from sdk.testing import Harness
from sdk.testing.suite import *  # noqa: F403


@pytest.fixture(scope="session")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Harness:
    path: Path = tmp_path_factory.mktemp("kit") / "kit.db"
    return SqliteHarness(f"sqlite:///{path}")
