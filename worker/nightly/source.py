"""``spark.read.format("pulsar")``: a Spark 4 Python Data Source over any topic of PendingDeleteLedgerInfo
messages (the pending, retry or dead-letter topic).

One input partition per topic partition. Each is bounded by the partition's last confirmed entry,
**captured when the job is planned** (``internalStats.lastConfirmedEntry`` on the owner broker): what is
published while the job runs waits for the next run, so a nightly job always terminates. Readers (the
pulsar-client ``Reader``: no subscription, acknowledges nothing) are opened inside ``read()``, on the
executor that reads the partition.

Options (strings, as every Spark option):

==========================  ==================================================================================
``service_url``             ``pulsar://host:6650``: the binary protocol endpoint (required)
``admin_url``               ``http://host:8080``: any broker's admin REST; partitions, end positions and the
                            subscription's acknowledged ranges come from it (required)
``topic``                   the topic, partitioned or not (required). A topic that does not exist reads as
                            empty
``subscription``            optional. Rows this durable subscription has already acknowledged (its
                            mark-delete position and individually acknowledged ranges, read at planning)
                            are left out, and reading starts at its mark-delete position. Nothing is
                            acknowledged by the source: the DLQ replay acknowledges on that subscription
                            itself, after its report is written
``token_file``              optional file holding the bearer token, for both endpoints; read on the driver
                            when the job is planned and on each executor when it reads (a path every
                            executor can read: a mounted secret). The token itself is never an option:
                            options show in query plans and event logs
``tls_trust_certs_file``    optional PEM CA bundle for an https ``admin_url`` and a ``pulsar+ssl://``
                            ``service_url`` (a path every executor can read)
``read_timeout_ms``         how long a reader waits for the next message before the partition fails
                            (default 30000): the end was captured, so a missing message is an error,
                            never a silent short read
==========================  ==================================================================================

Rows (:data:`SCHEMA`): ``message_id`` (bytes, ``MessageId.serialize()``: give it back to
``pulsar.MessageId.deserialize`` to acknowledge), ``message_id_str`` (``ledger:entry:partition:batch``),
``partition_topic``, ``publish_time``, ``properties`` (the message's properties: the worker's ``reason``,
``last_error``, ``RECONSUMETIMES``, ``first_seen_ms``, ...), ``payload`` (the raw bytes), the decoded
PendingDeleteLedgerInfo fields and ``decode_error``. An undecodable message is still a row: its
``decode_error`` says why, and the leading fields that could be read are filled in (display only).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import (
    BinaryType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

NAME = "pulsar"

SCHEMA = StructType(
    [
        StructField("message_id", BinaryType(), False),
        StructField("message_id_str", StringType(), False),
        StructField("partition_topic", StringType(), False),
        StructField("publish_time", TimestampType(), True),
        StructField("properties", MapType(StringType(), StringType()), False),
        StructField("payload", BinaryType(), False),
        StructField("topic_name", StringType(), True),
        StructField("ledger_component", StringType(), True),
        StructField("ledger_type", StringType(), True),
        StructField("ledger_id", LongType(), True),
        StructField("cursor_name", StringType(), True),
        StructField("schema_id", StringType(), True),
        StructField("offload_uuid", StringType(), True),
        StructField("offload_driver", StringType(), True),
        StructField("decode_error", StringType(), True),
    ]
)

Position = tuple[int, int]  # (ledger id, entry id), ordered as the topic stores them


@dataclass
class TopicPartition(InputPartition):
    """One topic partition to read: from just after ``start`` (None: earliest) up to ``end`` inclusive,
    leaving out the ``acked`` ranges (open-closed, as ``individuallyDeletedMessages``)."""

    topic: str
    end: Position
    start: Position | None
    acked: tuple[tuple[Position, Position], ...] = ()

    def __post_init__(self) -> None:
        InputPartition.__init__(self, self.topic)

    def skip(self, pos: Position) -> bool:
        return (self.start is not None and pos <= self.start) or any(lo < pos <= hi for lo, hi in self.acked)


class OptionError(ValueError):
    pass


def _required(options: Mapping[str, str], key: str) -> str:
    v = options.get(key)
    if not v:
        raise OptionError(f"pulsar data source: option {key!r} is required")
    return str(v)


class PulsarDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return SCHEMA

    def reader(self, schema: StructType) -> PulsarReader:
        return PulsarReader(dict(self.options))


def _position(value: object) -> Position | None:
    parts = str(value or "").split(":")
    if len(parts) != 2:
        return None
    try:
        return int(parts[0]), int(parts[1])
    except ValueError:
        return None


async def plan(
    admin_url: str, topic: str, subscription: str | None, token: str | None, ca_file: str | None = None
) -> list[TopicPartition]:
    """The partitions to read and where each ends, as of now (the driver calls this once per query)."""
    from worker.http import new_session
    from worker.ops import CursorState, topic_internal_stats
    from worker.pulsar_admin import PulsarAdmin, TopicNotFound
    from worker.topic_name import TopicName

    t = TopicName.parse(topic)
    out: list[TopicPartition] = []
    async with new_session(30, ca_file=ca_file) as session:
        admin = PulsarAdmin(admin_url, session, token)
        n = await admin.partitions(t)
        for p in [t.partition(i) for i in range(n)] if n > 0 else [t]:
            try:
                stats = await topic_internal_stats(admin, p, token)
            except TopicNotFound:
                continue
            end = _position(stats.get("lastConfirmedEntry"))
            if end is None or end[0] < 0:
                continue  # never written
            start: Position | None = None
            acked: tuple[tuple[Position, Position], ...] = ()
            cursor = (stats.get("cursors") or {}).get(subscription) if subscription else None
            if cursor:
                state = CursorState.from_internal_stats(cursor)
                start = state.mark_delete if state.mark_delete[0] >= 0 else None
                acked = state.ranges
            if start is not None and start >= end:
                continue  # everything up to the end is acknowledged
            out.append(TopicPartition(str(p), end, start, acked))
    return out


class PulsarReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.service_url = _required(options, "service_url")
        self.admin_url = _required(options, "admin_url")
        self.topic = _required(options, "topic")
        self.subscription = options.get("subscription") or None
        if options.get("token"):
            raise OptionError("pulsar data source: option 'token' is not accepted: give 'token_file'")
        self.token_file = options.get("token_file") or None
        self.ca_file = options.get("tls_trust_certs_file") or None
        try:
            self.read_timeout_ms = int(options.get("read_timeout_ms") or 30000)
        except ValueError as e:
            raise OptionError(f"pulsar data source: option 'read_timeout_ms': {e}") from e

    def _token(self) -> str | None:
        """The token, read where it is needed (driver or executor): it never travels with the reader."""
        if self.token_file is None:
            return None
        try:
            token = Path(self.token_file).read_text().strip()
        except OSError as e:
            raise OptionError(f"pulsar data source: token_file {self.token_file}: {e.strerror or e}") from e
        if not token:
            raise OptionError(f"pulsar data source: token_file {self.token_file} is empty")
        return token

    def partitions(self) -> list[InputPartition]:
        return list(asyncio.run(plan(self.admin_url, self.topic, self.subscription, self._token(), self.ca_file)))

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        if partition is None:
            # Spark reads an empty partition list as one partition None: here, nothing left to read.
            return iter(())
        # Not an isinstance check: Spark may ship the partition's class by value, a different class object.
        return arrow_batches(
            read_partition(self.service_url, self._token(), partition, self.read_timeout_ms, self.ca_file)
        )


ARROW_BATCH_ROWS = 4096


def arrow_batches(rows: Iterator[tuple[Any, ...]], size: int = ARROW_BATCH_ROWS) -> Iterator[Any]:
    """Rows of :data:`SCHEMA` as Arrow record batches of up to ``size`` rows.

    Spark accepts either from ``read()``; given tuples it converts every value through a per-field Python
    converter, which measured at about three times the cost of reading the messages. pyarrow builds each
    column in one call instead."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(SCHEMA)
    columns: list[list[Any]] = [[] for _ in SCHEMA.fields]
    n = 0

    def flush() -> Any:
        batch = pa.RecordBatch.from_arrays(
            [pa.array(c, type=f.type) for c, f in zip(columns, schema, strict=True)], schema=schema
        )
        for c in columns:
            c.clear()
        return batch

    for r in rows:
        for c, v in zip(columns, r, strict=True):
            c.append(v)
        n += 1
        if n == size:
            yield flush()
            n = 0
    if n:
        yield flush()


def read_partition(
    service_url: str, token: str | None, part: Any, timeout_ms: int, ca_file: str | None = None
) -> Iterator[tuple[Any, ...]]:
    import pulsar

    client = pulsar.Client(
        service_url,
        authentication=pulsar.AuthenticationToken(token) if token else None,
        **({"tls_trust_certs_file_path": ca_file} if ca_file else {}),
        # pulsar+ssl://: the certificate must name the broker's host, not merely chain to a trusted CA
        # (the client's default), or the token goes to whoever holds any such certificate.
        tls_validate_hostname=True,
        tls_allow_insecure_connection=False,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn),
    )
    try:
        # Start at the subscription's mark-delete position (exclusive) rather than replaying what it has
        # long acknowledged; the acknowledged ranges beyond it are skipped one by one.
        start = pulsar.MessageId(-1, part.start[0], part.start[1], -1) if part.start else pulsar.MessageId.earliest
        reader = client.create_reader(part.topic, start)
        try:
            # has_message_available asks the broker; past our end it may say yes, before it no only when the
            # rest of the range holds no messages (an empty current ledger: end = (ledger, -1)).
            while reader.has_message_available():
                msg = reader.read_next(timeout_millis=timeout_ms)
                mid = msg.message_id()
                pos = (mid.ledger_id(), mid.entry_id())
                if pos > part.end:
                    return
                if not part.skip(pos):
                    # Not stopping at pos == end: the messages of one batch share that position.
                    yield row(msg, part.topic)
        finally:
            reader.close()
    finally:
        client.close()


def row(msg: Any, partition_topic: str) -> tuple[Any, ...]:
    """One message as a row of :data:`SCHEMA`."""
    from worker.message import InvalidMessage, decode, decode_lenient

    mid = msg.message_id()
    data = bytes(msg.data())
    error: str | None = None
    offload_uuid = offload_driver = None
    try:
        info = decode(data)
        fields: tuple[Any, ...] = (
            info.topic_name,
            info.ledger_component.value,
            info.ledger_type.value,
            info.ledger_id,
            info.cursor_name,
            info.schema_id,
        )
        if info.offload_context is not None:
            offload_uuid = str(info.offload_context.uuid)
            offload_driver = info.offload_context.driver_name
    except InvalidMessage as e:
        error = str(e)
        p = decode_lenient(data)
        fields = (p.topic_name, p.ledger_component, p.ledger_type, p.ledger_id, p.cursor_name, p.schema_id)
    published = msg.publish_timestamp()
    return (
        bytes(mid.serialize()),
        f"{mid.ledger_id()}:{mid.entry_id()}:{mid.partition()}:{mid.batch_index()}",
        partition_topic,
        datetime.fromtimestamp(published / 1000, UTC) if published else None,
        dict(msg.properties()),
        data,
        *fields,
        offload_uuid,
        offload_driver,
        error,
    )
