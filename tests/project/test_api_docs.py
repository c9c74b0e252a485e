"""The API reference (docs/api: Sphinx autodoc over everything a dialect author imports or
constructs) builds from the docstrings with no warning."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers.paths import ROOT

DOCS = ROOT / "docs" / "api"


@pytest.mark.slow
def test_the_api_reference_builds_without_warnings(tmp_path: Path) -> None:
    build = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(DOCS),
         str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stdout + build.stderr
    page = (tmp_path / "index.html").read_text()
    for name in ("sdk.dialect.types.DialectInfo", "sdk.dialect.types.ChangeEvent",
                 "sdk.dialect.types.Requirement", "sdk.dialect.sql.row_range",
                 "sdk.dialect.sqlbase.SqlDialect", "sdk.testing.harness.Harness",
                 "sdk.dialect.errors.OffsetExpiredError"):
        assert f'id="{name}"' in page, name
