"""Running the suite on several pytest-xdist workers against one pair of database servers:
which modules must share a worker, and a lock that lets a test marked ``exclusive`` (it
changes a setting of a shared server) run with no other test running."""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

SHARED_GROUPS = {
    # both make, capture and drop PostgreSQL table public.far_ts, slot and publication far
    "tests/engine/test_dead_letter.py": "pg_far",
    "tests/engine/test_failures.py": "pg_far",
    # both run the example plugin, whose capture schema sdk_capture is one per database
    "tests/dialects/postgres/test_example_pgtrigger.py": "pgtrigger",
    "tests/project/test_moved_modules.py": "pgtrigger",
}
"""Modules that use the same fixed names on the shared servers: while a worker runs one of
them (``--dist loadfile`` runs a module's tests in order on one worker), it holds the group's
lock, so no other worker runs another module of the group."""

_held: dict[str, IO[str]] = {}
"""This worker's held group locks, by group."""


def _lock_path(name: str) -> Path:
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID", "serial")
    return Path(tempfile.gettempdir()) / f"sdk-tests-{run}-{name}.lock"


@contextlib.contextmanager
def _flock(path: Path, mode: int) -> Iterator[None]:
    with open(path, "a") as file:
        fcntl.flock(file, mode)
        try:
            yield
        finally:
            fcntl.flock(file, fcntl.LOCK_UN)


@contextlib.contextmanager
def running(exclusive: bool) -> Iterator[None]:
    """Hold the run's test lock while a test runs: shared by ordinary tests, alone for an
    exclusive one. A waiting exclusive test holds the gate, so no new test starts before it."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        yield
        return
    gate, main = _lock_path("gate"), _lock_path("main")
    if exclusive:
        with _flock(gate, fcntl.LOCK_EX), _flock(main, fcntl.LOCK_EX):
            yield
        return
    with _flock(gate, fcntl.LOCK_EX):
        held = open(main, "a")  # noqa: SIM115 - held past the gate, closed below
        fcntl.flock(held, fcntl.LOCK_SH)
    try:
        yield
    finally:
        fcntl.flock(held, fcntl.LOCK_UN)
        held.close()


@contextlib.contextmanager
def sharing(module: str, next_module: str | None) -> Iterator[None]:
    """Hold the lock of ``module``'s shared group (if it has one) from its first test to its
    last: taken before the test lock (so a worker waiting here holds nothing the other needs)
    and let go when the next test (``next_module``'s) is not of the group."""
    group = SHARED_GROUPS.get(module)
    if group is None or "PYTEST_XDIST_WORKER" not in os.environ:
        yield
        return
    if group not in _held:
        held = open(_lock_path(f"group-{group}"), "a")  # noqa: SIM115 - held across tests
        fcntl.flock(held, fcntl.LOCK_EX)
        _held[group] = held
    try:
        yield
    finally:
        if next_module is None or SHARED_GROUPS.get(next_module) != group:
            held = _held.pop(group)
            fcntl.flock(held, fcntl.LOCK_UN)
            held.close()


@contextlib.contextmanager
def machine_setup(name: str) -> Iterator[None]:
    """One worker at a time through a first-time set-up of this machine (a system user, a
    data directory), whichever run it belongs to."""
    with _flock(Path(tempfile.gettempdir()) / f"sdk-tests-setup-{name}.lock", fcntl.LOCK_EX):
        yield


def worker_suffix() -> str:
    """``-gw0`` and so on under xdist, else empty: for paths each worker needs its own of."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    return f"-{worker}" if worker else ""
