"""A checkpoint whose disk fills up: one line naming it, exit 3, and once space is freed a
rerun with the same checkpoint ends equal (nothing lost, nothing applied twice). The disk is
a small tmpfs this test mounts (as root; skipped elsewhere)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.cli import rows

from sdk.app.cli import main
from sdk.job.failures import Exit

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 3 MB tmpfs at ``tmp_path/disk``, unmounted after."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(disk)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_a_full_checkpoint_disk_is_one_line_and_a_rerun_after_freeing_it_ends_equal(
        spark: Any, tmp_path: Path, small_disk: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "shop.db"
    with sqlite3.connect(source) as conn:
        conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, note TEXT)")
        conn.executemany("INSERT INTO orders VALUES (?, ?)",
                         [(i, uuid.uuid4().hex * 4) for i in range(60_000)])
    src, dst = f"sqlite:///{source}", f"sqlite:///{tmp_path}/mirror.db"
    args = ["sync", "--source", src, "--target", dst, "--checkpoint", str(small_disk / "ck"),
            "--until", "caught-up", "--option", "snapshot.split.size=20000"]
    assert main(args) == Exit.REFUSED
    err = capsys.readouterr().err.strip().splitlines()
    assert 1 <= len(err) <= 2, err
    assert err[0].startswith("sdk: error: no space left on the device"), err
    assert "free space on the checkpoint's disk" in err[0] and "same --checkpoint" in err[0]
    if len(err) == 2:  # under the checkpoint if it fit there, else the temporary directory
        assert err[1].startswith("sdk: the full trace is in ")
        assert Path(err[1].split(" is in ", 1)[1]).is_file(), err[1]

    subprocess.run(["mount", "-o", "remount,size=512m", str(small_disk)], check=True)
    with sqlite3.connect(source) as conn:
        conn.execute("UPDATE orders SET note = 'changed' WHERE id < 5")
    assert main(args) == 0
    capsys.readouterr()
    assert rows(dst)["orders"] == rows(src)["orders"]
