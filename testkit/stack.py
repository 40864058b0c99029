"""The local stack's instances (``deploy/local/stack.sh``): one factory, :class:`Profile` and :func:`running`,
for every profile, and their addresses (``stack.sh env --json``)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import ssl
import subprocess
import sys
import urllib.request
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testkit.admin import StagingAdmin
from worker.backends.bookie_http import BookieClient
from worker.backends.http import new_session
from worker.backends.stores import Stores

REPO = Path(__file__).resolve().parents[1]
STACK = REPO / "deploy" / "local" / "stack.sh"
PROFILES = REPO / "deploy" / "local" / "profiles"
# The supported Pulsar lines, one row each (what stack.sh, build.sh and the Makefile read too).
PULSAR_LINES = REPO / "deploy" / "local" / "pulsar-lines.txt"


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


def key_values(path: Path) -> dict[str, str]:
    """A ``KEY=VALUE`` file as the stack reads one (a profile, an override file, a rendered .conf): comments and
    lines without ``=`` skipped."""
    lines = path.read_text().splitlines()
    return dict(ln.split("=", 1) for ln in lines if "=" in ln and not ln.lstrip().startswith("#"))


@dataclass(frozen=True)
class PulsarLine:
    """One row of ``deploy/local/pulsar-lines.txt``: a supported Pulsar line (its columns are described there)."""

    line: str
    version: str
    java: int
    java_home: str | None
    dist: str | None
    bookkeeper: str
    offloader: str | None
    placement: str | None
    use: str


def pulsar_lines() -> list[PulsarLine]:
    """The rows of ``deploy/local/pulsar-lines.txt``, in its order (``-`` read as None)."""
    rows = []
    for text in PULSAR_LINES.read_text().splitlines():
        cols = text.split()
        if len(cols) < 9 or cols[0].startswith("#"):
            continue
        line, version, java, java_home, dist, bookkeeper, offloader, placement, use = (
            None if c == "-" else c for c in cols[:9]
        )
        assert line and version and java and bookkeeper and use, f"{PULSAR_LINES}: incomplete row {text!r}"
        rows.append(PulsarLine(line, version, int(java), java_home, dist, bookkeeper, offloader, placement, use))
    return rows


def pulsar_line(line: str) -> PulsarLine:
    """The row of ``line`` (``"5.0"``), or of the ``default`` use (``"default"``)."""
    return next(r for r in pulsar_lines() if line in (r.line, r.use))


def line_of(version: str) -> PulsarLine | None:
    """The row a ``PULSAR_VERSION`` runs as (deploy/local/lines.sh's rule): its version's, else its major.minor's."""
    rows = pulsar_lines()
    major_minor = ".".join(version.split(".")[:2])
    return next((r for r in rows if r.version == version), next((r for r in rows if r.line == major_minor), None))


def _profile_keys(name: str) -> set[str]:
    """The variables a profile's data files set (deploy/local/profiles/, and every line's placement of it):
    what places an instance."""
    placements = {r.placement for r in pulsar_lines() if r.placement}
    files = (PROFILES / f"{name}.env", *(PROFILES / p / f"{name}.env" for p in sorted(placements)))
    return {k for f in files if f.exists() for k in key_values(f)}


@dataclass(frozen=True)
class Profile:
    """One instance of the local stack, as tests, benchmarks and tools run it: a ``stack.sh`` profile
    (``deploy/local/profiles/<profile>.env``), the variables that place this instance (``placement``: ports,
    data directory, broker.conf lines), and the switches that skip it or keep it up.

    With a ``prefix`` (``LDW_EXT_``), the instance is its own: the process environment's variables that place
    instances (ports, ``STACK_DIR``, ...) do not reach it, ``<prefix><VAR>`` does as ``VAR``; without one, the
    environment reaches it as it reaches ``stack.sh`` (the shared stack: ``make stack-up``'s variables)."""

    profile: str = "standalone"
    placement: Mapping[str, str] = field(default_factory=dict)
    prefix: str | None = None
    # "0" in this variable skips the tests on it; "1" in ``keep`` leaves it up after them.
    off: str | None = None
    keep: str | None = None
    up_timeout: float = 900

    def environ(self, **overrides: str) -> dict[str, str]:
        """The environment ``stack.sh`` runs in for this instance, ``overrides`` last."""
        env = {**os.environ, "PROFILE": self.profile}
        if self.prefix is not None:
            for k in _profile_keys(self.profile) | set(self.placement):
                env.pop(k, None)
            env.update(self.placement)
            env.update({k.removeprefix(self.prefix): v for k, v in os.environ.items() if k.startswith(self.prefix)})
        else:
            env.update({k: v for k, v in self.placement.items() if k not in os.environ})
        return {**env, **overrides}

    def run(self, *args: str, timeout: float = 600, **overrides: str) -> subprocess.CompletedProcess[str]:
        """``stack.sh <args>`` (up, down, status, env, kill9 C, ...) on this instance, output captured."""
        return subprocess.run(
            ["bash", str(STACK), *args], env=self.environ(**overrides), capture_output=True, text=True, timeout=timeout
        )

    def addresses(self) -> dict[str, str]:
        """``stack.sh env --json``: what a client of this instance needs (its URLs, data directory, key...)."""
        r = self.run("env", "--json", timeout=60)
        if r.returncode != 0:
            raise RuntimeError(f"PROFILE={self.profile} stack.sh env failed:\n{r.stderr[-2000:]}")
        env: dict[str, str] = json.loads(r.stdout)
        return env

    def up(self, **overrides: str) -> None:
        r = self.run("up", timeout=self.up_timeout, **overrides)
        if r.returncode != 0:
            raise AssertionError(f"PROFILE={self.profile} stack.sh up failed:\n{r.stderr[-5000:]}")

    def down(self) -> None:
        self.run("down", timeout=300)

    def down_dropping_data(self, *, timeout: float = 600, **overrides: str) -> None:
        """``stack.sh down``, then everything the instance stored but its logs (``drop_data``); a failed down keeps
        the data. For a bench's instances of their own, never the shared stack."""
        r = self.run("down", timeout=timeout, **overrides)
        stack_dir = self.environ(**overrides)["STACK_DIR"]
        if r.returncode != 0:
            print(f"[bench] stack.sh down failed ({stack_dir}), its data kept: {r.stderr[-500:]}", flush=True)
            return
        print(
            f"[bench] {drop_data(stack_dir) / 2**30:.1f} GiB of data dropped, logs kept in {stack_dir}/logs", flush=True
        )


def healthy(addresses: Mapping[str, str]) -> bool:
    """Every broker, bookie and S3 server an instance's ``addresses`` name answers its health check: the
    brokers' ``/admin/v2/brokers/health`` (as the superuser, over the instance's own TLS, on an authenticated
    instance), the bookies' ``/heartbeat``, moto's ``/moto-api/``."""
    headers: dict[str, str] = {}
    context = None
    if addresses.get("AUTH") == "1":
        token = Path(addresses["PULSAR_TOKEN_DIR"]) / "admin.token"
        if not token.exists():
            return False
        headers["Authorization"] = f"Bearer {token.read_text().strip()}"
        context = ssl.create_default_context(cafile=addresses["PULSAR_TLS_CA"])
    checks = [
        (addresses[k], "/admin/v2/brokers/health", headers, context)
        for k in ("PULSAR_ADMIN_URL", "PULSAR_ADMIN_URL_2")
        if k in addresses
    ]
    checks += [
        (addresses[k], "/heartbeat", {}, None) for k in ("BOOKIE_HTTP_URL", "BOOKIE_HTTP_URL_2") if k in addresses
    ]
    checks.append((addresses["S3_ENDPOINT"], "/moto-api/", {}, None))
    return all(_answers(base + path, h, ctx) for base, path, h, ctx in checks)


def _answers(url: str, headers: dict[str, str], context: ssl.SSLContext | None) -> bool:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=3, context=context) as r:
            return bool(r.status == 200)
    except OSError:
        return False


@contextlib.contextmanager
def running(profile: Profile, *, stop: bool = True) -> Iterator[dict[str, str]]:
    """The instance up for the duration: started if it is not healthy, its addresses yielded, and stopped
    afterwards if this started it (and ``stop``, and not ``keep``). A profile that was already up is left
    as it is found, brought up again if a test left part of it down. ``off`` set to 0 skips the tests."""
    import pytest

    if profile.off and os.environ.get(profile.off) == "0":
        pytest.skip(f"{profile.off}=0: the tests on PROFILE={profile.profile} are off")
    addresses = profile.addresses()
    was_up = healthy(addresses)
    if not was_up:
        profile.up()
    try:
        yield addresses  # an instance's addresses are its profile's: starting it changes none
    finally:
        kept = was_up or not stop or (profile.keep is not None and os.environ.get(profile.keep) == "1")
        if not kept:
            profile.down()
        elif not healthy(profile.addresses()):
            profile.up()


def stack_env(profile: str | None = None) -> dict[str, str]:
    """``stack.sh env``: the addresses of the profile named (default: ``$PROFILE``, else standalone)."""
    return Profile(profile or os.environ.get("PROFILE", "standalone")).addresses()


def stack_from_env(profile: str | None = None) -> Stack:
    return stack_of(stack_env(profile))


def broker_version(stack: Stack) -> str:
    """The Pulsar version the stack's broker runs (``/admin/v2/brokers/version``: plain text, though labelled
    application/json)."""
    with urllib.request.urlopen(f"{stack.admin_url}/admin/v2/brokers/version", timeout=30) as r:
        return str(r.read().decode().strip().strip('"'))


START_MARK = "=== stack.sh: start at "  # the line stack.sh appends to a process's .out as it starts it


def process_log(stack_dir: str | Path, name: str = "pulsar") -> str:
    """What process ``name`` (``pulsar``: a standalone; ``broker1``...) wrote since ``stack.sh`` last started it:
    its ``logs/<name>.out`` keeps every start's output, each after a line of its own."""
    text = (Path(stack_dir) / "logs" / f"{name}.out").read_text(errors="replace")
    return text[text.rfind(START_MARK) :] if START_MARK in text else text


def drop_data(stack_dir: str | Path) -> int:
    """Everything a stopped instance stored but its ``logs/`` (its bookies' ledgers, ZooKeeper's data, its run
    directory); the bytes freed. A bench at pulsar-perf's maximum rate leaves gigabytes per instance, which the
    next run would wipe at its start anyway (it starts from empty data): until then they only fill the disk,
    and a bookie turns read-only at 99%. Call it only once ``stack.sh down`` has succeeded."""
    freed = 0
    root = Path(stack_dir)
    for child in root.iterdir() if root.is_dir() else []:
        if child.name == "logs":
            continue
        if child.is_dir() and not child.is_symlink():
            freed += sum(f.lstat().st_size for f in child.rglob("*") if f.is_file())
            shutil.rmtree(child, ignore_errors=True)
        else:
            freed += child.lstat().st_size
            child.unlink(missing_ok=True)
    return freed


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
        raise AssertionError(f"{home} holds no Pulsar yet (make pulsar-dist PULSAR_VERSION=...)")
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
    async with new_session(30) as s, Stores(f"zk:{stack.zookeeper_hosts}") as zk:
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
