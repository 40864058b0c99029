"""A schema ledger is in use while the schema registry references it: its ``SchemaLocator``
(``/schemas/<schemaId>``, ``BookkeeperSchemaStorage``) lists it, whether its topic exists or not, or its
live topic's owner lists it. The admin API's schema answer is not used: it speaks per schema, not per
ledger, a deleted schema is a tombstone whose ledgers the registry still reads, and a v1 topic's schema id
drops its cluster (docs/design.md, "Schema ledgers: one rule").
"""

from __future__ import annotations

from collections.abc import Collection


def schema_ledger_hold(
    ledger_id: int, *, registry: Collection[int] | None, live: Collection[int] = frozenset()
) -> str | None:
    """Why the schema ledger ``ledger_id`` is in use, or None when it is not.

    ``registry``: the ledger ids of the schema's locator (None: the registry has no entry for the schema
    id). ``live``: the ``schemaLedgers`` of the topic's owner, empty when the topic is gone."""
    if ledger_id in live:
        return "in its topic's schema ledgers"
    if registry is not None and ledger_id in registry:
        return "referenced by the schema registry"
    return None
