"""Typed settings: a YAML file (``config/worker.example.yaml``) overlaid by environment variables.

Environment variables win: ``LDW_`` + the key, ``__`` between nested keys, e.g.
``LDW_PULSAR__ADMIN_URL=http://broker:8080`` or ``LDW_WORKER__MAX_INFLIGHT=64``. A bad or missing value
stops the process at start with the key's dotted name (see :func:`load_settings`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    HttpUrl,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from worker.formats.topic_name import InvalidTopicName, TopicName


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PulsarSettings(_Section):
    service_url: str = "pulsar://127.0.0.1:6650"
    admin_url: HttpUrl = HttpUrl("http://127.0.0.1:8080")
    # A JWT for both endpoints: inline (or LDW_PULSAR__AUTH_TOKEN), or read from a file (a mounted
    # Kubernetes secret) by every process that loads the settings. Never both.
    auth_token: str | None = Field(None, repr=False)
    auth_token_file: Path | None = None
    # PEM CA bundle trusted for an https admin_url and a pulsar+ssl service_url (default: the system's).
    tls_trust_certs_file: Path | None = None
    # UNSAFE. Both endpoints check that the broker's certificate names the host in the URL; true turns that
    # off, so any certificate a trusted CA signed for any host is accepted and the token goes to whoever
    # presents one. Only for a test broker whose certificate does not name its address.
    tls_insecure_skip_hostname_verification: bool = False
    request_timeout_s: float = Field(10.0, gt=0)
    _token_source: str | None = PrivateAttr(default=None)

    @property
    def token_source(self) -> str:
        """Which setting the token came from, for error messages (never the token itself)."""
        return self._token_source or (
            "nowhere: no token is set (pulsar.auth_token, pulsar.auth_token_file or LDW_PULSAR__AUTH_TOKEN)"
        )

    @model_validator(mode="after")
    def _token_file(self) -> PulsarSettings:
        f = self.auth_token_file
        if f is not None:
            if self.auth_token:
                raise ValueError("auth_token and auth_token_file are both set: keep one")
            try:
                token = f.read_text().strip()
            except OSError as e:
                raise ValueError(f"auth_token_file {f}: cannot read it ({e.strerror or e})") from e
            if not token:
                raise ValueError(f"auth_token_file {f} is empty")
            # Every client is built from auth_token. The path stays: what is serialized (a Spark
            # executor's copy of the settings) carries it instead of the token, and reads it again.
            object.__setattr__(self, "auth_token", token)
            self._token_source = f"pulsar.auth_token_file ({f})"
        elif self.auth_token:
            self._token_source = "pulsar.auth_token"
        ca = self.tls_trust_certs_file
        if ca is not None and not ca.is_file():
            raise ValueError(f"tls_trust_certs_file {ca} is not a readable file")
        return self

    @model_serializer(mode="wrap")
    def _token_stays_in_its_file(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out: dict[str, Any] = handler(self)
        if self.auth_token_file is not None:
            out["auth_token"] = None
        return out

    @field_validator("service_url")
    @classmethod
    def _service_url(cls, v: str) -> str:
        if not v.startswith(("pulsar://", "pulsar+ssl://")):
            raise ValueError("must start with pulsar:// or pulsar+ssl://")
        return v


class TopicsSettings(_Section):
    pending: str = "persistent://pulsar/system/__ledger_deletion"
    retry: str = "persistent://pulsar/system/__ledger_deletion-RETRY"
    dlq: str = "persistent://pulsar/system/__ledger_deletion-DLQ"
    subscription: str = "ledger-deletion-worker"
    dlq_replay_subscription: str = "ledger-deletion-dlq-replay"
    parallelism: int = Field(4, ge=1, le=256)

    @field_validator("pending", "retry", "dlq")
    @classmethod
    def _topic(cls, v: str) -> str:
        try:
            return str(TopicName.parse(v))
        except InvalidTopicName as e:
            raise ValueError(str(e)) from e


class BookKeeperSettings(_Section):
    http_url: HttpUrl = HttpUrl("http://127.0.0.1:8000")
    # Every other bookie's HTTP admin endpoint: reads and deletes are spread over all of them (a bookie
    # serves deletes one at a time, and any bookie deletes any ledger).
    http_urls: list[HttpUrl] = Field(default_factory=list)
    # How long a bookie that refused a connection is left out before it is tried again.
    bookie_down_s: float = Field(5.0, gt=0)
    # "bookie-http": delete through the bookie's HTTP admin; "zookeeper": versioned delete of the
    # ledger's metadata znode (needs zookeeper.hosts).
    delete_via: Literal["bookie-http", "zookeeper"] = "bookie-http"
    request_timeout_s: float = Field(30.0, gt=0)
    # An open data or cursor ledger of a live topic that nothing names, older than worker.min_ledger_age_s,
    # is recovered (fenced through the bookies of its last ensemble, closed in BookKeeper's metadata store)
    # and then deleted (docs/design.md, "Open ledgers nothing names"). false: such ledgers are kept, as
    # every open ledger of a live topic. The bookies must take BookKeeper's protocol without authentication.
    recover_open_ledgers: bool = True
    # Opt-in: once the BookKeeper ledgers this worker deleted add up to this many bytes (their metadata
    # length) since the last request, ask every bookie above (http_url, http_urls) for one garbage
    # collection (PUT /api/v1/bookie/gc), at most once per gc_min_interval_s. null or 0: never; the
    # bookies then give the disk back on their own schedule (gcWaitTime, compaction intervals).
    gc_trigger_bytes: int | None = Field(None, ge=0)
    gc_min_interval_s: float = Field(600.0, gt=0)

    @property
    def endpoints(self) -> list[str]:
        """``http_url`` then ``http_urls``, each once, without a trailing slash."""
        return list(dict.fromkeys(str(u).rstrip("/") for u in [self.http_url, *self.http_urls]))


def _zk_connect_string(v: str | None) -> str | None:
    """``host:port[,host:port...][/chroot]`` (kazoo's form; ``null`` or empty: not configured)."""
    if v is None or not v.strip():
        return None
    v = v.strip()
    # "zk:127.0.0.1:2181" is Pulsar's metadataStoreUrl pasted whole; "zk:2181" is a host named zk.
    pasted_url = v.startswith("zk:") and not re.split(r"[,/]", v[3:], maxsplit=1)[0].isdigit()
    if "://" in v or v.startswith("metadata-store:") or pasted_url:
        raise ValueError(f"{v!r}: write host:port[,host:port...][/chroot], without a zk: or zk:// scheme")
    ensemble, slash, chroot = v.partition("/")
    if slash and (not chroot or chroot.endswith("/") or "//" in chroot):
        raise ValueError(f"{v!r}: the chroot must be a path like /pulsar (no trailing or double slash)")
    for entry in ensemble.split(","):
        host, colon, port = entry.strip().rpartition(":") if ":" in entry else (entry.strip(), "", "")
        if not host or any(c.isspace() for c in host):
            raise ValueError(f"{v!r}: {entry!r} is not a host[:port]")
        if colon and not (port.isdigit() and 0 < int(port) < 65536):
            raise ValueError(f"{v!r}: {entry!r} has no valid port")
    return v


class ZooKeeperSettings(_Section):
    # Pulsar's metadata store (the brokers' metadataStoreUrl, without its "zk:"): topics' managed
    # ledgers and cursors, schemas; half of every "topic gone" proof.
    hosts: str | None = "127.0.0.1:2181"
    # BookKeeper's metadata store (the ensemble of the bookies' metadataServiceUri) when it is not
    # Pulsar's: ledger metadata under ledgers_root and the registered bookies. Unset: hosts.
    bookkeeper_hosts: str | None = None
    # BookKeeper's ledgers root in bookkeeper_hosts (the path of the bookies' metadataServiceUri).
    ledgers_root: str = "/ledgers"
    timeout_s: float = Field(10.0, gt=0)

    @field_validator("hosts", "bookkeeper_hosts")
    @classmethod
    def _connect_string(cls, v: str | None) -> str | None:
        return _zk_connect_string(v)

    @field_validator("ledgers_root")
    @classmethod
    def _root(cls, v: str) -> str:
        if not v.startswith("/") or "//" in v or any(c.isspace() for c in v):
            raise ValueError(f"{v!r}: must be an absolute znode path like /ledgers")
        return v.rstrip("/") or "/"

    @model_validator(mode="after")
    def _pair(self) -> ZooKeeperSettings:
        if self.bookkeeper_hosts and not self.hosts:
            raise ValueError(
                "zookeeper.bookkeeper_hosts is set but zookeeper.hosts is empty: Pulsar's metadata store is needed too"
            )
        return self

    @property
    def bookkeeper_store(self) -> str | None:
        """BookKeeper's metadata store: ``bookkeeper_hosts``, else Pulsar's (``hosts``)."""
        return self.bookkeeper_hosts or self.hosts

    @property
    def bookkeeper_store_key(self) -> str:
        """The key that names BookKeeper's metadata store, for error messages."""
        return "zookeeper.bookkeeper_hosts" if self.bookkeeper_hosts else "zookeeper.hosts"


class S3Target(_Section):
    """One offload target the worker may talk to. Messages can only name one of these."""

    driver: Literal["aws-s3", "s3", "S3", "aws-s3-compatible"] = "aws-s3"
    bucket: str
    region: str = "us-east-1"
    endpoint: HttpUrl | None = None
    # Inline, or each read from a file (a mounted Kubernetes secret) by every process that loads the
    # settings; neither: the AWS credential chain (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY,
    # AWS_SHARED_CREDENTIALS_FILE, a web identity or instance role) of that process.
    access_key_id: str | None = Field(None, repr=False)
    secret_access_key: str | None = Field(None, repr=False)
    access_key_id_file: Path | None = None
    secret_access_key_file: Path | None = None

    @model_validator(mode="after")
    def _key_files(self) -> S3Target:
        for key in ("access_key_id", "secret_access_key"):
            f: Path | None = getattr(self, f"{key}_file")
            if f is None:
                continue
            if getattr(self, key):
                raise ValueError(f"{key} and {key}_file are both set: keep one")
            try:
                value = f.read_text().strip()
            except OSError as e:
                raise ValueError(f"{key}_file {f}: cannot read it ({e.strerror or e})") from e
            if not value:
                raise ValueError(f"{key}_file {f} is empty")
            object.__setattr__(self, key, value)
        return self

    @model_serializer(mode="wrap")
    def _keys_stay_in_their_files(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out: dict[str, Any] = handler(self)
        for key in ("access_key_id", "secret_access_key"):
            if getattr(self, f"{key}_file") is not None:
                out[key] = None
        return out


class OffloadSettings(_Section):
    s3_targets: list[S3Target] = Field(default_factory=list)
    filesystem_base_path: Path | None = None
    request_timeout_s: float = Field(30.0, gt=0)


class WorkerSettings(_Section):
    max_inflight: int = Field(16, ge=1, le=10_000)
    # Messages received at once: each batch is swept together (its already-gone messages settled by one
    # metadata read and one burst of acknowledgements) while max_inflight still bounds the messages decided
    # at once. Also the consumer's receiver queue (Pulsar's default is 1,000). Raised to max_inflight when
    # smaller. docs/operations.md says what a replica then holds unacknowledged.
    receive_batch: int = Field(128, ge=1, le=1000)
    # Storage deletes per second per replica (only real deletes take a token: "already gone" costs none).
    # Chosen against PIP-444, whose broker default lets one broker run 1,000 ledger deletes at once
    # (managedLedgerDeleteMaxConcurrentRequests): a replica has at most max_inflight (16) deletes in flight,
    # and 500/s is about one ZooKeeper write per delete, a small share of what an ensemble sustains, so a
    # few replicas drain a retention sweep without the minutes-long ZooKeeper latency PIP-444 was written
    # against. docs/operations.md explains the number.
    deletes_per_second: float = Field(500.0, gt=0)
    delete_burst: int = Field(100, ge=1)
    # The pace (worker.core.pace): below deletes_per_second, the delete rate follows the latency of this
    # worker's own calls to BookKeeper's metadata store, halving whenever an interval's p90 is over
    # pace_latency_factor x the store's idle level, creeping back up while it is not; never below
    # pace_floor_per_second (nor above deletes_per_second, which wins over the floor). false: a fixed
    # deletes_per_second. docs/operations.md: "what the worker does when ZooKeeper is slow".
    pace: bool = True
    pace_floor_per_second: float = Field(5.0, gt=0)
    pace_latency_factor: float = Field(2.0, gt=1)
    pace_interval_s: float = Field(1.0, gt=0)
    max_attempts: int = Field(10, ge=1)
    # The largest pending-deletion payload the worker accepts. A larger one is dead-lettered as `invalid`,
    # undecoded, as a bounded copy (its size, SHA-256 and first KiB): its retry or DLQ copy (the payload plus
    # the worker's properties) could not be published under the brokers' maxMessageSize (Pulsar's default
    # 5 MiB). A genuine PendingDeleteLedgerInfo is a few hundred bytes. Keep it well below maxMessageSize.
    max_payload_bytes: int = Field(65_536, ge=1024, le=4 * 1024 * 1024)
    backoff_initial_s: float = Field(60.0, ge=0)
    backoff_max_s: float = Field(3600.0, ge=0)
    backoff_multiplier: float = Field(2.0, ge=1)
    in_use_retry_s: float = Field(600.0, ge=0)
    min_ledger_age_s: float = Field(600.0, gt=0)
    snapshot_ttl_s: float = Field(60.0, ge=0)
    snapshot_cache_size: int = Field(1024, ge=1)
    drain_timeout_s: float = Field(30.0, gt=0)
    send_delay_s: float = Field(60.0, ge=0)
    stats_poll_interval_s: float = Field(15.0, gt=0)
    # The brokers' extension signs what it queues with this key (its ledgerDeletionMarkKeyFile): a signed
    # message whose ledger its topic still lists as a closed ledger (or as its cursor's ledger) when attempts
    # run out is released, not dead-lettered (worker.core.broker_marks). Unset: nothing is released. A secret:
    # mount it from the same Kubernetes Secret as the brokers'.
    broker_mark_key_file: Path | None = None
    _broker_mark_key: bytes | None = PrivateAttr(default=None)

    @property
    def broker_mark_key(self) -> bytes | None:
        return self._broker_mark_key

    @model_validator(mode="after")
    def _mark_key(self) -> WorkerSettings:
        f = self.broker_mark_key_file
        if f is not None:
            try:
                key = f.read_bytes().rstrip()
            except OSError as e:
                raise ValueError(f"broker_mark_key_file {f}: cannot read it ({e.strerror or e})") from e
            if not key:
                raise ValueError(f"broker_mark_key_file {f} is empty")
            self._broker_mark_key = key
        return self

    @model_validator(mode="after")
    def _backoff(self) -> WorkerSettings:
        if self.backoff_max_s < self.backoff_initial_s:
            raise ValueError("backoff_max_s must be >= backoff_initial_s")
        return self

    @model_validator(mode="after")
    def _age_guard(self) -> WorkerSettings:
        # A ledger exists in BookKeeper a moment before its id reaches its topic's metadata. The age guard
        # covers that moment only if it is longer than the oldest snapshot a decision may use: with
        # min_ledger_age_s <= snapshot_ttl_s, a ledger created just before a cached snapshot was taken
        # (of a partitioned topic, where the stale-id rule cannot see it) is old enough and unlisted.
        if self.min_ledger_age_s <= self.snapshot_ttl_s:
            raise ValueError(
                f"min_ledger_age_s ({self.min_ledger_age_s:g}) must be greater than snapshot_ttl_s "
                f"({self.snapshot_ttl_s:g}): a ledger being created could look deletable"
            )
        return self


class NightlySettings(_Section):
    """The Spark jobs (``replay-dlq``, ``audit``)."""

    # Where the Parquet reports go (a directory, or any URI Spark writes to: hdfs://, s3a://, ...).
    report_dir: str = "ledger-deletion-reports"
    # Decisions in flight per Spark task.
    concurrency: int = Field(16, ge=1, le=1024)
    # host:port or URL of a Prometheus Pushgateway; the run's results are pushed when set.
    pushgateway_url: str | None = None


class HttpSettings(_Section):
    host: str = "0.0.0.0"
    port: int = Field(8090, ge=0, le=65535)


class LoggingSettings(_Section):
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    format: Literal["json", "console"] = "json"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="LDW_", env_nested_delimiter="__", extra="forbid", frozen=True, case_sensitive=False
    )

    pulsar: PulsarSettings = PulsarSettings()
    topics: TopicsSettings = TopicsSettings()
    bookkeeper: BookKeeperSettings = BookKeeperSettings()
    zookeeper: ZooKeeperSettings = ZooKeeperSettings()
    offload: OffloadSettings = OffloadSettings()
    worker: WorkerSettings = WorkerSettings()
    nightly: NightlySettings = NightlySettings()
    http: HttpSettings = HttpSettings()
    logging: LoggingSettings = LoggingSettings()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Environment first so it overrides the file, which arrives as init kwargs.
        return (env_settings, init_settings)

    @model_validator(mode="after")
    def _cross(self) -> Settings:
        if self.bookkeeper.delete_via == "zookeeper" and not self.zookeeper.hosts:
            raise ValueError("bookkeeper.delete_via=zookeeper needs zookeeper.hosts")
        return self


class ConfigError(Exception):
    """Bad configuration; the message names every offending key."""


def _format(e: ValidationError) -> str:
    lines = []
    for err in e.errors():
        key = ".".join(str(p) for p in err["loc"]) or "<root>"
        lines.append(f"{key}: {err['msg']}")
    return "invalid configuration:\n  " + "\n  ".join(lines)


def load_settings(path: str | os.PathLike[str] | None = None, **overrides: Any) -> Settings:
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file not found: {p}")
        try:
            loaded = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError as e:
            raise ConfigError(f"config file {p} is not valid YAML: {e}") from e
        if not isinstance(loaded, dict):
            raise ConfigError(f"config file {p} must be a mapping of sections")
        data.update(loaded)
    for k, v in overrides.items():
        data[k] = v
    try:
        return Settings(**data)
    except ValidationError as e:
        raise ConfigError(_format(e)) from e
