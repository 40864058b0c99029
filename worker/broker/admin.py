"""Pulsar's admin REST API and topic lookup, async, one session.

Ownership matters: a topic's live state (``internalStats``) is only authoritative on the broker that
owns it. ``lookup`` finds the owner; a 307 from a broker means ownership moved, which callers turn into
a cache drop and an epoch bump (see ``worker.broker.snapshot_cache``).
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import quote

import aiohttp

from worker.backends.http import new_session
from worker.errors import BackendError
from worker.formats.topic_name import TopicName
from worker.settings import PulsarSettings


class TopicNotFound(Exception):
    """The admin API said, in Pulsar's own words, that the topic (or its namespace or tenant) does not
    exist. Only half of the proof that a topic is gone: the metadata store must agree
    (``worker.broker.snapshot_cache``)."""


# Pulsar's 404 answers carry ``{"reason": ...}``; these are the ones that mean "no such topic" (or, from
# the schema API, no such schema: ``SchemasResourceBase`` answers "Schema not found", and "Schema is
# deleted" for a tombstone version). A 404 with any other body (a proxy's page, a wrong path, another
# API) proves nothing and is a failure.
_NOT_FOUND_REASONS = re.compile(
    r"^(Topic .*not found.*|Topic not found.*|Partitioned Topic not found.*|Partitioned topic does not exist.*"
    r"|Namespace not found.*|Namespace does not exist.*|Tenant does not exist.*|Tenant not found.*"
    r"|Schema not found.*|Schema is deleted.*|Scalable topic not found.*)$",
    re.IGNORECASE | re.DOTALL,
)


def pulsar_not_found_reason(body: str) -> str | None:
    """The reason of a Pulsar "not found" answer, or None when the body is not one."""
    try:
        d = json.loads(body)
    except ValueError:
        return None
    reason = d.get("reason") if isinstance(d, dict) else None
    if isinstance(reason, str) and _NOT_FOUND_REASONS.match(reason.strip()):
        return reason.strip()
    return None


class NotOwner(Exception):
    """The broker asked answered 307: the topic is owned elsewhere (or ownership is moving)."""

    def __init__(self, location: str | None) -> None:
        super().__init__(f"redirected to {location}")
        self.location = location


# Redirects a lookup follows before giving up (a transient failure for the caller).
_LOOKUP_HOPS = 5


def _q(s: str) -> str:
    return quote(s, safe="")


class PulsarAdmin:
    def __init__(self, admin_url: str, session: aiohttp.ClientSession, token: str | None = None) -> None:
        self.admin_url = admin_url.rstrip("/")
        self.session = session
        self.token = token
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._tls = self.admin_url.startswith("https://")
        self._why = "pulsar.admin_url is https"

    def at(self, base_url: str) -> PulsarAdmin:
        """The same client (session, credentials) aimed at another broker, e.g. a topic's owner."""
        return PulsarAdmin(base_url, self.session, self.token)

    async def _call(
        self,
        method: str,
        path: str,
        *,
        base: str | None = None,
        body: Any = None,
        params: Mapping[str, str] | None = None,
        ok: tuple[int, ...] = (200, 204),
        not_found_ok: bool = False,
        follow_redirect: bool = False,
    ) -> Any:
        url = f"{(base or self.admin_url).rstrip('/')}{path}"
        return await self._request(method, url, path, body, params, ok, not_found_ok, follow_redirect)

    async def _request(
        self,
        method: str,
        url: str,
        path: str,
        body: Any,
        params: Mapping[str, str] | None,
        ok: tuple[int, ...],
        not_found_ok: bool,
        follow_redirect: bool,
        hops: int = 0,
    ) -> Any:
        if self._tls and not url.startswith("https://"):
            # The URL came from a lookup answer or a redirect: with an https admin URL the token never
            # goes over plain http, whoever names it.
            raise BackendError("admin", f"{method} {path}: refused to send it over plain http to {url} ({self._why})")
        # Jersey answers 415 to a PUT/POST without a JSON content type, even with no body.
        headers = {**self._headers, "Content-Type": "application/json"}
        data = None if body is None else json.dumps(body)
        try:
            async with self.session.request(
                method, url, data=data, params=params, headers=headers, allow_redirects=False
            ) as r:
                text = await r.text()
                status = r.status
                location = r.headers.get("Location")
        except (aiohttp.ClientError, TimeoutError) as e:
            raise BackendError("admin", f"{method} {path}: {type(e).__name__}: {e}") from e
        if status in ok:
            if not text.strip():
                return None
            try:
                return json.loads(text)
            except ValueError:
                return text  # a few endpoints (health) answer plain text
        if status in (301, 302, 307, 308):
            if self._tls and location and not location.startswith("https://"):
                raise BackendError(
                    "admin", f"{method} {path}: redirected from https to plain http {location}: refused ({self._why})"
                )
            if follow_redirect and location and hops < _LOOKUP_HOPS and location.startswith(("http://", "https://")):
                # Calls whose answer does not feed an in-use decision (read-outs, idempotent topology
                # writes) simply ask the owner, as Pulsar's admin client does; an unowned bundle may take
                # two hops (the leader, then the broker it assigns). The Location carries the query string.
                return await self._request(method, location, path, body, None, ok, not_found_ok, True, hops + 1)
            raise NotOwner(location)
        if status == 404:
            reason = pulsar_not_found_reason(text)
            if reason is None:
                raise BackendError("admin", f"{method} {path} answered 404 without Pulsar's reason: {text[:200]}", 404)
            if not_found_ok:
                return None
            raise TopicNotFound(f"{method} {path}: {reason}")
        raise BackendError("admin", f"{method} {path} answered {status}: {text[:300]}", status)

    # ---- cluster ----------------------------------------------------------------------------------
    async def ensure_namespace(self, namespace: str) -> None:
        tenant = namespace.split("/")[0]
        clusters = await self._call("GET", "/admin/v2/clusters")
        await self._call(
            "PUT", f"/admin/v2/tenants/{_q(tenant)}", body={"allowedClusters": clusters}, ok=(200, 204, 409)
        )
        await self._call("PUT", f"/admin/v2/namespaces/{namespace}", ok=(200, 204, 409))

    async def list_namespaces(self, tenant: str) -> list[str]:
        return list(await self._call("GET", f"/admin/v2/namespaces/{_q(tenant)}"))

    async def active_brokers(self) -> list[str]:
        """The ids (``host:port`` of the web service) of the local cluster's live brokers."""
        return [str(b) for b in await self._call("GET", "/admin/v2/brokers")]

    async def loaded_topics(self) -> dict[str, tuple[str, str]]:
        """The persistent topics this broker has loaded right now, as of its last statistics update
        (``statsUpdateFrequencyInSecs``, 60 s by default), each with its namespace and bundle range:
        ``broker-stats/topics``, the broker's own list of what it serves. Reading it loads nothing
        (``BrokerService.getDimensionMetrics``); a superuser's call."""
        d = await self._call("GET", "/admin/v2/broker-stats/topics")
        if not isinstance(d, dict):
            raise BackendError("admin", f"broker-stats/topics is not a JSON object: {str(d)[:200]}")
        out: dict[str, tuple[str, str]] = {}
        for namespace, bundles in d.items():
            if not isinstance(bundles, dict):
                continue
            for bundle, domains in bundles.items():
                persistent = domains.get("persistent") if isinstance(domains, dict) else None
                for topic in persistent or {}:
                    out[str(topic)] = (str(namespace), str(bundle))
        return out

    async def list_topics(self, namespace: str, *, include_system: bool = False) -> list[str]:
        """Persistent topics of a namespace, partitions included. The broker counts every topic of a
        system namespace (``pulsar/system``, where the deletion topics live by default) as a system topic
        and lists it only with ``include_system``."""
        params = {"includeSystemTopic": "true"} if include_system else None
        # A version-1 namespace (tenant/cluster/ns) is listed by the v1 API.
        api = "/admin/persistent" if namespace.count("/") == 2 else "/admin/v2/persistent"
        d = await self._call("GET", f"{api}/{namespace}", params=params)
        # Read as proof that a topic is absent: anything but a list of names is a failure, never an empty list.
        if not isinstance(d, list) or not all(isinstance(t, str) for t in d):
            raise BackendError("admin", f"the topic list of {namespace} is not a list of names: {str(d)[:200]}")
        return d

    # ---- topics -----------------------------------------------------------------------------------
    async def lookup(self, topic: TopicName) -> str:
        """The owning broker's admin base URL, following the 307 hops to an unowned bundle's new owner as Pulsar's
        clients do. The answer only names the owner; its internalStats, not followed, stays the proof of ownership."""
        path = topic.lookup_path
        ask = f"{self.admin_url}{path}"
        for _ in range(_LOOKUP_HOPS):
            try:
                d = await self._request("GET", ask, path, None, None, (200,), False, False)
                break
            except NotOwner as e:
                if not e.location or not e.location.startswith(("http://", "https://")):
                    raise
                ask = e.location
        else:
            raise NotOwner(ask)
        if not isinstance(d, dict):
            raise BackendError("admin", f"lookup of {topic} returned no http url: {d}")
        if self._tls:
            # Over TLS, the owner is asked over TLS only: never its plain httpUrl, which would carry the
            # token in clear text (and whose port may be closed).
            url = d.get("httpUrlTls")
            if not isinstance(url, str) or not url.startswith("https://"):
                raise BackendError(
                    "admin",
                    f"lookup of {topic}: the answer has no https owner URL (httpUrlTls: {url!r}; httpUrl "
                    f"{d.get('httpUrl')!r} is plain http, refused: {self._why}). Enable the brokers' "
                    "webServicePortTls",
                )
            return url
        url = d.get("httpUrl") or d.get("httpUrlTls")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise BackendError("admin", f"lookup of {topic} returned no http url: {d}")
        return url

    async def partitions(self, topic: TopicName) -> int:
        """Partition count of the partitioned topic ``topic`` (0: not partitioned, or absent)."""
        d = await self._call(
            "GET",
            f"/admin/{topic.admin_path}/partitions",
            params={"checkAllowAutoCreation": "false"},
            not_found_ok=True,
        )
        return int((d or {}).get("partitions", 0))

    async def internal_stats(self, topic: TopicName, *, base: str | None = None) -> dict[str, Any]:
        """Live state; raises TopicNotFound when the topic does not exist, NotOwner on redirect."""
        d = await self._call(
            "GET", f"/admin/{topic.admin_path}/internalStats", base=base, params={"authoritative": "false"}
        )
        if not isinstance(d, dict):
            raise BackendError("admin", f"internalStats of {topic} is not a JSON object: {str(d)[:200]}")
        return d

    async def scalable_segments(self, segment: TopicName) -> frozenset[str]:
        """The descriptors (``0000-7fff-0``) of every segment the scalable topic of ``segment`` lists, sealed
        ones included (Pulsar 5.0's ``GET /admin/v2/scalable/{tenant}/{namespace}/{topic}``, answered by any
        broker from the topic's metadata). A sealed segment leaves the list when its retention prunes it,
        before its managed ledger is deleted. Raises TopicNotFound when the scalable topic does not exist."""
        path = f"/admin/v2/scalable/{_q(segment.tenant)}/{_q(segment.namespace)}/{_q(segment.local_name)}"
        d = await self._call("GET", path, follow_redirect=True)
        segments = d.get("segments") if isinstance(d, dict) else None
        if not isinstance(segments, dict):
            raise BackendError("admin", f"scalable topic of {segment}: no segments in {str(d)[:200]}")
        try:
            return frozenset(
                f"{int(v['hashRange']['start']):04x}-{int(v['hashRange']['end']):04x}-{int(v['segmentId'])}"
                for v in segments.values()
            )
        except (KeyError, TypeError, ValueError) as e:
            raise BackendError("admin", f"scalable topic of {segment}: unreadable segment {e!r}") from e

    async def internal_info(self, topic: TopicName, *, base: str | None = None) -> dict[str, Any]:
        """Managed-ledger metadata as stored (includes offload context uuids)."""
        return dict(await self._call("GET", f"/admin/{topic.admin_path}/internal-info", base=base))

    async def offload_uuids(self, topic: TopicName, *, base: str | None = None) -> dict[int, str]:
        """Ledger id -> the offload uuid the topic's managed-ledger metadata records (internal-info's
        ``offloadedContextUuid``), for every ledger with an offload attempt."""
        d = await self.internal_info(topic, base=base)
        return {
            int(ld["ledgerId"]): str(ld["offloadedContextUuid"])
            for ld in d.get("ledgers") or []
            if ld.get("offloadedContextUuid")
        }

    async def stats(self, topic: TopicName, earliest_time_in_backlog: bool = False) -> dict[str, Any]:
        params = {"getEarliestTimeInBacklog": "true"} if earliest_time_in_backlog else None
        return dict(await self._call("GET", f"/admin/{topic.admin_path}/stats", params=params, follow_redirect=True))

    async def partitioned_stats(self, topic: TopicName, earliest_time_in_backlog: bool = False) -> dict[str, Any]:
        params = {"perPartition": "false"}
        if earliest_time_in_backlog:  # the broker reads the oldest backlog entry of every subscription for it
            params["getEarliestTimeInBacklog"] = "true"
        return dict(await self._call("GET", f"/admin/{topic.admin_path}/partitioned-stats", params=params))

    async def create_partitioned_topic(self, topic: TopicName, partitions: int) -> None:
        await self._call("PUT", f"/admin/{topic.admin_path}/partitions", body=partitions, ok=(200, 204, 409))

    async def create_topic(self, topic: TopicName) -> None:
        await self._call("PUT", f"/admin/{topic.admin_path}", ok=(200, 204, 409), follow_redirect=True)

    async def create_subscription(self, topic: TopicName, subscription: str) -> None:
        """Idempotent; on a partitioned topic the broker creates it on every partition."""
        earliest = {"ledgerId": -1, "entryId": -1, "partitionIndex": -1}
        await self._call(
            "PUT",
            f"/admin/{topic.admin_path}/subscription/{_q(subscription)}",
            body=earliest,
            ok=(200, 204, 409),
            follow_redirect=True,
        )

    async def subscriptions(self, topic: TopicName) -> list[str]:
        return list(await self._call("GET", f"/admin/{topic.admin_path}/subscriptions", follow_redirect=True))

    async def delete_topic(self, topic: TopicName, *, force: bool = True) -> bool:
        """True if the topic existed and is deleted, False if the broker answered 404 (topic or namespace
        not found). A success carries no body, so the status is the only evidence: hence no not_found_ok."""
        try:
            await self._call(
                "DELETE", f"/admin/{topic.admin_path}", params={"force": str(force).lower()}, follow_redirect=True
            )
        except TopicNotFound:
            return False
        return True

    async def delete_partitioned_topic(self, topic: TopicName, *, force: bool = True) -> None:
        await self._call(
            "DELETE", f"/admin/{topic.admin_path}/partitions", params={"force": str(force).lower()}, not_found_ok=True
        )

    async def trim(self, topic: TopicName) -> None:
        await self._call("POST", f"/admin/{topic.admin_path}/trim", follow_redirect=True)

    async def schema_info(self, topic: TopicName) -> dict[str, Any] | None:
        d = await self._call(
            "GET",
            f"/admin/v2/schemas/{_q(topic.tenant)}/{_q(topic.namespace)}/{_q(topic.local_name)}/schema",
            not_found_ok=True,
            follow_redirect=True,
        )
        return dict(d) if d else None

    async def schema_version(self, topic: TopicName, version: int) -> dict[str, Any]:
        """One version of a topic's schema as the registry keeps it (``{"type", "data", ...}``), e.g. the writer
        schema a message names (``Message.schema_version``)."""
        base = topic.partitioned_base
        d = await self._call(
            "GET",
            f"/admin/v2/schemas/{_q(base.tenant)}/{_q(base.namespace)}/{_q(base.local_name)}/schema/{int(version)}",
            follow_redirect=True,
        )
        if not isinstance(d, dict):
            raise BackendError("admin", f"schema {version} of {topic} is not a JSON object: {str(d)[:200]}")
        return d

    async def upload_schema(self, topic: TopicName, schema_type: str, definition: str) -> None:
        """Register a schema (idempotent: the same definition is not a new version)."""
        base = topic.partitioned_base
        await self._call(
            "POST",
            f"/admin/v2/schemas/{_q(base.tenant)}/{_q(base.namespace)}/{_q(base.local_name)}/schema",
            body={"type": schema_type, "schema": definition, "properties": {}},
            follow_redirect=True,
        )

    # ---- policies (the queue topics' namespace: worker.core.queue_policies) ------------------------
    async def topic_policy(self, topic: TopicName, name: str, *, applied: bool) -> Any:
        """A topic-level policy (``messageTTL``, ``backlogQuotaMap``, ...): with ``applied`` the value the
        broker applies (topic, else namespace, else broker default), else the topic's own (None: unset)."""
        params = {"applied": "true"} if applied else None
        return await self._call("GET", f"/admin/{topic.admin_path}/{name}", params=params, follow_redirect=True)

    async def remove_topic_policy(self, topic: TopicName, name: str, params: Mapping[str, str] | None = None) -> None:
        await self._call("DELETE", f"/admin/{topic.admin_path}/{name}", params=params, follow_redirect=True)

    async def namespace_policy(self, namespace: str, name: str) -> Any:
        """A namespace policy as set (None: unset, the broker's default applies)."""
        return await self._call("GET", f"/admin/v2/namespaces/{namespace}/{name}")

    async def set_namespace_policy(
        self, namespace: str, name: str, body: Any, params: Mapping[str, str] | None = None
    ) -> None:
        await self._call("POST", f"/admin/v2/namespaces/{namespace}/{name}", body=body, params=params)

    async def scan_offloaded_ledgers(self, namespace: str) -> str:
        """Pulsar's own scan of the namespace's offload bucket, as the broker streams it (parse it with
        ``worker.formats.offloaded_scan``). The broker lists the whole bucket of the namespace's offloader and
        reads each object's metadata and topic: it takes as long as the bucket is large."""
        text = await self._call("GET", f"/admin/v2/namespaces/{namespace}/scanOffloadedLedgers")
        return text if isinstance(text, str) else json.dumps(text)

    async def broker_runtime_config(self) -> dict[str, Any]:
        """The broker's effective configuration (superuser only)."""
        return dict(await self._call("GET", "/admin/v2/brokers/configuration/runtime"))


def admin_session(p: PulsarSettings) -> aiohttp.ClientSession:
    """The session for a Pulsar admin API: its timeout, its CA bundle, and, when the endpoint is https,
    never a request over plain http."""
    ca = p.tls_trust_certs_file
    return new_session(
        p.request_timeout_s,
        ca_file=str(ca) if ca else None,
        check_hostname=not p.tls_insecure_skip_hostname_verification,
        https_only=p.admin_url.scheme == "https",
    )


@contextlib.asynccontextmanager
async def open_admin(p: PulsarSettings) -> AsyncIterator[PulsarAdmin]:
    """The one way to reach Pulsar's admin API from the settings: its session (timeout, CA bundle, no plain
    http under https) and its credentials."""
    async with admin_session(p) as session:
        yield PulsarAdmin(str(p.admin_url), session, p.auth_token)
