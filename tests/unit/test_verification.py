"""Step 4, storage identity: the decision table of docs/design.md, the offload allow-list, path containment."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from tests.unit.fakes import BUCKET_CM, BUCKET_T, BUCKET_TOPIC, bucket_info, bucket_stored
from worker.core.decision import Facts, Outcome, Rules, decide
from worker.core.live_set import TopicGone
from worker.core.stored import StoredLedger
from worker.core.verification import (
    bookkeeper_rejection,
    offload_keys,
    offload_rejection,
    resolve_filesystem_path,
    resolve_s3_target,
)
from worker.formats.ledger_metadata import LedgerMetadata
from worker.formats.message import LedgerComponent, LedgerType, OffloadContext, PendingDeleteLedgerInfo
from worker.formats.topic_name import TopicName
from worker.settings import S3Target

NOW_MS = 1_700_000_000_000
MIN_AGE_MS = 600_000
OLD = NOW_MS - 3_600_000
TOPIC = "persistent://t/ns/x"
ML = "t/ns/persistent/x"

ML_CM = {"application": "pulsar", "component": "managed-ledger", "pulsar/managed-ledger": ML}
CURSOR_CM = {**ML_CM, "pulsar/cursor": "sub"}
SCHEMA_CM = {"application": "pulsar", "component": "schema", "pulsar/schemaId": "t/ns/x"}
COMPACTED_CM = {
    "application": "pulsar",
    "component": "compacted-ledger",
    "pulsar/compactedTopic": TOPIC,
    "pulsar/compactedTo": "12:3",
}


def info(
    component: LedgerComponent = LedgerComponent.MANAGED_LEDGER,
    topic: str = TOPIC,
    *,
    cursor: str | None = None,
    schema: str | None = None,
    ledger_id: int = 7,
) -> PendingDeleteLedgerInfo:
    if component is LedgerComponent.MANAGED_CURSOR and cursor is None:
        cursor = "sub"
    if component is LedgerComponent.SCHEMA_STORAGE and schema is None:
        schema = "t/ns/x"
    return PendingDeleteLedgerInfo(topic, component, LedgerType.LEDGER, ledger_id, cursor_name=cursor, schema_id=schema)


def md(cm: dict[str, str], ctime_ms: int | None = OLD, ledger_id: int = 7) -> LedgerMetadata:
    return LedgerMetadata(ledger_id, dict(cm), ctime_ms, 100, "CLOSED")


def verify(i: PendingDeleteLedgerInfo, m: LedgerMetadata, min_age_ms: int = MIN_AGE_MS) -> tuple[Outcome, str]:
    """The decision on the ledger of a gone topic, where nothing but identity and age can keep it."""
    gone = TopicGone(TopicName.parse(TOPIC), 0)
    res = decide(i, Facts(gone, StoredLedger(m), schema_registry=None), now_ms=NOW_MS, rules=Rules(min_age_ms))
    return res.outcome, "" if res.outcome is Outcome.DELETED else res.reason


MATCH = (Outcome.DELETED, "")
YOUNG = (Outcome.TOO_YOUNG, "younger than the minimum age: it may be being created")


def rejected(reason: str) -> tuple[Outcome, str]:
    return (Outcome.REJECTED, reason)


# ---- BookKeeper: the decision table --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("i", "cm", "expected"),
    [
        # managed-ledger
        (info(), ML_CM, MATCH),
        (info(), {**ML_CM, "application": "other"}, rejected("not_pulsar")),
        (info(), {k: v for k, v in ML_CM.items() if k != "application"}, rejected("not_pulsar")),
        (info(), {**ML_CM, "application": "Pulsar"}, rejected("not_pulsar")),
        (info(), {}, rejected("not_pulsar")),
        (info(), {**ML_CM, "component": "schema"}, rejected("component_mismatch")),
        (info(), {k: v for k, v in ML_CM.items() if k != "component"}, rejected("component_mismatch")),
        (info(), CURSOR_CM, rejected("component_mismatch")),  # a cursor ledger announced as a data ledger
        (info(), {**ML_CM, "pulsar/managed-ledger": "t/ns/persistent/y"}, rejected("topic_mismatch")),
        (info(), {**ML_CM, "pulsar/managed-ledger": "other/ns/persistent/x"}, rejected("topic_mismatch")),
        (info(), {k: v for k, v in ML_CM.items() if k != "pulsar/managed-ledger"}, rejected("topic_mismatch")),
        (info(topic="t/ns/x"), ML_CM, MATCH),  # PIP-186 form without the domain
        (info(topic="persistent://t/ns/x-partition-2"), ML_CM, rejected("topic_mismatch")),
        (
            info(topic="persistent://t/ns/x-partition-2"),
            {**ML_CM, "pulsar/managed-ledger": "t/ns/persistent/x-partition-2"},
            MATCH,
        ),
        # the managed-ledger name is the encoded one
        (
            info(topic="persistent://t/ns/my topic"),
            {**ML_CM, "pulsar/managed-ledger": "t/ns/persistent/my+topic"},
            MATCH,
        ),
        (
            info(topic="persistent://t/ns/my topic"),
            {**ML_CM, "pulsar/managed-ledger": "t/ns/persistent/my topic"},
            rejected("topic_mismatch"),
        ),
        # cursor
        (info(LedgerComponent.MANAGED_CURSOR), CURSOR_CM, MATCH),
        (info(LedgerComponent.MANAGED_CURSOR), {**CURSOR_CM, "application": "bk"}, rejected("not_pulsar")),
        (info(LedgerComponent.MANAGED_CURSOR), ML_CM, rejected("component_mismatch")),  # data ledger as cursor
        (info(LedgerComponent.MANAGED_CURSOR), {**CURSOR_CM, "component": "schema"}, rejected("component_mismatch")),
        (info(LedgerComponent.MANAGED_CURSOR), {**CURSOR_CM, "pulsar/cursor": "other"}, rejected("cursor_mismatch")),
        (info(LedgerComponent.MANAGED_CURSOR, cursor="Sub"), CURSOR_CM, rejected("cursor_mismatch")),
        (
            info(LedgerComponent.MANAGED_CURSOR),
            {**CURSOR_CM, "pulsar/managed-ledger": "t/ns/persistent/y"},
            rejected("topic_mismatch"),
        ),
        # schema
        (info(LedgerComponent.SCHEMA_STORAGE), SCHEMA_CM, MATCH),
        (info(LedgerComponent.SCHEMA_STORAGE), {**SCHEMA_CM, "application": "x"}, rejected("not_pulsar")),
        (info(LedgerComponent.SCHEMA_STORAGE), ML_CM, rejected("component_mismatch")),
        (info(LedgerComponent.SCHEMA_STORAGE), {**SCHEMA_CM, "pulsar/schemaId": "t/ns/y"}, rejected("schema_mismatch")),
        (
            info(LedgerComponent.SCHEMA_STORAGE),
            {k: v for k, v in SCHEMA_CM.items() if k != "pulsar/schemaId"},
            rejected("schema_mismatch"),
        ),
        # the schema id belongs to another topic: message and ledger agree, but not with the topic
        (
            info(LedgerComponent.SCHEMA_STORAGE, schema="t/ns/y"),
            {**SCHEMA_CM, "pulsar/schemaId": "t/ns/y"},
            rejected("schema_mismatch"),
        ),
        (
            info(LedgerComponent.SCHEMA_STORAGE, schema="other/ns/x"),
            {**SCHEMA_CM, "pulsar/schemaId": "other/ns/x"},
            rejected("schema_mismatch"),
        ),
        # schemas are keyed by the partitioned base topic
        (info(LedgerComponent.SCHEMA_STORAGE, topic="persistent://t/ns/x-partition-3"), SCHEMA_CM, MATCH),
        (
            info(LedgerComponent.SCHEMA_STORAGE, topic="persistent://t/ns/x-partition-3", schema="t/ns/x-partition-3"),
            {**SCHEMA_CM, "pulsar/schemaId": "t/ns/x-partition-3"},
            rejected("schema_mismatch"),
        ),
        # Pulsar's schema id encodes the local name (TopicName.getSchemaName)
        (
            info(LedgerComponent.SCHEMA_STORAGE, topic="persistent://t/ns/my topic", schema="t/ns/my+topic"),
            {**SCHEMA_CM, "pulsar/schemaId": "t/ns/my+topic"},
            MATCH,
        ),
        # ...so "my+topic" is another topic, and cannot claim the schema of "my topic"
        (
            info(LedgerComponent.SCHEMA_STORAGE, topic="persistent://t/ns/my+topic", schema="t/ns/my+topic"),
            {**SCHEMA_CM, "pulsar/schemaId": "t/ns/my+topic"},
            rejected("schema_mismatch"),
        ),
        (
            info(LedgerComponent.SCHEMA_STORAGE, topic="persistent://t/ns/my+topic", schema="t/ns/my%2Btopic"),
            {**SCHEMA_CM, "pulsar/schemaId": "t/ns/my%2Btopic"},
            MATCH,
        ),
        # compacted
        (info(LedgerComponent.COMPACTED_LEDGER), COMPACTED_CM, MATCH),
        (info(LedgerComponent.COMPACTED_LEDGER, topic="t/ns/x"), COMPACTED_CM, MATCH),
        (
            info(LedgerComponent.COMPACTED_LEDGER),
            {**COMPACTED_CM, "pulsar/compactedTopic": "t/ns/x"},
            MATCH,
        ),
        (info(LedgerComponent.COMPACTED_LEDGER), {**COMPACTED_CM, "application": "no"}, rejected("not_pulsar")),
        (info(LedgerComponent.COMPACTED_LEDGER), ML_CM, rejected("component_mismatch")),
        (
            info(LedgerComponent.COMPACTED_LEDGER),
            {**COMPACTED_CM, "pulsar/compactedTopic": "persistent://t/ns/y"},
            rejected("topic_mismatch"),
        ),
        (
            info(LedgerComponent.COMPACTED_LEDGER, topic="persistent://t/ns/x-partition-1"),
            COMPACTED_CM,
            rejected("topic_mismatch"),
        ),
        (
            info(LedgerComponent.COMPACTED_LEDGER),
            {k: v for k, v in COMPACTED_CM.items() if k != "pulsar/compactedTopic"},
            rejected("topic_mismatch"),
        ),
        (
            info(LedgerComponent.COMPACTED_LEDGER),
            {**COMPACTED_CM, "pulsar/compactedTopic": "persistent://t/../x"},
            rejected("topic_mismatch"),
        ),
        (
            info(LedgerComponent.COMPACTED_LEDGER),
            {**COMPACTED_CM, "pulsar/compactedTopic": "<undecodable:'@@'>"},
            rejected("topic_mismatch"),
        ),
        # a component of one kind never matches another kind's metadata
        (info(LedgerComponent.MANAGED_LEDGER), SCHEMA_CM, rejected("component_mismatch")),
        (info(LedgerComponent.MANAGED_LEDGER), COMPACTED_CM, rejected("component_mismatch")),
        (info(LedgerComponent.MANAGED_CURSOR), COMPACTED_CM, rejected("component_mismatch")),
        (info(LedgerComponent.SCHEMA_STORAGE), COMPACTED_CM, rejected("component_mismatch")),
        (info(LedgerComponent.COMPACTED_LEDGER), SCHEMA_CM, rejected("component_mismatch")),
    ],
)
def test_bookkeeper_decision_table(
    i: PendingDeleteLedgerInfo, cm: dict[str, str], expected: tuple[Outcome, str]
) -> None:
    assert verify(i, md(cm)) == expected


@pytest.mark.parametrize(
    ("i", "cm"),
    [
        (info(), ML_CM),
        (info(LedgerComponent.MANAGED_CURSOR), CURSOR_CM),
        (info(LedgerComponent.SCHEMA_STORAGE), SCHEMA_CM),
        (info(LedgerComponent.COMPACTED_LEDGER), COMPACTED_CM),
    ],
)
def test_too_young_for_every_component(i: PendingDeleteLedgerInfo, cm: dict[str, str]) -> None:
    assert verify(i, md(cm, ctime_ms=NOW_MS - MIN_AGE_MS + 1)) == YOUNG
    assert verify(i, md(cm, ctime_ms=NOW_MS)) == YOUNG
    assert verify(i, md(cm, ctime_ms=NOW_MS + 60_000)) == YOUNG  # clock skew
    assert verify(i, md(cm, ctime_ms=None)) == (Outcome.TOO_YOUNG, "without a creation time: it may be being created")
    assert verify(i, md(cm, ctime_ms=NOW_MS - MIN_AGE_MS)) == MATCH  # exactly old enough


def test_min_age_zero_accepts_a_fresh_ledger() -> None:
    assert verify(info(), md(ML_CM, ctime_ms=NOW_MS), min_age_ms=0) == MATCH


def test_rejection_wins_over_age() -> None:
    # A forged message is rejected now, not retried until the ledger is old enough.
    assert verify(info(), md({**ML_CM, "pulsar/managed-ledger": "a/b/persistent/c"}, ctime_ms=NOW_MS)) == rejected(
        "topic_mismatch"
    )
    assert verify(info(), md({}, ctime_ms=None)) == rejected("not_pulsar")


# ---- BookKeeper: a delayed-delivery bucket ledger -----------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "cm", "reason"),
    [
        (bucket_info(), BUCKET_CM, None),
        (bucket_info(topic="persistent://t/ns/x-partition-2"), BUCKET_CM, "topic_mismatch"),
        (bucket_info(cursor="other"), BUCKET_CM, "cursor_mismatch"),
        # The message's component must be what the ledger is: a cursor ledger is no bucket, and back.
        (
            bucket_info(),
            {
                "application": "pulsar",
                "component": "managed-ledger",
                "pulsar/managed-ledger": BUCKET_T.managed_ledger_name,
            },
            "component_mismatch",
        ),
        (
            PendingDeleteLedgerInfo(BUCKET_TOPIC, LedgerComponent.MANAGED_CURSOR, LedgerType.LEDGER, 31, "my sub"),
            BUCKET_CM,
            "component_mismatch",
        ),
        (bucket_info(), {"application": "other"}, "not_pulsar"),
    ],
)
def test_bucket_identity(message: PendingDeleteLedgerInfo, cm: dict[str, str], reason: str | None) -> None:
    assert bookkeeper_rejection(message, bucket_stored(cm).metadata) == reason


# ---- offload object names and metadata ---------------------------------------------------------------------

UID = uuid.UUID("123e4567-e89b-12d3-a456-426614174000")


def ctx(driver: str = "aws-s3", **md: str) -> OffloadContext:
    return OffloadContext.from_uuid(UID, driver, md)


def test_offload_keys() -> None:
    assert offload_keys(ctx(), 42) == (f"{UID}-ledger-42", f"{UID}-ledger-42-index")


def offload_info(topic: str = TOPIC) -> PendingDeleteLedgerInfo:
    return PendingDeleteLedgerInfo(
        topic, LedgerComponent.MANAGED_LEDGER, LedgerType.OFFLOAD_LEDGER, 42, offload_context=ctx(bucket="b")
    )


@pytest.mark.parametrize("key", ["ManagedLedgerName", "managedledgername", "MANAGEDLEDGERNAME", "managedLedgerName"])
def test_offload_user_metadata_key_is_case_insensitive(key: str) -> None:
    assert offload_rejection(offload_info(), {key: ML, "role": "data"}) is None


@pytest.mark.parametrize(
    ("meta", "reason"),
    [
        ({}, "not_pulsar"),
        ({"role": "data"}, "not_pulsar"),
        ({"ManagedLedgerName": "t/ns/persistent/y"}, "topic_mismatch"),
        ({"managedledgername": "T/ns/persistent/x"}, "topic_mismatch"),  # values compare exactly
        ({"ManagedLedgerName": ""}, "topic_mismatch"),
    ],
)
def test_offload_user_metadata_rejections(meta: dict[str, str], reason: str) -> None:
    assert offload_rejection(offload_info(), meta) == reason


def test_offload_user_metadata_uses_the_encoded_name() -> None:
    i = offload_info("persistent://t/ns/my topic")
    assert offload_rejection(i, {"ManagedLedgerName": "t/ns/persistent/my+topic"}) is None
    assert offload_rejection(i, {"ManagedLedgerName": "t/ns/persistent/my topic"}) == "topic_mismatch"


# ---- S3 allow-list -----------------------------------------------------------------------------------------------

LOCAL = S3Target(bucket="pulsar-offload", region="us-east-1", endpoint="http://127.0.0.1:5000")
AWS = S3Target(bucket="aws-bucket", region="us-west-2", endpoint="https://s3.us-west-2.amazonaws.com")
NO_ENDPOINT = S3Target(bucket="archive", region="eu-west-1")
EU_DUP = S3Target(bucket="pulsar-offload", region="eu-central-1", endpoint="http://127.0.0.1:5000")
TARGETS = [LOCAL, AWS, NO_ENDPOINT, EU_DUP]


@pytest.mark.parametrize(
    ("metadata", "expected"),
    [
        ({"bucket": "pulsar-offload", "region": "us-east-1", "serviceEndpoint": "http://127.0.0.1:5000"}, LOCAL),
        ({"bucket": "pulsar-offload", "region": "us-east-1", "endpoint": "http://127.0.0.1:5000"}, LOCAL),
        ({"bucket": "pulsar-offload"}, LOCAL),
        ({"bucket": "pulsar-offload", "region": ""}, LOCAL),  # empty means absent
        ({"bucket": "pulsar-offload", "region": "eu-central-1"}, EU_DUP),  # region picks among same-bucket targets
        ({"bucket": "archive", "region": "eu-west-1"}, NO_ENDPOINT),
        ({"bucket": "aws-bucket", "region": "us-west-2"}, AWS),
        # endpoint normalisation: case, trailing slash, default ports, missing scheme means https
        ({"bucket": "pulsar-offload", "serviceEndpoint": "HTTP://127.0.0.1:5000/"}, LOCAL),
        ({"bucket": "pulsar-offload", "serviceEndpoint": "http://127.0.0.1:5000/some/path"}, LOCAL),
        ({"bucket": "aws-bucket", "serviceEndpoint": "https://s3.us-west-2.amazonaws.com"}, AWS),
        ({"bucket": "aws-bucket", "serviceEndpoint": "https://s3.us-west-2.amazonaws.com:443"}, AWS),
        ({"bucket": "aws-bucket", "serviceEndpoint": "https://S3.US-WEST-2.AmazonAWS.com/"}, AWS),
        ({"bucket": "aws-bucket", "serviceEndpoint": "s3.us-west-2.amazonaws.com"}, AWS),
        ({"bucket": "aws-bucket", "serviceEndpoint": "s3.us-west-2.amazonaws.com:443"}, AWS),
    ],
)
def test_s3_target_allowed(metadata: dict[str, str], expected: S3Target) -> None:
    # The configured target itself comes back: the connection never uses the message's values.
    assert resolve_s3_target(ctx(**metadata), TARGETS) is expected


UNKNOWN = "unknown_offload_target"


@pytest.mark.parametrize(
    ("driver", "metadata", "reason"),
    [
        ("aws-s3", {"bucket": "other"}, UNKNOWN),
        ("aws-s3", {"bucket": "Pulsar-Offload"}, UNKNOWN),  # bucket names are exact
        ("aws-s3", {"bucket": "pulsar-offload", "region": "ap-south-1"}, UNKNOWN),
        ("aws-s3", {"bucket": "pulsar-offload", "serviceEndpoint": "http://evil.example:5000"}, UNKNOWN),
        ("aws-s3", {"bucket": "pulsar-offload", "serviceEndpoint": "http://127.0.0.1:5001"}, UNKNOWN),
        ("aws-s3", {"bucket": "pulsar-offload", "serviceEndpoint": "https://127.0.0.1:5000"}, UNKNOWN),
        ("aws-s3", {"bucket": "pulsar-offload", "serviceEndpoint": "http://127.0.0.1"}, UNKNOWN),
        ("aws-s3", {"bucket": "aws-bucket", "serviceEndpoint": "http://s3.us-west-2.amazonaws.com"}, UNKNOWN),
        ("aws-s3", {"bucket": "aws-bucket", "serviceEndpoint": "https://s3.us-west-2.amazonaws.com:8443"}, UNKNOWN),
        # a target configured without an endpoint accepts no endpoint from a message
        ("aws-s3", {"bucket": "archive", "serviceEndpoint": "http://127.0.0.1:5000"}, UNKNOWN),
        (
            "aws-s3",
            {"bucket": "pulsar-offload", "region": "us-east-1", "serviceEndpoint": "http://169.254.169.254"},
            UNKNOWN,
        ),
        ("aws-s3", {}, "missing_bucket"),
        ("aws-s3", {"bucket": ""}, "missing_bucket"),
        ("aws-s3", {"region": "us-east-1", "serviceEndpoint": "http://127.0.0.1:5000"}, "missing_bucket"),
        ("google-cloud-storage", {"bucket": "pulsar-offload"}, "unsupported_driver"),
        ("azureblob", {"bucket": "pulsar-offload"}, "unsupported_driver"),
        ("filesystem", {"bucket": "pulsar-offload"}, "unsupported_driver"),
        ("", {"bucket": "pulsar-offload"}, "unsupported_driver"),
    ],
)
def test_s3_target_rejected(driver: str, metadata: dict[str, str], reason: str) -> None:
    assert resolve_s3_target(ctx(driver, **metadata), TARGETS) == reason


@pytest.mark.parametrize("driver", ["aws-s3", "s3", "S3", "aws-s3-compatible"])
def test_s3_driver_names(driver: str) -> None:
    assert resolve_s3_target(ctx(driver, bucket="pulsar-offload"), TARGETS) is LOCAL


def test_no_configured_targets_rejects_everything() -> None:
    assert resolve_s3_target(ctx(bucket="pulsar-offload"), []) == "unknown_offload_target"


@pytest.mark.parametrize(
    "endpoint",
    ["http://127.0.0.1:notaport", "http://127.0.0.1:99999", "http://[::1", "http://127.0.0.1:-1"],
)
def test_malformed_endpoint_from_a_message_is_rejected_not_raised(endpoint: str) -> None:
    got = resolve_s3_target(ctx(bucket="pulsar-offload", serviceEndpoint=endpoint), TARGETS)
    assert got == "unknown_offload_target"


# ---- filesystem containment ---------------------------------------------------------------------------------------


def fs_ctx() -> OffloadContext:
    return ctx("filesystem")


def test_filesystem_path_inside_base(tmp_path: Path) -> None:
    base = tmp_path / "offload"
    base.mkdir()
    got = resolve_filesystem_path(base, ML, 42, fs_ctx())
    assert got == Path(os.path.realpath(base)) / "t" / "ns" / "persistent" / "x" / f"42-{UID}"


def test_filesystem_base_may_be_a_symlink(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    got = resolve_filesystem_path(link, ML, 42, fs_ctx())
    assert got == Path(os.path.realpath(real)) / ML / f"42-{UID}"


@pytest.mark.parametrize(
    "ml_name",
    ["..", "../elsewhere", "t/../../elsewhere", "t/ns/persistent/../../../../etc", "/etc", "/tmp/x/../y"],
)
def test_filesystem_dotdot_escapes_rejected(tmp_path: Path, ml_name: str) -> None:
    base = tmp_path / "offload"
    base.mkdir()
    assert resolve_filesystem_path(base, ml_name, 42, fs_ctx()) == "path_outside_base"


def test_filesystem_dotdot_that_stays_inside_is_fine(tmp_path: Path) -> None:
    base = tmp_path / "offload"
    base.mkdir()
    got = resolve_filesystem_path(base, "t/../u", 42, fs_ctx())
    assert got == Path(os.path.realpath(base)) / "u" / f"42-{UID}"


def test_filesystem_sibling_with_common_prefix_rejected(tmp_path: Path) -> None:
    # "/x/offload-evil" starts with "/x/offload" as a string but is not inside it.
    base = tmp_path / "offload"
    base.mkdir()
    (tmp_path / "offload-evil").mkdir()
    assert resolve_filesystem_path(base, "../offload-evil/t", 42, fs_ctx()) == "path_outside_base"


def test_filesystem_symlinked_directory_out_of_base_rejected(tmp_path: Path) -> None:
    base = tmp_path / "offload"
    outside = tmp_path / "outside"
    (base / "t" / "ns").mkdir(parents=True)
    (outside / "x").mkdir(parents=True)
    # t/ns/persistent -> outside: everything of the topic would resolve out of the base.
    (base / "t" / "ns" / "persistent").symlink_to(outside)
    assert resolve_filesystem_path(base, ML, 42, fs_ctx()) == "path_outside_base"


def test_filesystem_symlinked_ledger_out_of_base_rejected(tmp_path: Path) -> None:
    base = tmp_path / "offload"
    d = base / ML
    d.mkdir(parents=True)
    victim = tmp_path / "victim"
    victim.mkdir()
    (d / f"42-{UID}").symlink_to(victim)
    assert resolve_filesystem_path(base, ML, 42, fs_ctx()) == "path_outside_base"


def test_filesystem_symlink_inside_base_is_fine(tmp_path: Path) -> None:
    base = tmp_path / "offload"
    (base / "moved").mkdir(parents=True)
    (base / "t").symlink_to(base / "moved")
    got = resolve_filesystem_path(base, ML, 42, fs_ctx())
    assert got == Path(os.path.realpath(base)) / "moved" / "ns" / "persistent" / "x" / f"42-{UID}"


def test_filesystem_path_resolving_to_the_base_itself_rejected(tmp_path: Path) -> None:
    # The ledger's directory is deleted recursively: it must never be the whole base.
    base = tmp_path / "offload"
    d = base / ML
    d.mkdir(parents=True)
    (d / f"42-{UID}").symlink_to(base)
    assert resolve_filesystem_path(base, ML, 42, fs_ctx()) == "path_outside_base"
