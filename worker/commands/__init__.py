"""CLI commands, one module each. A module exposes ``register(subparsers) -> ArgumentParser`` and sets
``handler`` (``(args, settings) -> exit code``) as the parser default."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from worker.commands import (
    audit,
    dlq,
    inflight,
    purge_topic,
    replay_dlq,
    run,
    scan,
    scan_offloaded,
    send,
    topology,
    trim_idle,
)

Register = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], argparse.ArgumentParser]

REGISTRY: list[Register] = [
    run.register,
    # Phase 1, scanner and operator commands.
    scan.register,
    scan_offloaded.register,
    send.register,
    inflight.register,
    dlq.register,
    purge_topic.register,
    trim_idle.register,
    topology.register,
    # Nightly jobs on Spark (the spark extra).
    replay_dlq.register,
    audit.register,
]
