"""The oldest-backlog age the worker exports, from what Pulsar 4.0's admin stats really return."""

from __future__ import annotations

import asyncio
import time

import pytest

from testkit.topics import produce
from tests.conftest import Stack
from worker.broker.admin import PulsarAdmin
from worker.formats.topic_name import TopicName
from worker.metrics import oldest_backlog_age_s

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("partitions", [0, 2])
async def test_age_of_the_oldest_unacknowledged_message(
    stack: Stack, test_namespace: str, unique: str, admin: PulsarAdmin, partitions: int
) -> None:
    t = TopicName.parse(f"persistent://{test_namespace}/age-{partitions}-{unique}")
    if partitions:
        await admin.create_partitioned_topic(t, partitions)
    else:
        await admin.create_topic(t)
    await admin.create_subscription(t, "sub")
    stats = admin.partitioned_stats if partitions else admin.stats

    empty = (await stats(t, earliest_time_in_backlog=True))["subscriptions"]["sub"]
    assert oldest_backlog_age_s(empty, int(time.time() * 1000)) == 0.0

    before_ms = int(time.time() * 1000)
    produce(stack.service_url, str(t), 4)
    await asyncio.sleep(2)
    sub = (await stats(t, earliest_time_in_backlog=True))["subscriptions"]["sub"]
    now_ms = int(time.time() * 1000)
    assert sub["msgBacklog"] == 4
    # Partitioned stats aggregate the field over partitions: the earliest of them, never a 0 of an empty one.
    assert before_ms - 1000 <= sub["earliestMsgPublishTimeInBacklog"] <= now_ms
    assert 2.0 <= oldest_backlog_age_s(sub, now_ms) <= (now_ms - before_ms) / 1000 + 1
