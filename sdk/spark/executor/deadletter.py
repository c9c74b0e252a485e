"""Changes the sync cannot carry, under ``errors.mode``.

A value the source holds that Python or Spark cannot (a dialect reads it as a
:class:`~sdk.BadValue`), or a change the target refuses (a value out of its range, a
constraint it adds, an encoding it rejects): with ``fail`` (the default) the task stops at the
first with a :class:`~sdk.DataError` naming table, key, column, value and position; with
``skip`` the change is set aside in the dead-letter table and the rest is applied, exactly
once as ever. The dead-letter table is Parquet files under the state directory's
``dead-letter`` folder, one per unit of work (a snapshot split, a log chunk), named by it so a
replayed unit writes the same file again. ``sdk status`` counts them per table and names the
``sdk snapshot --where`` that brings a row across once its cause is fixed.
"""

from __future__ import annotations

import datetime as dt
import io
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ...dialect.codec import dumps, encode_value
from ...dialect.errors import DataError
from ...dialect.types import BadValue, ChangeEvent, Offset, TableId, TableSchema
from ..state.statestore import StateStore

MODES = ("fail", "skip")
FOLDER = "dead-letter"
"""The dead-letter table's folder in the state directory."""
MAX_VALUE = 200
"""The most characters of a value a message or record keeps."""

SCHEMA = pa.schema([
    ("table", pa.string()), ("op", pa.string()), ("key", pa.string()), ("row", pa.string()),
    ("position", pa.string()), ("column", pa.string()), ("value", pa.string()),
    ("reason", pa.string()), ("at", pa.timestamp("us", tz="UTC")),
])
"""One set-aside change: its table, op (``r`` for a snapshot row), key and row as JSON (a
:class:`BadValue` as its text), the log position or snapshot watermark, the column and value
at fault when known, why, and when it was set aside."""


def _plain(value: Any) -> Any:
    """``value`` as JSON takes it, a BadValue as its text."""
    return value.text if isinstance(value, BadValue) else encode_value(value)


def _cut(text: str) -> str:
    return text if len(text) <= MAX_VALUE else text[:MAX_VALUE - 3] + "..."


def _row_json(schema: TableSchema | None, row: Sequence[Any] | None) -> str | None:
    if row is None:
        return None
    names = schema.column_names if schema is not None else [str(i) for i in range(len(row))]
    return dumps({n: _plain(v) for n, v in zip(names, row, strict=False)})


def _key_json(schema: TableSchema | None, key: Sequence[Any]) -> str:
    """A key as the record keeps it: ``{column: value}`` (a list when the columns are not
    known)."""
    values = [_plain(v) for v in key]
    if schema is None or len(schema.key) != len(values):
        return dumps(values)
    return dumps(dict(zip(schema.key, values, strict=True)))


def key_text(key: Sequence[Any]) -> str:
    """A key as a message shows it: its values' JSON, one value bare."""
    values = [_plain(v) for v in key]
    return dumps(values[0] if len(values) == 1 else values)


@dataclass
class Rejects:
    """A task's changes the sync cannot carry: stop at the first (``fail``) or set each aside
    (``skip``), written as one dead-letter file by :meth:`write`."""

    mode: str
    store: StateStore | None
    records: list[dict[str, Any]] = field(default_factory=list)
    skipped: dict[TableId, int] = field(default_factory=dict)
    """Changes set aside per table by this task."""

    @property
    def skips(self) -> bool:
        return self.mode == "skip"

    @staticmethod
    def mark() -> int:
        """Where the count of bad values made stands: pass it to :meth:`rows` and
        :meth:`events` after the read."""
        return BadValue.made

    def rows(self, schema: TableSchema, rows: list[Any], since: int, watermark: Offset
             ) -> list[Any]:
        """Snapshot ``rows`` of ``schema`` without those holding a bad value (read since
        mark ``since``), each stopped at or set aside."""
        if BadValue.made == since:
            return rows
        keep = []
        for row in rows:
            found = _bad(row)
            if found is None:
                keep.append(row)
                continue
            i, bad = found
            self._reject(schema, "r", schema.key_of(row), row, watermark,
                         schema.columns[i].name, bad.text, bad.reason, "in the snapshot at")
        return keep

    def events(self, tables: Mapping[TableId, TableSchema], events: list[ChangeEvent],
               since: int) -> list[ChangeEvent]:
        """Log ``events`` without those whose after image or key holds a bad value (read
        since mark ``since``), each stopped at or set aside. A bad value in a before image
        only (a delete of such a row, the update that fixes it) is carried as NULL there:
        what the change applies is sound."""
        if BadValue.made == since:
            return events
        keep = []
        for event in events:
            found = _bad(event.after) or _bad(event.key) or _bad(event.old_key)
            if found is None:
                if _bad(event.before) is not None:
                    assert event.before is not None
                    event = replace(event, before=tuple(
                        None if type(v) is BadValue else v for v in event.before))
                keep.append(event)
                continue
            bad = found[1]
            schema = tables.get(event.table)
            in_row = _bad(event.after)
            column = schema.columns[in_row[0]].name if schema is not None and \
                in_row is not None else None
            self._reject(schema, event.op, event.key, event.after, event.offset, column,
                         bad.text, bad.reason, "at log position", event.table)
        return keep

    def refused(self, schema: TableSchema, event: ChangeEvent, error: BaseException) -> None:
        """A change the target refused (only ever called under ``skip``)."""
        reason = f"the target refused it: {type(error).__name__}: {error}"
        where = "in the snapshot at" if event.op == "r" else "at log position"
        self._reject(schema, event.op, event.key, event.after, event.offset, None, None,
                     " ".join(reason.split()), where)

    def _reject(self, schema: TableSchema | None, op: str, key: Sequence[Any],
                row: Sequence[Any] | None, position: Offset, column: str | None,
                value: str | None, reason: str, where: str, table: TableId | None = None
                ) -> None:
        table = schema.table if schema is not None else table
        assert table is not None
        if not self.skips:
            what = f", column {column!r}: {_cut(value or '')!r} {reason}" if column else \
                f": {reason}"
            raise DataError(
                f"table {table}, key {key_text(key)}{what} ({where} {position.json_text()}): "
                "fix the value at the source, or run with --option errors.mode=skip to set "
                "such changes aside in the dead-letter table (sdk status lists them) and go "
                "on; then run again with the same --checkpoint")
        self.skipped[table] = self.skipped.get(table, 0) + 1
        self.records.append({
            "table": str(table), "op": op, "key": _key_json(schema, key),
            "row": _row_json(schema, row), "position": position.json_text(),
            "column": column, "value": None if value is None else _cut(value),
            "reason": reason, "at": dt.datetime.now(dt.UTC)})

    def write(self, name: str) -> None:
        """Write what was set aside as dead-letter file ``name`` (the unit of work: a replay
        writes the same name again); nothing when nothing was."""
        if not self.records or self.store is None:
            return
        self.store.write_bytes(_parquet(pa.Table.from_pylist(self.records, schema=SCHEMA)),
                               FOLDER, f"{_file_name(name)}.parquet")

def _bad(values: Sequence[Any] | None) -> tuple[int, BadValue] | None:
    """The first bad value of ``values`` and its index, if any."""
    if values is None:
        return None
    for i, value in enumerate(values):
        if type(value) is BadValue:
            return i, value
    return None


def _file_name(name: str) -> str:
    return re.sub(r"[^\w.=-]+", "_", name)


def read(store: StateStore) -> pa.Table:
    """Every change set aside under ``store`` (the dead-letter table), oldest file first."""
    tables = []
    for name in sorted(store.list_dir(FOLDER)):
        if not name.endswith(".parquet"):
            continue
        data = store.read_bytes(FOLDER, name)
        if data is not None:
            tables.append(pq.read_table(pa.BufferReader(data)))
    return pa.concat_tables(tables) if tables else SCHEMA.empty_table()


def counts(data: pa.Table) -> dict[str, int]:
    """Changes set aside per table name, in ``data`` (:func:`read`)."""
    out: dict[str, int] = {}
    for table in data.column("table").to_pylist():
        out[table] = out.get(table, 0) + 1
    return out


def reasons(data: pa.Table, table: str) -> list[tuple[str, int]]:
    """Why the changes of ``table`` in ``data`` (:func:`read`) were set aside: each reason
    with how many, the most frequent first (ties in the order first set aside)."""
    out: dict[str, int] = {}
    for name, reason in zip(data.column("table").to_pylist(),
                            data.column("reason").to_pylist(), strict=True):
        if name == table:
            out[reason] = out.get(reason, 0) + 1
    return sorted(out.items(), key=lambda item: -item[1])


def keys_of(data: pa.Table, table: str) -> list[Any]:
    """The keys (``{column: value}``, as recorded) of the changes of ``table`` in ``data``
    (:func:`read`), each once, in the order set aside."""
    import json

    out: dict[str, Any] = {}
    for name, key in zip(data.column("table").to_pylist(), data.column("key").to_pylist(),
                         strict=True):
        if name == table:
            out.setdefault(key, json.loads(key))
    return list(out.values())


_PLAIN_NAME = re.compile(r"[a-z_][a-z0-9_]*")


def where_of(keys: Sequence[Any]) -> str | None:
    """A ``--where`` condition selecting ``keys`` (:func:`keys_of`) in the source's SQL, for
    ``sdk snapshot``; None when a key column needs quoting or a value is not a plain number
    or text (then the records say what to select)."""
    if not keys or not all(isinstance(k, dict) for k in keys):
        return None
    columns = list(keys[0])
    if not all(_PLAIN_NAME.fullmatch(c) for c in columns) or \
            any(list(k) != columns for k in keys):
        return None

    def literal(value: Any) -> str | None:
        if isinstance(value, bool) or value is None:
            return None
        if isinstance(value, int | float):
            return repr(value)
        if isinstance(value, str):
            return "'" + value.replace("'", "''") + "'"
        return None

    rows = []
    for key in keys:
        values = [literal(key[c]) for c in columns]
        if any(v is None for v in values):
            return None
        rows.append(", ".join(v for v in values if v is not None))
    if len(columns) == 1:
        return f"{columns[0]} IN ({', '.join(rows)})"
    return f"({', '.join(columns)}) IN ({', '.join(f'({r})' for r in rows)})"


RETIRED = "retried"
"""Where :func:`retire` keeps the records of changes read again (not counted)."""


def retire(store: StateStore, table: str) -> int:
    """Move the records of ``table``'s changes set aside out of the dead-letter table (into
    its ``retried`` folder), once a snapshot of their rows is requested: a row read again is
    applied, or set aside again under a new record. How many were moved."""
    moved: list[pa.Table] = []
    for name in sorted(store.list_dir(FOLDER)):
        if not name.endswith(".parquet"):
            continue
        data = store.read_bytes(FOLDER, name)
        if data is None:
            continue
        records = pq.read_table(pa.BufferReader(data))
        mine = pc.equal(records.column("table"), table)
        if not pc.any(mine).as_py():
            continue
        moved.append(records.filter(mine))
        rest = records.filter(pc.invert(mine))
        if rest.num_rows:
            store.write_bytes(_parquet(rest), FOLDER, name)
        else:
            store.delete_file(FOLDER, name)
    if moved:
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S%f")
        store.write_bytes(_parquet(pa.concat_tables(moved)), FOLDER, RETIRED,
                          f"{stamp}-{_file_name(table)}.parquet")
    return sum(t.num_rows for t in moved)


def _parquet(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()
