"""Typed settings: a YAML file (``config/worker.example.yaml``) overlaid by environment variables.

Environment variables win: ``LDW_`` + the key, ``__`` between nested keys, e.g.
``LDW_PULSAR__ADMIN_URL=http://broker:8080`` or ``LDW_WORKER__MAX_INFLIGHT=64``. A bad or missing value
stops the process at start with the key's dotted name (see :func:`load_settings`).
"""

from __future__ import annotations

import os
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
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from worker.formats.metadata_store_url import parse_metadata_service_uri, parse_metadata_store_url
from worker.formats.topic_name import InvalidTopicName, TopicName


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PulsarSettings(_Section):
    service_url: str = Field(
        "pulsar://127.0.0.1:6650", description="Binary protocol endpoint of the brokers (pulsar:// or pulsar+ssl://)."
    )
    admin_url: HttpUrl = Field(
        HttpUrl("http://127.0.0.1:8080"),
        description=(
            "Any broker's admin REST endpoint; the other brokers are reached at the addresses they register in "
            "Pulsar's metadata store (else those the admin API lists)."
        ),
    )
    auth_token: str | None = Field(
        None,
        repr=False,
        description=(
            "Bearer token (JWT) for the admin API and the client; or LDW_PULSAR__AUTH_TOKEN. A secret: prefer "
            "auth_token_file."
        ),
    )
    auth_token_file: Path | None = Field(
        None,
        description=(
            "Read the token from this file (a mounted secret) in every process that loads the settings, the nightly "
            "jobs' executors included. Not with auth_token."
        ),
    )
    tls_trust_certs_file: Path | None = Field(
        None,
        description=(
            "PEM CA bundle trusted for an https:// admin_url and a pulsar+ssl:// service_url (unset: the system's CAs)."
        ),
    )
    tls_insecure_skip_hostname_verification: bool = Field(
        False,
        description=(
            "UNSAFE if true: certificates are no longer checked against the broker's host name (admin and "
            "pulsar+ssl://), so the token goes to anyone holding a certificate from a trusted CA. Only for a test "
            "broker whose certificate does not name its address."
        ),
    )
    request_timeout_s: float = Field(10.0, gt=0, description="Seconds an admin API call may take.")
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
    pending: str = Field(
        "persistent://pulsar/system/__ledger_deletion",
        description=(
            "The pending-deletions topic (partitioned, topics.parallelism partitions): phase 1, the scanner and the "
            "broker extension queue there."
        ),
    )
    retry: str = Field(
        "persistent://pulsar/system/__ledger_deletion-RETRY",
        description="The retry topic: delayed copies of deletions that must wait (in use, too young, a failure).",
    )
    dlq: str = Field(
        "persistent://pulsar/system/__ledger_deletion-DLQ",
        description=(
            "The dead-letter topic: attempts exhausted, rejected (identity not proven) or undecodable deletions, each "
            "with its reason."
        ),
    )
    subscription: str = Field(
        "ledger-deletion-worker",
        description="The Shared subscription every worker replica joins, on pending and retry.",
    )
    dlq_replay_subscription: str = Field(
        "ledger-deletion-dlq-replay",
        description=(
            "The nightly replay's subscription on the DLQ, created before the first dead letter so retention never "
            "drops one."
        ),
    )
    parallelism: int = Field(
        4, ge=1, le=256, description="Partitions of the pending topic (when this process creates it)."
    )

    @field_validator("pending", "retry", "dlq")
    @classmethod
    def _topic(cls, v: str) -> str:
        try:
            return str(TopicName.parse(v))
        except InvalidTopicName as e:
            raise ValueError(str(e)) from e


class BookKeeperSettings(_Section):
    http_url: HttpUrl = Field(
        HttpUrl("http://127.0.0.1:8000"),
        description="A bookie's HTTP admin API (httpServerEnabled=true on the bookie).",
    )
    http_urls: list[HttpUrl] = Field(
        default_factory=list,
        description=(
            "Every other bookie's HTTP admin API: reads and deletes are spread over all of them (a bookie serves "
            "deletes one at a time). Each must be a bookie registered in BookKeeper's metadata store, or the worker "
            "refuses to start naming it: a bookie of another cluster would delete that cluster's ledgers by id."
        ),
    )
    bookie_down_s: float = Field(
        5.0,
        gt=0,
        description=(
            "Seconds a bookie that refused a connection is left out before it is tried again; the call goes to the next"
            " bookie (a call that reached a bookie is never re-sent elsewhere)."
        ),
    )
    delete_via: Literal["bookie-http", "zookeeper"] = Field(
        "bookie-http",
        description=(
            "bookie-http: delete through a bookie's HTTP admin API. zookeeper: read the ledger's metadata in "
            "BookKeeper's metadata store and delete its znode with the version that was verified (the bookies "
            "garbage-collect the entries; no bookie HTTP API needed)."
        ),
    )
    request_timeout_s: float = Field(
        30.0,
        gt=0,
        description=(
            "Seconds a bookie HTTP call may take; also bounds each call of a recovery to a bookie (connect, one read)."
        ),
    )
    recover_open_ledgers: bool = Field(
        True,
        description=(
            "An open data or cursor ledger of a live topic that nothing names, older than worker.min_ledger_age_s, is "
            "recovered (fenced through the bookies of its last ensemble in BookKeeper's protocol, closed in "
            "BookKeeper's metadata store) and then deleted. Needs the bookies' protocol port reachable without "
            "authentication. false: such ledgers are kept."
        ),
    )
    gc_trigger_bytes: int | None = Field(
        None,
        ge=0,
        description=(
            "Opt-in: once the BookKeeper ledgers this replica deleted add up to this many bytes (their metadata length)"
            " since its last request, ask every bookie of http_url and http_urls for one garbage collection. null or 0:"
            " never; the bookies give the disk back on their own schedule."
        ),
    )
    gc_min_interval_s: float = Field(
        600.0,
        gt=0,
        description=(
            "Seconds between two garbage-collection requests at least; the bytes counted meanwhile wait for the next."
        ),
    )

    @property
    def endpoints(self) -> list[str]:
        """``http_url`` then ``http_urls``, each once, without a trailing slash."""
        return list(dict.fromkeys(str(u).rstrip("/") for u in [self.http_url, *self.http_urls]))


# The keys each store had before its URL was its one spelling, and the URL key that replaced them.
_OLD_KEYS = {
    "hosts": "metadata_store_url",
    "bookkeeper_hosts": "metadata_service_uri",
    "ledgers_root": "metadata_service_uri",
}
_URL_OF = {
    "metadata_store_url": "the brokers' metadataStoreUrl",
    "metadata_service_uri": "the bookies' metadataServiceUri",
}


class ZooKeeperSettings(_Section):
    """Both metadata stores, each by the one URL its own servers are configured with; the URL's scheme
    chooses the provider (ZooKeeper's only)."""

    metadata_store_url: str | None = Field(
        "zk:127.0.0.1:2181",
        description=(
            "Pulsar's metadata store: the brokers' metadataStoreUrl as is (zk:host:port[,host:port...][/chroot]). "
            'Managed ledgers, cursors, schemas: half of every "topic gone" proof. Required by run; the worker refuses '
            "to start unless the pending topic's managed ledger is found there. Empty: the operator commands run "
            "without a metadata store. Only ZooKeeper is supported (oxia: and etcd: are refused)."
        ),
    )
    metadata_service_uri: str | None = Field(
        None,
        description=(
            "BookKeeper's metadata store: the bookies' metadataServiceUri as is "
            "(zk+hierarchical://host:port[;host:port...]/ledgers, or metadata-store:zk:host:port/ledgers): ledger "
            "metadata and the registered bookies. Unset: Pulsar's store, under /ledgers. Proven at start by the "
            "current ledger Pulsar's store lists for the pending topic."
        ),
    )
    timeout_s: float = Field(10.0, gt=0, description="Metadata store session timeout, seconds; also bounds each call.")

    @model_validator(mode="before")
    @classmethod
    def _old_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for old, new in _OLD_KEYS.items():
                if old in data:
                    raise ValueError(f"zookeeper.{old} is no longer read: set zookeeper.{new} ({_URL_OF[new]}, as is)")
        return data

    @field_validator("metadata_store_url", "metadata_service_uri")
    @classmethod
    def _url(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is None or not v.strip() or v.strip() == "null":
            return None
        # A ValueError (UnsupportedMetadataStore): refused at load, naming the key.
        (parse_metadata_store_url if info.field_name == "metadata_store_url" else parse_metadata_service_uri)(v)
        return v.strip()

    @model_validator(mode="after")
    def _pair(self) -> ZooKeeperSettings:
        if self.metadata_service_uri and not self.metadata_store_url:
            raise ValueError(
                "zookeeper.metadata_service_uri is set but zookeeper.metadata_store_url is empty: Pulsar's metadata "
                "store is needed too"
            )
        return self

    @property
    def bookkeeper_uri(self) -> str | None:
        """BookKeeper's metadata store: ``metadata_service_uri``, else Pulsar's store under /ledgers (as a broker
        derives its ``bookkeeperMetadataServiceUri``); None without a store."""
        if self.metadata_service_uri or not self.metadata_store_url:
            return self.metadata_service_uri
        return f"metadata-store:{self.metadata_store_url}/ledgers"


class S3Target(_Section):
    """One offload target the worker may talk to. Messages can only name one of these."""

    driver: Literal["aws-s3", "s3", "S3", "aws-s3-compatible"] = Field(
        "aws-s3",
        description=(
            "The offload driver name this target serves, as Pulsar records it in an offloaded ledger's context."
        ),
    )
    bucket: str = Field(
        description=(
            "The bucket. A message naming any other bucket is rejected: the worker connects only to configured targets."
        )
    )
    region: str = Field("us-east-1", description="The bucket's region.")
    endpoint: HttpUrl | None = Field(None, description="The S3 API endpoint (unset: AWS's for the region).")
    access_key_id: str | None = Field(
        None,
        repr=False,
        description=(
            "Access key id, inline (a secret: prefer access_key_id_file). Neither: the process's AWS credential chain."
        ),
    )
    secret_access_key: str | None = Field(
        None, repr=False, description="Secret access key, inline (a secret: prefer secret_access_key_file)."
    )
    access_key_id_file: Path | None = Field(
        None,
        description=(
            "Read the access key id from this file (a mounted secret) in every process that loads the settings."
        ),
    )
    secret_access_key_file: Path | None = Field(
        None,
        description=(
            "Read the secret access key from this file (a mounted secret) in every process that loads the settings."
        ),
    )

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
    s3_targets: list[S3Target] = Field(
        default_factory=list,
        description=(
            "The only S3 buckets the worker deletes offloaded objects from (driver, bucket, region, endpoint, "
            "credentials); a message naming another one is rejected."
        ),
    )
    filesystem_base_path: Path | None = Field(
        None, description="Root of the filesystem offloader; an offloaded copy's path must resolve inside it."
    )
    request_timeout_s: float = Field(30.0, gt=0, description="Seconds a tiered-storage call may take.")


class WorkerSettings(_Section):
    max_inflight: int = Field(
        16,
        ge=1,
        le=10_000,
        description="Messages decided at once per replica (and so storage deletes in flight, at most).",
    )
    receive_batch: int = Field(
        128,
        ge=1,
        le=1000,
        description=(
            "Messages received at once (at least max_inflight, at most 1,000); also the consumer's receiver queue. A "
            "batch is swept together: its already-gone messages settled by one read of BookKeeper's metadata store and "
            "one burst of acknowledgements, the others dispatched as room frees. A replica holds up to about three "
            "batches unacknowledged: smaller hides less from the other replicas, larger costs fewer round trips."
        ),
    )
    batch_wait_ms: int = Field(
        20,
        ge=1,
        le=10_000,
        description=(
            "How long a batch receive waits for its batch to fill, in milliseconds: the latency a message can gain "
            "when the queue is nearly idle (under a backlog a batch is full at once), and how often an idle worker "
            "wakes."
        ),
    )
    deletes_per_second: float = Field(
        500.0,
        gt=0,
        description=(
            "Ceiling of the storage deletes per second per replica (a token bucket; a ledger already gone takes no "
            "token). The pace works below it."
        ),
    )
    delete_burst: int = Field(100, ge=1, description="Deletes the token bucket allows at once.")
    pace: bool = Field(
        True,
        description=(
            "The delete rate follows BookKeeper's metadata store while the worker deletes: halved whenever an "
            "interval's p90 latency of this worker's calls to it is over pace_latency_factor x its idle level, grown "
            "back while not; held while nothing is being deleted. false: a fixed deletes_per_second."
        ),
    )
    pace_floor_per_second: float = Field(
        5.0,
        gt=0,
        description=(
            "The pace never goes below this many deletes per second (deletes_per_second wins if lower), so a slow store"
            " still sees the backlog move."
        ),
    )
    pace_latency_factor: float = Field(
        2.0,
        gt=1,
        description="The pace halves the rate when an interval's p90 is over this multiple of the store's idle p90.",
    )
    pace_interval_s: float = Field(
        1.0, gt=0, description="Seconds per pace interval (one decision each, five probe reads)."
    )
    max_attempts: int = Field(
        10, ge=1, description="Deliveries of a deletion before it goes to the DLQ (broker redeliveries count too)."
    )
    max_payload_bytes: int = Field(
        65_536,
        ge=1024,
        le=4 * 1024 * 1024,
        description=(
            "The largest payload accepted, in bytes (1 KiB to 4 MiB); a larger one is dead-lettered as invalid, as a "
            "bounded copy. Keep it well below the brokers' maxMessageSize (5 MiB by default): its retry or DLQ copy "
            "must still be publishable."
        ),
    )
    backoff_initial_s: float = Field(
        60.0, ge=0, description="Retry delay after a first transient failure, seconds (+-10 % jitter)."
    )
    backoff_max_s: float = Field(3600.0, ge=0, description="Longest retry delay after transient failures, seconds.")
    backoff_multiplier: float = Field(
        2.0, ge=1, description="Each further transient failure multiplies the retry delay by this."
    )
    in_use_retry_s: float = Field(600.0, ge=0, description="Retry delay for a ledger still in use, seconds.")
    min_ledger_age_s: float = Field(
        600.0,
        gt=0,
        description=(
            "Ledgers younger than this (seconds) are retried, never deleted: a ledger being created is not yet in its "
            "topic's list. Must be greater than snapshot_ttl_s."
        ),
    )
    snapshot_ttl_s: float = Field(
        60.0,
        ge=0,
        description=(
            "Seconds a topic's live state (its broker's internalStats, or its records in Pulsar's metadata store "
            "when no broker has it loaded) may be reused."
        ),
    )
    snapshot_cache_size: int = Field(1024, ge=1, description="Topics whose live state is cached.")
    loaded_topics_ttl_s: float = Field(
        30.0,
        ge=0,
        description=(
            "Seconds the brokers' own lists of the topics they have loaded (broker-stats/topics, refreshed by each "
            "broker every statsUpdateFrequencyInSecs) are kept: a topic they name is asked of its broker, any other "
            "one is read from Pulsar's metadata store, never loaded (a superuser's read; without it every topic is "
            "read from the metadata store)."
        ),
    )
    drain_timeout_s: float = Field(
        30.0,
        gt=0,
        description=(
            "On SIGTERM, seconds in-flight messages get to settle before the consumer closes (what is left is "
            "redelivered to another replica)."
        ),
    )
    send_delay_s: float = Field(
        60.0,
        ge=0,
        description=(
            "Phase 1's deliver_after, seconds: the worker must not see a deletion before the metadata update that drops"
            " the ledger lands."
        ),
    )
    stats_poll_interval_s: float = Field(
        15.0, gt=0, description="Seconds between two admin-API polls of the queue topics' counters (backlog metrics)."
    )
    broker_mark_key_file: Path | None = Field(
        None,
        description=(
            "The brokers' extension signing key (its ledgerDeletionMarkKeyFile; a secret, mount it from the same "
            "Secret): a deletion it signed whose ledger is still listed as a closed ledger, or as its cursor's ledger, "
            "when attempts run out is released, not dead-lettered. Unset: nothing is released."
        ),
    )
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

    report_dir: str = Field(
        "ledger-deletion-reports",
        description=(
            "Root of the nightly reports, any URI Spark writes to (--report-dir overrides it); the jobs write under "
            "<root>/replay and <root>/audit."
        ),
    )
    concurrency: int = Field(16, ge=1, le=1024, description="Decisions in flight per Spark task.")
    pushgateway_url: str | None = Field(
        None, description="host:port or URL of a Prometheus Pushgateway; the runs' results are pushed when set."
    )


class HttpSettings(_Section):
    host: str = Field("0.0.0.0", description="Address of /metrics, /healthz and /readyz.")
    port: int = Field(8090, ge=0, le=65535, description="Port of /metrics, /healthz and /readyz.")


class LoggingSettings(_Section):
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field("INFO", description="Log level.")
    format: Literal["json", "console"] = Field("json", description="json (structlog JSON lines) or console.")


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
        if self.bookkeeper.delete_via == "zookeeper" and not self.zookeeper.metadata_store_url:
            raise ValueError("bookkeeper.delete_via=zookeeper needs zookeeper.metadata_store_url")
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
