"""Scripted stand-ins for the scanner's collaborators (bookie client, snapshot cache, metadata-store view),
with the same surface as the real ones, and the ledger metadata they serve: shared by the scanner's unit tests
(test_scanner.py) and the delayed-bucket ones (test_delayed_bucket.py)."""

from __future__ import annotations

import base64
from typing import Any

from worker.broker.snapshot_cache import LiveSet, confirm_gone
from worker.core.live_set import TopicGone
from worker.formats.ledger_metadata import LedgerMetadata, parse_metadata
from worker.formats.topic_name import TopicName
from worker.operations.scanner import Decision, Scanner

# The scans' clock (``scan`` passes it to the Scanner) and ledger creation times relative to it.
NOW_S = 1_800_000_000.0
OLD = int((NOW_S - 3600) * 1000)  # an hour old
YOUNG = int((NOW_S - 5) * 1000)


def md(lid: int, custom: dict[str, str], *, ctime: int | None = OLD, state: str = "CLOSED") -> LedgerMetadata:
    """Ledger metadata as the bookie answers it: through the real parser, base64 and all."""
    body: dict[str, Any] = {
        "customMetadata": {k: base64.b64encode(v.encode()).decode() for k, v in custom.items()},
        "length": 100,
        "state": state,
    }
    if ctime is not None:
        body["ctime"] = ctime
    return parse_metadata(lid, {str(lid): body})


class FakeBookie:
    """The bookie client: scripted ledgers' metadata; ``vanished`` ids are listed but have none."""

    def __init__(self, ledgers: list[LedgerMetadata], vanished: tuple[int, ...] = ()) -> None:
        self.ledgers = {m.ledger_id: m for m in ledgers}
        self.vanished = set(vanished)

    async def list_ledger_ids(self) -> list[int]:
        return sorted(set(self.ledgers) | self.vanished)

    async def get_metadata(self, lid: int) -> LedgerMetadata | None:
        return self.ledgers.get(lid)


class FakeSnapshots:
    """Scripted live states; a topic with none is one the admin API does not know, and is gone only by
    the real rule (``worker.broker.snapshot_cache.confirm_gone``) against the metadata store the scan is given."""

    def __init__(self, live: dict[str, LiveSet | Exception], store: Any = None) -> None:
        self.live = live
        self.store = store
        self.calls: list[tuple[str, bool]] = []

    async def get(self, topic: TopicName, ledger_id: int | None = None, *, fresh: bool = False) -> Any:
        self.calls.append((str(topic), fresh))
        got = self.live.get(str(topic))
        if isinstance(got, Exception):
            raise got
        if got is None:
            await confirm_gone(topic, self.store)
            return TopicGone(topic, 0)
        return got


class FakeStore:
    """The metadata-store view: the managed ledgers that exist, the schema locators, the ledgers a stored record
    names (each read recorded)."""

    def __init__(
        self,
        managed_ledgers: set[str] = set(),  # noqa: B006
        schemas: dict[str, frozenset[int]] | None = None,
        recorded: set[int] = set(),  # noqa: B006
    ) -> None:
        self.managed_ledgers = managed_ledgers
        self.schemas = schemas or {}
        self.recorded = recorded
        self.record_reads: list[tuple[str, int, str | None]] = []

    async def records_ledger(self, topic: TopicName, ledger_id: int, cursor: str | None = None) -> bool:
        self.record_reads.append((str(topic), ledger_id, cursor))
        return ledger_id in self.recorded

    async def managed_ledger_exists(self, ml_name: str) -> bool:
        return ml_name in self.managed_ledgers

    async def schema_ledgers(self, schema_id: str) -> frozenset[int] | None:
        return self.schemas.get(schema_id)


def live(topic: str, ml_ids: set[int] = set(), cursors: dict[str, int] | None = None, **kw: Any) -> LiveSet:  # noqa: B006
    """A topic's live state as the snapshot cache gives it: its managed-ledger ids, cursors (name -> cursor
    ledger), ``schema`` ledgers and ``compacted`` ledger."""
    return LiveSet(
        TopicName.parse(topic),
        frozenset(ml_ids),
        cursors or {},
        frozenset(kw.get("schema", ())),
        kw.get("compacted"),
        frozenset(),
        "http://broker:8080",
        0,
        0.0,
    )


async def scan(
    ledgers: list[LedgerMetadata],
    snaps: dict[str, LiveSet | Exception],
    store: FakeStore | None = None,
    **kw: Any,
) -> tuple[dict[int, Decision], FakeSnapshots, Any]:
    """One scan of ``ledgers`` against the scripted live states ``snaps`` (and ``store``) at ``NOW_S``: the decisions
    by ledger id, the snapshots (their calls) and the report. ``kw``: ``vanished`` ids, ``min_age_s`` (600) and
    the Scanner's own keywords."""
    store = store if store is not None else FakeStore()
    snapshots = FakeSnapshots(snaps, store)
    scanner = Scanner(
        FakeBookie(ledgers, kw.pop("vanished", ())),  # type: ignore[arg-type]
        snapshots,  # type: ignore[arg-type]
        store,
        min_age_s=kw.pop("min_age_s", 600),
        clock=lambda: NOW_S,
        **kw,
    )
    report = await scanner.scan()
    return {d.ledger_id: d for d in report.decisions}, snapshots, report
