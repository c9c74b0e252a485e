"""The ``sdk`` command line."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..dialect.errors import SdkError
from ..dialect.manager import default_manager

if TYPE_CHECKING:
    from ..job.spec import SyncSettings


def cmd_dialects(args: argparse.Namespace) -> int:
    """List installed dialects, their capabilities, their URL options and what is missing to
    use each."""
    for status in default_manager().statuses():
        if status.usable and status.info:
            caps = ", ".join(sorted(c.value for c in status.info.capabilities)) or "-"
            role = "target only; " if status.info.target_only else ""
            print(f"{status.name:<10} usable    {status.info.title}; {role}capabilities: {caps}")
            if status.info.url_options and args.options:
                for name, help in status.info.url_options:
                    print(f"{'':<10}   ?{name}=  {help}")
            elif status.info.url_options:
                names = ", ".join(name for name, _ in status.info.url_options)
                print(f"{'':<10}           URL options: {names}")
        else:
            print(f"{status.name:<10} unusable  {status.problem}")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    """Run the source dialect's preflight (and with ``--target`` the target's) and print each
    requirement with OK or its fix: what ``sdk sync`` would find (what it sets up itself,
    such as a publication, counts as OK)."""
    from ..algorithm import SyncOptions, choose_key
    from ..dialect.errors import MissingKeyError
    from ..dialect.types import Requirement
    from ..job.spec import chosen_tables
    from ..job.target import Target

    dialect, config = default_manager().source_for_url(args.source)
    conn = dialect.connect(config)
    try:
        checks = [s.requirement() for s in dialect.connection_security(conn)]
        if args.checkpoint:
            checks.append(_checkpoint_check(dialect, conn, config.masked_url, args.checkpoint))
        tables = chosen_tables(dialect, conn, config, ",".join(args.tables or ["*"]))
        checks += dialect.preflight(conn, tables)
        described = []
        for table in tables:  # the key sync splits on, with the default options
            described.append(dialect.describe_table(conn, table))
            try:
                key = choose_key(described[-1], SyncOptions()).key
                checks.append(Requirement(f"key of {table}", True, ", ".join(key)))
            except MissingKeyError as exc:
                checks.append(Requirement(
                    f"key of {table}", False, "sdk sync refuses the table unless "
                    "chunk-key.column names its key", str(exc), required=False))
    finally:
        conn.close()
    print(f"{config.masked_url} ({dialect.name}):")
    for check in checks:
        print(f"  {check}")
    if args.target:  # what the target user may do, as sdk sync asks it before it starts
        target = Target.of(args.target, args.target_schema)
        print(f"{target.config.masked_url} ({target.dialect_name}, target):")
        targeted = target.preflight(described)
        for check in targeted:
            print(f"  {check}")
        checks += targeted
    failed = [c for c in checks if not c.ok and c.required]
    warned = [c for c in checks if not c.ok and not c.required]
    print(f"{len(checks) - len(failed) - len(warned)} OK, {len(failed)} missing, "
          f"{len(warned)} warnings")
    return 1 if failed else 0


def _checkpoint_check(dialect: Any, conn: Any, url: str, checkpoint: str) -> Any:
    """Whether ``conn``'s server is the source ``checkpoint`` follows and its log still holds
    the position the sync resumes from, as a line of ``sdk check``."""
    from ..dialect.codec import dumps, position_label
    from ..dialect.errors import LogMismatchError, OffsetExpiredError
    from ..dialect.types import Requirement
    from ..job.spec import checkpoint_paths
    from ..spark.state.engine_state import check_checkpoint_source
    from ..spark.state.statestore import StateStore

    name = f"checkpoint {checkpoint} can resume here"
    store = StateStore(checkpoint_paths(checkpoint)[0], create=False)
    try:
        position, moved = check_checkpoint_source(store, dialect, conn, url, checkpoint)
    except (LogMismatchError, OffsetExpiredError) as exc:
        return Requirement(name, False, "", str(exc))
    detail = "no sync has run with it" if position is None else \
        "the same server, and its log holds the position the sync resumes from"
    if moved and position is not None:
        detail = (f"another server of the checkpoint's source (a failover): it holds every "
                  f"change the checkpoint read, and a sync goes on at "
                  f"{position_label(dumps(position.to_json()))}")
    return Requirement(name, True, detail)


def _options(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SdkError(f"--option takes KEY=VALUE, got {pair!r}")
        out[key.strip()] = value.strip()
    return out


def _reporter() -> Any:
    """Progress as one live display on a terminal (:class:`sdk.app.display.LiveProgress`), as
    plain lines otherwise (a pipe, a file: one line per report)."""
    from .report import describe_progress

    if sys.stdout.isatty():
        from .display import LiveProgress

        return LiveProgress()

    def report(progress: dict[str, Any]) -> None:
        print(" | ".join(describe_progress(progress, PIPE_TABLES)), flush=True)
    return report


PIPE_TABLES = 5
"""Tables a plain progress line names one by one; past them it counts them by state, so a
line stays short however many tables the sync captures."""
STATUS_TABLES = 50
"""Tables ``sdk status`` lists one by one unless ``--table`` or ``--all``."""


def _yaml_config(path: str) -> dict[str, Any]:
    """The settings of a ``--config`` YAML file (a mapping)."""
    import yaml

    try:
        with open(path) as file:
            loaded = yaml.safe_load(file) or {}
    except OSError as exc:
        raise SdkError(f"cannot read --config {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise SdkError(f"--config {path} is not valid YAML: {exc}") from None
    if not isinstance(loaded, dict):
        raise SdkError(f"--config {path} must hold a mapping of settings")
    return loaded


def _sync_settings(args: argparse.Namespace) -> SyncSettings:
    """Settings from ``--config FILE`` (YAML), overridden by the flags given."""
    from ..job.spec import SYNC_OPTIONS, sync_settings

    loaded = _yaml_config(args.config) if args.config else {}
    options = {str(k): str(v) for k, v in (loaded.pop("options", None) or {}).items()}
    options.update(_options(args.option))
    if isinstance(loaded.get("tables"), list):
        loaded["tables"] = ",".join(str(t) for t in loaded["tables"])
    try:
        SYNC_OPTIONS.check_names(loaded)
    except SdkError as exc:
        raise SdkError(f"--config {args.config}: {exc}") from None
    loaded = SYNC_OPTIONS.canonical(loaded)  # a former key (target_schema) meets its flag
    flags = {o.name: getattr(args, o.attr) for o in SYNC_OPTIONS}
    given = {**loaded, **{k: v for k, v in flags.items() if v is not None}}
    return sync_settings(given, options)


def cmd_sync(args: argparse.Namespace) -> int:
    """Copy the chosen tables into the target, then follow every change, exactly once."""
    from ..spark.startup.headworkers import discard, early_workers, ends_without_spark

    settings = _sync_settings(args)
    # the head start's workers start their imports before the engine is imported here
    workers = early_workers(settings)
    try:
        from ..spark.session import EarlySession, jvm_rows

        # the driver JVM starts before the engine is imported (~0.6 s of it) and while the
        # source is checked; not for a sync the driver's head start runs whole
        chained = settings.target is not None and settings.changes is None
        early = None if ends_without_spark(settings.head_start, settings.master,
                                           settings.until, chained) else \
            EarlySession(settings.master,
                         rows_in_jvm=jvm_rows(settings.target, settings.changes))
        from ..spark.sync import run_sync

        reporter = _reporter()
    except BaseException:
        discard(workers)
        raise
    try:
        summary = run_sync(settings, report=reporter, early=early, workers=workers)
    finally:
        getattr(reporter, "close", lambda: None)()
    skipped = f"; skipped {summary.skipped} (sdk status lists them)" if summary.skipped else ""
    print(f"applied {summary.rows_applied} rows in {summary.seconds:.1f} s; phase "
          f"{summary.phase}{', caught up' if summary.caught_up else ''}{skipped}")
    return 0


def _status_at_source(url: str, checkpoint: str, store: Any) -> tuple[Any, list[Any]]:
    """Whether the source at ``url`` is the one ``checkpoint`` follows (a line of ``sdk
    check``), and what it says of the capture now (the WAL a slot holds back, ...)."""
    from ..dialect.manager import connect
    from ..spark.state.engine_state import captured_tables

    dialect, conn, config = connect(url)
    try:
        check = _checkpoint_check(dialect, conn, config.masked_url, checkpoint)
        advice = [r for r in dialect.preflight(conn, [t.table for t in captured_tables(store)])
                  if not r.ok] if check.ok else []
    finally:
        conn.close()
    return check, advice


def cmd_status(args: argparse.Namespace) -> int:
    """Show a sync's phase, per-table progress and log position from its checkpoint."""
    from dataclasses import replace

    from ..algorithm.lineage import SOURCE_FILE
    from ..job.failures import Exit
    from ..job.spec import checkpoint_paths
    from ..spark.executor import deadletter
    from ..spark.state.engine_state import (
        APPLIED_FILE,
        VERIFY_FILE,
        live_report,
        readable_checkpoint,
    )
    from ..spark.state.statestore import StateStore
    from .report import describe_progress

    state_dir, _ = checkpoint_paths(args.checkpoint)
    store = StateStore(state_dir, create=False)
    readable_checkpoint(store)  # a damaged file is named, not reported on as caught up
    progress = live_report(store)
    if progress is None:
        print(f"no sync has run with checkpoint {args.checkpoint}")
        return 1
    source = store.read_json(SOURCE_FILE)
    if args.source:
        check, advice = _status_at_source(args.source, args.checkpoint, store)
        if not check.ok:
            print(f"sdk: error: {check.fix}", file=sys.stderr)
            return int(Exit.REFUSED)
    dead = deadletter.read(store)
    skipped = deadletter.counts(dead)
    applied = store.read_json(APPLIED_FILE) or {}
    last: dict[str, Any] = {  # what the running sync last said it applied
        key: float(applied[key]) for key in ("lag_seconds", "source_commit", "consistent_since")
        if applied.get(key) is not None and getattr(progress, key) is None}
    if applied.get("per_table_commits"):
        last["per_table_commits"] = True
    progress = replace(progress, **last)
    verified = store.read_json(VERIFY_FILE)
    if args.json:
        owner = store.read_json("owner.json")
        print(json.dumps({**progress.to_json(), "skipped": skipped, "last_run": applied or None,
                          "owner": owner and {k: owner[k] for k in ("host", "pid", "since")},
                          "verify": verified}))
        return 0
    if args.table:
        import fnmatch

        progress = replace(progress, tables={
            n: t for n, t in progress.tables.items()
            if any(fnmatch.fnmatchcase(n, p.strip()) for p in args.table.split(","))})
    print("\n".join(describe_progress(
        progress, None if args.all or args.table else STATUS_TABLES)))
    if source is not None:
        identity = ", ".join(f"{k}={v}" for k, v in sorted(source["identity"].items()))
        checked = f"; checked: {check.detail}" if args.source else ""
        print(f"source: {source['url']} ({identity or 'no identity recorded'}){checked}")
        for old in source.get("followed", []):
            print(f"  followed a failover from {old.get('url')} at {old.get('until')}")
    if isinstance(verified, dict):
        import datetime as dt

        at = dt.datetime.fromtimestamp(float(verified.get("updated_at", 0)), dt.UTC)
        print(f"{verify_line(verified)} (last report {at:%Y-%m-%d %H:%M:%S} UTC)")
    if args.source:
        for item in advice:
            print(f"  [{'MISSING' if item.required else 'WARN'}] {item.name}: {item.detail}")
    for line in _skipped_lines(dead, skipped, args.checkpoint,
                               store.path(deadletter.FOLDER)):
        print(line)
    return 0


REASONS_SHOWN = 5
"""How many reasons ``sdk status`` lists for a table's changes set aside."""


def _skipped_lines(dead: Any, skipped: dict[str, int], checkpoint: str, folder: str
                   ) -> list[str]:
    """What ``sdk status`` says of the changes set aside (``errors.mode=skip``): per table,
    how many for each reason (the most frequent first, at most ``REASONS_SHOWN``), and the
    ``sdk snapshot`` that brings them across once fixed."""
    from ..spark.executor import deadletter

    if not skipped:
        return []
    lines = [f"skipped (errors.mode=skip): {sum(skipped.values())} changes set aside in the "
             f"dead-letter table, {folder}"]
    for table, count in sorted(skipped.items()):
        why = deadletter.reasons(dead, table)
        if len(why) == 1:
            lines.append(f"  {table}: {count} ({why[0][0]})")
        else:
            lines.append(f"  {table}: {count}, for {len(why)} reasons:")
            lines += [f"    {n}: {reason}" for reason, n in why[:REASONS_SHOWN]]
            if len(why) > REASONS_SHOWN:
                rest = sum(n for _, n in why[REASONS_SHOWN:])
                lines.append(f"    {rest}: {len(why) - REASONS_SHOWN} other reasons (each in "
                             "the dead-letter table)")
        where = deadletter.where_of(deadletter.keys_of(dead, table))
        condition = "<a condition selecting their keys>"
        retry = "--skipped" if where is not None else f"--where {condition}"
        lines.append(f"    once the cause is fixed: sdk snapshot --checkpoint {checkpoint} "
                     f"--table {table} --source <URL> {retry}")
    return lines


def cmd_snapshot(args: argparse.Namespace) -> int:
    """Ask a sync (running or stopped) to read a table again while it streams; list its
    requests, or withdraw one it has not taken up."""
    import datetime as dt

    from ..dialect.errors import ConfigurationError
    from ..job.spec import checkpoint_paths
    from ..spark.driver.requests import list_requests, request_snapshot, withdraw_request

    state_dir, _ = checkpoint_paths(args.checkpoint)
    if args.list:
        requests = list_requests(state_dir)
        for r in requests:
            at = "-" if r.at is None else \
                f"{dt.datetime.fromtimestamp(r.at, dt.UTC):%Y-%m-%d %H:%M:%S} UTC"
            print(f"{r.id}  {r.table}  {r.state}  {at}  "
                  f"{f'where {r.where}' if r.where else 'all rows'}")
        if not requests:
            print(f"no snapshot requests in checkpoint {args.checkpoint}")
        return 0
    if args.cancel:
        withdrawn = withdraw_request(state_dir, args.cancel)
        print(f"snapshot request {withdrawn.id} of {withdrawn.table} withdrawn: the sync "
              "will not read it")
        return 0
    where = args.where
    if args.skipped:
        where = _skipped_where(state_dir, args)
    if where is not None and args.source is None:
        raise ConfigurationError("--where needs --source URL (the database the sync reads): "
                                 "the condition is run there before it is recorded")
    request = request_snapshot(state_dir, args.table, where, args.source)
    if args.skipped:
        from ..spark.executor import deadletter
        from ..spark.state.statestore import StateStore

        deadletter.retire(StateStore(state_dir, create=False), str(request.table))
    rows = f"the rows of {request.table} where {request.where}" if request.where else \
        str(request.table)
    print(f"snapshot of {rows} requested ({request.id}); the sync reads it at its next batch "
          "(sdk status shows it re-snapshotting; sdk snapshot --cancel ID withdraws it until "
          "then)")
    return 0


def _skipped_where(state_dir: str, args: argparse.Namespace) -> str:
    """The ``--where`` selecting the keys of ``--table``'s changes set aside."""
    from ..dialect.errors import ConfigurationError
    from ..spark.executor import deadletter
    from ..spark.state.statestore import StateStore

    if args.where is not None or args.table is None:
        raise ConfigurationError("--skipped goes with --table (and --source), not --where")
    dead = deadletter.read(StateStore(state_dir, create=False))
    keys = deadletter.keys_of(dead, args.table)
    if not keys:
        raise ConfigurationError(f"no changes of {args.table} are set aside in checkpoint "
                                 f"{args.checkpoint} (sdk status lists those that are)")
    where = deadletter.where_of(keys)
    if where is None:
        raise ConfigurationError(
            f"the keys of {args.table}'s changes set aside cannot be written as a condition "
            f"here (a quoted column or a value that is not a number or text): give --where "
            f"yourself; the keys are in the dead-letter files under {state_dir}/"
            f"{deadletter.FOLDER}")
    return where


def cmd_verify(args: argparse.Namespace) -> int:
    """Compare the target with the source chunk by chunk while the sync runs; report the rows
    that differ (exit 1), repair them with --repair (exit 0 when equal, 2 on an error)."""
    from ..spark.verify import VerifyJob, default_report_path, run_verify, write_report

    _verify_config(args)
    job = VerifyJob(args.checkpoint, args.source, args.target, args.target_schema,
                    [p.strip() for t in args.table or () for p in t.split(",") if p.strip()],
                    args.where, args.rows_per_second, args.static, args.repair,
                    args.chunk_rows, args.parallel, args.report, args.wait_seconds)

    metrics = None
    if args.metrics_port is not None:
        from ..job.metrics import MetricsServer

        metrics = MetricsServer(args.metrics_port, sync=False)
    tty = sys.stdout.isatty()

    def progress(data: dict[str, Any]) -> None:
        line = verify_line(data)
        print(f"\r{line}\x1b[K" if tty else line, end="" if tty else "\n", flush=True)
        if metrics is not None:
            metrics.update_verify(data)
    try:
        outcome = run_verify(job, progress)
    except (Exception, KeyboardInterrupt) as exc:
        _failed(args, exc)
        return 2
    finally:
        if tty:
            print()
        if metrics is not None:
            metrics.close()
    path = args.report or default_report_path(args.checkpoint)
    write_report(outcome, path)
    for table, why in sorted(outcome.skipped.items()):
        print(f"  {table}: {why}")
    shown = [d for result in outcome.results for d in result.differences]
    for d in shown[:SHOWN_DIFFERENCES]:
        print(f"  {d.table} key {list(d.key)}: {d.kind}")
    if len(shown) > SHOWN_DIFFERENCES:
        print(f"  ... and {len(shown) - SHOWN_DIFFERENCES} more rows (the report has them all)")
    repaired = f"; read again: {len(outcome.repaired)} request(s)" if outcome.repaired else ""
    unsettled = f", {outcome.unsettled} unsettled (changed at every read: verify again " \
        "later)" if outcome.unsettled else ""
    print(f"verified {outcome.rows} rows in {outcome.seconds:.1f} s: "
          f"{outcome.differences} differing{unsettled}{repaired}; report: {path}")
    if outcome.differences and not job.repair:
        print("  with the sync running, the same command with --repair (not --static) has it "
              "read them again" if job.static else
              "  the same command with --repair has the running sync read them again")
    return 0 if outcome.differences == 0 else 1


def _verify_config(args: argparse.Namespace) -> None:
    """Fill ``sdk verify``'s source, target, target schema and checkpoint from the sync's
    ``--config`` file where no flag gives them."""
    if args.config:
        from ..job.spec import SYNC_OPTIONS

        loaded = SYNC_OPTIONS.canonical(_yaml_config(args.config))
        for flag, key in (("source", "source"), ("target", "target"),
                          ("target_schema", "target.schema"), ("checkpoint", "checkpoint")):
            if getattr(args, flag) is None and loaded.get(key) is not None:
                setattr(args, flag, str(loaded[key]))
    for flag in ("source", "target"):
        if getattr(args, flag) is None:
            raise SdkError(f"sdk verify needs --{flag} (or {flag!r} in the --config file)")
    if args.checkpoint is None:
        args.checkpoint = "sdk-checkpoint"


def verify_line(data: dict[str, Any]) -> str:
    """A verify's progress (``verify.json``) in one line."""
    return (f"verify {data.get('state', 'running')}: {data.get('chunks')}/"
            f"{data.get('chunks_total')} chunks, {data.get('rows')} rows, "
            f"{data.get('differing')} differing, {data.get('unsettled')} unsettled")


SHOWN_DIFFERENCES = 20
"""Differing rows ``sdk verify`` prints (the report has them all)."""


def cmd_demo(args: argparse.Namespace) -> int:
    """Start an embedded PostgreSQL, fill a shop, sync it to SQLite under writes, verify."""
    from pathlib import Path

    from .demo import run_demo

    reporter = _reporter()
    try:
        result = run_demo(Path(args.workdir).absolute(), args.rows, reporter)
    finally:
        getattr(reporter, "close", lambda: None)()
    rate = result.rows / result.seconds if result.seconds else 0
    verdict = "verified: mirror == source for every table" if result.verified else \
        f"NOT verified: {', '.join(result.mismatches) or 'did not catch up'}"
    lag = "" if result.lag_seconds is None else f", lag {result.lag_seconds:.1f} s"
    print(f"demo: {result.rows:,} rows in {result.seconds:.1f} s ({rate:,.0f} rows/s), "
          f"caught up{lag}; {verdict}")
    return 0 if result.verified else 1


def cmd_new_dialect(args: argparse.Namespace) -> int:
    """Create a new dialect plugin project: entry point, hooks to fill in, the kit's tests."""
    from pathlib import Path

    from .template import dialect_name, render

    name = dialect_name(args.name)
    if name != args.name:
        print(f"dialect name {name!r} (URL scheme {name}://): a URL scheme cannot hold "
              f"{args.name!r}'s spelling")
    root = render(name, Path(args.dir))
    module = name.replace("-", "_")
    print(f"created {root}\nnext: cd {root} && pip install -e '.[test]' && sdk dialects && "
          f"pytest   (then fill in sdk_{module}/__init__.py hook by hook)")
    return 0


def _sync_flags(sync: argparse.ArgumentParser) -> None:
    """``sdk sync``'s flags, one per declared sync setting (``sdk.job.spec.SYNC_OPTIONS``)."""
    from ..job.spec import SYNC_OPTIONS, sync_flag

    keys = ", ".join(o.name for o in SYNC_OPTIONS)
    sync.add_argument("--config", help=f"a YAML file with any of: {keys}, options (a mapping "
                                       "of --option KEY: VALUE); flags override it")
    for option in SYNC_OPTIONS:
        default = "" if option.default is None else f" (default: {option.default_text})"
        sync.add_argument(sync_flag(option), dest=option.attr,
                          help=option.help.replace("`", "'") + default)
    sync.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                      help="a source or algorithm option, e.g. snapshot.split.size=32768 "
                           "(docs/spark.md lists them)")
    _verbose_flag(sync)


def _verbose_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--verbose", action="store_true",
                        help="keep Spark's own log output, and print a failure's full trace "
                             "(by default: a short summary, the trace in a file)")


def _verify_parser(verify: argparse.ArgumentParser) -> None:
    """``sdk verify``'s flags."""
    verify.add_argument("--config", help="the sync's YAML file: its source, target, "
                        "target.schema and checkpoint, where no flag gives them")
    verify.add_argument("--checkpoint", help="default: sdk-checkpoint")
    verify.add_argument("--source", help="the URL of the database the sync reads")
    verify.add_argument("--target", help="the URL of the sync's target")
    verify.add_argument("--target-schema", help="as given to sdk sync")
    verify.add_argument("--table", action="append", metavar="PATTERNS", help="only these "
                        "captured tables (comma separated, * and ? as wildcards)")
    verify.add_argument("--where", help="only the rows meeting this SQL condition (run on "
                        "both sides)")
    verify.add_argument("--rows-per-second", type=float, help="read the source no faster")
    verify.add_argument("--static", action="store_true", help="the source's writes are "
                        "stopped: compare once, with no sync running")
    verify.add_argument("--repair", action="store_true", help="ask the sync to read the "
                        "differing rows again (sdk snapshot), then compare them again")
    verify.add_argument("--chunk-rows", type=int, default=50_000, help="rows a chunk")
    verify.add_argument("--parallel", type=int, default=os.cpu_count() or 2,
                        help="chunks compared at once")
    verify.add_argument("--report", help="where to write the JSON report (default: "
                        "verify-<time>.json in the checkpoint's state directory)")
    verify.add_argument("--wait-seconds", type=float, default=300.0, help="how long a chunk "
                        "waits for the sync to apply the log past it")
    verify.add_argument("--metrics-port", type=int, help="serve the progress as Prometheus "
                        "metrics on this port while it runs")
    _verbose_flag(verify)
    verify.set_defaults(func=cmd_verify)


class _Version(argparse.Action):
    """``--version``: the release and the checkpoint format it writes (imported only when
    asked: the state directory's modules load pyarrow)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="show the release and the "
                         "checkpoint format it writes, and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> None:
        from .. import __version__
        from ..spark.state.checkpoint_format import FORMAT

        print(f"sdk {__version__} (checkpoint format {FORMAT})")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sdk", description=__doc__)
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(dest="command", required=True)
    dialects = sub.add_parser("dialects", help=cmd_dialects.__doc__)
    dialects.add_argument("--options", action="store_true",
                          help="each URL option with what it does")
    dialects.set_defaults(func=cmd_dialects)
    check = sub.add_parser("check", help=cmd_check.__doc__)
    check.add_argument("--source", required=True, help="database URL, e.g. mysql://user@host/db")
    check.add_argument("--tables", nargs="*", help="include/exclude patterns, e.g. "
                       "'shop.*,!shop.audit_*' (default: all)")
    check.add_argument("--checkpoint", help="also check that a sync's checkpoint can resume "
                       "from this source: the same server, its log position still there")
    check.add_argument("--target", help="also check that the target's user may mirror the "
                       "tables: each missing grant with its fix")
    check.add_argument("--target-schema", help="the target schema, as sdk sync takes it")
    check.set_defaults(func=cmd_check)
    sync = sub.add_parser("sync", help=cmd_sync.__doc__)
    _sync_flags(sync)
    sync.set_defaults(func=cmd_sync)
    demo = sub.add_parser("demo", help=cmd_demo.__doc__)
    demo.add_argument("--rows", type=int, default=1_000_000, help="rows in the shop")
    demo.add_argument("--workdir", default="sdk-demo", help="where the demo keeps its files")
    _verbose_flag(demo)
    demo.set_defaults(func=cmd_demo)
    status = sub.add_parser("status", help=cmd_status.__doc__)
    status.add_argument("--checkpoint", default="sdk-checkpoint")
    status.add_argument("--source", help="the source's URL: also check that the checkpoint "
                        "can resume from it (the same server, its log position still there)")
    status.add_argument("--table", metavar="PATTERNS", help="list only these tables (comma "
                        "separated, * and ? as wildcards: 'shop.*')")
    status.add_argument("--all", action="store_true", help=f"list every table (past "
                        f"{STATUS_TABLES}, only those not streaming are listed, with a count "
                        "by state)")
    status.add_argument("--json", action="store_true",
                        help="the report as JSON (the figures of sdk sync --metrics-port)")
    status.set_defaults(func=cmd_status)
    snapshot = sub.add_parser("snapshot", help=cmd_snapshot.__doc__)
    snapshot.add_argument("--checkpoint", default="sdk-checkpoint")
    what = snapshot.add_mutually_exclusive_group(required=True)
    what.add_argument("--table", help="the captured table to read again, schema.table")
    what.add_argument("--list", action="store_true", help="list the sync's snapshot requests: "
                      "id, table, state (waiting, being read, done, refused), when, condition")
    what.add_argument("--cancel", metavar="ID", help="withdraw a request the sync has not "
                      "taken up yet")
    snapshot.add_argument("--where", help="only the rows meeting this SQL condition, e.g. "
                          "\"created_at >= '2026-01-01'\" (needs --source)")
    snapshot.add_argument("--skipped", action="store_true", help="read again the rows of "
                          "--table whose changes were set aside (errors.mode=skip), once their "
                          "cause is fixed: sdk status no longer counts them, and a row still "
                          "refused is set aside again (needs --source)")
    snapshot.add_argument("--source", help="the URL of the database the sync reads: the table "
                          "and the --where condition are checked there before the request is "
                          "recorded")
    snapshot.set_defaults(func=cmd_snapshot)
    _verify_parser(sub.add_parser("verify", help=cmd_verify.__doc__))
    new = sub.add_parser("new-dialect", help=cmd_new_dialect.__doc__)
    new.add_argument("name", help="the dialect's name, e.g. cockroach (package sdk_<name>)")
    new.add_argument("--dir", default=".", help="where to create sdk-<name>/ (default: here)")
    new.set_defaults(func=cmd_new_dialect)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "verbose", False):
        os.environ["SDK_VERBOSE"] = "1"  # read where the Spark session starts
    try:
        result: int = args.func(args)
        sys.stdout.flush()  # here, where a reader gone is caught, not at the exit
        return result
    except BrokenPipeError:
        return _reader_gone()
    except (Exception, KeyboardInterrupt) as exc:
        return _failed(args, exc)


def _reader_gone() -> int:
    """The reader of a pipe left (``sdk status | head -3``): what it wanted it has; end
    quietly, with what is left unwritten sent nowhere (Python would flush it at exit)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 0


def _failed(args: argparse.Namespace, error: BaseException) -> int:
    """Tell what failed in a short summary (the full trace in a file under the checkpoint,
    printed too with --verbose) and return the exit code of its class (:mod:`sdk.job.failures`)."""
    from ..job.failures import full_trace, summarize, write_trace

    failure = summarize(error)
    print(f"sdk: error: {failure.message}", file=sys.stderr)
    if failure.traced:
        checkpoint = getattr(args, "checkpoint", None)
        state_dir = None
        if checkpoint:
            from ..job.spec import checkpoint_paths

            try:
                state_dir = checkpoint_paths(checkpoint)[0]
            except Exception:  # a checkpoint path it cannot use: the temporary directory
                state_dir = None
        path = write_trace(error, state_dir if state_dir and "://" not in state_dir else None)
        if path is not None:
            print(f"sdk: the full trace is in {path}", file=sys.stderr)
        if getattr(args, "verbose", False):
            print(full_trace(error), file=sys.stderr)
    return int(failure.code)


if __name__ == "__main__":
    sys.exit(main())
