"""A sync's progress as Prometheus metrics, served with ``prometheus-client``.

``sdk sync --metrics-port N`` serves ``http://<host>:N/metrics`` from the report the sync makes
every couple of seconds (the same figures ``sdk status --json`` prints): the phase, rows read by
the snapshot and changes applied (counters), their rates, the lag, whether the log caught up,
restarts after passing faults, and per table its state, schema version, the splits done and
estimated and the rows read; with the last ``sdk verify``'s figures (``sdk verify
--metrics-port`` serves those alone). A custom collector turns the last report into metric
families at each scrape, on a registry of the sync's own (never the process-wide default one).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any, assert_never

from prometheus_client import CollectorRegistry, generate_latest, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ..algorithm.progress import STARTING, Part, ProgressReport, TableState
from ..algorithm.state import Phase


def _gauge(name: str, help_text: str, value: float | None = None,
           labels: tuple[str, ...] = ()) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, help_text, value=value, labels=labels or None)


def _part(part: Part, report: ProgressReport) -> Iterator[Metric]:
    """The metric families of one part of the report (none for the parts only a line
    shows)."""
    match part:
        case Part.RATE | Part.ETA | Part.POSITION | Part.REQUESTS:
            return
        case Part.PHASE:
            family = _gauge("sdk_sync_phase", "1 for the phase the sync is in",
                            labels=("phase",))
            for phase in (STARTING, *(p.value for p in Phase)):
                family.add_metric([phase], 1.0 if phase == report.phase_name else 0.0)
            yield family
        case Part.ROWS:
            yield CounterMetricFamily("sdk_sync_snapshot_rows", "rows the snapshot read",
                                      value=float(report.rows))
        case Part.APPLIED:
            yield CounterMetricFamily("sdk_sync_applied", "changes and rows applied to the "
                                      "target by this run", value=float(report.applied or 0))
            yield _gauge("sdk_sync_applied_per_second", "changes and rows applied per "
                         "second, this run's average", float(report.applied_per_second or 0.0))
        case Part.SKIPPED:
            yield CounterMetricFamily("sdk_sync_skipped", "changes set aside in the "
                                      "dead-letter table by this run (errors.mode=skip; sdk "
                                      "status lists them)", value=float(report.skipped or 0))
        case Part.CAUGHT_UP:
            yield _gauge("sdk_sync_caught_up", "1 once the log phase reached the source's head",
                         1.0 if report.caught_up else 0.0)
        case Part.CONSISTENT:
            if report.source_commit is not None:
                yield _gauge("sdk_sync_source_commit_timestamp_seconds", "when the newest "
                             "source transaction the target reflects committed",
                             report.source_commit)
            yield _gauge("sdk_sync_consistent", "1 while a reader of the target sees only "
                         "states the source had (every table streams, apply.consistency="
                         "transaction)", 0.0 if report.consistent_since is None else 1.0)
            if report.consistent_since is not None:
                yield _gauge("sdk_sync_consistent_since_timestamp_seconds", "since when the "
                             "target is consistent", report.consistent_since)
        case Part.LAG:
            if report.lag_seconds is not None:
                yield _gauge("sdk_sync_lag_seconds", "now minus the commit time of the newest "
                             "change applied, so at least the age of the oldest change "
                             "waiting (0 once what was applied reaches the log head)",
                             report.lag_seconds)
        case Part.AGE:
            if report.updated_at is not None:
                yield _gauge("sdk_sync_report_age_seconds", "seconds since the sync last "
                             "reported progress (a stalled sync grows it)",
                             max(time.time() - report.updated_at, 0.0))
        case Part.TABLES:
            tables = sorted(report.tables.items())
            for name, help_text, figure in (
                    ("sdk_table_splits_done", "snapshot splits read", "splits_done"),
                    ("sdk_table_splits_estimated", "snapshot splits planned or estimated",
                     "splits_estimated"),
                    ("sdk_table_snapshot_rows", "rows the table's snapshot read", "rows"),
                    ("sdk_table_schema_version", "the version of each table's columns (1 as "
                     "first captured, one more for each schema change followed)", "version")):
                family = _gauge(name, help_text, labels=("table",))
                for table, values in tables:
                    family.add_metric([table], float(getattr(values, figure)))
                yield family
            family = _gauge("sdk_table_state", "1 for the state each table is in ("
                            f"{', '.join(TableState)})", labels=("table", "state"))
            for table, values in tables:
                for state in TableState:
                    family.add_metric([table, state.value],
                                      1.0 if values.state == state else 0.0)
            yield family
        case _:
            assert_never(part)


def families(report: ProgressReport | Mapping[str, Any], retries: int = 0) -> Iterator[Metric]:
    """The metric families of one progress report (or its JSON): each part's
    (:class:`~sdk.algorithm.progress.Part`), then the restarts."""
    read = ProgressReport.of(report)
    for part in Part:
        yield from _part(part, read)
    yield CounterMetricFamily("sdk_sync_retries", "restarts after a passing fault of the "
                              "source or target", value=float(retries))


VERIFY_FIGURES = (
    ("chunks", "sdk_verify_chunks_done", "chunks compared by the last sdk verify"),
    ("chunks_total", "sdk_verify_chunks", "chunks the last sdk verify compares"),
    ("rows", "sdk_verify_rows", "source rows the last sdk verify compared"),
    ("differing", "sdk_verify_differing_rows", "rows the last sdk verify found differing "
     "between source and target"),
    ("unsettled", "sdk_verify_unsettled_rows", "rows the last sdk verify could not compare "
     "(changed during every read)"),
)


def verify_families(verify: Mapping[str, Any]) -> Iterator[Metric]:
    """The metric families of a verify's progress (``verify.json``, see
    :mod:`sdk.spark.verify`): its figures, whether it runs, when it last reported."""
    for key, name, help_text in VERIFY_FIGURES:
        yield _gauge(name, help_text, float(verify.get(key) or 0))
    yield _gauge("sdk_verify_running", "1 while an sdk verify runs",
                 1.0 if verify.get("state") == "running" else 0.0)
    yield _gauge("sdk_verify_updated_seconds", "when the last sdk verify last reported "
                 "(seconds since the epoch)", float(verify.get("updated_at") or 0))


class _Report(Collector):
    """Collects the metric families of the last report (and verify) at each scrape."""

    def __init__(self) -> None:
        self.report = ProgressReport()
        self.retries = 0
        self.verify: Mapping[str, Any] | None = None
        self.sync = True
        """False for a server of ``sdk verify`` alone (no sync figures)."""

    def collect(self) -> Iterator[Metric]:
        if self.sync:
            yield from families(self.report, self.retries)
        if self.verify is not None:
            yield from verify_families(self.verify)


    def registry(self) -> CollectorRegistry:
        """A registry of this collector alone (never the process-wide default one)."""
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self)
        return registry


def render(report: ProgressReport | Mapping[str, Any], retries: int = 0) -> str:
    """The metrics of one progress report (or its JSON), as Prometheus exposition text."""
    collector = _Report()
    collector.report, collector.retries = ProgressReport.of(report), retries
    return generate_latest(collector.registry()).decode()


class MetricsServer:
    """Serves ``/metrics`` from the last report given to :meth:`update`, on its own thread."""

    def __init__(self, port: int, host: str = "0.0.0.0", sync: bool = True) -> None:
        self._collector = _Report()
        self._collector.sync = sync
        self.server, self._thread = start_http_server(port, host,
                                                      registry=self._collector.registry())
        self.port = self.server.server_address[1]

    @property
    def retries(self) -> int:
        return self._collector.retries

    @retries.setter
    def retries(self, value: int) -> None:
        self._collector.retries = value

    def update(self, report: ProgressReport | Mapping[str, Any]) -> None:
        self._collector.report = ProgressReport.of(report)

    def update_verify(self, verify: Mapping[str, Any] | None) -> None:
        """Serve a verify's progress too (see :func:`verify_families`)."""
        self._collector.verify = verify

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
