"""Run as users run: a PostgreSQL of the test's own that asks every role but the superuser
for a password (scram-sha-256), and the capture role with the documented grants and no more
(``REPLICATION``, ``CONNECT`` and ``CREATE`` on the database, ``SELECT`` on the tables; the
tables and the publication the administrator's). Each case is a row of docs/operations.md's
corpus: what is enough works, each missing piece is one line naming its fix, a wrong
password is one line without the password."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.instances import Postgres, pg15_available, server_dir, start_postgres15

from sdk.app.cli import main

pytestmark = [pytest.mark.postgres, pytest.mark.spark, pytest.mark.slow,
              pytest.mark.skipif(not pg15_available(), reason="no PostgreSQL 15 binaries")]

PASSWORD = "Cdc-pw-5c7e"


@pytest.fixture(scope="module")
def server() -> Iterator[Postgres]:
    """The cluster: scram-sha-256 for every role on loopback but ``postgres`` (the test's
    administrator), ``sdk_cdc`` with a password, an ``orders`` table and the publication."""
    pg = start_postgres15(server_dir() / "pg")
    try:
        hba = pg.pgdata / "pg_hba.conf"
        hba.write_text("local all postgres trust\nhost all postgres 127.0.0.1/32 trust\n"
                       "host all all 127.0.0.1/32 scram-sha-256\n"
                       "host replication all 127.0.0.1/32 scram-sha-256\n")
        pg.execute(f"ALTER ROLE sdk_cdc PASSWORD '{PASSWORD}'", "SELECT pg_reload_conf()",
                   "CREATE TABLE orders (id int PRIMARY KEY, total numeric(10, 2))",
                   "INSERT INTO orders SELECT g, g * 1.5 FROM generate_series(1, 100) g",
                   "CREATE PUBLICATION lp_pub FOR TABLE orders")
        yield pg
    finally:
        pg.stop()


def _url(server: Postgres, password: str = PASSWORD) -> str:
    return server.url(password=password, query="?slot=lp_slot&publication=lp_pub")


def test_the_documented_grants_are_enough(server: Postgres, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    url = _url(server)
    assert main(["check", "--source", url, "--tables", "public.orders"]) == 0, \
        capsys.readouterr().out
    mirror = tmp_path / "mirror.db"
    args = ["sync", "--source", url, "--target", f"sqlite:///{mirror}", "--tables",
            "public.orders", "--checkpoint", str(tmp_path / "ck"), "--until", "caught-up"]
    assert main(args) == 0
    server.execute("UPDATE orders SET total = 0 WHERE id = 7", "DELETE FROM orders WHERE id = 9")
    assert main(args) == 0
    with sqlite3.connect(mirror) as conn:
        mirrored = conn.execute("SELECT id, total FROM orders ORDER BY id").fetchall()
    assert [(i, float(t)) for i, t in mirrored] == \
        [(i, float(t)) for i, t in server.query("SELECT id, total FROM orders ORDER BY id")]
    server.execute("SELECT pg_drop_replication_slot('lp_slot')")


def test_a_wrong_password_is_one_line_without_it(server: Postgres,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--source", _url(server, "not-the-Pw-1"), "--tables",
                 "public.orders"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "password authentication failed" in err, err
    assert "not-the-Pw-1" not in err and PASSWORD not in err


@pytest.mark.parametrize("revoke, missing, fix", [
    ("REVOKE SELECT ON orders FROM sdk_cdc", "SELECT on public.orders",
     'GRANT SELECT ON "public"."orders" TO "sdk_cdc"'),
    ("ALTER ROLE sdk_cdc NOREPLICATION", "role may replicate",
     'ALTER ROLE "sdk_cdc" WITH REPLICATION'),
], ids=["select", "replication"])
def test_each_missing_grant_is_named_with_its_fix(
        server: Postgres, tmp_path: Path, capsys: pytest.CaptureFixture[str], revoke: str,
        missing: str, fix: str) -> None:
    """One grant taken away: ``sdk check`` names it with the fix, ``sdk sync`` refuses
    before reading anything; the fix pasted as printed, both pass."""
    url = _url(server)
    server.execute(revoke)
    try:
        assert main(["check", "--source", url, "--tables", "public.orders"]) == 1
        out = capsys.readouterr().out
        assert f"[MISSING] {missing}" in out and f"fix: {fix}" in out, out
        args = ["sync", "--source", url, "--target", f"sqlite:///{tmp_path / 'm.db'}",
                "--tables", "public.orders", "--checkpoint", str(tmp_path / "ck"),
                "--until", "caught-up"]
        assert main(args) in (2, 3)
        assert f"[MISSING] {missing}" in capsys.readouterr().err
        assert not (tmp_path / "m.db").exists() or not _rows(tmp_path / "m.db")
        server.execute(fix)  # as printed
        assert main(["check", "--source", url, "--tables", "public.orders"]) == 0, \
            capsys.readouterr().out
    finally:
        server.execute("GRANT SELECT ON orders TO sdk_cdc", "ALTER ROLE sdk_cdc REPLICATION")
        server.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                       "WHERE slot_name = 'lp_slot'")


def _rows(path: Path) -> list[Any]:
    with sqlite3.connect(path) as conn:
        names = [n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE name = "
                                            "'orders'")]
        return conn.execute("SELECT * FROM orders").fetchall() if names else []
