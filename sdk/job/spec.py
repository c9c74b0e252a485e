"""What a sync reads and how it runs: the source and ``sdk sync`` options, parsed and checked,
then the tables resolved and the source prepared. No Spark here (``sdk check`` and
``sdk status`` use it without starting one).

Every option is checked before anything touches the source: a bad ``parallelism=abc`` fails
before a replication slot or a trigger is created.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..algorithm import SyncOptions, choose_key
from ..algorithm.machine import splits_per_batch
from ..algorithm.schema import POLICIES
from ..algorithm.settings import OPTIONS as ALGORITHM_OPTIONS
from ..algorithm.settings import StartupMode
from ..dialect.config import ConnectionConfig
from ..dialect.errors import ConfigurationError, PreflightError
from ..dialect.manager import Dialect, default_manager, get_dialect
from ..dialect.options import Option, OptionTable, boolean, choice, positive_int, text
from ..dialect.types import Capability, Connection, Offset, TableId, TableSchema
from .tables import named_table, parse_patterns, select_tables
from .target import Target

log = logging.getLogger(__name__)


def _milliseconds(value: str) -> float:
    return positive_int(value) / 1000


def _interval(value: str) -> float:
    """Milliseconds, 0 for never, as seconds."""
    millis = int(value)
    if millis < 0:
        raise ValueError(f"must be 0 (never) or more milliseconds, got {value!r}")
    return millis / 1000


def _port(value: str) -> int:
    port = int(value)
    if not 0 < port < 65536:  # 0 (any free port) is for tests, not a flag
        raise ValueError(f"a TCP port is 1..65535, not {port}")
    return port


def _seconds(value: str) -> float:
    seconds = float(value)
    if seconds < 0:
        raise ValueError(f"must be 0 or more seconds, got {value!r}")
    return seconds


SOURCE_OPTIONS = OptionTable(
    Option("url", "url", text, None, "source database URL (`?password_env=` / "
           "`?password_file=` keep the password out of it)", "source", (), "required"),
    Option("tables", "tables", text, "*", "include/exclude patterns, e.g. "
           "`shop.*, !shop.audit_*`", "source", (), "all"),
    Option("state.dir", "state_dir", text, None, "where split stages, state files and "
           "progress live (storage the driver and executors share)", "source", (),
           "required for streams", ("stateDir",)),
    Option("envelope", "envelope", boolean, False, "force the multi-table envelope for one "
           "table", "source"),
    Option("snapshot.batch.rows", "batch_rows", positive_int, 2_000_000,
           "rows a snapshot micro-batch hands out (split size x splits): each batch pays "
           "Spark's fixed costs and waits for its slowest task once, each task still holds one "
           "split; progress counts a batch's splits as they finish", "source"),
    Option("snapshot.splits-per-batch", "splits_per_batch", positive_int, None,
           "splits in one snapshot micro-batch, instead of `snapshot.batch.rows`", "source", (),
           "from `snapshot.batch.rows`"),
    Option("parallelism", "parallelism", positive_int, 8,
           "tasks of a snapshot batch (`spark.read`) or micro-batch (each task reads several "
           "of its splits, one after another)", "source"),
    Option("target", "target", text, None, "a target database URL: each task applies what it "
           "reads there itself, exactly once (source and sink chained in one task, no rows "
           "through Spark); the stream then carries each task's report: `table`, `applied`, "
           "`committed`", "source", (), "none"),
    Option("target.schema", "target_schema", text, None, "schema (database) of the target "
           "tables with `target`", "source", (), "the source table's", ("targetSchema",)),
    Option("apply.consistency", "apply_consistency", choice("transaction", "table"),
           "transaction", "how a log batch commits at a `target`: `transaction` commits all "
           "of it, every table, at once (a reader of the target sees a state the source had, "
           "from one source commit to a later one; targets with the `transactions` "
           "capability), `table` commits each table's changes on their own", "source"),
    Option("log.poll-interval.ms", "head_poll_seconds", _milliseconds, 0.5,
           "how often an idle stream asks the source for its log head (milliseconds); "
           "`sdk sync` starts a batch at most this often",
           "source", (), "500"),
    Option("tables.discovery-interval.ms", "discovery_seconds", _interval, 10.0,
           "how often a stream in its log phase looks for tables that newly match `tables` "
           "(snapshotted while the log flows, then streamed) and captured tables gone from "
           "the source or the patterns (they leave the capture); 0: never. Needs the "
           "envelope (more than one table, or `envelope=true`) or a `target`", "source", (),
           "10000"),
    Option("schema.changes", "schema_changes", choice(*POLICIES), "evolve",
           "when a captured table's columns change in the log (dialects with "
           "`schema_changes`): `evolve` follows it (a target's table is altered the same "
           "way, the envelope carries the new columns, a table with new columns is read "
           "again), `stop` ends with an error naming it, `ignore` keeps the columns the sync "
           "has; a change that could lose values (a narrowed type, a new key) always stops",
           "source"),
    Option("log.batch.changes", "log_batch_changes", positive_int, 100_000,
           "the most changes one log micro-batch reads (a backlog is caught up in batches of "
           "this size: progress, rate and lag show between them, and a crash reads one batch "
           "again, not the backlog)", "source"),
    Option("log.batch.bytes", "log_batch_bytes", positive_int, 256 * 1024 * 1024,
           "about the most bytes of changes one log micro-batch reads (estimated from the "
           "values of a sample of its changes): a backlog of wide rows is cut into batches "
           "of about this size, as `log.batch.changes` cuts one of narrow rows", "source",
           (), "268435456 (256 MiB)"),
    Option("errors.mode", "errors_mode", choice("fail", "skip"), "fail",
           "what a change the sync cannot carry does (a value beyond what Spark or the target "
           "holds, a row the target refuses): `fail` stops with one line naming its table, "
           "key, column and position; `skip` sets it aside in the dead-letter table (Parquet "
           "under the state directory's `dead-letter`, counted by `sdk status`, the display "
           "and the metrics) and applies the rest. Needs a `state.dir`", "source"),
    Option("cores", "cores", positive_int, None, "tasks Spark runs at once (`sdk sync` sets "
           "it from its session): `snapshot.rows-per-second` is shared by that many",
           "source", (), "the batch's tasks"),
    Option("preflight.advice", "advice", choice("log", "quiet"), "log",
           "whether the query logs the source's preflight advice when it starts (what would "
           "make the capture more complete, e.g. PostgreSQL's REPLICA IDENTITY FULL; with many "
           "tables the first few and a count): `sdk sync` logs it once itself and sets "
           "`quiet`", "source"),
    Option("resolved", "resolved", text, None,
           "the token of the tables `sdk sync` resolved before starting the query (written "
           "to `resolved.json` in the state directory): the query reads them there instead "
           "of listing, describing and preparing every table again", "source"),
)
"""Options of the ``cdc`` source itself (the rest are the algorithm's)."""

READER_OPTIONS = SOURCE_OPTIONS + ALGORITHM_OPTIONS
"""Everything ``format("cdc")`` and ``sdk sync --option`` accept."""

UNTIL = ("snapshot", "caught-up", "never")

HEAD_START = choice("auto", "on", "off", aliases={
    "true": "on", "1": "on", "yes": "on", "false": "off", "0": "off", "no": "off"})
"""The ``head-start`` setting's parser (the flag, the YAML key, ``SDK_HEAD_START``)."""

SYNC_OPTIONS = OptionTable(
    Option("source", "source", text, None, "source database URL", "sync", (), "required"),
    Option("target", "target", text, "sqlite:///sdk-mirror.db",
           "target database URL to mirror into; `none` for no mirror", "sync"),
    Option("changes", "changes", text, None, "also keep every change as Parquet under this "
           "path (any path Spark writes: local, hdfs://, s3a://)", "sync"),
    Option("tables", "tables", text, "*", "include/exclude patterns, e.g. "
           "`shop.*,!shop.audit_*`", "sync", (), "all"),
    Option("checkpoint", "checkpoint", text, "sdk-checkpoint", "directory for the checkpoint "
           "and state; run again with it to resume", "sync"),
    Option("until", "until", choice(*UNTIL), "never", "when to stop: `snapshot`, "
           "`caught-up` or `never` (follow until Ctrl-C / SIGTERM)", "sync"),
    Option("target.schema", "target_schema", text, None, "schema (database) for the target "
           "tables", "sync", deprecated=("target_schema",)),
    Option("master", "master", text, "local[*]", "Spark master (`local[*]`: every core of "
           "this machine)", "sync"),
    Option("retry.seconds", "retry_seconds", _seconds, 300.0, "once running, restart from "
           "the checkpoint after a passing fault of the source or target for up to this many "
           "seconds of failure (0: stop at the first)", "sync", deprecated=("retry_seconds",)),
    Option("metrics.port", "metrics_port", _port, None, "serve Prometheus metrics at "
           "http://<host>:PORT/metrics while the sync runs", "sync",
           deprecated=("metrics_port",)),
    Option("head-start", "head_start", HEAD_START, None,
           "whether the driver runs the first micro-batches itself, in worker processes of its "
           "own, while Spark starts (a `--target` without `--changes`, a local master, Linux, "
           "a local checkpoint): `auto` for `--until snapshot` or `caught-up` (run whole, "
           "Spark never starts unless it falls short), `on` for `never` too, `off` never. "
           "Unset: the environment's `SDK_HEAD_START`, else `auto`", "sync", (), "auto"),
)
"""``sdk sync``'s settings: each is a YAML key and a ``--flag`` (its name, ``.`` written ``-``:
``--target-schema``); the source and algorithm options go in ``--option KEY=VALUE`` / the YAML
``options`` mapping."""


def sync_flag(option: Option) -> str:
    """The ``sdk sync`` flag of a setting of :data:`SYNC_OPTIONS`."""
    return "--" + option.name.replace(".", "-")


def checkpoint_paths(checkpoint: str) -> tuple[str, str]:
    """``sdk sync``'s state directory and Spark checkpoint under ``checkpoint``: a local path
    (made absolute) or a URI the state store and Spark both take (``file://``, ``s3a://``,
    ``hdfs://``), kept as it is. A local path a file stands in the way of is refused, naming
    the file."""
    if "://" in checkpoint:
        # options (an S3 endpoint) are pyarrow.fs's, after the state part; Hadoop takes none
        base, mark, query = checkpoint.partition("?")
        base = base.rstrip("/")
        return f"{base}/state{mark}{query}", f"{base}/checkpoint"
    root = Path(checkpoint).absolute()
    state, spark = root / "state", root / "checkpoint"
    place = file_in_the_way(state) or file_in_the_way(spark)
    if place == root:
        raise ConfigurationError(f"checkpoint {root} is a file, not a directory: give the "
                                 "path of a directory (a missing one is created)")
    if place is not None:
        raise ConfigurationError(
            f"checkpoint {root} cannot be used: {place} is a file, not a directory")
    return str(state), str(spark)


def file_in_the_way(path: Path) -> Path | None:
    """The file at ``path`` or above it that keeps a directory from being there (None when
    none does): a few ``stat`` calls, so a bad path reads as one line naming it, not as the
    file system's error from deep in a run."""
    for place in (path, *path.parents):
        if place.exists():
            return None if place.is_dir() else place
    return None


@dataclass
class SourceSpec:
    """Everything a reader needs, resolved once on the driver and shipped to tasks."""

    dialect: str
    config: ConnectionConfig
    tables: list[TableSchema]
    options: SyncOptions
    envelope: bool
    state_dir: str | None
    splits_per_batch: int
    parallelism: int
    head_poll_seconds: float
    envelope_forced: bool = False
    cores: int | None = None
    """Tasks that run at once, when known (``snapshot.rows-per-second`` is shared by them)."""
    """``envelope=true`` was given (else the envelope is used for more than one table)."""
    target: Target | None = None
    """Where the tasks apply what they read themselves (option ``target``), if anywhere."""
    patterns: str = "*"
    """The include/exclude table patterns the tables were chosen by."""
    discovery_seconds: float = 0.0
    """How often a stream looks for tables that newly match ``patterns`` (0: never)."""
    schema_changes: str = "evolve"
    """What a log batch does when a table's columns change
    (:data:`sdk.algorithm.schema.POLICIES`)."""
    log_batch_changes: int = 100_000
    """The most changes one log batch reads; its task cuts the batch there."""
    log_batch_bytes: int = 256 * 1024 * 1024
    """About the most bytes of changes one log batch reads
    (``sdk.spark.executor.reads.BatchSize``)."""
    errors_mode: str = "fail"
    """What a change the sync cannot carry does: stop (``fail``) or go to the dead-letter
    table (``skip``; see :mod:`sdk.spark.executor.deadletter`)."""
    apply_consistency: str = "transaction"
    """How a log batch commits at a target (:attr:`sdk.job.target.Target.consistency`)."""

    @property
    def follows_tables(self) -> bool:
        """Whether a stream adds and removes tables as the source and patterns change: its
        output must be able to carry any table (the envelope or a target's reports)."""
        return bool(self.state_dir) and self.discovery_seconds > 0 and \
            (self.envelope or self.target is not None)

    @property
    def dialect_obj(self) -> Dialect:
        return get_dialect(self.dialect)

    def connect(self) -> Connection:
        return self.dialect_obj.connect(self.config)

    def table_map(self) -> dict[TableId, TableSchema]:
        return {t.table: t for t in self.tables}

    def schema_of(self, table: TableId) -> TableSchema:
        """The schema of ``table``, looked up by identity (never by position)."""
        for schema in self.tables:
            if schema.table == table:
                return schema
        raise ConfigurationError(f"table {table} is not among this source's tables")


@dataclass
class ParsedOptions:
    """The reader options checked, before anything touches the source."""

    dialect: Dialect
    config: ConnectionConfig
    tables: str
    options: SyncOptions
    source: dict[str, Any]


def parse_options(options: Mapping[str, str]) -> ParsedOptions:
    """Check every reader option (names, values, the URL and its dialect); no side effect."""
    if not any(name.lower() == "url" for name in options):
        raise ConfigurationError('the cdc source needs option("url", "<database URL>")')
    source = {**SOURCE_OPTIONS.defaults(), **READER_OPTIONS.parse(options, "source")}
    sync_options = SyncOptions.from_strings(options, READER_OPTIONS)
    dialect, config = default_manager().source_for_url(source["url"])
    return ParsedOptions(dialect, config, source["tables"], sync_options, source)


def resolve(options: Mapping[str, str], schemas: list[TableSchema] | None = None,
            before_prepare: BeforePrepare | None = None, prepare: bool = True) -> SourceSpec:
    """Parse the reader options, discover the tables, check and prepare the source (calling
    ``before_prepare`` first; not without ``prepare``: :func:`prepare_source` does it later);
    with ``schemas`` (the tables resolved from the same options just before), only the
    first."""
    parsed = parse_options(options)
    dialect, config = parsed.dialect, parsed.config
    if parsed.source["errors_mode"] == "skip" and not parsed.source["state_dir"]:
        raise ConfigurationError("errors.mode=skip needs option state.dir: the changes set "
                                 "aside are kept there (its dead-letter folder)")
    if schemas is None:
        prepare = prepare and needs_capture(dialect, parsed.options)
        with dialect.passing_faults():
            schemas = discover(dialect, config, parsed.tables, parsed.options,
                               parsed.source["advice"] == "log", before_prepare, prepare)
    source = parsed.source
    return SourceSpec(
        dialect=dialect.name, config=config, tables=schemas, options=parsed.options,
        envelope=source["envelope"] or len(schemas) > 1, state_dir=source["state_dir"],
        splits_per_batch=source["splits_per_batch"] or
        splits_per_batch(source["batch_rows"], parsed.options.split_size),
        parallelism=source["parallelism"],
        head_poll_seconds=source["head_poll_seconds"], envelope_forced=source["envelope"],
        cores=source["cores"], patterns=parsed.tables,
        discovery_seconds=source["discovery_seconds"],
        schema_changes=source["schema_changes"], errors_mode=source["errors_mode"],
        log_batch_changes=source["log_batch_changes"],
        log_batch_bytes=source["log_batch_bytes"],
        apply_consistency=source["apply_consistency"],
        target=Target.of(source["target"], source["target_schema"],
                         source["apply_consistency"]) if source["target"] else None)


def chosen_tables(dialect: Dialect, conn: Connection, config: ConnectionConfig,
                  patterns: str) -> list[TableId]:
    """The source's tables that ``patterns`` select; none is an error."""
    parsed, listed = parse_patterns(patterns), dialect.list_tables(conn)
    try:
        chosen = select_tables(listed, parsed)
    except ConfigurationError:
        _refuse_unreadable(dialect, conn, parsed, listed)
        raise
    if not chosen:
        raise ConfigurationError(f"{patterns!r} matches no table in {config.masked_url}")
    return chosen


def _refuse_unreadable(dialect: Dialect, conn: Connection, patterns: list[str],
                       listed: list[TableId]) -> None:
    """Name the missing privilege and its fix when a pattern naming one table found none
    because this user may not read it (a listing shows only tables the user holds a privilege
    on): the dialect's preflight says so in its ``SELECT on <table>`` check. Run on this error
    path only; a preflight that cannot tell leaves the error as it was."""
    named = {p: t for p in patterns if (t := named_table(p)) is not None and t not in listed}
    if not named:
        return
    try:
        checks = dialect.preflight(conn, list(named.values()))
    except Exception:  # the first error is the one to report
        log.debug("preflight of %s failed", list(named.values()), exc_info=True)
        return
    failed = {r.name: r for r in checks if not r.ok}
    for pattern, table in named.items():
        check = failed.get(f"SELECT on {table}")
        if check is not None:
            raise ConfigurationError(
                f"table pattern {pattern!r} matches no table this user may read: it lacks "
                f"SELECT on {table}; as an administrator: {check.fix}")


def _refuse_revoked(dialect: Dialect, conn: Connection, gone: list[TableId]) -> None:
    """Captured tables gone from the listing that the preflight says this user may not
    ``SELECT``: hidden from it (MySQL lists only what a user holds a privilege on), not
    dropped; the sync stops naming the GRANT instead of letting them leave, their mirror
    stale. A table dropped for real passes (its grant, or the database's, is still there)."""
    if not gone:
        return
    try:
        checks = dialect.preflight(conn, gone)
    except Exception:  # the listing's verdict stands
        log.debug("preflight of %s failed", gone, exc_info=True)
        return
    failed = {r.name: r for r in checks if not r.ok}
    revoked = [(t, failed[f"SELECT on {t}"]) for t in gone if f"SELECT on {t}" in failed]
    if revoked:
        raise ConfigurationError(
            "; ".join(f"captured table {t} is gone from what this user may list: it lacks "
                      f"SELECT on it (revoked?); as an administrator: {check.fix}"
                      for t, check in revoked)
            + " (a table dropped for real leaves the sync by itself)")


BeforePrepare = Callable[[Dialect, Connection, list[TableSchema]], None]
"""Called with the chosen tables just before their capture is prepared (a resumed sync
records there what preparing may undo)."""


def discover(dialect: Dialect, config: ConnectionConfig, patterns: str,
             sync_options: SyncOptions, advise: bool = True,
             before_prepare: BeforePrepare | None = None, prepare: bool = True
             ) -> list[TableSchema]:
    """The chosen tables' schemas, their capture prepared and the source's preflight passed
    (its advice logged when ``advise``; neither without ``prepare``). Keys are chosen before
    capture is prepared, so a table without one changes nothing."""
    conn = dialect.connect(config)
    try:
        chosen = chosen_tables(dialect, conn, config, patterns)
        schemas = [choose_key(dialect.describe_table(conn, t), sync_options) for t in chosen]
        if prepare:
            if before_prepare is not None:
                before_prepare(dialect, conn, schemas)
            _prepare(dialect, conn, config, schemas, advise)
    finally:
        conn.close()
    return schemas


ADVICE_SHOWN = 3
"""Preflight advice logged in full when a sync starts; the rest (one per table, often) is
counted, and ``sdk check`` lists it all."""


def needs_capture(dialect: Dialect, options: SyncOptions, snapshot_only: bool = False) -> bool:
    """Whether a read under ``options`` reads the log, and so needs its capture prepared: not
    one that snapshots and stops (a batch read, ``snapshot_only``, or ``startup.mode=
    snapshot``) in consistent views, whose splits read no log (a slot made for it would pin
    the WAL for good)."""
    snapshot_only = snapshot_only or options.startup_mode is StartupMode.SNAPSHOT
    return not (snapshot_only and options.atomic_snapshot
                and dialect.has(Capability.ATOMIC_SNAPSHOT))


def prepare_source(spec: SourceSpec, before_prepare: BeforePrepare | None = None,
                   advise: bool = True) -> None:
    """Prepare the capture of ``spec``'s tables (resolved without) and pass the source's
    preflight, its advice logged when ``advise``."""
    dialect = spec.dialect_obj
    conn = dialect.connect(spec.config)
    try:
        with dialect.passing_faults():
            tables = list(spec.tables)
            if before_prepare is not None:
                before_prepare(dialect, conn, tables)
            _prepare(dialect, conn, spec.config, tables, advise)
    finally:
        conn.close()


def _prepare(dialect: Dialect, conn: Connection, config: ConnectionConfig,
             schemas: list[TableSchema], advise: bool = True) -> None:
    """Prepare the capture of ``schemas`` and pass the source's preflight for them; its
    advice is logged when ``advise``."""
    dialect.prepare_capture(conn, schemas)
    checks = dialect.preflight(conn, [s.table for s in schemas])
    advice = [r for r in checks if not r.ok and not r.required]
    if advise:
        shown = advice if len(advice) <= ADVICE_SHOWN + 1 else advice[:ADVICE_SHOWN]
        for item in shown:
            log.warning("%s: %s", config.masked_url, item)
        if len(shown) < len(advice):
            log.warning("%s: %d more preflight warnings like these: `sdk check --source <url> "
                        "--tables <patterns>` lists each with its fix", config.masked_url,
                        len(advice) - len(shown))
    missing = [r for r in checks if not r.ok and r.required]
    if missing:
        raise PreflightError(f"{config.masked_url} is not ready for change capture:\n"
                             + "\n".join(str(r) for r in missing))


@dataclass
class TableChanges:
    """What a look at the source found: tables to add (their capture prepared) and captured
    tables gone, with the log offset they leave at (read after the listing)."""

    added: list[TableSchema]
    gone: list[TableId]
    at: Offset | None
    identities: dict[TableId, str] = field(default_factory=dict)
    """The incarnation token of each captured table still there (``table_identities``)."""


class TableWatch:
    """Looks, every ``spec.discovery_seconds``, for tables that newly match a running sync's
    patterns and for captured tables that no longer exist or match. A new table that cannot
    be captured (no key, a preflight failure) is skipped with one warning, not retried."""

    def __init__(self, spec: SourceSpec) -> None:
        self.spec = spec
        self._next = 0.0
        self.skipped: dict[TableId, str] = {}

    def look(self, conn: Connection, captured: Mapping[TableId, TableSchema],
             leaving: Collection[TableId] = ()) -> TableChanges | None:
        """The changes against ``captured``, or None when it is not time to look yet."""
        now = time.monotonic()
        if now < self._next:
            return None
        self._next = now + self.spec.discovery_seconds
        spec, dialect = self.spec, self.spec.dialect_obj
        listed = select_tables(dialect.list_tables(conn), parse_patterns(spec.patterns))
        present = set(listed)
        gone = [t for t in captured if t not in present and t not in leaving]
        _refuse_revoked(dialect, conn, gone)
        at = dialect.current_offset(conn) if gone else None  # after the listing: past the drop
        identities = dialect.table_identities(
            conn, [t for t in captured if t in present and t not in leaving])
        added = []
        for table in listed:
            if table in captured or table in self.skipped:
                continue
            try:
                schema = choose_key(dialect.describe_table(conn, table), spec.options)
                _prepare(dialect, conn, spec.config, [schema])
            except ConfigurationError as exc:
                self.skipped[table] = str(exc)
                log.warning("new table %s is not captured: %s", table, exc)
                continue
            added.append(schema)
        return TableChanges(added, gone, at, identities)

    def due(self) -> None:
        """Look at the next call of :meth:`look`, whatever the interval."""
        self._next = 0.0

    def prepare_again(self, conn: Connection, table: TableSchema) -> None:
        """Prepare the capture of ``table`` again (a table dropped and created again under
        its name: a publication, say, holds the old one no more)."""
        _prepare(self.spec.dialect_obj, conn, self.spec.config, [table], advise=False)


_SYNC_DEFAULTS = SYNC_OPTIONS.defaults()


@dataclass(frozen=True)
class SyncSettings:
    """One sync's settings: a field per setting of :data:`SYNC_OPTIONS`, defaulting as it
    declares, and the reader's ``options`` (the ``cdc`` source's and the algorithm's, as
    strings); :func:`sync_settings` makes one from YAML keys and flags, checked."""

    source: str
    target: str | None = _SYNC_DEFAULTS["target"]
    """Where to mirror into; None: no mirror (``--target none``)."""
    tables: str = _SYNC_DEFAULTS["tables"]
    checkpoint: str = _SYNC_DEFAULTS["checkpoint"]
    until: str = _SYNC_DEFAULTS["until"]
    options: Mapping[str, str] = field(default_factory=dict)
    master: str = _SYNC_DEFAULTS["master"]
    target_schema: str | None = _SYNC_DEFAULTS["target_schema"]
    changes: str | None = _SYNC_DEFAULTS["changes"]
    retry_seconds: float = _SYNC_DEFAULTS["retry_seconds"]
    metrics_port: int | None = _SYNC_DEFAULTS["metrics_port"]
    head_start: str | None = _SYNC_DEFAULTS["head_start"]
    """``auto``, ``on`` or ``off``; None: the environment's ``SDK_HEAD_START``, else off."""


def sync_settings(values: Mapping[str, Any], options: Mapping[str, str]) -> SyncSettings:
    """``sdk sync``'s settings: ``values`` (YAML keys or flags; None: not given) over their
    defaults, and the reader ``options`` with every name checked."""
    given = {k: str(v) for k, v in values.items() if v is not None}
    settings = {**_SYNC_DEFAULTS, **SYNC_OPTIONS.parse(given)}
    READER_OPTIONS.check_names(options)
    if not settings["source"]:
        raise ConfigurationError("sdk sync needs --source (or source: in --config)")
    if settings["target"] == "none":
        settings["target"] = None
    return SyncSettings(**settings, options=dict(options))
