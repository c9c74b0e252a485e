"""The dialect contract tests. A dialect's test module adopts all of them with one line::

    from sdk.testing.suite import *  # noqa: F403

next to a ``harness`` fixture returning a :class:`sdk.testing.Harness`. Tests that need a
capability the dialect does not declare, or a harness feature, are skipped naming it. Each
class is one group of the contract (docs/conformance.md lists them); a bug found in any dialect
becomes a test here, so every dialect is checked for it.
"""

from __future__ import annotations

import json
import pickle
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from ..algorithm import Phase, PhaseHooks, SyncOptions, SyncRunner, SyncState, caught_up
from ..algorithm.lineage import check_position
from ..dialect.checksum import IN_SERVER_TYPES, in_server
from ..dialect.config import ConnectionConfig
from ..dialect.errors import (
    ConfigurationError,
    LogMismatchError,
    OffsetExpiredError,
    RetriableError,
)
from ..dialect.hookspecs import CAPABILITY_HOOKS
from ..dialect.manager import Dialect, get_dialect
from ..dialect.types import (
    Capability,
    ChangeEvent,
    Heartbeat,
    Key,
    Offset,
    Requirement,
    Row,
    SchemaChange,
    SnapshotSplit,
    TableId,
    TableSchema,
    TableTruncated,
)
from .harness import Feature, Harness
from .kit import (
    DEADLINE_SECONDS,
    Kit,
    KitError,
    LogIndex,
    Writer,
    apply,
    as_dict,
    check_exactly_once,
    check_visible_between,
    checksum_declined,
    key_histories,
    load_dialect,
    ranges,
    requirement_kind,
)


def requires(*names: str) -> pytest.MarkDecorator:
    """``pytest.mark.sdk_requires(*names)``, refused at import when a name is a typo."""
    for name in names:
        requirement_kind(name)
    return pytest.mark.sdk_requires(*names)


def _changes(items: Sequence[ChangeEvent | Heartbeat]) -> list[ChangeEvent]:
    return [i for i in items if isinstance(i, ChangeEvent)]


def _summary(events: Sequence[ChangeEvent]) -> list[tuple[str, str, Key, Key | None]]:
    return [(e.table.name, e.op, e.key, e.old_key) for e in events]


class TestHooks:
    """0. The plugin loads as users load it, with every hook its capabilities promise."""

    def test_plugin_implements_every_required_hook(self, harness: Harness) -> None:
        load_dialect(harness)

    def test_declared_capabilities_have_their_hooks(self, sdk_dialect: Dialect) -> None:
        for capability in sdk_dialect.info.capabilities:
            missing = [h for h in CAPABILITY_HOOKS.get(capability, ())
                       if not sdk_dialect.implements(h)]
            assert not missing, f"capability {capability.value} declared, hooks {missing} absent"


class TestOffsets:
    """1. ``current_offset`` is monotonic and above every committed change; ``compare_offset``
    is a total order consistent with log order; offsets survive JSON and pickle."""

    def test_current_offset_is_monotonic_and_above_every_committed_change(self, kit: Kit
                                                                          ) -> None:
        items = kit.items()
        marks = [kit.offset()]
        for i in range(6):
            kit.harness.execute(kit.insert_sql("kit_items", ("id", "v"), (i, f"row {i}")))
            marks.append(kit.offset())
        cmp = kit.dialect.compare_offset
        for a, b in pairwise(marks):
            assert cmp(a, b) < 0, f"current_offset did not advance over a commit: {a} then {b}"
        events = kit.events([items], marks[0], marks[-1])
        assert [e.key for e in events] == [(i,) for i in range(6)]
        for event, low, high in zip(events, marks[:-1], marks[1:], strict=True):
            assert cmp(low, event.offset) <= 0 < cmp(high, event.offset), \
                f"change {event.key} at {event.offset} lies outside [{low}, {high})"

    def test_compare_offset_is_a_total_order_consistent_with_log_order(self, kit: Kit) -> None:
        items = kit.items()
        start = kit.offset()
        kit.harness.execute(*(kit.insert_sql("kit_items", ("id", "v"), (i, "x"))
                              for i in range(5)))  # one transaction: offsets within a commit
        middle = kit.offset()
        kit.harness.execute(kit.sql("kit_items", "UPDATE {t} SET v = 'y' WHERE id = 1"))
        kit.harness.execute(kit.sql("kit_items", "DELETE FROM {t} WHERE id = 2"))
        end = kit.offset()
        events = kit.events([items], start, end)
        assert len(events) == 7
        cmp = kit.dialect.compare_offset
        for x, y in pairwise(e.offset for e in events):
            assert cmp(x, y) < 0, f"events out of order or sharing an offset: {x} then {y}"
        offsets = [start, *(e.offset for e in events), middle, end]
        for a in offsets:
            assert cmp(a, a) == 0
            for b in offsets:
                assert (cmp(a, b) > 0) == (cmp(b, a) < 0), f"not antisymmetric: {a}, {b}"
                for c in offsets:
                    if cmp(a, b) <= 0 and cmp(b, c) <= 0:
                        assert cmp(a, c) <= 0, f"not transitive: {a} <= {b} <= {c}"
        assert kit.sort_offsets([end, *reversed([e.offset for e in events]), start]) == \
            [start, *(e.offset for e in events), end]

    def test_offsets_survive_json_and_pickle_round_trips(self, kit: Kit) -> None:
        items = kit.items()
        start = kit.offset()
        kit.harness.execute(kit.insert_sql("kit_items", ("id", "v"), (1, "x")))
        events = kit.events([items], start, kit.offset())
        for offset in (start, events[0].offset):
            for copy in (Offset.from_json(json.loads(offset.json_text())),
                         Offset.from_json(json.loads(json.dumps(offset.to_json()))),
                         pickle.loads(pickle.dumps(offset))):
                assert copy == offset and kit.dialect.compare_offset(copy, offset) == 0
        # a stream started from a round-tripped offset yields the same change
        again = kit.events([items], Offset.from_json(json.loads(start.json_text())),
                           kit.offset())
        assert again == events


class TestLogIdentity:
    """1b. Every position the server wrote passes ``check_offset``, ``server_identity`` is the
    same on every connection, and a position past the log's head is refused (a reset log)."""

    def test_positions_the_server_wrote_pass_check_offset(self, kit: Kit) -> None:
        items = kit.items()
        start = kit.offset()
        kit.harness.execute(*(kit.insert_sql("kit_items", ("id", "v"), (i, "x"))
                              for i in range(3)))
        kit.harness.execute(kit.sql("kit_items", "UPDATE {t} SET v = 'y' WHERE id = 1"))
        end = kit.offset()
        events = kit.events([items], start, end)
        for offset in (start, *(e.offset for e in events), end):
            try:
                check_position(kit.dialect, kit.conn, offset, "the kit's server")
            except (LogMismatchError, OffsetExpiredError) as exc:
                raise KitError(f"check_offset refused {offset}, a position the server wrote: "
                               f"{exc}") from None

    def test_server_identity_is_the_same_on_every_connection(self, kit: Kit) -> None:
        kit.items()
        identity = kit.dialect.server_identity(kit.conn)
        assert identity == kit.dialect.server_identity(kit.connect()), \
            "server_identity differs between two connections to the same server"
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in identity.items())

    def test_a_position_past_the_head_is_refused(self, kit: Kit) -> None:
        kit.items()  # capture prepared, as before any offset
        beyond = kit.harness.offset_past(kit.offset())
        if beyond is None:
            pytest.skip("the harness gives no offset_past")
        with pytest.raises(LogMismatchError):
            check_position(kit.dialect, kit.conn, beyond, "the kit's server")


class TestReadRange:
    """2. ``read_range`` and ``next_boundary``: half-open bounds, open ends, compound keys,
    empty tables, every row exactly once."""

    def test_every_row_once_over_the_splits_next_boundary_cuts(self, kit: Kit) -> None:
        rows = [(i * 3 - 40, f"row {i}") for i in range(61)]
        items = kit.items(rows)
        for size in (1, 7, 25, 1000):
            splits = kit.splits(items, size)
            assert splits[0].start is None and splits[-1].end is None
            seen: list[Row] = []
            for split in splits:
                got = kit.rows(items, split, fetch_size=4)
                assert all(split.contains(items.key_of(r)) for r in got), \
                    f"read_range({split.start}, {split.end}) returned a row outside the split"
                if split.end is not None:
                    assert len(got) == size, \
                        f"next_boundary cut {split.start}..{split.end} with {len(got)} rows " \
                        f"for size {size}"
                seen += got
            assert sorted(seen) == sorted(rows), f"split size {size}: rows lost or repeated"

    def test_split_bounds_are_half_open(self, kit: Kit) -> None:
        rows = [(i, f"row {i}") for i in range(0, 100, 10)]
        items = kit.items(rows)
        for start, end in [((10,), (50,)), ((11,), (50,)), ((10,), (51,)), (None, (30,)),
                           ((70,), None), ((20,), (20,)), ((-5,), (1,))]:
            split = SnapshotSplit(items.table, 0, start, end)
            got = sorted(kit.rows(items, split))
            expected = [r for r in rows if split.contains((r[0],))]
            assert got == expected, f"read_range over [{start}, {end}) returned {got}"

    def test_compound_text_and_integer_keys(self, kit: Kit) -> None:
        # no two keys equal under a case-insensitive collation, but their orders differ
        rows = [(a, b, f"{a}/{b}") for a in ("B", "a", "ab", "b b", "c", "é")
                for b in (-2, 0, 1, 7)]
        pairs = kit.pairs(rows)
        assert pairs.key == ("a", "b")
        for size in (1, 3, 5, 50):
            splits = kit.splits(pairs, size)
            seen = [r for s in splits for r in kit.rows(pairs, s)]
            assert sorted(seen) == sorted(rows), f"split size {size}: rows lost or repeated"
            bounds = [s.end for s in splits[:-1] if s.end is not None]
            assert bounds == sorted(bounds), "next_boundary's keys are not in key order"
            for split in splits:
                got = kit.rows(pairs, split)
                assert all(split.contains(pairs.key_of(r)) for r in got), \
                    f"read_range over [{split.start}, {split.end}) returned a row outside it " \
                    f"(text keys must compare as code points, a binary collation)"

    def test_empty_table(self, kit: Kit) -> None:
        items = kit.items()
        assert kit.dialect.next_boundary(kit.conn, items, None, 10) is None
        stats = kit.dialect.table_stats(kit.conn, items)
        assert (stats.min_key, stats.max_key) == (None, None)
        assert kit.rows(items) == []
        assert kit.splits(items, 10) == [SnapshotSplit(items.table, 0, None, None)]

    @requires(Capability.FILTERED_READS)
    def test_a_split_condition_keeps_only_the_rows_meeting_it(self, kit: Kit) -> None:
        """A snapshot on demand of some rows (``sdk snapshot --where``) reads its splits with
        the user's SQL condition; a ``%`` in it is the SQL's, not a parameter marker."""
        rows = [(i, f"{i % 3}% off") for i in range(30)]
        items = kit.items(rows)
        v = kit.harness.quote("v")
        for start, end in [(None, None), ((5,), (20,)), ((12,), None)]:
            split = SnapshotSplit(items.table, 0, start, end, f"{v} LIKE '1%'")
            got = sorted(kit.rows(items, split))
            expected = [r for r in rows if split.contains((r[0],)) and r[1].startswith("1")]
            assert got == expected, f"read_range with where {split.where!r} over [{start}, " \
                f"{end}) returned {got}"

    @requires("table_stats")
    def test_table_stats_give_the_key_ends(self, kit: Kit) -> None:
        pairs = kit.pairs([("m", 5, "x"), ("c", 9, "x"), ("z", -1, "x"), ("c", 2, "x")])
        stats = kit.dialect.table_stats(kit.conn, pairs)
        assert (stats.min_key, stats.max_key) == (("c", 2), ("z", -1))
        assert stats.approx_rows >= 0


class TestBoundedStream:
    """3. A bounded ``stream_log`` yields exactly the commits in ``[start, end)`` in log order,
    splits cleanly anywhere (even inside a transaction), skips rolled-back work, crosses log
    segments and repeats identically."""

    def test_exactly_the_commits_in_the_window_in_log_order(self, kit: Kit) -> None:
        items, pairs = kit.items([(1, "before")]), kit.pairs()
        h = kit.harness
        low = kit.offset()
        h.execute(kit.insert_sql("kit_items", ("id", "v"), (2, "two")))
        h.execute(kit.insert_sql("kit_pairs", ("a", "b", "v"), ("k", 1, "other table")))
        h.execute(kit.insert_sql("kit_items", ("id", "v"), (3, "rolled back")), rollback=True)
        h.execute(kit.sql("kit_items", "UPDATE {t} SET v = 'changed' WHERE id = 2"))
        h.execute(kit.sql("kit_items", "DELETE FROM {t} WHERE id = 1"))
        high = kit.offset()
        h.execute(kit.insert_sql("kit_items", ("id", "v"), (4, "after the window")))
        events = kit.events([items], low, high)
        assert _summary(events) == [(items.table.name, "c", (2,), None),
                                    (items.table.name, "u", (2,), None),
                                    (items.table.name, "d", (1,), None)]
        assert events[0].after == (2, "two") and events[1].after == (2, "changed")
        both = kit.events([items, pairs], low, high)
        assert [e.table for e in both] == [items.table, pairs.table, items.table,
                                           items.table]
        assert kit.events([items, pairs], low, high) == both, "a repeated read differs"

    @requires(Feature.KEY_UPDATES)
    def test_an_update_that_moves_the_key_carries_the_old_key(self, kit: Kit) -> None:
        items = kit.items([(1, "one")])
        low = kit.offset()
        kit.harness.execute(kit.sql("kit_items", "UPDATE {t} SET id = 10 WHERE id = 1"))
        events = kit.events([items], low, kit.offset())
        # one update with old_key, or a delete of the old key then an insert of the new one
        moved = [(e.op, e.key, e.old_key) for e in events]
        assert moved in ([("u", (10,), (1,))], [("d", (1,), None), ("c", (10,), None)]), moved
        assert events[-1].after == (10, "one")

    @requires(Capability.BEFORE_IMAGES)
    def test_updates_and_deletes_carry_before_images(self, kit: Kit) -> None:
        items = kit.items([(1, "one"), (2, "two")])
        low = kit.offset()
        kit.harness.execute(kit.sql("kit_items", "UPDATE {t} SET v = 'uno' WHERE id = 1"))
        kit.harness.execute(kit.sql("kit_items", "DELETE FROM {t} WHERE id = 2"))
        events = kit.events([items], low, kit.offset())
        assert [(e.op, e.before) for e in events] == [("u", (1, "one")), ("d", (2, "two"))]

    def test_adjacent_windows_partition_the_log(self, kit: Kit) -> None:
        """``[a, c) == [a, b) + [b, c)`` for bounds taken between commits and while another
        transaction is open (it belongs to the window its commit falls in). The open one
        commits a second later from a timer, so a ``current_offset`` that waits for open
        transactions to end (PostgreSQL's) does not wait forever."""
        items = kit.items()
        bounds = [kit.offset()]
        concurrent = Feature.CONCURRENT_WRITERS in kit.harness.features
        open_tx = kit.harness.admin_connect()
        try:
            timer = threading.Timer(1.0, open_tx.commit)
            if concurrent:  # a transaction open across several bounds
                open_tx.cursor().execute(kit.insert_sql("kit_items", ("id", "v"), (100, "open")))
                timer.start()
            for i in range(4):
                kit.harness.execute(kit.insert_sql("kit_items", ("id", "v"), (i, "x")))
                bounds.append(kit.offset())
            if concurrent:
                timer.join()
            else:
                open_tx.cursor().execute(kit.insert_sql("kit_items", ("id", "v"), (100, "open")))
                open_tx.commit()
        finally:
            open_tx.close()
        kit.harness.execute(kit.sql("kit_items", "UPDATE {t} SET v = 'y' WHERE id < 2"))
        bounds.append(kit.offset())
        whole = kit.events([items], bounds[0], bounds[-1])
        assert sorted(e.key for e in whole if e.op == "c") == \
            [(0,), (1,), (2,), (3,), (100,)], "a commit was lost or repeated"
        pieces = [e for a, b in pairwise(bounds) for e in kit.events([items], a, b)]
        assert pieces == whole, "adjacent windows do not add up to the whole window"

    def test_a_large_transaction_can_be_split_at_any_event(self, kit: Kit) -> None:
        items = kit.items()
        low = kit.offset()
        kit.harness.execute(*(kit.insert_sql("kit_items", ("id", "v"), (i, f"row {i}"))
                              for i in range(600)))
        high = kit.offset()
        events = kit.events([items], low, high)
        assert [e.key for e in events] == [(i,) for i in range(600)]
        for cut in (1, 299, 599):
            head = kit.events([items], low, events[cut].offset)
            tail = kit.events([items], events[cut].offset, high)
            assert head == events[:cut] and tail == events[cut:], \
                f"resuming at the offset of event {cut} of one transaction lost or repeated " \
                f"events ({len(head)} + {len(tail)})"

    @requires("same_transaction")
    def test_same_transaction_tells_the_changes_of_one_commit_apart(self, kit: Kit) -> None:
        """``same_transaction`` is true of the changes of one source transaction, whatever
        tables they touch, and false across two (a batch cut for size ends only there)."""
        items, pairs = kit.items([(1, "one")]), kit.pairs()
        h = kit.harness
        low = kit.offset()
        h.execute(kit.insert_sql("kit_items", ("id", "v"), (2, "two")),
                  kit.insert_sql("kit_pairs", ("a", "b", "v"), ("k", 1, "other table")),
                  kit.sql("kit_items", "UPDATE {t} SET v = 'changed' WHERE id = 1"))
        h.execute(kit.insert_sql("kit_items", ("id", "v"), (3, "three")),
                  kit.sql("kit_items", "DELETE FROM {t} WHERE id = 2"))
        events = kit.events([items, pairs], low, kit.offset())
        assert len(events) == 5, _summary(events)
        same = kit.dialect.same_transaction
        assert same is not None
        assert [same(a.offset, b.offset) for a, b in pairwise(events)] == \
            [True, True, False, True], _summary(events)
        assert not same(events[0].offset, events[4].offset)
        assert same(events[3].offset, events[3].offset)

    @requires(Feature.LOG_SWITCH)
    def test_a_log_switch_inside_the_window(self, kit: Kit) -> None:
        items = kit.items()
        low = kit.offset()
        kit.harness.execute(kit.insert_sql("kit_items", ("id", "v"), (1, "first segment")))
        kit.harness.force_log_switch()
        kit.harness.execute(kit.insert_sql("kit_items", ("id", "v"), (2, "second segment")))
        middle = kit.offset()
        kit.harness.force_log_switch()
        kit.harness.execute(kit.insert_sql("kit_items", ("id", "v"), (3, "third segment")))
        high = kit.offset()
        assert [e.key for e in kit.events([items], low, high)] == [(1,), (2,), (3,)]
        assert [e.key for e in kit.events([items], middle, high)] == [(3,)]

    def test_an_end_with_no_later_change_still_ends(self, kit: Kit) -> None:
        items = kit.items()
        low = kit.offset()
        kit.harness.execute(kit.insert_sql("kit_items", ("id", "v"), (1, "x")))
        high = kit.offset()
        started = time.monotonic()
        assert [e.key for e in kit.events([items], low, high)] == [(1,)]
        assert kit.events([items], high, high) == []
        assert time.monotonic() - started < 60


@requires(Capability.SCHEMA_CHANGES)
class TestSchemaChanges:
    """3b. With ``schema_changes``: a column added in the log is announced by a
    ``SchemaChange`` before the first change in the new shape, and later rows have its
    columns, as ``read_range`` reads them with the new schema."""

    def _change(self, kit: Kit) -> tuple[TableSchema, list[Any]]:
        items = kit.items([(1, "one")])
        h = kit.harness
        low = kit.offset()
        h.execute(kit.sql("kit_items", "UPDATE {t} SET v = 'before' WHERE id = 1"))
        h.execute(h.add_column_sql(kit.physical("kit_items"), "extra", "int"))
        h.execute(kit.insert_sql("kit_items", ("id", "v", "extra"), (2, "two", 22)))
        h.execute(kit.sql("kit_items", "UPDATE {t} SET extra = 11 WHERE id = 1"))
        high = kit.offset()
        h.wait_for_log(high)
        items_after = [i for i in kit.dialect.stream_log(kit.conn, [items], low, high)
                       if isinstance(i, (ChangeEvent, SchemaChange))]
        return items, items_after

    def test_an_added_column_is_announced_before_its_first_change(self, kit: Kit) -> None:
        items, got = self._change(kit)
        kinds = [type(i).__name__ for i in got]
        assert kinds == ["ChangeEvent", "SchemaChange", "ChangeEvent", "ChangeEvent"], kinds
        change = got[1]
        assert isinstance(change, SchemaChange) and change.table == items.table
        assert change.schema.column_names == (*items.column_names, "extra")
        assert change.schema.key == items.key
        assert kit.dialect.compare_offset(got[0].offset, change.offset) < 0
        assert kit.dialect.compare_offset(change.offset, got[2].offset) <= 0
        assert got[0].after == (1, "before")
        new_rows = {r[0]: r for r in kit.rows(change.schema)}
        assert got[2].after == new_rows[2] and got[3].after == new_rows[1] == (1, "before", 11)

    def test_a_repeated_read_yields_the_same_change(self, kit: Kit) -> None:
        items, got = self._change(kit)
        again = [i for i in kit.dialect.stream_log(kit.conn, [items], got[0].offset,
                                                   kit.offset())
                 if isinstance(i, (ChangeEvent, SchemaChange))]
        assert again == got, "a repeated read differs"


class TestTruncations:
    """3c. A ``TRUNCATE`` of a captured table (the harness's ``truncate_sql``) comes as one
    ``TableTruncated`` in log order, between the changes before and after it, again when the
    read is repeated; a read that ends at it leaves it to the next one."""

    def test_a_truncate_comes_between_the_changes_around_it(self, kit: Kit) -> None:
        h = kit.harness
        statement = h.truncate_sql(kit.physical("kit_items"))
        if statement is None:
            pytest.skip("the harness gives no truncate_sql")
        items = kit.items([(1, "one")])
        low = kit.offset()
        h.execute(kit.sql("kit_items", "UPDATE {t} SET v = 'before' WHERE id = 1"))
        h.execute(statement)
        h.execute(kit.insert_sql("kit_items", ("id", "v"), (2, "after")))
        high = kit.offset()
        h.wait_for_log(high)

        def read(start: Offset, end: Offset) -> list[Any]:
            return [i for i in kit.dialect.stream_log(kit.conn, [items], start, end)
                    if isinstance(i, (ChangeEvent, TableTruncated))]
        got = read(low, high)
        kinds = [type(i).__name__ for i in got]
        assert kinds == ["ChangeEvent", "TableTruncated", "ChangeEvent"], kinds
        cut = got[1]
        assert cut.table == items.table and not cut.dropped
        assert kit.dialect.compare_offset(got[0].offset, cut.offset) < 0
        assert kit.dialect.compare_offset(cut.offset, got[2].offset) <= 0
        assert got[2].after == (2, "after")
        assert read(low, high) == got, "a repeated read differs"
        assert read(low, cut.offset) + read(cut.offset, high) == got, \
            "a read ending at the truncation and the next one differ from the whole"


class TestOpenStream:
    """4. An open-ended ``stream_log`` advances over an idle log with heartbeats, and resuming
    from an event or a heartbeat loses and repeats nothing."""

    def test_an_idle_log_yields_heartbeats_that_advance(self, kit: Kit) -> None:
        items, _ = kit.items(), kit.pairs()
        start = kit.offset()
        for i in range(3):  # changes to a table the stream does not follow
            kit.harness.execute(kit.insert_sql("kit_pairs", ("a", "b", "v"), ("x", i, "x")))
        cmp = kit.dialect.compare_offset
        got = kit.open_stream(
            [items], start, kit.connect(),
            lambda got: isinstance(got[-1], Heartbeat) and cmp(got[-1].offset, start) > 0,
            "an open-ended stream_log over an idle table (waiting for a heartbeat past the "
            "start)")
        assert not _changes(got), "changes of a table not asked for were yielded"
        beats = [i.offset for i in got if isinstance(i, Heartbeat)]
        assert all(cmp(a, b) <= 0 for a, b in pairwise(beats)), "heartbeats went backwards"
        assert all(cmp(b, start) >= 0 for b in beats), "a heartbeat lies before the start"

    def test_resuming_loses_and_repeats_nothing(self, kit: Kit) -> None:
        items = kit.items()
        start = kit.offset()
        for i in range(30):
            kit.harness.execute(kit.insert_sql("kit_items", ("id", "v"), (i, "x")))
        high = kit.offset()
        whole = kit.events([items], start, high)
        assert len(whole) == 30
        first = _changes(kit.open_stream([items], start, kit.connect(),
                                         lambda got: len(_changes(got)) == 13,
                                         "an open-ended stream_log (13 changes)"))
        resume = first[12].offset  # the first change not taken starts the next read
        cmp = kit.dialect.compare_offset

        def rest_then_heartbeat(got: list[ChangeEvent | Heartbeat]) -> bool:
            last = got[-1]
            return len(_changes(got)) >= 18 and isinstance(last, Heartbeat) and \
                cmp(last.offset, whole[-1].offset) > 0
        second = kit.open_stream([items], resume, kit.connect(), rest_then_heartbeat,
                                 "an open-ended stream_log resumed at a change")
        assert first[:12] + _changes(second) == whole, "resuming at a change lost or repeated"
        beat = second[-1]
        assert isinstance(beat, Heartbeat)
        for i in range(30, 35):
            kit.harness.execute(kit.insert_sql("kit_items", ("id", "v"), (i, "x")))
        third = _changes(kit.open_stream([items], beat.offset, kit.connect(),
                                         lambda got: len(_changes(got)) == 5,
                                         "an open-ended stream_log resumed at a heartbeat"))
        assert [e.key for e in third] == [(i,) for i in range(30, 35)], \
            "resuming at a heartbeat lost or repeated changes"


class TestVisibility:
    """5a. The hazard of docs/design.md, 'The visibility hazard': a read between two offsets sees
    exactly the states between them, while other connections commit concurrently."""

    def _log_of(self, kit: Kit, table: Any, initial: Sequence[Row], start: Offset, end: Offset
                ) -> tuple[LogIndex, dict[Key, Any]]:
        log = kit.events([table], start, end)
        return (LogIndex(log, kit.dialect.compare_offset),
                key_histories(log, as_dict(table, initial)))

    def test_reads_between_two_offsets_see_only_states_between_them(self, kit: Kit) -> None:
        initial = [(i, "initial") for i in range(0, 300, 2)]
        items = kit.items(initial)
        start = kit.offset()
        threads = 3 if Feature.CONCURRENT_WRITERS in kit.harness.features else 1
        reads: list[tuple[Offset, list[Row], Offset]] = []
        with Writer(kit, "kit_items", 300, threads, seed=7, pause=0.001) as writer:
            writer.wait(50)
            for _ in range(25):
                low = kit.offset()
                rows = kit.rows(items)
                reads.append((low, rows, kit.offset()))
        end = kit.offset()
        index, histories = self._log_of(kit, items, initial, start, end)
        assert len(index.log) > 50
        for low, rows, high in reads:
            check_visible_between(rows, items, histories, index.position(low),
                                  index.position(high))

    @requires(Capability.ATOMIC_SNAPSHOT)
    def test_a_snapshot_view_sees_exactly_the_changes_below_its_offset(self, kit: Kit) -> None:
        initial = [(i, "initial") for i in range(0, 300, 2)]
        items = kit.items(initial)
        start = kit.offset()
        threads = 3 if Feature.CONCURRENT_WRITERS in kit.harness.features else 1
        views: list[tuple[Offset, list[Row]]] = []
        reader = kit.connect()
        with Writer(kit, "kit_items", 300, threads, seed=11, pause=0.0) as writer:
            writer.wait(50)
            for _ in range(60):
                view = kit.dialect.begin_snapshot(reader, None)
                assert view is not None
                rows = [tuple(r) for b in kit.dialect.read_range(
                    reader, items, SnapshotSplit(items.table, 0, None, None), 100) for r in b]
                kit.dialect.end_snapshot(reader)
                views.append((view.offset, rows))
        end = kit.offset()
        index, histories = self._log_of(kit, items, initial, start, end)
        for offset, rows in views:
            at = index.position(offset)
            check_visible_between(rows, items, histories, at, at)


#: How long a deterministic visibility test holds its write in flight while ``current_offset``
#: runs: a dialect that waits for writes in flight blocks this long, one that does not returns.
HOLD_SECONDS = 2.0


class TestVisibilityInFlight:
    """5b. The visibility hazard raced on purpose, so that a dialect exposed to it fails every
    run: write A changes a row and stays open, a later write B commits, ``current_offset`` is
    asked (in a thread: it may wait for A), then A commits. An offset returned while A was open
    must not pass A's change (a stream from it would never see A), and a read between two such
    offsets must see the states between them. A change table whose offset is its highest
    visible sequence number fails here: A's number was taken before B's, B's is visible."""

    def _race(self, kit: Kit, work: Any) -> tuple[Any, bool]:
        """Run ``work(conn)`` in a thread while write A (``id = 1`` to ``'A'``) is open and
        after write B (``id = 2`` to ``'B'``) committed; commit A after ``HOLD_SECONDS`` or once
        ``work`` returned. Returns what ``work`` returned and whether it returned with A
        still open."""
        conn = kit.connect()
        pending = kit.harness.open_write(
            kit.sql("kit_items", "UPDATE {t} SET v = 'A' WHERE id = 1"))
        result: list[Any] = []
        failure: list[BaseException] = []

        def run() -> None:
            try:
                result.append(work(conn))
            except BaseException as exc:  # raised in the test's thread below
                failure.append(exc)
        thread = threading.Thread(target=run, daemon=True)
        try:
            kit.harness.execute(kit.sql("kit_items", "UPDATE {t} SET v = 'B' WHERE id = 2"))
            thread.start()
            thread.join(HOLD_SECONDS)
            before_commit = not thread.is_alive()
        finally:
            pending.commit()
        thread.join(DEADLINE_SECONDS)
        if thread.is_alive():
            raise KitError(f"current_offset or read_range did not return within "
                           f"{DEADLINE_SECONDS:.0f} s after the write in flight committed")
        if failure:
            raise failure[0]
        return result[0], before_commit

    @requires(Feature.CONCURRENT_WRITERS)
    def test_an_offset_taken_while_a_write_is_in_flight_does_not_pass_it(self, kit: Kit
                                                                          ) -> None:
        items = kit.items([(1, "initial"), (2, "initial")])
        start = kit.offset()
        offset, before_commit = self._race(kit, kit.dialect.current_offset)
        end = kit.offset()
        below, above = kit.events([items], start, offset), kit.events([items], offset, end)
        assert [e.after for e in below + above] in ([(2, "B"), (1, "A")], [(1, "A"), (2, "B")]), \
            "the log of the race is not the two writes"
        assert (2, "B") in [e.after for e in below], (
            f"current_offset returned {offset}, not above write B, committed before it was asked")
        if before_commit:
            assert (1, "A") in [e.after for e in above], (
                f"current_offset returned {offset} while write A was in flight, and A's change "
                "lies below it: a stream starting there never sees A (the offset ran ahead of "
                "visibility; wait for the writes in flight, as docs/design.md says)")

    @requires(Feature.CONCURRENT_WRITERS)
    def test_a_read_while_a_write_is_in_flight_sees_the_states_between_its_offsets(
            self, kit: Kit) -> None:
        initial = [(1, "initial"), (2, "initial")]
        items = kit.items(initial)
        start = kit.offset()

        def read(conn: Any) -> tuple[Offset, list[Row], Offset]:
            low = kit.dialect.current_offset(conn)
            rows = [tuple(r) for b in kit.dialect.read_range(
                conn, items, SnapshotSplit(items.table, 0, None, None), 100) for r in b]
            return low, rows, kit.dialect.current_offset(conn)
        (low, rows, high), _ = self._race(kit, read)
        end = kit.offset()
        log = kit.events([items], start, end)
        index = LogIndex(log, kit.dialect.compare_offset)
        check_visible_between(rows, items, key_histories(log, as_dict(items, initial)),
                              index.position(low), index.position(high))


def _run_sync(kit: Kit, options: SyncOptions, writer: Writer, warmup: int
              ) -> tuple[list[tuple[str, dict[Key, Row]]], list[ChangeEvent],
                         SyncState | None, Offset]:
    """Run the algorithm while ``writer`` writes; stop the writer once the log phase starts,
    then catch up. Returns each committed state with the mirror at that point, every emitted
    event, the first log-phase state and the final head offset."""
    items = kit.dialect.describe_table(kit.conn, kit.table_id("kit_items"))
    runner = SyncRunner(kit.dialect, kit.connect, options,
                        PhaseHooks(after_read=lambda split: time.sleep(0.003)))
    mirror: dict[Key, Row] = {}
    emitted: list[ChangeEvent] = []
    stored: list[tuple[str, dict[Key, Row]]] = []
    first_log: SyncState | None = None
    with writer:
        writer.wait(warmup)
        state = runner.start([items])
        stored.append((state.dumps(), dict(mirror)))
        while state.phase is Phase.SNAPSHOT:
            events, state = runner.step(state)
            apply(mirror, events)
            emitted += events
            stored.append((state.dumps(), dict(mirror)))
        first_log = state
        for _ in range(3):  # some log batches while the writer still writes
            events, state = runner.step(state)
            apply(mirror, events)
            emitted += events
            stored.append((state.dumps(), dict(mirror)))
    head = kit.offset()
    done = caught_up(runner, head)
    while not done(state):
        events, state = runner.step(state)
        apply(mirror, events)
        emitted += events
        stored.append((state.dumps(), dict(mirror)))
    runner.close()
    assert mirror == as_dict(items, kit.rows(items)), "the mirror differs from the source"
    return stored, emitted, first_log, head


class TestEndToEnd:
    """5b. The whole algorithm over the dialect with concurrent writers: the mirror equals the
    source, and in exactly-once mode each change is emitted once, after its split's read."""

    @pytest.mark.parametrize("mode", ["exactly_once", "at_least_once", "atomic_snapshot"])
    def test_sync_under_concurrent_writers_ends_equal_to_the_source(self, kit: Kit, mode: str
                                                                   ) -> None:
        if mode == "atomic_snapshot" and not kit.dialect.has(Capability.ATOMIC_SNAPSHOT):
            pytest.skip(f"dialect {kit.dialect.name!r} does not declare atomic_snapshot")
        initial = [(i * 2, f"row {i}") for i in range(1500)]
        items = kit.items(initial)
        start = kit.offset()
        options = SyncOptions(split_size=97, fetch_size=50, exactly_once=mode != "at_least_once",
                              atomic_snapshot=mode == "atomic_snapshot",
                              log_batch_max_events=150)
        threads = 3 if Feature.CONCURRENT_WRITERS in kit.harness.features else 1
        writer = Writer(kit, "kit_items", 3000, threads, seed=3, pause=0.003)
        _, emitted, first_log, head = _run_sync(kit, options, writer, warmup=20)
        assert any(e.op != "r" for e in emitted)
        if mode == "at_least_once":
            return
        assert first_log is not None
        log = kit.events([items], start, head)
        check_exactly_once(emitted, LogIndex(log, kit.dialect.compare_offset),
                           key_histories(log, as_dict(items, initial)),
                           first_log.finished[items.table])


class TestSyncToATarget:
    """5c. The whole algorithm over two tables (an integer key; a compound key with text)
    while writers insert, update, move keys and delete in both, each batch applied through a
    target's ``apply_changes`` (the reference SQLite dialect's) as ``sdk sync`` does, the log
    acknowledged as it goes where the dialect has ``acknowledge``: read back, the target
    equals the source, table by table."""

    @pytest.mark.parametrize("mode", ["exactly_once", "at_least_once", "atomic_snapshot"])
    def test_a_target_ends_equal_to_the_source(self, kit: Kit, mode: str,
                                               tmp_path: Path) -> None:
        if mode == "atomic_snapshot" and not kit.dialect.has(Capability.ATOMIC_SNAPSHOT):
            pytest.skip(f"dialect {kit.dialect.name!r} does not declare atomic_snapshot")
        tables = [kit.items([(i, f"row {i}") for i in range(1200)]),
                  kit.pairs([(f"k{i % 37}", i, "x") for i in range(400)])]
        options = SyncOptions(split_size=97, exactly_once=mode != "at_least_once",
                              atomic_snapshot=mode == "atomic_snapshot",
                              log_batch_max_events=200)
        runner = SyncRunner(kit.dialect, kit.connect, options,
                            PhaseHooks(after_read=lambda split: time.sleep(0.005)))
        sqlite = get_dialect("sqlite")
        target: Any = sqlite.connect(ConnectionConfig.from_url(f"sqlite:///{tmp_path}/mirror.db"))
        threads = 2 if Feature.CONCURRENT_WRITERS in kit.harness.features else 1
        writers = [Writer(kit, "kit_items", 1600, threads, seed=11, pause=0.004),
                   Writer(kit, "kit_pairs", 600, 1, seed=13, pause=0.004)]
        batches = 0

        def step(state: SyncState) -> SyncState:
            nonlocal batches
            events, state = runner.step(state)
            batches += 1
            for schema in state.tables.values():
                sqlite.apply_changes(target, schema, [e for e in events
                                                      if e.table == schema.table],
                                     f"batch {batches}")
            if state.phase is Phase.LOG and state.position is not None \
                    and kit.dialect.has(Capability.ACKNOWLEDGE):
                kit.dialect.acknowledge_offset(runner.conn, state.position)
            return state

        try:
            with writers[0], writers[1]:
                for writer in writers:
                    writer.wait(10)
                state = runner.start(tables)
                for schema in state.tables.values():
                    sqlite.create_table(target, schema)
                before = sum(w.committed for w in writers)
                while state.phase is Phase.SNAPSHOT or batches < 5:
                    state = step(state)
                assert sum(w.committed for w in writers) > before, \
                    "the writers wrote nothing while the snapshot was read"
            for writer in writers:
                assert not writer.errors, writer.errors
            done = caught_up(runner, kit.offset())
            while not done(state):
                state = step(state)
            for schema in state.tables.values():
                whole = SnapshotSplit(schema.table, 0, None, None)
                mirrored = [r for b in sqlite.read_target_range(target, schema, whole, 1000)
                            for r in b]
                assert as_dict(schema, mirrored) == as_dict(schema, kit.rows(schema)), \
                    f"the target's {schema.table} differs from the source"
        finally:
            runner.close()
            target.close()


class TestTypeParity:
    """6. The same data read by ``read_range`` and by ``stream_log`` gives equal values."""

    def test_snapshot_and_log_give_equal_values(self, kit: Kit) -> None:
        golden = list(kit.harness.golden_columns())
        if not golden:
            pytest.skip("the harness gives no golden_columns")
        table, insert = kit.golden("kit_golden", golden)
        count = insert(0)
        snapshot = {r[0]: r[1:] for r in kit.rows(table)}
        low = kit.offset()
        insert(1000)
        logged = {e.key[0] - 1000: e.after[1:] for e in kit.events([table], low, kit.offset())
                  if e.after is not None}
        assert len(snapshot) == count == len(logged)
        for j in snapshot:
            for g, a, b in zip(golden, snapshot[j], logged[j], strict=True):
                same = a == b or (a != a and b != b)  # NaN equals NaN here
                value = g.literals[j] if j < len(g.literals) else "NULL"
                assert same and type(a) is type(b), \
                    f"{g.sql_type} value {value}: read_range gives {a!r}, stream_log gives {b!r}"


class TestResume:
    """7. Restarting from any committed state ends equal to the source."""

    def test_resume_from_every_stored_state(self, kit: Kit) -> None:
        items = kit.items([(i * 2, f"row {i}") for i in range(300)])
        options = SyncOptions(split_size=37, fetch_size=20, log_batch_max_events=40)
        writer = Writer(kit, "kit_items", 600, 1, seed=5, pause=0.002, max_transactions=150)
        stored, _, _, head = _run_sync(kit, options, writer, warmup=20)
        source = as_dict(items, kit.rows(items))
        for text, saved in stored[:-1]:  # every state a crash could restart from
            runner = SyncRunner(kit.dialect, kit.connect, options)
            state, mirror = SyncState.loads(text), dict(saved)
            done = caught_up(runner, head)
            while not done(state):
                events, state = runner.step(state)
                apply(mirror, events)
            runner.close()
            assert mirror == source, f"resuming from {state.phase.value} state lost data"


class TestPreflight:
    """8. Preflight passes on a configured source and names each missing setting or privilege
    with the statement that fixes it."""

    @requires("preflight")
    def test_a_configured_source_passes_preflight(self, kit: Kit) -> None:
        items = kit.items()
        failed = [r for r in kit.dialect.preflight(kit.conn, [items.table])
                  if r.required and not r.ok]
        assert not failed, "\n".join(map(str, failed))

    @requires("preflight")
    def test_missing_privileges_are_reported_with_their_fix(self, kit: Kit) -> None:
        url = kit.harness.unprivileged_url()
        if url is None:
            pytest.skip("the harness gives no unprivileged_url")
        items = kit.items()
        conn = kit.dialect.connect(ConnectionConfig.from_url(url))
        try:
            checks = kit.dialect.preflight(conn, [items.table])
        finally:
            conn.close()
        failed = [r for r in checks if r.required and not r.ok]
        assert failed, "preflight found nothing missing for a user without privileges"
        for r in failed:
            assert r.fix.strip(), f"requirement {r.name!r} is missing but names no fix"
        password = ConnectionConfig.from_url(url).password
        if password:
            assert password not in "\n".join(map(str, checks)), "a password is in the report"


class TestFaults:
    """9. Passing faults are told from the rest, so ``sdk sync`` retries the first and stops
    on the second: a session the server ended, a server that does not answer, a refused
    login, a bad request."""

    @requires("is_retriable")
    @requires("end_session")
    def test_a_session_the_server_ended_is_a_passing_fault(self, kit: Kit) -> None:
        conn = kit.connect()
        kit.harness.end_session(conn)
        with pytest.raises(Exception) as caught:  # whatever the driver raises
            for _ in range(3):  # a driver may notice only on the next round trip
                kit.dialect.current_offset(conn)
        assert kit.dialect.is_retriable(caught.value), \
            f"is_retriable said no to {type(caught.value).__name__}: {caught.value}"

    def test_a_server_that_does_not_answer_is_retriable(self, kit: Kit) -> None:
        config = ConnectionConfig.from_url(kit.harness.url or "")
        if not config.host:
            pytest.skip("the dialect does not connect to a host")
        with socket.socket() as probe:  # a port nobody listens on
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        url = (kit.harness.url or "").replace(
            f"@{config.host}:{config.port}" if config.port else f"@{config.host}",
            f"@127.0.0.1:{port}", 1)
        with pytest.raises(RetriableError) as caught:
            kit.dialect.connect(ConnectionConfig.from_url(url))
        if config.password:
            assert f":{config.password}@" not in str(caught.value), "the password is shown"

    def test_a_refused_login_is_a_configuration_error(self, kit: Kit) -> None:
        url = kit.harness.refused_login_url()
        if url is None and not ConnectionConfig.from_url(kit.harness.url or "").host:
            pytest.skip("the dialect connects to no server: there is no login to refuse")
        if url is None:
            pytest.skip("the harness gives no refused_login_url")
        config = ConnectionConfig.from_url(url)
        with pytest.raises(ConfigurationError) as caught:  # to fix, not to retry
            kit.dialect.connect(config)
        assert not isinstance(caught.value, RetriableError)
        if config.password:
            assert config.password not in str(caught.value), "the password is shown"

    def test_a_bad_request_is_not_a_passing_fault(self, kit: Kit) -> None:
        missing = kit.table_id("kit_missing")  # never created
        with pytest.raises(Exception) as caught:  # whatever the dialect raises
            kit.dialect.describe_table(kit.conn, missing)
        assert not isinstance(caught.value, RetriableError)
        assert not kit.dialect.is_retriable(caught.value)


def _mirror(kit: Kit, source: TableSchema, rows: Sequence[Row]) -> TableSchema:
    """A mirror table of ``source`` holding ``rows`` (:meth:`Kit.mirror`); the test is
    skipped, saying why, when the kit's user may not make it (a capture user without
    CREATE)."""
    try:
        return kit.mirror(source, kit.base_name(source) + "_m", rows)
    except KitError:
        raise
    except Exception as exc:  # whatever the driver raises for a refused CREATE
        pytest.skip(f"the kit's user cannot make a mirror table with create_table "
                    f"({type(exc).__name__}: {exc})")


def _in_server_golden(kit: Kit, probe: TableSchema | None = None) -> TableSchema | None:
    """The golden table of the columns whose types a server is expected to hash, less those
    the harness's ``checksum_declined`` names, filled; None when there is none. ``probe``:
    the whole golden table, if made already (its description gives the types)."""
    golden = list(kit.harness.golden_columns())
    if not golden:
        pytest.skip("the harness gives no golden_columns")
    declined = checksum_declined(kit.harness)
    if probe is None:
        probe = kit.golden("kit_golden", golden)[0]
    kept = [g for g, c in zip(golden, probe.columns[1:], strict=True)
            if c.type in IN_SERVER_TYPES and g.sql_type not in declined]
    if not kept:
        return None
    table, insert = kit.golden("kit_golden_hashed", kept)
    insert(0)
    return table


@requires(Capability.CHECKSUM)
class TestChecksums:
    """10. With ``checksum``: ``checksum_range`` and ``row_hashes`` equal the engine's hashes
    (:mod:`sdk.dialect.checksum`) of the rows ``read_range`` reads, over the whole table, the
    splits ``next_boundary`` cuts, bounded, open and empty key ranges and a split's
    condition; both are None only for a table :func:`~sdk.dialect.checksum.in_server` rejects
    (or holding a type the harness's ``checksum_declined`` names). On a mirror the dialect
    made as a target they equal the hashes of the source's rows."""

    def _check(self, kit: Kit, table: TableSchema, splits: Sequence[SnapshotSplit]) -> None:
        for split in splits:
            assert kit.check_checksums(table, split), \
                f"{table.table}: checksum_range and row_hashes returned None for a table " \
                f"of types {sorted({c.type.value for c in table.columns})}, which a server " \
                "is expected to hash (sdk.dialect.checksum.in_server)"

    def test_the_servers_hashes_are_the_engines(self, kit: Kit) -> None:
        rows = [(i * 3 - 40, f"row {i}") for i in range(40)] + \
            [(300, ""), (301, None), (302, "ünï 😀"), (303, "a,b\tc")]
        items = kit.items(rows)
        self._check(kit, items, [*ranges(items, rows), *kit.splits(items, 7)])
        pairs = [(a, b, f"{a}/{b}") for a in ("B", "a", "ab", "b b", "é") for b in (-2, 0, 7)]
        table = kit.pairs(pairs)
        self._check(kit, table, [*ranges(table, pairs), *kit.splits(table, 4)])

    def test_an_empty_table(self, kit: Kit) -> None:
        items = kit.items()
        self._check(kit, items, ranges(items, []))

    def test_the_golden_values(self, kit: Kit) -> None:
        golden = list(kit.harness.golden_columns())
        if not golden:
            pytest.skip("the harness gives no golden_columns")
        table, insert = kit.golden("kit_golden", golden)
        insert(0)
        whole = SnapshotSplit(table.table, 0, None, None)
        declined = checksum_declined(kit.harness)
        if not kit.check_checksums(table, whole):
            assert not in_server(table) or any(g.sql_type in declined for g in golden), \
                f"checksum_range declined the golden table, whose types " \
                f"{sorted({c.type.value for c in table.columns})} a server is expected to " \
                "hash (name the types the dialect documents declining in the harness's " \
                "checksum_declined)"
        hashed = _in_server_golden(kit, table)
        if hashed is not None:
            self._check(kit, hashed, ranges(hashed, kit.rows(hashed)))

    @requires(Capability.FILTERED_READS)
    def test_a_split_condition(self, kit: Kit) -> None:
        rows = [(i, f"{i % 3}% off") for i in range(30)]
        items = kit.items(rows)
        v = kit.harness.quote("v")
        self._check(kit, items, [replace(s, where=f"{v} LIKE '1%'")
                                 for s in ranges(items, rows)])

    @requires(Capability.APPLY)
    def test_a_mirror_hashes_as_its_source(self, kit: Kit) -> None:
        sources = [kit.items([(i * 3 - 40, f"row {i}") for i in range(40)] + [(301, None)]),
                   kit.pairs([(a, b, "x") for a in ("B", "a", "é") for b in (-2, 0, 7)])]
        hashed = _in_server_golden(kit)
        sources += [hashed] if hashed is not None else []
        for source in sources:
            rows = kit.rows(source)
            mirror = _mirror(kit, source, rows)
            for split in ranges(source, rows):
                inside = [r for r in rows if split.contains(source.key_of(r))]
                assert kit.check_checksums(mirror, replace(split, table=mirror.table), inside,
                                           kit.target_conn), \
                    f"{mirror.table}: no server checksum of a mirror whose source has one"


@requires(Capability.APPLY, "read_target_range")
class TestReadTargetRange:
    """11. With ``read_target_range``: a mirror table made by ``create_table`` and written by
    ``apply_changes`` (a snapshot's rows, then updates and deletes) reads back in a split's
    key range as the after images applied, value for value (the golden values too)."""

    def test_a_mirror_reads_back_the_applied_images(self, kit: Kit) -> None:
        sources = [kit.items([(i * 3 - 40, f"row {i}") for i in range(40)] + [(301, None)]),
                   kit.pairs([(a, b, "x") for a in ("B", "a", "é") for b in (-2, 0, 7)])]
        golden = list(kit.harness.golden_columns())
        if golden:
            table, insert = kit.golden("kit_golden", golden)
            insert(0)
            sources.append(table)
        for source in sources:
            rows = kit.rows(source)
            mirror = _mirror(kit, source, rows)
            expected = as_dict(source, rows)
            changes = self._changes(kit, mirror, rows)
            assert kit.dialect.apply_changes(kit.target_conn, mirror, changes,
                                             f"kit {kit.tag} 2")
            apply(expected, changes)
            for split in ranges(source, rows):
                split = replace(split, table=mirror.table)
                got = [tuple(r) for b in kit.dialect.read_target_range(kit.target_conn, mirror,
                                                                       split, 4) for r in b]
                wanted = {k: r for k, r in expected.items() if split.contains(k)}
                assert _same(as_dict(mirror, got), wanted) and len(got) == len(wanted), \
                    f"{mirror.table} [{split.start}, {split.end}): read_target_range gave " \
                    f"{sorted(got, key=mirror.key_of)}, the applied images are " \
                    f"{[wanted[k] for k in sorted(wanted)]}"

    def _changes(self, kit: Kit, table: TableSchema, rows: Sequence[Row]) -> list[ChangeEvent]:
        """Every third row updated to the next row's other values, every fifth deleted."""
        at, out = kit.offset(), []
        keys = set(table.key_index)
        for i, row in enumerate(rows):
            if i % 5 == 4:
                out.append(ChangeEvent(table.table, "d", table.key_of(row), None, at, tuple(row)))
            elif i % 3 == 0:
                other = rows[(i + 1) % len(rows)]
                after = tuple(v if j in keys else other[j] for j, v in enumerate(row))
                out.append(ChangeEvent(table.table, "u", table.key_of(row), after, at, tuple(row)))
        return out


@requires(Capability.TRANSACTIONS)
class TestApplyTransaction:
    """12. With capability ``transactions``: the ``apply_changes`` calls inside one
    ``apply_transaction`` block, on two tables and several batches of each (sets large enough
    for a set-based apply), commit together when it ends: another connection sees none of
    them before, all after; a block that raises leaves nothing, its batch ids unclaimed."""

    def test_a_block_commits_all_its_batches_or_none(self, kit: Kit) -> None:
        items = kit.items([(i, f"row {i}") for i in range(300)])
        pairs = kit.pairs([(a, b, "x") for a in ("a", "b") for b in range(60)])
        mirrors = [_mirror(kit, t, kit.rows(t)) for t in (items, pairs)]
        before = [self._read(kit, kit.target_conn, m) for m in mirrors]
        url = kit.harness.target_url() or kit.harness.url
        assert url is not None
        other = kit.dialect.connect(ConnectionConfig.from_url(url))
        try:
            for fails in (True, False):
                batches = [(m, self._changes(kit, m, kit.rows(t), n), f"kit {kit.tag} tx {n}")
                           for n in (1, 2) for m, t in zip(mirrors, (items, pairs), strict=True)]
                try:
                    with kit.dialect.apply_transaction(kit.target_conn):
                        for mirror, changes, batch in batches:
                            assert kit.dialect.apply_changes(kit.target_conn, mirror, changes,
                                                             batch), f"{batch} not claimed"
                            assert [self._read(kit, other, m) for m in mirrors] == before, \
                                "another connection saw a write before the block ended"
                        if fails:
                            raise _PlannedError
                except _PlannedError:
                    assert [self._read(kit, kit.target_conn, m) for m in mirrors] == before, \
                        "a block that raised left some of its writes"
            expected = []
            for mirror, source in zip(mirrors, (items, pairs), strict=True):
                rows = as_dict(mirror, kit.rows(source))
                for n in (1, 2):
                    apply(rows, self._changes(kit, mirror, kit.rows(source), n))
                expected.append(sorted(rows.values(), key=mirror.key_of))
            assert [self._read(kit, other, m) for m in mirrors] == expected
            with kit.dialect.apply_transaction(kit.target_conn):
                for mirror, changes, batch in batches:
                    assert not kit.dialect.apply_changes(kit.target_conn, mirror, changes,
                                                         batch), f"{batch} applied twice"
        finally:
            other.close()

    @requires("trim_ledger")
    def test_trim_ledger_forgets_the_batches_in_its_range_only(self, kit: Kit) -> None:
        """``trim_ledger`` inside a block deletes the ledger rows of its table in
        ``[low, high)``: a batch there is claimed again, one outside is still a replay."""
        items = kit.items([(1, "one")])
        mirror = _mirror(kit, items, kit.rows(items))
        ids = [f"kit {kit.tag}:{n:012d}-x/0" for n in (1, 2, 3)]
        change = self._changes(kit, mirror, kit.rows(items), 1)
        for batch in ids:
            assert kit.dialect.apply_changes(kit.target_conn, mirror, change, batch)
        with kit.dialect.apply_transaction(kit.target_conn):
            kit.dialect.trim_ledger(kit.target_conn, mirror, f"kit {kit.tag}:{0:012d}",
                                    f"kit {kit.tag}:{3:012d}")
        assert [kit.dialect.apply_changes(kit.target_conn, mirror, change, b)
                for b in ids] == [True, True, False], "the trim missed or passed its range"

    @requires("target_preflight")
    def test_target_preflight_names_what_the_user_may_do(self, kit: Kit) -> None:
        """``target_preflight`` for a mirror the kit's user just made and for one not made
        yet: a list of requirements, none missing (the user made the first, so may make the
        second), the table not made named as one the sync would make."""
        items = kit.items([(1, "one")])
        mirror = _mirror(kit, items, kit.rows(items))
        absent = replace(mirror, table=TableId(mirror.table.schema,
                                               kit.base_name(items) + "_absent"))
        checks = kit.dialect.target_preflight(kit.target_conn, [mirror, absent])
        assert checks and all(isinstance(c, Requirement) for c in checks), checks
        assert not [str(c) for c in checks if not c.ok and c.required], \
            "a right is missing for a user who made the mirror table"
        assert any(absent.table.name in f"{c.name} {c.detail}" for c in checks), \
            f"no requirement names {absent.table}, which the sync would make: {checks}"

    @staticmethod
    def _read(kit: Kit, conn: Any, mirror: TableSchema) -> list[Row]:
        whole = SnapshotSplit(mirror.table, 0, None, None)
        read = kit.dialect.read_target_range if kit.dialect.implements(
            "read_target_range") else kit.dialect.read_range  # a mirror is a table it reads
        got = [tuple(r) for b in read(conn, mirror, whole, 1000) for r in b]
        return sorted(got, key=mirror.key_of)

    @staticmethod
    def _changes(kit: Kit, table: TableSchema, rows: Sequence[Row], n: int
                 ) -> list[ChangeEvent]:
        """Every row updated (its last column to ``v<n>``), every seventh deleted in batch 2."""
        at = kit.offset()
        out = []
        for i, row in enumerate(rows):
            if n == 2 and i % 7 == 3:
                out.append(ChangeEvent(table.table, "d", table.key_of(row), None, at, tuple(row)))
            else:
                after = (*row[:-1], f"v{n} {i}")
                out.append(ChangeEvent(table.table, "u", table.key_of(row), after, at, tuple(row)))
        return out


class _PlannedError(Exception):
    """Raised on purpose inside a block that must leave nothing."""


def _same(got: dict[Key, Row], wanted: dict[Key, Row]) -> bool:
    """The same keys with the same values (NaN equal to NaN)."""
    return got.keys() == wanted.keys() and all(
        len(got[k]) == len(wanted[k]) and
        all(a == b or (a != a and b != b) for a, b in zip(got[k], wanted[k], strict=True))
        for k in got)


__all__ = [
    "TestApplyTransaction",
    "TestBoundedStream",
    "TestChecksums",
    "TestEndToEnd",
    "TestFaults",
    "TestHooks",
    "TestLogIdentity",
    "TestOffsets",
    "TestOpenStream",
    "TestPreflight",
    "TestReadRange",
    "TestReadTargetRange",
    "TestResume",
    "TestSchemaChanges",
    "TestSyncToATarget",
    "TestTruncations",
    "TestTypeParity",
    "TestVisibility",
    "TestVisibilityInFlight",
]
