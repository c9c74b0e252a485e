"""Closing the visibility window on upstream MySQL, which has no consistent-snapshot binlog
position (MariaDB's and Percona's ``Binlog_snapshot_*``).

MySQL writes a transaction to the binlog (flush stage) before its storage engine commit makes it
visible (commit stage), so the binlog head read at some moment can include transactions a read
starting then does not see yet. A low watermark must not be above such a transaction
(docs/design.md, 'The visibility hazard').

Every such transaction owns its GTID from the flush stage until its commit has made it visible
and added the GTID to ``gtid_executed``. So, with ``gtid_mode=ON``: read the head, then the GTIDs
owned at that moment (``@@GLOBAL.gtid_owned``), and wait until they are all executed
(``WAIT_FOR_EXECUTED_GTID_SET``). Every transaction below the head is then committed and visible,
and the head is a safe watermark. Transactions owned but not yet in the binlog (still running,
or replicated ones whose GTID was set up front) only make the wait longer, never wrong.

Without GTIDs no server state tells when the flushed transactions are committed: the dialect
then uses the raw head and its preflight says how to close the window (gtid_mode=ON).
"""

from __future__ import annotations

import re
from typing import Any

from sdk import RetriableError

WAIT_SECONDS = 60
"""How long to wait for flushed transactions to commit; a commit stuck longer than this is a
server in trouble (the read is retried)."""

_OWNED = re.compile(r"([0-9A-Fa-f]{8}-[0-9A-Fa-f-]{27}(?::[A-Za-z_][A-Za-z0-9_]*)?):(\d+)#\d+")
"""One entry of ``@@GLOBAL.gtid_owned``: ``uuid[:tag]:number#owner-thread``."""


def owned_gtid_set(owned: str | bytes | None) -> str:
    """The GTID set text (``uuid:n,uuid:m``) of ``@@GLOBAL.gtid_owned``'s entries, without
    their owner threads; empty when nothing is owned."""
    if isinstance(owned, bytes):
        owned = owned.decode()
    return ",".join(f"{sid}:{number}" for sid, number in _OWNED.findall(owned or ""))


def wait_until_visible(conn: Any, seconds: float = WAIT_SECONDS) -> None:
    """Return once every transaction written to the binlog before the call is committed and
    visible (``conn.query(sql, args)`` runs a statement on the source)."""
    ((owned,),) = conn.query("SELECT @@GLOBAL.gtid_owned")
    gtids = owned_gtid_set(owned)
    if not gtids:
        return
    ((timed_out,),) = conn.query("SELECT WAIT_FOR_EXECUTED_GTID_SET(%s, %s)",
                                 (gtids, seconds))
    if timed_out:
        raise RetriableError(f"binlog transactions {gtids} did not commit within {seconds} s; "
                             "the watermark is read again")


def gtid_mode_on(conn: Any) -> bool:
    """Whether the server assigns GTIDs (upstream MySQL's ``gtid_mode``)."""
    rows = conn.query("SHOW GLOBAL VARIABLES LIKE 'gtid_mode'")
    return bool(rows) and str(rows[0][1]).upper() == "ON"
