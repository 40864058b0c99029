"""Where topics live in the cluster, and moving them: bundle lookups, unloads to a chosen broker."""

from __future__ import annotations

import time
from collections.abc import Iterable

from tests.cluster.conftest import Cluster, rest
from worker.formats.topic_name import TopicName


def _follow(method: str, url: str, *, hops: int = 6) -> object:
    """An admin call that follows 307s (the owner answers), like Pulsar's own admin client."""
    import urllib.error
    import urllib.request

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *a: object, **k: object) -> None:
            return None

    opener = urllib.request.build_opener(NoRedirect)
    for _ in range(hops):
        req = urllib.request.Request(url, method=method, headers={"Content-Type": "application/json"})
        try:
            with opener.open(req, timeout=60) as r:
                import json

                text = r.read().decode()
                return json.loads(text) if text.strip() else None
        except urllib.error.HTTPError as e:
            if e.code in (301, 302, 307, 308) and e.headers.get("Location"):
                url = e.headers["Location"]
                continue
            raise AssertionError(f"{method} {url}: {e.code} {e.read()[:300]!r}") from e
    raise AssertionError(f"{method} {url}: more than {hops} redirects")


def owner(cluster: Cluster, topic: str) -> str:
    """The owner's admin URL (a lookup; assigns the bundle if nobody owns it)."""
    d = _follow("GET", f"{cluster.admin_url}/lookup/v2/topic/{TopicName.parse(topic).rest_path}")
    assert isinstance(d, dict), d
    return str(d["httpUrl"]).rstrip("/")


def bundle(cluster: Cluster, topic: str) -> str:
    b = rest("GET", f"{cluster.admin_url}/lookup/v2/topic/{TopicName.parse(topic).rest_path}/bundle")
    return str(b).strip('"')


def move(cluster: Cluster, topic: str, to_admin_url: str, *, timeout: float = 60) -> None:
    """Unload ``topic``'s bundle to the broker serving ``to_admin_url`` and wait until it owns it."""
    ns = TopicName.parse(topic).namespace_name
    b = bundle(cluster, topic)
    deadline = time.monotonic() + timeout
    while True:
        if owner(cluster, topic) == to_admin_url.rstrip("/"):
            return
        dest = cluster.broker_id(to_admin_url)
        try:
            _follow("PUT", f"{cluster.admin_url}/admin/v2/namespaces/{ns}/{b}/unload?destinationBroker={dest}")
        except AssertionError:
            if time.monotonic() > deadline:
                raise
        if time.monotonic() > deadline:
            raise AssertionError(f"{topic} (bundle {b}) still owned by {owner(cluster, topic)}, not {to_admin_url}")
        time.sleep(0.5)


def unload_bundle(cluster: Cluster, topic: str, to_admin_url: str) -> None:
    """One unload of ``topic``'s bundle towards ``to_admin_url``, without waiting (ownership in flux)."""
    ns = TopicName.parse(topic).namespace_name
    dest = cluster.broker_id(to_admin_url)
    _follow(
        "PUT", f"{cluster.admin_url}/admin/v2/namespaces/{ns}/{bundle(cluster, topic)}/unload?destinationBroker={dest}"
    )


def spread(cluster: Cluster, topics: Iterable[str]) -> dict[str, str]:
    """Place the topics' bundles alternately on the two brokers (by bundle); returns topic -> owner."""
    by_bundle: dict[str, list[str]] = {}
    for t in topics:
        by_bundle.setdefault(bundle(cluster, t), []).append(t)
    for i, (_, ts) in enumerate(sorted(by_bundle.items())):
        move(cluster, ts[0], cluster.admin_urls[i % 2])
    return {t: owner(cluster, t) for ts in by_bundle.values() for t in ts}
