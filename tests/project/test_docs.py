"""Docs and specs cannot drift: every hook spec is documented with its exact signature, under
the section of its role, naming the capability it gives."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
from helpers.paths import ROOT

from sdk.dialect import hookspecs

ROOT = ROOT
HOOKS_DOC = (ROOT / "docs" / "hooks.md").read_text()


def documented_signature(spec: str) -> str:
    function = getattr(hookspecs, spec)
    signature = str(inspect.signature(function)).replace("'", "")
    return f"### `{spec}{signature}`"


def sections(text: str, level: str) -> dict[str, str]:
    """The text under each heading of ``level`` (``##`` or ``###``), by heading."""
    parts = re.split(rf"^{level} (.+)$", text, flags=re.M)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}


def hook_section(spec: str) -> tuple[str, str]:
    """The heading of the ``##`` section documenting ``spec`` and the hook's own text."""
    for heading, body in sections(HOOKS_DOC, "##").items():
        for signature, text in sections(body, "###").items():
            if f"### {signature}" == documented_signature(spec):
                return heading, text
    raise AssertionError(f"Missing from docs/hooks.md: {documented_signature(spec)}")


@pytest.mark.parametrize("spec", hookspecs.CONTRACT)
def test_hook_is_documented_with_its_signature_under_its_role(spec: str) -> None:
    heading, _ = hook_section(spec)
    role = hookspecs.CONTRACT[spec].role
    assert heading == role.heading, f"{spec} is a {role.value} hook, documented under {heading!r}"


@pytest.mark.parametrize("spec", hookspecs.CONTRACT)
def test_hook_names_the_capability_it_gives(spec: str) -> None:
    _, text = hook_section(spec)
    capability = hookspecs.CONTRACT[spec].capability
    named = set(re.findall(r"[Cc]apability `(\w+)`", text))
    assert named == ({capability.value} if capability else set()), text


@pytest.mark.parametrize("spec", hookspecs.CONTRACT)
def test_hook_spec_has_a_docstring(spec: str) -> None:
    assert (getattr(hookspecs, spec).__doc__ or "").strip()


@pytest.mark.parametrize("spec", hookspecs.REQUIRED_HOOKS)
def test_required_hook_says_why(spec: str) -> None:
    """An author must write a required hook, so its spec says why (or its role does)."""
    role = hookspecs.CONTRACT[spec].role
    doc = getattr(hookspecs, spec).__doc__ or ""
    assert role is hookspecs.Role.FETCH or "Required:" in doc, spec


def test_no_documented_hook_is_unknown() -> None:
    documented = re.findall(r"^### `(\w+)\(", HOOKS_DOC, flags=re.M)
    assert sorted(documented) == sorted(hookspecs.CONTRACT)


def test_every_role_has_its_section_in_order() -> None:
    headings = [h for h in sections(HOOKS_DOC, "##") if h in {r.heading for r in hookspecs.Role}]
    assert headings == [r.heading for r in hookspecs.Role]


def _documents() -> list[Path]:
    root = ROOT
    return sorted(p for p in root.rglob("*.md")
                  if not any(part.startswith(".") or part.endswith(".egg-info")
                             for part in p.relative_to(root).parts))


def test_no_document_cites_a_file_the_repository_lacks() -> None:
    """Markdown links and backticked paths of the repository (``sdk/…``, ``tests/…``...,
    ``file.py::test_name`` too) name files, and tests, that exist."""
    root = ROOT
    missing = []
    for doc in _documents():
        text = doc.read_text()
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            if not (doc.parent / target.split("#")[0]).exists():
                missing.append(f"{doc.relative_to(root)}: {target}")
        for path, name in re.findall(
                r"`((?:sdk|plugins|tests|docs|benchmarks|examples|scripts|docker)/[\w./-]+)"
                r"(?:::(\w+))?", text):
            if not (root / path).exists():
                missing.append(f"{doc.relative_to(root)}: {path}")
            elif name and name not in (root / path).read_text():
                missing.append(f"{doc.relative_to(root)}: {path}::{name}")
    assert len(_documents()) > 10 and not missing, missing


def _capability_table() -> dict[str, str]:
    """The rows of hooks.md's capability table: what gives each capability, by its name."""
    rows = re.findall(r"^\| `(\w+)` \| (.+) \|$", HOOKS_DOC, flags=re.M)
    names = [name for name, _ in rows]
    assert len(names) == len(set(names)), f"a capability has two rows: {names}"
    return dict(rows)


def test_every_capability_is_in_the_table_with_its_hooks_or_declared() -> None:
    """A capability missing from docs/hooks.md's table, or given there by other hooks than
    its marks say (or declared where a hook gives it, or the reverse), fails."""
    table = _capability_table()
    assert sorted(table) == sorted(c.value for c in hookspecs.Capability)
    for capability in hookspecs.Capability:
        text = table[capability.value]
        if capability in hookspecs.DECLARED_CAPABILITIES:
            assert text.startswith("declared in `dialect_info`"), (capability, text)
        else:
            named = re.findall(r"`(\w+)`", text)
            assert named == list(hookspecs.CAPABILITY_HOOKS[capability]), (capability, text)


def test_target_only_hooks_are_documented() -> None:
    """The target section names exactly the hooks a target-only dialect implements."""
    body = sections(HOOKS_DOC, "##")[hookspecs.Role.TARGET.heading]
    sentence = re.search(r"target-only dialect .*?only these hooks: ([^.]+)\.", body, flags=re.S)
    assert sentence, "docs/hooks.md does not say what a target-only dialect implements"
    assert re.findall(r"`(\w+)`", sentence[1]) == list(hookspecs.TARGET_ONLY_HOOKS)


def test_target_only_hooks_follow_from_the_marks() -> None:
    marked = [name for name, c in hookspecs.CONTRACT.items() if c.of_targets]
    assert all(hookspecs.CONTRACT[name].role.required for name in marked)
    apply = hookspecs.CAPABILITY_HOOKS[hookspecs.Capability.APPLY]
    assert list(hookspecs.TARGET_ONLY_HOOKS) == [*marked, *apply]


def test_the_declared_capabilities_are_named_alike_everywhere() -> None:
    """Each place telling an author what to declare in ``dialect_info`` names all of them."""
    from sdk.dialect import manager, types

    places = {"hookspecs.dialect_info": hookspecs.dialect_info.__doc__ or "",
              "Capability": types.Capability.__doc__ or "",
              "sdk.dialect.manager": manager.__doc__ or "",
              "docs/hooks.md dialect_info": hook_section("dialect_info")[1],
              "CONTRIBUTING.md": (ROOT / "CONTRIBUTING.md").read_text()}
    for place, text in places.items():
        for capability in hookspecs.DECLARED_CAPABILITIES:
            assert capability.value in text or f"Capability.{capability.name}" in text, \
                f"{place} does not name the declared capability {capability.value}"
