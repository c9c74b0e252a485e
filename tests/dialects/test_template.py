"""``sdk new-dialect``: the rendered project installs, is discovered, and the conformance kit
runs against it naming exactly the hooks still missing, one fewer as each is filled in."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sdk.app.cli import main
from sdk.dialect.errors import ConfigurationError
from sdk.dialect.hookspecs import REQUIRED_HOOKS

NEEDED = [h for h in REQUIRED_HOOKS if h != "dialect_info"]


def _run(args: list[str], cwd: Path, site: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(site)}
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def _missing_in(text: str) -> list[str]:
    line = next(line for line in text.splitlines() if "lacks required hook(s): " in line)
    return line.split("lacks required hook(s): ")[1].split(";")[0].split(", ")


@pytest.mark.slow
def test_a_rendered_dialect_installs_and_the_kit_names_its_missing_hooks(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["new-dialect", "acme_db", "--dir", str(tmp_path)]) == 0
    root = tmp_path / "sdk-acme-db"  # the name is the URL scheme, which cannot hold '_'
    out = capsys.readouterr().out
    assert "dialect name 'acme-db' (URL scheme acme-db://)" in out and "created" in out
    site = tmp_path / "site"
    install = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                              "--target", str(site), str(root)],
                             capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stderr
    assert (site / "sdk_acme_db").is_dir()

    listed = _run([sys.executable, "-m", "sdk.app.cli", "dialects"], tmp_path, site)
    line = next(line for line in listed.stdout.splitlines() if line.startswith("acme-db"))
    assert "unusable" in line and _missing_in(line) == NEEDED
    # the URL scheme reaches the dialect (which names what it still lacks)
    check = _run([sys.executable, "-m", "sdk.app.cli", "check", "--source",
                  "acme-db://user@127.0.0.1/db"], tmp_path, site)
    assert "needs a scheme" not in check.stdout + check.stderr
    assert "acme-db" in check.stdout + check.stderr and "compare_offset" in \
        check.stdout + check.stderr

    kit = _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x",
                "-k", "test_plugin_implements_every_required_hook"], root, site)
    assert kit.returncode == 1, kit.stdout
    assert _missing_in(kit.stdout) == NEEDED

    # fill in one hook: the kit stops naming it
    hooks = root / "sdk_acme_db" / "__init__.py"
    text = hooks.read_text()
    stub = "# @hookimpl\ndef compare_offset(a: Offset, b: Offset) -> int:"
    assert stub in text
    text = text.replace(stub, stub.removeprefix("# ")).replace(
        'raise NotImplementedError("compare_offset")',
        'x, y = a["n"], b["n"]\n    assert isinstance(x, int) and isinstance(y, int)\n'
        '    return (x > y) - (x < y)')
    hooks.write_text(text)
    kit = _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x",
                "-k", "test_plugin_implements_every_required_hook"], root, site)
    assert _missing_in(kit.stdout) == [h for h in NEEDED if h != "compare_offset"]

    # the whole kit collects and reports against it, without a database
    everything = _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
                      root, site)
    assert " errors" in everything.stdout and "lacks required hook(s)" in everything.stdout


def test_new_dialect_refuses_a_bad_name_and_an_existing_directory(tmp_path: Path) -> None:
    from sdk.app.template import render

    for bad in ("1db", "acme db", "acme.db", "acme--db", "-acme", "acme_"):
        with pytest.raises(ConfigurationError, match="becomes the URL scheme"):
            render(bad, tmp_path)
    assert render("Acme_DB", tmp_path).name == "sdk-acme-db"
    render("acme", tmp_path)
    with pytest.raises(ConfigurationError, match="exists already"):
        render("acme", tmp_path)


def test_the_stubs_are_the_specs(tmp_path: Path) -> None:
    """Every hook is stubbed from its spec: with each ``@hookimpl`` uncommented the module
    loads as a dialect with every hook, so every capability a hook gives."""
    import importlib.util
    import inspect

    from sdk import DialectManager
    from sdk.app.template import render
    from sdk.dialect import hookspecs

    root = render("stubbed", tmp_path)
    source = root / "sdk_stubbed" / "__init__.py"
    text = source.read_text()
    for hook in hookspecs.CONTRACT:
        assert f"\ndef {hook}(" in text, f"no stub for {hook}"
    source.write_text(text.replace("# @hookimpl\n", "@hookimpl\n"))
    spec = importlib.util.spec_from_file_location("sdk_stubbed", source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    manager = DialectManager(load_entry_points=False)
    manager.register(module, "stubbed")
    dialect = manager.get("stubbed")
    assert all(dialect.implements(hook) for hook in hookspecs.CONTRACT)
    for hook in hookspecs.CONTRACT:
        assert inspect.signature(getattr(module, hook)) == \
            inspect.signature(getattr(hookspecs, hook)), hook
    assert set(dialect.info.capabilities) == set(hookspecs.CAPABILITY_HOOKS)
