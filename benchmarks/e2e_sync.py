"""End to end: ``sdk sync`` against the plain ways of copying the same table, in one run
(issue #18's acceptance figures).

    python benchmarks/e2e_sync.py [--rows 1000000] [--changes 40000] [--log-rows 100000]
        [--per-transaction 1] [--source mysql|postgres|both] [--target postgres|mysql]
        [--skip-log] [--skip-snapshot] [--repeat 1] [--sdk-option KEY=VALUE ...] [--skip-jdbc]
        [--sdk-env KEY=VALUE ...] [--compare-env KEY=VALUE ...]

Needs the servers of scripts/services.sh (SDK_TEST_MYSQL_URL / SDK_TEST_POSTGRES_URL and their
``..._ADMIN_URL``, defaulting to the local ones), the ``mariadb`` and ``psql`` clients and the
``sdk`` command of this environment, and for the Spark JDBC copy Debian's JDBC drivers
(``/usr/share/java/mariadb-java-client.jar``, ``postgresql.jar``). Every table, schema,
publication, slot and checkpoint it makes is named after the process id and removed at the end.

Snapshot case: one deterministic table (``id BIGINT PRIMARY KEY, customer_id INT, amount
NUMERIC(12,2), status VARCHAR(16), note VARCHAR(200), created_at TIMESTAMP(6)``; NULLs in
customer_id and note, no tabs or newlines), the same rows in MariaDB and in PostgreSQL, copied
into a fresh PostgreSQL table by

- hand-written Python: the source driver's unbuffered cursor (pymysql ``SSCursor`` / a psycopg
  server-side cursor, 10,000 rows a fetch) into psycopg ``COPY ... FROM STDIN`` with
  ``write_row``, into an empty table with the source's DDL (primary key included);
- the C tools: ``mariadb --quick -B -N -e "SELECT ..." | psql -c "\\copy t FROM STDIN WITH
  (NULL 'NULL')"`` (batch mode prints NULL as ``NULL`` and escapes backslash, tab and newline
  as COPY's text format reads them; the data holds no string ``NULL``), and
  ``psql -c "\\copy (SELECT ...) TO STDOUT" | psql -c "\\copy t FROM STDIN"``;
- with ``--target mysql``, into a fresh MariaDB database instead (``MYSQL_ADMIN``'s server):
  the hand-written copy writes with pymysql's ``executemany`` of the one-row INSERT (which it
  sends as multi-row statements of ~1 MB), the C tools load with ``mariadb --local-infile``
  ``LOAD DATA LOCAL INFILE '/dev/stdin'`` (NULLs by ``NULLIF``), the checksum is MariaDB's;
- Spark JDBC, what a Spark user writes instead of sdk (``_spark_jdbc.py``, run as its own
  Python process and timed as a whole command like sdk's: Python, the JVM and the Spark session
  start included): a ``local[*]`` SparkSession (``spark.jars`` = the drivers of source and
  target, ``spark.ui.enabled=false``, JVM and session time zone UTC), ``spark.read.jdbc``
  partitioned on the key (``column="id"``, lowerBound/upperBound = the table's min/max id,
  found beforehand and passed in; ``numPartitions`` = 2 x cores; ``fetchsize`` 10000) and
  ``df.write.jdbc`` (mode "append", ``batchsize`` 10000) into a fresh table made beforehand
  with the hand-written copy's DDL (primary key included), so that Spark's type mapping
  decides nothing of the target. PostgreSQL is read and written through pgjdbc
  (``reWriteBatchedInserts=true`` on the target; Spark's PostgresDialect turns autocommit off
  when a fetch size is set, so the reader streams through a cursor), MariaDB through
  ``jdbc:mariadb://`` and MariaDB Connector/J 2.7, which streams a result set in chunks of the
  fetch size (no ``useCursorFetch``, a MySQL Connector/J option) and writes with
  ``rewriteBatchedStatements=true``. Spark has no dialect for ``jdbc:mariadb`` URLs (its
  MySQLDialect takes ``jdbc:mysql`` only), and its generic one double-quotes column names,
  which MariaDB reads as string literals: the URL's ``sessionVariables`` add ``ANSI_QUOTES``
  to the session's ``sql_mode`` (and set ``time_zone='+00:00'``). ``--skip-jdbc`` leaves it
  out; without the jars it is skipped with a note;
- ``sdk sync --until snapshot`` run as a user runs it (a subprocess, fresh ``--checkpoint``,
  fresh ``--target-schema``, default options), timed twice: the whole command, and the sync's
  own run from the first split to the snapshot done. The latter comes from the state dir's
  ``progress.json``, polled every 50 ms while the command runs: from its ``started_at`` (set by
  the stream's first report, written once it has planned the table's splits, just before it
  hands out the first ones: after the JVM, the Spark session and the query have started) to
  the ``updated_at`` of the first report whose phase is past ``snapshot`` (written when the
  batch holding the last split has been applied and committed). Startup is the time from
  launching the command to ``started_at``. Each sdk run also shows the peak resident memory
  of the command's process tree, sampled every 0.25 s: its Python processes together (the
  driver and Spark's Python workers) and its JVM (run with ``--rows 5000000`` beside the
  default to see that memory stays O(split) as the table grows).

Log case: ``--changes`` one-row UPDATEs, committed ``--per-transaction`` at a time (one each
by default), on a ``--log-rows`` table after a
``sdk sync --until snapshot`` of it, then ``sdk sync --until caught-up`` resuming from that
checkpoint: the whole command, the sync's own time as its last line reports it ("applied N
rows in X s": from after the Spark session start to the query's stop), and the time from the
first log batch planned (its progress.json report, after the JVM, the session and the query
started) to the command's exit. Beside it,
the raw decoder over the same range: python-mysql-replication ``BinLogStreamReader`` from the
binlog position before the updates to the one after (row events of the table, typed by the
library), and for PostgreSQL ``pg_logical_slot_peek_binary_changes`` on a slot made before the
updates, with the pgoutput messages decoded here and each new tuple typed with psycopg's
loaders; and the source dialect's own ``stream_log`` over the same range (its offsets taken
before and after the updates, PostgreSQL through the raw reader's slot), the decode rate the
issue holds the log phase to (ratio sdk/stream_log).

Each snapshot copy's line is followed by its CPU seconds (of its fastest run): its own
processes (the benchmark itself for the hand-written copy; else the command's process tree,
orphans included: this process is their subreaper), the source's server and the target's (the
process listening on each URL's port, with its children), and how many cores they kept busy
together over the wall clock: where each second goes, and how near the copy is to the
machine's cores.

Every rate is printed, with the ratios sdk/hand-written, sdk/C-tools, sdk/Spark-JDBC (both whole
commands) and sdk/raw (rate over rate: below 1.0 the sdk is slower). Each target is checked
against its source: row count and an order-independent checksum (the sum of a 60-bit md5 prefix
of each row's canonical text, computed by each server in SQL). ``--repeat K`` runs each case K
times in turn and shows the best with the spread (worst - best).

``--sdk-env KEY=VALUE`` (repeatable) sets an environment variable for the sdk runs only.
``--compare-env KEY=VALUE`` (repeatable) runs sdk a second time in each repeat with these
variables too (over ``--sdk-env``'s; in the log case from a snapshot of its own, made before
the updates), shown on its own lines ("sdk sync ... [KEY=VALUE]") with its own ratios and
check, so that two settings of sdk are compared in one run (``--compare-env
SDK_HEAD_START=off``). The two take turns going first (the first to read the log after the
updates meets it cold). Code against code: ``--sdk-env PYTHONPATH=A:A/plugins
--compare-env PYTHONPATH=B:B/plugins`` over two ``git archive`` copies, so both load alike.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit

from _cpu import Cpu, Meter, become_subreaper, reap, tree
from _servers import MYSQL, MYSQL_ADMIN, PG, PG_ADMIN, sdk_command

TAG = str(os.getpid())
T = TypeVar("T")
COLUMNS = "id, customer_id, amount, status, note, created_at"
FETCH = 10_000

# the same rows from both servers: NULL customer_id every 13th row, NULL note every 7th
MYSQL_DDL = ("(id BIGINT PRIMARY KEY, customer_id INT, amount DECIMAL(12,2), "
             "status VARCHAR(16), note VARCHAR(200), created_at TIMESTAMP(6) NULL)")
MYSQL_ROWS = ("SELECT seq, IF(seq % 13 = 0, NULL, seq * 7919 % 100000), "
              "(seq * 37 % 1000000) / 100, ELT(seq % 4 + 1, 'new', 'paid', 'shipped', "
              "'cancelled'), IF(seq % 7 = 0, NULL, CONCAT('order ', seq, ' of customer ', "
              "seq * 7919 % 100000, ' ', REPEAT('abcdefghij', seq % 10))), "
              "TIMESTAMP'2024-01-01 00:00:00' + INTERVAL (seq * 1000003) MICROSECOND "
              "FROM seq_{first}_to_{last}")
PG_DDL = ("(id BIGINT PRIMARY KEY, customer_id INT, amount NUMERIC(12,2), "
          "status VARCHAR(16), note VARCHAR(200), created_at TIMESTAMP(6))")
PG_ROWS = ("SELECT g, CASE WHEN g % 13 = 0 THEN NULL ELSE g * 7919 % 100000 END, "
           "(g * 37 % 1000000) / 100.0, (ARRAY['new', 'paid', 'shipped', 'cancelled'])"
           "[g % 4 + 1], CASE WHEN g % 7 = 0 THEN NULL ELSE 'order ' || g || ' of customer ' "
           "|| g * 7919 % 100000 || ' ' || repeat('abcdefghij', (g % 10)::int) END, "
           "TIMESTAMP '2024-01-01' + g * 1000003 * INTERVAL '1 microsecond' "
           "FROM generate_series({first}::bigint, {last}) g")
# a row's canonical text on both servers (sessions in UTC), hashed and summed
PG_CHECKSUM = ("SELECT count(*), coalesce(sum(('x' || left(md5(concat_ws('|', id, "
               "coalesce(customer_id::text, '~'), amount::numeric(12,2), status, "
               "coalesce(note, '~'), to_char(created_at, 'YYYY-MM-DD HH24:MI:SS.US'))), 15))"
               "::bit(60)::bigint), 0) FROM {table}")
MYSQL_CHECKSUM = ("SELECT COUNT(*), COALESCE(SUM(CAST(CONV(LEFT(MD5(CONCAT_WS('|', id, "
                  "IFNULL(customer_id, '~'), amount, status, IFNULL(note, '~'), "
                  "DATE_FORMAT(created_at, '%Y-%m-%d %H:%i:%s.%f'))), 15), 16, 10) AS "
                  "UNSIGNED)), 0) FROM {table}")
# Debian's JDBC drivers (libmariadb-java, libpostgresql-jdbc-java) for the Spark JDBC copy
JDBC_JARS = {"mysql": Path("/usr/share/java/mariadb-java-client.jar"),
             "postgres": Path("/usr/share/java/postgresql.jar")}
# Spark has no dialect for jdbc:mariadb: URLs (its MySQLDialect takes jdbc:mysql only), so the
# generic one double-quotes every column ("id"), which MariaDB reads as a string literal unless
# ANSI_QUOTES is on (added to the session's modes, strict mode kept); the session in UTC as the
# checksums' (the JVM runs in UTC too). Connector/J's sessionVariables, set at connect.
MARIADB_SESSION = "sql_mode=concat(@@sql_mode,',ANSI_QUOTES'),time_zone='+00:00'"


def parts(url: str) -> dict[str, Any]:
    u = urlsplit(url)
    return {"host": u.hostname or "127.0.0.1", "port": u.port,
            "user": unquote(u.username or ""), "password": unquote(u.password or ""),
            "database": u.path.lstrip("/")}


def jdbc(url: str, scheme: str, table: str, **params: str) -> dict[str, Any]:
    """The JDBC URL, table and connection properties of ``url``'s server for Spark."""
    p = parts(url)
    port = p["port"] or (3306 if scheme == "mariadb" else 5432)
    address = f"jdbc:{scheme}://{p['host']}:{port}/{p['database']}"
    driver = "org.mariadb.jdbc.Driver" if scheme == "mariadb" else "org.postgresql.Driver"
    return {"url": with_query(address, **params) if params else address, "table": table,
            "properties": {"user": p["user"], "password": p["password"], "driver": driver}}


def with_query(url: str, **params: str) -> str:
    return url + ("&" if "?" in url else "?") + "&".join(f"{k}={v}" for k, v in params.items())


def mysql_connect(url: str, unbuffered: bool = False, multi: bool = False) -> Any:
    import pymysql
    import pymysql.constants.CLIENT
    import pymysql.cursors

    p = parts(url)
    return pymysql.connect(host=p["host"], port=p["port"] or 3306, user=p["user"],
                           password=p["password"], database=p["database"], autocommit=True,
                           init_command="SET time_zone = '+00:00'",
                           client_flag=pymysql.constants.CLIENT.MULTI_STATEMENTS if multi else 0,
                           cursorclass=pymysql.cursors.SSCursor if unbuffered
                           else pymysql.cursors.Cursor)


def pg_connect(url: str) -> Any:
    import psycopg

    conn = psycopg.connect(url, autocommit=True)
    conn.execute("SET TimeZone = 'UTC'")
    return conn


def copy_rows(cursor: Any, dest: Any, target: str) -> int:
    """The hand-written copy's loop: fetch from the source ``cursor``, ``COPY ... FROM STDIN``
    with ``write_row`` into ``target`` on ``dest``, in one transaction; returns the rows."""
    n = 0
    with dest.transaction(), dest.cursor() as out, \
            out.copy(f"COPY {target} ({COLUMNS}) FROM STDIN") as copy:
        while batch := cursor.fetchmany(FETCH):
            for row in batch:
                copy.write_row(row)
            n += len(batch)
    return n


def mysql_exec(url: str, sql: str) -> list[tuple[Any, ...]]:
    conn = mysql_connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            return list(cur.fetchall())
    finally:
        conn.close()


def pg_exec(url: str, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    with pg_connect(url) as conn:
        cur = conn.execute(sql, params)
        return list(cur.fetchall()) if cur.description else []


def rate(count: int, seconds: list[float]) -> float:
    return count / max(min(seconds), 1e-9)


def line(label: str, seconds: list[float], count: int, unit: str) -> None:
    spread = f" (spread {max(seconds) - min(seconds):.2f} s over {len(seconds)} runs)" \
        if len(seconds) > 1 else ""
    print(f"  {label:<66} {min(seconds):8.2f} s {rate(count, seconds):>10,.0f} {unit}{spread}",
          flush=True)


def meter(source: Source, sink: Sink, in_process: bool = False) -> Meter:
    """A CPU meter over the source's and the target's servers (by their URLs' ports)."""
    return Meter(parts(source.url)["port"] or 0, parts(sink.url)["port"] or 0, in_process)


def cpu_line(runs: list[tuple[float, Cpu | None]], same_server: bool) -> None:
    """The CPU seconds of the fastest of ``runs`` (seconds, its CPU)."""
    best = min(runs, key=lambda run: run[0], default=(0.0, None))[1]
    if best is not None:
        print(f"    ({best.describe(same_server)})")


@dataclass
class Cleanup:
    """What the run made, removed at the end whatever happened."""

    mysql_tables: list[str] = field(default_factory=list)
    pg_tables: list[str] = field(default_factory=list)
    schemas: list[str] = field(default_factory=list)
    slots: list[str] = field(default_factory=list)
    publications: list[str] = field(default_factory=list)
    dirs: list[Path] = field(default_factory=list)
    mysql_databases: list[str] = field(default_factory=list)

    def run(self) -> None:
        for database in self.mysql_databases:
            with suppress(Exception):
                mysql_exec(MYSQL_ADMIN, f"DROP DATABASE IF EXISTS {database}")
        for table in self.mysql_tables:
            with suppress(Exception):
                mysql_exec(MYSQL_ADMIN, f"DROP TABLE IF EXISTS {table}")
        for slot in self.slots:
            with suppress(Exception):
                pg_exec(PG_ADMIN, "SELECT pg_drop_replication_slot(slot_name) FROM "
                        "pg_replication_slots WHERE slot_name = %s", (slot,))
        for pub in self.publications:
            with suppress(Exception):
                pg_exec(PG_ADMIN, f"DROP PUBLICATION IF EXISTS {pub}")
        for schema in self.schemas:
            with suppress(Exception):
                pg_exec(PG_ADMIN, f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        for table in self.pg_tables:
            with suppress(Exception):
                pg_exec(PG_ADMIN, f"DROP TABLE IF EXISTS {table}")
        for path in self.dirs:
            shutil.rmtree(path, ignore_errors=True)


MYSQL_TARGET_DDL = MYSQL_DDL.replace("TIMESTAMP(6) NULL", "DATETIME(6)")


class Sink:
    """The target server: a fresh schema (a database on MySQL) per copy, the hand-written
    loop's writing half, the C tools' loading half, and the checksum of a copy."""

    label = ""
    url = ""

    def __init__(self, cleanup: Cleanup) -> None:
        self.cleanup = cleanup

    def fresh(self, name: str, table: str | None = None) -> str:
        raise NotImplementedError

    def drop(self, name: str) -> None:
        raise NotImplementedError

    def checksum(self, table: str) -> tuple[int, int]:
        raise NotImplementedError

    def write(self, cursor: Any, target: str) -> int:
        """Fetch from the source ``cursor`` and write ``target``, in one transaction."""
        raise NotImplementedError

    def load(self, target: str, null: str) -> str:
        """The command that loads text rows from its stdin (tab-separated, backslash escapes,
        NULL written as ``null``) into ``target``."""
        raise NotImplementedError

    def jdbc(self, target: str) -> dict[str, Any]:
        """Where the Spark JDBC copy writes ``target``: URL, table, connection properties."""
        raise NotImplementedError


class PostgresSink(Sink):
    label, url = "PostgreSQL", PG

    def fresh(self, name: str, table: str | None = None) -> str:
        return fresh_schema(self.cleanup, name, table)

    def drop(self, name: str) -> None:
        drop_schema(name)

    def checksum(self, table: str) -> tuple[int, int]:
        return target_checksum(table)

    def write(self, cursor: Any, target: str) -> int:
        with pg_connect(PG) as dest:
            return copy_rows(cursor, dest, target)

    def load(self, target: str, null: str) -> str:
        load = "\\copy " + target + " FROM STDIN" + \
            (f" WITH (NULL '{null}')" if null != "\\N" else "")
        return f"psql {shlex.quote(PG)} -X -v ON_ERROR_STOP=1 -c {shlex.quote(load)}"

    def jdbc(self, target: str) -> dict[str, Any]:
        # pgjdbc sends each batch of one-row INSERTs as multi-row ones
        return jdbc(PG, "postgresql", target, reWriteBatchedInserts="true")


class MySQLSink(Sink):
    label, url = "MariaDB", MYSQL_ADMIN

    def fresh(self, name: str, table: str | None = None) -> str:
        self.cleanup.mysql_databases.append(name)
        self.drop(name)
        mysql_exec(MYSQL_ADMIN, f"CREATE DATABASE {name}")
        if table is not None:
            mysql_exec(MYSQL_ADMIN, f"CREATE TABLE {name}.{table} {MYSQL_TARGET_DDL}")
        return name

    def drop(self, name: str) -> None:
        mysql_exec(MYSQL_ADMIN, f"DROP DATABASE IF EXISTS {name}")

    def checksum(self, table: str) -> tuple[int, int]:
        (count, total), = mysql_exec(MYSQL_ADMIN, MYSQL_CHECKSUM.format(table=table))
        return int(count), int(total)

    def write(self, cursor: Any, target: str) -> int:
        """pymysql's ``executemany`` of the one-row INSERT, which it sends as multi-row
        statements of up to ~1 MB, each value escaped by pymysql."""
        dest = mysql_connect(MYSQL_ADMIN)
        n = 0
        try:
            dest.begin()
            with dest.cursor() as out:
                insert = f"INSERT INTO {target} ({COLUMNS}) VALUES ({', '.join(['%s'] * 6)})"
                while batch := cursor.fetchmany(FETCH):
                    out.executemany(insert, batch)
                    n += len(batch)
            dest.commit()
        finally:
            dest.close()
        return n

    def load(self, target: str, null: str) -> str:
        p = parts(MYSQL_ADMIN)
        nulls = ", ".join(f"{c} = NULLIF(@{c}, {null!r})" for c in ("customer_id", "note"))
        load = (f"LOAD DATA LOCAL INFILE '/dev/stdin' INTO TABLE {target} (id, @customer_id, "
                f"amount, status, @note, created_at) SET {nulls}")
        return (f"MYSQL_PWD={shlex.quote(p['password'])} mariadb --local-infile=1 "
                f"-h {p['host']} -P {p['port'] or 3306} -u {shlex.quote(p['user'])} "
                f"-e {shlex.quote(load)}")

    def jdbc(self, target: str) -> dict[str, Any]:
        # Connector/J 2.7 sends each batch as multi-row INSERTs with rewriteBatchedStatements
        return jdbc(MYSQL_ADMIN, "mariadb", target, sessionVariables=MARIADB_SESSION,
                    rewriteBatchedStatements="true")


class Source:
    """One source server: how to make its table, read it by hand, pipe it with its client,
    checksum it, and name it to ``sdk sync``."""

    kind = ""
    label = ""
    url = ""

    def __init__(self, cleanup: Cleanup) -> None:
        self.cleanup = cleanup

    def create(self, table: str, rows: int) -> None:
        raise NotImplementedError

    def checksum(self, table: str) -> tuple[int, int]:
        raise NotImplementedError

    def hand(self, table: str, sink: Sink, target: str) -> int:
        raise NotImplementedError

    def pipe(self, table: str, sink: Sink, target: str) -> str:
        raise NotImplementedError

    def sdk_url(self, table: str, run: str) -> str:
        raise NotImplementedError

    def pattern(self, table: str) -> str:
        raise NotImplementedError

    def jdbc(self, table: str) -> dict[str, Any]:
        """Where the Spark JDBC copy reads ``table``: URL, table, connection properties."""
        raise NotImplementedError

    def key_range(self, table: str) -> tuple[int, int]:
        """The least and the greatest id, the Spark JDBC reader's partition bounds."""
        raise NotImplementedError

    # log case
    def position(self) -> tuple[str, int]:
        raise NotImplementedError

    def update(self, table: str, ids: list[int], per_transaction: int = 1) -> None:
        raise NotImplementedError

    def prepare_raw(self, table: str) -> None:
        raise NotImplementedError

    def raw(self, table: str, start: tuple[str, int], end: tuple[str, int]) -> tuple[int, int]:
        raise NotImplementedError


class MySQLSource(Source):
    kind, label, url = "mysql", "MariaDB", MYSQL

    def create(self, table: str, rows: int) -> None:
        self.cleanup.mysql_tables.append(table)
        mysql_exec(MYSQL_ADMIN, f"DROP TABLE IF EXISTS {table}")
        mysql_exec(MYSQL_ADMIN, f"CREATE TABLE {table} {MYSQL_DDL}")
        for first in range(1, rows + 1, 100_000):
            last = min(first + 99_999, rows)
            mysql_exec(MYSQL_ADMIN, f"INSERT INTO {table} (id, customer_id, amount, status, "
                       f"note, created_at) " + MYSQL_ROWS.format(first=first, last=last))
        mysql_exec(MYSQL_ADMIN, f"ANALYZE TABLE {table}")

    def checksum(self, table: str) -> tuple[int, int]:
        (count, total), = mysql_exec(MYSQL_ADMIN, MYSQL_CHECKSUM.format(table=table))
        return int(count), int(total)

    def hand(self, table: str, sink: Sink, target: str) -> int:
        source = mysql_connect(MYSQL, unbuffered=True)
        try:
            with source.cursor() as cur:
                cur.execute(f"SELECT {COLUMNS} FROM {table}")
                return sink.write(cur, target)
        finally:
            source.close()

    def pipe(self, table: str, sink: Sink, target: str) -> str:
        p = parts(MYSQL)
        select = f"SET time_zone = '+00:00'; SELECT {COLUMNS} FROM {table}"
        return (f"MYSQL_PWD={shlex.quote(p['password'])} mariadb --quick -B -N "
                f"-h {p['host']} -P {p['port'] or 3306} -u {shlex.quote(p['user'])} "
                f"{shlex.quote(p['database'])} -e {shlex.quote(select)} | "
                + sink.load(target, "NULL"))

    def sdk_url(self, table: str, run: str) -> str:
        return MYSQL

    def pattern(self, table: str) -> str:
        return f"{parts(MYSQL)['database']}.{table}"

    def jdbc(self, table: str) -> dict[str, Any]:
        # Connector/J 2.7 streams a result set in chunks of the statement's fetch size
        # (Spark sets it from "fetchsize"); MySQL Connector/J's useCursorFetch is not needed
        return jdbc(MYSQL, "mariadb", table, sessionVariables=MARIADB_SESSION)

    def key_range(self, table: str) -> tuple[int, int]:
        (low, high), = mysql_exec(MYSQL, f"SELECT MIN(id), MAX(id) FROM {table}")
        return int(low), int(high)

    # log case
    def position(self) -> tuple[str, int]:
        (file, pos, *_), = mysql_exec(MYSQL_ADMIN, "SHOW MASTER STATUS")
        return str(file), int(pos)

    def update(self, table: str, ids: list[int], per_transaction: int = 1) -> None:
        conn = mysql_connect(MYSQL_ADMIN, multi=True)
        step = max(500, per_transaction)
        try:
            with conn.cursor() as cur:
                for i in range(0, len(ids), step):  # one-row statements, 500 or more a trip
                    sql = [f"UPDATE {table} SET amount = amount + 1, status = 'updated' "
                           f"WHERE id = {k};" for k in ids[i:i + step]]
                    if per_transaction > 1:  # autocommit statements otherwise
                        sql = [part for j in range(0, len(sql), per_transaction) for part in
                               ("START TRANSACTION;", *sql[j:j + per_transaction], "COMMIT;")]
                    cur.execute("".join(sql))
                    while cur.nextset():
                        pass
        finally:
            conn.close()

    def prepare_raw(self, table: str) -> None:
        pass

    def raw(self, table: str, start: tuple[str, int], end: tuple[str, int]) -> tuple[int, int]:
        """Row changes of ``table`` and transactions seen by python-mysql-replication."""
        from pymysqlreplication import BinLogStreamReader
        from pymysqlreplication.event import XidEvent
        from pymysqlreplication.row_event import (
            DeleteRowsEvent,
            UpdateRowsEvent,
            WriteRowsEvent,
        )

        p = parts(MYSQL)
        reader = BinLogStreamReader(
            connection_settings={"host": p["host"], "port": p["port"] or 3306,
                                 "user": p["user"], "passwd": p["password"]},
            server_id=5000 + os.getpid() % 10_000, log_file=start[0], log_pos=start[1],
            resume_stream=True, blocking=False, only_schemas=[p["database"]],
            only_tables=[table],
            only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent, XidEvent])
        n = xids = 0
        try:
            for event in reader:
                if isinstance(event, XidEvent):
                    xids += 1
                else:
                    for row in event.rows:
                        n += len(row["after_values"]) > 0
                if (reader.log_file, reader.log_pos) >= end:
                    break
        finally:
            reader.close()
        return n, xids


class PostgresSource(Source):
    kind, label, url = "postgres", "PostgreSQL", PG

    def create(self, table: str, rows: int) -> None:
        self.rows = rows
        self.cleanup.pg_tables.append(table)
        pg_exec(PG_ADMIN, f"DROP TABLE IF EXISTS {table}")
        pg_exec(PG_ADMIN, f"CREATE TABLE {table} {PG_DDL}")
        # owned by the sync's role, so that the sync makes its publication itself
        pg_exec(PG_ADMIN, f"ALTER TABLE {table} OWNER TO {parts(PG)['user']}")
        for first in range(1, rows + 1, 500_000):
            last = min(first + 499_999, rows)
            pg_exec(PG_ADMIN, f"INSERT INTO {table} ({COLUMNS}) "
                    + PG_ROWS.format(first=first, last=last))
        pg_exec(PG_ADMIN, f"VACUUM (ANALYZE) {table}")  # hint bits set before any timed read

    def checksum(self, table: str) -> tuple[int, int]:
        (count, total), = pg_exec(PG_ADMIN, PG_CHECKSUM.format(table=table))
        return int(count), int(total)

    def hand(self, table: str, sink: Sink, target: str) -> int:
        with pg_connect(PG) as source, source.transaction(), \
                source.cursor(name="e2e_hand") as cur:
            cur.itersize = FETCH
            cur.execute(f"SELECT {COLUMNS} FROM {table}")
            return sink.write(cur, target)

    def pipe(self, table: str, sink: Sink, target: str) -> str:
        unload = "\\copy (SELECT " + COLUMNS + " FROM " + table + ") TO STDOUT"
        return (f"psql {shlex.quote(PG)} -X -q -v ON_ERROR_STOP=1 -c {shlex.quote(unload)} | "
                + sink.load(target, "\\N"))

    def sdk_url(self, table: str, run: str) -> str:
        slot, pub = f"e2e_{run}_{TAG}", f"e2e_pub_{table}"
        self.cleanup.slots.append(slot)
        if pub not in self.cleanup.publications:
            self.cleanup.publications.append(pub)
        return with_query(PG, slot=slot, publication=pub)

    def pattern(self, table: str) -> str:
        return f"public.{table}"

    def jdbc(self, table: str) -> dict[str, Any]:
        # Spark's PostgresDialect turns autocommit off when fetchsize is set: pgjdbc streams
        return jdbc(PG, "postgresql", f"public.{table}")

    def key_range(self, table: str) -> tuple[int, int]:
        (low, high), = pg_exec(PG, f"SELECT min(id), max(id) FROM {table}")
        return int(low), int(high)

    # log case
    def position(self) -> tuple[str, int]:
        """The WAL insert position, once flushed (the updates commit asynchronously, and
        decoding reads flushed WAL only)."""
        (lsn,), = pg_exec(PG_ADMIN, "SELECT pg_current_wal_insert_lsn()::text")
        while not pg_exec(PG_ADMIN, "SELECT pg_current_wal_flush_lsn() >= %s::pg_lsn",
                          (lsn,))[0][0]:
            time.sleep(0.05)
        return str(lsn), 0

    def update(self, table: str, ids: list[int], per_transaction: int = 1) -> None:
        with pg_connect(PG_ADMIN) as conn:
            conn.execute("SET synchronous_commit = off")  # still one commit each, not waited on
            # ids are k % rows + 1, k = 0 .. n-1 (as log_case makes them): a commit after
            # every per_transaction of them
            conn.execute(f"DO $$ BEGIN FOR k IN 0..{len(ids) - 1} LOOP UPDATE {table} SET "
                         f"amount = amount + 1, status = 'updated' WHERE id = k % {self.rows} "
                         f"+ 1; IF (k + 1) % {per_transaction} = 0 OR k = {len(ids) - 1} THEN "
                         "COMMIT; END IF; END LOOP; END $$")

    def prepare_raw(self, table: str) -> None:
        """A slot of the raw reader's own, made before the updates."""
        slot = f"e2e_raw_{TAG}"
        self.cleanup.slots.append(slot)
        pg_exec(PG_ADMIN, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                "WHERE slot_name = %s", (slot,))
        pg_exec(PG_ADMIN, "SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))

    def raw(self, table: str, start: tuple[str, int], end: tuple[str, int]) -> tuple[int, int]:
        """Row changes of ``table`` and transactions: a peek at the raw slot up to ``end``,
        every pgoutput message decoded, each new tuple typed with psycopg's text loaders."""
        from psycopg.pq import Format

        n = commits = 0
        relations: dict[int, list[int]] = {}
        loaders: dict[int, Any] = {}
        with pg_connect(PG_ADMIN) as conn, conn.transaction(), \
                conn.cursor(name="e2e_raw") as cur:
            cur.execute("SELECT data FROM pg_logical_slot_peek_binary_changes(%s, %s::pg_lsn, "
                        "NULL, 'proto_version', '1', 'publication_names', %s)",
                        (f"e2e_raw_{TAG}", end[0], f"e2e_pub_{table}"))
            while rows := cur.fetchmany(5000):
                for (data,) in rows:
                    kind, values = pgoutput(bytes(data), relations)
                    if kind == "C":
                        commits += 1
                    elif values is not None:
                        oids, raw = values
                        typed = []
                        for oid, value in zip(oids, raw, strict=True):
                            if oid not in loaders:
                                loaders[oid] = conn.adapters.get_loader(oid, Format.TEXT)(
                                    oid, conn)
                            typed.append(None if value is None else loaders[oid].load(value))
                        n += 1
        return n, commits


class DialectLog:
    """The source dialect's own ``stream_log`` over the updates' range, as a sync's log
    batch calls it (with the table's ``describe_table`` schema; PostgreSQL through the raw
    reader's slot, made before the updates): the decode rate the log phase is held to."""

    def __init__(self, url: str, pattern: str) -> None:
        from sdk import TableId
        from sdk.dialect.manager import default_manager

        self.dialect, config = default_manager().dialect_for_url(url)
        self.conn = self.dialect.connect(config)
        schema, _, name = pattern.rpartition(".")
        self.table = self.dialect.describe_table(self.conn, TableId(schema, name))
        self.start = self.dialect.current_offset(self.conn)
        self.end: Any = None

    def mark_end(self) -> None:
        """The end of the range: the source's position now (after the updates)."""
        self.end = self.dialect.current_offset(self.conn)

    def read(self) -> int:
        """The changes ``stream_log`` yields from the start to the end; closes the
        connection."""
        from sdk import ChangeEvent

        try:
            return sum(1 for item in self.dialect.stream_log(self.conn, [self.table],
                                                             self.start, self.end)
                       if isinstance(item, ChangeEvent))
        finally:
            self.conn.close()


def pgoutput(data: bytes, relations: dict[int, list[int]]
             ) -> tuple[str, tuple[list[int], list[bytes | None]] | None]:
    """The least pgoutput decoding a typed reader needs: a Relation's column types, and the
    new tuple of an Insert or Update (with the Relation's column types)."""
    kind = chr(data[0])
    if kind == "R":
        relid, = struct.unpack_from(">I", data, 1)
        pos = data.index(b"\0", 5) + 1  # namespace
        pos = data.index(b"\0", pos) + 2  # name, replica identity
        count, = struct.unpack_from(">h", data, pos)
        pos += 2
        oids = []
        for _ in range(count):
            pos = data.index(b"\0", pos + 1) + 1  # flags, name
            oid, = struct.unpack_from(">I", data, pos)
            oids.append(oid)
            pos += 8  # type oid, type modifier
        relations[relid] = oids
        return kind, None
    if kind not in ("I", "U"):
        return kind, None
    relid, = struct.unpack_from(">I", data, 1)
    pos = 5
    if kind == "U" and data[pos] in (0x4B, 0x4F):  # a key or old tuple first: skip it
        pos = skip_tuple(data, pos + 1)
    return kind, (relations[relid], tuple_values(data, pos + 1))


def skip_tuple(data: bytes, pos: int) -> int:
    count, = struct.unpack_from(">h", data, pos)
    pos += 2
    for _ in range(count):
        kind = data[pos]
        pos += 1
        if kind == 0x74:  # 't'
            length, = struct.unpack_from(">i", data, pos)
            pos += 4 + length
    return pos


def tuple_values(data: bytes, pos: int) -> list[bytes | None]:
    count, = struct.unpack_from(">h", data, pos)
    pos += 2
    values: list[bytes | None] = []
    for _ in range(count):
        kind = data[pos]
        pos += 1
        if kind == 0x74:
            length, = struct.unpack_from(">i", data, pos)
            values.append(data[pos + 4:pos + 4 + length])
            pos += 4 + length
        else:  # 'n' NULL ('u' unchanged TOAST: none in this table)
            values.append(None)
    return values


@dataclass
class SdkRun:
    seconds: float
    """The whole command."""
    own: float | None
    """First split to snapshot done (snapshot runs), from progress.json."""
    startup: float | None
    """Launch to the stream's first report."""
    reported: float | None
    """The seconds of the command's own last line ("applied N rows in X s")."""
    applied: int | None
    output: list[str]
    peak_python: int = 0
    """Peak resident memory (bytes) of the command's Python processes together: the driver
    and Spark's Python workers, sampled every 0.25 s."""
    peak_jvm: int = 0
    """Peak resident memory (bytes) of its JVMs."""
    cpu: Cpu | None = None


def tree_rss(root: int, seen: set[int]) -> tuple[int, int]:
    """The resident memory of process ``root`` and its descendants: (Python, JVM) bytes;
    their process ids are added to ``seen``."""
    python = jvm = 0
    for pid in tree(root):
        seen.add(pid)
        with suppress(OSError, ValueError):
            status = Path(f"/proc/{pid}/status").read_text()
            rss = next((int(line.split()[1]) * 1024 for line in status.splitlines()
                        if line.startswith("VmRSS:")), 0)
            name = next((line.split()[1] for line in status.splitlines()
                         if line.startswith("Name:")), "")
            if name == "java":
                jvm += rss
            elif name.startswith("python") or name in ("sdk", "sdk-headworker"):  # forked
                python += rss
    return python, jvm


def watch(process: subprocess.Popen[Any], poll: Callable[[], None]) -> tuple[int, int]:
    """Wait for ``process``, calling ``poll`` every 50 ms, and for the processes of its tree
    that outlive it (reaped here, so that their CPU time counts); returns the peak resident
    memory (Python, JVM) of its process tree, sampled every 0.25 s."""
    polls = peak_python = peak_jvm = 0
    seen: set[int] = set()
    while process.poll() is None:
        if polls % 5 == 0:
            python, jvm = tree_rss(process.pid, seen)
            peak_python, peak_jvm = max(peak_python, python), max(peak_jvm, jvm)
        polls += 1
        poll()
        time.sleep(0.05)
    reap(seen - {process.pid})
    return peak_python, peak_jvm


def run_sdk(source: Source, sink: Sink, table: str, run: str, checkpoint: Path, schema: str,
            until: str, options: list[str], env: dict[str, str] | None = None) -> SdkRun:
    """``sdk sync`` as a user runs it (with ``env`` added to the environment), watching its
    progress.json."""
    command = [*sdk_command(), "sync", "--source", source.sdk_url(table, run), "--target",
               sink.url,
               "--tables", source.pattern(table), "--checkpoint", str(checkpoint),
               "--target-schema", schema, "--until", until]
    for option in options:
        command += ["--option", option]
    progress = checkpoint / "state" / "progress.json"
    log = checkpoint.with_suffix(".log")
    before = read_progress(progress)
    first_update = before.get("updated_at") if before else None
    started_at = done_at = None

    def poll() -> None:
        nonlocal started_at, done_at
        report = read_progress(progress)
        if report and report.get("updated_at") != first_update:
            if started_at is None:
                started_at = report["started_at"] if until == "snapshot" \
                    else report["updated_at"]
            if done_at is None and report.get("phase") in ("log", "done"):
                done_at = report["updated_at"]

    launched = time.time()
    t0 = time.perf_counter()
    with open(log, "w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL,
                                   env={**os.environ, **env} if env else None)
        peak_python, peak_jvm = watch(process, poll)
    seconds = time.perf_counter() - t0
    output = log.read_text().splitlines()
    if process.returncode != 0:
        raise SystemExit(f"sdk sync --until {until} failed with exit {process.returncode}:\n"
                         + "\n".join(output[-30:]))
    final = read_progress(progress) or {}
    if until == "snapshot":
        if started_at is None:
            started_at = final.get("started_at")
        if done_at is None:  # finished between two polls: the final report's time
            done_at = final.get("updated_at")
    reported = applied = None
    for line in reversed(output):
        found = re.search(r"applied (\d+) rows in ([\d.]+) s", line)
        if found:
            applied, reported = int(found.group(1)), float(found.group(2))
            break
    own = done_at - started_at if until == "snapshot" and started_at and done_at else None
    return SdkRun(seconds, own, started_at - launched if started_at else None, reported,
                  applied, output, peak_python, peak_jvm)


def read_progress(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


@dataclass
class JdbcRun:
    seconds: float
    """The whole command: Python, the JVM and the Spark session start, the copy, the stop."""
    peak_python: int
    peak_jvm: int
    cpu: Cpu | None = None


def jdbc_jars(source: Source, sink: Sink) -> list[Path]:
    kinds = {source.kind, "mysql" if isinstance(sink, MySQLSink) else "postgres"}
    return [JDBC_JARS[kind] for kind in sorted(kinds)]


def run_jdbc(source: Source, sink: Sink, table: str, target: str, log: Path) -> JdbcRun:
    """The Spark user's copy (``_spark_jdbc.py``) as its own process: ``spark.read.jdbc`` of
    ``table`` partitioned on id between its min and max (found here, before the clock starts)
    into ``df.write.jdbc`` appending to ``target``, made beforehand."""
    low, high = source.key_range(table)
    spec = {"jars": [str(jar) for jar in jdbc_jars(source, sink)],
            "source": source.jdbc(table), "target": sink.jdbc(target),
            "lower": low, "upper": high, "partitions": 2 * (os.cpu_count() or 1)}
    script = Path(__file__).with_name("_spark_jdbc.py")
    t0 = time.perf_counter()
    with open(log, "w") as out:
        process = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE,
                                   stdout=out, stderr=subprocess.STDOUT, text=True)
        assert process.stdin is not None
        process.stdin.write(json.dumps(spec))  # the passwords, out of the process list
        process.stdin.close()
        peak_python, peak_jvm = watch(process, lambda: None)
    seconds = time.perf_counter() - t0
    if process.returncode != 0:
        output = [x for x in log.read_text().splitlines() if not x.lstrip().startswith("at ")]
        raise SystemExit(f"the Spark JDBC copy failed with exit {process.returncode}:\n"
                         + "\n".join(output[-30:]))
    return JdbcRun(seconds, peak_python, peak_jvm)


def run_pipe(command: str) -> int:
    done = subprocess.run(["bash", "-o", "pipefail", "-c", command], capture_output=True,
                          text=True)
    if done.returncode != 0:
        raise SystemExit(f"the C-tools pipe failed ({done.returncode}): {done.stderr[-2000:]}")
    found = re.search(r"COPY (\d+)", done.stdout)
    return int(found.group(1)) if found else -1


def fresh_schema(cleanup: Cleanup, name: str, table: str | None = None) -> str:
    cleanup.schemas.append(name)
    pg_exec(PG_ADMIN, f"DROP SCHEMA IF EXISTS {name} CASCADE")
    pg_exec(PG_ADMIN, f"CREATE SCHEMA {name} AUTHORIZATION {parts(PG)['user']}")
    if table is not None:
        pg_exec(PG, f"CREATE TABLE {name}.{table} {PG_DDL}")
    return name


def drop_schema(name: str) -> None:
    pg_exec(PG_ADMIN, f"DROP SCHEMA IF EXISTS {name} CASCADE")


def drop_slot(name: str) -> None:
    pg_exec(PG_ADMIN, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
            "WHERE slot_name = %s", (name,))


def target_checksum(table: str) -> tuple[int, int]:
    (count, total), = pg_exec(PG_ADMIN, PG_CHECKSUM.format(table=table))
    return int(count), int(total)


def _alternated(variants: list[T], repeat: int) -> list[T]:
    """``variants`` in their order in even repeats and reversed in odd ones, so neither of
    two settings compared always runs first (on a cold cache, right after the updates)."""
    return variants if repeat % 2 == 0 else variants[::-1]


def env_label(env: dict[str, str]) -> str:
    return " ".join(f"{key}={value}" for key, value in env.items())


def snapshot_sdk(source: Source, sink: Sink, table: str, run_name: str, schema: str,
                 work: Path, args: argparse.Namespace, env: dict[str, str],
                 expected: tuple[int, int]) -> tuple[SdkRun, bool]:
    """One ``sdk sync --until snapshot`` into a fresh schema, checked and then dropped."""
    sink.fresh(schema)
    checkpoint = work / run_name
    cpu = meter(source, sink)
    cpu.start()
    run = run_sdk(source, sink, table, run_name, checkpoint, schema, "snapshot",
                  args.sdk_option, env)
    run.cpu = cpu.stop()
    equal = sink.checksum(f"{schema}.{table}") == expected
    sink.drop(schema)
    if isinstance(source, PostgresSource):
        drop_slot(f"e2e_{run_name}_{TAG}")
    shutil.rmtree(checkpoint, ignore_errors=True)
    return run, equal


def sdk_summary(runs: list[SdkRun], rows: int, label: str, same_server: bool
                ) -> tuple[float, float]:
    """Print the sdk snapshot runs' lines; returns their rates (own, whole command)."""
    tag = f" [{label}]" if label else ""
    whole = [r.seconds for r in runs]
    own = [r.own for r in runs if r.own is not None]
    startup = [r.startup for r in runs if r.startup is not None]
    reported = [r.reported for r in runs if r.reported is not None]
    line(f"sdk sync --until snapshot, whole command{tag}", whole, rows, "rows/s")
    cpu_line([(r.seconds, r.cpu) for r in runs], same_server)
    if own:
        own_rate = rate(rows, own)
        line(f"sdk sync, first split to snapshot done (progress.json){tag}", own, rows,
             "rows/s")
        print(f"    (launch to first split: {min(startup):.2f} s; the command's own 'applied "
              f"... in X s' line: {min(reported) if reported else float('nan'):.1f} s)")
    else:
        own_rate = float("nan")
        print(f"  sdk sync{tag}, first split to snapshot done: not found in progress.json")
    print(f"    (peak resident memory, the most of any run: Python processes together "
          f"{max(r.peak_python for r in runs) / 2**20:.0f} MiB, JVM "
          f"{max(r.peak_jvm for r in runs) / 2**20:.0f} MiB)")
    return own_rate, rate(rows, whole)


def snapshot_case(source: Source, sink: Sink, args: argparse.Namespace, cleanup: Cleanup,
                  work: Path) -> bool:
    table = f"e2e_{source.kind}_{TAG}"
    t0 = time.perf_counter()
    source.create(table, args.rows)
    expected = source.checksum(table)
    print(f"\n== {source.label} -> {sink.label}, snapshot of {args.rows:,} rows "
          f"(source loaded in {time.perf_counter() - t0:.1f} s; count/checksum "
          f"{expected[0]:,}/{expected[1]})", flush=True)
    missing = [str(jar) for jar in jdbc_jars(source, sink) if not jar.exists()]
    with_jdbc = not args.skip_jdbc and not missing
    if missing and not args.skip_jdbc:
        print(f"  Spark JDBC copy skipped: {', '.join(missing)} not found", flush=True)
    compare = env_label(args.compare_env)
    hand_s: list[float] = []
    pipe_s: list[float] = []
    hand_cpu: list[Cpu] = []
    pipe_cpu: list[Cpu] = []
    jdbc_runs: list[JdbcRun] = []
    runs: list[SdkRun] = []
    compared: list[SdkRun] = []
    checks: dict[str, list[bool]] = {"hand-written": [], "C tools": [], "sdk": []}
    if compare:
        checks[f"sdk [{compare}]"] = []
    if with_jdbc:
        checks["Spark JDBC"] = []
    for k in range(args.repeat):
        schema = sink.fresh(f"e2e_hand_{source.kind}_{TAG}_{k}", table)
        cpu = meter(source, sink, in_process=True)
        cpu.start()
        t = time.perf_counter()
        n = source.hand(table, sink, f"{schema}.{table}")
        hand_s.append(time.perf_counter() - t)
        hand_cpu.append(cpu.stop())
        checks["hand-written"].append(n == args.rows and
                                      sink.checksum(f"{schema}.{table}") == expected)
        sink.drop(schema)
        print(f"  [{k + 1}/{args.repeat}] hand-written {hand_s[-1]:.2f} s", flush=True)

        schema = sink.fresh(f"e2e_pipe_{source.kind}_{TAG}_{k}", table)
        cpu = meter(source, sink)
        cpu.start()
        t = time.perf_counter()
        n = run_pipe(source.pipe(table, sink, f"{schema}.{table}"))
        pipe_s.append(time.perf_counter() - t)
        pipe_cpu.append(cpu.stop())
        checks["C tools"].append(n in (args.rows, -1) and  # -1: the loader prints no count
                                 sink.checksum(f"{schema}.{table}") == expected)
        sink.drop(schema)
        print(f"  [{k + 1}/{args.repeat}] C tools {pipe_s[-1]:.2f} s", flush=True)

        settings = [("sdk", runs, f"snap_{source.kind}_{k}",
                     f"e2e_sdk_{source.kind}_{TAG}_{k}", args.sdk_env)]
        if compare:
            settings.append((f"sdk [{compare}]", compared, f"snapc_{source.kind}_{k}",
                             f"e2e_sdkc_{source.kind}_{TAG}_{k}",
                             {**args.sdk_env, **args.compare_env}))
        for what, into, run_name, schema, env in _alternated(settings, k):
            run, equal = snapshot_sdk(source, sink, table, run_name, schema, work, args, env,
                                      expected)
            into.append(run)
            checks[what].append(equal)
            print(f"  [{k + 1}/{args.repeat}] sdk sync --until snapshot"
                  f"{what[3:]} {run.seconds:.2f} s (own "
                  f"{run.own if run.own is None else round(run.own, 2)} s, startup "
                  f"{run.startup if run.startup is None else round(run.startup, 2)} s; peak "
                  f"RSS Python {run.peak_python / 2**20:.0f} MiB, JVM "
                  f"{run.peak_jvm / 2**20:.0f} MiB)", flush=True)

        if with_jdbc:
            schema = sink.fresh(f"e2e_jdbc_{source.kind}_{TAG}_{k}", table)
            cpu = meter(source, sink)
            cpu.start()
            jdbc_run = run_jdbc(source, sink, table, f"{schema}.{table}",
                                work / f"jdbc_{source.kind}_{k}.log")
            jdbc_run.cpu = cpu.stop()
            jdbc_runs.append(jdbc_run)
            checks["Spark JDBC"].append(sink.checksum(f"{schema}.{table}") == expected)
            sink.drop(schema)
            print(f"  [{k + 1}/{args.repeat}] Spark JDBC {jdbc_run.seconds:.2f} s (peak RSS "
                  f"Python {jdbc_run.peak_python / 2**20:.0f} MiB, JVM "
                  f"{jdbc_run.peak_jvm / 2**20:.0f} MiB)", flush=True)

    rows = args.rows
    hand_rate, pipe_rate = rate(rows, hand_s), rate(rows, pipe_s)
    jdbc_s = [r.seconds for r in jdbc_runs]
    jdbc_rate = rate(rows, jdbc_s) if jdbc_s else float("nan")
    reader = "pymysql SSCursor" if source.kind == "mysql" else "psycopg server-side cursor"
    unload = "mariadb -B" if source.kind == "mysql" else "psql \\copy TO"
    writer, load = ("COPY write_row", "psql \\copy FROM") if isinstance(sink, PostgresSink) \
        else ("pymysql executemany", "mariadb LOAD DATA LOCAL")
    tools = f"{unload} | {load}"
    sdk_env = f" (sdk environment: {env_label(args.sdk_env)})" if args.sdk_env else ""
    print(f"{source.label} -> {sink.label}, {rows:,} rows, best of {args.repeat}{sdk_env}:")
    same = parts(source.url)["port"] == parts(sink.url)["port"]
    line(f"hand-written ({reader} -> {writer})", hand_s, rows, "rows/s")
    cpu_line(list(zip(hand_s, hand_cpu, strict=True)), same)
    line(f"C tools ({tools})", pipe_s, rows, "rows/s")
    cpu_line(list(zip(pipe_s, pipe_cpu, strict=True)), same)
    if jdbc_runs:
        line(f"Spark JDBC (read.jdbc, {2 * (os.cpu_count() or 1)} partitions -> write.jdbc), "
             "whole command", jdbc_s, rows, "rows/s")
        cpu_line([(r.seconds, r.cpu) for r in jdbc_runs], same)
        print(f"    (peak resident memory, the most of any run: Python "
              f"{max(r.peak_python for r in jdbc_runs) / 2**20:.0f} MiB, JVM "
              f"{max(r.peak_jvm for r in jdbc_runs) / 2**20:.0f} MiB)")
    for label, variant in [("", runs)] + ([(compare, compared)] if compare else []):
        own_rate, whole_rate = sdk_summary(variant, rows, label, same)
        tag = f" [{label}]" if label else ""
        print(f"  ratios{tag} (rate/rate), sdk first split to done [whole command]: "
              f"sdk/hand-written {own_rate / hand_rate:.3f} [{whole_rate / hand_rate:.3f}], "
              f"sdk/C-tools {own_rate / pipe_rate:.3f} [{whole_rate / pipe_rate:.3f}]"
              + (f", sdk/Spark-JDBC (whole commands) [{whole_rate / jdbc_rate:.3f}]"
                 if jdbc_runs else ""))
    ok = True
    for what, results in checks.items():
        good = all(results)
        ok &= good
        print(f"  check {what}: {'OK' if good else 'MISMATCH'} "
              f"({sum(results)}/{len(results)} targets equal the source, count and checksum)")
    mysql_or_pg_drop(source, table, cleanup)
    return ok


def mysql_or_pg_drop(source: Source, table: str, cleanup: Cleanup) -> None:
    if isinstance(source, MySQLSource):
        mysql_exec(MYSQL_ADMIN, f"DROP TABLE IF EXISTS {table}")
        cleanup.mysql_tables.remove(table)
    else:
        pub = f"e2e_pub_{table}"
        pg_exec(PG_ADMIN, f"DROP PUBLICATION IF EXISTS {pub}")
        pg_exec(PG_ADMIN, f"DROP TABLE IF EXISTS {table}")
        cleanup.pg_tables.remove(table)


def log_case(source: Source, sink: Sink, args: argparse.Namespace, cleanup: Cleanup,
             work: Path) -> bool:
    table = f"e2e_log_{source.kind}_{TAG}"
    size = "one-row" if args.per_transaction == 1 else f"{args.per_transaction:,}-row"
    print(f"\n== {source.label} -> {sink.label}, log phase: {args.changes:,} one-row UPDATEs in "
          f"{size} transactions on a {args.log_rows:,}-row table", flush=True)
    ids = [k % args.log_rows + 1 for k in range(args.changes)]
    compare = env_label(args.compare_env)
    # sdk as set by --sdk-env, and with --compare-env's variables too: (label, prefix, env)
    variants = [("", "log", args.sdk_env)]
    if compare:
        variants.append((compare, "logc", {**args.sdk_env, **args.compare_env}))
    raw_s: list[float] = []
    dialect_s: list[float] = []
    runs: dict[str, list[SdkRun]] = {label: [] for label, _, _ in variants}
    ok = True
    raw_count = raw_tx = 0
    for k in range(args.repeat):  # each repeat: a fresh table, checkpoints and targets
        source.create(table, args.log_rows)
        snaps: dict[str, SdkRun] = {}
        # each setting's snapshot, before the updates, in turns: the first one's slot has the
        # WAL of the second one's snapshot (written to a target on the same server) to pass
        for label, prefix, env in _alternated(variants, k):
            sink.fresh(f"e2e_{prefix}_{source.kind}_{TAG}_{k}")
            snaps[label] = run_sdk(source, sink, table, f"{prefix}_{source.kind}_{k}",
                                   work / f"{prefix}_{source.kind}_{k}",
                                   f"e2e_{prefix}_{source.kind}_{TAG}_{k}", "snapshot",
                                   args.sdk_option, env)
        source.prepare_raw(table)
        start = source.position()
        own_decoder = DialectLog(source.sdk_url(table, "raw"), source.pattern(table))
        t = time.perf_counter()
        source.update(table, ids, args.per_transaction)
        made = time.perf_counter() - t
        end = source.position()
        own_decoder.mark_end()
        expected = source.checksum(table)
        t = time.perf_counter()
        raw_count, raw_tx = source.raw(table, start, end)
        raw_s.append(time.perf_counter() - t)
        t = time.perf_counter()
        decoded = own_decoder.read()
        dialect_s.append(time.perf_counter() - t)
        counted = raw_count == args.changes and decoded == args.changes
        ok &= counted
        print(f"  [{k + 1}/{args.repeat}] updates made in {made:.1f} s; raw {raw_s[-1]:.2f} s "
              f"({raw_count:,} changes, {raw_tx:,} transactions); the dialect's stream_log "
              f"{dialect_s[-1]:.2f} s ({decoded:,} changes)", flush=True)
        for label, prefix, env in _alternated(variants, k):
            run_name, schema = f"{prefix}_{source.kind}_{k}", \
                f"e2e_{prefix}_{source.kind}_{TAG}_{k}"
            checkpoint = work / run_name
            run = run_sdk(source, sink, table, run_name, checkpoint, schema, "caught-up",
                          args.sdk_option, env)
            runs[label].append(run)
            equal = sink.checksum(f"{schema}.{table}") == expected
            ok &= equal
            print(f"  [{k + 1}/{args.repeat}]{f' [{label}]' if label else ''} snapshot run "
                  f"{snaps[label].seconds:.1f} s; sdk --until caught-up {run.seconds:.2f} s "
                  f"(own {run.reported} s, applied {run.applied}); mirror == source: {equal}",
                  flush=True)
            sink.drop(schema)
            if isinstance(source, PostgresSource):
                drop_slot(f"e2e_{run_name}_{TAG}")
            shutil.rmtree(checkpoint, ignore_errors=True)
        if isinstance(source, PostgresSource):
            drop_slot(f"e2e_raw_{TAG}")
        mysql_or_pg_drop(source, table, cleanup)

    n = args.changes
    raw_rate = rate(n, raw_s)
    decoder = "python-mysql-replication BinLogStreamReader" if source.kind == "mysql" else \
        "slot peek, pgoutput decoded, psycopg loaders"
    sdk_env = f" (sdk environment: {env_label(args.sdk_env)})" if args.sdk_env else ""
    print(f"{source.label} -> {sink.label}, log phase, {n:,} changes, best of "
          f"{args.repeat}{sdk_env}:")
    line(f"raw decoder ({decoder})", raw_s, n, "changes/s")
    line("the source dialect's stream_log (its own decoder, same range)", dialect_s, n,
         "changes/s")
    dialect_rate = rate(n, dialect_s)
    for label, variant in runs.items():
        tag = f" [{label}]" if label else ""
        whole = [r.seconds for r in variant]
        own = [r.reported for r in variant if r.reported is not None]
        whole_rate = rate(n, whole)
        own_rate = rate(n, own) if own else float("nan")
        line(f"sdk sync --until caught-up, whole command{tag}", whole, n, "changes/s")
        if own:
            line(f"sdk sync, own run ('applied {variant[0].applied} rows in X s'){tag}", own,
                 n, "changes/s")
        planned = [r.seconds - r.startup for r in variant if r.startup is not None]
        if planned:
            line(f"sdk sync, first log batch planned to the command's exit{tag}", planned, n,
                 "changes/s")
            print(f"    (launch to the first log batch planned: "
                  f"{min(r.startup for r in variant if r.startup is not None):.2f} s)")
        print(f"  ratios{tag} (rate/rate): sdk/raw {own_rate / raw_rate:.3f} (whole command "
              f"{whole_rate / raw_rate:.3f}"
              + (f", first log batch to exit {rate(n, planned) / raw_rate:.3f}"
                 if planned else "") + f"); sdk/stream_log {own_rate / dialect_rate:.3f} "
              f"(whole command {whole_rate / dialect_rate:.3f})")
    print(f"  check: {'OK' if ok else 'MISMATCH'} (raw decoder saw {raw_count:,} of {n:,} "
          f"changes, {raw_tx:,} commits in the range; the mirror's count and checksum equal the "
          "source's after the updates)")
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--changes", type=int, default=40_000)
    parser.add_argument("--per-transaction", type=int, default=1,
                        help="the log case's UPDATEs committed together (default one each)")
    parser.add_argument("--log-rows", type=int, default=100_000,
                        help="rows of the log case's table")
    parser.add_argument("--source", choices=("mysql", "postgres", "both"), default="both")
    parser.add_argument("--target", choices=("postgres", "mysql"), default="postgres",
                        help="the server the copies go into (default PostgreSQL)")
    parser.add_argument("--skip-log", action="store_true")
    parser.add_argument("--skip-snapshot", action="store_true")
    parser.add_argument("--repeat", type=int, default=1, help="best of K (spread shown)")
    parser.add_argument("--sdk-option", action="append", default=[], metavar="KEY=VALUE",
                        help="passed to sdk sync as --option (default: none, as a user runs it)")
    parser.add_argument("--sdk-env", action="append", default=[], metavar="KEY=VALUE",
                        help="an environment variable of the sdk runs only (repeatable)")
    parser.add_argument("--compare-env", action="append", default=[], metavar="KEY=VALUE",
                        help="also run sdk a second time each repeat with these variables "
                        "(over --sdk-env's), shown on lines of their own (repeatable)")
    parser.add_argument("--skip-jdbc", action="store_true",
                        help="no Spark JDBC copy in the snapshot case")
    args = parser.parse_args()
    become_subreaper()  # a command's orphans are reaped here: their CPU time counts
    for name in ("sdk_env", "compare_env"):
        pairs = getattr(args, name)
        if bad := [pair for pair in pairs if "=" not in pair or pair.startswith("=")]:
            parser.error(f"--{name.replace('_', '-')} takes KEY=VALUE, not {bad[0]!r}")
        setattr(args, name, dict(pair.split("=", 1) for pair in pairs))
    sources: list[Callable[[Cleanup], Source]] = []
    if args.source in ("mysql", "both"):
        sources.append(MySQLSource)
    if args.source in ("postgres", "both"):
        sources.append(PostgresSource)
    cleanup = Cleanup()
    sink: Sink = MySQLSink(cleanup) if args.target == "mysql" else PostgresSink(cleanup)
    work = Path(tempfile.mkdtemp(prefix="sdk-e2e-"))
    cleanup.dirs.append(work)
    try:
        load = os.getloadavg()
    except OSError:
        load = (float("nan"),) * 3
    print(f"e2e_sync: {os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} "
          f"{load[2]:.2f}; sdk command: {' '.join(sdk_command())}", flush=True)
    t0 = time.perf_counter()
    ok = True
    try:
        for make in sources:
            source = make(cleanup)
            if not args.skip_snapshot:
                ok &= snapshot_case(source, sink, args, cleanup, work)
            if not args.skip_log:
                ok &= log_case(source, sink, args, cleanup, work)
    finally:
        cleanup.run()
    load = os.getloadavg()
    print(f"\ntotal {time.perf_counter() - t0:.0f} s; load average at the end {load[0]:.2f} "
          f"{load[1]:.2f} {load[2]:.2f}; {'all checks passed' if ok else 'CHECKS FAILED'}")
    if not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
