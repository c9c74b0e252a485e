"""The chunks of a chained log batch: small first ones growing to ``BATCH_ROWS`` (so the writer
thread applies while the rest is read), the same cut on a replay, which writes nothing."""

from __future__ import annotations

from itertools import accumulate
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from helpers.sources import chained_spec

from sdk import ConnectionConfig, get_dialect
from sdk.algorithm import Phase, SyncState
from sdk.spark.state.engine_state import EngineState
from sdk.spark.state.statestore import StateStore
from sdk_sqlite import read_target

pytestmark = pytest.mark.spark


def test_chunks_grow_to_the_batch_rows_and_never_end_later_than_fixed_chunks() -> None:
    from sdk.spark.executor.reads import BATCH_ROWS, FIRST_CHUNK_ROWS, chunk_rows

    sizes = [chunk_rows(n) for n in range(64)]
    assert sizes[0] == FIRST_CHUNK_ROWS and sizes[1] == 2 * FIRST_CHUNK_ROWS
    assert max(sizes) == BATCH_ROWS == sizes[-1]
    # chunk n ends no later than the n-th chunk of BATCH_ROWS did: a replay by an older
    # version's ledger skips only changes that version applied
    assert all(end <= (n + 1) * BATCH_ROWS for n, end in enumerate(accumulate(sizes)))


def test_a_log_batch_is_cut_into_growing_chunks_and_a_replay_writes_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sdk import ChangeEvent, Offset
    from sdk.job.target import Applier
    from sdk.spark.executor import reads

    spec, target_url = chained_spec(tmp_path, rows=10)
    table = spec.tables[0]
    changes = [ChangeEvent(table.table, "u", (i % 10,), (i % 10, f"v{i}", 1.0, b"x"),
                           Offset("sqlite", n=i)) for i in range(20)]
    monkeypatch.setattr(reads, "_log_events", lambda *_: iter(changes))
    monkeypatch.setattr(reads, "BATCH_ROWS", 5)
    monkeypatch.setattr(reads, "FIRST_CHUNK_ROWS", 2)
    sizes: list[tuple[str, int]] = []
    apply = Applier.apply

    def counting(self: Applier, source: object, events: list[object], batch: str,
                 **more: Any) -> None:
        sizes.append((batch.rsplit("/", 1)[1], len(events)))
        apply(self, source, events, batch, **more)  # type: ignore[arg-type]

    monkeypatch.setattr(Applier, "apply", counting)
    sync = SyncState(Phase.LOG, {table.table: table}, position=Offset("sqlite", n=20))
    state = EngineState(sync, log_from=Offset("sqlite", n=0), seq=20)
    partition = reads.LogPartition(state.save(StateStore(str(tmp_path / "state"))))

    def applied() -> int:
        report = pa.Table.from_batches(list(reads.read_log(spec, partition))).to_pylist()
        return int(sum(row["applied"] for row in report))

    assert applied() == 20
    assert sizes == [("0", 2), ("1", 4), ("2", 5), ("3", 5), ("4", 4)]
    target = get_dialect("sqlite").connect(ConnectionConfig.from_url(target_url))
    assert {k[0]: v[1] for k, v in read_target(target, table).items()} == \
        {i: f"v{i + 10}" for i in range(10)}
    sizes.clear()
    assert applied() == 0  # the same chunks, each found in the ledger
    assert sizes == [("0", 2), ("1", 4), ("2", 5), ("3", 5), ("4", 4)]
    target.close()
