"""Errors grouped by what the caller should do about them.

- :class:`ConfigurationError`: fix the options, the server settings or the install, then run again.
- :class:`FatalSyncError`: the run cannot continue from where it is (an expired log position,
  a lost replication slot); a new snapshot is needed.
- :class:`RetriableError`: a passing fault (a dropped connection); the same step may be retried.
- :class:`DataError`: a value the sync cannot carry; fix it at the source, or leave it out.
- :class:`ResourceError`: the machine ran out of disk space; free it, then run again.

Messages name the object at fault (table, column, option, setting, privilege) and the fix.
"""

from __future__ import annotations


class SdkError(Exception):
    """Root of every error this package raises on purpose."""


class ConfigurationError(SdkError):
    """A bad option, a missing driver, setting or privilege: the user must change something."""


class DialectNotFoundError(ConfigurationError):
    """No installed plugin serves the requested dialect."""


class DriverMissingError(ConfigurationError):
    """The dialect's plugin is installed but its database driver is not."""


class PluginValidationError(ConfigurationError):
    """A dialect plugin does not fit the contract in :mod:`sdk.dialect.hookspecs`."""


class PreflightError(ConfigurationError):
    """The source server is not configured for change capture; the message lists each fix."""


class MissingKeyError(ConfigurationError):
    """A table has neither a primary key nor a chosen non-null unique key to split and merge on."""


class SchemaChangedError(ConfigurationError):
    """A stream of one table's typed columns met a change of the table's columns it can
    follow: it stops there, and a restart of the query reads on with the new columns."""


class CheckpointDamagedError(ConfigurationError):
    """A checkpoint file cannot be read (cut short, not JSON, or a file it names is gone):
    the message names the file and the way out (a backup, or a new sync)."""


class SyncError(SdkError):
    """Something went wrong while reading or writing changes."""


class FatalSyncError(SyncError):
    """The sync cannot go on from its current position; retrying will not help."""


class OffsetExpiredError(FatalSyncError):
    """The log no longer holds the position to resume from (purged binlog, lost slot, ...)."""


class LogMismatchError(FatalSyncError):
    """The source is not the log the checkpoint follows: another server, or the same server
    with its log reset or restored from a backup. Reading on could skip changes silently."""


class RetriableError(SyncError):
    """A passing fault: the same step may be tried again."""


class ResourceError(SyncError):
    """The machine ran out of something the sync needs (space on the checkpoint's disk or in
    Spark's local directory): free it, then run again with the same checkpoint."""


class ReadOnlyError(SyncError):
    """A database refused a write because it is read-only (a standby, a read-only setting):
    point the URL at a writable server or lift the setting, then run again."""


class DataError(SyncError):
    """A value the sync cannot carry: out of range for Spark or the target, refused by the
    target's type, constraint or encoding. The message names the table, where in it (a split's
    keys, a log range) and the value."""


__all__ = [
    "CheckpointDamagedError",
    "ConfigurationError",
    "DataError",
    "DialectNotFoundError",
    "DriverMissingError",
    "FatalSyncError",
    "LogMismatchError",
    "MissingKeyError",
    "OffsetExpiredError",
    "PluginValidationError",
    "PreflightError",
    "ReadOnlyError",
    "ResourceError",
    "RetriableError",
    "SdkError",
    "SyncError",
]
