"""What the operator commands print: tables sized to the terminal, the machine-readable report on request, a
progress bar, human durations.

Output follows pulsar-admin and kubectl: by default a table for a person, as wide as the terminal it is printed
on (a column too long for it, such as a topic name, loses its middle to an ellipsis, so both the tenant and
namespace at its head and the local name at its tail stay readable); piped or redirected, nothing is shortened.
The full data is the command's JSON: ``--output json`` (or ``--json``) prints it instead of the table,
``--report FILE`` writes it to a file beside the table (:func:`add_output_options`, :class:`Output`).

The tables are rendered here rather than with a table library: rich's ``Table`` shortens only at the end of a
cell, and when its fixed columns fill the width it narrows the others to nothing instead of keeping each
column readable.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import textwrap
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, TextIO

ELLIPSIS = "…"
SEPARATOR = "  "


class Progress:
    """A one-line progress bar on a terminal; silent otherwise (logs carry the decisions instead)."""

    def __init__(self, stream: TextIO = sys.stderr, *, enabled: bool | None = None) -> None:
        self.stream = stream
        self.enabled = stream.isatty() if enabled is None else enabled
        self._last = 0.0

    def update(self, phase: str, done: int, total: int) -> None:
        """``total`` 0: not known yet (a count, no bar); the phase ends with ``done == total``."""
        if not self.enabled:
            return
        now = time.monotonic()
        if (done < total or total <= 0) and now - self._last < 0.1:
            return
        self._last = now
        if total <= 0:
            self.stream.write(f"\r{phase:<9} {done}")
            self.stream.flush()
            return
        width = 30
        filled = int(width * done / total) if total else width
        self.stream.write(f"\r{phase:<9} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
        if done >= total:
            self.stream.write("\n")
        self.stream.flush()


def positive_int(text: str) -> int:
    """An argparse ``type`` for counts and limits: a bad one is argparse's usage error (exit 2) naming the
    option, before any service is asked."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {n}")
    return n


def command_failed(command: str, e: BaseException) -> int:
    """What a command prints when a service or a store answers with an error: one readable line on stderr
    naming the command and the error's kind, not a traceback; its exit code, 1."""
    print(f"ledger-deletion-worker {command}: {type(e).__name__}: {e}", file=sys.stderr)
    return 1


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


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")


def parse_duration(text: str) -> float:
    """``10m``, ``90s``, ``1.5h``, ``2d``, ``250ms`` or plain seconds -> seconds."""
    m = _DURATION.match(text)
    if not m:
        raise ValueError(f"not a duration: {text!r} (examples: 90s, 10m, 1h, 2d)")
    n = float(m.group(1))
    return n * {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2) or "s"]


# --- tables ---------------------------------------------------------------------------------------------------


def elide_middle(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters: its head and tail around an ellipsis."""
    if len(text) <= width:
        return text
    if width <= 1:
        return ELLIPSIS[:width]
    keep = width - 1
    head = (keep + 1) // 2
    tail = keep - head
    return text[:head] + ELLIPSIS + (text[-tail:] if tail else "")


def elide_end(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters: its head and an ellipsis."""
    if len(text) <= width:
        return text
    return text[: max(width - 1, 0)] + ELLIPSIS[: min(width, 1)]


@dataclass(frozen=True)
class Column:
    """A table column. ``shrink``: how a cell too long for the terminal is shortened ("middle" for names whose
    both ends matter, "end" for prose, "none" for what is short and must stay whole: ids, counts, sizes);
    never below ``min_width``. Columns of a lower ``keep`` give up their width first (names keep theirs
    longest: they are what a person looks for)."""

    header: str
    align: Literal["left", "right"] = "left"
    shrink: Literal["none", "middle", "end"] = "none"
    min_width: int = 12
    keep: int = 0
    # Left out, rather than squeezing the others below their minimum, on a terminal too narrow for all.
    optional: bool = False


def column_widths(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int | None) -> list[int]:
    """Each column's width: its longest cell, unless the line would exceed ``width`` (None: no limit). Then
    the shrinkable columns give up the excess, those of the lowest ``keep`` first; within them the widest first
    (cut down to a common width while the narrower keep theirs), never below their minimum. A table that cannot
    fit even then keeps those minimums."""
    widths = [max([len(c.header), *(len(r[i]) for r in rows)]) for i, c in enumerate(columns)]
    if width is None:
        return widths
    avail = width - len(SEPARATOR) * (len(columns) - 1)
    for keep in sorted({c.keep for c in columns if c.shrink != "none"}):
        excess = sum(widths) - avail
        if excess <= 0:
            break
        tier = [i for i, c in enumerate(columns) if c.shrink != "none" and c.keep == keep]
        floors = {i: min(widths[i], max(columns[i].min_width, len(columns[i].header))) for i in tier}
        budget = sum(widths[i] for i in tier) - excess  # what this tier may keep

        def total(level: int, tier: list[int] = tier, floors: dict[int, int] = floors) -> int:
            return sum(min(widths[i], max(level, floors[i])) for i in tier)

        # The highest common level at which the tier fits its budget (total() grows with the level).
        lo, hi = 0, max(widths[i] for i in tier)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if total(mid) <= budget:
                lo = mid
            else:
                hi = mid - 1
        shrunk = {i: min(widths[i], max(lo, floors[i])) for i in tier}
        # What the integer level leaves over goes back to the shrunk columns, left to right.
        spare = budget - sum(shrunk.values())
        for i in tier:
            grow = max(0, min(spare, widths[i] - shrunk[i]))
            shrunk[i] += grow
            spare -= grow
        for i, w in shrunk.items():
            widths[i] = w
    return widths


def _floor(c: Column, natural: int) -> int:
    return natural if c.shrink == "none" else min(natural, max(c.min_width, len(c.header)))


def fit(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int | None) -> tuple[list[int], list[int]]:
    """(the indices of the columns shown, their widths): every column, unless the table cannot fit ``width``
    even with each column at its minimum; then the optional columns are left out, the rightmost first."""
    shown = list(range(len(columns)))
    natural = [max([len(c.header), *(len(r[i]) for r in rows)]) for i, c in enumerate(columns)]

    def least(idx: list[int]) -> int:
        return sum(_floor(columns[i], natural[i]) for i in idx) + len(SEPARATOR) * (len(idx) - 1)

    while width is not None and least(shown) > width:
        optional = [i for i in shown if columns[i].optional]
        if not optional:
            break
        shown.remove(optional[-1])
    kept = [columns[i] for i in shown]
    return shown, column_widths(kept, [[r[i] for i in shown] for r in rows], width)


def render_table(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int | None = None) -> str:
    """The header and the rows, columns two spaces apart, each line within ``width`` when it can be."""
    shown, widths = fit(columns, rows, width)
    lines = []
    for row in [[c.header for c in columns], *rows]:
        cells = []
        for i, w in zip(shown, widths, strict=True):
            c, value = columns[i], row[i]
            if len(value) > w:
                value = elide_middle(value, w) if c.shrink == "middle" else elide_end(value, w)
            cells.append(value.rjust(w) if c.align == "right" else value.ljust(w))
        lines.append(SEPARATOR.join(cells).rstrip())
    return "\n".join(lines)


def table_topic(name: str) -> str:
    """A topic name as the tables show it: without the ``persistent://`` nearly every topic has (any other
    domain stays); the JSON report has the full name."""
    return name.removeprefix("persistent://")


def terminal_width(stream: TextIO) -> int | None:
    """The width of the terminal ``stream`` is (``$COLUMNS`` first, as shutil reads it); None when it is not one."""
    try:
        if not stream.isatty():
            return None
    except (AttributeError, ValueError):
        return None
    return shutil.get_terminal_size().columns


# --- human output, machine output -------------------------------------------------------------------------------


def add_output_options(
    p: argparse.ArgumentParser, *, json_help: str = "print the JSON report instead of a table"
) -> None:
    """``-o/--output table|json``, ``--json`` (= ``--output json``) and ``--report FILE``."""
    p.add_argument(
        "-o",
        "--output",
        choices=("table", "json"),
        default="table",
        help="table: for a person, sized to the terminal (default); json: for a program, everything, unshortened",
    )
    p.add_argument("--json", dest="output", action="store_const", const="json", help=json_help)
    p.add_argument("--report", metavar="FILE", help="also write the JSON report to FILE (the table still prints)")


class Output:
    """Where a command's human lines and machine report go, per :func:`add_output_options`."""

    def __init__(self, args: argparse.Namespace, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stdout
        self.json = args.output == "json"
        self.report_path: str | None = args.report
        self.width = terminal_width(self.stream)
        self.shortened = False
        self.left_out: list[str] = []

    def line(self, text: str = "") -> None:
        """A line for a person (nothing with --output json), wrapped at words to the terminal's width."""
        if self.json:
            return
        if self.width is not None and len(text.strip("\n")) > self.width:
            lead = "\n" * (len(text) - len(text.lstrip("\n")))
            text = lead + textwrap.fill(text.strip("\n"), self.width, break_long_words=False, break_on_hyphens=False)
        print(text, file=self.stream)

    def table(self, columns: Sequence[Column], rows: Sequence[Sequence[str]]) -> None:
        if self.json:
            return
        shown, widths = fit(columns, rows, self.width)
        natural = column_widths([columns[i] for i in shown], [[r[i] for i in shown] for r in rows], None)
        self.shortened = self.shortened or widths != natural
        self.left_out += [columns[i].header for i in range(len(columns)) if i not in shown]
        print(render_table(columns, rows, self.width), file=self.stream)

    def hint(self) -> None:
        """After a table shortened to fit: where the whole values are."""
        if self.json or not (self.shortened or self.left_out):
            return
        what = []
        if self.shortened:
            what.append("long values shortened")
        if self.left_out:
            what.append(f"{', '.join(dict.fromkeys(self.left_out))} left out")
        where = f"--report {self.report_path} has" if self.report_path else "--output json or --report FILE give"
        self.line(f"\n({' and '.join(what)} to fit {self.width} columns; {where} everything)")

    def report(self, data: Any, *, lines: bool = False) -> None:
        """The machine report: to --report FILE, and to stdout with --output json. ``lines``: ``data`` is a list
        printed one JSON object per line (JSON Lines)."""
        if lines:
            text = "".join(json.dumps(d, sort_keys=True) + "\n" for d in data)
        else:
            text = json.dumps(data, sort_keys=True) + "\n"
        if self.report_path:
            # Written aside and renamed: a reader never sees half a report.
            tmp = f"{self.report_path}.tmp{os.getpid()}"
            try:
                with open(tmp, "w") as f:
                    f.write(text)
                os.replace(tmp, self.report_path)
            except OSError as e:
                raise SystemExit(f"ledger-deletion-worker: --report {self.report_path}: {e.strerror or e}") from e
        if self.json:
            self.stream.write(text)
