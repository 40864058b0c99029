"""``spark.read.format("pulsar")``: a Spark 4 Python Data Source over a topic of pending deletions.

One input partition per topic partition, each bounded by the topic's last message id **captured when the
job is planned**: messages published while the job runs wait for the next run. Readers are opened inside
``read()``, on the executor that reads the partition.

Options:

========================  ===========================================================================
``service_url``           ``pulsar://host:6650`` (required)
``admin_url``             ``http://host:8080`` (required: partitions and the end positions come from it)
``topic``                 the topic, partitioned or not (required)
``subscription``          read what this durable subscription has not acknowledged yet, without
                          acknowledging anything (the DLQ replay reads its replay subscription this way);
                          absent: read from ``start``
``start``                 ``earliest`` (default) or ``latest``, without ``subscription``
``auth_token``            bearer token for both endpoints
``receive_timeout_ms``    with ``subscription``: how long a partition waits for one more message before it
                          is considered read to the end (default 3000)
========================  ===========================================================================

Rows: ``message_id`` (bytes, ``MessageId.serialize()``), ``partition_topic``, ``publish_time``,
``properties``, the raw ``payload``, the decoded ``PendingDeleteLedgerInfo`` fields, and ``decode_error``
(undecodable messages are rows too: nothing is dropped silently).
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

SCHEMA = StructType(
    [
        StructField("message_id", BinaryType(), False),
        StructField("partition_topic", StringType(), False),
        StructField("publish_time", TimestampType(), True),
        StructField("properties", MapType(StringType(), StringType()), False),
        StructField("redelivery_count", IntegerType(), False),
        StructField("payload", BinaryType(), False),
        StructField("topic_name", StringType(), True),
        StructField("ledger_component", StringType(), True),
        StructField("cursor_name", StringType(), True),
        StructField("schema_id", StringType(), True),
        StructField("ledger_type", StringType(), True),
        StructField("ledger_id", LongType(), True),
        StructField("offload_uid_msb", LongType(), True),
        StructField("offload_uid_lsb", LongType(), True),
        StructField("offload_driver_name", StringType(), True),
        StructField("offload_driver_metadata", MapType(StringType(), StringType()), True),
        StructField("decode_error", StringType(), True),
    ]
)


class OptionError(ValueError):
    pass


@dataclass(frozen=True)
class TopicPartition(InputPartition):
    """One partition of the topic and the last message it had when the job was planned (None: empty)."""

    topic: str
    end: tuple[int, int] | None


def _rest_path(topic: str) -> str:
    from worker.topic_name import TopicName

    return TopicName.parse(topic).rest_path


def _get_json(admin_url: str, path: str, token: str | None) -> Any:
    req = urllib.request.Request(f"{admin_url.rstrip('/')}{path}")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read().decode() or "null")


def end_positions(admin_url: str, topic: str, token: str | None = None) -> list[TopicPartition]:
    """The topic's partitions with their last message ids, read now (the job's fixed end)."""
    try:
        meta = _get_json(admin_url, f"/admin/v2/{_rest_path(topic)}/partitions", token)
        n = int((meta or {}).get("partitions", 0))
    except urllib.error.HTTPError as e:
        if e.code != 404:
            raise
        n = 0
    topics = [f"{topic}-partition-{i}" for i in range(n)] if n > 0 else [topic]
    out = []
    for t in topics:
        last = _get_json(admin_url, f"/admin/v2/{_rest_path(t)}/lastMessageId", token)
        lid, eid = int(last.get("ledgerId", -1)), int(last.get("entryId", -1))
        out.append(TopicPartition(t, None if lid < 0 or eid < 0 else (lid, eid)))
    return out


def message_row(msg: Any, partition_topic: str) -> tuple[Any, ...]:
    from worker.message import InvalidMessage, decode

    data = msg.data()
    fields: list[Any] = [None] * 10
    error = None
    try:
        info = decode(data)
        oc = info.offload_context
        fields = [
            info.topic_name,
            info.ledger_component.value,
            info.cursor_name,
            info.schema_id,
            info.ledger_type.value,
            info.ledger_id,
            oc.uid_msb if oc else None,
            oc.uid_lsb if oc else None,
            oc.driver_name if oc else None,
            dict(oc.driver_metadata) if oc else None,
        ]
    except InvalidMessage as e:
        error = str(e)
    ts = msg.publish_timestamp()
    return (
        msg.message_id().serialize(),
        partition_topic,
        datetime.fromtimestamp(ts / 1000, UTC) if ts else None,
        dict(msg.properties()),
        int(msg.redelivery_count()),
        data,
        *fields,
        error,
    )


def _past(msg: Any, end: tuple[int, int]) -> bool:
    mid = msg.message_id()
    return (mid.ledger_id(), mid.entry_id()) > end


class PulsarReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        for key in ("service_url", "admin_url", "topic"):
            if not options.get(key):
                raise OptionError(f"pulsar data source: option {key!r} is required")
        self.service_url = options["service_url"]
        self.admin_url = options["admin_url"]
        self.topic = options["topic"]
        self.subscription = options.get("subscription") or None
        self.start = options.get("start", "earliest")
        if self.start not in ("earliest", "latest"):
            raise OptionError(f"pulsar data source: option 'start' must be earliest or latest, not {self.start!r}")
        self.token = options.get("auth_token") or None
        self.receive_timeout_ms = int(options.get("receive_timeout_ms", "3000"))
        # Planned once, on the driver: every partition's end is fixed before any row is read.
        self._partitions = end_positions(self.admin_url, self.topic, self.token)

    def partitions(self) -> list[InputPartition]:
        return list(self._partitions)

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        import pulsar

        assert isinstance(partition, TopicPartition)
        if partition.end is None:
            return
        kw: dict[str, Any] = {"operation_timeout_seconds": 30, "logger": pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn)}
        if self.token:
            kw["authentication"] = pulsar.AuthenticationToken(self.token)
        client = pulsar.Client(self.service_url, **kw)
        try:
            if self.subscription:
                yield from self._read_subscription(client, partition)
            else:
                yield from self._read_from_start(client, partition)
        finally:
            client.close()

    def _read_from_start(self, client: Any, partition: TopicPartition) -> Iterator[tuple[Any, ...]]:
        import pulsar

        assert partition.end is not None
        start = pulsar.MessageId.earliest if self.start == "earliest" else pulsar.MessageId.latest
        reader = client.create_reader(partition.topic, start)
        try:
            while reader.has_message_available():
                msg = reader.read_next(timeout_millis=30_000)
                if _past(msg, partition.end):
                    return
                yield message_row(msg, partition.topic)
        finally:
            reader.close()

    def _read_subscription(self, client: Any, partition: TopicPartition) -> Iterator[tuple[Any, ...]]:
        """What the subscription has not acknowledged up to the end, acknowledging nothing: the messages go
        back to the subscription when this consumer closes."""
        import pulsar

        assert partition.end is not None
        consumer = client.subscribe(
            partition.topic,
            self.subscription,
            consumer_type=pulsar.ConsumerType.Shared,
            initial_position=pulsar.InitialPosition.Earliest,
            receiver_queue_size=1000,
        )
        seen: set[bytes] = set()
        try:
            while True:
                try:
                    msg = consumer.receive(timeout_millis=self.receive_timeout_ms)
                except pulsar.Timeout:
                    return
                if _past(msg, partition.end):
                    return
                mid = msg.message_id().serialize()
                if mid in seen:  # a redelivery within this read
                    continue
                seen.add(mid)
                yield message_row(msg, partition.topic)
        finally:
            consumer.close()


class PulsarDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "pulsar"

    def schema(self) -> StructType:
        return SCHEMA

    def reader(self, schema: StructType) -> PulsarReader:
        return PulsarReader(dict(self.options))


def register(spark: Any) -> None:
    spark.dataSource.register(PulsarDataSource)
