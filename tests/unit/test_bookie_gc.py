"""The bookie garbage-collection trigger: when it is due (worker.core.bookie_gc_due), what the daemon's
trigger does with it (worker.daemon.bookie_gc) and the settings that turn it on."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import pytest
from prometheus_client import CollectorRegistry

from worker.core.bookie_gc_due import GcAccount
from worker.daemon.bookie_gc import BookieGc
from worker.formats.message import LedgerType
from worker.metrics import Metrics
from worker.settings import ConfigError, load_settings


def test_off_by_default_and_with_zero() -> None:
    assert load_settings().bookkeeper.gc_trigger_bytes is None
    account = GcAccount(threshold_bytes=0, min_interval_s=60)
    assert not any(account.add(10**12, now=t) for t in range(10))


def test_due_once_the_threshold_is_reached_then_counts_again_from_zero() -> None:
    a = GcAccount(threshold_bytes=100, min_interval_s=60)
    assert not a.add(60, now=0)
    assert a.add(40, now=1)  # 100 >= 100
    assert a.pending_bytes == 0 and a.last_request_at == 1
    assert not a.add(99, now=100)
    assert a.add(1, now=100)


def test_never_twice_within_the_interval_and_the_bytes_wait() -> None:
    a = GcAccount(threshold_bytes=10, min_interval_s=60)
    assert a.add(10, now=0)
    # A drain deleting far more than the threshold asks at most once per interval: never a loop.
    assert [a.add(1000, now=t) for t in range(1, 60)] == [False] * 59
    assert a.add(0, now=60)  # the bytes counted meanwhile are due as soon as the interval has passed
    assert not a.add(10**9, now=61)


def test_negative_bytes_count_nothing() -> None:
    a = GcAccount(threshold_bytes=10, min_interval_s=1)
    assert not a.add(-100, now=0)
    assert a.pending_bytes == 0


def test_settings_name_the_key() -> None:
    s = load_settings(bookkeeper={"gc_trigger_bytes": 1 << 30, "gc_min_interval_s": 300})
    assert s.bookkeeper.gc_trigger_bytes == 1 << 30 and s.bookkeeper.gc_min_interval_s == 300
    with pytest.raises(ConfigError, match=r"bookkeeper\.gc_trigger_bytes"):
        load_settings(bookkeeper={"gc_trigger_bytes": -1})
    with pytest.raises(ConfigError, match=r"bookkeeper\.gc_min_interval_s"):
        load_settings(bookkeeper={"gc_min_interval_s": 0})


class FakeBookies:
    """Stands in for the bookies' HTTP API in a pure unit test of the trigger's bookkeeping (the real call
    is exercised against the real bookies in tests/cluster/test_leak_panel.py and test_foreign_bookie.py)."""

    def __init__(self, answer: Mapping[str, str] | Exception) -> None:
        self.answer = answer
        self.calls = 0

    async def __call__(self) -> Mapping[str, str]:
        self.calls += 1
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def _value(m: Metrics, name: str, **labels: str) -> float:
    v = m.registry.get_sample_value(name, labels)
    return 0.0 if v is None else v


async def test_trigger_counts_bookkeeper_bytes_only_and_asks_every_bookie_once() -> None:
    m = Metrics(CollectorRegistry())
    bookies = FakeBookies({"http://b1": "200", "http://b2": "unreachable"})
    gc = BookieGc(bookies, GcAccount(threshold_bytes=100, min_interval_s=3600), m)
    gc.freed(LedgerType.OFFLOAD_LEDGER, 10**6)  # offloaded objects free S3, not a bookie's disk
    await gc.idle()
    assert bookies.calls == 0
    for _ in range(5):
        gc.freed(LedgerType.LEDGER, 60)
    await gc.idle()
    assert bookies.calls == 1
    assert _value(m, "ledger_deletion_bookie_gc_requests_total", bookie="http://b1", outcome="200") == 1
    assert _value(m, "ledger_deletion_bookie_gc_requests_total", bookie="http://b2", outcome="unreachable") == 1
    assert _value(m, "ledger_deletion_bookie_gc_pending_bytes") == 180  # counted after the request


async def test_a_failed_request_is_counted_and_not_retried() -> None:
    m = Metrics(CollectorRegistry())
    bookies = FakeBookies(RuntimeError("boom"))
    gc = BookieGc(bookies, GcAccount(threshold_bytes=1, min_interval_s=3600), m)
    gc.freed(LedgerType.LEDGER, 5)
    await gc.idle()
    gc.freed(LedgerType.LEDGER, 5)
    await gc.idle()
    await asyncio.sleep(0)
    assert bookies.calls == 1
    assert _value(m, "ledger_deletion_bookie_gc_requests_total", bookie="all", outcome="error") == 1
