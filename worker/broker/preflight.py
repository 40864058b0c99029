"""Before the daemon takes a message: can it talk to Pulsar with what it was given?

A wrong or missing token, a role without the permissions the worker needs, or an admin endpoint whose
certificate is not trusted would otherwise surface as an endless stream of retried messages. They are
refused at start instead, with the endpoint, the setting to fix and, for a 403, what was asked.

So are metadata stores that are not where the config says (each proven by what it must hold) and bookie
HTTP endpoints that are not bookies of the cluster those stores describe.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import Iterator, Sequence

import aiohttp
import pulsar

from worker.backends.bookie_http import BookieClient, BookieNotInCluster
from worker.broker.admin import PulsarAdmin
from worker.broker.client import CallFailed
from worker.broker.topology import read_queue_policies
from worker.core.metadata_stores import (
    BookKeeperMetadataStore,
    MetadataStores,
    NoAnchor,
    PulsarMetadataStore,
    WrongMetadataStore,
)
from worker.core.queue_policies import dropping, unknown
from worker.core.store_anchor import Anchor, anchor_refusal
from worker.errors import BackendError, StartupRefused
from worker.formats.ledger_metadata import LedgerMetadata, parse_serialized_metadata
from worker.formats.protobuf_wire import MetadataFormatError
from worker.formats.topic_name import TopicName
from worker.logs import get_logger
from worker.settings import PulsarSettings, TopicsSettings


def _tls_hint(p: PulsarSettings) -> str:
    if p.tls_trust_certs_file:
        return f"the CA bundle pulsar.tls_trust_certs_file ({p.tls_trust_certs_file}) does not vouch for it"
    return "set pulsar.tls_trust_certs_file to the CA bundle that signed the broker's certificate"


async def check_admin(admin: PulsarAdmin, p: PulsarSettings, topic: TopicName) -> None:
    """One authenticated call every role of the worker needs (the pending topic's partition count)."""
    url = str(p.admin_url).rstrip("/")
    try:
        await admin.partitions(topic)
    except BackendError as e:
        cause = e.__cause__
        if isinstance(cause, aiohttp.ClientConnectorCertificateError | aiohttp.ClientSSLError):
            raise StartupRefused(
                f"pulsar.admin_url {url}: TLS certificate not trusted ({cause}); {_tls_hint(p)}"
            ) from e
        # Pulsar answers 401 to both: Jetty's "Authentication required" page when the credentials are
        # refused, and a JSON {"reason": "Unauthorized to ..."} when the role lacks a permission.
        denied = _authorization_reason(str(e))
        if e.status == 403 or (e.status == 401 and denied):
            raise StartupRefused(
                f"pulsar.admin_url {url}: the token's role may not look up {topic} ({e.status}: "
                f"{denied or 'forbidden'}); token from {p.token_source}. Grant it consume and produce on "
                f"{topic.namespace_name} (docs/operations.md: Authentication and TLS)"
            ) from e
        if e.status == 401:
            raise StartupRefused(
                f"pulsar.admin_url {url}: the broker refused the credentials (401 Unauthorized); "
                f"token from {p.token_source}"
            ) from e
        raise


def _authorization_reason(message: str) -> str | None:
    m = re.search(r'"reason"\s*:\s*"([^"]*)"', message)
    return m.group(1) if m else None


def _result(e: Exception) -> object:
    # An answer given to a callback carries its result; the blocking calls raise a class per result. Both say
    # the same thing.
    if isinstance(e, CallFailed):
        return e.result
    if isinstance(e, pulsar.AuthenticationError):
        return pulsar.Result.AuthenticationError
    if isinstance(e, pulsar.AuthorizationError):
        return pulsar.Result.AuthorizationError
    return None


def binary_refusal(p: PulsarSettings, what: str, e: Exception) -> StartupRefused | None:
    """The StartupRefused for a binary-protocol error that no retry can fix, else None."""
    result = _result(e)
    if result == pulsar.Result.AuthenticationError:
        return StartupRefused(
            f"pulsar.service_url {p.service_url}: the broker refused the credentials ({what}: {e}); "
            f"token from {p.token_source}"
        )
    if result == pulsar.Result.AuthorizationError:
        return StartupRefused(
            f"pulsar.service_url {p.service_url}: the token's role is not authorized to {what} ({e}); "
            f"token from {p.token_source} (docs/operations.md: Authentication and TLS)"
        )
    return None


@contextlib.contextmanager
def refused_as(p: PulsarSettings, what: str) -> Iterator[None]:
    """Turn an authentication or authorization failure of ``what`` into StartupRefused."""
    try:
        yield
    except Exception as e:
        refused = binary_refusal(p, what, e)
        if refused is None:
            raise
        raise refused from e


async def check_pulsar_store(pulsar: PulsarMetadataStore, pending: TopicName | None) -> None:
    """``zookeeper.metadata_store_url`` holds the pending topic's managed ledger (call once the topology exists)."""
    try:
        await pulsar.check(pending)
    except WrongMetadataStore as e:
        raise StartupRefused(str(e)) from e


async def prove_metadata_stores(zk: MetadataStores, admin: PulsarAdmin, pending: TopicName) -> None:
    """For the operator commands (scan, purge-topic): both stores where the config says. The pending
    topic anchors Pulsar's store when it exists (the admin API says so); before the worker's topology
    exists, only the managed-ledgers root can be asked for. BookKeeper's is anchored to Pulsar's: by the
    pending topic's current ledger, or any topic's when the pending topic lists none."""
    try:
        exists = await admin.partitions(pending) > 0 or str(pending) in await admin.list_topics(
            pending.namespace_name, include_system=True
        )
    except BackendError as e:
        if e.status not in (401, 403, 404):
            raise
        exists = False  # no such namespace, or a role that may not look: the weaker proof only
    await check_pulsar_store(zk.pulsar, pending if exists else None)
    await prove_bookkeeper_store(zk.pulsar, zk.bookkeeper, pending_anchors(pending), any_topic=True)


async def check_bookkeeper_store(bookkeeper: BookKeeperMetadataStore) -> None:
    """BookKeeper's store (``zookeeper.metadata_service_uri``, or Pulsar's) has a known LAYOUT."""
    try:
        await bookkeeper.check_layout()
    except WrongMetadataStore as e:
        raise StartupRefused(str(e)) from e


def pending_anchors(pending: TopicName, *more: TopicName) -> list[TopicName]:
    """The topics whose current ledger anchors BookKeeper's store: the pending topic's partition 0 (or the
    topic itself, not partitioned), then ``more``."""
    return [pending.partition(0), pending, *more]


async def prove_bookkeeper_store(
    pulsar: PulsarMetadataStore,
    bookkeeper: BookKeeperMetadataStore,
    anchors: Sequence[TopicName],
    *,
    any_topic: bool = False,
    wait_s: float = 0.0,
) -> Anchor:
    """BookKeeper's store holds the current ledger Pulsar's store lists for one of ``anchors``, naming it
    (``worker.core.store_anchor``), and has registered bookies. ``wait_s``: how long to wait for an anchor
    topic to list a ledger (one just made is being loaded). Refused naming the keys otherwise."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return await anchored_bookkeeper_store(pulsar, bookkeeper, anchors, any_topic=any_topic)
        except NoAnchor as e:
            if time.monotonic() >= deadline:
                raise StartupRefused(str(e)) from e
        except WrongMetadataStore as e:
            raise StartupRefused(str(e)) from e
        await asyncio.sleep(0.5)


async def anchored_bookkeeper_store(
    pulsar: PulsarMetadataStore,
    bookkeeper: BookKeeperMetadataStore,
    anchors: Sequence[TopicName],
    *,
    any_topic: bool = False,
) -> Anchor:
    """Prove ``bookkeeper`` is the BookKeeper store Pulsar's topics write to: its layout names a known ledger
    manager, it has registered bookies, and the newest ledger ``pulsar`` lists for the first of ``anchors``
    that lists one is there, naming that topic. With ``any_topic`` (the operator commands, which may run
    before the worker made its topics), any topic of Pulsar's store that lists a ledger anchors it when none
    of ``anchors`` does. Returns the anchor; raises :class:`WrongMetadataStore` (:class:`NoAnchor` when
    there is nothing to anchor on yet) naming the keys."""
    await bookkeeper.check_layout()
    where = bookkeeper.where
    if not await bookkeeper.registered_bookies():
        raise WrongMetadataStore(
            f"{where}: no bookie is registered there (its available bookies are none): not the store of a "
            "running BookKeeper cluster; point it at the bookies' metadataServiceUri"
        )
    # A trim may drop the anchor's ledger between the two reads: a refusal counts only when the topic
    # still lists the same newest ledger afterwards.
    anchor, why = None, None
    for _ in range(3):
        found = await pulsar.anchor(anchors, any_topic=any_topic)
        if found is None:
            names = ", ".join(str(t) for t in anchors) or "no topic"
            raise NoAnchor(
                f"{where}: cannot be proven BookKeeper's store of this Pulsar cluster: Pulsar's metadata "
                f"store lists no ledger for {names}{' nor for any other topic' if any_topic else ''} to look "
                "for there"
            )
        if found == anchor:
            break
        anchor = found
        why = anchor_refusal(anchor, await _anchor_metadata(bookkeeper, anchor))
        if why is None:
            return anchor
    raise WrongMetadataStore(
        f"{where}: not BookKeeper's store of this Pulsar cluster: {why}. Point it at the bookies' "
        "metadataServiceUri (the brokers' bookkeeperMetadataServiceUri)"
    )


async def _anchor_metadata(bookkeeper: BookKeeperMetadataStore, anchor: Anchor) -> LedgerMetadata | None:
    got = await bookkeeper.read_ledger_metadata(anchor.ledger_id)
    if got is None:
        return None
    try:
        return parse_serialized_metadata(anchor.ledger_id, got[0], int(got[1].ctime))
    except MetadataFormatError as e:
        raise WrongMetadataStore(f"{bookkeeper.where}: ledger {anchor.ledger_id}'s metadata is unreadable: {e}") from e


async def check_bookies(bookie: BookieClient, bookkeeper: BookKeeperMetadataStore) -> None:
    """Every reachable configured bookie is registered in BookKeeper's store (one that is down is
    checked before its first call)."""
    try:
        await bookie.verify_endpoints()
    except BookieNotInCluster as e:
        raise StartupRefused(
            f"bookkeeper.http_url/http_urls {e.url}: not a bookie of the BookKeeper cluster in "
            f"{bookkeeper.where} (its available bookies): {e.why}. List only that "
            "cluster's bookies: any bookie deletes ledgers of its own cluster, by id"
        ) from e


async def check_queue_policies(admin: PulsarAdmin, topics: TopicsSettings) -> None:
    """No Pulsar policy on the queue topics drops queued deletions (``worker.core.queue_policies``): one
    that would is refused, by name. A role that may not read them (a least-privileged worker: only tenant
    admins may) is warned and starts; ``topology``, run by a tenant admin, sets and checks them."""
    policies, expirations = await read_queue_policies(admin, topics)
    problems = dropping(policies, expirations)
    if problems:
        raise StartupRefused(
            f"queue policies would drop pending deletions: {'; '.join(problems)}. A tenant admin makes them "
            "safe with: ledger-deletion-worker topology"
        )
    if unread := unknown(policies, expirations):
        get_logger().warning(
            "queue policies not checked: this role may not read them; run `ledger-deletion-worker topology` "
            "with a tenant-admin token, which sets and checks them",
            policies=unread,
        )
