"""Finding, validating and calling dialect plugins.

:class:`DialectManager` loads the plugins registered in the ``sdk.dialects`` entry-point group,
checks each against :mod:`sdk.dialect.hookspecs`, and hands out :class:`Dialect` facades. A facade
calls the hooks of its own plugin only, directly (no fan-out to other dialects, no per-call pluggy
dispatch: ``compare_offset`` runs once per change event). A dialect's capabilities are the ones
its optional hooks give (:data:`sdk.dialect.hookspecs.CAPABILITY_HOOKS`) and the ones it declares in
``dialect_info`` (:data:`sdk.dialect.hookspecs.DECLARED_CAPABILITIES`: ``before_images``,
``schema_changes`` and ``filtered_reads``, which no hook shows; older plugins declare the rest
too).

Operator switches:

- ``SDK_DISABLE_PLUGINS=a,b``: do not load these entry points.
- ``SDK_TRACE_HOOKS=1``: log every hook call and its duration at INFO on logger ``sdk.hooks``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import importlib.util
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from functools import cached_property
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

import pluggy

from . import hookspecs
from .config import ConnectionConfig, name_schemes_with
from .errors import (
    ConfigurationError,
    DialectNotFoundError,
    DriverMissingError,
    PluginValidationError,
    RetriableError,
    SdkError,
)
from .options import Option, OptionTable
from .types import (
    Capability,
    ChangeEvent,
    Connection,
    ConnectionSecurity,
    DialectInfo,
    Key,
    LogItem,
    Offset,
    Requirement,
    Row,
    SnapshotSplit,
    SnapshotView,
    TableId,
    TableSchema,
    TableStats,
)

if TYPE_CHECKING:
    import pyarrow as pa

    from .checksum import Checksum

ENTRY_POINT_GROUP = "sdk.dialects"

#: Dialects that ship inside the ``sdk`` wheel, with the extra that installs their driver.
BUILTIN_EXTRAS = {"mysql": "mysql", "postgres": "postgres", "oracle": "oracle",
                  "sqlserver": "sqlserver", "sqlite": None, "delta": "delta",
                  "iceberg": "iceberg"}

log = logging.getLogger(__name__)
trace_log = logging.getLogger("sdk.hooks")


@dataclass(frozen=True)
class DialectStatus:
    """One line of ``sdk dialects``: an installed dialect, and whether it can be used here."""

    name: str
    info: DialectInfo | None
    problem: str | None

    @property
    def usable(self) -> bool:
        return self.problem is None


class DialectManager:
    """Loads dialect plugins and hands out one :class:`Dialect` per name."""

    def __init__(self, *, load_entry_points: bool = True) -> None:
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self._schemes: dict[str, str] = {}
        """The dialect each URL scheme met selected."""
        self.pm.add_hookspecs(hookspecs)
        self._broken: dict[str, str] = {}
        self._dialects: dict[str, Dialect] = {}
        self._unloaded = load_entry_points
        """Entry points not loaded yet: :meth:`get` loads only the one it is asked for (a Spark
        worker needs one or two dialects, and importing all of them costs each worker time),
        the listings and URL lookups load them all."""
        self._loading = threading.RLock()
        """Held while entry points load: a thread asking for a dialect while another loads
        them all waits for it, instead of finding the dialect missing (or registering it
        twice, which marks it broken)."""

    def _load_entry_points(self, only: str | None = None) -> None:
        with self._loading:
            if not self._unloaded:
                return
            self._unloaded = only is not None
            disabled = {n.strip() for n in os.environ.get("SDK_DISABLE_PLUGINS", "").split(",")}
            for ep in entry_points(group=ENTRY_POINT_GROUP):
                if ep.name in disabled or self.pm.has_plugin(ep.name) or \
                        ep.name in self._broken or only not in (None, ep.name):
                    continue
                try:
                    plugin = ep.load()
                    self.register(plugin, ep.name)
                except Exception as exc:  # a broken third-party plugin must not break others
                    self._broken[ep.name] = f"failed to load {ep.value!r}: {exc}"
                    log.warning("dialect plugin %r not loaded: %s", ep.name, exc)

    def register(self, plugin: object, name: str) -> None:
        """Register ``plugin`` as dialect ``name`` and validate it against the contract.

        Raises :class:`PluginValidationError` (and registers nothing) when it does not fit.
        """
        self.pm.register(plugin, name=name)
        try:
            self._validate(plugin, name)
        except Exception:
            self.pm.unregister(name=name)
            raise
        self._dialects.pop(name, None)

    def unregister(self, name: str) -> None:
        """Remove dialect ``name`` (tests register throwaway dialects)."""
        self.pm.unregister(name=name)
        self._dialects.pop(name, None)

    def _validate(self, plugin: object, name: str) -> None:
        try:
            self.pm.check_pending()
        except pluggy.PluginValidationError as exc:
            raise PluginValidationError(f"dialect plugin {name!r}: {exc}") from None
        impls = _impls_of(self.pm, name)
        info = impls["dialect_info"]() if "dialect_info" in impls else None
        required = hookspecs.TARGET_ONLY_HOOKS if getattr(info, "target_only", False) \
            else hookspecs.REQUIRED_HOOKS
        missing = [hook for hook in required if hook not in impls]
        if missing:
            raise PluginValidationError(
                f"dialect plugin {name!r} ({plugin!r}) lacks required hook(s): "
                f"{', '.join(missing)}; see sdk/dialect/hookspecs.py")
        for capability, absent in hookspecs.half_implemented(impls).items():
            given = [h for h in hookspecs.CAPABILITY_HOOKS[capability] if h not in absent]
            raise PluginValidationError(
                f"dialect plugin {name!r} implements {', '.join(given)} but lacks "
                f"{', '.join(absent)}: capability {capability.value} needs both or neither")
        if not isinstance(info, DialectInfo):
            raise PluginValidationError(
                f"dialect plugin {name!r}: dialect_info() must return sdk.DialectInfo, "
                f"got {type(info).__name__}")
        if info.name != name:
            raise PluginValidationError(
                f"dialect plugin registered as {name!r} says its name is {info.name!r}; "
                "the entry-point name and DialectInfo.name must be the same")
        for capability in sorted(info.capabilities - hookspecs.capabilities_of(impls)):
            if capability in hookspecs.CAPABILITY_HOOKS:
                log.warning("dialect plugin %r declares capability %s without its hook(s) %s",
                            name, capability.value,
                            ", ".join(hookspecs.CAPABILITY_HOOKS[capability]))

    @property
    def names(self) -> list[str]:
        """Names of the dialects that loaded, sorted."""
        self._load_entry_points()
        return sorted(name for name, _ in self.pm.list_name_plugin())

    def statuses(self) -> list[DialectStatus]:
        """Every installed dialect (and every built-in one that is not), with what it lacks."""
        self._load_entry_points()
        out: dict[str, DialectStatus] = {}
        for name in self.names:
            info = self.get_info(name)
            missing = [m for m in info.drivers if importlib.util.find_spec(m) is None]
            problem = f"driver missing: {_install_hint(info)}" if missing else None
            out[name] = DialectStatus(name, info, problem)
        for name, problem in self._broken.items():
            out[name] = DialectStatus(name, None, problem)
        for name, extra in BUILTIN_EXTRAS.items():
            if name not in out and extra:
                out[name] = DialectStatus(name, None,
                                          f"plugin not found; pip install 'sdk[{extra}]'")
        return [out[name] for name in sorted(out)]

    def get_info(self, name: str) -> DialectInfo:
        """Dialect ``name``'s ``dialect_info``, with the capabilities its hooks give added to
        the declared ones."""
        if not self.pm.has_plugin(name):  # not loaded yet: URLs load the dialect they name
            self._load_entry_points(only=name)
        impls = _impls_of(self.pm, name)
        info: DialectInfo = impls["dialect_info"]()
        return dataclasses.replace(
            info, capabilities=info.capabilities | hookspecs.capabilities_of(impls))

    def dialect_for_url(self, url: str) -> tuple[Dialect, ConnectionConfig]:
        """The dialect a URL's scheme selects, and the parsed URL, its options checked against
        those the dialect declares."""
        config = ConnectionConfig.from_url(url)
        name = self.name_for_scheme(config.dialect)
        dialect = self.get(name)
        check_url_options(self.get_info(name), config)
        return dialect, config

    def name_for_scheme(self, scheme: str) -> str:
        """The dialect a URL scheme selects: the one it names, or the one declaring it among
        its ``url_schemes``; the scheme itself when none does (the lookup then says so)."""
        name = self._schemes.get(scheme)
        if name is None:  # stable for the process: a worker parses URLs at every batch
            name = self._named_like(scheme) or next(
                (n for n in self.names if scheme in self.get_info(n).url_schemes or
                 scheme.split("+")[0] in self.get_info(n).url_schemes), scheme.split("+")[0])
            if self.pm.has_plugin(name):  # one registered later may declare an unknown one
                self._schemes[scheme] = name
        return name

    def _named_like(self, scheme: str) -> str | None:
        """The dialect named ``scheme`` (a URL's, its aliases resolved), or whose name is the
        longest start of it and which declares it (``delta+file`` -> ``delta``): loaded alone,
        where a look among all dialects imports every plugin (in each of the Spark workers
        that resolve a sync's URLs one after another as its query starts). None: look among
        them all."""
        names = {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)}
        names.update(name for name, _ in self.pm.list_name_plugin())
        name = max((n for n in names if scheme.startswith(n)), key=len, default=None)
        if name is None:
            return None
        try:
            self.get(name)
        except SdkError:  # not installed as it should be: the lookup among all says why
            return None
        return name if name == scheme or scheme in self.get_info(name).url_schemes else None

    def source_for_url(self, url: str) -> tuple[Dialect, ConnectionConfig]:
        """:meth:`dialect_for_url` for a sync's source: a target-only dialect is refused."""
        dialect, config = self.dialect_for_url(url)
        if dialect.info.target_only:
            raise ConfigurationError(
                f"dialect {dialect.name!r} ({dialect.info.title}) is a sync target only: "
                "it cannot be read from. Give it as the target (--target, option target)")
        return dialect, config

    def get(self, name: str) -> Dialect:
        """The facade for dialect ``name``.

        Raises :class:`DialectNotFoundError` naming what is installed and what to install, or
        :class:`DriverMissingError` naming the extra when the plugin is there but not its driver.
        """
        if name in self._dialects:
            return self._dialects[name]
        if not self.pm.has_plugin(name):
            self._load_entry_points(only=name)
        if not self.pm.has_plugin(name):
            self._load_entry_points()
        if not self.pm.has_plugin(name):
            installed = ", ".join(self.names) or "none"
            if name in self._broken:
                raise DialectNotFoundError(f"dialect plugin {name!r} {self._broken[name]}")
            hint = (f"try: pip install 'sdk[{BUILTIN_EXTRAS[name]}]'"
                    if BUILTIN_EXTRAS.get(name) else
                    f"a third-party dialect registers in the {ENTRY_POINT_GROUP!r} "
                    "entry-point group")
            raise DialectNotFoundError(
                f"no plugin for dialect {name!r}; installed: {installed}; {hint}")
        info = self.get_info(name)
        missing = [m for m in info.drivers if importlib.util.find_spec(m) is None]
        if missing:
            raise DriverMissingError(
                f"dialect {name!r} needs the driver module(s) {', '.join(missing)}: "
                f"{_install_hint(info)}")
        raw = _raw_impls_of(self.pm, name)
        fn, argnames = raw.get("compare_offset", (None, ()))  # a target-only one has none
        fast_compare = fn if argnames == ("a", "b") and not os.environ.get("SDK_TRACE_HOOKS") \
            else None
        dialect = Dialect(name, info, _impls_of(self.pm, name), fast_compare)
        self._dialects[name] = dialect
        return dialect


def _install_hint(info: DialectInfo) -> str:
    if info.extra:
        return f"pip install 'sdk[{info.extra}]'"
    return f"install {', '.join(info.drivers)}"


def _impls_of(pm: pluggy.PluginManager, plugin_name: str) -> dict[str, Callable[..., Any]]:
    """The hook implementations of one plugin, as plain callables taking spec keyword args."""
    return {hook: _bind(fn, argnames, hook, plugin_name)
            for hook, (fn, argnames) in _raw_impls_of(pm, plugin_name).items()}


def _raw_impls_of(pm: pluggy.PluginManager, plugin_name: str
                  ) -> dict[str, tuple[Callable[..., Any], tuple[str, ...]]]:
    plugin = pm.get_plugin(plugin_name)
    out: dict[str, tuple[Callable[..., Any], tuple[str, ...]]] = {}
    for hook_name in hookspecs.CONTRACT:
        for impl in getattr(pm.hook, hook_name).get_hookimpls():
            if impl.plugin is plugin:
                out[hook_name] = (impl.function, impl.argnames)
    return out


def _bind(fn: Callable[..., Any], argnames: tuple[str, ...], hook: str, dialect: str
          ) -> Callable[..., Any]:
    """Adapt an implementation that may take a subset of the spec's arguments."""
    def call(**kwargs: Any) -> Any:
        return fn(*[kwargs[a] for a in argnames])

    if os.environ.get("SDK_TRACE_HOOKS"):
        def traced(**kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return call(**kwargs)
            finally:
                trace_log.info("%s.%s(%s) %.1f ms", dialect, hook,
                               ", ".join(f"{k}={v!r}" for k, v in kwargs.items()
                                         if k != "config"),
                               (time.perf_counter() - t0) * 1000)
        return traced
    return call


def _get_dialect(name: str) -> Dialect:
    return default_manager().get(name)


class Dialect:
    """Typed access to one dialect's hooks.

    Pickles by name: an executor unpickles it by loading the plugin again, so it can travel
    inside a Spark partition.
    """

    def __init__(self, name: str, info: DialectInfo, impls: dict[str, Callable[..., Any]],
                 fast_compare: Callable[[Offset, Offset], int] | None = None):
        self.name = name
        self.info = info
        self._impls = impls
        self._fast_compare = fast_compare

    def __reduce__(self) -> tuple[Any, ...]:
        return (_get_dialect, (self.name,))

    def __repr__(self) -> str:
        return f"<Dialect {self.name}>"

    def implements(self, hook: str) -> bool:
        """Whether the plugin implements the (optional) hook ``hook``."""
        return hook in self._impls

    def has(self, capability: Capability) -> bool:
        """Whether the dialect has ``capability``: its hooks give it, or it declares it."""
        return capability in self.info.capabilities

    def _call(self, hook: str, **kwargs: Any) -> Any:
        try:
            impl = self._impls[hook]
        except KeyError:
            raise ConfigurationError(
                f"dialect {self.name!r} does not implement {hook!r}") from None
        return impl(**kwargs)

    def connect(self, config: ConnectionConfig) -> Connection:
        conn: Connection = self._call("connect", config=config)
        return conn

    def preflight(self, conn: Connection, tables: Sequence[TableId]) -> list[Requirement]:
        if not self.implements("preflight"):
            return []
        result: list[Requirement] = self._call("preflight", conn=conn, tables=tables)
        return result

    def prepare_capture(self, conn: Connection, tables: Sequence[TableSchema]) -> None:
        if self.implements("prepare_capture"):
            self._call("prepare_capture", conn=conn, tables=tables)

    def table_identities(self, conn: Connection, tables: Sequence[TableId]
                         ) -> dict[TableId, str]:
        """The incarnation tokens of ``tables`` (none without the hook)."""
        if not self.implements("table_identities") or not tables:
            return {}
        result: dict[TableId, str] = self._call("table_identities", conn=conn,
                                                tables=list(tables))
        return result

    def list_tables(self, conn: Connection) -> list[TableId]:
        result: list[TableId] = self._call("list_tables", conn=conn)
        return result

    def describe_table(self, conn: Connection, table: TableId) -> TableSchema:
        result: TableSchema = self._call("describe_table", conn=conn, table=table)
        return result

    def table_stats(self, conn: Connection, table: TableSchema) -> TableStats:
        """The plugin's statistics, or none (keys unknown: the planner cuts by index seeks)."""
        if not self.implements("table_stats"):
            return TableStats(None, None, 0)
        result: TableStats = self._call("table_stats", conn=conn, table=table)
        return result

    def next_boundary(self, conn: Connection, table: TableSchema, start: Key | None,
                      size: int) -> Key | None:
        result: Key | None = self._call("next_boundary", conn=conn, table=table, start=start,
                                        size=size)
        return result

    def current_offset(self, conn: Connection) -> Offset:
        result: Offset = self._call("current_offset", conn=conn)
        return result

    def read_range(self, conn: Connection, table: TableSchema, split: SnapshotSplit,
                   fetch_size: int = 4096) -> Iterator[Sequence[Row]]:
        result: Iterator[Sequence[Row]] = self._call(
            "read_range", conn=conn, table=table, split=split, fetch_size=fetch_size)
        return result

    def stream_log(self, conn: Connection, tables: Sequence[TableSchema], start: Offset,
                   end: Offset | None) -> Iterator[LogItem]:
        result: Iterator[LogItem] = self._call(
            "stream_log", conn=conn, tables=tables, start=start, end=end)
        return result

    @cached_property
    def compare_offset(self) -> Callable[[Offset, Offset], int]:
        """``compare_offset(a, b)``: the plugin's function itself, for the per-event path."""
        if self._fast_compare is not None:
            return self._fast_compare
        impl = self._impls["compare_offset"]
        return lambda a, b: impl(a=a, b=b)

    @cached_property
    def same_transaction(self) -> Callable[[Offset, Offset], bool] | None:
        """``same_transaction(a, b)``: the plugin's hook, or None without it (every change
        its own transaction)."""
        impl = self._impls.get("same_transaction")
        if impl is None:
            return None
        return lambda a, b: bool(impl(a=a, b=b))

    def begin_snapshot(self, conn: Connection, token: str | None = None) -> SnapshotView | None:
        if not self.implements("begin_snapshot"):
            return None
        result: SnapshotView | None = self._call("begin_snapshot", conn=conn, token=token)
        return result

    def end_snapshot(self, conn: Connection) -> None:
        if self.implements("end_snapshot"):
            self._call("end_snapshot", conn=conn)

    def earliest_offset(self, conn: Connection) -> Offset | None:
        result: Offset | None = self._call("earliest_offset", conn=conn)
        return result

    def offset_at_time(self, conn: Connection, timestamp: dt.datetime) -> Offset | None:
        result: Offset | None = self._call("offset_at_time", conn=conn, timestamp=timestamp)
        return result

    def is_retriable(self, error: BaseException) -> bool:
        """Whether the dialect calls ``error`` a passing fault (False when it cannot say)."""
        if isinstance(error, RetriableError):
            return True
        if not self.implements("is_retriable"):
            return False
        return bool(self._call("is_retriable", error=error))

    @contextlib.contextmanager
    def passing_faults(self) -> Iterator[None]:
        """Raise the driver errors this dialect calls passing (``is_retriable``) as
        :class:`RetriableError`, named so: in the text Spark reports of a failed task, the name
        marks the failure as one ``sdk sync`` retries from its checkpoint."""
        try:
            yield
        except SdkError:
            raise
        except Exception as exc:
            if self.is_retriable(exc):
                raise RetriableError(f"{self.name}: {type(exc).__name__}: {exc}") from exc
            raise

    def server_identity(self, conn: Connection) -> dict[str, str]:
        """The plugin's identity of the server and its log; empty when it gives none."""
        if not self.implements("server_identity"):
            return {}
        result: dict[str, str] = self._call("server_identity", conn=conn)
        return {str(k): str(v) for k, v in (result or {}).items()}

    def check_offset(self, conn: Connection, offset: Offset) -> None:
        if self.implements("check_offset"):
            self._call("check_offset", conn=conn, offset=offset)

    def locate_offset(self, conn: Connection, offset: Offset, source: Mapping[str, str]
                      ) -> Offset | None:
        """Where ``conn``'s server holds ``offset`` of the log of server ``source`` (its
        identity); None when the offset carries nothing to find it by (see the hook; callers
        check ``implements``)."""
        result: Offset | None = self._call("locate_offset", conn=conn, offset=offset,
                                           source=source)
        return result

    def connection_security(self, conn: Connection) -> list[ConnectionSecurity]:
        if not self.implements("connection_security"):
            return []
        result: list[ConnectionSecurity] = self._call("connection_security", conn=conn)
        return list(result or [])

    def acknowledge_offset(self, conn: Connection, offset: Offset) -> None:
        if self.implements("acknowledge_offset"):
            self._call("acknowledge_offset", conn=conn, offset=offset)

    def create_table(self, conn: Connection, table: TableSchema) -> None:
        self._call("create_table", conn=conn, table=table)

    def alter_table(self, conn: Connection, old: TableSchema, new: TableSchema) -> None:
        self._call("alter_table", conn=conn, old=old, new=new)

    def applied_tables(self, conn: Connection, tables: Sequence[TableSchema]
                       ) -> dict[TableId, bool]:
        result: dict[TableId, bool] = self._call("applied_tables", conn=conn, tables=tables)
        return result

    def target_preflight(self, conn: Connection, tables: Sequence[TableSchema]
                         ) -> list[Requirement]:
        """The target user's rights to mirror into ``tables``; none without the hook."""
        if not self.implements("target_preflight"):
            return []
        result: list[Requirement] = self._call("target_preflight", conn=conn, tables=tables)
        return result

    def trim_ledger(self, conn: Connection, table: TableSchema, low: str, high: str) -> None:
        """The ledger's rows of ``table`` with batch ids in ``[low, high)`` deleted; nothing
        without the hook."""
        if self.implements("trim_ledger"):
            self._call("trim_ledger", conn=conn, table=table, low=low, high=high)

    def apply_changes(self, conn: Connection, table: TableSchema,
                      events: Sequence[ChangeEvent], batch_id: str) -> bool:
        result: bool = self._call("apply_changes", conn=conn, table=table, events=events,
                                  batch_id=batch_id)
        return result

    def apply_transaction(self, conn: Connection) -> AbstractContextManager[object]:
        """The target transaction the apply hooks on ``conn`` join until its block ends; a
        block that changes nothing without the hook (each apply commits by itself)."""
        if not self.implements("apply_transaction"):
            return contextlib.nullcontext()
        result: AbstractContextManager[object] = self._call("apply_transaction", conn=conn)
        return result

    def checksum_range(self, conn: Connection, table: TableSchema, split: SnapshotSplit
                       ) -> Checksum | None:
        """The server's checksum of ``split``; None without the hook or for this table."""
        if not self.implements("checksum_range"):
            return None
        result: Checksum | None = self._call("checksum_range", conn=conn, table=table,
                                             split=split)
        return result

    def row_hashes(self, conn: Connection, table: TableSchema, split: SnapshotSplit
                   ) -> Iterator[tuple[Key, int]] | None:
        """The server's key and hash of each row of ``split``; None as :meth:`checksum_range`."""
        if not self.implements("row_hashes"):
            return None
        result: Iterator[tuple[Key, int]] | None = self._call("row_hashes", conn=conn,
                                                              table=table, split=split)
        return result

    def read_target_range(self, conn: Connection, table: TableSchema, split: SnapshotSplit,
                          fetch_size: int = 4096) -> Iterator[Sequence[Row]]:
        """A target table's rows in ``split`` as the source's ``read_range`` gave them: the
        hook, else ``read_range`` (a target storing the values as they are)."""
        if not self.implements("read_target_range"):
            return self.read_range(conn, table, split, fetch_size)
        result: Iterator[Sequence[Row]] = self._call(
            "read_target_range", conn=conn, table=table, split=split, fetch_size=fetch_size)
        return result

    def read_range_arrow(self, conn: Connection, table: TableSchema, split: SnapshotSplit
                         ) -> pa.Table | None:
        if not self.implements("read_range_arrow"):
            return None
        result: pa.Table | None = self._call("read_range_arrow", conn=conn, table=table,
                                             split=split)
        return result

    def load_snapshot(self, conn: Connection, table: TableSchema, rows: pa.Table,
                      batch_id: str) -> bool:
        result: bool = self._call("load_snapshot", conn=conn, table=table, rows=rows,
                                  batch_id=batch_id)
        return result


_default: DialectManager | None = None
_creating = threading.Lock()


def default_manager() -> DialectManager:
    """The process-wide manager over the installed entry points, created on first use (once,
    when threads ask at the same time)."""
    global _default
    if _default is None:
        with _creating:
            if _default is None:
                _default = DialectManager()
    return _default


def get_dialect(name: str) -> Dialect:
    """The installed dialect ``name`` (see :meth:`DialectManager.get`)."""
    return default_manager().get(name)


name_schemes_with(lambda scheme: default_manager().name_for_scheme(scheme))


def connect(url: str) -> tuple[Dialect, Connection, ConnectionConfig]:
    """Choose the dialect from ``url``'s scheme and open a connection with it."""
    dialect, config = default_manager().dialect_for_url(url)
    return dialect, dialect.connect(config), config


def check_url_options(info: DialectInfo, config: ConnectionConfig) -> None:
    """Refuse a URL option the dialect does not read, naming the closest one it does."""
    if info.url_options is None:
        return
    names = {name for name, _ in info.url_options}
    for name in config.options:
        if name not in names:  # exact: a dialect reads its options by their exact names
            known = OptionTable(*(Option(n, n, str, None, help, "dialect")
                                  for n, help in info.url_options))
            raise ConfigurationError(f"{info.name} URL: {known.unknown(name)}")
