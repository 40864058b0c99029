"""Pulsar's metadata store and BookKeeper's, each by its one URL (``zookeeper.metadata_store_url``, the
brokers' metadataStoreUrl, and ``zookeeper.metadata_service_uri``, the bookies' metadataServiceUri), through
the one store seam (``worker.backends.stores``: the provider chosen by the URL's scheme), on the real stack.

A second ensemble is played by the stack's one ZooKeeper under another name (``localhost`` for
``127.0.0.1``: a client of its own) or by a chroot: ``<its hosts>/ledgers`` is exactly BookKeeper's metadata
as a bookie with its own ensemble sees it (LAYOUT, the ledgers, the registered bookies at its root; no
``/managed-ledgers``). Pointed at as Pulsar's store, it used to let the worker start, and then every admin
"not found" counted as a gone topic (its ``managed_ledger_exists`` is always False): the worker now refuses to
start, naming the key."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from testkit.harness import WorkerHarness, create_ledgers, pulsar_ml_metadata
from testkit.topics import eventually
from tests.conftest import Stack
from tests.integration.conftest import WorkerFactory
from tests.integration.helpers import cli
from worker.backends.stores import Stores
from worker.broker.admin import PulsarAdmin
from worker.broker.preflight import anchored_bookkeeper_store
from worker.core.gone_proof import confirm_gone
from worker.core.metadata_stores import WrongMetadataStore
from worker.formats.message import LedgerComponent, LedgerType, PendingDeleteLedgerInfo
from worker.formats.topic_name import TopicName

pytestmark = pytest.mark.integration


@pytest.fixture
def bookkeeper_only(stack: Stack) -> str:
    """BookKeeper's metadata, and nothing of Pulsar's: the ``/ledgers`` chroot of the stack's ZooKeeper."""
    return f"{stack.zookeeper_hosts}/ledgers"


def apart(zk: str) -> str:
    """The stack's ZooKeeper by another name: a store with a client of its own."""
    return zk.replace("127.0.0.1", "localhost")


def fill(config: dict[str, str | None], zk: str) -> dict[str, str | None]:
    return {k: v.format(zk=zk, apart=apart(zk)) if v else v for k, v in config.items()}


def refused(h: WorkerHarness) -> str:
    """Start the daemon; it must exit (code 2) before it is ready. Returns its log."""
    try:
        h.start(timeout=120)
    except AssertionError:
        assert h.proc is not None and h.proc.returncode == 2, h.log_tail()
        return h.log_text()
    pytest.fail(f"the worker started with {h.config['zookeeper']}")


@pytest.mark.parametrize(
    ("zookeeper", "expected"),
    [
        # ({zk}: the stack's ZooKeeper) BookKeeper's chroot given as Pulsar's store.
        (
            {"metadata_store_url": "zk:{zk}/ledgers", "metadata_service_uri": "zk+hierarchical://{zk}/ledgers"},
            "zookeeper.metadata_store_url {zk}/ledgers: not Pulsar's metadata store",
        ),
        # A chroot that does not exist as Pulsar's store, BookKeeper's right.
        (
            {"metadata_store_url": "zk:{zk}/nonexistent", "metadata_service_uri": "zk://{apart}/ledgers"},
            "zookeeper.metadata_store_url {zk}/nonexistent: not Pulsar's metadata store",
        ),
        # Pulsar's right, BookKeeper's a root without its LAYOUT.
        (
            {"metadata_store_url": "zk:{zk}", "metadata_service_uri": "zk+hierarchical://{apart}/nonexistent"},
            "zookeeper.metadata_service_uri {apart} at ledgers root /nonexistent: not BookKeeper's metadata store",
        ),
        # The keys of before the URLs: refused, naming the URL key that replaced each.
        (
            {"metadata_store_url": None, "hosts": "{zk}"},
            "zookeeper.hosts is no longer read: set zookeeper.metadata_store_url",
        ),
        ({"ledgers_root": "/ledgers"}, "zookeeper.ledgers_root is no longer read: set zookeeper.metadata_service_uri"),
        # A store with no provider here, refused by name.
        (
            {"metadata_store_url": "oxia://127.0.0.1:6648/default"},
            "is Oxia (oxia:): this worker has a ZooKeeper provider only",
        ),
    ],
    ids=[
        "bookkeeper-ensemble-as-pulsar-store",
        "pulsar-store-chroot-missing",
        "bookkeeper-store-root-missing",
        "old-key-hosts",
        "old-key-ledgers-root",
        "oxia",
    ],
)
def test_a_wrong_metadata_store_refuses_to_start(
    stack: Stack, unique: str, zookeeper: dict[str, str | None], expected: str, make_worker: WorkerFactory
) -> None:
    zk = stack.zookeeper_hosts
    h = make_worker(f"stores-{unique}", zookeeper=fill(zookeeper, zk), start=False)
    log = refused(h)
    assert expected.format(zk=zk, apart=apart(zk)) in log, log[-3000:]


@pytest.mark.parametrize(
    "zookeeper",
    [
        # BookKeeper's store on a client of its own.
        {"metadata_store_url": "zk:{zk}", "metadata_service_uri": "zk+hierarchical://{apart}/ledgers"},
        # The brokers' metadataStoreUrl and the bookies' metadataServiceUri, as broker.conf and bookkeeper.conf
        # write them; and Pulsar's own spelling of BookKeeper's (metadata-store:).
        {"metadata_store_url": "zk:{zk}", "metadata_service_uri": "zk+hierarchical://{zk}/ledgers"},
        {"metadata_store_url": "{zk}", "metadata_service_uri": "metadata-store:zk:{zk}/ledgers"},
    ],
    ids=["stores-apart", "the-urls-an-operator-has", "metadata-store-scheme"],
)
async def test_the_daemon_proves_each_store_and_deletes_through_its_own(
    stack: Stack, unique: str, make_worker: WorkerFactory, zookeeper: dict[str, str | None]
) -> None:
    """The daemon starts (both stores proven), proves a topic gone through Pulsar's store and deletes the
    ledger's metadata in BookKeeper's."""
    gone_topic = f"persistent://public/default/stores-gone-{unique}"
    ids = create_ledgers(stack, 2, pulsar_ml_metadata(gone_topic))
    config = fill(zookeeper, stack.zookeeper_hosts)
    h = make_worker(f"stores-{unique}", zookeeper=config, bookkeeper={"delete_via": "zookeeper"})
    for lid in ids:
        h.send(PendingDeleteLedgerInfo(gone_topic, LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, lid))

    async def settled() -> bool:
        return h.metric("ledger_deletion_deleted_total", result="deleted") >= len(ids)

    await eventually(settled, timeout=120, interval=1, what="both orphans deleted")
    async with Stores(f"zk:{stack.zookeeper_hosts}") as zk:
        for lid in ids:
            assert not await zk.bookkeeper.ledger_metadata_exists(lid)


async def test_each_read_goes_to_its_store(stack: Stack, unique: str, admin: PulsarAdmin, bookkeeper_only: str) -> None:
    live = TopicName.parse(f"persistent://public/default/stores-live-{unique}")
    await admin.create_topic(live)
    [lid] = create_ledgers(stack, 1, pulsar_ml_metadata(str(live)))
    async with Stores(f"zk:{stack.zookeeper_hosts}", f"zk://{apart(stack.zookeeper_hosts)}/ledgers") as zk:
        assert zk.bookkeeper.kv is not zk.kv
        assert await zk.pulsar.managed_ledger_exists(live.managed_ledger_name)  # Pulsar's store
        assert await zk.pulsar.read_managed_ledger(live) is not None
        assert await zk.bookkeeper.ledger_metadata_exists(lid)  # BookKeeper's store, at its root
        got = await zk.bookkeeper.read(lid)
        assert got is not None and got[0].custom_metadata["pulsar/managed-ledger"] == live.managed_ledger_name
        assert await zk.bookkeeper.registered_bookies() == {"bk0test"}  # the standalone's embedded bookie
        await zk.pulsar.check(live)
        await zk.bookkeeper.check_layout()
        assert await zk.bookkeeper.delete_ledger_metadata(lid) is True
        assert not await zk.bookkeeper.ledger_metadata_exists(lid)

    # BookKeeper's ensemble taken for Pulsar's: the live topic's managed ledger is not there, so the
    # metadata store's half of the "gone" proof passes for it. That is why such a store refuses to start.
    async with Stores(f"zk:{bookkeeper_only}", f"zk://{stack.zookeeper_hosts}/ledgers") as wrong:
        await confirm_gone(live, wrong.pulsar)  # no GoneUnconfirmed: a live topic would count as gone
        with pytest.raises(
            WrongMetadataStore, match=rf"zookeeper\.metadata_store_url {re.escape(bookkeeper_only)}: not Pulsar's"
        ):
            await wrong.pulsar.check(live)
        await wrong.bookkeeper.check_layout()  # BookKeeper's it is


async def test_an_operator_command_refuses_a_wrong_pulsar_store(
    stack: Stack, unique: str, bookkeeper_only: str, make_worker: WorkerFactory
) -> None:
    wrong = {
        "metadata_store_url": f"zk:{bookkeeper_only}",
        "metadata_service_uri": f"zk://{stack.zookeeper_hosts}/ledgers",
    }
    h = make_worker(f"stores-scan-{unique}", zookeeper=wrong, start=False)
    r = cli(h.config_path, "scan", "--dry-run", "--json", "--namespace", f"public/none-{unique}")
    assert r.returncode == 2, (r.returncode, r.stderr[-3000:])
    assert f"zookeeper.metadata_store_url {bookkeeper_only}: not Pulsar's metadata store" in r.stderr
    r = cli(h.config_path, "purge-topic", f"persistent://public/default/none-{unique}")
    assert r.returncode != 0 and f"zookeeper.metadata_store_url {bookkeeper_only}: not Pulsar's" in r.stderr


def test_scan_reads_ledgers_from_bookkeepers_store_apart(stack: Stack, unique: str, make_worker: WorkerFactory) -> None:
    """``scan`` walks the ledgers in BookKeeper's store (apart: a client of its own) and judges them
    against Pulsar's: a ledger of a topic that never existed is found an orphan."""
    import json

    ns = f"public/stores-scan-{unique}"
    [lid] = create_ledgers(stack, 1, pulsar_ml_metadata(f"persistent://{ns}/never"))
    config = fill(
        {"metadata_store_url": "zk:{zk}", "metadata_service_uri": "zk://{apart}/ledgers"}, stack.zookeeper_hosts
    )
    h = make_worker(f"stores-scan-{unique}", zookeeper=config, start=False)
    r = cli(h.config_path, "scan", "--dry-run", "--json", "--namespace", ns, "--min-age", "0s")
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads(r.stdout.strip().splitlines()[-1])
    assert [d["ledger_id"] for d in report["orphans"]] == [lid]


# ---- BookKeeper's store anchored to Pulsar's ---------------------------------------------------------
#
# A LAYOUT znode is all a decoy root needs to look like BookKeeper's store: one left by
# initialize-cluster-metadata, another cluster's chroot on a shared ensemble, a root a migration left. Each
# decoy below has one; a worker pointed at it used to start and then settle every BookKeeper deletion as
# already gone (nothing is there), or, on another cluster's root, delete that cluster's ledger of the same id.


def _decoy_root(stack: Stack, root: str, *, bookies: bool, anchor: tuple[int, bytes] | None) -> None:
    """Make ``root`` a ledgers root of the stack's ZooKeeper: the real LAYOUT, the real bookies' registrations
    (``bookies``), and at most one ledger: ``anchor`` = (id, the metadata bytes to store under that id)."""
    from kazoo.client import KazooClient

    from worker.formats.metadata_paths import parse_layout

    zk = KazooClient(hosts=stack.zookeeper_hosts)
    zk.start(30)
    try:
        layout, _ = zk.get("/ledgers/LAYOUT")
        zk.create(f"{root}/LAYOUT", layout, makepath=True)
        zk.ensure_path(f"{root}/available/readonly")
        if bookies:
            for b in zk.get_children("/ledgers/available"):
                if b != "readonly":
                    zk.create(f"{root}/available/{b}", zk.get(f"/ledgers/available/{b}")[0])
        if anchor is not None:
            lid, data = anchor
            zk.create(parse_layout(layout)(lid, root), data, makepath=True)
    finally:
        zk.stop()
        zk.close()


async def _anchor_and_foreign(stack: Stack, pending: str, foreign_topic: str) -> tuple[int, bytes]:
    """The current ledger the pending topic's partition 0 lists, and the metadata bytes of a ledger of
    ``foreign_topic`` (another cluster's ledger that happens to carry that id)."""
    [foreign] = create_ledgers(stack, 1, pulsar_ml_metadata(foreign_topic))
    async with Stores(f"zk:{stack.zookeeper_hosts}") as zk:
        info = await zk.pulsar.read_managed_ledger(TopicName.parse(pending).partition(0))
        assert info is not None and info.ledger_ids, "the pending topic's partition 0 lists no ledger"
        got = await zk.bookkeeper.read_ledger_metadata(foreign)
        assert got is not None
        return max(info.ledger_ids), got[0]


@pytest.mark.parametrize(
    ("decoy", "via_chroot", "expected"),
    [
        ("layout-only", False, "no bookie is registered there"),
        ("layout-and-bookies", True, "it has no ledger"),
        ("another-clusters-ledger", False, "not the current ledger of"),
    ],
)
async def test_a_decoy_ledgers_root_refuses_to_start(
    stack: Stack, unique: str, decoy: str, via_chroot: bool, expected: str, make_worker: WorkerFactory
) -> None:
    """Every decoy has a LAYOUT; none holds the pending topic's current ledger naming that topic: the worker
    refuses to start, naming the key that points at it, on both delete routes."""
    name = f"decoy-{unique}"
    pending = f"persistent://pulsar/system/__ledger_deletion-{name}"
    # The worker's topology first (a worker on the real store makes it), so the anchor ledger exists.
    good = make_worker(name, start=False)
    good.start(timeout=120)
    good.stop()
    anchor = None
    if decoy == "another-clusters-ledger":
        anchor = await _anchor_and_foreign(stack, pending, f"persistent://public/default/elsewhere-{unique}")
    chroot = f"/ldw-decoy-{unique}"
    _decoy_root(stack, f"{chroot}/ledgers", bookies=decoy != "layout-only", anchor=anchor)
    hosts = stack.zookeeper_hosts
    if via_chroot:  # BookKeeper's spelling, a client of its own
        zk = {"metadata_service_uri": f"zk+hierarchical://{apart(hosts)}{chroot}/ledgers"}
        key = f"zookeeper.metadata_service_uri {apart(hosts)} at ledgers root {chroot}/ledgers"
    else:  # Pulsar's spelling of BookKeeper's store, on Pulsar's store's client
        zk = {"metadata_service_uri": f"metadata-store:zk:{hosts}{chroot}/ledgers"}
        key = f"zookeeper.metadata_service_uri {hosts} at ledgers root {chroot}/ledgers"
    for route in ("zookeeper", "bookie-http"):
        h = make_worker(name, zookeeper=zk, bookkeeper={"delete_via": route}, start=False)
        log = refused(h)
        assert key in log and expected in log, log[-3000:]


async def test_operator_commands_refuse_a_decoy_ledgers_root(
    stack: Stack, unique: str, make_worker: WorkerFactory
) -> None:
    """scan and purge-topic prove BookKeeper's store too (by any topic's ledger when the worker's topics do
    not exist yet): a decoy root is refused before a ledger of it is listed."""
    chroot = f"/ldw-decoy-ops-{unique}"
    _decoy_root(stack, f"{chroot}/ledgers", bookies=True, anchor=None)
    uri = f"zk+hierarchical://{stack.zookeeper_hosts}{chroot}/ledgers"
    h = make_worker(f"decoy-ops-{unique}", zookeeper={"metadata_service_uri": uri}, start=False)
    key = f"zookeeper.metadata_service_uri {stack.zookeeper_hosts} at ledgers root {chroot}/ledgers"
    r = cli(h.config_path, "scan", "--dry-run", "--json", "--namespace", f"public/none-{unique}")
    assert r.returncode == 2 and key in r.stderr and "it has no ledger" in r.stderr, (r.returncode, r.stderr[-3000:])
    r = cli(h.config_path, "purge-topic", f"persistent://public/default/none-{unique}")
    assert r.returncode != 0 and key in r.stderr, r.stderr[-3000:]


async def test_the_real_store_is_proven_by_a_loaded_topics_current_ledger(
    stack: Stack, unique: str, admin: PulsarAdmin
) -> None:
    """The proof itself, on the real store: the anchor is the newest ledger the topic lists, and an anchor
    topic that lists none (no managed ledger) falls through to the next one."""
    import pulsar

    topic = TopicName.parse(f"persistent://public/default/anchor-{unique}")
    client = pulsar.Client(stack.service_url)
    try:
        client.create_producer(str(topic)).send(b"x")  # loaded: its current ledger is listed
        async with Stores(f"zk:{stack.zookeeper_hosts}") as zk:
            info = await zk.pulsar.read_managed_ledger(topic)
            assert info is not None and info.ledger_ids
            missing = TopicName.parse(f"persistent://public/default/anchor-none-{unique}")
            anchor = await anchored_bookkeeper_store(zk.pulsar, zk.bookkeeper, [missing, topic])
            assert anchor.topic == topic and anchor.ledger_id == max(info.ledger_ids)
    finally:
        client.close()


async def test_the_nightly_replays_decider_refuses_a_decoy_ledgers_root(
    stack: Stack, unique: str, tmp_path: Path, make_worker: WorkerFactory
) -> None:
    """The replay decides the DLQ with ``open_decider(prove_pulsar_store=<the DLQ>)``: on a decoy root every
    dead letter would be settled as already gone. It is refused before a row is decided."""
    from worker.daemon.decider import open_decider
    from worker.errors import StartupRefused
    from worker.settings import load_settings

    name = f"decoy-replay-{unique}"
    good = make_worker(name, start=False)
    good.start(timeout=120)
    good.stop()
    real = load_settings(good.config_path)
    chroot = f"/ldw-decoy-replay-{unique}"
    _decoy_root(stack, f"{chroot}/ledgers", bookies=True, anchor=None)
    uri = f"zk://{stack.zookeeper_hosts}{chroot}/ledgers"
    h = WorkerHarness(stack, tmp_path, name, zookeeper={"metadata_service_uri": uri})
    settings = load_settings(h.config_path)
    with pytest.raises(StartupRefused, match=rf"at ledgers root {chroot}/ledgers: .*it has no ledger"):
        async with open_decider(settings, prove_pulsar_store=TopicName.parse(settings.topics.dlq)):
            pass
    async with open_decider(real, prove_pulsar_store=TopicName.parse(real.topics.dlq)):
        pass  # the real store: proven
