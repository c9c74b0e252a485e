"""CPU seconds of what a benchmark runs: its commands' process trees (this process made their
subreaper, so orphans come to it and their time counts when reaped) and the database servers
it runs against (the process listening on a port, with its children)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36

NOT_THE_SYNC = "sdk.spark.startup.jvmcache"
"""A process a sync leaves to build its JVM's class archive, once per machine, at the
lowest priority after the sync has ended: not the sync's work, left out."""


def become_subreaper() -> None:
    """Orphans of the commands this process runs (a driver JVM in a session of its own may
    outlive its Python by a moment) come to this process, which reaps them (:func:`reap`):
    their CPU time counts in RUSAGE_CHILDREN. Linux only; elsewhere nothing."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def children_cpu() -> float:
    """User + system seconds of every reaped child of this process (and theirs)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def own_cpu() -> float:
    """User + system seconds of this process (a copy it runs itself)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def processes() -> dict[int, tuple[int, str, float]]:
    """Every live process: its parent, its command line and its CPU seconds (user + system,
    with those of its children it has reaped), from /proc."""
    out = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                # after the name: state ppid ...; utime stime cutime cstime at 11..14
                out[int(entry.name)] = (int(fields[1]), command,
                                        sum(int(f) for f in fields[11:15]) / tick)
    return out


def tree(root: int) -> dict[int, float]:
    """The live descendants of ``root`` and ``root`` itself: their CPU seconds."""
    found = processes()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in found.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = {}, [root]
    while todo:
        pid = todo.pop()
        if pid in found and NOT_THE_SYNC not in found[pid][1]:
            out[pid] = found[pid][2]
            todo.extend(children.get(pid, ()))
    return out


def reap(pids: set[int], seconds: float = 60) -> None:
    """Wait for the processes ``pids`` to end, reaping those that are (or become, as
    orphans of a subreaper) this process's children, so that their CPU time counts in
    RUSAGE_CHILDREN; killed after ``seconds``."""
    pids = set(pids)
    deadline = time.monotonic() + seconds
    while pids:
        for pid in list(pids):
            try:
                if os.waitpid(pid, os.WNOHANG) != (0, 0):
                    pids.discard(pid)
            except ChildProcessError:  # another's child: gone, or its parent reaps it
                if not Path(f"/proc/{pid}").exists():
                    pids.discard(pid)
        if pids and time.monotonic() > deadline:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
        time.sleep(0.05)


def listening_pid(port: int) -> int | None:
    """The process listening on TCP ``port`` of this machine (a database server), from
    /proc/net/tcp{,6} and the processes' sockets; None when none is seen (another user's
    process without the right to look)."""
    inodes = set()
    for name in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            for row in Path(f"/proc/net/{name}").read_text().splitlines()[1:]:
                fields = row.split()
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(f"socket:[{fields[9]}]")
    if not inodes:
        return None
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                for fd in (entry / "fd").iterdir():
                    with contextlib.suppress(OSError):
                        if os.readlink(fd) in inodes:
                            return int(entry.name)
    return None


@dataclass
class Cpu:
    """CPU seconds over one timed copy: the copy's own processes, the source's and the
    target's server (the same number twice when they are one server), and the wall clock."""

    own: float
    source: float
    target: float
    wall: float

    def describe(self, same_server: bool) -> str:
        servers = (f"the server (source and target) {self.source:.1f}" if same_server else
                   f"source server {self.source:.1f}, target server {self.target:.1f}")
        total = self.own + self.source + (0 if same_server else self.target)
        return (f"CPU s: own processes {self.own:.1f}, {servers}; together {total:.1f} over "
                f"{self.wall:.1f} s wall = {total / max(self.wall, 1e-9):.2f} cores")


class Meter:
    """Measures a :class:`Cpu` between :meth:`start` and :meth:`stop` for the servers
    listening on ``source_port`` and ``target_port``; the own processes are this process's
    reaped children and, with ``in_process``, this process itself."""

    def __init__(self, source_port: int, target_port: int, in_process: bool = False) -> None:
        self.ports = (source_port, target_port)
        self.pids = tuple(listening_pid(port) for port in self.ports)
        self.in_process = in_process

    def _read(self) -> tuple[float, float, float]:
        own = children_cpu() + (own_cpu() if self.in_process else 0.0)
        servers = [sum(tree(pid).values()) if pid is not None else float("nan")
                   for pid in self.pids]
        return own, servers[0], servers[1]

    def start(self) -> None:
        self.began, self.t0 = self._read(), time.perf_counter()

    def stop(self) -> Cpu:
        wall = time.perf_counter() - self.t0
        now = self._read()
        own, source, target = (b - a for a, b in zip(self.began, now, strict=True))
        return Cpu(own, source, target, wall)
