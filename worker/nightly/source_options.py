"""The options of the ``pulsar`` / ``pulsar-ldw`` data source, parsed and checked without any I/O: the source's
own spelling and that of StreamNative's pulsar-spark connector, side by side (docs/nightly.md, "The
``pulsar`` data source", has the table). Spark hands the keys over lower-cased, as the connector reads them.
Every bad option raises :class:`OptionError` naming it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from worker.formats.message import AVRO_SCHEMA
from worker.formats.topic_name import InvalidTopicName, TopicName

Position = tuple[int, int]  # (ledger id, entry id), ordered as the topic stores them

# What decides the columns: ``pending_delete`` (every message decoded as PendingDeleteLedgerInfo, with a
# decode_error when it is not one), ``raw`` (``value`` as bytes) or ``auto`` (pending_delete when the schema
# of every topic read is the worker's Avro schema, read through the admin API when the query is planned).
DECODE_MODES = ("auto", "pending_delete", "raw")

# Java's MessageId.earliest / MessageId.latest, as the connector's JSON offsets write them.
_EARLIEST: Position = (-1, -1)
_LATEST: Position = (2**63 - 1, 2**63 - 1)
# The token plugin, by the names Pulsar's Java client accepts for it.
_TOKEN_PLUGINS = {"org.apache.pulsar.client.impl.auth.authenticationtoken", "token"}


class OptionError(ValueError):
    pass


def _err(option: str, why: str) -> OptionError:
    return OptionError(f"pulsar data source: option {option!r}: {why}")


def _int(option: str, value: str, minimum: int = 0) -> int:
    try:
        n = int(value)
    except ValueError:
        raise _err(option, f"not an integer: {value!r}") from None
    if n < minimum:
        raise _err(option, f"must be at least {minimum}: {value!r}")
    return n


def _bool(option: str, value: str) -> bool:
    v = value.strip().lower()
    if v not in ("true", "false"):
        raise _err(option, f"must be true or false: {value!r}")
    return v == "true"


# pulsar.client.<Java ClientConfigurationData key> -> pulsar.Client keyword argument and value conversion.
# Keys are matched case-insensitively, as the connector does.
def _ms_to_s(option: str, v: str) -> int:
    return max(1, math.ceil(_int(option, v, 1) / 1000))


_CLIENT_KEYS: dict[str, tuple[str, str, Any]] = {
    k.lower(): (k, kwarg, conv)
    for k, kwarg, conv in (
        ("operationTimeoutMs", "operation_timeout_seconds", _ms_to_s),
        ("connectionTimeoutMs", "connection_timeout_ms", lambda o, v: _int(o, v, 1)),
        ("numIoThreads", "io_threads", lambda o, v: _int(o, v, 1)),
        ("numListenerThreads", "message_listener_threads", lambda o, v: _int(o, v, 1)),
        ("concurrentLookupRequest", "concurrent_lookup_requests", lambda o, v: _int(o, v, 1)),
        ("statsIntervalSeconds", "stats_interval_in_seconds", lambda o, v: _int(o, v, 0)),
        ("useTls", "use_tls", _bool),
        ("listenerName", "listener_name", lambda o, v: v),
        ("tlsCertificateFilePath", "tls_certificate_file_path", lambda o, v: v),
        ("tlsKeyFilePath", "tls_private_key_file_path", lambda o, v: v),
    )
}
# Handled apart: they map onto the source's own options or onto what it never relaxes.
_CLIENT_SPECIAL = {
    k.lower(): k
    for k in (
        "tlsTrustCertsFilePath tlsAllowInsecureConnection tlsHostnameVerificationEnable authPluginClassName authParams"
    ).split()
}

# Every top-level option, lower-cased -> the spelling error messages use.
_OPTIONS = {
    k.lower(): k
    for k in (
        "service_url service.url admin_url admin.url topic topics topicsPattern subscription startingOffsets"
        " endingOffsets token_file tls_trust_certs_file read_timeout_ms pollTimeoutMs failOnDataLoss decode"
    ).split()
}
_CLIENT_PREFIX = "pulsar.client."


@dataclass(frozen=True)
class TopicSelection:
    """Exactly one of: ``topics`` (named) or ``pattern`` (``tenant/ns`` and a regex over
    ``tenant/namespace/topic``, as Pulsar's ``TopicList.filterTopics`` matches it)."""

    option: str  # the option it came from (for messages)
    topics: tuple[str, ...] = ()
    namespace: str | None = None
    pattern: str | None = None


@dataclass(frozen=True)
class Offsets:
    """``earliest`` / ``latest`` or a position per topic (partition) name. ``inclusive`` both ends, as the
    connector reads a user-given message id."""

    option: str
    kind: str  # "earliest" | "latest" | "specific"
    positions: Mapping[str, Position] = field(default_factory=dict)

    def lookup(self, topic: str, base: str, partition: int) -> Position | None:
        """The position given for this topic partition: by its own name, or by its partitioned topic's name
        when the message id names that partition."""
        if self.kind != "specific":
            return None
        if topic in self.positions:
            return self.positions[topic]
        return self.positions.get(f"{base}#{partition}")


@dataclass(frozen=True)
class SourceOptions:
    service_url: str
    admin_url: str
    selection: TopicSelection
    subscription: str | None = None
    token_file: str | None = None
    ca_file: str | None = None
    read_timeout_ms: int = 30000
    decode: str = "auto"
    starting: Offsets = Offsets("startingOffsets", "earliest")
    ending: Offsets = Offsets("endingOffsets", "latest")
    client_kwargs: Mapping[str, Any] = field(default_factory=dict)


def full_topic_name(name: str) -> str:
    """A topic as Pulsar's TopicName.get reads it: ``t`` is ``persistent://public/default/t``,
    ``tenant/ns/t`` is persistent."""
    name = name.strip()
    if "://" in name:
        return name
    if "/" not in name:
        return f"persistent://public/default/{name}"
    return f"persistent://{name}"


def _check_topic(option: str, name: str) -> str:
    try:
        return str(TopicName.parse(full_topic_name(name)))
    except InvalidTopicName as e:
        raise _err(option, str(e)) from None


def _selection(opts: Mapping[str, str]) -> TopicSelection:
    given = [k for k in ("topic", "topics", "topicsPattern") if opts.get(k.lower())]
    if not given:
        raise OptionError("pulsar data source: option 'topic' (or 'topics', 'topicsPattern') is required")
    if len(given) > 1:
        raise OptionError(
            f"pulsar data source: options {', '.join(repr(g) for g in given)}: give exactly one of 'topic', "
            "'topics', 'topicsPattern'"
        )
    key = given[0]
    value = str(opts[key.lower()])
    if key == "topic":
        return TopicSelection(key, (_check_topic(key, value),))
    if key == "topics":
        names = [n.strip() for n in value.split(",") if n.strip()]
        if not names:
            raise _err(key, "no topic in the list")
        return TopicSelection(key, tuple(dict.fromkeys(_check_topic(key, n) for n in names)))
    # topicsPattern: the namespace is the pattern's (public/default without one), as Pulsar's client reads it.
    full = full_topic_name(value)
    domain, _, rest = full.partition("://")
    if domain != "persistent":
        raise _err(key, f"only persistent topics: {value!r}")
    parts = rest.split("/", 2)
    if len(parts) != 3 or not parts[0] or not parts[1]:
        raise _err(key, f"expected [persistent://]tenant/namespace/regex or a regex: {value!r}")
    try:
        re.compile(rest)
    except re.error as e:
        raise _err(key, f"not a regular expression: {e}") from None
    return TopicSelection(key, namespace=f"{parts[0]}/{parts[1]}", pattern=rest)


def _message_id_position(option: str, topic: str, raw: object) -> tuple[Position, int]:
    """A message id as the connector's JSON writes it (``MessageId.toByteArray()``: Java's signed bytes)."""
    import pulsar

    if not isinstance(raw, list) or not all(isinstance(b, int) and -128 <= b <= 255 for b in raw) or not raw:
        raise _err(option, f"{topic}: expected a message id as a JSON array of bytes: {raw!r}")
    try:
        mid = pulsar.MessageId.deserialize(bytes(b & 0xFF for b in raw))
    except Exception as e:  # the C++ parser's own exception types
        raise _err(option, f"{topic}: not a serialized message id: {e}") from None
    return (int(mid.ledger_id()), int(mid.entry_id())), int(mid.partition())


def _offsets(opts: Mapping[str, str], option: str, default: str) -> Offsets:
    value = str(opts.get(option.lower()) or default).strip()
    forbidden = "latest" if option == "startingOffsets" else "earliest"
    if value.lower() in ("earliest", "latest"):
        if value.lower() == forbidden:
            raise _err(option, f"{forbidden!r} is not allowed for a batch query (as in the pulsar-spark connector)")
        return Offsets(option, value.lower())
    try:
        parsed = json.loads(value)
    except ValueError:
        raise _err(option, f"expected 'earliest', 'latest' or a JSON object of message ids: {value[:200]!r}") from None
    if not isinstance(parsed, dict) or not parsed:
        raise _err(option, "expected a JSON object {topic: message id bytes}")
    positions: dict[str, Position] = {}
    for name, raw in parsed.items():
        topic = _check_topic(option, str(name))
        pos, partition = _message_id_position(option, str(name), raw)
        if pos == (_LATEST if option == "startingOffsets" else _EARLIEST):
            raise _err(option, f"{name}: MessageId.{forbidden} is not allowed for a batch query")
        if pos == (_EARLIEST if option == "startingOffsets" else _LATEST):
            continue  # the default bound, spelled out
        t = TopicName.parse(topic)
        if t.partitioned_base == t and partition >= 0:
            # The partitioned topic's name with an id that names its partition (what a Java consumer of a
            # partitioned topic hands back).
            positions[f"{topic}#{partition}"] = pos
        else:
            positions[topic] = pos
    return Offsets(option, "specific", positions)


def _one_of(opts: Mapping[str, str], own: str, connector: str, *, required: bool) -> str | None:
    a, b = opts.get(own.lower()), opts.get(connector.lower())
    if a and b and a != b:
        raise OptionError(f"pulsar data source: options {own!r} and {connector!r} disagree: give one")
    v = a or b
    if required and not v:
        raise OptionError(f"pulsar data source: option {connector!r} (or {own!r}) is required")
    return str(v) if v else None


def _client_options(opts: Mapping[str, str]) -> tuple[dict[str, Any], str | None, str | None]:
    """``pulsar.client.*`` -> (pulsar.Client keyword arguments, token file, CA file)."""
    kwargs: dict[str, Any] = {}
    token_file = ca_file = None
    plugin = None
    for key, value in opts.items():
        if not key.startswith(_CLIENT_PREFIX):
            continue
        sub = key[len(_CLIENT_PREFIX) :]
        if sub in _CLIENT_KEYS:
            name, kwarg, conv = _CLIENT_KEYS[sub]
            kwargs[kwarg] = conv(_CLIENT_PREFIX + name, str(value))
            continue
        special = _CLIENT_SPECIAL.get(sub)
        option = _CLIENT_PREFIX + (special or sub)
        if special == "tlsTrustCertsFilePath":
            ca_file = str(value)
        elif special == "tlsAllowInsecureConnection":
            if _bool(option, str(value)):
                raise _err(option, "this source never accepts an unverified TLS certificate")
        elif special == "tlsHostnameVerificationEnable":
            if not _bool(option, str(value)):
                raise _err(option, "this source always checks that the broker's certificate names its host")
        elif special == "authPluginClassName":
            plugin = str(value)
            if plugin.strip().lower() not in _TOKEN_PLUGINS:
                raise _err(option, f"only token authentication (AuthenticationToken) is supported: {plugin!r}")
        elif special == "authParams":
            v = str(value).strip()
            if v.startswith("file:"):
                # file:///path or file:/path, as Java's AuthenticationToken reads it.
                token_file = re.sub(r"^file:(//)?", "", v)
            else:
                # Never echo the value: it is a token.
                raise _err(
                    option,
                    "an inline token is refused (options show in query plans and event logs); give "
                    "'file:///path/to/token' or the option 'token_file'",
                )
        else:
            known = sorted([n for n, _, _ in _CLIENT_KEYS.values()] + list(_CLIENT_SPECIAL.values()))
            raise _err(option, f"not a client setting this source maps onto pulsar.Client (known: {', '.join(known)})")
    if plugin is not None and token_file is None:
        raise _err(_CLIENT_PREFIX + "authPluginClassName", "given without 'pulsar.client.authParams' (file:///path)")
    return kwargs, token_file, ca_file


def parse(options: Mapping[str, str]) -> SourceOptions:
    """Every option checked; nothing is fetched."""
    opts = {str(k).lower(): v for k, v in options.items() if v is not None}
    if opts.get("token"):
        # Never echoed: options show in query plans and event logs.
        raise OptionError("pulsar data source: option 'token' is not accepted: give 'token_file'")
    for key in opts:
        if key not in _OPTIONS and not key.startswith(_CLIENT_PREFIX):
            raise OptionError(
                f"pulsar data source: option {key!r}: unknown (known: {', '.join(sorted(_OPTIONS.values()))}, "
                "pulsar.client.*)"
            )
    service_url = _one_of(opts, "service_url", "service.url", required=True)
    admin_url = _one_of(opts, "admin_url", "admin.url", required=True)
    assert service_url is not None and admin_url is not None
    kwargs, client_token_file, client_ca = _client_options(opts)

    token_file = opts.get("token_file") or None
    if token_file and client_token_file and token_file != client_token_file:
        raise OptionError("pulsar data source: options 'token_file' and 'pulsar.client.authParams' disagree")
    ca_file = opts.get("tls_trust_certs_file") or None
    if ca_file and client_ca and ca_file != client_ca:
        raise OptionError(
            "pulsar data source: options 'tls_trust_certs_file' and 'pulsar.client.tlsTrustCertsFilePath' disagree"
        )

    timeout = _one_of(opts, "read_timeout_ms", "pollTimeoutMs", required=False)
    fail = opts.get("failondataloss")
    if fail is not None and not _bool("failOnDataLoss", str(fail)):
        raise _err("failOnDataLoss", "a batch read always fails when a message it expects cannot be read")

    # The source's own spelling keeps its first contract (every row decoded as a deletion message, whatever
    # the topic's schema: a DLQ holds what any producer sent); the connector's gets columns by the schema.
    decode = str(opts.get("decode") or ("pending_delete" if opts.get("service_url") else "auto")).lower()
    if decode not in DECODE_MODES:
        raise _err("decode", f"one of {', '.join(DECODE_MODES)}: {opts.get('decode')!r}")

    return SourceOptions(
        service_url=service_url,
        admin_url=admin_url.rstrip("/"),
        selection=_selection(opts),
        subscription=opts.get("subscription") or None,
        token_file=str(token_file or client_token_file) if (token_file or client_token_file) else None,
        ca_file=str(ca_file or client_ca) if (ca_file or client_ca) else None,
        read_timeout_ms=_int("read_timeout_ms" if opts.get("read_timeout_ms") else "pollTimeoutMs", timeout, 1)
        if timeout
        else 30000,
        decode=decode,
        starting=_offsets(opts, "startingOffsets", "earliest"),
        ending=_offsets(opts, "endingOffsets", "latest"),
        client_kwargs=kwargs,
    )


def is_pending_delete_schema(info: Mapping[str, Any] | None) -> bool:
    """A schema-registry entry (the admin API's ``GetSchemaResponse``) is the worker's Avro record, by its
    full name: a PIP-186 producer in Java registers the same record with its own JSON formatting."""
    if not info or str(info.get("type", "")).upper() != "AVRO":
        return False
    try:
        d = json.loads(info.get("data") or "null")
    except ValueError:
        return False
    if not isinstance(d, dict) or d.get("type") != "record":
        return False
    name = str(d.get("name") or "")
    full = name if "." in name else f"{d.get('namespace') or ''}.{name}"
    return full == f"{AVRO_SCHEMA['namespace']}.{AVRO_SCHEMA['name']}"


def pattern_matches(selection: TopicSelection, topic: str) -> bool:
    """``topic`` (a full name, partition suffix already removed) matches the pattern as Pulsar's client
    matches it: the whole ``tenant/namespace/topic``, without the domain."""
    assert selection.pattern is not None
    return re.fullmatch(selection.pattern, topic.partition("://")[2]) is not None
