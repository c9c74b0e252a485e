"""sdk: a plugin-based change-data-capture SDK on Apache Spark.

Dialect plugin authors import everything they need from here: ``hookimpl``, the data types
and the errors. The contract itself is :mod:`sdk.dialect.hookspecs`.
"""

from importlib import metadata as _metadata

from . import _moved
from .dialect.checksum import Checksum
from .dialect.config import ConnectionConfig
from .dialect.errors import (
    ConfigurationError,
    DataError,
    DialectNotFoundError,
    DriverMissingError,
    FatalSyncError,
    LogMismatchError,
    MissingKeyError,
    OffsetExpiredError,
    PluginValidationError,
    PreflightError,
    RetriableError,
    SdkError,
    SyncError,
)
from .dialect.hookspecs import hookimpl
from .dialect.manager import Dialect, DialectManager, connect, get_dialect
from .dialect.types import (
    BadValue,
    Capability,
    ChangeEvent,
    Column,
    Connection,
    ConnectionSecurity,
    DialectInfo,
    FinishedSplit,
    Heartbeat,
    Key,
    LogicalType,
    LogItem,
    Offset,
    Op,
    Requirement,
    Row,
    SchemaChange,
    SnapshotSplit,
    SnapshotView,
    TableId,
    TableSchema,
    TableStats,
    TableTruncated,
)

_moved.install()

try:
    __version__ = _metadata.version("sdk")
    """This release, from the repository's tags (``sdk --version``; recorded in checkpoints)."""
except _metadata.PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "BadValue",
    "Capability",
    "ChangeEvent",
    "Checksum",
    "Column",
    "ConfigurationError",
    "Connection",
    "ConnectionConfig",
    "ConnectionSecurity",
    "DataError",
    "Dialect",
    "DialectInfo",
    "DialectManager",
    "DialectNotFoundError",
    "DriverMissingError",
    "FatalSyncError",
    "FinishedSplit",
    "Heartbeat",
    "Key",
    "LogItem",
    "LogMismatchError",
    "LogicalType",
    "MissingKeyError",
    "Offset",
    "OffsetExpiredError",
    "Op",
    "PluginValidationError",
    "PreflightError",
    "Requirement",
    "RetriableError",
    "Row",
    "SchemaChange",
    "SdkError",
    "SnapshotSplit",
    "SnapshotView",
    "SyncError",
    "TableId",
    "TableSchema",
    "TableStats",
    "TableTruncated",
    "connect",
    "get_dialect",
    "hookimpl",
]
