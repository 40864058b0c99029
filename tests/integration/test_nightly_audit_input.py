"""What the audit reads from ZooKeeper is data, never code: a ledger znode whose bytes are a pickle (the
shape the bookie-HTTP fallback once used between the audit's own stages) is judged unparseable, and
nothing in it runs on the executors, which hold the admin token and the S3 keys."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Stack
from worker.backends.zookeeper import kazoo_client
from worker.formats.metadata_paths import hierarchical_ledger_path

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

# The marker the audit's rows once told pickled metadata apart by; a znode can start with anything.
PICKLE_MARKER = b"\x00pickle:"


class _Plant:
    """Unpickled, it opens (so creates) ``path`` for writing: proof that the bytes ran."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, tuple[str, str]]:
        return (open, (self.path, "w"))


def test_a_pickle_in_a_ledger_znode_is_never_unpickled(stack: Stack, unique: str, tmp_path: Path, spark: Any) -> None:
    from worker.nightly.audit import audit_ledgers
    from worker.settings import load_settings

    planted = tmp_path / "unpickled"
    root = f"/ldw-test-{unique}/ledgers"
    lid = 42
    zk = kazoo_client(stack.zookeeper_hosts, 10)
    zk.start(30)
    try:
        zk.create(
            hierarchical_ledger_path(lid, root), PICKLE_MARKER + pickle.dumps(_Plant(str(planted))), makepath=True
        )
        settings = load_settings(
            None,
            pulsar={"service_url": stack.service_url, "admin_url": stack.admin_url},
            bookkeeper={"http_url": stack.bookie_http_url},
            zookeeper={"metadata_store_url": f"zk:{stack.zookeeper_hosts}"},
        )
        rows = [r.asDict() for r in audit_ledgers(spark, settings, min_age_s=0, ledgers_root=root).collect()]
    finally:
        zk.delete(f"/ldw-test-{unique}", recursive=True)
        zk.stop()
        zk.close()
    assert not planted.exists(), "the znode's bytes were unpickled: they ran on an executor"
    [row] = [r for r in rows if r["ledger_id"] == lid]
    assert row["verdict"] == "skipped" and "unparseable" in row["why"], row


async def test_bookie_json_rows_are_judged_as_the_znode_rows(stack: Stack, test_namespace: str, unique: str) -> None:
    """The fallback without ZooKeeper hands the judging stage the bookie's JSON (data, parsed there),
    not a Python object: the same ledger judged from its znode and from its JSON gets the same verdict."""
    from testkit.harness import create_ledgers, pulsar_ml_metadata
    from worker.backends.bookie_http import BookieClient
    from worker.backends.http import new_session
    from worker.nightly.audit import judge_ledgers
    from worker.settings import load_settings

    [lid] = create_ledgers(stack, 1, pulsar_ml_metadata(f"persistent://{test_namespace}/jghost-{unique}"))
    async with new_session(30) as s:
        md = await BookieClient(stack.bookie_http_url, s).get_metadata(lid)
    assert md is not None
    zk = kazoo_client(stack.zookeeper_hosts, 10)
    zk.start(30)
    try:
        data, stat = zk.get(hierarchical_ledger_path(lid))
    finally:
        zk.stop()
        zk.close()
    settings = load_settings(
        None,
        pulsar={"service_url": stack.service_url, "admin_url": stack.admin_url},
        zookeeper={"metadata_store_url": f"zk:{stack.zookeeper_hosts}"},
    )
    from_znode, from_json = [
        await judge_ledgers(settings, [row], min_age_s=0, namespaces=[test_namespace])
        for row in ((lid, bytes(data), int(stat.ctime), None), (lid, None, md.ctime_ms or 0, json.dumps(md.raw)))
    ]
    verdicts = [d["verdict"] for d in from_json], [d["verdict"] for d in from_znode]
    assert verdicts == (["orphan"], ["orphan"]), (from_znode, from_json)
    for junk in ("not json", '"a string"'):
        [bad] = await judge_ledgers(settings, [(lid, None, 0, junk)], min_age_s=0, namespaces=[])
        assert bad["verdict"] == "skipped" and "unparseable" in bad["why"], bad
