"""The cluster profile of the local stack (deploy/local/stack.sh, PROFILE=cluster): one ZooKeeper, two
bookies, two brokers, moto S3, all real processes on loopback beside the standalone stack.

Every test in this directory is marked ``cluster`` (and ``integration``). The package-scoped fixture starts
the profile if it is not up (about 100 s, ~1.5 GiB RSS) and stops it after the last test of this directory
(not at the end of the whole session: its JVMs would share the 2 cores with every standalone test after it)
unless it was already up or ``LDW_CLUSTER_KEEP=1``; ``LDW_CLUSTER=0`` skips these tests, saying so.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from dataclasses import asdict, dataclass, replace
from typing import Any

import pytest

from testkit.admin import StagingAdmin
from testkit.stack import Profile, mark_directory, running, stack_of
from tests.conftest import Stack
from tests.integration.conftest import harnesses, pushgateway  # noqa: F401  (the same fixtures for cluster tests)
from worker.backends.bookie_http import BookieClient
from worker.backends.http import new_session
from worker.broker.admin import PulsarAdmin

BROKERS = ("broker1", "broker2")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_directory(items, os.path.dirname(__file__), pytest.mark.cluster, pytest.mark.integration)


CLUSTER = Profile("cluster", off="LDW_CLUSTER", keep="LDW_CLUSTER_KEEP")


@dataclass(frozen=True, kw_only=True)
class Cluster(Stack):
    admin_url_2: str
    service_url_1: str
    service_url_2: str
    bookie_http_url_2: str
    stack_dir: str
    # Bookie 1's id as the cluster registers it (advertisedAddress:bookiePort)
    bookie_id: str

    @property
    def admin_urls(self) -> tuple[str, str]:
        return (self.admin_url, self.admin_url_2)

    def broker_of(self, admin_url: str) -> str:
        """The stack.sh component name of the broker serving ``admin_url``."""
        return BROKERS[self.admin_urls.index(admin_url.rstrip("/"))]

    def broker_id(self, admin_url: str) -> str:
        """Pulsar's id of that broker (host:webPort), as /admin/v2/brokers lists it."""
        return admin_url.rstrip("/").removeprefix("http://")

    def other(self, admin_url: str) -> str:
        a, b = self.admin_urls
        return b if admin_url.rstrip("/") == a else a

    def via(self, admin_url: str) -> Stack:
        """The stack as a worker sees it when its configured admin URL is ``admin_url``."""
        return replace(self, admin_url=admin_url)

    def kill9(self, component: str) -> None:
        CLUSTER.run("kill9", component, timeout=60).check_returncode()

    def start(self, component: str) -> None:
        r = CLUSTER.run("start", component)
        assert r.returncode == 0, f"could not start {component}: {r.stderr[-3000:]}"

    def stop(self, component: str) -> None:
        CLUSTER.run("stop", component, timeout=120).check_returncode()


@pytest.fixture(scope="package")
def cluster() -> Iterator[Cluster]:
    """Stopped after the last test of this directory (not at the end of the session: its JVMs would share the
    2 cores with every standalone test after it); a test that killed a component restarts it, and a profile
    kept up is brought whole again."""
    with running(CLUSTER) as env:
        yield Cluster(
            **asdict(stack_of(env)),
            admin_url_2=env["PULSAR_ADMIN_URL_2"],
            service_url_1=env["PULSAR_SERVICE_URL_1"],
            service_url_2=env["PULSAR_SERVICE_URL_2"],
            bookie_http_url_2=env["BOOKIE_HTTP_URL_2"],
            stack_dir=env["STACK_DIR"],
            bookie_id=env["BOOKIE_ID"],
        )


def rest(method: str, url: str, body: Any = None, *, ok: tuple[int, ...] = (200, 204)) -> Any:
    """One admin REST call, no redirects followed (a 307 is an answer here)."""

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *a: Any, **k: Any) -> None:
            return None

    req = urllib.request.Request(
        url,
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(req, timeout=60) as r:
            status, text = r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode(errors="replace")
    if status not in ok:
        raise AssertionError(f"{method} {url} answered {status}: {text[:500]}")
    try:
        return json.loads(text) if text.strip() else None
    except ValueError:
        return text


@pytest.fixture(scope="package")
def cluster_namespace(cluster: Cluster) -> str:
    """Infinite retention, 4 bundles: room to place topics on either broker."""
    ns = f"public/ldw-cl-{os.getpid()}"
    rest("PUT", f"{cluster.admin_url}/admin/v2/namespaces/{ns}", {"bundles": {"numBundles": 4}}, ok=(200, 204, 409))
    rest(
        "POST",
        f"{cluster.admin_url}/admin/v2/namespaces/{ns}/retention",
        {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1},
    )
    return ns


@pytest.fixture
async def cadmin(cluster: Cluster) -> AsyncIterator[PulsarAdmin]:
    async with new_session(30) as s:
        yield StagingAdmin(cluster.admin_url, s)


@pytest.fixture
async def cbookie(cluster: Cluster) -> AsyncIterator[BookieClient]:
    """Bookie 1's HTTP API (it answers for ledgers on either bookie), ambiguous 500s settled by ZooKeeper."""
    from worker.backends.stores import Stores

    async with new_session(30) as s, Stores(f"zk:{cluster.zookeeper_hosts}") as zk:
        yield BookieClient(cluster.bookie_http_url, s, zk.bookkeeper.ledger_metadata_exists)
