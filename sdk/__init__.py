"""sdk: a plugin-based change-data-capture SDK on Apache Spark.

Dialect plugin authors import everything they need from here: ``hookimpl``, the data types
and the errors. The contract itself is :mod:`sdk.hookspecs`.
"""

from .config import ConnectionConfig
from .dialects import Dialect, DialectManager, connect, get_dialect
from .errors import (
    ConfigurationError,
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
from .hookspecs import hookimpl
from .types import (
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

__version__ = "0.1.0"

__all__ = [
    "Capability",
    "ChangeEvent",
    "Column",
    "ConfigurationError",
    "Connection",
    "ConnectionConfig",
    "ConnectionSecurity",
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
