"""The local stack's addresses (``deploy/local/stack.sh env``)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testkit.admin import StagingAdmin
from worker.backends.bookie_http import BookieClient
from worker.backends.http import new_session
from worker.backends.zookeeper import ZooKeeper

REPO = Path(__file__).resolve().parents[1]
STACK = REPO / "deploy" / "local" / "stack.sh"


@dataclass(frozen=True)
class Stack:
    admin_url: str
    service_url: str
    bookie_http_url: str
    zookeeper_hosts: str
    s3_endpoint: str
    s3_bucket: str
    # The key the stack's brokers sign what their extension queues with (worker.broker_mark_key_file).
    mark_key_file: str | None = None


def parse_env(out: str) -> dict[str, str]:
    """The ``KEY=value`` lines ``stack.sh env`` prints."""
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def stack_env(profile: str | None = None) -> dict[str, str]:
    """``stack.sh env``: the addresses of the profile named (default: ``$PROFILE``, else standalone)."""
    env = {**os.environ, "PROFILE": profile} if profile else None
    out = subprocess.run(
        ["bash", str(STACK), "env"], check=True, capture_output=True, text=True, timeout=60, env=env
    ).stdout
    return parse_env(out)


def stack_from_env(profile: str | None = None) -> Stack:
    return stack_of(stack_env(profile))


def broker_version(stack: Stack) -> str:
    """The Pulsar version the stack's broker runs (``/admin/v2/brokers/version``: plain text, though labelled
    application/json)."""
    with urllib.request.urlopen(f"{stack.admin_url}/admin/v2/brokers/version", timeout=30) as r:
        return str(r.read().decode().strip().strip('"'))


def stack_of(env: dict[str, str]) -> Stack:
    """A stack's handle from what ``stack.sh env`` printed for it."""
    return Stack(
        admin_url=env["PULSAR_ADMIN_URL"],
        service_url=env["PULSAR_SERVICE_URL"],
        bookie_http_url=env["BOOKIE_HTTP_URL"],
        zookeeper_hosts=env["ZOOKEEPER_HOSTS"],
        s3_endpoint=env["S3_ENDPOINT"],
        s3_bucket=env["S3_BUCKET"],
        mark_key_file=env.get("BROKER_MARK_KEY_FILE") or None,
    )


def pulsar_home(profile: str | None = None) -> Path:
    """The Pulsar the stack runs (``PULSAR_HOME`` of ``stack.sh env``: ``PULSAR_VERSION``'s distribution or
    assembly, per profile): its ``lib/`` and ``bin/pulsar``."""
    home = Path(stack_env(profile)["PULSAR_HOME"])
    if not (home / "lib").is_dir():
        raise AssertionError(f"{home} holds no Pulsar yet (make stack-up)")
    return home


def pulsar_java(home: Path) -> str:
    """The Java that runs ``home``'s jars: an assembled Pulsar's launcher finds its own (5.x needs Java 21+),
    a distribution runs on the ``java`` on PATH as its ``bin/pulsar`` does."""
    if not (home / "java-min").exists():
        return "java"
    out = subprocess.run([str(home / "bin" / "pulsar"), "java"], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise AssertionError(out.stderr.strip())
    return out.stdout.strip()


def run_profile(profile: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """``PROFILE=<profile> stack.sh <args>`` (up, down, status, kill9 C, ...), output captured."""
    env = {**os.environ, "PROFILE": profile}
    return subprocess.run(["bash", str(STACK), *args], env=env, capture_output=True, text=True, timeout=timeout)


def mark_directory(items: list[Any], directory: str, *marks: Any) -> None:
    """Add ``marks`` to every collected test under ``directory`` (a conftest's collection hook)."""
    for item in items:
        if str(item.fspath).startswith(directory):
            for m in marks:
                item.add_marker(m)


def scan_dry_run(config: Path, namespace: str, *, timeout: float = 600) -> dict[str, Any]:
    """``ledger-deletion-worker scan --dry-run --json --min-age 0s`` over one namespace: its report."""
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "worker.cli",
            "scan",
            "--dry-run",
            "--json",
            "--min-age",
            "0s",
            "--namespace",
            namespace,
            "--config",
            str(config),
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )
    if r.returncode != 0:
        raise RuntimeError(f"scan failed (exit {r.returncode}):\n{r.stderr[-3000:]}")
    report: dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1])
    return report


@contextlib.asynccontextmanager
async def admin_for(stack: Stack) -> AsyncIterator[StagingAdmin]:
    """The admin API of ``stack``, for staging and checking (no credentials: the test stacks' own)."""
    async with new_session(30) as s:
        yield StagingAdmin(stack.admin_url, s)


@contextlib.asynccontextmanager
async def bookie_for(stack: Stack) -> AsyncIterator[BookieClient]:
    """The bookie HTTP API of ``stack``, its ambiguous 500s settled by the metadata store, as the worker does."""
    async with new_session(30) as s, ZooKeeper(stack.zookeeper_hosts) as zk:
        yield BookieClient(stack.bookie_http_url, s, zk.bookkeeper.ledger_metadata_exists)


def s3_client(stack: Stack) -> Any:
    """A boto3 client of ``stack``'s S3-API server (moto's test credentials)."""
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=stack.s3_endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
