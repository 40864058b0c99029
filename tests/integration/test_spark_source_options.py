"""The ``pulsar`` / ``pulsar-ldw`` Spark data source with the option names and metadata columns of
StreamNative's pulsar-spark connector, on real topics of the local stack and Spark local[2]: a topic without
schema, a string-schema topic, a deletion topic (the worker's Avro schema) read under both names,
``topicsPattern``, ``startingOffsets`` / ``endingOffsets`` and bad options failing with their name."""

from __future__ import annotations

import json
import re
from typing import Any

import pulsar
import pytest

from tests.conftest import Stack
from worker.broker.admin import PulsarAdmin
from worker.broker.client import PendingDeleteSchema
from worker.formats.message import LedgerComponent, LedgerType, PendingDeleteLedgerInfo
from worker.formats.topic_name import TopicName
from worker.nightly.source import DELETION_SCHEMA, RAW_SCHEMA, SCHEMA

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

META = ["__key", "__topic", "__messageId", "__publishTime", "__eventTime", "__messageProperties"]


def publish(stack: Stack, topic: str, values: list[Any], schema: Any = None, **kw: Any) -> list[pulsar.MessageId]:
    """One message per entry (no batching), each with a key, an event time and a property."""
    client = pulsar.Client(stack.service_url)
    try:
        args: dict[str, Any] = {"batching_enabled": False}
        if schema is not None:
            args["schema"] = schema
        producer = client.create_producer(topic, **args)
        ids = [
            producer.send(v, partition_key=f"k{i}", event_timestamp=1_700_000_000_000 + i, properties={"i": str(i)})
            for i, v in enumerate(values)
        ]
        producer.close()
        return ids
    finally:
        client.close()


def connector_read(spark: Any, stack: Stack, fmt: str = "pulsar", **options: str) -> Any:
    r = spark.read.format(fmt).option("service.url", stack.service_url).option("admin.url", stack.admin_url)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def java_bytes(mid: pulsar.MessageId) -> list[int]:
    """``MessageId.toByteArray()`` as the connector's JSON writes it: Java's signed bytes."""
    return [b - 256 if b > 127 else b for b in mid.serialize()]


def test_bytes_topic_read_with_the_connectors_option_names_and_metadata_columns(
    stack: Stack, test_namespace: str, unique: str, spark: Any
) -> None:
    topic = f"persistent://{test_namespace}/bytes-{unique}"
    ids = publish(stack, topic, [b"\x00zero", b"one", b"\xfftwo"])

    df = connector_read(spark, stack, topic=topic)
    assert df.schema == RAW_SCHEMA and df.columns == ["value", *META]
    rows = sorted(df.collect(), key=lambda r: r["__eventTime"])
    assert [bytes(r["value"]) for r in rows] == [b"\x00zero", b"one", b"\xfftwo"]
    assert [bytes(r["__key"]) for r in rows] == [b"k0", b"k1", b"k2"]
    assert {r["__topic"] for r in rows} == {topic}
    assert [pulsar.MessageId.deserialize(bytes(r["__messageId"])) for r in rows] == ids
    assert [int(r["__eventTime"].timestamp() * 1000) for r in rows] == [1_700_000_000_000 + i for i in range(3)]
    assert all(r["__publishTime"] is not None for r in rows)
    assert [dict(r["__messageProperties"]) for r in rows] == [{"i": str(i)} for i in range(3)]


async def test_string_schema_and_partitioned_topics_read_as_value_bytes(
    stack: Stack, test_namespace: str, unique: str, spark: Any, admin: PulsarAdmin
) -> None:
    strings = f"persistent://{test_namespace}/strings-{unique}"
    await admin.create_partitioned_topic(TopicName.parse(strings), 2)
    publish(stack, strings, [f"s{i}" for i in range(6)], schema=pulsar.schema.StringSchema())
    plain = f"{test_namespace}/plain-{unique}"  # the connector's short form: persistent:// implied
    publish(stack, plain, [b"p"])

    df = connector_read(spark, stack, topics=f"{strings}, {plain}")
    assert df.columns == ["value", *META]
    got = {(r["__topic"], bytes(r["value"]).decode()) for r in df.collect()}
    assert {v for _, v in got} == {"p", *(f"s{i}" for i in range(6))}
    assert {t for t, _ in got} == {f"persistent://{plain}", f"{strings}-partition-0", f"{strings}-partition-1"}


def test_deletion_topic_decoded_under_both_names_and_with_either_spelling(
    stack: Stack, test_namespace: str, unique: str, spark: Any
) -> None:
    topic = f"persistent://{test_namespace}/deletions-{unique}"
    infos = [
        PendingDeleteLedgerInfo(
            f"persistent://{test_namespace}/gone", LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, i
        )
        for i in (11, 12)
    ]
    publish(stack, topic, infos, schema=PendingDeleteSchema())

    for fmt in ("pulsar", "pulsar-ldw"):
        df = connector_read(spark, stack, fmt, topic=topic)
        assert df.schema == DELETION_SCHEMA, fmt
        rows = df.collect()
        assert sorted(r["ledger_id"] for r in rows) == [11, 12], fmt
        assert {r["ledger_type"] for r in rows} == {"LEDGER"} and {r["decode_error"] for r in rows} == {None}
        assert {r["__topic"] for r in rows} == {topic} and sorted(bytes(r["__key"]) for r in rows) == [b"k0", b"k1"]
        assert all(bytes(r["__messageId"]) == bytes(r["message_id"]) for r in rows)

    # The source's own spelling: the same rows, the same columns the nightly jobs read.
    legacy = (
        spark.read.format("pulsar-ldw")
        .option("service_url", stack.service_url)
        .option("admin_url", stack.admin_url)
        .option("topic", topic)
        .load()
    )
    assert legacy.columns == DELETION_SCHEMA.fieldNames() and legacy.columns[: len(SCHEMA)] == SCHEMA.fieldNames()
    assert sorted(r["ledger_id"] for r in legacy.collect()) == [11, 12]
    # decode=raw: the Avro payload as bytes, as for any other topic.
    raw = connector_read(spark, stack, topic=topic, decode="raw")
    assert raw.columns == ["value", *META] and raw.count() == 2


def test_legacy_options_still_decode_a_topic_without_schema(
    stack: Stack, test_namespace: str, unique: str, spark: Any
) -> None:
    """A DLQ holds what any producer sent: with the source's own option names every row is decoded (an
    undecodable one with its decode_error), whatever the topic's schema, as before."""
    topic = f"persistent://{test_namespace}/noschema-dlq-{unique}"
    publish(stack, topic, [b"\x00not avro"])
    df = spark.read.format("pulsar").options(service_url=stack.service_url, admin_url=stack.admin_url, topic=topic)
    [row] = df.load().collect()
    assert row["decode_error"] and bytes(row["payload"]) == b"\x00not avro" and bytes(row["__key"]) == b"k0"


async def test_topics_pattern_resolved_through_the_admin_api_at_plan_time(
    stack: Stack, test_namespace: str, unique: str, spark: Any, admin: PulsarAdmin
) -> None:
    a = f"persistent://{test_namespace}/pat-{unique}-a"
    b = f"persistent://{test_namespace}/pat-{unique}-b"
    await admin.create_partitioned_topic(TopicName.parse(b), 2)
    publish(stack, a, [b"a0", b"a1"])
    publish(stack, b, [b"b0", b"b1", b"b2"])
    publish(stack, f"persistent://{test_namespace}/other-{unique}-a", [b"x"])

    df = connector_read(spark, stack, topicsPattern=f"persistent://{test_namespace}/pat-{unique}-.*")
    assert sorted(bytes(r["value"]) for r in df.collect()) == [b"a0", b"a1", b"b0", b"b1", b"b2"]
    # Without the domain, as the connector's users often write it.
    only_a = connector_read(spark, stack, topicsPattern=f"{test_namespace}/pat-{unique}-a")
    assert sorted(bytes(r["value"]) for r in only_a.collect()) == [b"a0", b"a1"]
    none = connector_read(spark, stack, topicsPattern=f"{test_namespace}/nothing-{unique}.*")
    assert none.columns == ["value", *META] and none.count() == 0


def test_starting_and_ending_offsets_bound_the_read_inclusively(
    stack: Stack, test_namespace: str, unique: str, spark: Any
) -> None:
    topic = f"persistent://{test_namespace}/bounded-{unique}"
    ids = publish(stack, topic, [f"m{i}".encode() for i in range(6)])

    start = json.dumps({topic: java_bytes(ids[1])})  # Java's signed bytes
    end = json.dumps({topic: list(ids[4].serialize())})  # unsigned bytes are read too
    df = connector_read(spark, stack, topic=topic, startingOffsets=start, endingOffsets=end)
    assert sorted(bytes(r["value"]) for r in df.collect()) == [b"m1", b"m2", b"m3", b"m4"]

    explicit = connector_read(spark, stack, topic=topic, startingOffsets="earliest", endingOffsets="latest")
    assert explicit.count() == 6
    # A short topic name in the JSON is the connector's TopicName.get form too; start after the end: empty.
    short = topic.removeprefix("persistent://")
    empty = connector_read(
        spark, stack, topic=topic, startingOffsets=json.dumps({short: java_bytes(ids[5])}), endingOffsets=end
    )
    assert empty.count() == 0


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"topic": "t", "startingOffset": "earliest"}, "startingoffset"),  # a typo
        ({"topic": "t", "topics": "u"}, "topics"),
        ({"topic": "t", "startingOffsets": "latest"}, "startingOffsets"),
        ({"topic": "t", "endingOffsets": "{not json"}, "endingOffsets"),
        ({"topic": "t", "startingOffsets": '{"other": [8, 1, 16, 2]}'}, "startingOffsets"),
        ({"topicsPattern": "public/default/(unclosed"}, "topicsPattern"),
        ({"topic": "t", "pulsar.client.noSuchSetting": "1"}, "pulsar.client.noSuchSetting"),
        ({"topic": "t", "pulsar.client.operationTimeoutMs": "soon"}, "pulsar.client.operationTimeoutMs"),
        (
            {"topic": "t", "pulsar.client.tlsAllowInsecureConnection": "true"},
            "pulsar.client.tlsAllowInsecureConnection",
        ),
        ({"topic": "t", "pulsar.client.authParams": "token:s3cr3t"}, "pulsar.client.authParams"),
        ({"topic": "t", "pollTimeoutMs": "-5"}, "pollTimeoutMs"),
        ({"topic": "t", "decode": "avro"}, "decode"),
    ],
)
def test_a_bad_option_fails_naming_it(
    stack: Stack, test_namespace: str, spark: Any, options: dict[str, str], named: str
) -> None:
    opts = {k: v.replace("public/default", test_namespace) for k, v in options.items()}
    if "topic" in opts:
        opts["topic"] = f"persistent://{test_namespace}/{opts['topic']}"
    # Spark hands the options over lower-cased: an unknown one is named as Spark spelled it.
    with pytest.raises(Exception, match=f"(?i)pulsar data source: options? ('[^']*', )*'{re.escape(named)}'") as e:
        connector_read(spark, stack, **opts).collect()
    assert "pulsar data source" in str(e.value) and "s3cr3t" not in str(e.value)


def test_pulsar_client_options_reach_the_client(stack: Stack, test_namespace: str, unique: str, spark: Any) -> None:
    """Mapped onto pulsar.Client keyword arguments on the executors (a wrong mapping would fail there)."""
    topic = f"persistent://{test_namespace}/client-{unique}"
    publish(stack, topic, [b"x"])
    df = connector_read(
        spark,
        stack,
        topic=topic,
        **{
            "pulsar.client.operationTimeoutMs": "15000",
            "pulsar.client.connectionTimeoutMs": "5000",
            "pulsar.client.numIoThreads": "2",
            "pulsar.client.tlsHostnameVerificationEnable": "true",
        },
    )
    assert [bytes(r["value"]) for r in df.collect()] == [b"x"]
