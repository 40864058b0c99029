"""Settings (``worker.settings``): YAML overlaid by LDW_ environment variables; bad configuration names its key."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from tests.unit.fakes import ACCESS, SECRET, TOKEN, settings_with_secret_files
from worker.formats.metadata_store_url import StoreUrl, parse_metadata_service_uri, parse_metadata_store_url
from worker.settings import BookKeeperSettings, ConfigError, Settings, load_settings

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No LDW_ variable of the surrounding shell leaks into these tests."""
    for k in list(os.environ):
        if k.upper().startswith("LDW_"):
            monkeypatch.delenv(k)
    yield


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "worker.yaml"
    p.write_text(text)
    return p


WORKER_YAML = """
worker:
  max_inflight: 16
  deletes_per_second: 7
  backoff_initial_s: 5
  backoff_max_s: 50
pulsar:
  admin_url: http://broker:8080
"""


def test_defaults_without_a_file() -> None:
    s = load_settings()
    assert s.worker.max_inflight == 16
    assert s.worker.max_attempts == 10
    assert s.worker.min_ledger_age_s == 600
    assert s.topics.pending == "persistent://pulsar/system/__ledger_deletion"
    assert s.topics.subscription == "ledger-deletion-worker"
    assert s.topics.parallelism == 4
    assert s.offload.s3_targets == []


def test_example_config_loads() -> None:
    s = load_settings(REPO / "config" / "worker.example.yaml")
    assert s.offload.s3_targets[0].bucket == "pulsar-offload"
    assert s.http.port == 8090


def test_yaml_values_are_used(tmp_path: Path) -> None:
    s = load_settings(write(tmp_path, WORKER_YAML))
    assert s.worker.max_inflight == 16
    assert s.worker.deletes_per_second == 7.0
    assert s.worker.backoff_initial_s == 5.0
    assert str(s.pulsar.admin_url) == "http://broker:8080/"


def test_env_overrides_one_key_and_keeps_the_rest_of_the_section(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LDW_WORKER__MAX_INFLIGHT", "64")
    s = load_settings(write(tmp_path, WORKER_YAML))
    assert s.worker.max_inflight == 64
    # The other keys of the same section still come from the YAML, not from the defaults.
    assert s.worker.deletes_per_second == 7.0
    assert s.worker.backoff_initial_s == 5.0
    assert s.worker.backoff_max_s == 50.0
    # And other sections are untouched.
    assert str(s.pulsar.admin_url) == "http://broker:8080/"


def test_env_key_is_case_insensitive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ldw_worker__max_inflight", "33")
    assert load_settings(write(tmp_path, WORKER_YAML)).worker.max_inflight == 33


def test_env_overrides_without_a_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LDW_PULSAR__ADMIN_URL", "http://elsewhere:8080")
    monkeypatch.setenv("LDW_BOOKKEEPER__DELETE_VIA", "zookeeper")
    s = load_settings()
    assert str(s.pulsar.admin_url) == "http://elsewhere:8080/"
    assert s.bookkeeper.delete_via == "zookeeper"


def test_bad_env_value_names_the_dotted_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LDW_WORKER__MAX_INFLIGHT", "lots")
    with pytest.raises(ConfigError, match=r"worker\.max_inflight"):
        load_settings(write(tmp_path, WORKER_YAML))


@pytest.mark.parametrize(
    ("yaml_text", "key"),
    [
        ("worker:\n  max_inflight: 0\n", "worker.max_inflight"),
        ("worker:\n  deletes_per_second: -1\n", "worker.deletes_per_second"),
        ("topics:\n  parallelism: 0\n", "topics.parallelism"),
        ("topics:\n  pending: persistent://a/../b\n", "topics.pending"),
        ("topics:\n  dlq: non-persistent://a/b/c\n", "topics.dlq"),
        ("pulsar:\n  service_url: http://x:6650\n", "pulsar.service_url"),
        ("pulsar:\n  admin_url: not a url\n", "pulsar.admin_url"),
        ("bookkeeper:\n  delete_via: carrier-pigeon\n", "bookkeeper.delete_via"),
        ("http:\n  port: 70000\n", "http.port"),
        ("logging:\n  level: LOUD\n", "logging.level"),
        ("offload:\n  s3_targets:\n    - region: us-east-1\n", "offload.s3_targets.0.bucket"),
        ("offload:\n  s3_targets:\n    - bucket: b\n      driver: ftp\n", "offload.s3_targets.0.driver"),
    ],
)
def test_bad_yaml_value_names_the_dotted_key(tmp_path: Path, yaml_text: str, key: str) -> None:
    with pytest.raises(ConfigError) as ei:
        load_settings(write(tmp_path, yaml_text))
    assert f"{key}:" in str(ei.value)


def test_every_bad_key_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as ei:
        load_settings(write(tmp_path, "worker:\n  max_inflight: 0\nhttp:\n  port: -1\n"))
    assert "worker.max_inflight" in str(ei.value)
    assert "http.port" in str(ei.value)


def test_backoff_max_below_initial_rejected(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="backoff_max_s"):
        load_settings(write(tmp_path, "worker:\n  backoff_initial_s: 100\n  backoff_max_s: 10\n"))


def test_delete_via_zookeeper_needs_a_metadata_store(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"needs zookeeper\.metadata_store_url"):
        load_settings(write(tmp_path, "bookkeeper:\n  delete_via: zookeeper\nzookeeper:\n  metadata_store_url: null\n"))


@pytest.mark.parametrize(
    ("yaml_text", "key"),
    [
        ("worker:\n  max_inflight: 4\n  max_inflgiht: 8\n", "worker.max_inflgiht"),
        ("bogus_section:\n  a: 1\n", "bogus_section"),
        ("offload:\n  s3_targets:\n    - bucket: b\n      secret: x\n", "offload.s3_targets.0.secret"),
    ],
)
def test_unknown_key_rejected(tmp_path: Path, yaml_text: str, key: str) -> None:
    with pytest.raises(ConfigError) as ei:
        load_settings(write(tmp_path, yaml_text))
    assert f"{key}:" in str(ei.value)


def test_unknown_env_key_in_a_section_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LDW_WORKER__MAX_INFLGIHT", "8")
    with pytest.raises(ConfigError, match=r"worker\.max_inflgiht"):
        load_settings()


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_settings(tmp_path / "nope.yaml")


def test_directory_is_not_a_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_settings(tmp_path)


def test_invalid_yaml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_settings(write(tmp_path, "worker: [unclosed\n"))


def test_yaml_must_be_a_mapping(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="mapping"):
        load_settings(write(tmp_path, "- a\n- b\n"))


def test_empty_file_means_defaults(tmp_path: Path) -> None:
    assert load_settings(write(tmp_path, "")) == Settings()


def test_overrides_replace_a_section(tmp_path: Path) -> None:
    s = load_settings(write(tmp_path, WORKER_YAML), http={"port": 9999})
    assert s.http.port == 9999


def test_settings_are_frozen() -> None:
    s = load_settings()
    with pytest.raises(Exception):  # noqa: B017 - pydantic raises its ValidationError for frozen models
        s.worker.max_inflight = 3  # type: ignore[misc]


def test_topic_names_are_normalised(tmp_path: Path) -> None:
    s = load_settings(write(tmp_path, "topics:\n  pending: pulsar/system/pending\n"))
    assert s.topics.pending == "persistent://pulsar/system/pending"


@pytest.mark.parametrize(
    ("yaml_text", "named"),
    [
        ("worker: {min_ledger_age_s: 0}\n", "worker.min_ledger_age_s"),
        ("worker: {min_ledger_age_s: 30, snapshot_ttl_s: 60}\n", "snapshot_ttl_s"),
        ("worker: {min_ledger_age_s: 60, snapshot_ttl_s: 60}\n", "snapshot_ttl_s"),
    ],
)
def test_an_age_guard_that_lets_a_ledger_being_created_look_deletable_is_refused(
    tmp_path: Path, yaml_text: str, named: str
) -> None:
    # Defect: min_ledger_age_s: 0 was accepted (and every integration test ran with it).
    with pytest.raises(ConfigError) as e:
        load_settings(write(tmp_path, yaml_text))
    assert named in str(e.value) and "min_ledger_age_s" in str(e.value)


def test_a_safe_age_guard_is_accepted(tmp_path: Path) -> None:
    s = load_settings(write(tmp_path, "worker: {min_ledger_age_s: 2, snapshot_ttl_s: 0.5}\n"))
    assert (s.worker.min_ledger_age_s, s.worker.snapshot_ttl_s) == (2, 0.5)


def test_token_from_a_file_is_read_at_load_and_travels_as_the_path(tmp_path: Path) -> None:
    f = tmp_path / "worker.token"
    f.write_text("eyJ.header.sig\n")
    s = load_settings(None, pulsar={"auth_token_file": str(f)})
    assert s.pulsar.auth_token == "eyJ.header.sig"
    assert s.pulsar.token_source == f"pulsar.auth_token_file ({f})"
    # What a Spark executor gets: the path, never the token; it reads the file itself.
    dumped = s.model_dump_json()
    assert "eyJ.header.sig" not in dumped and "eyJ.header.sig" not in repr(s)
    again = type(s).model_validate_json(dumped)
    assert again.pulsar.auth_token == "eyJ.header.sig" and again.pulsar.auth_token_file == f
    f.unlink()
    with pytest.raises(ValidationError, match="auth_token_file"):
        type(s).model_validate_json(dumped)


def test_s3_keys_from_files_travel_as_their_paths(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("AKIAEXAMPLE\n")
    (tmp_path / "s").write_text("s3cr3t\n")
    t = {"bucket": "b", "access_key_id_file": str(tmp_path / "a"), "secret_access_key_file": str(tmp_path / "s")}
    s = load_settings(None, offload={"s3_targets": [t]})
    [target] = s.offload.s3_targets
    assert (target.access_key_id, target.secret_access_key) == ("AKIAEXAMPLE", "s3cr3t")
    dumped = s.model_dump_json()
    assert "AKIAEXAMPLE" not in dumped and "s3cr3t" not in dumped
    assert type(s).model_validate_json(dumped).offload.s3_targets[0].secret_access_key == "s3cr3t"
    with pytest.raises(ConfigError, match="access_key_id and access_key_id_file are both set"):
        load_settings(None, offload={"s3_targets": [{**t, "access_key_id": "x"}]})


@pytest.mark.parametrize(
    ("pulsar", "message"),
    [
        ({"auth_token": "a", "auth_token_file": "__FILE__"}, "auth_token and auth_token_file are both set"),
        ({"auth_token_file": "__MISSING__"}, "auth_token_file"),
        ({"auth_token_file": "__EMPTY__"}, "is empty"),
        ({"tls_trust_certs_file": "__MISSING__"}, "tls_trust_certs_file"),
    ],
)
def test_token_and_tls_settings_fail_at_start_with_the_key(
    tmp_path: Path, pulsar: dict[str, str], message: str
) -> None:
    (tmp_path / "t").write_text("tok")
    (tmp_path / "e").write_text("  \n")
    paths = {"__FILE__": str(tmp_path / "t"), "__MISSING__": str(tmp_path / "nope"), "__EMPTY__": str(tmp_path / "e")}
    with pytest.raises(ConfigError) as e:
        load_settings(None, pulsar={k: paths.get(v, v) for k, v in pulsar.items()})
    assert "pulsar" in str(e.value) and message in str(e.value)


def test_no_token_says_where_one_could_come_from() -> None:
    assert "LDW_PULSAR__AUTH_TOKEN" in load_settings(None).pulsar.token_source
    assert load_settings(None, pulsar={"auth_token": "x"}).pulsar.token_source == "pulsar.auth_token"


def test_the_driver_reads_the_secrets_from_their_files(tmp_path: Path) -> None:
    s = settings_with_secret_files(tmp_path)
    assert s.pulsar.auth_token == TOKEN
    [t] = s.offload.s3_targets
    assert (t.access_key_id, t.secret_access_key) == (ACCESS, SECRET)
    assert TOKEN not in repr(s) and SECRET not in repr(s)


# ---- bookkeeper.http_url / http_urls: every bookie once, in order ---------------------------------------------


def test_settings_list_every_bookie_once_in_order() -> None:
    s = BookKeeperSettings.model_validate(
        {"http_url": "http://b1:8000/", "http_urls": ["http://b2:8000", "http://b1:8000", "http://b3:8000/"]}
    )
    assert s.endpoints == ["http://b1:8000", "http://b2:8000", "http://b3:8000"]
    assert BookKeeperSettings().endpoints == ["http://127.0.0.1:8000"]


def test_a_bad_bookie_url_is_refused_with_its_key() -> None:
    with pytest.raises(ValidationError, match="http_urls"):
        BookKeeperSettings.model_validate({"http_urls": ["not a url"]})


# ---- the two metadata stores, each by one URL: the brokers' metadataStoreUrl, the bookies' metadataServiceUri ----


def test_bookkeeper_store_defaults_to_pulsars_under_ledgers() -> None:
    zs = load_settings(zookeeper={"metadata_store_url": "zk:zk-1:2181,zk-2:2181/pulsar"}).zookeeper
    assert zs.bookkeeper_uri == "metadata-store:zk:zk-1:2181,zk-2:2181/pulsar/ledgers"
    assert parse_metadata_service_uri(zs.bookkeeper_uri) == StoreUrl("zk", "zk-1:2181,zk-2:2181", "/pulsar/ledgers")


def test_stores_apart() -> None:
    zs = load_settings(
        zookeeper={"metadata_store_url": "zk:zk:2181", "metadata_service_uri": "zk+hierarchical://bk-zk:2181/ledgers"}
    ).zookeeper
    assert zs.bookkeeper_uri == "zk+hierarchical://bk-zk:2181/ledgers"


def test_no_metadata_store_at_all_still_loads() -> None:
    zs = load_settings(zookeeper={"metadata_store_url": ""}).zookeeper
    assert zs.metadata_store_url is None and zs.bookkeeper_uri is None


def test_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LDW_ZOOKEEPER__METADATA_SERVICE_URI", "zk://bk-zk:2181/bk/ledgers")
    assert load_settings().zookeeper.bookkeeper_uri == "zk://bk-zk:2181/bk/ledgers"


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("hosts", "zookeeper.metadata_store_url (the brokers' metadataStoreUrl"),
        ("bookkeeper_hosts", "zookeeper.metadata_service_uri (the bookies' metadataServiceUri"),
        ("ledgers_root", "zookeeper.metadata_service_uri (the bookies' metadataServiceUri"),
    ],
)
def test_an_old_key_is_refused_naming_the_new_one(old: str, new: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"zookeeper.{old} is no longer read: set {new}")):
        load_settings(zookeeper={old: "/ledgers" if old == "ledgers_root" else "zk-1:2181"})
    monkeypatch.setenv(f"LDW_ZOOKEEPER__{old.upper()}", "zk-1:2181")
    with pytest.raises(ConfigError, match=re.escape(f"zookeeper.{old} is no longer read")):
        load_settings()


@pytest.mark.parametrize(
    ("url", "store"),
    [
        # Pulsar's spellings (MetadataStoreFactoryImpl: zk:, else a bare connect string; ZKMetadataStore strips zk:).
        ("zk:zk-1:2181,zk-2:2181/pulsar", StoreUrl("zk", "zk-1:2181,zk-2:2181", "/pulsar")),
        ("zk:zk-1:2181", StoreUrl("zk", "zk-1:2181", "")),
        ("metadata-store:zk:zk-1:2181", StoreUrl("zk", "zk-1:2181", "")),
        ("zk-1:2181/pulsar", StoreUrl("zk", "zk-1:2181", "/pulsar")),
        ("127.0.0.1:2181", StoreUrl("zk", "127.0.0.1:2181", "")),
    ],
)
def test_pulsars_metadata_store_url_chooses_zookeeper(url: str, store: StoreUrl) -> None:
    assert parse_metadata_store_url(url) == store
    assert load_settings(zookeeper={"metadata_store_url": url}).zookeeper.metadata_store_url == url


@pytest.mark.parametrize(
    ("uri", "store"),
    [
        # BookKeeper's spellings (zk[+ledger manager]://, hosts split by ;) and Pulsar's metadata-store: driver.
        ("zk+hierarchical://bk-1:2181;bk-2:2181/ledgers", StoreUrl("zk", "bk-1:2181,bk-2:2181", "/ledgers")),
        ("zk+longhierarchical://bk-1:2181/ledgers", StoreUrl("zk", "bk-1:2181", "/ledgers")),
        ("zk+flat://bk-1:2181/ledgers", StoreUrl("zk", "bk-1:2181", "/ledgers")),
        ("zk+null://bk-1:2181/ledgers", StoreUrl("zk", "bk-1:2181", "/ledgers")),
        ("zk://zk-1:2181/bk/ledgers", StoreUrl("zk", "zk-1:2181", "/bk/ledgers")),
        ("metadata-store:zk:zk-1:2181/ledgers", StoreUrl("zk", "zk-1:2181", "/ledgers")),
    ],
)
def test_bookkeepers_metadata_service_uri_chooses_zookeeper(uri: str, store: StoreUrl) -> None:
    assert parse_metadata_service_uri(uri) == store
    assert load_settings(zookeeper={"metadata_service_uri": uri}).zookeeper.bookkeeper_uri == uri


@pytest.mark.parametrize(
    ("zookeeper", "message"),
    [
        # The stores without a provider here, refused by name.
        ({"metadata_store_url": "oxia://oxia:6648/default"}, "is Oxia (oxia:)"),
        ({"metadata_store_url": "metadata-store:oxia://oxia:6648"}, "is Oxia (oxia:)"),
        ({"metadata_store_url": "etcd:http://etcd:2379"}, "is etcd (etcd:)"),
        ({"metadata_store_url": "rocksdb:/data/meta"}, "is RocksDB (rocksdb:)"),
        ({"metadata_service_uri": "etcd://etcd:2379/ledgers"}, "is etcd (etcd:)"),
        ({"metadata_service_uri": "metadata-store:oxia://oxia:6648/ledgers"}, "is Oxia (oxia:)"),
        # An unknown scheme, refused naming the key.
        ({"metadata_store_url": "foo://x:1"}, "zookeeper.metadata_store_url: Value error, 'foo://x:1': unknown"),
        (
            {"metadata_service_uri": "bk://zk-1:2181/ledgers"},
            "zookeeper.metadata_service_uri: Value error, 'bk://zk-1:2181/ledgers': unknown",
        ),
        # Bad values.
        ({"metadata_store_url": "zk:zk-1:21x1"}, "has no valid port"),
        ({"metadata_store_url": "zk:a:2181,,b:2181"}, "is not a host[:port]"),
        ({"metadata_store_url": "zk:zk-1:2181/pulsar/"}, "no trailing or double slash"),
        ({"metadata_service_uri": "zk+hierarchical://zk-1:2181"}, "no ledgers root"),
        ({"metadata_service_uri": "zk-1:2181/ledgers"}, "metadataServiceUri"),
        (
            {"metadata_store_url": None, "metadata_service_uri": "zk://bk:2181/ledgers"},
            "zookeeper.metadata_service_uri is set but zookeeper.metadata_store_url is empty",
        ),
    ],
)
def test_a_bad_url_is_refused_naming_it(zookeeper: dict[str, str | None], message: str) -> None:
    with pytest.raises(ConfigError) as e:
        load_settings(zookeeper=zookeeper)
    assert message in str(e.value)
