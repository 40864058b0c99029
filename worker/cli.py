"""``ledger-deletion-worker``: the daemon and the operator commands.

Each command lives in its own module and registers itself here; ``run`` is the phase-2 daemon.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from worker.settings import ConfigError, Settings, load_settings

DEFAULT_CONFIG = "config/worker.example.yaml"

Handler = Callable[[argparse.Namespace, Settings], int]


def _add_config(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config",
        "-c",
        default=None,
        help=f"YAML settings file (default: {DEFAULT_CONFIG} if present); LDW_* environment variables override it",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ledger-deletion-worker",
        description="Two-phase ledger deletion for Apache Pulsar: drain pending deletions safely.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    from worker import commands

    for register in commands.REGISTRY:
        p = register(sub)
        _add_config(p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    config = args.config
    if config is None:
        import os

        config = DEFAULT_CONFIG if os.path.isfile(DEFAULT_CONFIG) else None
    try:
        settings = load_settings(config)
    except ConfigError as e:
        print(f"ledger-deletion-worker: {e}", file=sys.stderr)
        return 2
    handler: Handler = args.handler
    return handler(args, settings)


if __name__ == "__main__":
    sys.exit(main())
