"""Step 4, storage identity verification: the security boundary.

Anyone able to publish to the pending topic must not be able to delete someone else's data, so a
ledger is deleted only when its storage metadata proves it is the ledger the message announces. These
rules are pure: they take what storage said and return why it proves nothing (a rejection reason), or None.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from urllib.parse import urlsplit

from worker.core.ledger_owner import Unmapped, owner_of, topic_of_managed_ledger_name
from worker.core.offload_driver_metadata import read_location
from worker.formats.ledger_metadata import LedgerMetadata
from worker.formats.message import LedgerComponent, OffloadContext, PendingDeleteLedgerInfo
from worker.formats.topic_name import InvalidTopicName, TopicName
from worker.settings import S3Target


def _message_topic(info: PendingDeleteLedgerInfo) -> TopicName | None:
    try:
        return TopicName.parse(info.topic_name)
    except InvalidTopicName:
        return None


def bookkeeper_rejection(info: PendingDeleteLedgerInfo, md: LedgerMetadata) -> str | None:
    """Why BookKeeper's metadata of ``md.ledger_id`` does not prove it is the ledger ``info`` announces, or None:
    proven. The owner its metadata names (``worker.core.ledger_owner``, the parse the scanner groups by) must
    match the message, component first. Whether it may be deleted now (age, open) is the decision's
    (``worker.core.decision``)."""
    try:
        owner = owner_of(md.custom_metadata)
    except Unmapped as e:
        if e.component is not info.ledger_component:
            return "component_mismatch"
        return e.reason
    if owner is None:
        return "not_pulsar"
    if owner.component is not info.ledger_component:
        return "component_mismatch"
    topic = _message_topic(info)
    match owner.component:
        case LedgerComponent.SCHEMA_STORAGE:
            # The schema id must be the message's and belong to the announced topic, or one topic's
            # message could delete another topic's schema.
            if owner.schema_id != info.schema_id or topic is None or owner.schema_id != topic.schema_name:
                return "schema_mismatch"
        case _:
            if owner.topic != topic:
                return "topic_mismatch"
            # A cursor's ledger, a subscription's bucket: the owning cursor must be the message's too.
            owned_by_cursor = (LedgerComponent.MANAGED_CURSOR, LedgerComponent.DELAYED_INDEX_BUCKET)
            if owner.component in owned_by_cursor and owner.cursor != info.cursor_name:
                return "cursor_mismatch"
    return None


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


def offload_rejection(info: PendingDeleteLedgerInfo, user_metadata: Mapping[str, str]) -> str | None:
    """Why an offloaded object does not prove it belongs to the announced topic's managed ledger, or None."""
    # S3 lower-cases user metadata keys on the way back; compare case-insensitively.
    lowered = {k.lower(): v for k, v in user_metadata.items()}
    name = lowered.get("managedledgername")
    if name is None:
        return "not_pulsar"
    try:
        owner = topic_of_managed_ledger_name(name)
    except InvalidTopicName:
        return "topic_mismatch"
    if owner != _message_topic(info):
        return "topic_mismatch"
    return None
