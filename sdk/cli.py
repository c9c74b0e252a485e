"""The ``sdk`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from .dialects import default_manager
from .errors import SdkError
from .types import TableId


def cmd_dialects(args: argparse.Namespace) -> int:
    """List installed dialects, their capabilities and what is missing to use each."""
    for status in default_manager().statuses():
        if status.usable and status.info:
            caps = ", ".join(sorted(c.value for c in status.info.capabilities)) or "-"
            print(f"{status.name:<10} usable    {status.info.title}; capabilities: {caps}")
        else:
            print(f"{status.name:<10} unusable  {status.problem}")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    """Run the source dialect's preflight and print each requirement with OK or its fix."""
    dialect, config = default_manager().dialect_for_url(args.source)
    conn = dialect.connect(config)
    try:
        tables = [TableId.parse(t) for t in args.tables] if args.tables else \
            dialect.list_tables(conn)
        checks = dialect.preflight(conn, tables)
    finally:
        conn.close()
    print(f"{config.masked_url} ({dialect.name}):")
    for check in checks:
        print(f"  {check}")
    failed = [c for c in checks if not c.ok and c.required]
    warned = [c for c in checks if not c.ok and not c.required]
    print(f"{len(checks) - len(failed) - len(warned)} OK, {len(failed)} missing, "
          f"{len(warned)} warnings")
    return 1 if failed else 0


def _options(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SdkError(f"--option takes KEY=VALUE, got {pair!r}")
        out[key.strip()] = value.strip()
    return out


def _reporter() -> Any:
    """Progress as a live block on a terminal, as plain lines otherwise."""
    from .spark.sync import describe_progress

    interactive = sys.stdout.isatty()
    shown = [0]

    def report(progress: dict[str, Any]) -> None:
        lines = describe_progress(progress)
        if interactive:
            if shown[0]:
                print(f"\x1b[{shown[0]}A", end="")
            print("\n".join("\x1b[2K" + line for line in lines), flush=True)
            shown[0] = len(lines)
        else:
            print(" | ".join(lines), flush=True)
    return report


SYNC_DEFAULTS = {"target": "sqlite:///sdk-mirror.db", "tables": "*",
                 "checkpoint": "sdk-checkpoint", "until": "never", "master": "local[2]"}


def _sync_settings(args: argparse.Namespace) -> dict[str, Any]:
    """Settings from ``--config FILE`` (YAML), overridden by the flags given."""
    settings: dict[str, Any] = {}
    if args.config:
        import yaml

        try:
            with open(args.config) as file:
                loaded = yaml.safe_load(file) or {}
        except OSError as exc:
            raise SdkError(f"cannot read --config {args.config}: {exc.strerror}") from None
        except yaml.YAMLError as exc:
            raise SdkError(f"--config {args.config} is not valid YAML: {exc}") from None
        known = {"source", "target", "tables", "checkpoint", "until", "options", "master",
                 "target_schema", "changes", "retry_seconds"}
        unknown = sorted(set(loaded) - known)
        if unknown:
            raise SdkError(f"--config {args.config}: unknown key(s) {', '.join(unknown)}; "
                           f"known: {', '.join(sorted(known))}")
        settings.update(loaded)
    options = {str(k): str(v) for k, v in (settings.pop("options", None) or {}).items()}
    options.update(_options(args.option))
    for name in ("source", "target", "tables", "checkpoint", "until", "master",
                 "target_schema", "changes", "retry_seconds"):
        given = getattr(args, name)
        if given is not None:
            settings[name] = given
    for name, default in SYNC_DEFAULTS.items():
        settings.setdefault(name, default)
    if isinstance(settings["tables"], list):
        settings["tables"] = ",".join(settings["tables"])
    if not settings.get("source"):
        raise SdkError("sdk sync needs --source (or source: in --config)")
    settings["options"] = options
    return settings


def cmd_sync(args: argparse.Namespace) -> int:
    """Copy the chosen tables into the target, then follow every change, exactly once."""
    from .spark.sync import RETRY_SECONDS, run_sync

    s = _sync_settings(args)
    target = None if s["target"] == "none" else s["target"]
    summary = run_sync(s["source"], target, s["tables"], s["checkpoint"], s["until"],
                       s["options"], s["master"], s.get("target_schema"), _reporter(),
                       changes=s.get("changes"),
                       retry_seconds=float(s.get("retry_seconds", RETRY_SECONDS)))
    print(f"applied {summary.rows_applied} rows in {summary.seconds:.1f} s; phase "
          f"{summary.phase}{', caught up' if summary.caught_up else ''}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    """Show a sync's phase, per-table progress and log position from its checkpoint."""
    from pathlib import Path

    from .spark.statestore import StateStore
    from .spark.sync import describe_progress

    state = Path(args.checkpoint).absolute() / "state"
    progress = StateStore(str(state)).read_json("progress.json") if state.exists() else None
    if progress is None:
        print(f"no sync has run with checkpoint {args.checkpoint}")
        return 1
    print("\n".join(describe_progress(progress)))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """Start an embedded PostgreSQL, fill a shop, sync it to SQLite under writes, verify."""
    from pathlib import Path

    from .demo import run_demo

    result = run_demo(Path(args.workdir).absolute(), args.rows, _reporter())
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

    from .template import render

    root = render(args.name, Path(args.dir))
    print(f"created {root}\nnext: cd {root} && pip install -e '.[test]' && sdk dialects && "
          f"pytest   (then fill in sdk_{args.name}/__init__.py hook by hook)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sdk", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("dialects", help=cmd_dialects.__doc__).set_defaults(func=cmd_dialects)
    check = sub.add_parser("check", help=cmd_check.__doc__)
    check.add_argument("--source", required=True, help="database URL, e.g. mysql://user@host/db")
    check.add_argument("--tables", nargs="*", help="tables to check (default: all)")
    check.set_defaults(func=cmd_check)
    sync = sub.add_parser("sync", help=cmd_sync.__doc__)
    sync.add_argument("--config", help="a YAML file with any of: source, target, tables, "
                                       "checkpoint, until, options, target_schema, changes, "
                                       "retry_seconds")
    sync.add_argument("--source", help="source database URL")
    sync.add_argument("--target", help="target database URL (default: "
                                       "sqlite:///sdk-mirror.db; 'none' for no mirror)")
    sync.add_argument("--changes", help="also keep every change as Parquet under this path "
                                        "(any path Spark writes: local, hdfs://, s3a://)")
    sync.add_argument("--tables", help="include/exclude patterns, e.g. 'shop.*,!shop.audit_*' "
                                       "(default: all)")
    sync.add_argument("--checkpoint", help="directory for the checkpoint and state (default: "
                                           "sdk-checkpoint); rerun with it to resume")
    sync.add_argument("--until", choices=["snapshot", "caught-up", "never"],
                      help="when to stop (default: never)")
    sync.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                      help="an engine option, e.g. snapshot.split.size=8096")
    sync.add_argument("--target-schema", help="schema (database) for the target tables")
    sync.add_argument("--master", help="Spark master (default local[2])")
    sync.add_argument("--retry-seconds", type=float,
                      help="once running, restart from the checkpoint after a passing fault of "
                           "the source (lost connection, restarting server) for up to this many "
                           "seconds of failure (default 300; 0: stop at the first)")
    sync.set_defaults(func=cmd_sync)
    demo = sub.add_parser("demo", help=cmd_demo.__doc__)
    demo.add_argument("--rows", type=int, default=1_000_000, help="rows in the shop")
    demo.add_argument("--workdir", default="sdk-demo", help="where the demo keeps its files")
    demo.set_defaults(func=cmd_demo)
    status = sub.add_parser("status", help=cmd_status.__doc__)
    status.add_argument("--checkpoint", default="sdk-checkpoint")
    status.set_defaults(func=cmd_status)
    new = sub.add_parser("new-dialect", help=cmd_new_dialect.__doc__)
    new.add_argument("name", help="the dialect's name, e.g. cockroach (package sdk_<name>)")
    new.add_argument("--dir", default=".", help="where to create sdk-<name>/ (default: here)")
    new.set_defaults(func=cmd_new_dialect)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        result: int = args.func(args)
        return result
    except SdkError as exc:
        print(f"sdk: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
