"""The conformance kit catches real bugs: each deliberately broken copy of the reference
dialect (tests/helpers/sqlite_mutants.py) fails the kit's tests named for it, and only those
groups."""

from __future__ import annotations

import pytest

MUTANT_FAILS = {
    "range_end_included": {
        "TestReadRange::test_every_row_once_over_the_splits_next_boundary_cuts",
        "TestReadRange::test_split_bounds_are_half_open",
        "TestReadRange::test_compound_text_and_integer_keys",
    },
    "watermark_after_read": {
        "TestVisibility::test_a_snapshot_view_sees_exactly_the_changes_below_its_offset",
    },
    "bounded_read_includes_end": {
        "TestBoundedStream::test_exactly_the_commits_in_the_window_in_log_order",
        "TestBoundedStream::test_adjacent_windows_partition_the_log",
        "TestBoundedStream::test_a_large_transaction_can_be_split_at_any_event",
    },
    "offset_not_above_last_change": {
        "TestOffsets::test_current_offset_is_monotonic_and_above_every_committed_change",
    },
}

KIT_MODULE = '''
import pytest
from helpers.sqlite_mutants import MUTANTS
from helpers.harnesses import SqliteHarness
from sdk.testing.suite import *  # noqa: F403


class MutantHarness(SqliteHarness):
    plugin = MUTANTS[{name!r}]


@pytest.fixture(scope="session")
def harness(tmp_path_factory):
    return MutantHarness(f"sqlite:///{{tmp_path_factory.mktemp('kit') / 'kit.db'}}")
'''


QUICK = "watermark_after_read"
"""The one broken dialect ``-m "not slow"`` keeps (each takes ~10 s: the whole kit's run)."""


@pytest.mark.parametrize("mutant", [
    pytest.param(m, marks=() if m == QUICK else pytest.mark.slow) for m in sorted(MUTANT_FAILS)])
def test_the_kit_fails_the_named_tests_of_a_broken_dialect(pytester: pytest.Pytester,
                                                           mutant: str) -> None:
    pytester.makepyfile(test_kit=KIT_MODULE.format(name=mutant))
    result = pytester.inline_run("-p", "no:cacheprovider", "-q")
    _, _, failed = result.listoutcomes()
    names = {r.nodeid.split("::", 1)[1].split("[")[0] for r in failed}
    assert MUTANT_FAILS[mutant] <= names, f"the kit missed {mutant}: failed only {names}"
    if mutant == "offset_not_above_last_change":
        return  # every group takes offsets, so every group may fail
    # a bug in one hook may ripple into the groups that run the whole algorithm, never into
    # the groups of the other hooks
    allowed = {n.split("::")[0] for n in MUTANT_FAILS[mutant]} | {
        "TestEndToEnd", "TestSyncToATarget", "TestResume", "TestVisibility", "TestOpenStream",
        "TestTypeParity"}
    assert {n.split("::")[0] for n in names} <= allowed, names


def test_the_kit_passes_the_reference_dialect(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_kit='''
import pytest
from helpers.harnesses import SqliteHarness
from sdk.testing.suite import *  # noqa: F403


@pytest.fixture(scope="session")
def harness(tmp_path_factory):
    return SqliteHarness(f"sqlite:///{tmp_path_factory.mktemp('kit') / 'kit.db'}")
''')
    result = pytester.inline_run("-p", "no:cacheprovider", "-q")
    passed, _, failed = result.listoutcomes()
    assert not failed and len(passed) > 20


REQUIRES_MODULE = '''
import pytest
from helpers.harnesses import SqliteHarness


@pytest.fixture(scope="session")
def harness(tmp_path_factory):
    return SqliteHarness(f"sqlite:///{tmp_path_factory.mktemp('kit') / 'kit.db'}")
'''

#: Tests that need ``kit``, each marked ``sdk_requires`` with one name (SQLite has preflight,
#: not offset_at_time, so not timestamp; "premflight" is a typo).
REQUIRES = {"typo": "premflight", "hook_present": "preflight",
            "hook_absent": "offset_at_time", "capability_absent": "timestamp"}


def test_a_misspelt_requirement_fails_instead_of_skipping(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_requires=REQUIRES_MODULE + "".join(
        f"\n\n@pytest.mark.sdk_requires({name!r})\ndef test_{test}(kit):\n    pass\n"
        for test, name in REQUIRES.items()))
    result = pytester.runpytest("-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(passed=1, skipped=2, errors=1)
    result.stdout.fnmatch_lines(["*sdk_requires('premflight')*did you mean 'preflight'?*"])
    result.stdout.fnmatch_lines(["*does not implement hook offset_at_time*",
                                 "*has no capability timestamp*"], consecutive=False)


def test_requirement_names_are_checked_against_everything_known() -> None:
    from sdk.dialect.hookspecs import CONTRACT
    from sdk.dialect.types import Capability
    from sdk.testing import Feature, KitError
    from sdk.testing.kit import requirement_kind
    from sdk.testing.suite import requires

    assert {requirement_kind(c.value) for c in Capability} == {"capability"}
    assert {requirement_kind(f.value) for f in Feature} == {"feature"}
    assert {requirement_kind(h) for h in CONTRACT} == {"hook"}
    with pytest.raises(KitError, match="did you mean 'atomic_snapshot'"):
        requirement_kind("atomic_snapshots")
    with pytest.raises(KitError, match="did you mean 'log_switch'"):
        requires("log_swtich")  # the suite's own marks fail when the suite is imported


def test_a_harness_missing_a_required_member_fails_naming_it() -> None:
    from sdk import TableId
    from sdk.testing import Harness

    class Nameless(Harness):
        def admin_connect(self) -> None:
            return None

        def column_type(self, kind: str) -> str:
            return kind

    with pytest.raises(TypeError, match=r"Nameless lacks required member\(s\) dialect, table_id"):
        Nameless(None)

    class Complete(Nameless):
        dialect = "sqlite"

        def table_id(self, name: str) -> TableId:
            return TableId("main", name)

    assert Complete("sqlite://").url == "sqlite://"
