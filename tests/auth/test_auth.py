"""Token authentication and authorization, TLS on the admin endpoint: the worker, phase 1 (``send``), the
``topology`` command and the scanner against a real Pulsar that enforces them (PROFILE=auth).

Least privilege, as found on this stack (Pulsar 4.0.8; docs/operations.md, Least-privileged roles):
- worker: ``consume`` + ``produce`` on the deletion topics' namespace, ``consume`` on every namespace
  whose ledgers it judges (lookup and internalStats need produce or consume; consume writes nothing);
- phase 1 (``send``): ``produce`` + ``consume`` on the deletion topics' namespace (it checks that the
  worker's subscription exists before sending, and listing subscriptions takes consume);
- scanner (``scan --dry-run``): ``consume`` on the namespaces it scans;
- creating the topology (namespace, partitioned topic, subscriptions): tenant admin, once (``topology``).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from testkit.harness import WorkerHarness, create_ledgers, pulsar_ml_metadata
from testkit.stack import REPO, pulsar_home
from testkit.topics import count_from_earliest, produce
from tests.auth.conftest import AuthStack
from worker.backends.stores import Stores

SYSTEM_NS = "pulsar/system"


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "worker.cli", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def write_config(path: Path, base: dict[str, Any], **pulsar_settings: Any) -> Path:
    cfg = {**base, "pulsar": {**base["pulsar"], **pulsar_settings}}
    cfg["pulsar"] = {k: v for k, v in cfg["pulsar"].items() if v is not None}
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.fixture(scope="module")
def namespace(auth_stack: AuthStack) -> str:
    ns = f"public/ldw-auth-{os.getpid()}"
    auth_stack.rest("PUT", f"/admin/v2/namespaces/{ns}", ok=(204, 409))
    # Without retention the broker trims a topic's ledgers that no subscription still needs.
    auth_stack.rest(
        "POST", f"/admin/v2/namespaces/{ns}/retention", {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}
    )
    auth_stack.rest("PUT", f"/admin/v2/namespaces/{SYSTEM_NS}", ok=(204, 409))
    auth_stack.grant(SYSTEM_NS, "worker", ["consume", "produce"])
    auth_stack.grant(ns, "worker", ["consume"])
    auth_stack.grant(SYSTEM_NS, "phase1", ["produce", "consume"])
    auth_stack.grant(ns, "scanner", ["consume"])
    return ns


def harness(auth_stack: AuthStack, tmp_path: Path, role: str | None, **pulsar_settings: Any) -> WorkerHarness:
    settings: dict[str, Any] = {
        "admin_url": auth_stack.admin_url,
        "tls_trust_certs_file": str(auth_stack.ca),
        **pulsar_settings,
    }
    if role is not None:
        settings["auth_token_file"] = str(auth_stack.token_file(role))
    h = WorkerHarness(auth_stack, tmp_path, f"auth-{uuid.uuid4().hex[:8]}", pulsar=settings)
    h.config["pulsar"] = {k: v for k, v in h.config["pulsar"].items() if v is not None}
    h.config_path.write_text(yaml.safe_dump(h.config))
    return h


def test_least_privileged_roles_delete_orphans_and_keep_live_ledgers(
    auth_stack: AuthStack, namespace: str, tmp_path: Path
) -> None:
    live_topic = f"persistent://{namespace}/live-{uuid.uuid4().hex[:6]}"
    produce(auth_stack.service_url, live_topic, 15, token=auth_stack.token("admin"))
    stats = auth_stack.rest("GET", f"/admin/v2/persistent/{live_topic.removeprefix('persistent://')}/internalStats")
    live_ledger = int(stats["ledgers"][0]["ledgerId"])
    gone_topic = f"persistent://{namespace}/gone-{uuid.uuid4().hex[:6]}"
    orphans = create_ledgers(auth_stack, 3, pulsar_ml_metadata(gone_topic))

    w = harness(auth_stack, tmp_path, "worker")
    w.config["worker"].update({"max_attempts": 2})
    w.config_path.write_text(yaml.safe_dump(w.config))
    # The worker's role may not create the topology: refused at start, naming the fix.
    refused = cli("run", "--config", str(w.config_path), timeout=90)
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert "ledger-deletion-worker topology" in refused.stderr and "may not create it" in refused.stderr
    # A tenant admin makes it once.
    admin_cfg = write_config(tmp_path / "admin.yaml", w.config, auth_token_file=str(auth_stack.token_file("admin")))
    made = cli("topology", "--config", str(admin_cfg))
    assert made.returncode == 0, made.stderr[-2000:]
    assert "topology in place" in made.stdout

    try:
        w.start(90)
        # Phase 1 with its own role, the token from the environment.
        phase1_cfg = write_config(tmp_path / "phase1.yaml", w.config, auth_token_file=None)
        env = {"LDW_PULSAR__AUTH_TOKEN": auth_stack.token("phase1")}
        for topic, lid in [*((gone_topic, i) for i in orphans), (live_topic, live_ledger)]:
            r = cli(
                "send",
                "--config",
                str(phase1_cfg),
                "--topic",
                topic,
                "--ledger-id",
                str(lid),
                "--component",
                "MANAGED_LEDGER",
                env=env,
            )
            assert r.returncode == 0, r.stderr[-2000:]

        async def settled() -> tuple[bool, bool]:
            async with Stores(f"zk:{auth_stack.zookeeper_hosts}") as zk:
                gone = [not await zk.bookkeeper.ledger_metadata_exists(i) for i in orphans]
                live = await zk.bookkeeper.ledger_metadata_exists(live_ledger)
            return all(gone), live

        deadline = time.monotonic() + 120
        while True:
            orphans_gone, live_kept = asyncio.run(settled())
            assert live_kept, "the live ledger was deleted"
            if orphans_gone and w.metric("ledger_deletion_dlq_total") >= 1:
                break
            assert time.monotonic() < deadline, f"not settled in 120 s:\n{w.log_tail()}"
            time.sleep(1)
        outcomes = {(e.get("ledger_id"), e.get("outcome")) for e in w.log_events() if "outcome" in e}
        assert {(i, "deleted") for i in orphans} <= outcomes
        assert (live_ledger, "in_use") in outcomes
        assert not {o for lid, o in outcomes if lid == live_ledger} & {"deleted", "already_gone"}
    finally:
        w.close()
    assert count_from_earliest(auth_stack.service_url, live_topic, token=auth_stack.token("admin")) == 15


@pytest.mark.parametrize(
    ("role", "expected"),
    [
        (None, "no token is set (pulsar.auth_token, pulsar.auth_token_file or LDW_PULSAR__AUTH_TOKEN)"),
        ("forged-admin", "the broker refused the credentials (401 Unauthorized); token from pulsar.auth_token_file"),
        ("nobody", "the token's role may not look up persistent://pulsar/system/"),
    ],
)
def test_a_wrong_missing_or_powerless_token_refuses_to_start(
    auth_stack: AuthStack, namespace: str, tmp_path: Path, role: str | None, expected: str
) -> None:
    w = harness(auth_stack, tmp_path, role)
    r = cli("run", "--config", str(w.config_path), timeout=90)
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert f"pulsar.admin_url {auth_stack.admin_url}" in r.stderr
    assert expected in r.stderr, r.stderr[-2000:]
    if role == "nobody":
        assert "Grant it consume and produce on pulsar/system" in r.stderr
    for secret in ("forged-admin", "nobody", "admin"):
        assert auth_stack.token(secret) not in r.stderr + r.stdout  # never the token itself


def test_an_untrusted_admin_certificate_refuses_to_start(auth_stack: AuthStack, namespace: str, tmp_path: Path) -> None:
    w = harness(auth_stack, tmp_path, "worker", tls_trust_certs_file=None)
    r = cli("run", "--config", str(w.config_path), timeout=90)
    assert r.returncode == 2, r.stderr[-2000:]
    assert "TLS certificate not trusted" in r.stderr and "set pulsar.tls_trust_certs_file" in r.stderr


def test_an_unreadable_token_file_fails_at_start_with_the_key(auth_stack: AuthStack, tmp_path: Path) -> None:
    w = harness(auth_stack, tmp_path, None, auth_token_file=str(tmp_path / "missing.token"))
    r = cli("run", "--config", str(w.config_path), timeout=60)
    assert r.returncode == 2
    assert "pulsar" in r.stderr and "auth_token_file" in r.stderr and "missing.token" in r.stderr


def test_scanner_with_its_role(auth_stack: AuthStack, namespace: str, tmp_path: Path) -> None:
    gone_topic = f"persistent://{namespace}/scan-gone-{uuid.uuid4().hex[:6]}"
    orphans = create_ledgers(auth_stack, 2, pulsar_ml_metadata(gone_topic))
    w = harness(auth_stack, tmp_path, "scanner")
    r = cli("scan", "--config", str(w.config_path), "--dry-run", "-n", namespace, "--min-age", "0", timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    for lid in orphans:
        assert str(lid) in r.stdout, r.stdout[-3000:]
    # With no permission on the namespace nothing can be proven: no orphan, each ledger skipped saying why.
    nobody = write_config(tmp_path / "nobody.yaml", w.config, auth_token_file=str(auth_stack.token_file("nobody")))
    r = cli("scan", "--config", str(nobody), "--dry-run", "-n", namespace, "--min-age", "0", "--json", timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads(r.stdout)
    assert report["orphans"] == [] and report["counts"]["orphan"] == 0
    mine = [d for d in report["decisions"] if d["ledger_id"] in orphans]
    assert len(mine) == len(orphans)
    assert all(d["verdict"] == "skipped" and "Unauthorized" in d["why"] for d in mine), mine


def test_a_role_refused_on_the_binary_protocol_refuses_to_start(
    auth_stack: AuthStack, namespace: str, tmp_path: Path
) -> None:
    """Consume without produce on the deletion topics' namespace: the admin checks pass, the retry
    producer is refused by the broker, and the worker says so, naming the service URL."""
    pulsar_bin = pulsar_home("auth") / "bin" / "pulsar"
    made = subprocess.run(
        [
            str(pulsar_bin),
            "tokens",
            "create",
            "--secret-key",
            f"file://{auth_stack.token_dir / 'secret.key'}",
            "--subject",
            "consume-only",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    token = tmp_path / "consume-only.token"
    token.write_text(made.stdout.strip())
    auth_stack.grant(SYSTEM_NS, "consume-only", ["consume"])
    w = harness(auth_stack, tmp_path, None, auth_token_file=str(token))
    admin_cfg = write_config(tmp_path / "admin.yaml", w.config, auth_token_file=str(auth_stack.token_file("admin")))
    assert cli("topology", "--config", str(admin_cfg)).returncode == 0
    r = cli("run", "--config", str(w.config_path), timeout=90)
    assert r.returncode == 2, r.stderr[-2000:]
    assert f"pulsar.service_url {auth_stack.service_url}" in r.stderr
    assert "not authorized to produce to persistent://pulsar/system/" in r.stderr, r.stderr[-2000:]


def test_nightly_jobs_with_least_privileged_roles(auth_stack: AuthStack, namespace: str, tmp_path: Path) -> None:
    """replay-dlq with the worker's role and the audit with the scanner's, over the TLS admin endpoint:
    the Spark source reads the DLQ with the token, the replay deletes a dead letter's orphan and
    acknowledges it on the replay subscription, the audit finds orphans of a gone topic."""
    from testkit.topics import client_for
    from worker.formats.message import LedgerComponent, LedgerType, PendingDeleteLedgerInfo, encode

    gone_topic = f"persistent://{namespace}/nightly-gone-{uuid.uuid4().hex[:6]}"
    orphans = create_ledgers(auth_stack, 2, pulsar_ml_metadata(gone_topic))
    w = harness(auth_stack, tmp_path, "worker")
    admin_cfg = write_config(tmp_path / "admin.yaml", w.config, auth_token_file=str(auth_stack.token_file("admin")))
    assert cli("topology", "--config", str(admin_cfg)).returncode == 0
    client = client_for(auth_stack.service_url, auth_stack.token("admin"))
    try:
        p = client.create_producer(w.topics["dlq"], batching_enabled=False)
        for lid in orphans:
            info = PendingDeleteLedgerInfo(gone_topic, LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, lid)
            p.send(encode(info), properties={"reason": "transient", "RECONSUMETIMES": "10"})
        p.send(b"\x00garbage")
        p.close()
    finally:
        client.close()

    reports = tmp_path / "reports"
    r = cli(
        "replay-dlq", "--config", str(w.config_path), "--master", "local[2]", "--report-dir", str(reports), timeout=600
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "3 dead letters read; acknowledged 3" in r.stdout, r.stdout[-2000:]

    async def gone() -> list[bool]:
        async with Stores(f"zk:{auth_stack.zookeeper_hosts}") as zk:
            return [not await zk.bookkeeper.ledger_metadata_exists(i) for i in orphans]

    assert all(asyncio.run(gone()))
    again = cli(
        "replay-dlq", "--config", str(w.config_path), "--master", "local[2]", "--report-dir", str(reports), timeout=600
    )
    assert again.returncode == 0 and "0 dead letters read" in again.stdout, again.stdout[-2000:]

    audited = create_ledgers(
        auth_stack, 2, pulsar_ml_metadata(f"persistent://{namespace}/audit-gone-{uuid.uuid4().hex[:6]}")
    )
    scanner = write_config(tmp_path / "scanner.yaml", w.config, auth_token_file=str(auth_stack.token_file("scanner")))
    r = cli(
        "audit",
        "--config",
        str(scanner),
        "--master",
        "local[2]",
        "--report-dir",
        str(reports),
        "--no-buckets",
        "-n",
        namespace,
        "--min-age",
        "0",
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    import pyarrow.parquet as pq

    rows = pq.read_table(reports / "audit" / "ledgers").to_pylist()
    verdicts = {row["ledger_id"]: row["verdict"] for row in rows}
    assert all(verdicts.get(i) == "orphan" for i in audited), {i: verdicts.get(i) for i in audited}
