"""The scanner's candidates grouped by owner topic, in bounded memory (docs/cli.md, "``scan``").

A topic's ledgers are spread over the whole id space, so grouping needs every ledger listed first. Up to
``max_rows`` rows are grouped in memory; past that, rows go to ``buckets`` private temporary files (JSON,
nothing that runs when read) by a hash of their topic, read back one file at a time: memory holds about
``rows / buckets`` rows (plus the largest topic), never the cluster's whole listing.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import zlib
from collections.abc import Iterator
from typing import IO, Any

import orjson

Row = list[Any]


class TopicGroups:
    def __init__(self, *, max_rows: int = 50_000, buckets: int = 256, spill_dir: str | None = None) -> None:
        self.max_rows = max_rows
        self.buckets = buckets
        self.spill_dir = spill_dir
        self._memory: dict[str, list[Row]] = {}
        self._in_memory = 0
        self._dir: str | None = None
        self._files: list[IO[bytes]] = []
        self.rows = 0
        self.spilled = 0

    def add(self, topic: str, row: Row) -> None:
        self._memory.setdefault(topic, []).append(row)
        self._in_memory += 1
        self.rows += 1
        if self._in_memory > self.max_rows:
            self._spill()

    def _spill(self) -> None:
        if self._dir is None:
            self._dir = tempfile.mkdtemp(prefix="ldw-scan-", dir=self.spill_dir)
            self._files = [open(os.path.join(self._dir, f"{i:04d}"), "ab") for i in range(self.buckets)]
        for topic, rows in self._memory.items():
            f = self._files[zlib.crc32(topic.encode()) % self.buckets]
            for row in rows:
                f.write(orjson.dumps([topic, row]) + b"\n")
        self.spilled += self._in_memory
        self._memory.clear()
        self._in_memory = 0

    def __iter__(self) -> Iterator[tuple[str, list[Row]]]:
        """Each topic once, with all its rows; the files are consumed as they are read."""
        if self._dir is None:
            yield from self._memory.items()
            return
        self._spill()
        for f in self._files:
            f.close()
        for i in range(self.buckets):
            path = os.path.join(self._dir, f"{i:04d}")
            groups: dict[str, list[Row]] = {}
            with open(path, "rb") as f:
                for line in f:
                    topic, row = orjson.loads(line)
                    groups.setdefault(topic, []).append(row)
            os.unlink(path)
            yield from groups.items()

    def close(self) -> None:
        for f in self._files:
            f.close()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
