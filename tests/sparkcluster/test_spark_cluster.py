"""The nightly jobs on a real Spark standalone cluster, submitted as a cluster user submits them.

A master and two workers (one core each) on loopback, started from the installed PySpark's ``spark-class``;
the jobs submitted with ``spark-submit --master spark://127.0.0.1:PORT --py-files ledger_deletion_worker.zip
deploy/spark/ldw_submit.py ...``. Driver and executors run a Python that has the third-party packages but
not the project (a virtualenv that sees the project venv's site-packages without running its ``.pth``
files, so its editable install stays invisible), in directories where no ``worker`` package lives: the only
``worker`` they can import is the shipped zip, and an app submitted the same way checks that
``worker.__file__`` on the driver and on executors of both workers points into it. The replay (dry run)
and the audit then run on the cluster and under ``local[2]`` on the same data, and their report rows are
compared (everything but the run id, the run date and the clock-dependent columns).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from testkit.admin import StagingAdmin
from testkit.harness import create_ledgers, free_port, pulsar_ml_metadata
from testkit.topics import ml_ledger_ids, produce
from tests.conftest import REPO, Stack
from tests.integration.nightly_fixtures import publish_dead_letters
from tools.spark_package import ZIP_NAME, build_zip
from worker.backends.http import new_session
from worker.broker.topology import ensure_topology
from worker.formats.message import LedgerComponent, LedgerType, PendingDeleteLedgerInfo, encode
from worker.formats.topic_name import TopicName
from worker.settings import Settings, load_settings

# 3.5 to 5 minutes on the shared 2-core machine (three more JVMs, five spark-submits): past what `make test`
# affords, so `make spark-cluster-test` runs it (LDW_SPARK_CLUSTER=1) and `make test` says it skipped it.
pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(1500),
    pytest.mark.skipif(
        os.environ.get("LDW_SPARK_CLUSTER") != "1", reason="the Spark standalone cluster run: make spark-cluster-test"
    ),
]

import pyspark  # noqa: E402  (after the marks: the spark extra is installed with the test extra)

SPARK_HOME = Path(pyspark.__file__).resolve().parent
LAUNCHER = REPO / "deploy" / "spark" / "ldw_submit.py"
WORKERS = 2


def _env(**extra: str) -> dict[str, str]:
    """The environment of every Spark process here: loopback, small daemons, no PYTHONPATH of ours."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_GATEWAY_PORT", "VIRTUAL_ENV")}
    env.update(SPARK_HOME=str(SPARK_HOME), SPARK_LOCAL_IP="127.0.0.1", SPARK_DAEMON_MEMORY="256m", **extra)
    return env


def _json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())


@dataclass
class Cluster:
    master: str
    ui: str
    work_dirs: list[Path]


@pytest.fixture(scope="module")
def node_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A node's Python: the project's third-party packages, not the project."""
    d = tmp_path_factory.mktemp("node-env")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(d)], check=True)
    site = next((d / "lib").glob("python3*/site-packages"))
    venv_site = next((REPO / ".venv" / "lib").glob("python3*/site-packages"))
    # A path line: the directory joins sys.path, but its .pth files (the editable install's finder) do not run.
    (site / "project-deps.pth").write_text(f"{venv_site}\n")
    py = d / "bin" / "python"
    probe = subprocess.run([str(py), "-c", "import worker"], cwd=d, capture_output=True, text=True, env=_env())
    assert probe.returncode != 0 and "No module named 'worker'" in probe.stderr, probe
    subprocess.run([str(py), "-c", "import pulsar, pandas, pyarrow, aiohttp, kazoo"], check=True, cwd=d, env=_env())
    return py


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What ``make spark-package`` builds (dist/ledger_deletion_worker.zip), here in a directory of its own."""
    out = tmp_path_factory.mktemp("dist") / ZIP_NAME
    build_zip(out)
    return out


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A standalone master and two workers (1 core, 1 GiB each) on loopback; every process in a group of
    its own, killed by its id at the end."""
    base = tmp_path_factory.mktemp("spark-cluster")
    port, ui = free_port(), free_port()
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    ui_port = ["--webui-port", str(ui)]
    procs: list[subprocess.Popen[bytes]] = []

    def start(name: str, cmd: list[str]) -> None:
        with open(base / f"{name}.log", "wb") as log:
            procs.append(
                subprocess.Popen(
                    cmd, cwd=base, stdout=log, stderr=subprocess.STDOUT, env=_env(), start_new_session=True
                )
            )

    start(
        "master",
        [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port), *ui_port],
    )
    master = f"spark://127.0.0.1:{port}"
    work_dirs = [base / f"worker{i}" for i in range(1, WORKERS + 1)]
    try:
        for i, wd in enumerate(work_dirs, 1):
            wd.mkdir()
            start(
                f"worker{i}",
                [
                    *(spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", "1"),
                    *("--memory", "1g", "--webui-port", str(free_port()), "--work-dir", str(wd), master),
                ],
            )
        deadline = time.monotonic() + 180
        while True:
            try:
                alive = [w for w in _json(f"http://127.0.0.1:{ui}/json")["workers"] if w["state"] == "ALIVE"]
                if len(alive) == WORKERS:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                logs = {f.name: f.read_text()[-2000:] for f in base.glob("*.log")}
                raise AssertionError(f"the standalone cluster did not come up: {logs}")
            time.sleep(1)
        yield Cluster(master, f"http://127.0.0.1:{ui}", work_dirs)
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)


def submit(
    node_python: Path, package: Path, cwd: Path, master: str, app: Path, *args: str, timeout: float = 600
) -> tuple[str, float]:
    """``spark-submit`` as a cluster user runs it; (its output, seconds)."""
    cmd = [str(SPARK_HOME / "bin" / "spark-submit"), "--master", master, "--py-files", str(package)]
    if master.startswith("spark://"):
        cmd += [
            "--conf",
            "spark.executor.memory=512m",
            "--conf",
            "spark.executor.cores=1",
            "--conf",
            "spark.cores.max=2",
        ]
    env = _env(PYSPARK_PYTHON=str(node_python), PYSPARK_DRIVER_PYTHON=str(node_python))
    t0 = time.monotonic()
    out = subprocess.run([*cmd, str(app), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    took = time.monotonic() - t0
    assert out.returncode == 0, (
        f"{' '.join(cmd)} {app.name} {' '.join(args)}: {out.stdout[-3000:]}\n{out.stderr[-5000:]}"
    )
    return out.stdout, took


def report(path: Path, drop: tuple[str, ...], key: str) -> list[dict[str, Any]]:
    """A Parquet report's rows without the run-specific columns, in a stable order, lists sorted."""
    import pandas as pd

    df = pd.read_parquet(path)
    df = df.drop(columns=[c for c in drop if c in df.columns])
    rows = []
    for r in df.astype(object).where(df.notna(), None).to_dict("records"):  # NaN != NaN: nulls as None
        rows.append(
            {k: sorted(v) if hasattr(v, "__len__") and not isinstance(v, str | bytes) else v for k, v in r.items()}
        )
    return sorted(rows, key=lambda r: str(r[key]))


async def _make_namespaces(stack: Stack, settings: Settings, *namespaces: str) -> None:
    """The namespaces (infinite retention) and the worker's topics, as ``ledger-deletion-worker topology``
    makes them: the jobs refuse a metadata store without the pending topic."""
    async with new_session(30) as s:
        admin = StagingAdmin(stack.admin_url, s)
        for ns in namespaces:
            await admin._call("PUT", f"/admin/v2/namespaces/{ns}")
            await admin.set_retention(ns, -1, -1)
        await ensure_topology(admin, settings.topics)


async def _internal_stats(stack: Stack, topic: str) -> dict[str, Any]:
    async with new_session(30) as s:
        return await StagingAdmin(stack.admin_url, s).internal_stats(TopicName.parse(topic))


def test_replay_and_audit_on_a_standalone_cluster_match_local(
    stack: Stack, unique: str, tmp_path: Path, node_python: Path, package: Path, cluster: Cluster
) -> None:
    t0 = time.monotonic()
    # The audited namespace holds only the data: the worker's own topics (their subscriptions' cursor
    # ledgers are replaced whenever the broker reloads a topic) live in another, so both audits see the same.
    ns = f"public/ldw-sparkcluster-{unique}"
    queues = f"{ns}-queues"
    config = {
        "pulsar": {"service_url": stack.service_url, "admin_url": stack.admin_url},
        "topics": {
            "pending": f"persistent://{queues}/pending",
            "retry": f"persistent://{queues}/retry",
            "dlq": f"persistent://{queues}/dlq",
            "dlq_replay_subscription": "replay",
        },
        "bookkeeper": {"http_url": stack.bookie_http_url},
        "zookeeper": {"metadata_store_url": f"zk:{stack.zookeeper_hosts}"},
        "offload": {"s3_targets": []},
        "worker": {"min_ledger_age_s": 2, "snapshot_ttl_s": 1},
        "logging": {"level": "WARNING"},
    }
    cfg = tmp_path / "worker.yaml"
    cfg.write_text(yaml.safe_dump(config))
    settings = load_settings(cfg)
    asyncio.run(_make_namespaces(stack, settings, ns, queues))

    # The data: orphans of a topic that never existed, a ledger of a live topic, a ledger of another
    # topic claimed for the ghost (forged), a duplicate and an undecodable dead letter.
    ghost = f"persistent://{ns}/ghost"
    orphans = create_ledgers(stack, 3, pulsar_ml_metadata(ghost))
    [foreign] = create_ledgers(stack, 1, pulsar_ml_metadata(f"persistent://{ns}/other"))
    live = f"persistent://{ns}/live"
    produce(stack.service_url, live, 3)
    in_use = ml_ledger_ids(asyncio.run(_internal_stats(stack, live)))[-1]

    def info(topic: str, lid: int) -> bytes:
        return encode(PendingDeleteLedgerInfo(topic, LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, lid))

    payloads = [info(ghost, lid) for lid in orphans] + [info(ghost, orphans[0]), info(ghost, foreign)]
    payloads += [info(live, in_use), b"\x00not avro"]
    publish_dead_letters(stack, settings, payloads)
    time.sleep(3)  # every ledger older than min_ledger_age_s for both runs
    prepared = time.monotonic() - t0

    # Where `worker` comes from, on the driver and on the executors of both workers.
    out, took_where = submit(
        node_python, package, tmp_path, cluster.master, REPO / "tests" / "sparkcluster" / "where_is_worker.py"
    )
    where = json.loads(next(line for line in out.splitlines() if line.startswith("LDW-WHERE "))[len("LDW-WHERE ") :])
    assert where["driver"].startswith(str(package) + "/") or f"/{ZIP_NAME}/worker/" in where["driver"], where
    assert where["driver_python"] == str(node_python)
    for e in where["executors"]:
        assert f"/{ZIP_NAME}/worker/__init__.py" in e["worker"], e
        assert e["python"] == str(node_python) and str(REPO) not in e["cwd"], e
    used = {wd for e in where["executors"] for wd in cluster.work_dirs if e["cwd"].startswith(str(wd))}
    assert used == set(cluster.work_dirs), where  # executors of both workers ran tasks

    results: dict[str, Any] = {}
    timings: dict[str, float] = {}
    for name, master in (("local", "local[2]"), ("cluster", cluster.master)):
        reports = tmp_path / f"reports-{name}"
        _, timings[f"replay {name}"] = submit(
            node_python, package, tmp_path, master, LAUNCHER,
            "replay-dlq", "--config", str(cfg), "--dry-run", "--report-dir", str(reports),
        )  # fmt: skip
        _, timings[f"audit {name}"] = submit(
            node_python, package, tmp_path, master, LAUNCHER,
            "audit", "--config", str(cfg), "-n", ns, "--no-buckets", "--min-age", "1s",
            "--report-dir", str(reports),
        )  # fmt: skip
        results[name] = (
            report(reports / "replay", ("run_id", "run_date", "decided_at"), "claim"),
            report(reports / "audit" / "ledgers", ("run_id", "run_date", "age_s"), "ledger_id"),
        )

    replay_local, audit_local = results["local"]
    replay_cluster, audit_cluster = results["cluster"]
    outcomes = sorted(r["outcome"] for r in replay_local)
    assert outcomes == ["in_use", "invalid", "rejected", *["would_delete"] * 3], replay_local
    assert sum(r["messages"] for r in replay_local) == len(payloads)
    assert replay_cluster == replay_local
    verdicts = {r["ledger_id"]: r["verdict"] for r in audit_local}
    assert {verdicts[i] for i in [*orphans, foreign]} == {"orphan"} and verdicts[in_use] == "in_use", verdicts
    assert audit_cluster == audit_local

    # The cluster ran them: the master lists the applications as finished.
    apps = {a["name"] for a in _json(f"{cluster.ui}/json")["completedapps"]}
    assert {"ldw-where-is-worker", "ledger-deletion-replay", "ledger-deletion-audit"} <= apps, apps
    print(
        f"\nspark cluster ({WORKERS} workers x 1 core): data prepared in {prepared:.0f}s; where-is-worker "
        f"{took_where:.0f}s; "
        + "; ".join(f"{k} {v:.0f}s" for k, v in timings.items())
        + f"; {len(replay_local)} replay rows and {len(audit_local)} audit rows identical; total "
        f"{time.monotonic() - t0:.0f}s"
    )
