"""Tables of the test servers that a writer keeps changing while a sync runs: made with
``rows`` rows, changed by ``write(i)`` (an update, an insert, a delete and a key moved), and
dropped at the end with what a PostgreSQL sync of them left (its slot and publication)."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from sdk import TableId

Written = tuple[TableId, Callable[[int], None], Callable[..., None]]
"""The table, its ``write(i)``, and ``run(sql, *args)`` on its server."""


@contextlib.contextmanager
def mysql_table(mysql_admin: Any, rows: int) -> Iterator[Written]:
    name = f"wr_{uuid.uuid4().hex[:10]}"

    def run(sql: str, *args: Any) -> None:
        with mysql_admin.cursor() as cur:
            cur.execute(sql, args or None)
    run(f"CREATE TABLE `{name}` (id INT PRIMARY KEY, v VARCHAR(30), amount DECIMAL(12,2), "
        "at DATETIME(6))")
    run(f"INSERT INTO `{name}` SELECT seq, CONCAT('v', seq), seq / 8, "
        f"'2024-01-01' + INTERVAL seq SECOND FROM seq_1_to_{rows}")

    def write(i: int) -> None:
        run(f"UPDATE `{name}` SET v = %s WHERE id = %s", f"w{i}", i * 7 % rows)
        run(f"REPLACE INTO `{name}` VALUES (%s, 'new', 1.5, NOW(6))", rows + i)
        run(f"DELETE FROM `{name}` WHERE id = %s", i * 13 % rows)
        run(f"UPDATE IGNORE `{name}` SET id = id + 1000000 WHERE id = %s", i * 17 % rows)
    try:
        yield TableId("sdk_test", name), write, run
    finally:
        run(f"DROP TABLE IF EXISTS `{name}`")


@contextlib.contextmanager
def postgres_table(postgres_admin: Any, rows: int, slot: str, publication: str
                   ) -> Iterator[Written]:
    """A table in ``public`` owned by ``sdk_cdc``; ``slot`` and ``publication``: the names the
    sync's URL gives, dropped at the end."""
    name = f"wr_{uuid.uuid4().hex[:10]}"

    def run(sql: str, *args: Any) -> None:
        postgres_admin.execute(sql, args or None)
    run(f'CREATE TABLE "{name}" (id int PRIMARY KEY, v varchar(30), amount numeric(12,2), '
        "at timestamptz)")
    run(f"INSERT INTO \"{name}\" SELECT g, 'v' || g, g / 8.0, now() "
        f"FROM generate_series(1, {rows}) g")
    run(f'ALTER TABLE "{name}" OWNER TO sdk_cdc')

    def write(i: int) -> None:
        run(f'UPDATE "{name}" SET v = %s WHERE id = %s', f"w{i}", i * 7 % rows)
        run(f"INSERT INTO \"{name}\" VALUES (%s, 'new', 1.5, now()) ON CONFLICT (id) DO "
            "UPDATE SET v = 'again'", rows + i)
        run(f'DELETE FROM "{name}" WHERE id = %s', i * 13 % rows)
        run(f'UPDATE "{name}" SET id = id + 1000000 WHERE id = %s AND NOT EXISTS (SELECT 1 '
            f'FROM "{name}" WHERE id = %s)', i * 17 % rows, i * 17 % rows + 1000000)
    try:
        yield TableId("public", name), write, run
    finally:
        run("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE "
            "slot_name = %s", slot)
        run(f'DROP TABLE IF EXISTS "{name}"')
        run(f"DROP PUBLICATION IF EXISTS {publication}")


class Writer:
    """``write(1)``, ``write(2)``... on a thread, ``pause`` seconds apart, until stopped."""

    def __init__(self, write: Callable[[int], None], pause: float) -> None:
        self._write, self._pause = write, pause
        self.started = 0
        """The writes begun so far."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)
        self._thread.start()

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            i += 1
            self.started = i
            self._write(i)
            time.sleep(self._pause)

    def stop(self) -> None:
        """Stop, once the write under way is done (again: nothing)."""
        self._stop.set()
        self._thread.join()


def removed_keys(rows: int, writes: int) -> set[int]:
    """The keys of a :func:`mysql_table` or :func:`postgres_table` of ``rows`` rows that its
    first ``writes`` writes may have deleted or moved: every other key of its first rows is
    there all along, so a snapshot delivers it whenever it reads it."""
    return {i * 13 % rows for i in range(1, writes + 1)} | \
        {i * 17 % rows for i in range(1, writes + 1)}
