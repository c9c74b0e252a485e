"""The modules' old import paths (before ``sdk/`` was grouped by who uses it) still work for a
release: each warns and gives the module at its new path, and a plugin written against them
(the worked example, its imports put back to the old paths) passes its whole kit."""

from __future__ import annotations

import importlib
import os
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from helpers.paths import ROOT

from sdk._moved import MOVED

EXAMPLE = ROOT / "examples" / "sdk-pgtrigger"


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_warns_and_is_the_module_at_its_new_one(old: str) -> None:
    sys.modules.pop(old, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    assert module is importlib.import_module(MOVED[old])
    assert [str(w.message) for w in caught if w.category is DeprecationWarning
            and f"{old} moved to {MOVED[old]}" in str(w.message)]


def test_names_imported_from_an_old_path_are_the_same_objects() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from sdk.hookspecs import hookimpl as old_hookimpl
        from sdk.types import TableId as OldTableId
    import sdk
    from sdk.dialect.types import TableId

    assert OldTableId is TableId is sdk.TableId
    assert old_hookimpl is sdk.hookimpl


def _old_paths(text: str) -> str:
    for old, new in sorted(MOVED.items(), key=lambda kv: -len(kv[1])):
        text = re.sub(rf"\b{re.escape(new)}\b", old, text)
    return text


@pytest.mark.postgres
@pytest.mark.slow
def test_a_plugin_on_the_old_import_paths_passes_its_kit(
        tmp_path: Path, postgres_url: str, postgres_admin_url: str) -> None:
    copy = tmp_path / "example"
    shutil.copytree(EXAMPLE, copy, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    source = copy / "sdk_pgtrigger.py"
    source.write_text(_old_paths(source.read_text()))
    assert "from sdk.sqlbase import" in source.read_text()  # what a plugin wrote before
    env = {**os.environ, "PYTHONPATH": str(copy),  # this copy, not the installed example
           "SDK_TEST_POSTGRES_URL": postgres_url, "SDK_TEST_POSTGRES_ADMIN_URL": postgres_admin_url,
           "SDK_TEST_POSTGRES_CAPTURE_USER": "sdk_cdc"}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "-W", "always::DeprecationWarning", "--rootdir", str(copy),
                          str(copy / "tests")], cwd=copy, env=env, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert " passed" in run.stdout
    assert "sdk.sqlbase moved to sdk.dialect.sqlbase" in run.stdout, run.stdout[-3000:]
