"""One sync per checkpoint: the owner's lease in the state directory.

Two syncs on one checkpoint would interleave their batches and corrupt each other's state. A
sync takes the lease before anything else and keeps it while it runs:

- on a local directory it holds an exclusive ``flock`` on ``owner.lock`` for its lifetime (the
  kernel releases it when the process dies, however it dies);
- on shared storage (``hdfs://``, ``s3://``: no locks) it writes ``owner.json`` and renews it
  every few seconds; a lease not renewed for ``seconds`` is stale and may be taken over. Such
  stores have no exclusive create, so a taker writes, waits, and reads back: of two syncs
  starting within that wait, the last writer keeps it and the other stops.

Either way ``owner.json`` names the owner (host, pid, since when), which the refusal quotes.
No pyspark here.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import socket
import threading
import time
import uuid
from typing import Any

import pyarrow.fs as pafs

from ...dialect.errors import ConfigurationError
from .statestore import StateStore

LEASE_SECONDS = 30.0
"""A shared-storage lease not renewed for this long belongs to a sync that is gone."""


class CheckpointInUseError(ConfigurationError):
    """Another sync owns the checkpoint."""


class CheckpointLease:
    """The lease of one sync on the state directory ``store``."""

    def __init__(self, store: StateStore, seconds: float = LEASE_SECONDS,
                 local_lock: bool | None = None) -> None:
        self.store = store
        self.seconds = seconds
        self.local = isinstance(store.fs, pafs.LocalFileSystem) if local_lock is None \
            else local_lock
        self.token = uuid.uuid4().hex
        self.since = time.time()
        self.lost = False
        """Set when another sync took the lease over (this one stalled past ``seconds``)."""
        self._fd: int | None = None
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    def _record(self) -> dict[str, Any]:
        return {"host": socket.gethostname(), "pid": os.getpid(), "token": self.token,
                "since": self.since, "renewed": time.time()}

    def owner(self) -> dict[str, Any] | None:
        """The owner as last recorded, if any."""
        data = self.store.read_json("owner.json")
        return data if isinstance(data, dict) else None

    def refusal(self, owner: dict[str, Any] | None = None) -> CheckpointInUseError:
        """The error naming ``owner`` (by default the recorded one) as the checkpoint's."""
        if owner is None:
            owner = self.owner()
        if owner is None:
            who = "another sync"
        else:
            since = dt.datetime.fromtimestamp(owner.get("since", 0), dt.UTC)
            who = (f"the sync of pid {owner.get('pid')} on {owner.get('host')}, running since "
                   f"{since:%Y-%m-%d %H:%M:%S} UTC")
        return CheckpointInUseError(
            f"checkpoint {self.store.uri} is in use by {who}: stop that sync first, or give "
            "this one another --checkpoint" + ("" if self.local else
                                              f" (a lease not renewed for {self.seconds:.0f} s "
                                              "is taken over)"))

    def acquire(self, settle_seconds: float = 1.0) -> None:
        """Take the lease, or raise :class:`CheckpointInUseError` naming its owner."""
        if self.local:
            import fcntl

            fd = os.open(self.store.path("owner.lock"), os.O_CREAT | os.O_RDWR, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise self.refusal(self.owner()) from None
            self._fd = fd
            self.store.write_json(self._record(), "owner.json")
            return
        current = self.owner()
        if current is not None and not self._stale(current):
            raise self.refusal(current)
        self.store.write_json(self._record(), "owner.json")
        time.sleep(settle_seconds)  # a sync taking it at the same time writes within this
        current = self.owner()
        if current is None or current.get("token") != self.token:
            raise self.refusal(current)
        self._renewer = threading.Thread(target=self._renew, name="sdk-lease", daemon=True)
        self._renewer.start()

    def _stale(self, owner: dict[str, Any]) -> bool:
        return time.time() - float(owner.get("renewed", 0)) > self.seconds

    def _renew(self) -> None:
        while not self._stop.wait(self.seconds / 6) and self._renew_once():
            pass

    def _renew_once(self) -> bool:
        """Renew the lease; False (and ``lost``) when another sync holds it now."""
        current = self.owner()
        if current is None or current.get("token") != self.token:
            self.lost = True
            return False
        self.store.write_json({**current, "renewed": time.time()}, "owner.json")
        return True

    def release(self) -> None:
        """Give the lease up (the state stays for the next sync)."""
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join(timeout=5)
        current = self.owner()
        if current is not None and current.get("token") == self.token:
            with contextlib.suppress(OSError):
                self.store.delete_file("owner.json")
        if self._fd is not None:
            os.close(self._fd)  # releases the flock
            self._fd = None
