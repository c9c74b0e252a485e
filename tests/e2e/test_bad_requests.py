"""Nothing is accepted that cannot run, and a damaged checkpoint is named with the way out:
``sdk snapshot --where`` tries the condition on the source before recording it, ``--list``
and ``--cancel`` show and withdraw requests (never one the sync took up), and a checkpoint
file cut short or gone gives one line naming it for ``sdk sync``, ``status`` and
``snapshot``."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from sdk.algorithm import SyncState
from sdk.algorithm.lineage import SOURCE_FILE, source_record
from sdk.algorithm.state import Phase
from sdk.app.cli import main
from sdk.dialect.errors import ConfigurationError
from sdk.dialect.manager import connect
from sdk.dialect.types import TableId
from sdk.spark.driver.requests import (
    SnapshotRequest,
    claim_request,
    list_requests,
    pending_requests,
    request_snapshot,
    withdraw_request,
    write_request,
)
from sdk.spark.state.engine_state import EngineState, latest
from sdk.spark.state.statestore import StateStore

DAMAGED = re.compile(r"sdk: error: checkpoint (\S+): file (\S+) is damaged \((.+)\): (.+)\n")
WAY_OUT = ("restore {ck} from a backup, or start a new sync with a new --checkpoint directory "
           "(a new snapshot)")


def _checkpoint(tmp_path: Path, url: str, *tables: str) -> Path:
    """A checkpoint as a sync in its log phase capturing ``tables`` of ``url`` leaves it (its
    state, the source's record and a progress report), made without Spark."""
    dialect, conn, config = connect(url)
    try:
        schemas = [dialect.describe_table(conn, TableId.parse(t)) for t in tables]
        record = source_record(dialect, conn, config.masked_url)
    finally:
        conn.close()
    checkpoint = tmp_path / "ck"
    store = StateStore(str(checkpoint / "state"))
    store.write_json(record, SOURCE_FILE)
    EngineState(SyncState(Phase.LOG, {s.table: s for s in schemas}), seq=3).save(store)
    store.write_json({"phase": "log", "tables": {}, "rows": 0, "caught_up": True},
                     "progress.json")
    return checkpoint


def _shop(tmp_path: Path) -> str:
    source = tmp_path / "shop.db"
    with sqlite3.connect(source) as conn:
        conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, total REAL)")
        conn.execute("CREATE TABLE audit (id INTEGER PRIMARY KEY, note TEXT)")
        conn.executemany("INSERT INTO orders VALUES (?, ?)", [(i, i * 1.5) for i in range(50)])
    return f"sqlite:///{source}"


def _error(capsys: pytest.CaptureFixture[str]) -> str:
    """The one line ``sdk`` printed on its standard error."""
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("sdk: error: "), err
    return err


def _request_files(checkpoint: Path) -> list[str]:
    folder = checkpoint / "state" / "requests"
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_a_condition_the_source_refuses_is_not_recorded(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = _shop(tmp_path)
    checkpoint = _checkpoint(tmp_path, src, "main.orders")
    base = ["snapshot", "--checkpoint", str(checkpoint), "--table", "main.orders"]
    assert main([*base, "--where", "id >>> 'x"]) == 2  # where the condition is tried
    assert "--where needs --source URL" in _error(capsys)
    for where, message in [("id >>> 'x", "syntax error"), ("nope > 1", "no such column: nope")]:
        assert main([*base, "--where", where, "--source", src]) == 2
        line = _error(capsys)
        assert f"refuses the condition of the snapshot of main.orders where {where}: " \
               f"OperationalError: " in line and message in line
        assert "nothing was recorded" in line
    assert _request_files(checkpoint) == []
    assert main(["snapshot", "--checkpoint", str(checkpoint), "--table", "main.audit",
                 "--source", src]) == 2  # there, but not captured
    assert "is not captured by the sync" in _error(capsys)
    with sqlite3.connect(tmp_path / "shop.db") as conn:
        conn.execute("ALTER TABLE orders RENAME TO orders_old")
    assert main([*base, "--source", src]) == 2  # captured, but gone from the source
    assert "main.orders does not exist" in _error(capsys)
    with sqlite3.connect(tmp_path / "shop.db") as conn:
        conn.execute("ALTER TABLE orders_old RENAME TO orders")
    assert _request_files(checkpoint) == []
    assert main([*base, "--where", "id < 10", "--source", src]) == 0
    out = capsys.readouterr().out
    assert "snapshot of the rows of main.orders where id < 10 requested" in out
    assert main([*base]) == 0  # a whole table needs no source
    capsys.readouterr()
    assert main(["snapshot", "--checkpoint", str(checkpoint), "--list"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert len(listed) == 2
    assert re.fullmatch(r"\d{20}-[0-9a-f]{8}  main\.orders  waiting  "
                        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC  where id < 10", listed[0])
    assert listed[1].endswith("  waiting  " + listed[1].split("  ")[3] + "  all rows")
    first = listed[0].split()[0]
    assert main(["snapshot", "--checkpoint", str(checkpoint), "--cancel", first]) == 0
    assert f"snapshot request {first} of main.orders withdrawn" in capsys.readouterr().out
    assert [r.where for r in pending_requests(StateStore(str(checkpoint / "state")))] == [None]
    assert main(["snapshot", "--checkpoint", str(checkpoint), "--cancel", first]) == 2
    assert f"no snapshot request {first} in" in _error(capsys)


def test_a_request_is_withdrawn_or_taken_up_never_both(tmp_path: Path) -> None:
    """The sync claims a request by renaming its file, a withdrawal by renaming it away: the
    first wins, whichever it is."""
    checkpoint = _checkpoint(tmp_path, _shop(tmp_path), "main.orders", "main.audit")
    state_dir = str(checkpoint / "state")
    store = StateStore(state_dir)
    early = request_snapshot(state_dir, "main.orders")
    late = request_snapshot(state_dir, "main.audit", "id > 0")
    assert claim_request(store, early.id)  # the sync took it up first
    assert [r.state for r in list_requests(state_dir)] == ["being read", "waiting"]
    with pytest.raises(ConfigurationError, match=f"request {early.id} of main.orders is being "
                                                 "read: the sync took it up"):
        withdraw_request(state_dir, early.id)
    assert claim_request(store, early.id)  # a restart takes it up again
    assert withdraw_request(state_dir, late.id).table == "main.audit"
    assert not claim_request(store, late.id)  # withdrawn first: the sync passes it over
    assert [r.id for r in pending_requests(store)] == [early.id]
    own = SnapshotRequest("schema-000000000007-abc", TableId("main", "audit"), None, 1.0)
    write_request(store, own)
    with pytest.raises(ConfigurationError, match="is the sync's own"):
        withdraw_request(state_dir, own.id)


DAMAGES = {
    "state cut short": ("states", lambda f: f.write_bytes(f.read_bytes()[:10])),
    "state content missing": ("content", lambda f: f.unlink()),
    "progress cut short": ("progress.json", lambda f: f.write_bytes(f.read_bytes()[:20])),
    "source record not JSON": (SOURCE_FILE, lambda f: f.write_bytes(b"{\"url\": \"\xc3\x28\"}")),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_checkpoint_is_named_with_the_way_out(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: str) -> None:
    src = _shop(tmp_path)
    checkpoint = _checkpoint(tmp_path, src, "main.orders")
    place, cut = DAMAGES[damage]
    found = checkpoint / "state" / place
    file = max(found.iterdir()) if found.is_dir() else found
    cut(file)
    ck = str(checkpoint)
    for command in (["status", "--checkpoint", ck],
                    ["snapshot", "--checkpoint", ck, "--table", "main.orders"],
                    ["snapshot", "--checkpoint", ck, "--list"],
                    ["sync", "--source", src, "--target", f"sqlite:///{tmp_path}/m.db",
                     "--checkpoint", ck, "--until", "caught-up"]):
        assert main(command) == 2, command
        shown = DAMAGED.fullmatch(_error(capsys))
        assert shown is not None, command
        assert shown[1] == ck and shown[2] == f"state/{place}" + (
            f"/{file.name}" if found.is_dir() else "")
        if damage == "state content missing":
            assert shown[3].startswith("missing, and state 000000000003-")
        elif damage == "source record not JSON":
            assert shown[3] == "not UTF-8 text"
        else:
            assert "line 1 column" in shown[3]
        assert shown[4] == ("delete it (a sync writes its report again at its next batch)"
                            if place == "progress.json" else WAY_OUT.format(ck=ck))
    assert "caught up" not in capsys.readouterr().out
    assert _request_files(checkpoint) == []


@pytest.mark.spark
@pytest.mark.slow
def test_a_withdrawn_request_is_not_read_by_the_resumed_sync(
        spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src, mirror = _shop(tmp_path), tmp_path / "mirror.db"
    checkpoint = str(tmp_path / "ck")
    args = ["sync", "--source", src, "--target", f"sqlite:///{mirror}", "--checkpoint",
            checkpoint, "--until", "caught-up"]
    assert main(args) == 0
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, total REAL)")
    capsys.readouterr()
    base = ["snapshot", "--checkpoint", checkpoint, "--table", "main.orders"]
    assert main([*base, "--where", "id < 10", "--source", f"sqlite:///{other}"]) == 2
    assert "is not the source of the sync in" in _error(capsys)
    assert main([*base, "--where", "id >= 40", "--source", src]) == 0
    assert main([*base, "--where", "id < 10", "--source", src]) == 0
    capsys.readouterr()
    state_dir = f"{checkpoint}/state"
    kept, withdrawn = (r.id for r in list_requests(state_dir))
    assert main(["snapshot", "--checkpoint", checkpoint, "--cancel", withdrawn]) == 0
    with sqlite3.connect(mirror) as conn:  # what either read would repair
        conn.execute("UPDATE orders SET total = 0")
    assert main(args) == 0
    with sqlite3.connect(mirror) as conn:
        repaired = {i for (i,) in conn.execute("SELECT id FROM orders WHERE total != 0")}
    assert repaired == set(range(40, 50))  # the kept request's rows, none of the withdrawn
    state = latest(StateStore(state_dir))
    assert state is not None and kept in state.sync.served and withdrawn not in state.sync.served
    capsys.readouterr()
    assert main(["snapshot", "--checkpoint", checkpoint, "--list"]) == 0
    listed = capsys.readouterr().out
    assert f"{kept}  main.orders  done  " in listed and withdrawn not in listed
    assert main(["snapshot", "--checkpoint", checkpoint, "--cancel", kept]) == 2
    assert f"snapshot request {kept} of main.orders was read already: it cannot be " \
           "withdrawn" in _error(capsys)


@pytest.mark.mysql
def test_mysql_refuses_a_bad_condition_with_its_message(
        mysql_admin: Any, mysql_url: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    with mysql_admin.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS sdk_test.bad_requests")
        cur.execute("CREATE TABLE sdk_test.bad_requests (id INT PRIMARY KEY, v INT)")
    checkpoint = _checkpoint(tmp_path, mysql_url, "sdk_test.bad_requests")
    base = ["snapshot", "--checkpoint", str(checkpoint), "--table", "sdk_test.bad_requests",
            "--source", mysql_url]
    assert main([*base, "--where", "id >>> 'x"]) == 2
    line = _error(capsys)
    assert "refuses the condition of the snapshot of sdk_test.bad_requests where id >>> 'x: " \
           "ProgrammingError: (1064, \"You have an error in your SQL syntax" in line
    assert "sdk_cdc:sdk_cdc" not in line
    assert main([*base, "--where", "nope = 1"]) == 2
    assert "Unknown column 'nope'" in _error(capsys)
    assert _request_files(checkpoint) == []
    assert main([*base, "--where", "v BETWEEN 1 AND 5"]) == 0
    assert len(_request_files(checkpoint)) == 1


@pytest.mark.postgres
def test_postgres_refuses_a_bad_condition_with_its_message(
        postgres_admin: Any, postgres_url: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    postgres_admin.execute("DROP TABLE IF EXISTS public.bad_requests")
    postgres_admin.execute("CREATE TABLE public.bad_requests (id INT PRIMARY KEY, v INT)")
    postgres_admin.execute("GRANT SELECT ON public.bad_requests TO sdk_cdc")
    checkpoint = _checkpoint(tmp_path, postgres_url, "public.bad_requests")
    base = ["snapshot", "--checkpoint", str(checkpoint), "--table", "public.bad_requests",
            "--source", postgres_url]
    for where, message in [("id >>> 'x", "SyntaxError: unterminated quoted string"),
                           ("id > 'abc'", 'invalid input syntax for type integer: "abc"')]:
        assert main([*base, "--where", where]) == 2
        line = _error(capsys)
        assert f"refuses the condition of the snapshot of public.bad_requests where {where}: " \
               in line and message in line, line
    assert _request_files(checkpoint) == []
    assert main([*base, "--where", "v BETWEEN 1 AND 5"]) == 0
    assert len(_request_files(checkpoint)) == 1
