"""The heads of the DDL statements that empty or replace an Oracle table, as LogMiner's
``SQL_REDO`` holds them (the statement as issued); the mining loop's handling is in
test_oracle_miner.py."""

from __future__ import annotations

import pytest

from sdk_oracle._ddl import Emptied, emptied


@pytest.mark.parametrize(("sql", "expected"), [
    ("commit;", None),
    ('create table "SHOP"."T" (id number)', None),
    ("alter table orders add (x number)", None),
    ("ALTER TABLE orders DROP COLUMN note", None),
    ("alter table orders rename column a to b", None),
    ("ALTER TABLE orders MOVE PARTITION p1 TABLESPACE users", None),
    ("alter table orders split partition p1 at (100) into (partition a, partition b)", None),
    ("TRUNCATE CLUSTER c", None),
    ("DROP INDEX orders_ix", None),
    ("truncate table orders;", Emptied("TRUNCATE", [("SHOP", "ORDERS")], [], False)),
    ('TRUNCATE TABLE "Shop"."my tab" REUSE STORAGE',
     Emptied("TRUNCATE", [("Shop", "my tab")], [], False)),
    ("/* nightly */ drop table shop.orders cascade constraints purge",
     Emptied("DROP TABLE", [("SHOP", "ORDERS")], [], True)),
    ('drop table "ORDERS" AS "BIN$9l2KF0b1QYm0aWv3x8Rz3Q==$0"',
     Emptied("DROP TABLE", [("SHOP", "ORDERS")], [], True)),
    ("rename orders_new to orders",
     Emptied("RENAME", [("SHOP", "ORDERS_NEW"), ("SHOP", "ORDERS")], [], True)),
    ("ALTER TABLE other.t RENAME TO orders",
     Emptied("ALTER TABLE ... RENAME", [("OTHER", "T"), ("OTHER", "ORDERS")], [], True)),
    ("alter table orders truncate partition p_2024 update global indexes",
     Emptied("ALTER TABLE ... TRUNCATE PARTITION", [("SHOP", "ORDERS")], [], False)),
    ("ALTER TABLE orders DROP PARTITION FOR (DATE '2024-01-01')",
     Emptied("ALTER TABLE ... DROP PARTITION", [("SHOP", "ORDERS")], [], False)),
    ("alter table orders drop subpartitions s1, s2",
     Emptied("ALTER TABLE ... DROP SUBPARTITION", [("SHOP", "ORDERS")], [], False)),
    ('alter table orders exchange partition p1 with table "STAGE"."ORDERS_LOAD" '
     "including indexes without validation",
     Emptied("ALTER TABLE ... EXCHANGE PARTITION",
             [("SHOP", "ORDERS"), ("STAGE", "ORDERS_LOAD")], [], False)),
    ("drop user shop cascade", Emptied("DROP USER", [], ["SHOP"], True)),
    ("-- a comment first\n  TRUNCATE TABLE \"caf\u00e9\"",
     Emptied("TRUNCATE", [("SHOP", "caf\u00e9")], [], False)),
])
def test_statements_that_empty_tables(sql: str, expected: Emptied | None) -> None:
    assert emptied(sql, "SHOP") == expected


def test_an_unqualified_name_without_a_schema_names_nothing() -> None:
    assert emptied("truncate table orders", None) is None
    assert emptied("truncate table shop.orders", None) == \
        Emptied("TRUNCATE", [("SHOP", "ORDERS")], [], False)
