"""The ``sdk`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

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
    failed = [c for c in checks if not c.ok]
    print(f"{len(checks) - len(failed)} OK, {len(failed)} missing")
    return 1 if failed else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sdk", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("dialects", help=cmd_dialects.__doc__).set_defaults(func=cmd_dialects)
    check = sub.add_parser("check", help=cmd_check.__doc__)
    check.add_argument("--source", required=True, help="database URL, e.g. mysql://user@host/db")
    check.add_argument("--tables", nargs="*", help="tables to check (default: all)")
    check.set_defaults(func=cmd_check)
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
