"""The interpreter Spark starts its Python workers with.

Spark puts ``pyspark.zip`` and the py4j zip of ``SPARK_HOME/python/lib`` first on every Python
worker's path. Python cannot cache the bytecode of modules imported from a zip, so each worker
process compiles pyspark again, and a sync starts several such processes before its first
split (figures in docs/operations.md, "Measured costs").

When pyspark is the pip-installed package (``SPARK_HOME`` unset or its own directory), the
zips hold the same code as site-packages; :func:`worker_python` then gives Spark a launcher
that drops them from ``PYTHONPATH`` and runs this interpreter, which imports the compiled
modules. Anything else (a Spark distribution, Windows, a launcher that cannot run) keeps the
plain interpreter.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

LAUNCHER = """#!/bin/sh
# Written by sdk (sdk/spark/startup/workers.py): runs Spark's Python workers with pyspark and py4j
# from site-packages, whose bytecode is cached, rather than from the zips Spark puts first
# on PYTHONPATH (the same code, compiled again by every worker process).
kept=
set -f
IFS=:
for entry in $PYTHONPATH; do
  case "$entry" in
    {lib}/pyspark.zip|{lib}/py4j-*-src.zip) ;;
    *) kept="${{kept:+$kept:}}$entry" ;;
  esac
done
unset IFS
set +f
PYTHONPATH="$kept"
export PYTHONPATH
exec '{python}' "$@"
"""


def _package_dir(name: str) -> Path | None:
    """The directory a package is imported from, if a plain directory (not a zip)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    location = Path(next(iter(spec.submodule_search_locations)))
    return location if location.is_dir() else None


def python_for(master: str) -> str:
    """``PYSPARK_PYTHON`` for a session on ``master``: the launcher (:func:`worker_python`) on
    a local master; on a cluster this interpreter's path, which the executors' machines must
    have too (the launcher is a file of this machine alone)."""
    return worker_python() if master.startswith("local") else sys.executable


def worker_python(executable: str = sys.executable) -> str:
    """The command for ``PYSPARK_PYTHON``: a launcher of ``executable`` that imports pyspark
    from site-packages when that is the same pyspark as Spark's zips, else ``executable``."""
    pyspark_dir = _package_dir("pyspark")
    if os.name != "posix" or pyspark_dir is None or _package_dir("py4j") is None:
        return executable
    home = os.environ.get("SPARK_HOME")
    if home and Path(home).resolve() != pyspark_dir.resolve():
        return executable  # a Spark distribution: its zips may be another version
    lib = pyspark_dir / "python" / "lib"
    if "'" in executable or any(c in str(lib) for c in "'\"$`\\*?[ "):
        return executable  # not safe to write into the script as is
    text = LAUNCHER.format(lib=lib, python=executable)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    path = Path(tempfile.gettempdir()) / f"sdk-{os.getuid()}" / f"python-{digest}"
    try:
        if not path.exists():
            path.parent.mkdir(mode=0o700, exist_ok=True)
            if path.parent.stat().st_uid != os.getuid():
                return executable  # someone else's directory: do not run what it holds
            partial = path.with_name(f"{path.name}.{os.getpid()}")
            partial.write_text(text)
            partial.chmod(0o700)
            partial.replace(path)
        subprocess.run([str(path), "-c", "pass"], check=True, timeout=30,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as err:  # e.g. a noexec temp directory
        log.debug("Python workers start with %s (launcher unusable: %s)", executable, err)
        return executable
    return str(path)
