"""Planning a read of the ``pulsar`` data source, on the driver: which topics (a list or a pattern resolved
through the admin API), whether their schema is the worker's Avro, and one input partition per topic
partition bounded by the end position captured now, so the job reads a fixed set however long it runs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import InputPartition

from worker.backends.http import new_session
from worker.broker.admin import PulsarAdmin, TopicNotFound
from worker.formats.topic_name import TopicName
from worker.nightly.source_options import (
    Offsets,
    OptionError,
    Position,
    SourceOptions,
    TopicSelection,
    is_pending_delete_schema,
    pattern_matches,
)


@dataclass
class TopicPartition(InputPartition):
    """One topic partition to read: from just after ``start`` (None: earliest) and from ``first`` on
    (inclusive: a ``startingOffsets`` bound) up to ``end`` inclusive, leaving out the ``acked`` ranges
    (open-closed, as ``individuallyDeletedMessages``)."""

    topic: str
    end: Position
    start: Position | None
    acked: tuple[tuple[Position, Position], ...] = ()
    first: Position | None = None

    def __post_init__(self) -> None:
        InputPartition.__init__(self, self.topic)

    def skip(self, pos: Position) -> bool:
        return (
            (self.start is not None and pos <= self.start)
            or (self.first is not None and pos < self.first)
            or any(lo < pos <= hi for lo, hi in self.acked)
        )


def _position(value: object) -> Position | None:
    parts = str(value or "").split(":")
    if len(parts) != 2:
        return None
    try:
        return int(parts[0]), int(parts[1])
    except ValueError:
        return None


async def _resolve(admin: Any, selection: TopicSelection) -> list[Any]:
    """The topics read: those named, or those of the pattern's namespace that it matches (partitioned
    topics by their own name, as Pulsar's client resolves a pattern). Read when the query is planned."""
    if selection.pattern is None:
        return [TopicName.parse(t) for t in selection.topics]
    assert selection.namespace is not None
    try:
        # System topics too: the deletion topics live in pulsar/system, where the broker counts every
        # topic as one.
        names = await admin.list_topics(selection.namespace, include_system=True)
    except TopicNotFound as e:
        raise OptionError(f"pulsar data source: option 'topicsPattern': {e}") from None
    bases = dict.fromkeys(str(TopicName.parse(n).partitioned_base) for n in names)
    return [TopicName.parse(b) for b in sorted(bases) if pattern_matches(selection, b)]


async def schemas_are_ours(o: SourceOptions, token: str | None) -> bool:
    """Every topic read has the worker's Avro schema (a topic without one, or none at all: False)."""
    async with new_session(30, ca_file=o.ca_file) as session:
        admin = PulsarAdmin(o.admin_url, session, token)
        topics = await _resolve(admin, o.selection)
        if not topics:
            return False
        for t in topics:
            if not is_pending_delete_schema(await admin.schema_info(t.partitioned_base)):
                return False
    return True


async def _plan_topic(
    admin: Any,
    t: Any,
    subscription: str | None,
    token: str | None,
    starting: Offsets | None,
    ending: Offsets | None,
    used: set[str],
) -> list[TopicPartition]:
    # Lazy: no worker.nightly module loads the Pulsar client on import (Spark executors import them).
    from worker.operations.queue_status import CursorState, topic_internal_stats

    out: list[TopicPartition] = []
    n = await admin.partitions(t)
    base = str(t.partitioned_base)
    for i, p in enumerate([t.partition(i) for i in range(n)] if n > 0 else [t]):
        # Looked up first: a bound naming a partition never written is used, not a typo.
        first = end_bound = None
        for offsets in (starting, ending):
            if offsets is not None:
                pos = offsets.lookup(str(p), base, i if n > 0 else -1)
                if pos is not None:
                    used.add(f"{offsets.option}:{str(p) if str(p) in offsets.positions else f'{base}#{i}'}")
                    if offsets is starting:
                        first = pos
                    else:
                        end_bound = pos
        try:
            stats = await topic_internal_stats(admin, p, token)
        except TopicNotFound:
            continue
        end = _position(stats.get("lastConfirmedEntry"))
        if end is None or end[0] < 0:
            continue  # never written
        if end_bound is not None:
            end = min(end, end_bound)
        start: Position | None = None
        acked: tuple[tuple[Position, Position], ...] = ()
        cursor = (stats.get("cursors") or {}).get(subscription) if subscription else None
        if cursor:
            state = CursorState.from_internal_stats(cursor)
            start = state.mark_delete if state.mark_delete[0] >= 0 else None
            acked = state.ranges
        if start is not None and start >= end:
            continue  # everything up to the end is acknowledged
        if first is not None and first > end:
            continue  # starts after its end
        out.append(TopicPartition(str(p), end, start, acked, first))
    return out


def _check_used(offsets: Offsets, used: set[str]) -> None:
    for key in offsets.positions:
        if f"{offsets.option}:{key}" not in used:
            name = key.replace("#", " partition ")
            raise OptionError(f"pulsar data source: option {offsets.option!r}: {name} is not a topic partition read")


async def plan(
    admin_url: str,
    topic: str,
    subscription: str | None,
    token: str | None,
    ca_file: str | None = None,
    *,
    selection: TopicSelection | None = None,
    starting: Offsets | None = None,
    ending: Offsets | None = None,
) -> list[TopicPartition]:
    """The partitions to read and where each ends, as of now (the driver calls this once per query):
    ``topic``, or every topic of ``selection``; each bounded by ``startingOffsets`` / ``endingOffsets``
    (inclusive, per entry: a batch's messages share their entry's position) and the captured end."""
    out: list[TopicPartition] = []
    used: set[str] = set()
    async with new_session(30, ca_file=ca_file) as session:
        admin = PulsarAdmin(admin_url, session, token)
        sel = selection or TopicSelection("topic", (topic,))
        for t in await _resolve(admin, sel):
            out += await _plan_topic(admin, t, subscription, token, starting, ending, used)
    for offsets in (starting, ending):
        if offsets is not None:
            _check_used(offsets, used)
    return out
