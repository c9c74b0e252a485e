"""The layering pyproject.toml writes down as import-linter contracts holds for the tree, and a
contract fails when a change adds an import that runs back up (checked on a copy of the tree
with such imports added)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINT = Path(sys.executable).with_name("lint-imports")


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` with the repository's contracts over the packages under ``root``."""
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{root / 'plugins'}"}
    return subprocess.run([str(LINT), "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=300)


def test_the_tree_keeps_every_contract() -> None:
    done = _lint(ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout, done.stdout[-2000:]


def test_an_import_running_back_up_breaks_its_contract(tmp_path: Path) -> None:
    copy = tmp_path / "tree"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    shutil.copytree(ROOT / "sdk", copy / "sdk", ignore=ignore)
    shutil.copytree(ROOT / "plugins", copy / "plugins", ignore=ignore)
    upward = {  # a module, and the import a careless change adds to it (late, in a function)
        "sdk/spark/state/engine_state.py": "from ..startup.headstart import HeadStart",
        "sdk/spark/executor/reads.py": "from ..driver.requests import list_requests",
        "sdk/dialect/types.py": "from sdk.job.target import Target",
        "sdk/job/spec.py": "from sdk_sqlite import read_target",
        "plugins/sdk_mysql/_rights.py": "from sdk_postgres import q",
    }
    for module, statement in upward.items():
        with (copy / module).open("a") as out:
            out.write(f"\n\ndef _added() -> None:\n    {statement}  # noqa\n")
    done = _lint(copy)
    assert done.returncode != 0, done.stdout[-3000:]
    broken = done.stdout[done.stdout.index("Broken contracts"):]
    for arrow in ("sdk.spark.state.engine_state -> sdk.spark.startup.headstart",
                  "sdk.spark.executor.reads -> sdk.spark.driver.requests",
                  "sdk.dialect.types -> sdk.job.target", "sdk.job.spec -> sdk_sqlite",
                  "sdk_mysql._rights -> sdk_postgres"):
        assert arrow in broken, broken
    assert "Contracts: 0 kept, 6 broken." in done.stdout, done.stdout[-2000:]
