"""``ledger-deletion-worker``: the daemon and the operator commands; each command lives in its own module
and registers itself here. Which configuration a command uses (``--config``, else ``$LDW_CONFIG``, else
defaults and ``LDW_*``; never a path relative to the current directory): docs/cli.md, "Which configuration
file".
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from worker import commands
from worker.commands.config_file import CONFIG_ENV, config_help, resolve_config
from worker.settings import ConfigError, Settings, load_settings

Handler = Callable[[argparse.Namespace, Settings], int]


def _add_config(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", "-c", default=None, help=config_help())


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ledger-deletion-worker",
        description="Two-phase ledger deletion for Apache Pulsar: drain pending deletions safely.",
        epilog=f"configuration: {config_help()}",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for register in commands.REGISTRY:
        p = register(sub)
        _add_config(p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    path, source = resolve_config(args.config)
    if path is not None and not path.is_file():
        print(f"ledger-deletion-worker: config file not found: {path} (from {source})", file=sys.stderr)
        return 2
    if path is None:
        print(
            f"ledger-deletion-worker: no --config and no ${CONFIG_ENV}: using built-in defaults and LDW_* variables",
            file=sys.stderr,
        )
    try:
        settings = load_settings(path)
    except ConfigError as e:
        print(f"ledger-deletion-worker: {e}", file=sys.stderr)
        return 2
    handler: Handler = args.handler
    return handler(args, settings)


if __name__ == "__main__":
    sys.exit(main())
