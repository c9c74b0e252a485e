"""A standalone Spark cluster on this machine: the master and workers the pyspark wheel ships
(``spark-class``), bound to 127.0.0.1 on free ports, each worker with its own work and
temporary directories. Each is stopped by the PID it was started with; a worker can be killed
with its executors (a machine lost) and started again."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from helpers.instances import free_port


def spark_home() -> Path:
    """The Spark distribution inside the pyspark wheel."""
    import pyspark

    return Path(pyspark.__file__).parent


@dataclass
class SparkCluster:
    """A master and its workers (one core each), all under ``root``."""

    root: Path
    port: int
    ui_port: int
    master: subprocess.Popen[bytes] | None = None
    workers: list[subprocess.Popen[bytes] | None] = field(default_factory=list)
    memory: str = "1g"

    @property
    def url(self) -> str:
        """The master URL ``--master`` takes."""
        return f"spark://127.0.0.1:{self.port}"

    def _env(self, name: str) -> dict[str, str]:
        local = self.root / name / "tmp"
        local.mkdir(parents=True, exist_ok=True)
        return {**os.environ, "SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": "127.0.0.1",
                "SPARK_LOCAL_DIRS": str(local), "SPARK_LOG_DIR": str(self.root / name),
                "SPARK_NO_DAEMONIZE": "1"}

    def _launch(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        log = (self.root / f"{name}.log").open("ab")
        # spark-class execs the JVM, so the PID is the JVM's; a session of its own, so a
        # worker's executors (its children) go down with its process group
        return subprocess.Popen([str(spark_home() / "bin" / "spark-class"), *args],
                                env=self._env(name), stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=self.root)

    def start(self, workers: int = 2) -> None:
        self.master = self._launch("master", [
            "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
            "--port", str(self.port), "--webui-port", str(self.ui_port)])
        self.workers = [None] * workers
        for i in range(workers):
            self.start_worker(i)
        self.wait_workers(workers)

    def start_worker(self, i: int) -> None:
        """Start worker ``i`` (again), in its own directories."""
        work = self.root / f"worker{i}" / "work"
        work.mkdir(parents=True, exist_ok=True)
        self.workers[i] = self._launch(f"worker{i}", [
            "org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1",
            "--cores", "1", "--memory", self.memory, "--work-dir", str(work),
            "--webui-port", str(free_port())])

    def alive_workers(self) -> int:
        """The workers the master counts alive (its web UI's JSON)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as r:
            state = json.load(r)
        return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")

    def wait_workers(self, count: int, seconds: float = 90) -> None:
        deadline = time.monotonic() + seconds
        while True:
            try:
                if self.alive_workers() >= count:
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                logs = "\n".join(p.read_text(errors="replace")[-1500:]
                                 for p in sorted(self.root.glob("*.log")))
                raise RuntimeError(f"the Spark cluster at {self.url} has not {count} workers "
                                   f"after {seconds} s:\n{logs}")
            time.sleep(0.5)

    def _pythons(self, i: int) -> list[Any]:
        """The Python processes under worker ``i`` (its executors' Python workers)."""
        import psutil

        process = self.workers[i]
        found = []
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(process.pid).children(recursive=True) \
                    if process is not None else []:
                with contextlib.suppress(psutil.Error):
                    if "python" in child.name():
                        found.append(child)
        return found

    def worker_connected(self, port: int, seconds: float = 2) -> int | None:
        """A worker whose executor's Python worker holds a connection to ``port`` on loopback,
        looked for over ``seconds``: it runs a task that reads that server (a task closes its
        connections when it ends), even one paced to a rate and asleep. None: no task read
        it meanwhile."""
        import psutil

        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for i in range(len(self.workers)):
                for child in self._pythons(i):
                    with contextlib.suppress(psutil.Error):
                        if any(c.raddr and c.raddr.port == port and c.status == "ESTABLISHED"
                               for c in child.net_connections(kind="tcp")):
                            return i
            time.sleep(0.005)
        return None

    def kill_worker(self, i: int) -> None:
        """SIGKILL worker ``i`` with its executors and their Python workers: a machine lost."""
        process = self.workers[i]
        assert process is not None
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        self.workers[i] = None

    def stop(self) -> None:
        for i, process in enumerate(self.workers):
            if process is not None and process.poll() is None:
                self.kill_worker(i)
        if self.master is not None and self.master.poll() is None:
            os.killpg(self.master.pid, signal.SIGTERM)
            try:
                self.master.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.master.pid, signal.SIGKILL)
                self.master.wait()


def start_cluster(root: Path, workers: int = 2) -> SparkCluster:
    """A standalone cluster of ``workers`` one-core workers under ``root`` (made), running
    when this returns."""
    root.mkdir(parents=True, exist_ok=True)
    cluster = SparkCluster(root, free_port(), free_port())
    try:
        cluster.start(workers)
    except BaseException:
        cluster.stop()
        raise
    return cluster
