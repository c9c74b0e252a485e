"""SQLite sources the engine tests sync from: a table of rows, a chained read of it into a
SQLite target, and random changes to it."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path
from typing import Any


def make_source(tmp_path: Path, rows: int = 2000) -> str:
    path = tmp_path / "src.db"
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, price REAL, "
                     "data BLOB)")
        conn.executemany("INSERT INTO items VALUES (?, ?, ?, ?)",
                         [(i, f"item {i} 😀", i / 7, bytes([i % 256])) for i in range(rows)])
        conn.execute("CREATE TABLE pairs (a TEXT, b INTEGER, v TEXT, PRIMARY KEY (a, b))")
        conn.executemany("INSERT INTO pairs VALUES (?, ?, ?)",
                         [(a, b, "x") for a in "abc" for b in range(30)])
    return f"sqlite:///{path}"


def chained_spec(tmp_path: Path, rows: int, **options: str) -> tuple[Any, str]:
    """The resolved spec of a chained read of :func:`make_source`'s ``items`` into a SQLite
    target (its tables made), and the target's URL."""
    from sdk.job.spec import resolve

    target_url = f"sqlite:///{tmp_path}/target.db"
    spec = resolve({"url": make_source(tmp_path, rows=rows), "tables": "items",
                    "state.dir": str(tmp_path / "state"), "target": target_url, **options})
    assert spec.target is not None
    spec.target.create_tables(spec.tables)
    return spec, target_url


def random_change(conn: sqlite3.Connection, rng: random.Random, keys: int) -> None:
    """One committed insert, update, key move or delete on the source of make_source."""
    key = rng.randrange(keys)
    with conn:
        roll = rng.random()
        if roll < 0.4:
            conn.execute("INSERT OR REPLACE INTO items VALUES (?, 'w', ?, x'01')",
                         (key, rng.random()))
        elif roll < 0.6:
            conn.execute("UPDATE OR IGNORE items SET id = ? WHERE id = ?",
                         (rng.randrange(keys), key))
        elif roll < 0.8:
            conn.execute("DELETE FROM items WHERE id = ?", (key,))
        else:
            conn.execute("INSERT OR REPLACE INTO pairs VALUES (?, ?, ?)",
                         (rng.choice("abcd"), rng.randrange(40), str(rng.random())))
