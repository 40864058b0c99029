"""Helpers shared by the integration tests of offloaded ledgers: offloads made with Pulsar's own offloader, the
offload contexts the metadata store records, the objects and messages they name, and settings with offload
targets."""

from __future__ import annotations

from typing import Any

from testkit.topics import eventually, ml_ledger_ids
from tests.conftest import Stack
from worker.backends.stores import Stores
from worker.broker.admin import PulsarAdmin
from worker.formats.message import LedgerComponent, LedgerType, OffloadContext, PendingDeleteLedgerInfo
from worker.formats.topic_name import TopicName
from worker.settings import Settings


async def offload_topic(admin: PulsarAdmin, topic: TopicName) -> list[int]:
    """Offload every closed ledger with Pulsar's offloader; returns the offloaded ids."""
    current = max(ml_ledger_ids(await admin.internal_stats(topic)))
    await admin.trigger_offload(topic, current, 0)

    async def finished() -> dict | None:
        st = await admin.offload_status(topic)
        return st if st.get("status") in ("SUCCESS", "ERROR") else None

    st = await eventually(finished, timeout=120, what="the offload")
    assert st["status"] == "SUCCESS", st
    stats = await admin.internal_stats(topic)
    return [int(ld["ledgerId"]) for ld in stats["ledgers"] if ld.get("offloaded")]


async def offload_contexts(stack: Stack, topic: TopicName) -> dict[int, OffloadContext]:
    """Each completely offloaded ledger of ``topic`` and its offload context, as the metadata store records them."""
    async with Stores(f"zk:{stack.zookeeper_hosts}") as zk:
        md = await zk.pulsar.stored_topic(topic)
    assert md is not None
    out = {}
    for ld in md.managed_ledger.ledgers:
        o = ld.offload
        if o is not None and o.complete and o.uuid is not None:
            out[ld.ledger_id] = OffloadContext.from_uuid(o.uuid, o.driver_name, dict(o.driver_metadata))
    return out


def keys_of(ctx: OffloadContext, lid: int) -> list[str]:
    """The object keys Pulsar's offloader writes for ledger ``lid`` of offload ``ctx``: data and index."""
    return [f"{ctx.uuid}-ledger-{lid}", f"{ctx.uuid}-ledger-{lid}-index"]


def offload_msg(topic: str, lid: int, ctx: OffloadContext) -> PendingDeleteLedgerInfo:
    """A message for the offloaded copy of ledger ``lid`` of ``topic``."""
    return PendingDeleteLedgerInfo(
        topic, LedgerComponent.MANAGED_LEDGER, LedgerType.OFFLOAD_LEDGER, lid, offload_context=ctx
    )


def settings(stack: Stack, **offload: Any) -> Settings:
    """Settings for the local stack with the ``offload`` block given (its targets)."""
    return Settings.model_validate(
        {
            "pulsar": {"service_url": stack.service_url, "admin_url": stack.admin_url},
            "bookkeeper": {"http_url": stack.bookie_http_url},
            "zookeeper": {"metadata_store_url": f"zk:{stack.zookeeper_hosts}"},
            "offload": offload,
        }
    )
