"""Versions that protect a checkpoint: ``sdk --version`` names the release and the format it
writes; a checkpoint written by the previous release (format 1: the tagged code itself, run
from a worktree of the repository) is resumed equal and upgraded in place; one of a newer
format is refused in one line before anything is touched; and once a release without formats
wrote to a checkpoint after this one, the sync stops instead of trusting what it applied.
Output into a closed pipe ends quietly."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.paths import ROOT

import sdk
from sdk.spark.state.checkpoint_format import FORMAT, FORMAT_FILE

pytestmark = [pytest.mark.spark, pytest.mark.slow]

PREVIOUS = "737b96f"
"""The previous release, v0.1.0: its checkpoints have no format (format 1)."""


def _cli(*args: str, code: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``sdk`` in a child process: this release, or the one whose source tree is ``code``."""
    path = [str(code), str(code / "plugins")] if code is not None else []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*path, *sys.path])}
    return subprocess.run([sys.executable, "-m", "sdk.app.cli", *args], capture_output=True,
                          text=True, env=env, timeout=240, cwd=code or ROOT)


@pytest.fixture(scope="module")
def previous(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A worktree of the previous release's code."""
    if subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{PREVIOUS}^{{commit}}"],
                      capture_output=True).returncode:
        pytest.skip(f"the repository's history does not hold {PREVIOUS} (a shallow clone)")
    tree = tmp_path_factory.mktemp("previous") / "sdk"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree),
                    PREVIOUS], check=True, capture_output=True)
    try:
        yield tree
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                       capture_output=True)


class Bench:
    """A SQLite source and mirror, the checkpoint, and the sync's arguments."""

    def __init__(self, tmp_path: Path) -> None:
        self.source, self.mirror = tmp_path / "src.db", tmp_path / "mirror.db"
        self.checkpoint = tmp_path / "ck"
        with sqlite3.connect(self.source) as conn:
            conn.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT)")
            conn.executemany("INSERT INTO items VALUES (?, ?)",
                             [(i, f"item {i}") for i in range(300)])
        self.args = ["sync", "--source", f"sqlite:///{self.source}", "--target",
                     f"sqlite:///{self.mirror}", "--checkpoint", str(self.checkpoint),
                     "--until", "caught-up", "--option", "snapshot.split.size=100"]

    def change(self, n: int) -> None:
        with sqlite3.connect(self.source) as conn:
            conn.execute("INSERT INTO items VALUES (?, 'new')", (1000 + n,))
            conn.execute("UPDATE items SET name = ? WHERE id = ?", (f"changed {n}", n))
            conn.execute("DELETE FROM items WHERE id = ?", (100 + n,))

    def rows(self, path: Path) -> list[tuple[Any, ...]]:
        with sqlite3.connect(path) as conn:
            return conn.execute("SELECT id, name FROM items ORDER BY id").fetchall()

    def equal(self) -> bool:
        return self.rows(self.mirror) == self.rows(self.source)

    @property
    def state(self) -> Path:
        return self.checkpoint / "state"

    def pointers(self) -> dict[str, dict[str, Any]]:
        """Each state's record, by name."""
        return {p.stem: json.loads(p.read_text()) for p in (self.state / "states").glob("*.json")}


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_version_names_the_release_and_the_format_it_writes() -> None:
    out = _ok(_cli("--version"))
    assert out == f"sdk {sdk.__version__} (checkpoint format {FORMAT})\n"
    assert sdk.__version__ != "0+unknown" and sdk.__version__ != "0.1.0"


def test_output_into_a_closed_pipe_ends_quietly() -> None:
    """``sdk dialects --options | head -0``: the reader is gone before the first write."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.Popen([sys.executable, "-m", "sdk.app.cli", "dialects", "--options"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert child.stdout is not None and child.stderr is not None
    child.stdout.close()
    errors = child.stderr.read().decode()
    assert child.wait(60) == 0, errors
    assert errors == ""


def test_a_checkpoint_of_the_previous_release_resumes_equal_and_is_upgraded(
        previous: Path, tmp_path: Path) -> None:
    bench = Bench(tmp_path)
    _ok(_cli(*bench.args, code=previous))
    assert not (bench.state / FORMAT_FILE).exists()  # format 1
    old = set(bench.pointers())
    bench.change(1)
    _ok(_cli(*bench.args))
    assert bench.equal()
    record = json.loads((bench.state / FORMAT_FILE).read_text())
    assert record == {"format": FORMAT, "written_by": sdk.__version__,
                      "upgraded_at": max(old)}
    new = {n: p for n, p in bench.pointers().items() if n not in old}
    assert new and all(p.get("format") == FORMAT for p in new.values()), new
    bench.change(2)  # and on
    _ok(_cli(*bench.args))
    assert bench.equal()


def test_a_checkpoint_the_previous_release_wrote_to_after_this_one_is_refused(
        previous: Path, tmp_path: Path) -> None:
    """Run by 0.1.0 after this release, a checkpoint is not resumed: that release may have
    put deleted rows back (it knows no format and reads what it does not know as new)."""
    bench = Bench(tmp_path)
    _ok(_cli(*bench.args))
    bench.change(1)
    _ok(_cli(*bench.args, code=previous))
    bench.change(2)
    before = bench.rows(bench.mirror)
    result = _cli(*bench.args)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "by a release that knows no checkpoint format" in lines[0], \
        lines
    assert f"written by sdk {sdk.__version__}" in lines[0]
    assert bench.rows(bench.mirror) == before  # nothing applied
    assert _cli("status", "--checkpoint", str(bench.checkpoint)).returncode == 2


def test_a_checkpoint_of_a_newer_format_is_refused_before_anything_is_touched(
        tmp_path: Path) -> None:
    bench = Bench(tmp_path)
    _ok(_cli(*bench.args))
    (bench.state / FORMAT_FILE).write_text(json.dumps({"format": FORMAT + 1,
                                                       "written_by": "9.1.0"}))
    bench.change(1)
    before = bench.rows(bench.mirror)
    files = sorted(p.name for p in bench.state.rglob("*"))
    result = _cli(*bench.args)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == (
        f"sdk: error: checkpoint {bench.state} has format {FORMAT + 1}, written by sdk "
        f"9.1.0; this is sdk {sdk.__version__}, which reads formats up to {FORMAT}: run sdk "
        "9.1.0 or later with it (nothing was changed)")
    assert bench.rows(bench.mirror) == before
    assert sorted(p.name for p in bench.state.rglob("*")) == files  # no lease, no state
    shutil.rmtree(bench.checkpoint)  # this release can start over: a new snapshot, afresh
    bench.mirror.unlink()
    _ok(_cli(*bench.args))
    assert bench.equal()


@pytest.mark.mysql
def test_a_checkpoint_older_than_the_target_is_refused(
        tmp_path: Path, mysql_admin: Any, mysql_url: str) -> None:
    """A checkpoint restored from a copy taken before the target moved on (a MariaDB source,
    whose binlog still holds the copy's position): the target's ``_sdk_position`` is past its
    newest state, and the sync stops instead of applying older changes over newer ones and
    saying caught up."""
    table = f"older_{uuid.uuid4().hex[:8]}"

    def run(sql: str) -> None:
        with mysql_admin.cursor() as cur:
            cur.execute(sql)
    run(f"CREATE TABLE sdk_test.{table} (id INT PRIMARY KEY, v INT)")
    run(f"INSERT INTO sdk_test.{table} VALUES (1, 0), (2, 0)")
    mirror, checkpoint = tmp_path / "mirror.db", tmp_path / "ck"
    args = ["sync", "--source", mysql_url, "--target", f"sqlite:///{mirror}", "--tables",
            f"sdk_test.{table}", "--checkpoint", str(checkpoint), "--until", "caught-up"]
    try:
        _ok(_cli(*args))
        run(f"UPDATE sdk_test.{table} SET v = 1")
        _ok(_cli(*args))
        copy = tmp_path / "ck-copy"
        shutil.copytree(checkpoint, copy)
        run(f"UPDATE sdk_test.{table} SET v = 2")
        _ok(_cli(*args))
        shutil.rmtree(checkpoint)
        shutil.copytree(copy, checkpoint)  # restored
        result = _cli(*args)
        assert result.returncode == 2, result.stderr
        assert "past the newest state of checkpoint" in result.stderr and \
            "restored from a copy?" in result.stderr, result.stderr
        with sqlite3.connect(mirror) as conn:
            assert conn.execute(f"SELECT v FROM {table}").fetchall() == [(2,), (2,)]
    finally:
        run(f"DROP TABLE IF EXISTS sdk_test.{table}")
