"""Every failure as a short summary a person can act on, an exit code by its class, and the
full trace kept in a file.

An error raised on purpose (:mod:`sdk.dialect.errors`) says what failed and the fix. Anything else
(a driver's error in a Spark task, the JVM out of memory, a lost executor, a bug) arrives
inside Spark's exception, whose text holds the Python worker's traceback and the JVM's: the
summary is the innermost Python exception with where it happened (a task adds an
``sdk: while ...`` note), or the JVM's root cause, cut to a readable length.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import os
import re
import tempfile
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path

from ..dialect import errors
from ..dialect.errors import (
    ConfigurationError,
    DataError,
    FatalSyncError,
    PreflightError,
    ReadOnlyError,
    ResourceError,
    RetriableError,
    SdkError,
)

MAX_LINE = 400
"""A summary line's longest for an error not raised on purpose (a driver's, the JVM's): a
value or a message cut past it."""
MAX_OWN = 1200
"""The same for an :mod:`sdk.dialect.errors` message, written to be read whole (its way back
last)."""
NOTE = "sdk: while "
"""How a task's note on a driver error starts (:func:`while_doing`)."""


class Exit(IntEnum):
    """``sdk``'s exit codes, by what the person should do (docs/operations.md)."""

    OK = 0
    NOT_READY = 1
    """``sdk check`` found a requirement missing; ``sdk status`` found no sync."""
    BAD_INPUT = 2
    """An option, URL, table pattern, privilege or install to fix."""
    REFUSED = 3
    """The source or target is not in a state the sync can go on from: not configured for
    capture, its log reset or purged, another server, unreachable for too long."""
    DATA = 4
    """A value the sync cannot carry (out of range, refused by the target)."""
    INTERNAL = 5
    """Anything else: the JVM, Spark, a bug; the trace file says more."""
    INTERRUPTED = 130


def exit_code(error: BaseException) -> Exit:
    """The exit code for ``error``."""
    if isinstance(error, KeyboardInterrupt):
        return Exit.INTERRUPTED
    if isinstance(error, DataError):
        return Exit.DATA
    if isinstance(error, PreflightError | FatalSyncError | RetriableError | ResourceError |
                  ReadOnlyError):
        return Exit.REFUSED
    if isinstance(error, SdkError):
        return Exit.BAD_INPUT
    return Exit.INTERNAL


@dataclass(frozen=True)
class Failure:
    """What a person is told: the error to show (an :class:`SdkError` when one is known) and
    whether the full trace is worth a file (not for an error raised on purpose before
    Spark ran, whose message is all there is)."""

    error: BaseException
    message: str
    traced: bool

    @property
    def code(self) -> Exit:
        return exit_code(self.error)


def summarize(error: BaseException) -> Failure:
    """The summary of ``error``: an :mod:`sdk.dialect.errors` error as it is; one raised in a Spark
    task found in Spark's exception text; else the innermost Python exception or the JVM's
    root cause."""
    if isinstance(error, KeyboardInterrupt):
        return Failure(error, "interrupted (a restart with the same --checkpoint resumes "
                              "exactly)", False)
    if isinstance(error, SdkError):
        cause = error.__cause__
        return Failure(error, _cut(str(error), MAX_OWN), cause is not None and
                       not isinstance(cause, SdkError))
    text = str(error)
    known = no_space(error, text) or read_only(text)
    if known is not None:
        return Failure(known, str(known), True)
    found = task_error(text)
    if found is not None:
        return Failure(found, _cut(str(found), MAX_OWN), True)
    python = _innermost_python(text)
    if python is not None:
        return Failure(error, _cut(python), True)
    return Failure(error, _cut(_jvm_cause(text) or f"{type(error).__name__}: "
                                                   f"{_first_line(text)}"), True)


_NO_SPACE = "No space left on device"


def no_space(error: BaseException, text: str) -> ResourceError | None:
    """The error to show when ``error`` (its text: ``text``, Spark's with the task's and the
    JVM's traces) is a disk that filled up, naming the file it could not write when known."""
    errors_seen = [error, *_causes(error)]
    if not any(isinstance(e, OSError) and e.errno == errno.ENOSPC for e in errors_seen) and \
            _NO_SPACE not in text:
        return None
    where = ""
    for e in errors_seen:
        if isinstance(e, OSError) and e.filename:
            where = f" (writing {e.filename})"
            break
    else:
        found = re.search(r"No space left on device[^/\n]*?(/[^\s'\"),]+)", text) or \
            re.search(r"(/[^\s'\"(),:]+)[^\n]{0,40}No space left on device", text)
        if found:
            where = f" (writing {found.group(1)})"
    return ResourceError(
        f"no space left on the device{where}: free space on the checkpoint's disk (or in "
        "Spark's local directory, spark.local.dir, /tmp by default), then run again with the "
        "same --checkpoint (it resumes exactly)")


_READ_ONLY = re.compile(r"[^\n]*(?:in a read-only transaction|running with the --read-only "
                        r"option|readonly database|database is read-only)[^\n]*")
"""How PostgreSQL, MariaDB/MySQL, SQLite and SQL Server say a write met a read-only
database."""


def read_only(text: str) -> ReadOnlyError | None:
    """The error to show when ``text`` (an error's, Spark's with the task's) says a database
    refused a write for being read-only."""
    found = _READ_ONLY.search(text)
    if found is None:
        return None
    # the database's words, without the class a traceback line names them by
    detail = _cut(re.sub(r"^(?:\w+\.)+\w+: ", "", found.group(0).strip()), 200)
    return ReadOnlyError(
        f"a database refused a write: it is read-only ({detail}): point the URL at a "
        "writable server (the primary, not a standby) or lift its read-only setting, then "
        "run again with the same --checkpoint")


def _causes(error: BaseException) -> list[BaseException]:
    """The errors ``error`` was raised from or while handling, innermost last."""
    out: list[BaseException] = []
    seen = error.__cause__ or error.__context__
    while seen is not None and len(out) < 10:
        out.append(seen)
        seen = seen.__cause__ or seen.__context__
    return out


def task_error(text: str) -> SdkError | None:
    """The :mod:`sdk.dialect.errors` error a task raised, out of the text of the exception Spark
    reports it in (the task's Python error arrives inside a JVM exception)."""
    for line in text.splitlines():
        found = re.search(r"sdk\.(?:dialect\.)?errors\.(\w+): (.+)", line)
        if found:
            kind = getattr(errors, found.group(1), None)
            if isinstance(kind, type) and issubclass(kind, SdkError):
                return kind(found.group(2).strip())
    return None


def _innermost_python(text: str) -> str | None:
    """The last Python traceback's exception line in ``text``, with the task's note on where
    it happened when there is one."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if "Traceback (most recent call last)" in line]
    if not starts:
        return None
    exception: str | None = None
    where: str | None = None
    for line in lines[starts[-1] + 1:]:
        stripped = line.strip()
        if exception is None:
            if line and not line[0].isspace() and re.match(r"[\w.]+(: |$)", stripped):
                exception = stripped
            continue
        if stripped.startswith(NOTE):
            where = stripped[len("sdk: "):]
            break
        if not stripped or stripped.startswith(("at ", "org.", "java.", "scala.")):
            break
    if exception is None:
        return None
    return f"{where}: {exception}" if where else exception


_JVM_HINTS = (
    ("java.lang.OutOfMemoryError", "the JVM ran out of memory: give Spark more "
                                   "(spark.driver.memory in $SPARK_CONF_DIR/spark-defaults.conf)"),
    ("ExecutorLostFailure", "a Spark executor was lost: see its log, then run again with the "
                            "same --checkpoint (it resumes exactly)"),
)


def _jvm_cause(text: str) -> str | None:
    for mark, hint in _JVM_HINTS:
        for line in text.splitlines():
            if mark in line:
                return f"{hint} ({line.strip()})"
    causes = [line.strip()[len("Caused by: "):] for line in text.splitlines()
              if line.strip().startswith("Caused by: ")]
    return causes[-1] if causes else None


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _cut(text: str, limit: int = MAX_LINE) -> str:
    """``text`` on one line, cut to ``limit`` characters."""
    line = " ".join(part.strip() for part in text.splitlines() if part.strip())
    return line if len(line) <= limit else line[:limit - 25] + f" ... ({len(line)} chars)"


def while_doing(error: BaseException, what: str) -> None:
    """Note on ``error`` (a driver's, in a task) what the task was doing: the table, the
    split's keys or the log range; the summary shows it."""
    if not any(note.startswith(NOTE) for note in getattr(error, "__notes__", ())):
        error.add_note(NOTE + what)


def is_data_error(error: BaseException) -> bool:
    """Whether ``error`` is about a value (a DB-API DataError or IntegrityError, a value out of
    a type's range, text that is not valid in its encoding)."""
    names = {kind.__name__ for kind in type(error).__mro__}
    return not is_constraint_error(error) and bool(
        names & {"DataError", "IntegrityError", "OverflowError", "UnicodeError",
                 "NumericValueOutOfRange", "InvalidDatetimeFormat"})


def is_constraint_error(error: BaseException) -> bool:
    """Whether ``error`` is a target's foreign key refusing a change: never a value's fault
    (the source checked its own keys), so neither a :class:`DataError` nor a change to set
    aside. Any driver's: PostgreSQL's ``ForeignKeyViolation``, an integrity error naming a
    foreign key (MySQL, SQLite)."""
    names = {kind.__name__ for kind in type(error).__mro__}
    return "ForeignKeyViolation" in names or (
        "IntegrityError" in names and "foreign key" in str(error).lower())


def full_trace(error: BaseException) -> str:
    """The Python traceback of ``error`` and its causes, then Spark's text where it has one,
    with any URL's password masked."""
    text = "".join(traceback.format_exception(error))
    return re.sub(r"(\b[a-z][\w+.-]*://[^:/@\s]+:)[^@\s]+@", r"\1***@", text)


def write_trace(error: BaseException, directory: str | None) -> Path | None:
    """Write :func:`full_trace` to a new file under ``directory`` (a checkpoint's ``logs``),
    else in the system's temporary directory; its path, or None when nothing could be
    written."""
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    for base in ([Path(directory) / "logs"] if directory else []) + \
            [Path(tempfile.gettempdir())]:
        try:
            base.mkdir(parents=True, exist_ok=True)
            path = base / f"sdk-error-{stamp}-{os.getpid()}.log"
            path.write_text(full_trace(error))
            return path
        except OSError:
            continue
    return None


@contextlib.contextmanager
def doing(what: str, retriable: Callable[[BaseException], bool] | None = None,
          table: object | None = None, applying: bool = False, skips: bool = False
          ) -> Iterator[None]:
    """Name what a task was doing on an error raised in the block: a value's error becomes a
    :class:`DataError` saying where and what to do; others (not a passing fault) get a note
    the summary shows. Errors raised on purpose pass as they are.

    The advice names only fixes that work there (:func:`_data_advice`): ``errors.mode=skip``
    sets aside a change the target refuses (the block is ``applying`` changes) unless it
    ``skips`` already, and a value a read returns as a :class:`~sdk.BadValue`; a value a
    read raises on stops the read under either mode (a split cannot be read past it, nor
    the log)."""
    try:
        yield
    except SdkError:
        raise
    except Exception as exc:
        if retriable is not None and retriable(exc):
            raise
        if applying and is_constraint_error(exc):
            raise ConfigurationError(
                f"{what}: {type(exc).__name__}: {_cut(str(exc))}: a foreign key of the target "
                "refused a change the source made (the source checked its own keys; its "
                "cascaded deletes are in its log): let the sync apply as a replica does "
                "(PostgreSQL: GRANT SET ON PARAMETER session_replication_role TO the target "
                "user; docs/operations.md, 'Reading the target while it syncs'), or drop the "
                "constraint at the target; then run again with the same --checkpoint") from exc
        if is_data_error(exc):
            raise DataError(f"{what}: {type(exc).__name__}: {_cut(str(exc))}: "
                            f"{_data_advice(table, applying, skips)}") from exc
        while_doing(exc, what)
        raise


def _data_advice(table: object | None, applying: bool, skips: bool) -> str:
    """What to do about a value's error raised while reading ``table`` (when known), or the
    log, or while ``applying`` changes to the target (``skips``: under ``errors.mode=skip``)."""
    leave_out = f" (or leave {table} out: --tables '...,!{table}')" if table else ""
    again = "then run again with the same --checkpoint"
    if applying and not skips:
        return (f"Spark or the target cannot hold this value; fix it at the source or the "
                f"target{leave_out}, or run with --option errors.mode=skip to set such changes "
                f"aside; {again}")
    if applying:
        return (f"Spark or the target cannot hold this value, and errors.mode=skip did not set "
                f"it aside; fix it at the source or the target{leave_out}; {again}")
    if table:
        return (f"the source's value could not be read, so errors.mode=skip cannot set it "
                f"aside; fix it at the source{leave_out}; {again}")
    return ("the log could not be read past this change, so errors.mode=skip cannot set it "
            "aside; leave its table out (--tables '...,!<table>') and run again with the same "
            "--checkpoint, or start a new sync (a new --checkpoint: a new snapshot)")
