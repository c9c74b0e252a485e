"""The Spark session ``sdk sync`` runs on: its driver JVM started quietly, in a session of its
own, from the class archive (:mod:`.jvmcache`), and early (:class:`EarlySession`). Light to
import: pyspark is imported when a session is made, so the CLI starts the JVM before it
imports the engine."""

from __future__ import annotations

import contextlib
import os
import pkgutil
import sys
import threading
from typing import Any

from .startup import jvmcache
from .startup.workers import python_for

DEFAULT_MASTER = "local[*]"
"""Spark master of a sync that names none: every core of this machine."""


def spark_session(master: str = DEFAULT_MASTER, rows_in_jvm: bool = True) -> Any:
    """A Spark session for the job, with ``format("cdc")`` available. Without
    ``rows_in_jvm`` (a chained sync: the tasks write the target, the JVM only schedules) the
    driver JVM compiles with C1 only: C2's compiler threads compete with the start-up for
    the cores and would optimise code that carries no rows. Nor does it generate code for
    its plans: the only rows it sees are the tasks' reports, and compiling their plans with
    Janino (whose jar is signed, so never in the class archive) delays the first snapshot
    tasks (docs/operations.md, "Measured costs")."""
    if "PYSPARK_PYTHON" not in os.environ:
        os.environ["PYSPARK_PYTHON"] = python_for(master)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    java_options = []
    if not rows_in_jvm and master.startswith("local"):
        java_options.append("-XX:TieredStopAtLevel=1")
    archive = jvmcache.for_this_machine() if _starts_jvm() else None
    if archive is not None:
        java_options += archive.java_options()
    if not os.environ.get("SDK_VERBOSE"):  # only errors from the JVM's logging
        java_options.append(f"-Dlog4j2.configurationFile=file:{_quiet_log4j()}")
    settings = {"spark.master": master, "spark.app.name": "sdk sync",
                "spark.ui.enabled": "false",
                "spark.ui.showConsoleProgress": "false",  # sdk sync reports progress
                "spark.sql.shuffle.partitions": "2", "spark.sql.session.timeZone": "UTC"}
    if not rows_in_jvm:
        settings["spark.sql.codegen.wholeStage"] = "false"
        settings["spark.sql.codegen.factoryMode"] = "NO_CODEGEN"
    if java_options:
        settings["spark.driver.extraJavaOptions"] = " ".join(java_options)
    _launch_jvm(settings, quiet=not os.environ.get("SDK_VERBOSE"))
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    # quiet: a failure reaches the command as the query's exception, which it summarizes
    # (the whole trace in a file); Spark's own log of it would be hundreds of lines before that
    spark.sparkContext.setLogLevel("ERROR" if os.environ.get("SDK_VERBOSE") else "OFF")
    if archive is not None:
        archive.build_later(spark)
    if not any(m.name == "pyspark_cdc" for m in pkgutil.iter_modules()):
        from . import register

        register(spark)
    return spark


def _import_converters() -> None:
    """Import what PySpark's py4j converters import at the first call that passes the JVM an
    object (``pyspark.testing.utils``, and with it pandas), while the driver JVM starts,
    rather than inside ``SparkContext()`` once it has."""
    with contextlib.suppress(Exception):  # only a missed head start: the converter imports it
        import pyspark.testing.utils  # noqa: F401


def jvm_rows(target: str | None, changes: str | None) -> bool:
    """Whether a sync's rows pass through its driver JVM: not when its tasks write the
    target themselves (a target and no change log: chained)."""
    return not (target is not None and changes is None)


class EarlySession:
    """:func:`spark_session` made on a thread of its own, so the driver JVM starts (~2-5 s)
    while the ``sdk sync`` command imports its engine and checks the source and the target
    (~0.5-1 s). A check that fails ends the command as before: it does not wait for the JVM,
    which ends by itself once the command has (it watches its standard input), and whose
    output goes through the command (:func:`_launch_jvm`). Made outside the main thread,
    the session installs no SIGINT handler of its own (``sdk sync`` installs its own)."""

    def __init__(self, master: str, rows_in_jvm: bool) -> None:
        """Start making the session (in a process with a JVM already, it is at hand at once)."""
        self._spark: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._make, args=(master, rows_in_jvm),
                                        name="sdk-spark-session", daemon=True)
        self._thread.start()

    def _make(self, master: str, rows_in_jvm: bool) -> None:
        try:
            self._spark = spark_session(master, rows_in_jvm)
        except BaseException as exc:  # raised where the session is asked for
            self._error = exc

    def session(self) -> Any:
        """The session, once made; its failure is raised here."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._spark


JVM_NOTICES = (b"WARNING: Using incubator modules",)
"""Lines the driver JVM prints on every start that say nothing to a user (Spark's launcher
always adds ``--add-modules=jdk.incubator.vector``)."""


def _starts_jvm() -> bool:
    """Whether the session about to be made starts its own driver JVM."""
    from pyspark import SparkContext

    return SparkContext._active_spark_context is None and SparkContext._gateway is None \
        and "PYSPARK_GATEWAY_PORT" not in os.environ


def _launch_jvm(settings: dict[str, str], quiet: bool = True) -> None:
    """Start the driver JVM in a session of its own, so a signal to the ``sdk`` command's
    process group (``kill -TERM -<pgid>``, a supervisor's stop) reaches the driver alone,
    which stops after the batch in flight, rather than also killing the JVM and its Python
    workers under it (the JVM still exits when the driver dies: it watches its standard
    input). Its output comes through pipes this process forwards, so a reader of the
    ``sdk`` command's output (``| tee``) is done when the command is, not when a JVM it left
    starting (an :class:`EarlySession` abandoned) ends. ``quiet``: its standard error drops
    :data:`JVM_NOTICES`. Nothing when a JVM runs already (a session started before, or a
    gateway given by ``PYSPARK_GATEWAY_PORT``)."""
    import subprocess

    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if not _starts_jvm():
        return
    conf = SparkConf(loadDefaults=True).setAll(list(settings.items()))
    threading.Thread(target=_import_converters, name="sdk-import", daemon=True).start()
    popen: dict[str, Any] = {"start_new_session": True, "stdout": subprocess.PIPE,
                             "stderr": subprocess.PIPE}
    gateway = launch_gateway(conf, popen_kwargs=popen)  # type: ignore[no-untyped-call]
    _forward(gateway.proc.stdout, "stdout")
    _forward(gateway.proc.stderr, "stderr", JVM_NOTICES if quiet else ())
    context = SparkContext(conf=conf, gateway=gateway)
    threading.Thread(target=_look_up_sources, args=(context._jvm,), name="sdk-lookup",
                     daemon=True).start()


def _look_up_sources(jvm: Any) -> None:
    """Have the new JVM look up the installed Python data sources (it imports every
    ``pyspark_*`` module in a Python worker of its own, once per JVM) while it makes
    the Spark session, rather than at the sync's first ``format("cdc")``, which waits for
    it. Best effort: Spark's internals may change, and the lookup then happens as before."""
    with contextlib.suppress(Exception):
        jvm.org.apache.spark.sql.execution.datasources.DataSourceManager() \
            .dataSourceExists("cdc")


def _forward(stream: Any, name: str, drop: tuple[bytes, ...] = ()) -> None:
    """Copy the JVM's ``stream`` to this process's ``sys.<name>``, as it is at each line (a
    caller may swap it, and close the one it swapped in), on a daemon thread; lines starting
    with one of ``drop`` are left out."""

    def forward() -> None:
        for line in iter(stream.readline, b""):
            if drop and line.startswith(drop):
                continue
            for target in (getattr(sys, name), getattr(sys, f"__{name}__")):
                try:
                    out = getattr(target, "buffer", None)
                    if out is not None:
                        out.write(line)
                        out.flush()
                    elif target is not None:
                        target.write(line.decode(errors="replace"))
                    break
                except (ValueError, OSError):  # closed, or a reader gone: drop the line
                    continue

    threading.Thread(target=forward, name=f"sdk-jvm-{name}", daemon=True).start()


_QUIET_LOG4J = """\
# sdk sync: no start-up notices from Spark and Hadoop (SDK_VERBOSE=1 / --verbose: Spark's own);
# WARN at the root, as the shell's default (else Spark says it sets it), is set to ERROR once
# the session runs
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = stderr
logger.utils.name = org.apache.spark.util.Utils
logger.utils.level = error
logger.native.name = org.apache.hadoop.util.NativeCodeLoader
logger.native.level = error
appender.stderr.type = Console
appender.stderr.name = stderr
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


def _quiet_log4j() -> str:
    """A log4j2 configuration that keeps the JVM's errors only (written once per user): no
    start-up notices ("Using Spark's default log4j profile", the loopback hostname, the native
    Hadoop library) before the sync's own output."""
    import tempfile
    from pathlib import Path

    path = Path(tempfile.gettempdir()) / f"sdk-{os.getuid()}" / "log4j2-quiet.properties"
    if not path.exists() or path.read_text() != _QUIET_LOG4J:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}")
        tmp.write_text(_QUIET_LOG4J)
        tmp.replace(path)
    return str(path)
