"""What the operator commands print: a progress bar on a terminal, tables, human durations."""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Sequence
from typing import TextIO

from worker.operations.scanner import Decision


class Progress:
    """A one-line progress bar on a terminal; silent otherwise (logs carry the decisions instead)."""

    def __init__(self, stream: TextIO = sys.stderr, *, enabled: bool | None = None) -> None:
        self.stream = stream
        self.enabled = stream.isatty() if enabled is None else enabled
        self._last = 0.0

    def update(self, phase: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if done < total and now - self._last < 0.1:
            return
        self._last = now
        width = 30
        filled = int(width * done / total) if total else width
        self.stream.write(f"\r{phase:<9} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
        if done >= total:
            self.stream.write("\n")
        self.stream.flush()


def human_age(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    s = int(seconds)
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m"
    if s < 172800:
        return f"{s // 3600}h"
    return f"{s // 86400}d"


def render_table(decisions: Sequence[Decision]) -> str:
    header = ("LEDGER", "TOPIC", "COMPONENT", "AGE", "SIZE", "WHY ORPHAN")
    rows = [
        (
            str(d.ledger_id),
            d.topic or "",
            (d.component or "") + (f" ({d.cursor})" if d.cursor else ""),
            human_age(d.age_s),
            str(d.size),
            d.why,
        )
        for d in decisions
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(v.ljust(widths[i]) for i, v in enumerate(r)).rstrip() for r in [header, *rows]]
    return "\n".join(lines)


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")


def parse_duration(text: str) -> float:
    """``10m``, ``90s``, ``1.5h``, ``2d``, ``250ms`` or plain seconds -> seconds."""
    m = _DURATION.match(text)
    if not m:
        raise ValueError(f"not a duration: {text!r} (examples: 90s, 10m, 1h, 2d)")
    n = float(m.group(1))
    return n * {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2) or "s"]
