"""The worked example ``examples/sdk-pgtrigger`` (a change-table dialect on the generic SQL base)
against the real PostgreSQL: the whole conformance kit; the kit's in-flight visibility tests
failing, on every run, a copy whose offset is the highest visible change id (the hazard); and a
real ``sdk sync`` under concurrent writers ending with mirror == source."""

from __future__ import annotations

import importlib.util
import sys
import threading
import uuid
from collections.abc import Iterator
from decimal import Decimal
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest
from helpers.paths import ROOT

from sdk import Offset
from sdk.testing import Harness
from sdk.testing.kit import Kit, KitError, load_dialect
from sdk.testing.suite import *  # noqa: F403
from sdk.testing.suite import TestVisibilityInFlight

pytestmark = pytest.mark.postgres

EXAMPLE = ROOT / "examples" / "sdk-pgtrigger"


def _load(name: str, path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


example = _load("sdk_pgtrigger", EXAMPLE / "sdk_pgtrigger.py")
example_kit = _load("sdk_pgtrigger_kit", EXAMPLE / "tests" / "test_kit.py")


class ExampleHarness(example_kit.PgTriggerHarness):  # type: ignore[misc]
    plugin = example.dialect  # the module of this checkout, installed or not


class MaxIdOffset(example.PgTrigger):  # type: ignore[misc]
    """The naive change-table offset: the highest visible id, taken without waiting for the
    writes in flight (whose ids may be lower)."""

    def dialect_info(self) -> Any:
        info = super().dialect_info()
        return type(info)("pgtrigger_maxid", info.title, info.drivers)

    def current_offset(self, conn: Any) -> Offset:
        (high,) = self.query(conn, "SELECT coalesce(max(id), 0) FROM sdk_capture.changes")[0]
        return Offset(example.NAME, id=int(high) + 1)


class MaxIdHarness(ExampleHarness):
    dialect = "pgtrigger_maxid"
    plugin = MaxIdOffset()


def _url(postgres_url: str) -> str:
    return postgres_url.replace("postgresql://", "pgtrigger://", 1)


@pytest.fixture(scope="module")  # dropped while this module holds its group's lock
def harness(postgres_url: str, postgres_admin_url: str, postgres_admin: Any
            ) -> Iterator[Harness]:
    yield ExampleHarness(_url(postgres_url), postgres_admin_url, "sdk_cdc")  # type: ignore
    # the capture schema the dialect made (its change table, the trigger function)
    postgres_admin.execute("DROP SCHEMA IF EXISTS sdk_capture CASCADE")


@pytest.fixture
def maxid_kit(postgres_url: str, postgres_admin_url: str) -> Any:
    harness = MaxIdHarness(_url(postgres_url), postgres_admin_url, "sdk_cdc")
    kit = Kit(harness, load_dialect(harness))
    yield kit
    kit.close()


def test_the_example_dialect_is_under_200_lines() -> None:
    assert len((EXAMPLE / "sdk_pgtrigger.py").read_text().splitlines()) < 200


@pytest.mark.parametrize("run", range(10))
def test_the_kit_fails_a_highest_visible_id_offset_on_every_run(maxid_kit: Kit, run: int
                                                                ) -> None:
    tests = TestVisibilityInFlight()
    with pytest.raises(AssertionError, match="while write A was in flight"):
        tests.test_an_offset_taken_while_a_write_is_in_flight_does_not_pass_it(maxid_kit)
    with pytest.raises(KitError, match="a read between log positions"):
        tests.test_a_read_while_a_write_is_in_flight_sees_the_states_between_its_offsets(
            maxid_kit)


@pytest.mark.spark
@pytest.mark.skipif(not any(e.name == "pgtrigger" for e in entry_points(group="sdk.dialects")),
                    reason="the example is not installed: pip install ./examples/sdk-pgtrigger")
@pytest.mark.slow
def test_sdk_sync_with_the_example_under_concurrent_writers(
        spark: Any, tmp_path: Path, postgres_url: str, postgres_admin: Any) -> None:
    from sdk import ConnectionConfig, get_dialect
    from sdk.app.cli import main
    from sdk_sqlite import read_target

    name = f"trig_{uuid.uuid4().hex[:8]}"
    postgres_admin.execute(f"CREATE TABLE public.{name} (id int PRIMARY KEY, v text, n numeric)")
    postgres_admin.execute(f"GRANT SELECT, TRIGGER ON public.{name} TO sdk_cdc")
    postgres_admin.execute(f"INSERT INTO public.{name} SELECT i, 'v' || i, i / 7.0 "
                           "FROM generate_series(1, 2000) i")
    stop = threading.Event()

    def write() -> None:
        import psycopg

        with psycopg.connect(postgres_admin.info.dsn, autocommit=True) as conn:
            i = 0
            while not stop.is_set():
                i += 1
                conn.execute(f"UPDATE public.{name} SET n = n + 1 WHERE id = %s", (i % 2000,))
                conn.execute(f"INSERT INTO public.{name} VALUES (%s, 'new', 0) "
                             "ON CONFLICT (id) DO UPDATE SET v = 'again'", (2000 + i % 50,))
                if i % 10 == 0:
                    conn.execute(f"DELETE FROM public.{name} WHERE id = %s", (i * 7 % 2000,))
    writers = [threading.Thread(target=write) for _ in range(2)]
    try:
        mirror = tmp_path / "mirror.db"
        args = ["sync", "--source", _url(postgres_url), "--target", f"sqlite:///{mirror}",
                "--tables", f"public.{name}", "--checkpoint", str(tmp_path / "ck"),
                "--until", "caught-up", "--option", "snapshot.split.size=300"]
        for thread in writers:
            thread.start()
        assert main(args) == 0
        stop.set()
        for thread in writers:
            thread.join()
        assert main(args) == 0  # catch up with the last writes
        source = {r[0]: r for r in postgres_admin.execute(
            f"SELECT id, v, n FROM public.{name}").fetchall()}
        sqlite = get_dialect("sqlite")
        target = sqlite.connect(ConnectionConfig.from_url(f"sqlite:///{mirror}"))
        (table,) = [t for t in sqlite.list_tables(target) if name in t.name]
        mirrored = read_target(target, sqlite.describe_table(target, table))
        target.close()
        # the mirror (SQLite) keeps an unconstrained NUMERIC as its exact text
        assert {k[0]: (i, v, Decimal(n)) for k, (i, v, n) in mirrored.items()} == source
        assert len(source) > 1500
    finally:
        stop.set()
        postgres_admin.execute(f"DROP TABLE IF EXISTS public.{name}")


def test_the_generic_base_lists_and_describes_tables(kit: Kit) -> None:
    items, pairs = kit.items(), kit.pairs()
    listed = kit.dialect.list_tables(kit.conn)
    assert items.table in listed and pairs.table in listed
    assert listed == sorted(listed, key=lambda t: (t.schema, t.name))
    assert (items.key, pairs.key) == (("id",), ("a", "b"))
    assert [(c.name, c.type.value, c.nullable) for c in pairs.columns] == [
        ("a", "string", False), ("b", "int64", False), ("v", "string", True)]
