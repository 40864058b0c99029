"""The data source's options (worker.nightly.source_options): both spellings, the connector's offsets JSON,
pulsar.client.* mapped onto pulsar.Client keyword arguments, and every bad option named."""

from __future__ import annotations

import inspect
import json

import pulsar
import pytest

from worker.nightly.source_options import (
    OptionError,
    TopicSelection,
    is_pending_delete_schema,
    parse,
    pattern_matches,
)

URLS = {"service.url": "pulsar://b:6650", "admin.url": "http://b:8080/"}


def lower(d: dict[str, str]) -> dict[str, str]:
    """As Spark hands options to a Python data source: keys lower-cased."""
    return {k.lower(): v for k, v in d.items()}


def test_both_spellings_and_their_default_decoding() -> None:
    own = parse(lower({"service_url": "pulsar://b:6650", "admin_url": "http://b:8080", "topic": "t"}))
    conn = parse(lower({**URLS, "topic": "t"}))
    assert (
        (own.service_url, own.admin_url) == (conn.service_url, conn.admin_url) == ("pulsar://b:6650", "http://b:8080")
    )
    assert own.selection.topics == conn.selection.topics == ("persistent://public/default/t",)
    # The source's own names keep their first contract: every row decoded; the connector's: by the schema.
    assert (own.decode, conn.decode) == ("pending_delete", "auto")
    with pytest.raises(OptionError, match=r"'service_url' and 'service\.url' disagree"):
        parse(lower({**URLS, "service_url": "pulsar://other:6650", "topic": "t"}))


def test_topics_and_pattern() -> None:
    o = parse(lower({**URLS, "topics": "a, tenant/ns/b ,persistent://t2/n2/c,a"}))
    assert o.selection.topics == (
        "persistent://public/default/a",
        "persistent://tenant/ns/b",
        "persistent://t2/n2/c",
    )
    p = parse(lower({**URLS, "topicsPattern": "persistent://pulsar/system/__ledger_deletion.*"})).selection
    assert (p.namespace, p.pattern) == ("pulsar/system", "pulsar/system/__ledger_deletion.*")
    assert pattern_matches(p, "persistent://pulsar/system/__ledger_deletion-DLQ")
    assert not pattern_matches(p, "persistent://pulsar/other/__ledger_deletion")
    assert parse(lower({**URLS, "topicsPattern": "topic.*"})).selection.namespace == "public/default"
    assert pattern_matches(TopicSelection("topicsPattern", namespace="a/b", pattern="a/b/x"), "persistent://a/b/x")
    assert not pattern_matches(TopicSelection("topicsPattern", namespace="a/b", pattern="a/b/x"), "persistent://a/b/xy")


def test_offsets_json_as_the_connector_writes_it() -> None:
    # JsonUtils.topicOffsets: {topic: MessageId.toByteArray()} with Java's signed bytes.
    mid = pulsar.MessageId(-1, 11, 200, -1).serialize()
    signed = [b - 256 if b > 127 else b for b in mid]
    assert any(b < 0 for b in signed)
    o = parse(lower({**URLS, "topic": "t", "startingOffsets": json.dumps({"t": signed})}))
    assert o.starting.lookup("persistent://public/default/t", "persistent://public/default/t", -1) == (11, 200)
    # An id naming partition 1 of a partitioned topic given by the topic's own name.
    part1 = pulsar.MessageId(1, 5, 6, -1).serialize()
    o = parse(lower({**URLS, "topic": "p", "endingOffsets": json.dumps({"p": list(part1)})}))
    base = "persistent://public/default/p"
    assert o.ending.lookup(f"{base}-partition-1", base, 1) == (5, 6)
    assert o.ending.lookup(f"{base}-partition-0", base, 0) is None
    # MessageId.earliest as a start / latest as an end: the defaults spelled out.
    earliest = [8, -1, -1, -1, -1, -1, -1, -1, -1, -1, 1, 16, -1, -1, -1, -1, -1, -1, -1, -1, -1, 1]
    latest = [8, -1, -1, -1, -1, -1, -1, -1, -1, 127, 16, -1, -1, -1, -1, -1, -1, -1, -1, 127]
    o = parse(
        lower(
            {
                **URLS,
                "topic": "t",
                "startingOffsets": json.dumps({"t": earliest}),
                "endingOffsets": json.dumps({"t": latest}),
            }
        )
    )
    assert (dict(o.starting.positions), dict(o.ending.positions)) == ({}, {})
    for option, value in (("startingOffsets", {"t": latest}), ("endingOffsets", {"t": earliest})):
        with pytest.raises(OptionError, match=f"'{option}'.*not allowed"):
            parse(lower({**URLS, "topic": "t", option: json.dumps(value)}))


def test_client_options_map_onto_pulsar_client_keywords() -> None:
    o = parse(
        lower(
            {
                **URLS,
                "topic": "t",
                "pulsar.client.operationTimeoutMs": "1500",
                "pulsar.client.connectionTimeoutMs": "700",
                "pulsar.client.numIoThreads": "2",
                "pulsar.client.tlsTrustCertsFilePath": "/ca.pem",
                "pulsar.client.tlsHostnameVerificationEnable": "true",
                "pulsar.client.tlsAllowInsecureConnection": "false",
                "pulsar.client.authPluginClassName": "org.apache.pulsar.client.impl.auth.AuthenticationToken",
                "pulsar.client.authParams": "file:///run/secrets/token",
            }
        )
    )
    assert dict(o.client_kwargs) == {"operation_timeout_seconds": 2, "connection_timeout_ms": 700, "io_threads": 2}
    assert (o.ca_file, o.token_file) == ("/ca.pem", "/run/secrets/token")
    accepted = set(inspect.signature(pulsar.Client.__init__).parameters)
    from worker.nightly.source_options import _CLIENT_KEYS

    assert {kwarg for _, kwarg, _ in _CLIENT_KEYS.values()} <= accepted


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"topic": "t", "startingOffset": "earliest"}, "startingoffset"),
        ({}, "topic"),
        ({"topic": "t", "topicsPattern": "x"}, "topic"),
        ({"topic": "a/b/c/d/e"}, "topic"),
        ({"topics": " , "}, "topics"),
        ({"topicsPattern": "non-persistent://a/b/c"}, "topicsPattern"),
        ({"topic": "t", "startingOffsets": "latest"}, "startingOffsets"),
        ({"topic": "t", "endingOffsets": "earliest"}, "endingOffsets"),
        ({"topic": "t", "endingOffsets": '{"t": "ledger 3"}'}, "endingOffsets"),
        ({"topic": "t", "endingOffsets": '{"t": [300]}'}, "endingOffsets"),
        ({"topic": "t", "read_timeout_ms": "0"}, "read_timeout_ms"),
        ({"topic": "t", "failOnDataLoss": "false"}, "failOnDataLoss"),
        ({"topic": "t", "pulsar.client.useTls": "yes"}, "pulsar.client.useTls"),
        (
            {"topic": "t", "pulsar.client.tlsHostnameVerificationEnable": "false"},
            "pulsar.client.tlsHostnameVerificationEnable",
        ),
        ({"topic": "t", "pulsar.client.authPluginClassName": "AuthenticationTls"}, "pulsar.client.authPluginClassName"),
        ({"topic": "t", "pulsar.client.authPluginClassName": "token"}, "pulsar.client.authPluginClassName"),
        ({"topic": "t", "pulsar.client.authParams": "eyJhbGciOi.secret"}, "pulsar.client.authParams"),
    ],
)
def test_a_bad_option_is_named(options: dict[str, str], named: str) -> None:
    with pytest.raises(OptionError, match=f"options? ('[^']*', )*'{named}'") as e:
        parse(lower({**URLS, **options}))
    assert "secret" not in str(e.value)


def test_the_token_itself_is_never_an_option() -> None:
    with pytest.raises(OptionError, match="'token' is not accepted") as e:
        parse(lower({**URLS, "topic": "t", "token": "s3cr3t"}))
    assert "s3cr3t" not in str(e.value)


def test_schema_registry_entry_of_the_worker_avro_schema() -> None:
    from worker.formats.message import AVRO_SCHEMA

    assert is_pending_delete_schema({"type": "AVRO", "data": json.dumps(AVRO_SCHEMA)})
    # The same record as a Java producer registers it: fully qualified name, its own formatting.
    java = {**AVRO_SCHEMA, "name": f"{AVRO_SCHEMA['namespace']}.PendingDeleteLedgerInfo"}
    java.pop("namespace")
    assert is_pending_delete_schema({"type": "AVRO", "data": json.dumps(java, indent=2)})
    assert not is_pending_delete_schema({"type": "STRING", "data": ""})
    assert not is_pending_delete_schema({"type": "AVRO", "data": json.dumps({**AVRO_SCHEMA, "name": "Other"})})
    assert not is_pending_delete_schema(None)
