"""A schema ledger in use (``worker.core.schema_in_use``): held by its registry entry or its topic's list."""

from __future__ import annotations

from worker.core.schema_in_use import schema_ledger_hold


def test_a_schema_ledger_is_held_by_its_registry_entry_or_its_topics_list() -> None:
    assert schema_ledger_hold(7, registry=frozenset({3, 7})) == "referenced by the schema registry"
    assert schema_ledger_hold(7, registry=None, live=frozenset({7})) == "in its topic's schema ledgers"
    # No entry, or an entry (a registered schema) that does not list the ledger: not in use.
    assert schema_ledger_hold(7, registry=None) is None
    assert schema_ledger_hold(7, registry=frozenset({3})) is None
    assert schema_ledger_hold(7, registry=frozenset(), live=frozenset({3})) is None
