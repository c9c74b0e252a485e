"""A class-data-sharing archive of the driver JVM's classes: Spark starts in half the time.

Spark's driver JVM loads some 14,000 classes from 280 jars each time ``sdk sync`` starts it;
from an application class-data-sharing archive of those classes (JDK AppCDS: the classes
parsed, verified and laid out once, then mapped into each JVM) it starts in about half the
time (figures in docs/operations.md, "Measured costs").

An archive holds one JDK's view of one exact set of jars, so it is made on the machine that
uses it: a sync whose JVM starts without one lists the classes it loads
(``-XX:DumpLoadedClassList``), and when that sync's process has ended, a detached process at
the lowest priority turns the list into the archive (``java -Xshare:dump``, about 30 s of CPU,
once). Later syncs start with it. Archives live in ``$XDG_CACHE_HOME/sdk`` (``~/.cache/sdk``),
one per JDK and set of jars (a changed one gets a new archive, the three newest are kept);
``SDK_JVM_ARCHIVE=0`` turns this off. A JVM that cannot use an archive runs without it, as before.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

VERSION = 1
"""Part of every archive's name: bumped when what goes into an archive changes."""
KEEP = 3
"""Archives kept in the cache, the newest."""


@dataclass(frozen=True)
class JvmArchive:
    """Where this machine's archive for the current JDK and jars is, or is to be made."""

    archive: Path
    classes: Path

    @property
    def ready(self) -> bool:
        return self.archive.exists()

    @property
    def failed(self) -> Path:
        """Marks an archive the JDK could not make (it is not tried again)."""
        return self.archive.with_suffix(".failed")

    def java_options(self) -> list[str]:
        """The driver JVM's options: map the archive, or list the classes for one."""
        if self.ready:
            return [f"-XX:SharedArchiveFile={self.archive}", "-Xshare:auto"]
        if self.failed.exists():
            return []
        return [f"-XX:DumpLoadedClassList={self.classes}"]

    def build_later(self, spark: Any) -> None:
        """Once this process has ended, make the archive from the classes its JVM listed, in
        a detached process (nothing when the archive is there or is being made)."""
        if self.ready or not self.classes.exists():
            return
        lock = self.archive.with_suffix(".lock")
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except FileExistsError:  # another process makes it (or died making it: not now)
            with contextlib.suppress(OSError):
                if time.time() - lock.stat().st_mtime > 3600:
                    lock.unlink()
            self.classes.unlink(missing_ok=True)
            return
        os.close(fd)
        jvm = spark.sparkContext._jvm
        system = jvm.java.lang.System
        arguments = list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
                         .getInputArguments())
        job = {"pid": os.getpid(), "java": str(Path(system.getProperty("java.home")) / "bin"
                                               / "java"),
               "classpath": system.getProperty("java.class.path"),
               "modules": [a for a in arguments if a.startswith("--add-modules")],
               "paths": {k: str(v) for k, v in asdict(self).items()}, "lock": str(lock)}
        subprocess.Popen([sys.executable, "-m", __name__, json.dumps(job)],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)


def _jars() -> Path | None:
    """The directory of the jars the driver JVM loads (pip's pyspark, or SPARK_HOME's)."""
    home = os.environ.get("SPARK_HOME")
    if home:
        return Path(home) / "jars"
    import importlib.util

    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "jars"


def _java() -> Path | None:
    """The java binary Spark's launcher runs (``JAVA_HOME``'s, else the one on PATH)."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).exists() else None


def for_this_machine() -> JvmArchive | None:
    """The archive for this machine's JDK and Spark jars; None when turned off or when either
    cannot be found."""
    if os.environ.get("SDK_JVM_ARCHIVE", "1") in ("0", "off", "false") or os.name != "posix":
        return None
    java, jars = _java(), _jars()
    if java is None or jars is None or not jars.is_dir():
        return None
    digest = hashlib.sha256(f"{VERSION} {sys.version_info[:2]}".encode())
    for path in [java, *sorted(java.parent.parent.glob("lib/server/*.so")),
                 *sorted(jars.iterdir())]:
        stat = path.stat()
        digest.update(f"{path}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sdk"
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    name = f"jvm-{digest.hexdigest()[:16]}"
    return JvmArchive(cache / f"{name}.jsa", cache / f"{name}.{os.getpid()}.classes")


def _prune(cache: Path, keep: int) -> None:
    """Keep the ``keep`` newest archives (each ~180 MB; a JDK or Spark upgrade, or another
    environment, makes a new one), and drop class lists a day old."""
    archives = sorted(cache.glob("jvm-*.jsa"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in archives[keep:]:
        old.unlink(missing_ok=True)
    for listed in cache.glob("jvm-*.classes"):  # left by syncs that ended before handing over
        if time.time() - listed.stat().st_mtime > 86400:
            listed.unlink(missing_ok=True)


def _build(job: dict[str, Any]) -> None:
    """Wait for the sync's process to end, then dump the archive (atomically)."""
    archive, classes = Path(job["paths"]["archive"]), Path(job["paths"]["classes"])
    lock = Path(job["lock"])
    try:
        while True:  # the JVM writes the list as it loads classes: wait until it is gone
            try:
                os.kill(job["pid"], 0)
            except ProcessLookupError:
                break
            time.sleep(1)
        os.nice(19)
        partial = archive.with_name(f"{archive.name}.{os.getpid()}.tmp")
        done = subprocess.run(
            [job["java"], "-Xshare:dump", f"-XX:SharedClassListFile={classes}",
             f"-XX:SharedArchiveFile={partial}", *job["modules"], "-cp", job["classpath"]],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=900, check=False)
        if done.returncode == 0 and partial.exists():
            partial.replace(archive)
            _prune(archive.parent, keep=KEEP)
        else:
            partial.unlink(missing_ok=True)
            archive.with_suffix(".failed").touch()
    finally:
        classes.unlink(missing_ok=True)
        lock.unlink(missing_ok=True)


if __name__ == "__main__":
    _build(json.loads(sys.argv[1]))
