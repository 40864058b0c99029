"""The one gatherer of the facts the decision's rules ask for, for the worker and the scanner alike.

``worker.core.decision.decide`` is pure: a rule that needs a fact still ``ASK`` raises ``Needed``, and
:meth:`Gatherer.decide` reads it from Pulsar's metadata store and decides again, until a rule answers. So
each fact is read only when a rule asks for it, and always after the live state (the caller's: the daemon
reads it concurrently with storage, the scanner once per topic): a subscription, a record, a registry entry
the owner did not list then cannot hold an older ledger (``worker.core.bucket_in_use``,
``worker.core.open_ledger``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from worker.core.bucket_in_use import CursorRecord, cursor_znode_name
from worker.core.decision import Facts, Need, Needed, Result, Rules, decide
from worker.core.metadata_stores import PulsarMetadataStore
from worker.formats.managed_ledger_metadata import ManagedLedgerInfo
from worker.formats.message import LedgerComponent, PendingDeleteLedgerInfo


class Unread(Exception):
    """A fact a rule asked for could not be read, or there is no store to read it from: the worker retries
    (transient), the scanner skips. Never a guess."""


class Gatherer:
    def __init__(self, store: PulsarMetadataStore | None, *, one_topic: bool = False) -> None:
        self.store = store
        # The scanner judges a topic's ledgers one after the other, right after its one live state: its
        # managed-ledger record, read after that live state, answers them all (one read, not one per ledger).
        self._records: dict[str, ManagedLedgerInfo | None] | None = {} if one_topic else None

    async def decide(self, info: PendingDeleteLedgerInfo, facts: Facts, *, now_ms: int, rules: Rules) -> Result:
        """The decision on ``facts``, each fact a rule asks for read first."""
        while True:
            try:
                return decide(info, facts, now_ms=now_ms, rules=rules)
            except Needed as n:
                facts = dataclasses.replace(facts, **{n.need.field: await self._read(n.need, info)})

    async def _read(self, need: Need, info: PendingDeleteLedgerInfo) -> Any:
        store = self.store
        if store is None or need is Need.LIVE:  # the live state is the caller's to read, first
            raise Unread(f"no metadata store to read {need.value}")
        try:
            match need:
                case Need.SCHEMA_REGISTRY:
                    # The topic's own schema id (a message's schema_id is verified against it, not trusted).
                    return await store.schema_ledgers(info.topic.schema_name)
                case Need.OFFLOAD:
                    ml = await self._managed_ledger(store, info)
                    ledger = ml.ledger(info.ledger_id) if ml is not None else None
                    return ledger.offload if ledger is not None else None
                case Need.BUCKET_CURSOR:
                    cursor = cursor_znode_name(info.cursor_name or "")
                    return CursorRecord(await store.cursor_properties(info.topic, cursor))
                case Need.RECORDED:
                    named_by = info.cursor_name if info.ledger_component is LedgerComponent.MANAGED_CURSOR else None
                    return await store.records_ledger(info.topic, info.ledger_id, named_by)
        except Exception as e:  # CancelledError is no Exception: a cancelled read stays cancelled
            raise Unread(f"metadata store unavailable: {type(e).__name__}: {e} (reading {need.value})") from e
        raise AssertionError(need)

    async def _managed_ledger(
        self, store: PulsarMetadataStore, info: PendingDeleteLedgerInfo
    ) -> ManagedLedgerInfo | None:
        if self._records is None:
            return await store.read_managed_ledger(info.topic)
        key = str(info.topic)
        if key not in self._records:
            self._records[key] = await store.read_managed_ledger(info.topic)
        return self._records[key]
