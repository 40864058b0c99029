"""``spark.read.format("pulsar")`` (also ``"pulsar-ldw"``): a Spark 4 Python Data Source over any persistent
topic, decoding PendingDeleteLedgerInfo messages (the pending, retry or dead-letter topic) into columns.

One input partition per topic partition, each bounded by the partition's last confirmed entry **captured
when the job is planned**, so a nightly job always terminates. Readers (no subscription, acknowledge
nothing) are opened inside ``read()``, on the executor. Options (:mod:`worker.nightly.source_options`) and
rows (:data:`META_FIELDS`, then :data:`SCHEMA` or :data:`RAW_SCHEMA`): docs/nightly.md, "The ``pulsar`` data
source". The token itself is never an option (options show in query plans): each process reads
``token_file``. An undecodable message is still a row, with its ``decode_error``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
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

from worker.formats.message import InvalidMessage, decode, decode_lenient
from worker.nightly.source_options import OptionError
from worker.nightly.source_options import parse as parse_options
from worker.nightly.source_plan import plan, schemas_are_ours

NAME = "pulsar"
# The same source under a name no JVM source claims: Spark prefers a JVM data source of the same name (the
# pulsar-spark connector registers "pulsar") when one is on the classpath.
UNAMBIGUOUS_NAME = "pulsar-ldw"

# The pulsar-spark connector's metadata columns, with its names and types, on every row.
META_FIELDS = (
    StructField("__key", BinaryType(), True),
    StructField("__topic", StringType(), True),
    StructField("__messageId", BinaryType(), True),
    StructField("__publishTime", TimestampType(), True),
    StructField("__eventTime", TimestampType(), True),
    StructField("__messageProperties", MapType(StringType(), StringType()), True),
)

# Deletion messages (the topic's schema is the worker's Avro, or ``decode=pending_delete``), decoded.
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
# The columns of a deletion topic's rows: the decoded ones, then the connector's metadata columns.
DELETION_SCHEMA = StructType([*SCHEMA.fields, *META_FIELDS])
# Any other topic (no schema, another schema, or ``decode=raw``): the payload as bytes, as the connector
# gives a topic whose schema it does not map, and the metadata columns.
RAW_SCHEMA = StructType([StructField("value", BinaryType(), True), *META_FIELDS])

# The first column of each layout tells them apart (a user-given schema must be one of them).
_LAYOUTS = {"message_id": DELETION_SCHEMA, "value": RAW_SCHEMA}


def _token(token_file: str | None) -> str | None:
    """The token, read where it is needed (driver or executor): it never travels with the options."""
    if token_file is None:
        return None
    try:
        token = Path(token_file).read_text().strip()
    except OSError as e:
        raise OptionError(f"pulsar data source: token_file {token_file}: {e.strerror or e}") from e
    if not token:
        raise OptionError(f"pulsar data source: token_file {token_file} is empty")
    return token


class PulsarDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        """The columns, decided when the query is planned: by ``decode``, else by the schema of the topics
        read (the admin API's schema registry)."""
        o = parse_options(self.options)
        if o.decode == "pending_delete":
            return DELETION_SCHEMA
        if o.decode == "raw":
            return RAW_SCHEMA
        ours = asyncio.run(schemas_are_ours(o, _token(o.token_file)))
        return DELETION_SCHEMA if ours else RAW_SCHEMA

    def reader(self, schema: StructType) -> PulsarReader:
        return PulsarReader(dict(self.options), schema)


class UnambiguousPulsarDataSource(PulsarDataSource):
    """``spark.read.format("pulsar-ldw")``: this source whatever JVM sources are on the classpath."""

    @classmethod
    def name(cls) -> str:
        return UNAMBIGUOUS_NAME


class PulsarReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str], schema: StructType | None = None) -> None:
        o = parse_options(options)
        self.opts = o
        names = (schema or DELETION_SCHEMA).fieldNames()
        layout = _LAYOUTS.get(names[0]) if names else None
        if layout is None or layout.fieldNames() != names:
            raise OptionError(
                "pulsar data source: a schema given to the reader must be its deletion or raw layout "
                f"(got {', '.join(names)[:300]})"
            )
        self.schema = layout
        self.raw = layout is RAW_SCHEMA
        # Kept by name: what the nightly jobs and the benchmark read off a reader.
        self.service_url = o.service_url
        self.admin_url = o.admin_url
        self.subscription = o.subscription
        self.token_file = o.token_file
        self.ca_file = o.ca_file
        self.read_timeout_ms = o.read_timeout_ms

    def _token(self) -> str | None:
        return _token(self.token_file)

    def partitions(self) -> list[InputPartition]:
        o = self.opts
        return list(
            asyncio.run(
                plan(
                    o.admin_url,
                    "",
                    o.subscription,
                    self._token(),
                    o.ca_file,
                    selection=o.selection,
                    starting=o.starting,
                    ending=o.ending,
                )
            )
        )

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        if partition is None:
            # Spark reads an empty partition list as one partition None: here, nothing left to read.
            return iter(())
        # Not an isinstance check: Spark may ship the partition's class by value, a different class object.
        o = self.opts
        return arrow_batches(
            read_partition(
                o.service_url,
                self._token(),
                partition,
                o.read_timeout_ms,
                o.ca_file,
                client_kwargs=o.client_kwargs,
                raw=self.raw,
            ),
            schema=self.schema,
        )


ARROW_BATCH_ROWS = 4096


def arrow_batches(
    rows: Iterator[tuple[Any, ...]], size: int = ARROW_BATCH_ROWS, schema: StructType = SCHEMA
) -> Iterator[Any]:
    """Rows of ``schema`` as Arrow record batches of up to ``size`` rows.

    Spark accepts either from ``read()``; given tuples it converts every value through a per-field Python
    converter, which costs more than reading the messages (bench/results/LOG.md, nightly jobs). pyarrow builds
    each column in one call instead."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    arrow_schema = to_arrow_schema(schema)
    columns: list[list[Any]] = [[] for _ in schema.fields]
    n = 0

    def flush() -> Any:
        batch = pa.RecordBatch.from_arrays(
            [pa.array(c, type=f.type) for c, f in zip(columns, arrow_schema, strict=True)], schema=arrow_schema
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
    service_url: str,
    token: str | None,
    part: Any,
    timeout_ms: int,
    ca_file: str | None = None,
    *,
    client_kwargs: Mapping[str, Any] | None = None,
    raw: bool = False,
) -> Iterator[tuple[Any, ...]]:
    """Rows of :data:`DELETION_SCHEMA` (``raw``: :data:`RAW_SCHEMA`) of one partition. ``client_kwargs``:
    the ``pulsar.client.*`` options as pulsar.Client keyword arguments."""
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
        # pulsar.client.*: checked when parsed; none of them touches the TLS checks above.
        **dict(client_kwargs or {}),
    )
    try:
        first = getattr(part, "first", None)
        if first is not None and (part.start is None or first > part.start):
            # startingOffsets: that message included, as the connector reads a message id it is given.
            reader = client.create_reader(
                part.topic, pulsar.MessageId(-1, first[0], first[1], -1), start_message_id_inclusive=True
            )
        else:
            # Start at the subscription's mark-delete position (exclusive) rather than replaying what it has
            # long acknowledged; the acknowledged ranges beyond it are skipped one by one.
            start = pulsar.MessageId(-1, part.start[0], part.start[1], -1) if part.start else pulsar.MessageId.earliest
            reader = client.create_reader(part.topic, start)
        to_row = raw_row if raw else row
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
                    yield to_row(msg, part.topic)
        finally:
            reader.close()
    finally:
        client.close()


def _meta(msg: Any, partition_topic: str, message_id: bytes, published: int, props: dict[str, str]) -> tuple[Any, ...]:
    """The connector's metadata columns (:data:`META_FIELDS`)."""
    key = msg.partition_key()
    event = msg.event_timestamp()
    return (
        key.encode() if key else None,
        partition_topic,
        message_id,
        datetime.fromtimestamp(published / 1000, UTC) if published else None,
        datetime.fromtimestamp(event / 1000, UTC) if event else None,
        props,
    )


def raw_row(msg: Any, partition_topic: str) -> tuple[Any, ...]:
    """One message as a row of :data:`RAW_SCHEMA`."""
    mid = bytes(msg.message_id().serialize())
    props = dict(msg.properties())
    return (bytes(msg.data()), *_meta(msg, partition_topic, mid, msg.publish_timestamp(), props))


def row(msg: Any, partition_topic: str) -> tuple[Any, ...]:
    """One message as a row of :data:`DELETION_SCHEMA`."""
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
    serialized = bytes(mid.serialize())
    props = dict(msg.properties())
    return (
        serialized,
        f"{mid.ledger_id()}:{mid.entry_id()}:{mid.partition()}:{mid.batch_index()}",
        partition_topic,
        datetime.fromtimestamp(published / 1000, UTC) if published else None,
        props,
        data,
        *fields,
        offload_uuid,
        offload_driver,
        error,
        *_meta(msg, partition_topic, serialized, published, props),
    )
