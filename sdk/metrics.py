"""A sync's progress as Prometheus metrics (the text exposition format, served over HTTP).

``sdk sync --metrics-port N`` serves ``http://<host>:N/metrics`` from the report the sync makes
every couple of seconds (the same figures ``sdk status --json`` prints): the phase, rows read by
the snapshot and changes applied (counters), their rates, the lag, whether the log caught up,
restarts after passing faults, and per table the splits done and estimated and the rows read.
The standard library serves it; the format is Prometheus's text format 0.0.4.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .algorithm.progress import TABLE_STATES

PHASES = ("starting", "snapshot", "log", "done")


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render(report: Mapping[str, Any], retries: int = 0) -> str:
    """The metrics of one progress report, as exposition text."""
    out: list[str] = []

    def metric(name: str, kind: str, help_text: str,
               samples: list[tuple[dict[str, str], float]]) -> None:
        out.append(f"# HELP {name} {help_text}")
        out.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            text = ",".join(f'{k}="{_label(v)}"' for k, v in labels.items())
            out.append(f"{name}{{{text}}} {value:g}" if text else f"{name} {value:g}")

    phase = str(report.get("phase", "starting"))
    metric("sdk_sync_phase", "gauge", "1 for the phase the sync is in",
           [({"phase": p}, 1.0 if p == phase else 0.0) for p in PHASES])
    metric("sdk_sync_snapshot_rows_total", "counter", "rows the snapshot read",
           [({}, float(report.get("rows", 0)))])
    metric("sdk_sync_applied_total", "counter", "changes and rows applied to the target by "
           "this run", [({}, float(report.get("applied", 0)))])
    metric("sdk_sync_applied_per_second", "gauge", "changes and rows applied per second, "
           "this run's average", [({}, float(report.get("applied_per_second", 0.0)))])
    lag = report.get("lag_seconds")
    if lag is not None:
        metric("sdk_sync_lag_seconds", "gauge", "age of the newest change applied when the "
               "last batch committed (0 when caught up)", [({}, float(lag))])
    metric("sdk_sync_caught_up", "gauge", "1 once the log phase reached the source's head",
           [({}, 1.0 if report.get("caught_up") else 0.0)])
    metric("sdk_sync_retries_total", "counter", "restarts after a passing fault of the source "
           "or target", [({}, float(retries))])
    updated = report.get("updated_at")
    if updated is not None:
        metric("sdk_sync_report_age_seconds", "gauge", "seconds since the sync last reported "
               "progress (a stalled sync grows it)", [({}, max(time.time() - updated, 0.0))])
    tables: Mapping[str, Mapping[str, Any]] = report.get("tables") or {}
    for name, kind, key, help_text in (
            ("sdk_table_splits_done", "gauge", "splits_done", "snapshot splits read"),
            ("sdk_table_splits_estimated", "gauge", "splits_estimated", "snapshot splits "
             "planned or estimated"),
            ("sdk_table_snapshot_rows", "gauge", "rows", "rows the table's snapshot read")):
        metric(name, kind, help_text,
               [({"table": table}, float(values.get(key, 0))) for table, values in
                sorted(tables.items())])
    metric("sdk_table_state", "gauge", "1 for the state each table is in (snapshotting, "
           "snapshot done, streaming, leaving, dropped)",
           [({"table": table, "state": state}, 1.0 if values.get("state") == state else 0.0)
            for table, values in sorted(tables.items()) for state in TABLE_STATES])
    metric("sdk_table_schema_version", "gauge", "the version of each table's columns (1 as "
           "first captured, one more for each schema change followed)",
           [({"table": table}, float(values.get("schema_version", 1)))
            for table, values in sorted(tables.items())])
    return "\n".join(out) + "\n"


class MetricsServer:
    """Serves ``/metrics`` from the last report given to :meth:`update`, on its own thread."""

    def __init__(self, port: int, host: str = "0.0.0.0") -> None:
        self._report: dict[str, Any] = {}
        self.retries = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404, "only /metrics here")
                    return
                body = render(owner._report, owner.retries).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return  # scrapes are not news

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, name="sdk-metrics",
                                        daemon=True)
        self._thread.start()

    def update(self, report: Mapping[str, Any]) -> None:
        self._report = dict(report)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
