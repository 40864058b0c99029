"""The admin calls only staging needs (tests, benchmarks, demos): setting retention, unloading and offloading
topics, a health probe. The worker never makes them, so they live here, on top of its admin client."""

from __future__ import annotations

from typing import Any

from worker.broker.admin import NotOwner, PulsarAdmin, TopicNotFound
from worker.errors import BackendError
from worker.formats.topic_name import TopicName


class StagingAdmin(PulsarAdmin):
    """:class:`~worker.broker.admin.PulsarAdmin` with the calls a test, a benchmark or a demo stages with."""

    @classmethod
    def of(cls, admin: PulsarAdmin) -> StagingAdmin:
        """The same broker, session and credentials as ``admin``."""
        return cls(admin.admin_url, admin.session, admin.token)

    async def healthy(self) -> bool:
        try:
            await self._call("GET", "/admin/v2/brokers/health")
            return True
        except (BackendError, TopicNotFound, NotOwner):
            return False

    async def list_tenants(self) -> list[str]:
        return list(await self._call("GET", "/admin/v2/tenants"))

    async def set_retention(self, namespace: str, minutes: int, size_mb: int) -> None:
        await self._call(
            "POST",
            f"/admin/v2/namespaces/{namespace}/retention",
            body={"retentionTimeInMinutes": minutes, "retentionSizeInMB": size_mb},
        )

    async def unload(self, topic: TopicName) -> None:
        await self._call("PUT", f"/admin/{topic.admin_path}/unload", follow_redirect=True)

    async def trigger_offload(self, topic: TopicName, ledger_id: int, entry_id: int = 0) -> None:
        """Offload every ledger before position (ledger_id, entry_id) to tiered storage (asynchronous)."""
        await self._call(
            "PUT",
            f"/admin/{topic.admin_path}/offload",
            body={"ledgerId": ledger_id, "entryId": entry_id, "partitionIndex": -1},
            follow_redirect=True,
        )

    async def offload_status(self, topic: TopicName) -> dict[str, Any]:
        """``{"status": NOT_RUN|RUNNING|SUCCESS|ERROR, "lastError": ...}``."""
        return dict(await self._call("GET", f"/admin/{topic.admin_path}/offload", follow_redirect=True))
