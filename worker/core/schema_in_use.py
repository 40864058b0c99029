"""A schema ledger is in use while the schema registry references it.

The registry's record of a topic's schema is its ``SchemaLocator`` in the metadata store,
``/schemas/<schemaId>`` (``BookkeeperSchemaStorage``): an index of every stored version, each a position
in a ledger. The broker reads that locator to answer everything else: a topic's ``schemaLedgers`` in
``internalStats`` are its ledger ids, and the admin API's ``GET .../schema`` reads the latest version
through it. So the locator is the one proof, for the worker and the scanner alike. The admin answer is
not, for three reasons found on Pulsar 4.0.8:

- it answers per schema, not per ledger: a registered schema says nothing about a schema ledger the
  locator no longer lists (a version whose ledger Pulsar failed to delete, an earlier registration of the
  name), which is garbage; held on the admin's word it was queued by every scan and dead-lettered;
- a deleted schema (``DELETE .../schema`` without ``force``) is a tombstone version: the admin answers
  404 ``Schema not found``, yet the locator still lists every version's ledger, and the registry reads
  them all again on the next registration (``trimDeletedSchemaAndGetList``): deleting one breaks the
  name's registry;
- a schema is kept by its id, which drops a v1 topic's cluster: the broker's health check topic
  ``pulsar/<cluster>/<broker>/healthcheck`` keeps its schema under ``pulsar/<broker>/healthcheck``, a v2
  name whose topic does not exist; only the locator knows it is held.

Deleting a topic deletes its schema storage too (``AbstractTopic.deleteSchema``: locator and ledgers), so
a gone topic's schema ledger is normally gone with it. A gone topic's schema can still be registered
(Pulsar accepts a schema for a name with no topic, and a deletion can fail half-way): then the locator's
ledgers stay, and only those.

While the topic exists, its owner's live set lists the same locator's ledgers; either source listing the
ledger keeps it.
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
