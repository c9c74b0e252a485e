"""Split planning: arithmetic cuts for dense integer keys, index seeks for everything else,
lazily, on the real SQLite reference dialect."""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Callable
from pathlib import Path
from statistics import median

import pytest

from sdk import ConfigurationError, ConnectionConfig, Dialect, MissingKeyError, TableSchema
from sdk.algorithm import SplitAssigner, SyncOptions, choose_key
from sdk.algorithm.assigner import TablePlan
from sdk.dialect.types import SnapshotSplit


def make_table(tmp_path: Path, ddl: str, rows: list[tuple[object, ...]],
               analyze: bool = False) -> str:
    """A SQLite file holding table ``t``; ``analyze`` runs ``ANALYZE``, whose statistic is
    then the dialect's row estimate (without it, a count up to ``COUNT_LIMIT`` rows)."""
    path = tmp_path / "split.db"
    with sqlite3.connect(path) as conn:
        conn.execute(ddl)
        marks = ", ".join("?" * len(rows[0])) if rows else ""
        if rows:
            conn.executemany(f"INSERT INTO t VALUES ({marks})", rows)
        if analyze:
            conn.execute("ANALYZE")
    return f"sqlite:///{path}"


def plan_all(dialect: Dialect, url: str, options: SyncOptions,
             during: Callable[[sqlite3.Connection, int], None] | None = None
             ) -> tuple[list[SnapshotSplit], list[int], TablePlan, TableSchema]:
    """Hand out every split; return them with the row count each holds when read."""
    conn = dialect.connect(ConnectionConfig.from_url(url))
    schema = choose_key(dialect.describe_table(conn, dialect.list_tables(conn)[0]), options)
    assigner = SplitAssigner(dialect, options)
    plan = first = assigner.plan(conn, schema)
    splits, sizes = [], []
    while (nxt := assigner.next_split(conn, schema, plan)) is not None:
        split, plan = nxt
        splits.append(split)
        sizes.append(sum(len(b) for b in dialect.read_range(conn, schema, split, 10_000)))
        if during:
            during(conn, len(splits))
    conn.close()
    return splits, sizes, first, schema


@pytest.mark.slow
def test_skewed_million_keys_get_even_splits(sqlite_dialect: Dialect, tmp_path: Path) -> None:
    rng = random.Random(7)
    dense = rng.sample(range(0, 1_000_000), 900_000)  # 90% of keys in 1% of the range
    sparse = rng.sample(range(1_000_000, 100_000_000), 100_000)
    url = make_table(tmp_path, "CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER)",
                     [(k, 0) for k in dense + sparse], analyze=True)
    splits, sizes, plan, _ = plan_all(sqlite_dialect, url, SyncOptions())
    assert plan.approx_rows == 1_000_000  # ANALYZE's statistic
    assert plan.next_end is None  # skew detected: index seeks, not arithmetic
    assert sum(sizes) == 1_000_000
    assert max(sizes) <= 1.5 * median(sizes)
    assert len(splits) == -(-1_000_000 // SyncOptions().split_size)


def test_dense_integer_key_is_cut_arithmetically(sqlite_dialect: Dialect,
                                                 tmp_path: Path) -> None:
    url = make_table(tmp_path, "CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER)",
                     [(k, 0) for k in range(1, 10_001) if k % 10])  # 90% dense
    splits, sizes, plan, _ = plan_all(sqlite_dialect, url, SyncOptions(split_size=1000))
    assert plan.approx_rows == 9000  # counted: fewer rows than the count limit
    assert plan.step == 1111 and plan.next_end is not None
    assert sum(sizes) == 9000 and max(sizes) <= 1000
    assert splits[0].start is None and splits[-1].end is None


@pytest.mark.parametrize("analyze", [False, True])
def test_a_table_larger_than_the_count_limit(sqlite_dialect: Dialect, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch,
                                            analyze: bool) -> None:
    """Not counted past the limit, a dense table is estimated at the limit (a lower bound),
    so it is cut by index seeks, into exact splits still; once ANALYZE measured it, its
    statistic is the estimate and the cut is arithmetic again."""
    import sdk_sqlite

    monkeypatch.setattr(sdk_sqlite, "COUNT_LIMIT", 2000)
    url = make_table(tmp_path, "CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER)",
                     [(k, 0) for k in range(1, 10_001) if k % 10], analyze=analyze)
    splits, sizes, plan, _ = plan_all(sqlite_dialect, url, SyncOptions(split_size=1000))
    assert plan.approx_rows == (9000 if analyze else 2000)
    assert (plan.next_end is not None) is analyze
    assert sum(sizes) == 9000 and max(sizes) <= 1000
    if not analyze:  # index seeks: every split but the last holds exactly split_size rows
        assert sizes[:-1] == [1000] * (len(sizes) - 1) and len(splits) == 9
    assert splits[0].start is None and splits[-1].end is None


def test_growing_table_gets_more_splits_not_a_giant_tail(sqlite_dialect: Dialect,
                                                         tmp_path: Path) -> None:
    url = make_table(tmp_path, "CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER)",
                     [(k, 0) for k in range(1, 5001)])

    def append(conn: sqlite3.Connection, n: int) -> None:  # 500 new keys after 20 splits
        if n <= 20:
            conn.executemany("INSERT INTO t VALUES (?, 0)",
                             [(5000 + n * 500 + i,) for i in range(1, 501)])

    splits, sizes, plan, _ = plan_all(sqlite_dialect, url, SyncOptions(split_size=500), append)
    assert plan.step == 500
    assert sum(sizes) == 15_000
    assert max(sizes) <= 500
    assert len(splits) == 30


@pytest.mark.parametrize("size", [1, 2, 3, 50])
def test_string_and_compound_keys(sqlite_dialect: Dialect, tmp_path: Path, size: int) -> None:
    rows = [(a, b, "x") for a in ("", "A", "a", "ab", "é", "😀") for b in (-2, 0, 5)]
    url = make_table(tmp_path, "CREATE TABLE t (a TEXT, b INTEGER, v TEXT, "
                     "PRIMARY KEY (a, b))", rows)
    splits, sizes, _, schema = plan_all(sqlite_dialect, url, SyncOptions(split_size=size))
    assert schema.key == ("a", "b")
    assert sum(sizes) == len(rows)
    assert all(s == size for s in sizes[:-1]) and 0 < sizes[-1] <= size
    assert splits[0].start is None


@pytest.mark.parametrize("rows", [[], [(1, 0)]])
def test_empty_and_one_row_tables_get_one_open_split(sqlite_dialect: Dialect, tmp_path: Path,
                                                     rows: list[tuple[int, int]]) -> None:
    url = make_table(tmp_path, "CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER)", rows)
    splits, sizes, _, _ = plan_all(sqlite_dialect, url, SyncOptions())
    assert [(s.start, s.end) for s in splits] == [(None, None)]
    assert sizes == [len(rows)]


def test_table_without_key_is_refused_with_the_fix(sqlite_dialect: Dialect,
                                                   tmp_path: Path) -> None:
    url = make_table(tmp_path, "CREATE TABLE t (code TEXT NOT NULL UNIQUE, v INTEGER)", [])
    conn = sqlite_dialect.connect(ConnectionConfig.from_url(url))
    schema = sqlite_dialect.describe_table(conn, sqlite_dialect.list_tables(conn)[0])
    with pytest.raises(MissingKeyError, match=r"chunk-key.column=main.t:code"):
        choose_key(schema, SyncOptions())
    chosen = choose_key(schema, SyncOptions.from_strings({"chunk-key.column": "main.t:code"}))
    assert chosen.key == ("code",)
    with pytest.raises(ConfigurationError, match="not its primary key"):
        choose_key(schema, SyncOptions.from_strings({"chunk-key.column": "t:v"}))
    conn.close()
