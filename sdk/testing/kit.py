"""The conformance kit's working parts: the dialect under test bound to a harness, and the
checks the contract tests share (histories of keys, exactly-once, deadlines)."""

from __future__ import annotations

import difflib
import random
import threading
import time
import uuid
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from contextlib import suppress
from dataclasses import replace
from functools import cached_property, cmp_to_key
from itertools import pairwise
from typing import TypeVar

from ..dialect import hookspecs
from ..dialect.checksum import canonical_row, checksum_rows, hash_rows
from ..dialect.config import ConnectionConfig
from ..dialect.manager import Dialect, DialectManager
from ..dialect.types import (
    Capability,
    ChangeEvent,
    Connection,
    FinishedSplit,
    Heartbeat,
    Key,
    Offset,
    Row,
    SnapshotSplit,
    TableId,
    TableSchema,
)
from .harness import Feature, GoldenColumn, Harness

T = TypeVar("T")

#: Longest a single hook call may take in the kit before the test fails as hung.
DEADLINE_SECONDS = 120.0


class KitError(AssertionError):
    """A contract violation found by the kit (an assertion with the kit's explanation)."""


def load_dialect(harness: type[Harness] | Harness) -> Dialect:
    """The dialect the harness names, loaded as users load it (its entry point), or the
    harness's ``plugin`` object; fails naming the missing hooks of an incomplete plugin."""
    name = harness.dialect
    if harness.plugin is not None:
        manager = DialectManager(load_entry_points=False)
        manager.register(harness.plugin, name)
        return manager.get(name)
    manager = DialectManager()
    status = {s.name: s for s in manager.statuses()}.get(name)
    if status is None:
        raise KitError(f"no dialect {name!r} is installed: is the plugin installed "
                       f"(pip install -e .) with an entry point in the 'sdk.dialects' group?")
    if status.problem:
        raise KitError(f"dialect {name!r} cannot be used: {status.problem}")
    return manager.get(name)


def requirement_kind(name: str) -> str:
    """What an ``sdk_requires`` name is: ``capability``, ``feature`` or ``hook``.

    An unknown name (a typo) raises :class:`KitError` naming the closest known one, so a test
    can never be skipped for a requirement nothing could ever meet.
    """
    kinds = {**{h: "hook" for h in hookspecs.CONTRACT},
             **{f.value: "feature" for f in Feature},
             **{c.value: "capability" for c in Capability}}
    if name in kinds:
        return kinds[name]
    close = difflib.get_close_matches(name, kinds, n=1)
    hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(sorted(kinds))}"
    raise KitError(f"sdk_requires({name!r}) names no capability, harness feature or hook: "
                   f"{hint}")


def within(seconds: float, what: str, fn: Callable[[], T]) -> T:
    """Run ``fn`` in a helper thread and fail if it has not returned after ``seconds`` (a
    stream that never ends must fail the test, not hang the run)."""
    result: list[T] = []
    error: list[BaseException] = []

    def run() -> None:
        try:
            result.append(fn())
        except BaseException as exc:  # handed to the caller's thread
            error.append(exc)

    worker = threading.Thread(target=run, daemon=True, name=f"kit: {what}")
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        raise KitError(f"{what} did not return within {seconds:.0f} s")
    if error:
        raise error[0]
    return result[0]


class Kit:
    """The dialect under test, a connection to it, and the harness that writes test data."""

    def __init__(self, harness: Harness, dialect: Dialect) -> None:
        assert harness.url is not None
        self.harness = harness
        self.dialect = dialect
        self.config = ConnectionConfig.from_url(harness.url)
        self._conns: list[Connection] = []
        self.conn = self.connect()
        self._tables: list[str] = []
        self.tag = uuid.uuid4().hex[:6]

    def connect(self) -> Connection:
        conn = self.dialect.connect(self.config)
        self._conns.append(conn)
        return conn

    @cached_property
    def target_conn(self) -> Connection:
        """A connection as the harness's target user (:meth:`Harness.target_url`), who makes
        the kit's mirror tables; the kit's own connection when it names none."""
        url = self.harness.target_url()
        if url is None:
            return self.conn
        conn = self.dialect.connect(ConnectionConfig.from_url(url))
        self._conns.append(conn)
        return conn

    def close(self) -> None:
        for conn in self._conns:
            with suppress(Exception):  # already closed by the test
                conn.close()
        for name in self._tables:
            with suppress(Exception):  # best effort: the next run recreates it
                self.harness.drop_table(name)

    # --- tables --------------------------------------------------------------------------------

    def physical(self, name: str) -> str:
        """The real name of the kit's table ``name``: suffixed per test, so several runs of the
        kit (CI and a developer, two dialects' suites) can share one database."""
        return f"{name}_{self.tag}"

    def base_name(self, table: TableSchema) -> str:
        """The kit's name of one of its tables (:meth:`physical` undone)."""
        return table.table.name.removesuffix(f"_{self.tag}")

    def table_id(self, name: str) -> TableId:
        return self.harness.table_id(self.physical(name))

    def table(self, name: str, columns: Sequence[tuple[str, str]], key: Sequence[str],
              rows: Sequence[Sequence[object]] = ()) -> TableSchema:
        """Create a captured table with ``columns`` of kit kinds (``int``/``text``) or DDL
        types (anything else), fill it with ``rows`` and return the dialect's description."""
        kinds = {"int", "text"}
        ddl = [(c, self.harness.column_type(t) if t in kinds else t) for c, t in columns]
        self.harness.create_table(self.physical(name), ddl, key)
        self._tables.append(self.physical(name))
        if rows:
            self.insert(name, [c for c, _ in columns], rows)
        schema = self.dialect.describe_table(self.conn, self.table_id(name))
        self.dialect.prepare_capture(self.conn, [schema])
        return schema

    def items(self, rows: Sequence[tuple[int, str | None]] = ()) -> TableSchema:
        """``kit_items (id int primary key, v text)``."""
        return self.table("kit_items", [("id", "int"), ("v", "text")], ["id"], rows)

    def pairs(self, rows: Sequence[tuple[str, int, str]] = ()) -> TableSchema:
        """``kit_pairs (a text, b int, v text, primary key (a, b))``."""
        return self.table("kit_pairs", [("a", "text"), ("b", "int"), ("v", "text")],
                          ["a", "b"], rows)

    def golden(self, name: str, golden: Sequence[GoldenColumn]
               ) -> tuple[TableSchema, Callable[[int], int]]:
        """Table ``name`` of an ``id`` key and a column ``c<i>`` of each golden type, and the
        function that inserts a row of the golden values per literal (NULL where a column
        has fewer) and a row of NULLs, ids counted from the one given: it returns how many."""
        names = [f"c{i}" for i in range(len(golden))]
        columns = [("id", "int"), *((n, g.sql_type) for n, g in zip(names, golden, strict=True))]
        depth = max((len(g.literals) for g in golden), default=0)
        rows = [[g.literals[j] if j < len(g.literals) else "NULL" for g in golden]
                for j in range(depth)] + [["NULL"] * len(golden)]
        table = self.table(name, columns, ["id"])
        quoted = ", ".join(map(self.harness.quote, ["id", *names]))

        def insert(first_id: int) -> int:
            self.harness.execute(*(
                self.sql(name, f"INSERT INTO {{t}} ({quoted}) "
                               f"VALUES ({', '.join([str(first_id + j), *row])})")
                for j, row in enumerate(rows)))
            return len(rows)
        return table, insert

    def mirror(self, source: TableSchema, name: str, rows: Sequence[Row]) -> TableSchema:
        """``source``'s schema as the kit's table ``name`` of the dialect as a target, holding
        ``rows`` (:func:`fill_mirror`; dropped after the test)."""
        self._tables.append(self.physical(name))
        return fill_mirror(self.dialect, self.target_conn, source, self.table_id(name), rows,
                           f"kit {self.tag} {name}")

    def insert_sql(self, name: str, columns: Sequence[str], row: Sequence[object]) -> str:
        cols = ", ".join(map(self.harness.quote, columns))
        return (f"INSERT INTO {self.harness.qualified(self.physical(name))} ({cols}) "
                f"VALUES ({', '.join(literal(v) for v in row)})")

    def insert(self, name: str, columns: Sequence[str], rows: Sequence[Sequence[object]]
               ) -> None:
        for chunk in range(0, len(rows), 500):
            self.harness.execute(*(self.insert_sql(name, columns, r)
                                   for r in rows[chunk:chunk + 500]))

    def sql(self, name: str, template: str) -> str:
        """``template`` with ``{t}`` replaced by the qualified name of table ``name``."""
        return template.replace("{t}", self.harness.qualified(self.physical(name)))

    # --- hooks with the kit's checks -----------------------------------------------------------

    def offset(self) -> Offset:
        return within(DEADLINE_SECONDS, "current_offset",
                      lambda: self.dialect.current_offset(self.conn))

    def events(self, tables: Sequence[TableSchema], start: Offset, end: Offset,
               conn: Connection | None = None) -> list[ChangeEvent]:
        """A bounded ``stream_log``; heartbeats are dropped, and it must end by itself."""
        self.harness.wait_for_log(end)
        use = conn if conn is not None else self.conn

        def read() -> list[ChangeEvent]:
            return [e for e in self.dialect.stream_log(use, tables, start, end)
                    if isinstance(e, ChangeEvent)]
        return within(DEADLINE_SECONDS, "a bounded stream_log", read)

    def rows(self, table: TableSchema, split: SnapshotSplit | None = None,
             fetch_size: int = 100) -> list[Row]:
        whole = split or SnapshotSplit(table.table, 0, None, None)

        def read() -> list[Row]:
            return [tuple(r) for batch in self.dialect.read_range(self.conn, table, whole,
                                                                   fetch_size)
                    for r in batch]
        return within(DEADLINE_SECONDS, "read_range", read)

    def check_checksums(self, table: TableSchema, split: SnapshotSplit,
                        rows: Sequence[Row] | None = None, conn: Connection | None = None
                        ) -> bool:
        """:func:`check_checksums` on ``conn`` (by default the kit's connection), by default
        of the rows ``read_range`` reads."""
        if rows is None:
            rows = self.rows(table, split)
        return check_checksums(self.dialect, self.conn if conn is None else conn, table, split,
                               rows)

    def splits(self, table: TableSchema, size: int) -> list[SnapshotSplit]:
        """Cut ``table`` with ``next_boundary`` as the planner does."""
        bounds: list[Key | None] = [None]
        while (nxt := self.dialect.next_boundary(self.conn, table, bounds[-1], size)) is not None:
            if bounds[-1] is not None and not nxt > bounds[-1]:
                raise KitError(f"next_boundary returned {nxt!r}, not above {bounds[-1]!r}")
            bounds.append(nxt)
        bounds.append(None)
        return [SnapshotSplit(table.table, i, lo, hi)
                for i, (lo, hi) in enumerate(pairwise(bounds))]

    def sort_offsets(self, offsets: Sequence[Offset]) -> list[Offset]:
        return sorted(offsets, key=cmp_to_key(self.dialect.compare_offset))

    def open_stream(self, tables: Sequence[TableSchema], start: Offset, conn: Connection,
                    until: Callable[[list[ChangeEvent | Heartbeat]], bool],
                    what: str) -> list[ChangeEvent | Heartbeat]:
        """Read an open-ended ``stream_log`` until ``until(items so far)``, then close it."""
        def read() -> list[ChangeEvent | Heartbeat]:
            items: list[ChangeEvent | Heartbeat] = []
            stream = self.dialect.stream_log(conn, tables, start, None)
            try:
                for item in stream:
                    if isinstance(item, (ChangeEvent, Heartbeat)):
                        items.append(item)
                    if until(items):
                        break
            finally:
                close = getattr(stream, "close", None)
                if close is not None:
                    close()
            return items
        return within(DEADLINE_SECONDS, what, read)


def ranges(table: TableSchema, rows: Sequence[Row]) -> list[SnapshotSplit]:
    """Splits of ``table`` (holding ``rows``) to check a read over: the whole table, a
    bounded key range, the ranges open at either end, and an empty range (start = end)."""
    whole = SnapshotSplit(table.table, 0, None, None)
    keys = sorted(table.key_of(r) for r in rows)
    if not keys:
        return [whole]
    low, high = keys[len(keys) // 4], keys[3 * len(keys) // 4]
    return [whole, SnapshotSplit(table.table, 1, low, high),
            SnapshotSplit(table.table, 2, None, low), SnapshotSplit(table.table, 3, high, None),
            SnapshotSplit(table.table, 4, low, low)]


def fill_mirror(dialect: Dialect, conn: Connection, source: TableSchema, table: TableId,
                rows: Sequence[Row], batch_id: str) -> TableSchema:
    """``source``'s schema as table ``table`` of ``dialect`` as a target, made by its
    ``create_table`` and holding ``rows``, applied as a snapshot's ``r`` events."""
    mirror = replace(source, table=table)
    dialect.create_table(conn, mirror)
    at = dialect.current_offset(conn)
    events = [ChangeEvent(table, "r", source.key_of(r), tuple(r), at) for r in rows]
    if not dialect.apply_changes(conn, mirror, events, batch_id):
        raise KitError(f"apply_changes of the first batch of {table} returned False")
    return mirror


def check_checksums(dialect: Dialect, conn: Connection, table: TableSchema,
                    split: SnapshotSplit, rows: Sequence[Row]) -> bool:
    """``checksum_range`` and ``row_hashes`` of ``split`` equal the engine's hashes of
    ``rows`` (:mod:`sdk.dialect.checksum`), or both are None; whether they hashed in the
    server. A difference names the first row whose hash differs, with its canonical text."""
    found = within(DEADLINE_SECONDS, "checksum_range",
                   lambda: dialect.checksum_range(conn, table, split))

    def listed() -> list[tuple[Key, int]] | None:
        hashes = dialect.row_hashes(conn, table, split)
        return None if hashes is None else list(hashes)
    hashes = within(DEADLINE_SECONDS, "row_hashes", listed)
    if (found is None) != (hashes is None):
        raise KitError(f"{table.table}: checksum_range returned {found!r} and row_hashes "
                       f"{'None' if hashes is None else 'hashes'}: both decline a table "
                       "(None) or neither")
    if found is None or hashes is None:
        return False
    where = f"{table.table} [{split.start}, {split.end})"
    if hashes != sorted(hash_rows(table, rows), key=lambda pair: pair[0]):
        raise KitError(f"{where}: row_hashes differ from the engine's: "
                       f"{hash_difference(table, rows, hashes)}")
    if found != checksum_rows(table, rows):
        raise KitError(f"{where}: checksum_range gave {found}, the engine's hashes of the "
                       f"rows make {checksum_rows(table, rows)} (row_hashes agree with them)")
    return True


def hash_difference(table: TableSchema, rows: Iterable[Row],
                    hashes: Sequence[tuple[Key, int]]) -> str:
    """Where a dialect's ``row_hashes`` first differ from the engine's hashes of ``rows``:
    the key, both hashes and the row's canonical text (whose column is written otherwise)."""
    types = [c.type for c in table.columns]
    by_key = {table.key_of(r): r for r in rows}
    expected = sorted(hash_rows(table, by_key.values()), key=lambda pair: pair[0])
    for index, (want, got) in enumerate(zip(expected, hashes, strict=False)):
        if want != got:
            text = canonical_row(by_key[want[0]], types)
            return (f"row {index} is key {got[0]!r} with hash {got[1]}; the engine's is key "
                    f"{want[0]!r} with hash {want[1]} of the canonical text {text!r}")
    return f"{len(hashes)} hashes where the rows are {len(expected)}"


def checksum_declined(harness: Harness) -> frozenset[str]:
    """The golden types (``GoldenColumn.sql_type``) that :attr:`Harness.checksum_declined`
    says its dialect documents hashing outside the server: a table with such a column may
    have no server checksum."""
    return frozenset(harness.checksum_declined)


def literal(value: object) -> str:
    """An SQL literal for the kit's own values (integers, ASCII text, NULL)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        raise TypeError("the kit writes no booleans")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    raise TypeError(f"the kit writes no {type(value).__name__} literals")


# --- histories and the exactly-once check ----------------------------------------------------

History = list[tuple[int, Row | None]]


def key_histories(log: Sequence[ChangeEvent], initial: dict[Key, Row]
                  ) -> dict[Key, History]:
    """Each key's images in log order as ``(position, image or None when absent)``; position
    ``i`` is the ``i``-th event of ``log``, the initial rows sit at -1."""
    out: dict[Key, History] = {k: [(-1, v)] for k, v in initial.items()}
    for index, e in enumerate(log):
        if e.old_key is not None:
            out.setdefault(e.old_key, []).append((index, None))
        out.setdefault(e.key, []).append((index, None if e.op == "d" else e.after))
    return out


def state_at(history: History, position: int) -> Row | None:
    """The key's image in effect just before log position ``position``."""
    image: Row | None = None
    for at, img in history:
        if at >= position:
            break
        image = img
    return image


class LogIndex:
    """Maps offsets to positions in one complete log, to compare watermarks with changes."""

    def __init__(self, log: Sequence[ChangeEvent], compare: Callable[[Offset, Offset], int]
                 ) -> None:
        self.log = log
        self.key = cmp_to_key(compare)
        self.keys = [self.key(e.offset) for e in log]

    def position(self, offset: Offset) -> int:
        """How many changes of the log lie below ``offset``."""
        return bisect_left(self.keys, self.key(offset))


def check_visible_between(rows: Sequence[Row], table: TableSchema, histories: dict[Key, History],
                          low: int, high: int) -> None:
    """Every key's image in ``rows`` (a read made between log positions ``low`` and ``high``)
    is one the key had at some point in ``[low, high]``, and every key that existed throughout
    is present: the read saw neither a state older than its low mark nor newer than its high
    mark (the visibility guarantee of ``current_offset``)."""
    seen = {table.key_of(r): tuple(r) for r in rows}
    for key in set(seen) | set(histories):
        history = histories.get(key, [])
        possible = [state_at(history, low)]
        possible += [img for at, img in history if low <= at < high]
        got = seen.get(key)
        if got not in possible:
            raise KitError(f"key {key}: a read between log positions {low} and {high} saw "
                           f"{got!r}, but the key's images there were {possible!r}")


def check_exactly_once(emitted: Sequence[ChangeEvent], index: LogIndex,
                       histories: dict[Key, History],
                       finished: Sequence[FinishedSplit]) -> None:
    """Per key, the algorithm emitted exactly the key's history from its split's watermark on:
    its image at the watermark as one ``r`` event (if it existed then), then every later change
    once, in order. Nothing missing, nothing repeated, nothing stale."""
    def mark_of(key: Key) -> int:
        for done in finished:
            if done.split.contains(key):
                return index.position(done.watermark)
        raise KitError(f"key {key} lies in no finished split")

    per_key: dict[Key, list[tuple[str, int, Row | None]]] = {}
    for e in emitted:
        at = index.position(e.offset) if e.op != "r" else -2
        if e.old_key is not None:
            per_key.setdefault(e.old_key, []).append(("d", at, None))
        per_key.setdefault(e.key, []).append(
            ("r" if e.op == "r" else "d" if e.op == "d" else "cu", at,
             None if e.op == "d" else e.after))
    for key in set(per_key) | set(histories):
        history = histories.get(key, [])
        mark = mark_of(key)
        start_image = state_at(history, mark)
        expected: list[tuple[str, int, Row | None]] = []
        if start_image is not None:
            expected.append(("r", -2, start_image))
        expected += [("d" if img is None else "cu", at, img) for at, img in history
                     if at >= mark]
        got = per_key.get(key, [])
        if got != expected:
            raise KitError(f"key {key} (split watermark at log position {mark}): emitted "
                           f"{got!r}, expected {expected!r}")


# --- a concurrent writer ---------------------------------------------------------------------

class Writer:
    """Threads that insert, update, move keys and delete in the kit's table ``name``
    (``kit_items``, or ``kit_pairs`` and its compound text key) through their own admin
    connections, in transactions of one to three statements, until stopped."""

    def __init__(self, kit: Kit, name: str, key_space: int, threads: int, seed: int,
                 pause: float = 0.002, max_transactions: int | None = None) -> None:
        self.kit, self.name, self.key_space = kit, name, key_space
        self.pause, self.max_transactions = pause, max_transactions
        self.stop = threading.Event()
        self.committed = 0
        self.errors: list[BaseException] = []
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, args=(seed + i,), daemon=True)
                         for i in range(threads)]

    def __enter__(self) -> Writer:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self._threads:
            t.join(60)

    def wait(self, transactions: int, timeout: float = 120) -> None:
        """Block until at least ``transactions`` commits happened."""
        deadline = time.monotonic() + timeout
        while self.committed < transactions:
            if self.errors:
                raise self.errors[0]
            if time.monotonic() > deadline:
                raise KitError(f"the writer committed {self.committed} of {transactions} "
                               f"transactions in {timeout:.0f} s")
            time.sleep(0.01)

    def _statement(self, rng: random.Random) -> str:
        kit, key = self.kit, rng.randrange(self.key_space)
        roll = rng.random()
        if self.name == "kit_pairs":
            where = f"WHERE a = {literal(f'k{key % 41}')} AND b = {key}"
            if roll < 0.4:
                return kit.insert_sql(self.name, ("a", "b", "v"),
                                      (f"k{key % 41}", key, f"new {rng.randrange(10**6)}"))
            if roll < 0.7:
                return kit.sql(self.name, f"UPDATE {{t}} SET v = 'upd' {where}")
            if roll < 0.8 and Feature.KEY_UPDATES in kit.harness.features:
                return kit.sql(self.name, f"UPDATE {{t}} SET b = "
                                          f"{rng.randrange(self.key_space)} {where}")
            return kit.sql(self.name, f"DELETE FROM {{t}} {where}")
        if roll < 0.35:
            return kit.insert_sql(self.name, ("id", "v"), (key, f"new {rng.randrange(10**6)}"))
        if roll < 0.65:
            return kit.sql(self.name, f"UPDATE {{t}} SET v = 'upd {rng.randrange(10**6)}' "
                                      f"WHERE id = {key}")
        if roll < 0.75 and Feature.KEY_UPDATES in kit.harness.features:
            return kit.sql(self.name, f"UPDATE {{t}} SET id = {rng.randrange(self.key_space)} "
                                      f"WHERE id = {key}")
        return kit.sql(self.name, f"DELETE FROM {{t}} WHERE id = {key}")

    def _run(self, seed: int) -> None:
        rng = random.Random(seed)
        try:
            conn = self.kit.harness.admin_connect()
        except BaseException as exc:
            self.errors.append(exc)
            return
        try:
            while not self.stop.is_set():
                with self._lock:
                    if self.max_transactions is not None and \
                            self.committed >= self.max_transactions:
                        return
                cursor = conn.cursor()
                try:
                    for _ in range(rng.randint(1, 3)):
                        cursor.execute(self._statement(rng))
                    conn.commit()
                    with self._lock:
                        self.committed += 1
                except Exception:  # a duplicate key or a deadlock: this transaction is void
                    conn.rollback()
                time.sleep(rng.random() * self.pause)
        finally:
            conn.close()


def apply(mirror: dict[Key, Row], events: Sequence[ChangeEvent]) -> None:
    """Apply change events to an in-memory mirror of one table."""
    for e in events:
        if e.old_key is not None:
            mirror.pop(e.old_key, None)
        if e.op == "d":
            mirror.pop(e.key, None)
        else:
            assert e.after is not None
            mirror[e.key] = tuple(e.after)


def as_dict(table: TableSchema, rows: Sequence[Row]) -> dict[Key, Row]:
    return {table.key_of(r): tuple(r) for r in rows}
