"""Step 4, storage identity verification: the security boundary.

Anyone able to publish to the pending topic must not be able to delete someone else's data, so a
ledger is deleted only when its storage metadata proves it is the ledger the message announces. These
rules are pure: they take what storage said and return a verdict.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from worker.bookkeeper import LedgerMetadata
from worker.message import LedgerComponent, OffloadContext, PendingDeleteLedgerInfo
from worker.settings import S3Target
from worker.topic_name import InvalidTopicName, TopicName


class Verdict(enum.StrEnum):
    MATCH = "match"
    REJECTED = "rejected"
    TOO_YOUNG = "too_young"
    OPEN = "open"  # identity proven, but a writer may still be adding entries: never deleted


@dataclass(frozen=True, slots=True)
class Verification:
    verdict: Verdict
    reason: str = ""

    @classmethod
    def ok(cls) -> Verification:
        return cls(Verdict.MATCH)

    @classmethod
    def reject(cls, reason: str) -> Verification:
        return cls(Verdict.REJECTED, reason)


def _ml_name(topic_name: str) -> str | None:
    try:
        return TopicName.parse(topic_name).managed_ledger_name
    except InvalidTopicName:
        return None


def _schema_id(topic_name: str) -> str | None:
    # Pulsar keys schemas by the partitioned base topic without the domain, its local name encoded
    # (TopicName.getSchemaName): tenant/ns/topic.
    try:
        return TopicName.parse(topic_name).schema_name
    except InvalidTopicName:
        return None


def verify_bookkeeper(
    info: PendingDeleteLedgerInfo, md: LedgerMetadata, *, now_ms: int, min_age_ms: int, writer_possible: bool = True
) -> Verification:
    """Does BookKeeper's metadata of ``md.ledger_id`` prove it is the ledger ``info`` announces, and may
    it be deleted now (closed, old enough)?

    ``writer_possible``: whether anything may still be writing the ledger. True while its topic exists.
    False only when the topic is proven gone (no managed ledger in the metadata store): then nothing
    writes for it, and an OPEN ledger is one its writer left behind (the current ledger or a cursor ledger
    of a deleted topic, a compaction cut short), deletable like a closed one."""
    cm = md.custom_metadata
    if cm.get("application") != "pulsar":
        return Verification.reject("not_pulsar")
    component = cm.get("component")
    expected_ml = _ml_name(info.topic_name)
    match info.ledger_component:
        case LedgerComponent.MANAGED_LEDGER:
            if component != "managed-ledger" or "pulsar/cursor" in cm:
                return Verification.reject("component_mismatch")
            if cm.get("pulsar/managed-ledger") != expected_ml:
                return Verification.reject("topic_mismatch")
        case LedgerComponent.MANAGED_CURSOR:
            if component != "managed-ledger" or "pulsar/cursor" not in cm:
                return Verification.reject("component_mismatch")
            if cm.get("pulsar/managed-ledger") != expected_ml:
                return Verification.reject("topic_mismatch")
            if cm.get("pulsar/cursor") != info.cursor_name:
                return Verification.reject("cursor_mismatch")
        case LedgerComponent.SCHEMA_STORAGE:
            if component != "schema":
                return Verification.reject("component_mismatch")
            if cm.get("pulsar/schemaId") != info.schema_id:
                return Verification.reject("schema_mismatch")
            if info.schema_id != _schema_id(info.topic_name):
                # The schema id must belong to the announced topic, or one topic's message could
                # delete another topic's schema.
                return Verification.reject("schema_mismatch")
        case LedgerComponent.COMPACTED_LEDGER:
            if component != "compacted-ledger":
                return Verification.reject("component_mismatch")
            compacted = cm.get("pulsar/compactedTopic")
            try:
                same = compacted is not None and TopicName.parse(compacted) == TopicName.parse(info.topic_name)
            except InvalidTopicName:
                same = False
            if not same:
                return Verification.reject("topic_mismatch")
    if writer_possible and md.state.upper() != "CLOSED":
        # OPEN or IN_RECOVERY: someone is (or was just) writing it. A compaction that runs longer than
        # the minimum age has exactly this: an old-enough open ledger not yet recorded by its topic.
        return Verification(Verdict.OPEN, f"ledger_{md.state.lower() or 'state_unknown'}")
    if md.ctime_ms is None:
        # Without a creation time we cannot prove the ledger is not being created right now.
        return Verification(Verdict.TOO_YOUNG, "no_ctime")
    if now_ms - md.ctime_ms < min_age_ms:
        return Verification(Verdict.TOO_YOUNG, "younger_than_min_age")
    return Verification.ok()


@dataclass(frozen=True, slots=True)
class S3Location:
    target: S3Target
    data_key: str
    index_key: str


def offload_keys(ctx: OffloadContext, ledger_id: int) -> tuple[str, str]:
    """Object names of Pulsar's jcloud offloader: ``{uuid}-ledger-{id}`` and its ``-index``."""
    data = f"{ctx.uuid}-ledger-{ledger_id}"
    return data, f"{data}-index"


def _norm_endpoint(url: str | None) -> str | None:
    if not url:
        return None
    parts = urlsplit(url if "://" in url else f"https://{url}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.scheme}://{(parts.hostname or '').lower()}:{port}"


S3_DRIVERS = frozenset({"aws-s3", "s3", "S3", "aws-s3-compatible"})


def resolve_s3_target(ctx: OffloadContext, targets: Sequence[S3Target]) -> S3Target | str:
    """The configured target the message's offload context names, or a rejection reason.

    The message never chooses where the worker connects: bucket, region and endpoint it carries must all
    match one configured target, and the connection then uses the configured values only.
    """
    if ctx.driver_name not in S3_DRIVERS:
        return "unsupported_driver"
    md: Mapping[str, str] = ctx.driver_metadata
    bucket = md.get("bucket")
    if not bucket:
        return "missing_bucket"
    region = md.get("region") or None
    try:
        endpoint = _norm_endpoint(md.get("serviceEndpoint") or md.get("endpoint"))
    except ValueError:  # a bad port or host in the message: it names no configured target
        return "unknown_offload_target"
    for t in targets:
        if t.bucket != bucket:
            continue
        if region is not None and t.region != region:
            continue
        if endpoint is not None and endpoint != _norm_endpoint(str(t.endpoint) if t.endpoint else None):
            continue
        return t
    return "unknown_offload_target"


def resolve_filesystem_path(base: Path, ml_name: str, ledger_id: int, ctx: OffloadContext) -> Path | str:
    """``{base}/{ML name}/{id}-{uuid}``, or a rejection reason if it would leave ``base``."""
    base_real = Path(os.path.realpath(base))
    candidate = Path(os.path.realpath(base_real / ml_name / f"{ledger_id}-{ctx.uuid}"))
    # Strictly inside: the ledger's directory is removed recursively, so it must never be the base itself.
    if base_real not in candidate.parents:
        return "path_outside_base"
    return candidate


def verify_offload_object_metadata(info: PendingDeleteLedgerInfo, user_metadata: Mapping[str, str]) -> Verification:
    """The offloaded object must say it belongs to the announced topic's managed ledger."""
    # S3 lower-cases user metadata keys on the way back; compare case-insensitively.
    lowered = {k.lower(): v for k, v in user_metadata.items()}
    name = lowered.get("managedledgername")
    if name is None:
        return Verification.reject("not_pulsar")
    if name != _ml_name(info.topic_name):
        return Verification.reject("topic_mismatch")
    return Verification.ok()
