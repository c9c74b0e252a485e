"""``sdk new-dialect NAME``: a new dialect distribution, ready to install and test.

The rendered project registers its entry point, has every required hook written out with a
docstring saying what to fill in, and a test file that adopts the conformance kit. A hook takes
effect once it is decorated with ``@hookimpl``; until then ``sdk dialects`` and the kit's first
test name exactly the hooks still missing.
"""

from __future__ import annotations

import re
from pathlib import Path

from . import hookspecs
from .errors import ConfigurationError

_PYPROJECT = '''\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "sdk-{name}"
version = "0.1.0"
description = "{title} dialect for sdk, the change-data-capture SDK"
requires-python = ">=3.11"
dependencies = ["sdk"]  # add the database driver here

[project.optional-dependencies]
test = ["pytest>=8"]

# This line is what makes sdk find the dialect.
[project.entry-points."sdk.dialects"]
{name} = "sdk_{name}"

[tool.setuptools]
packages = ["sdk_{name}"]

[tool.setuptools.package-data]
sdk_{name} = ["py.typed"]
'''

_README = '''\
# sdk-{name}

The `{name}` dialect for sdk. Write it in `sdk_{name}/__init__.py` (each hook's docstring says
what it must do; decorate it with `@hookimpl` once it does), then:

    pip install -e '.[test]'
    sdk dialects                                  # lists {name}, or the hooks still missing
    SDK_TEST_{upper}_URL={name}://user:pw@host/db pytest   # the conformance kit

The kit's tests are grouped by the part of the contract they check; see sdk's CONTRIBUTING.md.
'''

_HOOKS_HEAD = '''\
"""The {name} dialect for sdk.

Each function below is one hook of the contract in ``sdk.hookspecs``. A function takes effect
when it is decorated with ``@hookimpl``: fill one in, decorate it, run the conformance kit
(``pytest``), repeat. ``sdk dialects`` lists the required hooks still missing. Import the
database driver inside the hooks, never at the top of this module.

The reference dialect ``sdk_sqlite`` (in sdk's repository) is a complete worked example.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from sdk import (
    ChangeEvent,
    ConnectionConfig,
    DialectInfo,
    Heartbeat,
    Key,
    Offset,
    Row,
    SnapshotSplit,
    TableId,
    TableSchema,
    TableStats,
    hookimpl,
)

NAME = "{name}"


@hookimpl
def dialect_info() -> DialectInfo:
    """Who this dialect is. List the driver's module in ``drivers`` so ``sdk dialects`` can
    say when it is missing, and the capabilities (sdk.Capability) of the optional hooks you
    implement."""
    return DialectInfo(name=NAME, title="{title}", drivers=())
'''

_HOOKS = {
    "connect": ("config: ConnectionConfig", "Any"),
    "list_tables": ("conn: Any", "list[TableId]"),
    "describe_table": ("conn: Any, table: TableId", "TableSchema"),
    "table_stats": ("conn: Any, table: TableSchema", "TableStats"),
    "next_boundary": ("conn: Any, table: TableSchema, start: Key | None, size: int",
                      "Key | None"),
    "current_offset": ("conn: Any", "Offset"),
    "read_range": ("conn: Any, table: TableSchema, split: SnapshotSplit, fetch_size: int",
                   "Iterator[Sequence[Row]]"),
    "stream_log": ("conn: Any, tables: Sequence[TableSchema], start: Offset, "
                   "end: Offset | None", "Iterator[ChangeEvent | Heartbeat]"),
    "compare_offset": ("a: Offset, b: Offset", "int"),
}

_OPTIONAL = {
    "is_retriable": ("error: BaseException", "bool | None"),
}
"""Optional hooks that need no capability, stubbed after the required ones."""

_TEST = '''\
"""The sdk conformance kit against the {name} dialect.

Set SDK_TEST_{upper}_URL to a test database the dialect can capture; without it the tests that
need a database are skipped (the hook checks still run).
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from sdk import TableId
from sdk.testing import Harness
from sdk.testing.suite import *  # noqa: F403


class {camel}Harness(Harness):
    """How the kit creates tables and writes data in a {title} test database."""

    dialect = "{name}"

    def admin_connect(self) -> Any:
        """A DB-API connection allowed to create tables, in manual commit mode."""
        raise NotImplementedError("connect with the database's DB-API driver")

    def column_type(self, kind: str) -> str:
        return {{"int": "BIGINT", "text": "VARCHAR(64)"}}[kind]

    def table_id(self, name: str) -> TableId:
        return TableId("public", name)  # the schema the kit's tables go in


@pytest.fixture(scope="session")
def harness() -> Harness:
    return {camel}Harness(os.environ.get("SDK_TEST_{upper}_URL"))
'''


def _hook_stub(name: str, params: str, returns: str) -> str:
    spec = getattr(hookspecs, name)
    doc = (spec.__doc__ or "").strip()
    body = "\n".join(f"    {line.strip()}" if line.strip() else ""
                     for line in doc.splitlines()).lstrip()
    signature = f"def {name}({params}) -> {returns}:"
    if len(signature) > 96:
        signature = f"def {name}(\n    {params},\n) -> {returns}:"
    return (f"\n\n# Uncomment the next line once {name} works.\n# @hookimpl\n{signature}\n"
            f'    """{body}\n    """\n'
            f'    raise NotImplementedError("{name}")\n')


def render(name: str, directory: Path) -> Path:
    """Write the project for dialect ``name`` into ``directory/sdk-<name>`` and return it."""
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
        raise ConfigurationError(f"dialect name {name!r}: use lower-case letters, digits and "
                                 "underscores, starting with a letter (it becomes sdk_<name>)")
    root = directory / f"sdk-{name}"
    if root.exists():
        raise ConfigurationError(f"{root} exists already; choose another --dir")
    values = {"name": name, "upper": name.upper(),
              "title": name.replace("_", " ").title(),
              "camel": "".join(p.title() for p in name.split("_"))}
    package = root / f"sdk_{name}"
    (root / "tests").mkdir(parents=True)
    package.mkdir()
    (root / "pyproject.toml").write_text(_PYPROJECT.format(**values))
    (root / "README.md").write_text(_README.format(**values))
    hooks = _HOOKS_HEAD.format(**values) + "".join(
        _hook_stub(hook, *_HOOKS[hook]) for hook in hookspecs.REQUIRED_HOOKS if hook in _HOOKS)
    hooks += "\n\n# --- optional ---" + "".join(
        _hook_stub(hook, *types) for hook, types in _OPTIONAL.items())
    (package / "__init__.py").write_text(hooks)
    (package / "py.typed").write_text("")
    (root / "tests" / "test_conformance.py").write_text(_TEST.format(**values))
    return root
