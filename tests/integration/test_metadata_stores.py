"""Pulsar's metadata store and BookKeeper's, configured apart (``zookeeper.hosts`` and
``zookeeper.bookkeeper_hosts``), on the real stack.

A second ensemble is played by a chroot of the stack's one ZooKeeper: ``127.0.0.1:2181/ledgers`` with
``ledgers_root: /`` is exactly BookKeeper's metadata as a bookie with its own ensemble sees it (LAYOUT,
the ledgers, the registered bookies at its root; no ``/managed-ledgers``). Pointed at as Pulsar's store,
it used to let the worker start, and then every admin "not found" counted as a gone topic (its
``managed_ledger_exists`` is always False): the worker now refuses to start, naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import Stack
from tests.integration.helpers import eventually
from tests.integration.worker_harness import WorkerHarness, create_ledgers, pulsar_ml_metadata
from worker.backends.zookeeper import WrongMetadataStore, ZooKeeper
from worker.backends.zookeeper_ledger_store import ZooKeeperLedgerStore
from worker.broker.admin import PulsarAdmin
from worker.broker.snapshot_cache import confirm_gone
from worker.formats.message import LedgerComponent, LedgerType, PendingDeleteLedgerInfo
from worker.formats.topic_name import TopicName

pytestmark = pytest.mark.integration

BOOKKEEPER_ONLY = "127.0.0.1:2181/ledgers"  # BookKeeper's metadata, and nothing of Pulsar's


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
        # The old keys only: BookKeeper's ensemble given as the one metadata store.
        ({"hosts": BOOKKEEPER_ONLY, "ledgers_root": "/"}, f"zookeeper.hosts {BOOKKEEPER_ONLY}: not Pulsar's"),
        # A chroot that does not exist as Pulsar's store, BookKeeper's right.
        (
            {"hosts": "127.0.0.1:2181/nonexistent", "bookkeeper_hosts": "127.0.0.1:2181"},
            "zookeeper.hosts 127.0.0.1:2181/nonexistent: not Pulsar's metadata store",
        ),
        # Pulsar's right, BookKeeper's a chroot without its LAYOUT.
        (
            {"hosts": "127.0.0.1:2181", "bookkeeper_hosts": "127.0.0.1:2181/nonexistent"},
            "zookeeper.bookkeeper_hosts 127.0.0.1:2181/nonexistent: not BookKeeper's metadata store",
        ),
    ],
    ids=["bookkeeper-ensemble-as-pulsar-store", "pulsar-store-chroot-missing", "bookkeeper-store-chroot-missing"],
)
def test_a_wrong_metadata_store_refuses_to_start(
    stack: Stack,
    unique: str,
    tmp_path: Path,
    harnesses: list[WorkerHarness],
    zookeeper: dict[str, str],
    expected: str,
) -> None:
    h = WorkerHarness(stack, tmp_path, f"stores-{unique}", zookeeper=zookeeper)
    harnesses.append(h)
    log = refused(h)
    assert expected in log, log[-3000:]


async def test_stores_apart_start_and_each_read_goes_to_its_store(
    stack: Stack, unique: str, tmp_path: Path, harnesses: list[WorkerHarness], admin: PulsarAdmin
) -> None:
    """Pulsar's store at the root, BookKeeper's "apart" (its chroot): the daemon starts, proves a topic
    gone through Pulsar's store and deletes the ledger's metadata in BookKeeper's."""
    gone_topic = f"persistent://public/default/stores-gone-{unique}"
    ids = create_ledgers(stack, 2, pulsar_ml_metadata(gone_topic))
    apart = {"hosts": stack.zookeeper_hosts, "bookkeeper_hosts": BOOKKEEPER_ONLY, "ledgers_root": "/"}
    h = WorkerHarness(stack, tmp_path, f"stores-{unique}", zookeeper=apart, bookkeeper={"delete_via": "zookeeper"})
    harnesses.append(h)
    h.start()
    for lid in ids:
        h.send(PendingDeleteLedgerInfo(gone_topic, LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, lid))

    async def settled() -> bool:
        return h.metric("ledger_deletion_deleted_total", result="deleted") >= len(ids)

    await eventually(settled, timeout=120, interval=1, what="both orphans deleted")
    async with ZooKeeper(stack.zookeeper_hosts) as zk:
        for lid in ids:
            assert not await zk.ledger_metadata_exists(lid)


async def test_each_read_goes_to_its_store(stack: Stack, unique: str, admin: PulsarAdmin) -> None:
    live = TopicName.parse(f"persistent://public/default/stores-live-{unique}")
    await admin.create_topic(live)
    [lid] = create_ledgers(stack, 1, pulsar_ml_metadata(str(live)))
    async with ZooKeeper(stack.zookeeper_hosts, bookkeeper_hosts=BOOKKEEPER_ONLY, ledgers_root="/") as zk:
        assert zk.bookkeeper is not zk
        assert await zk.managed_ledger_exists(live.managed_ledger_name)  # Pulsar's store
        assert await zk.read_managed_ledger(live) is not None
        assert await zk.ledger_metadata_exists(lid)  # BookKeeper's store, at its root
        got = await ZooKeeperLedgerStore(zk).read(lid)
        assert got is not None and got[0].custom_metadata["pulsar/managed-ledger"] == live.managed_ledger_name
        assert await zk.registered_bookies() == {"bk0test"}  # the standalone's embedded bookie
        await zk.check_pulsar_store(live)
        await zk.check_bookkeeper_store()
        assert await zk.delete_ledger_metadata(lid) is True
        assert not await zk.ledger_metadata_exists(lid)

    # BookKeeper's ensemble taken for Pulsar's: the live topic's managed ledger is not there, so the
    # metadata store's half of the "gone" proof passes for it. That is why such a store refuses to start.
    async with ZooKeeper(BOOKKEEPER_ONLY, ledgers_root="/") as wrong:
        await confirm_gone(live, wrong)  # no GoneUnconfirmed: a live topic would count as gone
        with pytest.raises(WrongMetadataStore, match=r"zookeeper\.hosts 127\.0\.0\.1:2181/ledgers: not Pulsar's"):
            await wrong.check_pulsar_store(live)
        await wrong.check_bookkeeper_store()  # BookKeeper's it is


async def test_an_operator_command_refuses_a_wrong_pulsar_store(
    stack: Stack, unique: str, tmp_path: Path, harnesses: list[WorkerHarness]
) -> None:
    from tests.integration.test_phase1 import cli

    h = WorkerHarness(
        stack, tmp_path, f"stores-scan-{unique}", zookeeper={"hosts": BOOKKEEPER_ONLY, "ledgers_root": "/"}
    )
    harnesses.append(h)
    r = cli(h.config_path, "scan", "--dry-run", "--json", "--namespace", f"public/none-{unique}")
    assert r.returncode == 2, (r.returncode, r.stderr[-3000:])
    assert f"zookeeper.hosts {BOOKKEEPER_ONLY}: not Pulsar's metadata store" in r.stderr
    r = cli(h.config_path, "purge-topic", f"persistent://public/default/none-{unique}")
    assert r.returncode != 0 and f"zookeeper.hosts {BOOKKEEPER_ONLY}: not Pulsar's metadata store" in r.stderr


def test_scan_reads_ledgers_from_bookkeepers_store_apart(
    stack: Stack, unique: str, tmp_path: Path, harnesses: list[WorkerHarness]
) -> None:
    """``scan`` walks the ledgers in BookKeeper's store (apart: its chroot, root "/") and judges them
    against Pulsar's: a ledger of a topic that never existed is found an orphan."""
    import json

    from tests.integration.test_phase1 import cli

    ns = f"public/stores-scan-{unique}"
    [lid] = create_ledgers(stack, 1, pulsar_ml_metadata(f"persistent://{ns}/never"))
    apart = {"hosts": stack.zookeeper_hosts, "bookkeeper_hosts": BOOKKEEPER_ONLY, "ledgers_root": "/"}
    h = WorkerHarness(stack, tmp_path, f"stores-scan-{unique}", zookeeper=apart)
    harnesses.append(h)
    r = cli(h.config_path, "scan", "--dry-run", "--json", "--namespace", ns, "--min-age", "0s")
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads(r.stdout.strip().splitlines()[-1])
    assert [d["ledger_id"] for d in report["orphans"]] == [lid]
