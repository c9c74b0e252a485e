"""The driver JVM's class-data-sharing archive (sdk/spark/startup/jvmcache.py): a session started
without one lists its classes, the archive is made after its process ends, the next session
maps it (the JVM says "sharing" only when it accepted the archive: a mismatched one leaves it
without); one archive per JDK and jar set; a failed build is not tried again; off by
``SDK_JVM_ARCHIVE=0``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from sdk.spark.startup import jvmcache

SESSION = """
import json
from sdk.spark.session import spark_session
spark = spark_session(rows_in_jvm=False)
jvm = spark.sparkContext._jvm
args = list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
info = jvm.java.lang.System.getProperty("java.vm.info")
print(json.dumps({"args": args, "info": info, "rows": spark.range(5).count()}))
"""


def _session(env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", SESSION], env=env, capture_output=True,
                          text=True, timeout=300, check=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_options_follow_the_archive_state(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    archive = jvmcache.for_this_machine()
    assert archive is not None and archive.archive.parent == tmp_path / "sdk"
    assert archive.java_options() == [f"-XX:DumpLoadedClassList={archive.classes}"]
    archive.failed.touch()
    assert archive.java_options() == []  # a JDK that could not make one: not tried again
    archive.archive.touch()
    assert archive.java_options()[0] == f"-XX:SharedArchiveFile={archive.archive}"
    monkeypatch.setenv("SDK_JVM_ARCHIVE", "0")
    assert jvmcache.for_this_machine() is None


def test_another_jar_set_gets_another_archive(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (tmp_path / "jars").mkdir()
    (tmp_path / "jars" / "a.jar").write_bytes(b"x")
    monkeypatch.setenv("SPARK_HOME", str(tmp_path))
    first = jvmcache.for_this_machine()
    (tmp_path / "jars" / "b.jar").write_bytes(b"y")
    second = jvmcache.for_this_machine()
    assert first is not None and second is not None and first.archive != second.archive


@pytest.mark.slow
@pytest.mark.skipif(os.name != "posix", reason="archives are made on POSIX systems only")
def test_a_session_lists_its_classes_and_the_next_one_maps_the_archive(tmp_path: Path
                                                                       ) -> None:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    env.pop("SDK_JVM_ARCHIVE", None)
    first = _session(env)
    assert first["rows"] == 5
    assert any(str(a).startswith("-XX:DumpLoadedClassList=") for a in first["args"])
    cache = tmp_path / "sdk"
    deadline = time.monotonic() + 240
    while not list(cache.glob("*.jsa")) and time.monotonic() < deadline:
        time.sleep(1)
    made = list(cache.glob("*.jsa"))
    assert made, f"no archive made: {sorted(p.name for p in cache.iterdir())}"
    assert not list(cache.glob("*.classes")) and not list(cache.glob("*.lock"))
    second = _session(env)
    assert second["rows"] == 5
    assert f"-XX:SharedArchiveFile={made[0]}" in second["args"]
    assert "sharing" in str(second["info"])  # mapped: a JVM that refuses it says no sharing
