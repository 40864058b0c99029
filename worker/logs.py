"""structlog set-up: JSON lines (or console for humans), context bound per message."""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

import orjson
import structlog


def _dumps(obj: Any, **kw: Any) -> str:
    """One JSON log line, at one line per settled message: orjson, because the serializer is a visible share
    of a settled message's cost (docs/benchmarks.md, one message's pieces). What orjson refuses (an integer
    wider than 64 bits) falls back to the standard library, so no line is ever lost."""
    try:
        return orjson.dumps(obj, **kw).decode()
    except (TypeError, orjson.JSONEncodeError):
        return json.dumps(obj, **kw)


def configure(level: str = "INFO", fmt: str = "json") -> None:
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer(serializer=_dumps)
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level)),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )


def get_logger(**bound: object) -> structlog.stdlib.BoundLogger:
    # A lazy proxy: module-level loggers are created at import, before configure() runs, and must
    # still pick up the configured processors (binding here would freeze the defaults).
    logger = structlog.get_logger("ledger_deletion", **bound)
    return logger  # type: ignore[no-any-return]
