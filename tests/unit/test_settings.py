"""Settings (``worker.settings``): YAML overlaid by LDW_ environment variables; bad configuration names its key."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from tests.unit.fakes import ACCESS, SECRET, TOKEN, settings_with_secret_files
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


def test_delete_via_zookeeper_needs_hosts(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"zookeeper\.hosts"):
        load_settings(write(tmp_path, "bookkeeper:\n  delete_via: zookeeper\nzookeeper:\n  hosts: null\n"))


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


# ---- zookeeper.hosts (Pulsar's metadata store) and zookeeper.bookkeeper_hosts (BookKeeper's), checked at load ----


def test_bookkeeper_store_defaults_to_pulsars() -> None:
    zs = load_settings(zookeeper={"hosts": "zk-1:2181,zk-2:2181/pulsar"}).zookeeper
    assert zs.bookkeeper_hosts is None
    assert zs.bookkeeper_store == "zk-1:2181,zk-2:2181/pulsar"
    assert zs.bookkeeper_store_key == "zookeeper.hosts"


def test_stores_apart() -> None:
    zs = load_settings(
        zookeeper={"hosts": "zk:2181", "bookkeeper_hosts": "bk-zk:2181", "ledgers_root": "/ledgers/"}
    ).zookeeper
    assert (zs.bookkeeper_store, zs.bookkeeper_store_key, zs.ledgers_root) == (
        "bk-zk:2181",
        "zookeeper.bookkeeper_hosts",
        "/ledgers",
    )


def test_no_zookeeper_at_all_still_loads() -> None:
    zs = load_settings(zookeeper={"hosts": ""}).zookeeper
    assert zs.hosts is None and zs.bookkeeper_store is None


def test_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LDW_ZOOKEEPER__BOOKKEEPER_HOSTS", "bk-zk:2181/bk")
    assert load_settings().zookeeper.bookkeeper_store == "bk-zk:2181/bk"


@pytest.mark.parametrize(
    ("zookeeper", "key"),
    [
        ({"hosts": "zk:127.0.0.1:2181"}, "zookeeper.hosts"),  # Pulsar's metadataStoreUrl pasted as is
        ({"bookkeeper_hosts": "zk+hierarchical://bk:2181/ledgers"}, "zookeeper.bookkeeper_hosts"),
        ({"hosts": "zk:21x1"}, "zookeeper.hosts"),
        ({"bookkeeper_hosts": "bk:2181/ledgers/"}, "zookeeper.bookkeeper_hosts"),
        ({"hosts": "a:2181,,b:2181"}, "zookeeper.hosts"),
        ({"ledgers_root": "ledgers"}, "zookeeper.ledgers_root"),
        (
            {"hosts": None, "bookkeeper_hosts": "bk:2181"},
            "zookeeper.bookkeeper_hosts is set but zookeeper.hosts is empty",
        ),
    ],
)
def test_a_bad_value_names_its_key(zookeeper: dict[str, str | None], key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_settings(zookeeper=zookeeper)


# ---- the URLs an operator already has: the brokers' metadataStoreUrl, the bookies' metadataServiceUri ----


@pytest.mark.parametrize(
    ("zookeeper", "hosts", "bookkeeper_store", "ledgers_root"),
    [
        ({"metadata_store_url": "zk:zk-1:2181,zk-2:2181/pulsar"}, "zk-1:2181,zk-2:2181/pulsar", None, "/ledgers"),
        ({"metadata_store_url": "metadata-store:zk:zk-1:2181"}, "zk-1:2181", None, "/ledgers"),
        (
            {
                "metadata_store_url": "zk:zk-1:2181",
                "metadata_service_uri": "zk+hierarchical://bk-1:2181;bk-2:2181/ledgers",
            },
            "zk-1:2181",
            "bk-1:2181,bk-2:2181",
            "/ledgers",
        ),
        ({"metadata_service_uri": "zk://zk-1:2181/bk/ledgers"}, "127.0.0.1:2181", "zk-1:2181", "/bk/ledgers"),
        ({"metadata_service_uri": "metadata-store:zk:zk-1:2181/ledgers"}, "127.0.0.1:2181", "zk-1:2181", "/ledgers"),
        # A key given beside its URL, saying the same.
        ({"hosts": "zk-1:2181", "metadata_store_url": "zk:zk-1:2181"}, "zk-1:2181", None, "/ledgers"),
    ],
)
def test_the_urls_an_operator_has_set_the_keys(
    zookeeper: dict[str, str], hosts: str, bookkeeper_store: str | None, ledgers_root: str
) -> None:
    zs = load_settings(zookeeper=zookeeper).zookeeper
    assert (zs.hosts, zs.bookkeeper_store, zs.ledgers_root) == (hosts, bookkeeper_store or hosts, ledgers_root)


def test_a_url_names_itself_in_errors_about_its_store() -> None:
    zs = load_settings(
        zookeeper={"metadata_store_url": "zk:zk-1:2181", "metadata_service_uri": "zk+hierarchical://zk-1:2181/ledgers"}
    ).zookeeper
    assert (zs.pulsar_store_key, zs.bookkeeper_store_key) == (
        "zookeeper.metadata_store_url",
        "zookeeper.metadata_service_uri",
    )


@pytest.mark.parametrize(
    ("zookeeper", "message"),
    [
        ({"metadata_store_url": "oxia://oxia:6648"}, "not a ZooKeeper metadata store"),
        ({"metadata_store_url": "etcd:etcd:2379"}, "not a ZooKeeper metadata store"),
        ({"metadata_store_url": "zk:zk-1:21x1"}, "has no valid port"),
        (
            {"hosts": "zk-2:2181", "metadata_store_url": "zk:zk-1:2181"},
            "zookeeper.hosts 'zk-2:2181' and zookeeper.metadata_store_url",
        ),
        ({"metadata_service_uri": "bk://zk-1:2181/ledgers"}, "metadataServiceUri"),
        ({"metadata_service_uri": "zk+hierarchical://zk-1:2181"}, "no ledgers root"),
        ({"metadata_service_uri": "metadata-store:oxia://oxia:6648/ledgers"}, "not a ZooKeeper metadata store"),
        (
            {"ledgers_root": "/other", "metadata_service_uri": "zk+hierarchical://zk-1:2181/ledgers"},
            "zookeeper.ledgers_root '/other' and zookeeper.metadata_service_uri",
        ),
    ],
)
def test_a_bad_url_is_refused_naming_it(zookeeper: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_settings(zookeeper=zookeeper)
