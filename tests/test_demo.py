"""``sdk demo`` on an embedded PostgreSQL: it ends verified, with exit code 0."""

from __future__ import annotations

from pathlib import Path

import pytest

from sdk.cli import main

pytestmark = [pytest.mark.spark, pytest.mark.postgres]


def test_small_demo_is_verified(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--rows", "5000", "--workdir", str(tmp_path / "demo")]) == 0
    out = capsys.readouterr().out
    assert "created the shop: 5,000 rows in 5 tables" in out
    assert "verified: mirror == source for every table" in out
