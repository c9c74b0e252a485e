"""A sync's progress as Prometheus metrics, served with ``prometheus-client``.

``sdk sync --metrics-port N`` serves ``http://<host>:N/metrics`` from the report the sync makes
every couple of seconds (the same figures ``sdk status --json`` prints): the phase, rows read by
the snapshot and changes applied (counters), their rates, the lag, whether the log caught up,
restarts after passing faults, and per table its state, schema version, the splits done and
estimated and the rows read. A custom collector turns the last report into metric families at
each scrape, on a registry of the sync's own (never the process-wide default one).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ..algorithm.progress import TABLE_STATES

PHASES = ("starting", "snapshot", "log", "done")


def families(report: Mapping[str, Any], retries: int = 0) -> Iterator[Metric]:
    """The metric families of one progress report."""
    def gauge(name: str, help_text: str, value: float | None = None,
              labels: tuple[str, ...] = ()) -> GaugeMetricFamily:
        return GaugeMetricFamily(name, help_text, value=value, labels=labels or None)

    phase = str(report.get("phase", "starting"))
    family = gauge("sdk_sync_phase", "1 for the phase the sync is in", labels=("phase",))
    for p in PHASES:
        family.add_metric([p], 1.0 if p == phase else 0.0)
    yield family
    yield CounterMetricFamily("sdk_sync_snapshot_rows", "rows the snapshot read",
                              value=float(report.get("rows", 0)))
    yield CounterMetricFamily("sdk_sync_applied", "changes and rows applied to the target by "
                              "this run", value=float(report.get("applied", 0)))
    yield CounterMetricFamily("sdk_sync_skipped", "changes set aside in the dead-letter table "
                              "by this run (errors.mode=skip; sdk status lists them)",
                              value=float(report.get("skipped", 0)))
    yield gauge("sdk_sync_applied_per_second", "changes and rows applied per second, this "
                "run's average", float(report.get("applied_per_second", 0.0)))
    lag = report.get("lag_seconds")
    if lag is not None:
        yield gauge("sdk_sync_lag_seconds", "now minus the commit time of the newest change "
                    "applied, so at least the age of the oldest change waiting (0 once what was "
                    "applied reaches the log head)", float(lag))
    yield gauge("sdk_sync_caught_up", "1 once the log phase reached the source's head",
                1.0 if report.get("caught_up") else 0.0)
    yield CounterMetricFamily("sdk_sync_retries", "restarts after a passing fault of the "
                              "source or target", value=float(retries))
    updated = report.get("updated_at")
    if updated is not None:
        yield gauge("sdk_sync_report_age_seconds", "seconds since the sync last reported "
                    "progress (a stalled sync grows it)", max(time.time() - updated, 0.0))
    tables: Mapping[str, Mapping[str, Any]] = report.get("tables") or {}
    for name, key, help_text, default in (
            ("sdk_table_splits_done", "splits_done", "snapshot splits read", 0),
            ("sdk_table_splits_estimated", "splits_estimated", "snapshot splits planned or "
             "estimated", 0),
            ("sdk_table_snapshot_rows", "rows", "rows the table's snapshot read", 0),
            ("sdk_table_schema_version", "schema_version", "the version of each table's "
             "columns (1 as first captured, one more for each schema change followed)", 1)):
        family = gauge(name, help_text, labels=("table",))
        for table, values in sorted(tables.items()):
            family.add_metric([table], float(values.get(key, default)))
        yield family
    family = gauge("sdk_table_state", "1 for the state each table is in (snapshotting, "
                   "snapshot done, streaming, re-snapshotting, leaving, dropped)",
                   labels=("table", "state"))
    for table, values in sorted(tables.items()):
        for state in TABLE_STATES:
            family.add_metric([table, state], 1.0 if values.get("state") == state else 0.0)
    yield family


class _Report(Collector):
    """Collects the metric families of the last report at each scrape."""

    def __init__(self) -> None:
        self.report: dict[str, Any] = {}
        self.retries = 0

    def collect(self) -> Iterator[Metric]:
        return families(self.report, self.retries)


    def registry(self) -> CollectorRegistry:
        """A registry of this collector alone (never the process-wide default one)."""
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self)
        return registry


def render(report: Mapping[str, Any], retries: int = 0) -> str:
    """The metrics of one progress report, as Prometheus exposition text."""
    collector = _Report()
    collector.report, collector.retries = dict(report), retries
    return generate_latest(collector.registry()).decode()


class MetricsServer:
    """Serves ``/metrics`` from the last report given to :meth:`update`, on its own thread."""

    def __init__(self, port: int, host: str = "0.0.0.0") -> None:
        self._collector = _Report()
        self.server, self._thread = start_http_server(port, host,
                                                      registry=self._collector.registry())
        self.port = self.server.server_address[1]

    @property
    def retries(self) -> int:
        return self._collector.retries

    @retries.setter
    def retries(self, value: int) -> None:
        self._collector.retries = value

    def update(self, report: Mapping[str, Any]) -> None:
        self._collector.report = dict(report)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
