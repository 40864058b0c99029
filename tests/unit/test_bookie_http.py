"""The bookie HTTP client (``worker.backends.bookie_http``): which endpoint the next call goes to (pure), and the
ledger store's calls counted by outcome."""

from __future__ import annotations

import pytest

from worker.backends.bookie_http import BookieEndpoint, CountedLedgerStore, pick_endpoint
from worker.errors import BackendError
from worker.formats.ledger_metadata import LedgerMetadata


def eps(*inflight: int) -> list[BookieEndpoint]:
    return [BookieEndpoint(f"http://b{i}:8000", n) for i, n in enumerate(inflight)]


def test_least_busy_first_ties_to_the_first_listed() -> None:
    assert pick_endpoint(eps(0, 0), now=10).url == "http://b0:8000"
    assert pick_endpoint(eps(1, 0), now=10).url == "http://b1:8000"
    assert pick_endpoint(eps(2, 1, 1), now=10).url == "http://b1:8000"


def test_a_bookie_marked_down_is_skipped_until_its_mark_expires() -> None:
    e = eps(3, 0)
    e[1].down_until = 20
    assert pick_endpoint(e, now=10).url == "http://b0:8000"
    assert pick_endpoint(e, now=20).url == "http://b1:8000"


def test_every_bookie_down_tries_the_one_down_longest() -> None:
    e = eps(0, 0, 0)
    e[0].down_until, e[1].down_until, e[2].down_until = 30, 15, 25
    assert pick_endpoint(e, now=10).url == "http://b1:8000"


def test_excluded_endpoints_are_not_retried_while_others_remain() -> None:
    e = eps(0, 5)
    assert pick_endpoint(e, now=0, exclude={"http://b0:8000"}).url == "http://b1:8000"
    # Everything excluded: any endpoint rather than none (the caller bounds its own attempts).
    assert pick_endpoint(e, now=0, exclude={"http://b0:8000", "http://b1:8000"}).url == "http://b0:8000"


# ---- the ledger store's calls, counted by outcome (the BookKeeper request metrics) -----------------------------


class _Store:
    def __init__(self, found: bool, fail: bool = False) -> None:
        self.found, self.fail = found, fail

    async def read(self, ledger_id: int, prefetched: object = None) -> tuple[LedgerMetadata, object] | None:
        if self.fail:
            raise BackendError("bookie", "down")
        md = LedgerMetadata(ledger_id=ledger_id, custom_metadata={}, ctime_ms=None, length=0, state="CLOSED")
        return (md, None) if self.found else None

    async def delete(self, ledger_id: int, token: object) -> bool:
        if self.fail:
            raise BackendError("bookie", "down")
        return self.found


async def test_counted_ledger_store_reports_each_outcome() -> None:
    seen: list[tuple[str, str]] = []
    record = lambda op, outcome: seen.append((op, outcome))  # noqa: E731
    assert await CountedLedgerStore(_Store(found=True), record).read(1) is not None
    assert await CountedLedgerStore(_Store(found=True), record).delete(1, None) is True
    assert await CountedLedgerStore(_Store(found=False), record).read(2) is None
    assert await CountedLedgerStore(_Store(found=False), record).delete(2, None) is False
    with pytest.raises(BackendError):
        await CountedLedgerStore(_Store(True, fail=True), record).read(3)
    with pytest.raises(BackendError):
        await CountedLedgerStore(_Store(True, fail=True), record).delete(3, None)
    assert seen == [
        ("read", "ok"),
        ("delete", "ok"),
        ("read", "not_found"),
        ("delete", "not_found"),
        ("read", "error"),
        ("delete", "error"),
    ]
