"""Fakes and data shared by several unit-test files: scripted stand-ins for the scanner's collaborators (bookie
client, snapshot cache, metadata-store view) with the same surface as the real ones, the ledger metadata they
serve and the custom metadata Pulsar writes on a ledger, a topic's ``internalStats``, delayed-delivery bucket
ledgers, and the nightly jobs' secret files."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from worker.broker.snapshot_cache import LiveSet
from worker.core.gone_proof import confirm_gone
from worker.core.ledger_owner import Owner
from worker.core.live_set import TopicGone
from worker.core.stored import StoredLedger
from worker.formats.ledger_metadata import LedgerMetadata, parse_metadata
from worker.formats.message import LedgerComponent, LedgerType, PendingDeleteLedgerInfo
from worker.formats.topic_name import TopicName
from worker.operations.scanner import Decision, Scanner, Verdict
from worker.settings import Settings, load_settings

# The scans' clock (``scan`` passes it to the Scanner) and ledger creation times relative to it.
NOW_S = 1_800_000_000.0
OLD = int((NOW_S - 3600) * 1000)  # an hour old
YOUNG = int((NOW_S - 5) * 1000)
# The same instant in milliseconds: the worker's ``now_ms`` for the ledgers ``md`` makes (OLD is NOW - 1 h).
NOW = 1_800_000_000_000


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

    async def get(self, topic: TopicName, ledger_id: int | None = None, *, fresh: bool = False, **_: object) -> Any:
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

    async def managed_ledger_exists(self, ml_name: str, *, since: float | None = None) -> bool:
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


# ---- the custom metadata Pulsar writes on a ledger, and the message the scanner queues for it ----------------


def pulsar_metadata(topic: TopicName, component: LedgerComponent, cursor: str = "sub") -> dict[str, str]:
    """Custom metadata as Pulsar writes it (``LedgerMetadataUtils``) on a ledger of ``topic``."""
    base = {"application": "pulsar"}
    match component:
        case LedgerComponent.MANAGED_LEDGER:
            return {**base, "component": "managed-ledger", "pulsar/managed-ledger": topic.managed_ledger_name}
        case LedgerComponent.MANAGED_CURSOR:
            ml = topic.managed_ledger_name
            return {**base, "component": "managed-ledger", "pulsar/managed-ledger": ml, "pulsar/cursor": cursor}
        case LedgerComponent.SCHEMA_STORAGE:
            return {**base, "component": "schema", "pulsar/schemaId": topic.schema_name}
        case LedgerComponent.COMPACTED_LEDGER:
            return {**base, "component": "compacted-ledger", "pulsar/compactedTopic": str(topic)}
        case LedgerComponent.DELAYED_INDEX_BUCKET:
            # The full topic name and the subscription name, neither encoded (buildMetadataForDelayedIndexBucket).
            return {
                **base,
                "component": "delayed-index-bucket",
                "pulsar/delayedIndexBucketKey": "#pulsar.internal.delayed.bucket_1_2",
                "pulsar/delayedIndexTopic": str(topic),
                "pulsar/delayedIndexCursor": cursor,
            }
    raise AssertionError(component)


def message_for(owner: Owner, lid: int) -> PendingDeleteLedgerInfo:
    """The message the scanner queues for a ledger of this owner (``Decision.to_info``)."""
    d = Decision(lid, Verdict.ORPHAN, "x", owner.component.value, str(owner.topic), owner.cursor, owner.schema_id)
    return d.to_info()


# ---- a topic's internalStats, as the admin API answers ------------------------------------------------------


def internal_stats(
    ledgers: list[int] = (),  # type: ignore[assignment]
    *,
    cursors: dict[str, int] | None = None,
    schema: list[int] = (),  # type: ignore[assignment]
    compacted: int = -1,
    offloaded: frozenset[int] = frozenset(),
) -> dict[str, Any]:
    return {
        "entriesAddedCounter": 10,
        "ledgers": [{"ledgerId": i, "entries": 5, "size": 100, "offloaded": i in offloaded} for i in ledgers],
        "cursors": {n: {"cursorLedger": lid, "markDeletePosition": "1:2"} for n, lid in (cursors or {}).items()},
        "schemaLedgers": [{"ledgerId": i, "entries": 1, "size": 10, "timestamp": 0} for i in schema],
        "compactedLedger": {"ledgerId": compacted, "entries": -1, "size": -1, "offloaded": False},
    }


# ---- delayed-delivery bucket ledgers (``DELAYED_INDEX_BUCKET``) ---------------------------------------------

BUCKET_TOPIC = "persistent://t/ns/x-partition-1"
BUCKET_T = TopicName.parse(BUCKET_TOPIC)
BUCKET_KEY = "#pulsar.internal.delayed.bucket_10_14"
# LedgerMetadataUtils.buildMetadataForDelayedIndexBucket(bucketKey, topicName, cursorName) on Pulsar 4.0.8.
BUCKET_CM = {
    "application": "pulsar",
    "component": "delayed-index-bucket",
    "pulsar/delayedIndexBucketKey": BUCKET_KEY,
    "pulsar/delayedIndexTopic": BUCKET_TOPIC,
    "pulsar/delayedIndexCursor": "my sub",
}


def bucket_info(lid: int = 31, *, topic: str = BUCKET_TOPIC, cursor: str = "my sub") -> PendingDeleteLedgerInfo:
    return PendingDeleteLedgerInfo(topic, LedgerComponent.DELAYED_INDEX_BUCKET, LedgerType.LEDGER, lid, cursor)


def bucket_stored(cm: dict[str, str] = BUCKET_CM, lid: int = 31, state: str = "CLOSED") -> StoredLedger:
    return StoredLedger(LedgerMetadata(lid, dict(cm), NOW - 3_600_000, 100, state), token=1)


# ---- the nightly jobs' secrets, in the files the settings name ----------------------------------------------

TOKEN = "eyJ.SECRET-TOKEN.sig"
ACCESS = "AKIA-SECRET-ACCESS"
SECRET = "SECRET-KEY-material"


def _secret_file(tmp: Path, name: str, value: str) -> str:
    p = tmp / name
    p.write_text(value + "\n")
    return str(p)


def settings_with_secret_files(tmp: Path) -> Settings:
    """Settings naming a Pulsar token file and an S3 target's key files, written under ``tmp``."""
    return load_settings(
        None,
        pulsar={"auth_token_file": _secret_file(tmp, "token", TOKEN)},
        offload={
            "s3_targets": [
                {
                    "bucket": "b",
                    "endpoint": "http://127.0.0.1:9000",
                    "access_key_id_file": _secret_file(tmp, "access", ACCESS),
                    "secret_access_key_file": _secret_file(tmp, "secret", SECRET),
                }
            ]
        },
    )


def assert_no_secret(blob: bytes | str) -> None:
    b = blob.encode() if isinstance(blob, str) else blob
    for s in (TOKEN, ACCESS, SECRET):
        assert s.encode() not in b, f"{s} travels to Spark"
