"""The local stack's profiles are data (deploy/local/profiles/) and its configuration overrides too
(deploy/local/overrides/): what `stack.sh env --json` and `stack.sh render` make of them, no process started."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from testkit.stack import PROFILES, Profile, drop_data, key_values, pulsar_line, pulsar_lines

OVERRIDES = PROFILES.parent / "overrides"
NAMES = sorted(p.stem for p in PROFILES.glob("*.env") if p.stem != "defaults")
# The lines a stack runs on (deploy/local/pulsar-lines.txt), the default one first.
DEFAULT = pulsar_line("default").version
STACK_VERSIONS = [DEFAULT, *(r.version for r in pulsar_lines() if r.dist and r.version != DEFAULT)]
CLIENT_KEYS = {"PULSAR_ADMIN_URL", "PULSAR_SERVICE_URL", "BOOKIE_HTTP_URL", "ZOOKEEPER_HOSTS", "S3_ENDPOINT"}


def ports(addresses: dict[str, str]) -> set[int]:
    return {int(p) for v in addresses.values() for p in re.findall(r"127\.0\.0\.1:(\d+)", v)}


def placed(name: str, tmp_path: Path, version: str) -> Profile:
    """Profile ``name`` on Pulsar ``version``, its data under ``tmp_path`` (``env`` makes its run directory)."""
    return Profile(name, {"PULSAR_VERSION": version, "STACK_DIR": str(tmp_path / name)}, prefix="LDW_TEST_")


@pytest.mark.parametrize("version", STACK_VERSIONS)
def test_every_profile_prints_its_addresses_and_no_two_share_a_port(tmp_path: Path, version: str) -> None:
    seen: dict[int, str] = {}
    for name in NAMES:
        env = placed(name, tmp_path, version).addresses()
        assert CLIENT_KEYS <= set(env), (name, env)
        assert env["PROFILE"] == name and env["PULSAR_VERSION"] == version
        assert env["KIND"] in ("standalone", "cluster") and env["AUTH"] in ("0", "1")
        for port in ports(env):
            assert port not in seen, f"{name} and {seen[port]} both use port {port} on {version}"
            seen[port] = name
    # Each line side by side with the default one, but for the extension suite's instance, which the 5.0 subset
    # takes after it, and the upgrade profiles: one stack each, whose processes move from line to line.
    if version != DEFAULT:
        beside = [n for n in NAMES if n != "extension" and not n.startswith("upgrade-")]
        default = {p for n in beside for p in ports(placed(n, tmp_path, DEFAULT).addresses())}
        this = {p for n in beside for p in ports(placed(n, tmp_path, version).addresses())}
        assert not default & this


def test_an_unknown_profile_is_refused_naming_the_known_ones() -> None:
    r = Profile("nonesuch").run("env")
    assert r.returncode == 2
    assert f"unknown PROFILE=nonesuch ({'|'.join(NAMES)})" in r.stderr


def test_the_environment_wins_over_a_profile_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LDW_TEST_WEB_PORT", "18999")
    env = placed("extension", tmp_path, DEFAULT).addresses()
    assert env["PULSAR_ADMIN_URL"] == "http://127.0.0.1:18999"
    assert env["STACK_DIR"] == str(tmp_path / "extension")


def overrides(name: str) -> dict[str, str]:
    return key_values(OVERRIDES / name)


def test_render_applies_every_override_expanded(tmp_path: Path) -> None:
    """The extension suite's instance: config/standalone.conf with the standalone, bookie and extension
    overrides (every ``${VAR}`` expanded), its profile's broker.conf lines, then the environment's."""
    profile = placed("extension", tmp_path, DEFAULT)
    r = profile.run("render", BROKER_EXTENSION_CONF="ledgerDeletionMaxWaitSeconds=7", BROKER_CONF="foo=bar")
    assert r.returncode == 0, r.stderr[-2000:]
    rendered = key_values(tmp_path / "extension" / "run" / "standalone.conf")
    expected = [*overrides("standalone.conf"), *overrides("bookie-reclaim.conf"), *overrides("broker-extension.conf")]
    for key in expected:
        assert key in rendered and "${" not in rendered[key], (key, rendered.get(key))
    assert rendered["webServicePort"] == "18080" and rendered["httpServerPort"] == "18000"
    assert rendered["s3ManagedLedgerOffloadServiceEndpoint"] == "http://127.0.0.1:15000"
    assert rendered["ledgerDeletionSendDelaySeconds"] == "1"
    assert rendered["ledgerDeletionMarkKeyFile"] == str(tmp_path / "extension" / "broker-mark.key")
    assert rendered["ledgerDeletionDeferBrokerDeletes"] == "false"
    assert rendered["delayedDeliveryMinIndexCountPerBucket"] == "5"  # the profile's own line
    assert rendered["ledgerDeletionMaxWaitSeconds"] == "7" and rendered["foo"] == "bar"


def test_render_of_stock_brokers_sets_no_extension_key(tmp_path: Path) -> None:
    r = placed("standalone", tmp_path, DEFAULT).run("render", BROKER_EXTENSION="0", TIERED_STORAGE="0")
    assert r.returncode == 0, r.stderr[-2000:]
    rendered = key_values(tmp_path / "standalone" / "run" / "standalone.conf")
    assert not [k for k, v in rendered.items() if k.startswith("ledgerDeletion") or "org.ledgerdeletion" in v]
    assert rendered["managedLedgerOffloadDriver"] == ""


def test_each_upgrade_cluster_broker_names_its_internal_listener(tmp_path: Path) -> None:
    """A 5.0 broker looks topics up by the listener named ``internal``, which a 4.x broker advertises only when told:
    every broker of the rolling-upgrade cluster names its own, binary and HTTP, from the profile's BROKER_CONF
    (``${node_broker_port}`` and ``${node_web_port}`` expanded per broker)."""
    r = placed("upgrade-cluster", tmp_path, DEFAULT).run("render")
    assert r.returncode == 0, r.stderr[-2000:]
    ports = key_values(PROFILES / "upgrade-cluster.env")
    for name, suffix in (("broker1", ""), ("broker2", "_2")):
        rendered = key_values(tmp_path / "upgrade-cluster" / "run" / f"{name}.conf")
        assert rendered["advertisedListeners"] == (
            f"internal:pulsar://127.0.0.1:{ports['BROKER_PORT' + suffix]},"
            f"internal:http://127.0.0.1:{ports['WEB_PORT' + suffix]}"
        )
        assert rendered["internalListenerName"] == "internal"


def test_drop_data_keeps_a_stopped_instances_logs_only(tmp_path: Path) -> None:
    stack_dir = tmp_path / ".data-bench-x"
    (stack_dir / "logs").mkdir(parents=True)
    (stack_dir / "logs" / "broker1.out").write_text("kept")
    (stack_dir / "bookie1" / "current").mkdir(parents=True)
    (stack_dir / "bookie1" / "current" / "0.log").write_bytes(b"x" * 4096)
    (stack_dir / "zookeeper").mkdir()
    (stack_dir / "zookeeper" / "snapshot.0").write_bytes(b"z" * 100)
    (stack_dir / "broker-mark.key").write_bytes(b"k" * 32)
    (stack_dir / "run").symlink_to(tmp_path)  # a link is removed, never followed

    assert drop_data(stack_dir) == 4096 + 100 + 32 + len(str(tmp_path))
    assert sorted(c.name for c in stack_dir.iterdir()) == ["logs"]
    assert (stack_dir / "logs" / "broker1.out").read_text() == "kept"
    assert tmp_path.is_dir()
    assert drop_data(tmp_path / "absent") == 0
