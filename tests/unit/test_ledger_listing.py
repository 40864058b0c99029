"""Listing BookKeeper's ledgers from the metadata store (``worker.backends.ledger_listing``): a ledger id from its
znode path."""

from __future__ import annotations

import pytest

from worker.backends.bookkeeper_store import ledger_id_of_path
from worker.formats.metadata_paths import hierarchical_ledger_path


@pytest.mark.parametrize("lid", [0, 42, 9_999, 10_000, 2**31 - 2, 2**31 - 1, 2**40 + 7])
def test_ledger_id_from_its_znode_path(lid: int) -> None:
    assert ledger_id_of_path("/ledgers", hierarchical_ledger_path(lid, "/ledgers")) == lid
    assert ledger_id_of_path("/bench-x", hierarchical_ledger_path(lid, "/bench-x")) == lid
