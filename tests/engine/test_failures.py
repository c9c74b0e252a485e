"""Every failure ends in a short summary a person can act on, with an exit code by its class
and the full trace in a file: errors raised on purpose, driver errors inside Spark tasks (with
where they happened), the JVM's, Ctrl-C."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sdk import ConfigurationError, LogMismatchError, OffsetExpiredError, PreflightError
from sdk.app.cli import main
from sdk.dialect.errors import DataError, RetriableError
from sdk.job.failures import Exit, doing, exit_code, summarize, write_trace

SPARK_TEXT = """\
[STREAM_FAILED] Query [id = 1] terminated with exception: Job aborted due to stage failure: \
Task 0 in stage 1.0 failed 1 times
org.apache.spark.api.python.PythonException: [PYTHON_EXCEPTION] An exception was thrown from \
the Python worker: Traceback (most recent call last):
  File "/x/sdk/spark/executor/reads.py", line 200, in read_splits
    yield from _read_splits(spec, partition)
  File "/x/psycopg/cursor.py", line 97, in execute
    raise ex.with_traceback(None)
psycopg.errors.UndefinedColumn: column "nope" does not exist
LINE 1: SELECT nope FROM items
sdk: while reading split public.items:3 (keys from (100,) to (200,))
\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException(x:1)
\tat scala.collection.Iterator$$anon$10.hasNext(Iterator.scala:611)
"""


def test_exit_codes_follow_what_the_person_should_do() -> None:
    assert exit_code(ConfigurationError("x")) == Exit.BAD_INPUT == 2
    assert exit_code(PreflightError("x")) == exit_code(LogMismatchError("x")) == \
        exit_code(OffsetExpiredError("x")) == exit_code(RetriableError("x")) == Exit.REFUSED
    assert exit_code(DataError("x")) == Exit.DATA == 4
    assert exit_code(RuntimeError("x")) == Exit.INTERNAL == 5
    assert exit_code(KeyboardInterrupt()) == Exit.INTERRUPTED == 130


def test_a_driver_error_in_a_task_is_summarized_with_where_it_happened() -> None:
    failure = summarize(RuntimeError(SPARK_TEXT))
    assert failure.message == ('while reading split public.items:3 (keys from (100,) to '
                               '(200,)): psycopg.errors.UndefinedColumn: column "nope" does '
                               'not exist')
    assert failure.code == Exit.INTERNAL and failure.traced


def test_an_error_raised_on_purpose_in_a_task_keeps_its_class() -> None:
    text = SPARK_TEXT.replace('psycopg.errors.UndefinedColumn: column "nope" does not exist',
                              "sdk.dialect.errors.OffsetExpiredError: binlog b.000001 was purged")
    failure = summarize(RuntimeError(text))
    assert isinstance(failure.error, OffsetExpiredError)
    assert failure.message == "binlog b.000001 was purged" and failure.code == Exit.REFUSED


def test_the_jvm_s_own_failures_name_the_next_step() -> None:
    failure = summarize(RuntimeError("py4j.protocol.Py4JJavaError: An error occurred\n"
                                     "Caused by: java.lang.OutOfMemoryError: Java heap space\n"
                                     "\tat java.base/java.util.Arrays.copyOf(x)"))
    assert failure.message.startswith("the JVM ran out of memory: give Spark more")
    assert failure.code == Exit.INTERNAL


def test_a_long_message_is_cut_to_one_readable_line() -> None:
    failure = summarize(ConfigurationError("value " + "x" * 2000 + "\nsecond line"))
    assert "\n" not in failure.message and len(failure.message) <= 1200
    failure = summarize(RuntimeError("x" * 2000))
    assert len(failure.message) <= 400
    assert failure.message.endswith("chars)")


def test_a_value_error_becomes_a_data_error_naming_where_and_what_to_do() -> None:
    expected = (r"^applying split t:0 to the target: OverflowError: too big: Spark or the "
                r"target cannot hold this value; fix it at the source or the target \(or leave "
                r"main.t out: --tables '...,!main.t'\), or run with --option errors.mode=skip")
    with pytest.raises(DataError, match=expected), \
            doing("applying split t:0 to the target", table="main.t", applying=True):
        raise OverflowError("too big")
    with pytest.raises(KeyError) as caught, doing("applying split t:0 to the target"):
        raise KeyError("k")  # others keep their class, with a note
    assert caught.value.__notes__ == ["sdk: while applying split t:0 to the target"]
    with pytest.raises(ConnectionError) as lost, \
            doing("reading", retriable=lambda e: isinstance(e, ConnectionError)):
        raise ConnectionError("reset")  # a passing fault is left to its handler
    assert not getattr(lost.value, "__notes__", None)


def test_the_advice_names_errors_mode_skip_only_where_it_sets_the_error_aside() -> None:
    """errors.mode=skip sets aside a value a read returns as a BadValue and a change the target
    refuses; a value a read raises on stops the read under either mode, and a refusal that
    comes out under skip was not set aside: neither is told to use it."""
    with pytest.raises(DataError) as split, doing("reading split t:0", table="main.t"):
        raise UnicodeDecodeError("utf-8", b"\xfc", 0, 1, "invalid start byte")
    assert "errors.mode=skip cannot set it aside" in str(split.value)
    assert "run with --option errors.mode=skip" not in str(split.value)
    assert "fix it at the source (or leave main.t out: --tables '...,!main.t')" in \
        str(split.value)
    with pytest.raises(DataError) as batch, doing("reading or applying the log batch of "
                                                  "state 3"):
        raise UnicodeDecodeError("utf-8", b"\xfc", 0, 1, "invalid start byte")
    assert "the log could not be read past this change" in str(batch.value)
    assert "run with --option errors.mode=skip" not in str(batch.value)
    with pytest.raises(DataError) as refused, \
            doing("applying split t:0 to the target", table="main.t", applying=True,
                  skips=True):
        raise OverflowError("too big")  # under errors.mode=skip already
    assert "run with --option errors.mode=skip" not in str(refused.value)
    assert "fix it at the source or the target" in str(refused.value)


def test_the_trace_file_masks_passwords(tmp_path: Path) -> None:
    try:
        raise RuntimeError("connect to mysql://cdc:s3cret-pw@db:3306/shop failed")
    except RuntimeError as exc:
        path = write_trace(exc, str(tmp_path))
    assert path is not None and path.parent == tmp_path / "logs"
    text = path.read_text()
    assert "s3cret-pw" not in text and "mysql://cdc:***@db:3306/shop" in text


def test_ctrl_c_is_one_line_and_exit_130(monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    def interrupted(args: Any) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr("sdk.app.cli.cmd_dialects", interrupted)
    assert main(["dialects"]) == 130
    assert capsys.readouterr().err == ("sdk: error: interrupted (a restart with the same "
                                       "--checkpoint resumes exactly)\n")


@pytest.mark.postgres
@pytest.mark.spark
@pytest.mark.slow
def test_a_value_spark_cannot_hold_ends_in_a_short_summary(
        spark: Any, postgres_admin: Any, postgres_url: str, postgres_admin_url: str,
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A timestamp PostgreSQL allows and Spark's TimestampType does not: the sync stops with
    the table, the split and the value, exit 4, the trace under the checkpoint."""
    postgres_admin.execute("DROP TABLE IF EXISTS far_ts")
    postgres_admin.execute("CREATE TABLE far_ts (id int PRIMARY KEY, at timestamptz)")
    postgres_admin.execute("INSERT INTO far_ts SELECT g, now() FROM generate_series(1, 50) g")
    postgres_admin.execute("INSERT INTO far_ts VALUES (1000, '294276-12-31 23:59:59+00')")
    postgres_admin.execute("ALTER TABLE far_ts OWNER TO sdk_cdc")
    checkpoint = tmp_path / "ck"
    source = f"{postgres_url}{'&' if '?' in postgres_url else '?'}slot=far&publication=far"
    try:
        assert main(["sync", "--source", source, "--target", f"sqlite:///{tmp_path}/m.db",
                     "--tables", "public.far_ts", "--checkpoint", str(checkpoint),
                     "--until", "caught-up"]) == Exit.DATA
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 2, err
        assert err[0].startswith("sdk: error: table public.far_ts, key 1000, column 'at': "
                                 "'294276-12-31 23:59:59+00' beyond what Spark's")
        assert "errors.mode=skip" in err[0]
        assert err[1].startswith(f"sdk: the full trace is in {checkpoint}/state/logs/")
        trace = Path(err[1].rsplit(" ", 1)[1]).read_text()
        assert "Traceback" in trace and "sdk_cdc:sdk_cdc" not in trace
    finally:
        with postgres_admin.cursor() as cur:
            cur.execute("SELECT pg_drop_replication_slot('far') WHERE EXISTS (SELECT 1 FROM "
                        "pg_replication_slots WHERE slot_name = 'far')")
        postgres_admin.execute("DROP PUBLICATION IF EXISTS far")
        postgres_admin.execute("DROP TABLE far_ts")


@pytest.mark.parametrize("error", [
    "psycopg", "pymysql", "sqlite3"])
def test_a_target_foreign_key_is_never_a_value_to_fix_at_the_source(error: str) -> None:
    """A foreign key of the target refusing a change (each driver's own error) stops with the
    fix that works, applying as a replica, and is no DataError (errors.mode=skip would set the
    change aside, and the advice would blame the source)."""
    import sqlite3

    import psycopg
    import pymysql

    exc: Exception = {
        "psycopg": psycopg.errors.ForeignKeyViolation(
            'insert or update on table "kids" violates foreign key constraint "kids_parent_fkey"'),
        "pymysql": pymysql.err.IntegrityError(
            1452, "Cannot add or update a child row: a foreign key constraint fails"),
        "sqlite3": sqlite3.IntegrityError("FOREIGN KEY constraint failed")}[error]
    with pytest.raises(ConfigurationError, match="SET ON PARAMETER session_replication_role") \
            as caught, doing("applying 3 changes of public.kids", applying=True):
        raise exc
    assert "at the source" not in str(caught.value).split(": a foreign key")[1]
    with pytest.raises(DataError, match="fix it at the source"), doing(
            "applying 1 change of public.t", applying=True):
        raise sqlite3.IntegrityError("CHECK constraint failed: no_seven")  # still a value
