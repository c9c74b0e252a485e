"""``sdk new-dialect NAME``: a new dialect distribution, ready to install and test.

The rendered project registers its entry point, has every hook of :mod:`sdk.dialect.hookspecs`
written out (signature and docstring generated from the spec, grouped as the specs are), and a test
file that adopts the conformance kit. A hook takes effect once it is decorated with
``@hookimpl``; until then ``sdk dialects`` and the kit's first test name exactly the hooks
still missing.
"""

from __future__ import annotations

import builtins
import collections.abc
import inspect
import re
from pathlib import Path

import sdk

from ..dialect import hookspecs
from ..dialect.errors import ConfigurationError
from ..dialect.types import Capability

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
{name} = "sdk_{module}"

[tool.setuptools]
packages = ["sdk_{module}"]

[tool.setuptools.package-data]
sdk_{module} = ["py.typed"]
'''

_README = '''\
# sdk-{name}

The `{name}` dialect for sdk. Write it in `sdk_{module}/__init__.py` (each hook's docstring says
what it must do; decorate it with `@hookimpl` once it does), then:

    pip install -e '.[test]'
    sdk dialects                                  # lists {name}, or the hooks still missing
    SDK_TEST_{upper}_URL={name}://user:pw@host/db pytest   # the conformance kit

The kit's tests are grouped by the part of the contract they check; see sdk's CONTRIBUTING.md.
'''

_HOOKS_HEAD = '''\
"""The {name} dialect for sdk.

Each function below is one hook of the contract in ``sdk.dialect.hookspecs``, in its groups: the
four fetch tasks, the other required hooks, the optional source hooks and the target contract. A
function takes effect when it is decorated with ``@hookimpl``: fill one in, decorate it, run the
conformance kit (``pytest``), repeat. ``sdk dialects`` lists the required hooks still missing.
Import the database driver inside the hooks, never at the top of this module.

The reference dialect ``sdk_sqlite`` (in sdk's repository) is a complete worked example.
"""

from __future__ import annotations

{imports}

NAME = "{name}"


@hookimpl
def dialect_info() -> DialectInfo:
    """Who this dialect is. List the driver's module in ``drivers`` so ``sdk dialects`` can
    say when it is missing. Capabilities follow from the optional hooks you implement; declare
    in ``capabilities`` only those no hook shows: {declared}. ``url_options`` lists the URL
    query options ``connect`` reads, as (name, help); any other is refused."""
    return DialectInfo(name=NAME, title="{title}", drivers=(), url_options=())
'''

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


def _signature(name: str) -> tuple[str, str, list[str]]:
    """Hook ``name``'s parameters, return type and annotations as source text, from its spec
    (whose annotations are strings: the specs module postpones them)."""
    signature = inspect.signature(getattr(hookspecs, name))
    parameters = signature.parameters.values()
    params = ", ".join(f"{p.name}: {p.annotation}" for p in parameters)
    returns = str(signature.return_annotation)
    return params, returns, [returns, *(str(p.annotation) for p in parameters)]


def _hook_stub(name: str, params: str, returns: str) -> str:
    """The commented-out implementation of hook ``name``, with its spec's docstring."""
    doc = (getattr(hookspecs, name).__doc__ or "").strip()
    body = "\n".join(f"    {line.strip()}" if line.strip() else ""
                     for line in doc.splitlines()).lstrip()
    line = f"def {name}({params}) -> {returns}:"
    if len(line) > 96:
        line = f"def {name}(\n    {params},\n) -> {returns}:"
    return (f"\n\n# Uncomment the next line once {name} works.\n# @hookimpl\n{line}\n"
            f'    """{body}\n    """\n'
            f'    raise NotImplementedError("{name}")\n')


def _hooks_module(values: dict[str, str]) -> str:
    """The plugin module: ``dialect_info`` written, then a stub per hook, group by group."""
    stubs: list[str] = []
    annotations: list[str] = []
    role = None
    for hook, contract in hookspecs.CONTRACT.items():
        if hook == "dialect_info":
            continue
        if contract.role is not role:
            role = contract.role
            stubs.append(f"\n\n# --- {role.heading} ---")
        params, returns, used = _signature(hook)
        stubs.append(_hook_stub(hook, params, returns))
        annotations += used
    declared = ", ".join(f"``Capability.{c.name}``" for c in Capability
                         if c not in hookspecs.CAPABILITY_HOOKS)
    head = _HOOKS_HEAD.format(imports=_imports(" ".join(annotations)), declared=declared,
                              **values)
    return head + "".join(stubs)


def _imports(annotations: str) -> str:
    """The import lines for the names ``annotations`` use, and the head's own."""
    names = set(re.findall(r"(?<![.\w])[A-Za-z_]\w*", annotations)) | {"DialectInfo",
                                                                         "hookimpl"}
    unknown = names - set(sdk.__all__) - set(collections.abc.__all__) - set(dir(builtins))
    if unknown - {"dt", "pa", "AbstractContextManager"}:
        raise AssertionError(f"spec annotations use names sdk does not export: {unknown}")
    stdlib = ["import datetime as dt"] if "dt" in names else []
    if "AbstractContextManager" in names:  # apply_transaction's block
        stdlib.append("from contextlib import AbstractContextManager")
    from_abc = sorted(names & set(collections.abc.__all__))
    if from_abc:
        stdlib.append(f"from collections.abc import {', '.join(from_abc)}")
    arrow = "import pyarrow as pa\n\n" if "pa" in names else ""  # an Arrow table (sdk needs it)
    from_sdk = "".join(f"    {n},\n" for n in sorted(names & set(sdk.__all__)))
    return "\n".join(stdlib) + f"\n\n{arrow}from sdk import (\n{from_sdk})"


def dialect_name(text: str) -> str:
    """The dialect name ``text`` asks for, as it must be spelled: it is the entry-point name and
    the URL scheme (``name://``), so lower case, and ``-`` where ``_`` was (a URL scheme cannot
    hold ``_``). The package is ``sdk_<name with _>``, the distribution ``sdk-<name>``."""
    name = text.strip().lower().replace("_", "-")
    if not re.fullmatch(r"[a-z][a-z0-9]*(-[a-z0-9]+)*", name):
        raise ConfigurationError(
            f"dialect name {text!r}: use letters and digits, words joined by '-' or '_', "
            "starting with a letter (it becomes the URL scheme, the entry-point name and the "
            "package sdk_<name>)")
    return name


def render(name: str, directory: Path) -> Path:
    """Write the project for dialect ``name`` (see :func:`dialect_name`) into
    ``directory/sdk-<name>`` and return it."""
    name = dialect_name(name)
    root = directory / f"sdk-{name}"
    if root.exists():
        raise ConfigurationError(f"{root} exists already; choose another --dir")
    module = name.replace("-", "_")
    values = {"name": name, "module": module, "upper": module.upper(),
              "title": name.replace("-", " ").title(),
              "camel": "".join(p.title() for p in name.split("-"))}
    package = root / f"sdk_{module}"
    (root / "tests").mkdir(parents=True)
    package.mkdir()
    (root / "pyproject.toml").write_text(_PYPROJECT.format(**values))
    (root / "README.md").write_text(_README.format(**values))
    (package / "__init__.py").write_text(_hooks_module(values))
    (package / "py.typed").write_text("")
    (root / "tests" / "test_conformance.py").write_text(_TEST.format(**values))
    return root
