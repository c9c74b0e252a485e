"""Docs and specs cannot drift: every hook spec is documented with its exact signature."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from sdk import hookspecs
from sdk.dialects import _SPEC_NAMES

ROOT = Path(__file__).resolve().parents[1]
HOOKS_DOC = (ROOT / "docs" / "hooks.md").read_text()


def documented_signature(spec: str) -> str:
    function = getattr(hookspecs, spec)
    signature = str(inspect.signature(function)).replace("'", "")
    return f"### `{spec}{signature}`"


@pytest.mark.parametrize("spec", _SPEC_NAMES)
def test_hook_is_documented_with_its_signature(spec: str) -> None:
    assert documented_signature(spec) in HOOKS_DOC, (
        f"Missing from docs/hooks.md: {documented_signature(spec)}")


@pytest.mark.parametrize("spec", _SPEC_NAMES)
def test_hook_spec_has_a_docstring(spec: str) -> None:
    assert (getattr(hookspecs, spec).__doc__ or "").strip()


def test_no_documented_hook_is_unknown() -> None:
    documented = set(re.findall(r"^### `(\w+)\(", HOOKS_DOC, flags=re.M))
    assert documented == set(_SPEC_NAMES)


def test_required_hooks_are_listed_in_docs() -> None:
    for hook in hookspecs.REQUIRED_HOOKS:
        assert f"`{hook}`" in HOOKS_DOC.split("## Identity")[0]
