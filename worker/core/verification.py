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

from worker.core.ledger_age import ledger_age
from worker.core.ledger_owner import Unmapped, owner_of, topic_of_managed_ledger_name
from worker.core.offload_driver_metadata import read_location
from worker.core.open_ledger import may_be_written
from worker.formats.ledger_metadata import LedgerMetadata
from worker.formats.message import LedgerComponent, OffloadContext, PendingDeleteLedgerInfo
from worker.formats.topic_name import InvalidTopicName, TopicName
from worker.settings import S3Target


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


def _message_topic(info: PendingDeleteLedgerInfo) -> TopicName | None:
    try:
        return TopicName.parse(info.topic_name)
    except InvalidTopicName:
        return None


def _identity(info: PendingDeleteLedgerInfo, md: LedgerMetadata) -> Verification:
    """Does the owner the ledger's metadata names (``worker.core.ledger_owner``, the parse the scanner
    groups by) match the message, component first?"""
    try:
        owner = owner_of(md.custom_metadata)
    except Unmapped as e:
        if e.component is not info.ledger_component:
            return Verification.reject("component_mismatch")
        return Verification.reject(e.reason)
    if owner is None:
        return Verification.reject("not_pulsar")
    if owner.component is not info.ledger_component:
        return Verification.reject("component_mismatch")
    topic = _message_topic(info)
    match owner.component:
        case LedgerComponent.SCHEMA_STORAGE:
            # The schema id must be the message's and belong to the announced topic, or one topic's
            # message could delete another topic's schema.
            if owner.schema_id != info.schema_id or topic is None or owner.schema_id != topic.schema_name:
                return Verification.reject("schema_mismatch")
        case _:
            if owner.topic != topic:
                return Verification.reject("topic_mismatch")
            # A cursor's ledger, a subscription's bucket: the owning cursor must be the message's too.
            owned_by_cursor = (LedgerComponent.MANAGED_CURSOR, LedgerComponent.DELAYED_INDEX_BUCKET)
            if owner.component in owned_by_cursor and owner.cursor != info.cursor_name:
                return Verification.reject("cursor_mismatch")
    return Verification.ok()


def verify_bookkeeper(
    info: PendingDeleteLedgerInfo, md: LedgerMetadata, *, now_ms: int, min_age_ms: int, writer_possible: bool = True
) -> Verification:
    """Does BookKeeper's metadata of ``md.ledger_id`` prove it is the ledger ``info`` announces, and may
    it be deleted now (closed, old enough)?

    ``writer_possible``: whether the ledger's topic exists (``worker.core.open_ledger``): True unless the
    topic is proven gone."""
    identity = _identity(info, md)
    if identity.verdict is Verdict.REJECTED:
        return identity
    if may_be_written(md.state, topic_exists=writer_possible):
        # OPEN or IN_RECOVERY: someone is (or was just) writing it. A compaction that runs longer than
        # the minimum age has exactly this: an old-enough open ledger not yet recorded by its topic.
        return Verification(Verdict.OPEN, f"ledger_{md.state.lower() or 'state_unknown'}")
    age = ledger_age(md.ctime_ms, now_ms=now_ms, min_age_ms=min_age_ms)
    if not age.known:
        # Without a creation time we cannot prove the ledger is not being created right now.
        return Verification(Verdict.TOO_YOUNG, "no_ctime")
    if not age.old_enough:
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
    named = read_location(ctx.driver_metadata)
    bucket, region = named.bucket, named.region
    if not bucket:
        return "missing_bucket"
    try:
        endpoint = _norm_endpoint(named.endpoint)
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
    try:
        owner = topic_of_managed_ledger_name(name)
    except InvalidTopicName:
        return Verification.reject("topic_mismatch")
    if owner != _message_topic(info):
        return Verification.reject("topic_mismatch")
    return Verification.ok()
