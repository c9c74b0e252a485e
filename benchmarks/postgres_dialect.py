"""The PostgreSQL dialect against raw psycopg, in the same run, on the local server.

    python benchmarks/postgres_dialect.py [--rows 1000000] [--changes 100000]
        [--transactions 1] [--runs 9] [--admin-url postgresql://postgres@127.0.0.1:5432/sdk_test]
        [--url postgresql://sdk_cdc:sdk_cdc@127.0.0.1:5432/sdk_test]

- read_range: rows/s of the dialect reading the table as one split, against a raw psycopg
  server-side cursor over the same SELECT.
- begin_snapshot: the cost of a new exported view (a temporary slot) and of joining one by
  token, against the two watermarks a split otherwise takes.
- stream_log: row changes/s of the dialect over a WAL range, against a raw
  ``pg_logical_slot_peek_binary_changes`` of the same range whose tuples are decoded with
  psycopg's loaders (the least a typed reader must do). The two run in turn, best of
  ``--runs``; the client's CPU time is shown too, as the server's decoding (the same for both)
  and a noisy machine move the wall-clock figure.
"""

from __future__ import annotations

import argparse

from _timing import best_of, best_of_interleaved

from sdk import ChangeEvent, ConnectionConfig, SnapshotSplit, TableId, get_dialect


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--changes", type=int, default=100_000)
    parser.add_argument("--transactions", type=int, default=1,
                        help="commit the changes in this many transactions (default: one)")
    parser.add_argument("--runs", type=int, default=9,
                        help="timed runs of each stream_log reader, taken in turn")
    parser.add_argument("--admin-url", default="postgresql://postgres@127.0.0.1:5432/sdk_test")
    parser.add_argument("--url", default="postgresql://sdk_cdc:sdk_cdc@127.0.0.1:5432/sdk_test")
    args = parser.parse_args()
    import psycopg
    from psycopg.pq import Format

    from sdk_postgres import _pgoutput as pgo
    from sdk_postgres import lsn_text

    admin = psycopg.connect(args.admin_url, autocommit=True)
    admin.execute("DROP TABLE IF EXISTS bench_rows")
    admin.execute("DROP PUBLICATION IF EXISTS sdk_bench_pub")
    admin.execute("CREATE TABLE bench_rows (id int PRIMARY KEY, name text, price numeric(12,2), "
                  "qty int, created timestamptz)")
    admin.execute("INSERT INTO bench_rows SELECT g, 'name ' || g, g / 7.0, g % 100, "
                  "'2024-01-01'::timestamptz + g * interval '1 second' "
                  f"FROM generate_series(1, {args.rows}) g")
    admin.execute("CREATE PUBLICATION sdk_bench_pub FOR TABLE bench_rows")
    pg = get_dialect("postgres")
    url = f"{args.url}?slot=sdk_bench_slot&publication=sdk_bench_pub"
    conn = pg.connect(ConnectionConfig.from_url(url))
    table = TableId("public", "bench_rows")
    schema = pg.describe_table(conn, table)
    pg.prepare_capture(conn, [schema])
    whole = SnapshotSplit(table, 0, None, None)
    try:
        def dialect_read() -> int:
            return sum(len(b) for b in pg.read_range(conn, schema, whole, 10_000))

        def raw_read() -> int:
            n = 0
            with conn.raw.transaction(), conn.raw.cursor(name="raw") as cur:
                cur.itersize = 10_000
                cur.execute("SELECT id, name, price, qty, created FROM bench_rows")
                while batch := cur.fetchmany(10_000):
                    n += len(batch)
            return n

        raw_s, n = best_of(2, raw_read)
        ours_s, _ = best_of(2, dialect_read)
        print(f"read_range {n} rows: dialect {n / ours_s:,.0f} rows/s, raw psycopg server-side "
              f"cursor {n / raw_s:,.0f} rows/s: {raw_s / ours_s:.2f}x")

        def new_view() -> int:
            view = pg.begin_snapshot(conn, None)
            assert view is not None
            pg.end_snapshot(conn)
            return 1

        def watermarks() -> int:
            pg.current_offset(conn)
            pg.current_offset(conn)
            return 1

        view_s, _ = best_of(10, new_view)
        marks_s, _ = best_of(10, watermarks)
        held = pg.begin_snapshot(conn, None)
        assert held is not None and held.token is not None
        joiner = pg.connect(ConnectionConfig.from_url(url))

        def join() -> int:
            assert pg.begin_snapshot(joiner, held.token) is not None
            pg.end_snapshot(joiner)
            return 1

        join_s, _ = best_of(10, join)
        pg.end_snapshot(conn)
        joiner.close()
        print(f"begin_snapshot+end_snapshot: new exported view {view_s * 1000:.1f} ms, joining "
              f"it by token {join_s * 1000:.2f} ms; two watermarks {marks_s * 1000:.2f} ms")

        start = pg.current_offset(conn)
        if args.transactions <= 1:
            admin.execute(f"UPDATE bench_rows SET qty = qty + 1 WHERE id <= {args.changes}")
        else:  # the same changes committed in that many transactions
            step = -(-args.changes // args.transactions)
            admin.execute(f"DO $$ BEGIN FOR lo IN 1..{args.changes} BY {step} LOOP "
                          "UPDATE bench_rows SET qty = qty + 1 WHERE id BETWEEN lo AND "
                          f"LEAST(lo + {step} - 1, {args.changes}); COMMIT; END LOOP; END $$")
        end = pg.current_offset(conn)
        admin.execute("VACUUM bench_rows")  # not autovacuum in the middle of a timed run
        admin.execute("CHECKPOINT")

        def dialect_log() -> int:
            return sum(isinstance(e, ChangeEvent)
                       for e in pg.stream_log(conn, [schema], start, end))

        oids = {}

        def raw_log() -> int:
            n = 0
            relation = None
            with conn.raw.transaction(), conn.raw.cursor(name="rawpeek") as cur:
                cur.execute("SELECT data FROM pg_logical_slot_peek_binary_changes(%s, "
                            "%s::pg_lsn, NULL, 'proto_version', '1', 'publication_names', "
                            "'sdk_bench_pub')", ("sdk_bench_slot", lsn_text(end["lsn"])))
                while rows := cur.fetchmany(5000):
                    for (data,) in rows:
                        message = pgo.decode(bytes(data))
                        if isinstance(message, pgo.Relation):
                            relation = message
                        elif isinstance(message, pgo.Change) and message.new is not None:
                            assert relation is not None
                            values = []
                            for (_, oid, _), raw in zip(relation.columns, message.new,
                                                        strict=True):
                                if oid not in oids:
                                    oids[oid] = conn.raw.adapters.get_loader(
                                        oid, Format.TEXT)(oid, conn.raw)
                                values.append(None if raw is None else oids[oid].load(raw))
                            n += 1
            return n

        (raw_s, raw_cpu, n), (ours_s, ours_cpu, m) = best_of_interleaved(
            args.runs, raw_log, dialect_log)
        shape = (f"one {args.changes}-row statement" if args.transactions <= 1 else
                 f"{args.changes} changes in {args.transactions} transactions")
        print(f"stream_log, {shape}: dialect {m} changes "
              f"{m / ours_s:,.0f}/s, raw peek + typed decoding {n} changes {n / raw_s:,.0f}/s: "
              f"{raw_s / ours_s:.2f}x (client CPU alone: {raw_cpu / ours_cpu:.2f}x)")
    finally:
        admin.execute("SELECT pg_drop_replication_slot('sdk_bench_slot')")
        admin.execute("DROP TABLE bench_rows")
        admin.execute("DROP PUBLICATION IF EXISTS sdk_bench_pub")


if __name__ == "__main__":
    main()
