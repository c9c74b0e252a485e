"""PostgreSQL change capture with triggers: for teams whose database user may not create a
replication slot. A worked example of a change-table dialect on the generic SQL base.

Each captured table gets an AFTER ROW trigger that appends the row's images (``to_jsonb``) to
``sdk_capture.changes`` in the writer's own transaction; the change's ``id`` (a sequence) is
the offset. An id is taken when a row is written but seen when its transaction commits, so the
highest visible ``id`` is not a safe offset (an open transaction may hold a lower one):
``current_offset`` reads it, then waits until every transaction holding an id then has ended
(the fence below): every change below the offset is then visible, and none can appear later.
A ``TRUNCATE`` is recorded by a statement trigger, as op ``t``.

Writers pay one extra INSERT per changed row, in their transaction (the trigger runs as the
capture user); the change table grows until ``acknowledge_offset`` deletes what was committed
(and records where the log now starts: a read from below it is refused).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import date, datetime
from decimal import Decimal
from functools import partial
from typing import Any

from sdk import Capability, ChangeEvent, Column, ConnectionConfig, DialectInfo, Heartbeat, Offset
from sdk.dialect.errors import ConfigurationError, OffsetExpiredError, RetriableError
from sdk.dialect.sqlbase import SqlDialect
from sdk.dialect.types import LogicalType, Requirement, Row, TableId, TableSchema, TableTruncated

NAME = "pgtrigger"
SETUP = """
SELECT pg_advisory_xact_lock(7351);  -- one session at a time: CREATE OR REPLACE races
CREATE SCHEMA IF NOT EXISTS sdk_capture;
CREATE TABLE IF NOT EXISTS sdk_capture.changes (id bigserial PRIMARY KEY,
  schema_name text NOT NULL, table_name text NOT NULL, op "char" NOT NULL, before jsonb,
  after jsonb, at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE TABLE IF NOT EXISTS sdk_capture.purged (one bool PRIMARY KEY DEFAULT true, below bigint);
CREATE OR REPLACE FUNCTION sdk_capture.record() RETURNS trigger LANGUAGE plpgsql
  SECURITY DEFINER SET search_path = pg_catalog AS $$
BEGIN
  INSERT INTO sdk_capture.changes (schema_name, table_name, op, before, after) VALUES (
    TG_TABLE_SCHEMA, TG_TABLE_NAME, translate(lower(left(TG_OP, 1)), 'i', 'c'),
    CASE WHEN TG_OP <> 'INSERT' THEN to_jsonb(OLD) END,
    CASE WHEN TG_OP <> 'DELETE' THEN to_jsonb(NEW) END);
  RETURN NULL;
END $$;
"""
L = LogicalType
TYPES = {"smallint": L.INT16, "integer": L.INT32, "bigint": L.INT64, "numeric": L.DECIMAL,
         "real": L.FLOAT32, "double precision": L.FLOAT64, "boolean": L.BOOLEAN, "text": L.STRING,
         "character varying": L.STRING, "character": L.STRING, "date": L.DATE, "bytea": L.BINARY,
         "timestamp without time zone": L.TIMESTAMP, "timestamp with time zone": L.TIMESTAMP_TZ}
ISO, HEX = datetime.fromisoformat, lambda v: bytes.fromhex(v[2:])  # from jsonb's text
FROM_JSON: dict[LogicalType, Callable[[Any], Any]] = {L.FLOAT32: float, L.FLOAT64: float,
    L.DATE: date.fromisoformat, L.TIMESTAMP: ISO, L.TIMESTAMP_TZ: ISO, L.BINARY: HEX}
POLL_SECONDS, WAIT_SECONDS, PAGE = 0.2, 60.0, 5000
TRIGGERS = (("sdk_capture", "INSERT OR UPDATE OR DELETE", "ROW"),
            ("sdk_capture_truncate", "TRUNCATE", "STATEMENT"))


class PgTrigger(SqlDialect):
    def dialect_info(self) -> DialectInfo:
        return DialectInfo(NAME, "PostgreSQL (triggers)", drivers=("psycopg",),
                           capabilities=frozenset({Capability.BEFORE_IMAGES}))

    def connect(self, config: ConnectionConfig) -> Any:
        import psycopg
        from psycopg.types.json import set_json_loads

        try:
            conn = psycopg.connect(
                host=config.host or "127.0.0.1", port=config.port or 5432, user=config.user,
                password=config.password, dbname=config.database, autocommit=True,
                options="-c TimeZone=UTC")
        except psycopg.OperationalError as exc:  # a login refused: fix it; no answer: retry
            kind = ConfigurationError if any(m in str(exc) for m in (
                "authentication failed", "does not exist", "pg_hba.conf")) else RetriableError
            raise kind(f"cannot connect to {config.masked_url}: {exc}") from None
        set_json_loads(partial(json.loads, parse_float=Decimal), conn)
        return conn

    def is_retriable(self, error: BaseException) -> bool:
        import psycopg

        return isinstance(error, psycopg.OperationalError)

    def column(self, name: str, data_type: str, nullable: bool, precision: int | None,
               scale: int | None) -> Column:
        if data_type not in TYPES:
            raise ConfigurationError(f"column {name!r} has type {data_type}, which the "
                                     f"{NAME} dialect does not capture")
        return Column(name, TYPES[data_type], data_type, nullable, precision, scale)

    def key_term(self, table: TableSchema, name: str) -> str:
        text = {c.name for c in table.columns if c.type is L.STRING}
        return self.quote(name) + (' COLLATE "C"' if name in text else "")  # Python's order

    def estimate_rows(self, conn: Any, table: TableSchema) -> int:
        rows = self.query(conn, "SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass",
                          (self.qualified(table.table),))
        return max(int(rows[0][0]), 0) if rows else 0

    def preflight(self, conn: Any, tables: Sequence[TableId]) -> list[Requirement]:
        (create,) = self.query(conn, "SELECT has_database_privilege(current_database(), "
                                     "'CREATE') OR to_regnamespace('sdk_capture') IS NOT NULL")[0]
        out = [Requirement("schema sdk_capture exists or can be created", bool(create),
                           fix="GRANT CREATE ON DATABASE <db> TO <user>")]
        for t in tables:
            (ok,) = self.query(conn, "SELECT has_table_privilege(%s, 'TRIGGER')",
                               (self.qualified(t),))[0]
            out.append(Requirement(f"TRIGGER privilege on {t}", bool(ok),
                                   fix=f"GRANT TRIGGER ON {self.qualified(t)} TO <user>"))
        return out

    def prepare_capture(self, conn: Any, tables: Sequence[TableSchema]) -> None:
        self.dbapi(conn).execute(SETUP)
        for t, (name, event, each) in ((t, e) for t in tables for e in TRIGGERS):
            self.dbapi(conn).execute(  # a TRUNCATE fires no row trigger: op 't', no images
                f"CREATE OR REPLACE TRIGGER {name} AFTER {event} ON {self.qualified(t.table)} "
                f"FOR EACH {each} EXECUTE FUNCTION sdk_capture.record()")

    def current_offset(self, conn: Any) -> Offset:
        (high,) = self.query(conn, "SELECT greatest(max(id), (SELECT max(below) - 1 FROM "
                             "sdk_capture.purged), 0) FROM sdk_capture.changes")[0]  # not below
        # the log's start. Every id up to ``high`` was taken by a transaction with an xid below
        # ``fence``: once the oldest running xid reaches the fence, all ended.
        (fence,) = self.query(conn, "SELECT pg_current_xact_id()::text")[0]
        deadline = time.monotonic() + WAIT_SECONDS
        while int(self.query(conn, "SELECT pg_snapshot_xmin(pg_current_snapshot())::text")[0][0]
                  ) < int(fence):
            if time.monotonic() > deadline:
                raise RetriableError(f"transactions stayed open for {WAIT_SECONDS:.0f} s; an "
                                     "offset waits for the writes in flight to end")
            time.sleep(0.005)
        return Offset(NAME, id=int(high) + 1)

    def stream_log(self, conn: Any, tables: Sequence[TableSchema], start: Offset,
                   end: Offset | None) -> Iterator[ChangeEvent | Heartbeat]:
        by_name = {(t.table.schema, t.table.name): t for t in tables}
        position = _id(start)
        if position < _id(self.earliest_offset(conn)):
            raise OffsetExpiredError(f"{NAME}: the changes from id {position} were deleted")
        while True:
            head = _id(end or self.current_offset(conn))
            while position < head:
                rows = self.query(
                    conn, "SELECT id, schema_name, table_name, op, before, after, at FROM "
                    "sdk_capture.changes WHERE id >= %s AND id < %s ORDER BY id LIMIT %s",
                    (position, head, PAGE))
                for id_, schema, name, op, before, after, at in rows:
                    table = by_name.get((schema, name))
                    if table is not None and op == "t":
                        yield TableTruncated(table.table, Offset(NAME, id=id_))
                    elif table is not None:
                        yield _event(table, id_, op, before, after, at)
                position = rows[-1][0] + 1 if len(rows) == PAGE else head
            if end is not None:
                return
            yield Heartbeat(Offset(NAME, id=position))
            time.sleep(POLL_SECONDS)

    def compare_offset(self, a: Offset, b: Offset) -> int:
        return (_id(a) > _id(b)) - (_id(a) < _id(b))

    def earliest_offset(self, conn: Any) -> Offset:
        (low,) = self.query(conn, "SELECT coalesce(max(below), 1) FROM sdk_capture.purged")[0]
        return Offset(NAME, id=int(low))

    def acknowledge_offset(self, conn: Any, offset: Offset) -> None:
        self.dbapi(conn).execute(  # the log's start, never backwards
            "INSERT INTO sdk_capture.purged (below) VALUES (%s) ON CONFLICT (one) DO UPDATE "
            "SET below = greatest(purged.below, excluded.below)", (_id(offset),))
        self.dbapi(conn).execute("DELETE FROM sdk_capture.changes WHERE id < %s", (_id(offset),))


def _id(offset: Offset) -> int:
    assert isinstance(offset["id"], int), offset
    return offset["id"]


def _row(table: TableSchema, image: dict[str, Any] | None) -> Row | None:
    if image is None:
        return None
    values = [(image[c.name], FROM_JSON.get(c.type)) for c in table.columns]
    return tuple(v if convert is None or v is None else convert(v) for v, convert in values)


def _event(table: TableSchema, id_: int, op: str, before: Any, after: Any, at: datetime
           ) -> ChangeEvent:
    old, new = _row(table, before), _row(table, after)
    key = table.key_of(new if new is not None else old)  # type: ignore[arg-type]
    old_key = table.key_of(old) if op == "u" and old is not None else None
    return ChangeEvent(table.table, op, key, new, Offset(NAME, id=id_), old,  # type: ignore
                       old_key if old_key != key else None, int(at.timestamp() * 1_000_000))


dialect = PgTrigger()
