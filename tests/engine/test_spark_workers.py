"""The launcher Spark starts its Python workers with (sdk/spark/startup/workers.py): it drops
Spark's own pyspark and py4j zips from the worker's path and keeps everything else, and it is
used only where those zips are the installed pyspark, on a local master."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyspark
import pytest

from sdk.spark.startup.workers import python_for, worker_python

LIB = Path(pyspark.__file__).parent / "python" / "lib"


@pytest.mark.skipif(os.name != "posix", reason="the launcher is a POSIX shell script")
def test_the_launcher_imports_pyspark_from_site_packages_and_keeps_other_paths(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPARK_HOME", raising=False)
    launcher = worker_python()
    assert launcher != sys.executable
    zips = sorted(str(p) for p in LIB.glob("*.zip"))
    assert any(z.endswith("pyspark.zip") for z in zips) and any("py4j" in z for z in zips)
    mine = tmp_path / "user's *libs"  # a space, a quote, a star, as a user's path may have
    mine.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*zips, str(mine)])}
    out = subprocess.run(
        [launcher, "-c", "import sys, pyspark, py4j; print(pyspark.__file__); "
                         "print(py4j.__file__); print(sys.executable); print(sys.path)"],
        env=env, capture_output=True, text=True, check=True).stdout.splitlines()
    assert ".zip" not in out[0] and ".zip" not in out[1]
    assert Path(out[0]).parent == Path(pyspark.__file__).parent
    assert out[2] == sys.executable
    assert str(mine) in out[3] and not any(z in out[3] for z in zips)


def test_a_spark_distribution_keeps_the_plain_interpreter(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARK_HOME", str(tmp_path))  # its zips may be another pyspark
    assert worker_python() == sys.executable


@pytest.mark.skipif(os.name != "posix", reason="the launcher is a POSIX shell script")
def test_executors_on_a_cluster_run_the_interpreter_not_this_machines_launcher(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPARK_HOME", raising=False)
    assert python_for("local[2]") == worker_python() != sys.executable
    for master in ("spark://10.0.0.5:7077", "yarn", "k8s://https://api:6443"):
        assert python_for(master) == sys.executable


def test_the_warm_up_leaves_a_core_to_the_stream_start() -> None:
    from sdk.spark.startup.warmup import warm_tasks

    assert [warm_tasks(cores) for cores in (1, 2, 8)] == [1, 1, 7]


@pytest.mark.spark
@pytest.mark.slow
def test_warmed_workers_serve_the_next_tasks_with_the_dialects_imported(spark: Any) -> None:
    """The warm-up job leaves a worker per core that imported the engine and the dialects
    named; the next Python data source tasks run on those very workers (no import left)."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from sdk.spark.startup.warmup import warm, warm_workers

    class Probe(DataSource):
        @classmethod
        def name(cls) -> str:
            return "sdk_probe"

        def schema(self) -> str:
            return "pid int, loaded boolean, frozen boolean"

        def reader(self, schema: Any) -> DataSourceReader:
            return ProbeReader()

    class ProbeReader(DataSourceReader):
        def partitions(self) -> list[InputPartition]:
            return [InputPartition(0), InputPartition(1)]

        def read(self, partition: InputPartition) -> Any:
            import gc
            import os
            import sys

            yield (os.getpid(), "sdk_sqlite" in sys.modules and "pandas" in sys.modules,
                   gc.get_freeze_count() > 10_000)

    cores = spark.sparkContext.defaultParallelism
    thread = warm_workers(spark, cores, ["sqlite"])
    thread.join(120)
    assert not thread.is_alive()
    spark.dataSource.register(Probe)
    warmed = warm(spark, cores, ["sqlite"])  # the same workers again: they are all idle
    assert len(warmed) == cores
    probed = spark.read.format("sdk_probe").load().collect()
    assert {r.pid for r in probed} <= warmed
    assert all(r.loaded and r.frozen for r in probed)


def test_the_warm_up_imports_each_dialects_drivers_ahead_of_its_first_connection() -> None:
    """A plugin imports its driver when it first connects (``sdk --help`` stays quick); a
    worker's warm-up imports the drivers its ``DialectInfo`` lists before that."""
    probe = ("import sys; from sdk.spark.startup.warmup import load_dialects; "
             "print('psycopg' in sys.modules, end=' '); load_dialects(['postgres']); "
             "print('psycopg' in sys.modules and 'sdk_postgres' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False", "True"]
