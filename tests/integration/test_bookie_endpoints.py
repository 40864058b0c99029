"""Several bookie HTTP endpoints on the real stack: calls go to a bookie that answers, a bookie that
refuses connections is skipped (and counted as unreachable), and the worker configured with a dead
endpoint beside the real one still deletes every orphan through the real one."""

from __future__ import annotations

from collections import Counter

import pytest

from testkit.harness import create_ledgers, free_port, pulsar_ml_metadata
from testkit.topics import eventually
from tests.conftest import Stack
from tests.integration.conftest import WorkerFactory
from worker.backends.bookie_http import BookieClient
from worker.backends.http import new_session
from worker.backends.stores import Stores
from worker.formats.message import LedgerComponent, LedgerType, PendingDeleteLedgerInfo

pytestmark = pytest.mark.integration


async def test_a_refusing_bookie_is_skipped_and_the_answering_one_serves(stack: Stack, unique: str) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    ids = create_ledgers(stack, 4, pulsar_ml_metadata(f"persistent://public/default/spread-{unique}"))
    calls: Counter[tuple[str, str, str]] = Counter()
    async with new_session(30) as s, Stores(f"zk:{stack.zookeeper_hosts}") as zk:
        # The dead endpoint is listed first: with nothing in flight it is the first choice.
        bookie = BookieClient(
            [dead, stack.bookie_http_url],
            s,
            zk.bookkeeper.ledger_metadata_exists,
            down_s=60,
            on_request=lambda url, op, outcome: calls.update([(url, op, outcome)]),
        )
        for lid in ids:
            md = await bookie.get_metadata(lid)
            assert md is not None and md.custom_metadata["application"] == "pulsar"
        for lid in ids:
            assert await bookie.delete_ledger(lid) is True
        for lid in ids:
            assert await bookie.get_metadata(lid) is None
    real = stack.bookie_http_url.rstrip("/")
    # One refused connection marked it down for 60 s; every call after went straight to the real bookie.
    assert calls[(dead, "read", "unreachable")] == 1
    assert sum(n for (url, _, _), n in calls.items() if url == dead) == 1
    assert calls[(real, "delete", "200")] == len(ids)
    assert calls[(real, "read", "200")] == len(ids)


async def test_every_bookie_refusing_is_a_storage_error_not_an_answer(stack: Stack) -> None:
    from worker.errors import BackendError

    dead = [f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"]
    async with new_session(10) as s:
        bookie = BookieClient(dead, s)
        with pytest.raises(BackendError, match="no bookie reachable"):
            await bookie.delete_ledger(123456789)
        with pytest.raises(BackendError, match="no bookie reachable"):
            await bookie.get_metadata(123456789)


async def test_worker_with_a_dead_bookie_endpoint_deletes_through_the_live_one(
    stack: Stack, unique: str, make_worker: WorkerFactory
) -> None:
    topic = f"persistent://public/default/spread-gone-{unique}"
    ids = create_ledgers(stack, 6, pulsar_ml_metadata(topic))
    dead = f"http://127.0.0.1:{free_port()}"
    h = make_worker(f"spread-{unique}", bookkeeper={"http_urls": [dead], "bookie_down_s": 1})
    for lid in ids:
        h.send(PendingDeleteLedgerInfo(topic, LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, lid))

    async def settled() -> bool:
        return h.metric("ledger_deletion_deleted_total") >= len(ids)

    await eventually(settled, timeout=120, interval=1, what="every orphan deleted")
    assert h.metric("ledger_deletion_deleted_total", result="deleted") == len(ids)
    assert h.metric("ledger_deletion_dlq_total") == 0
    real = stack.bookie_http_url.rstrip("/")
    calls = "ledger_deletion_bookie_http_requests_total"
    assert h.metric(calls, bookie=real, operation="delete", outcome="200") == len(ids)
    assert h.metric(calls, bookie=dead, outcome="unreachable") >= 1
    async with new_session(30) as s, Stores(f"zk:{stack.zookeeper_hosts}") as zk:
        bookie = BookieClient(stack.bookie_http_url, s, zk.bookkeeper.ledger_metadata_exists)
        for lid in ids:
            assert await bookie.get_metadata(lid) is None
