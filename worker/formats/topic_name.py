"""Topic names: parsed and validated before they reach a URL, a log line or a comparison.

A message is untrusted input, so its topic name is parsed strictly (``persistent://tenant/ns/name``, no
``..``, no empty segment) and every REST path segment is URL-encoded. Version-1 names
(``persistent://tenant/cluster/ns/name``) are handled as Pulsar handles them (v1 admin API, schema id without
the cluster), and Pulsar 5.0 scalable topics' segments
(``segment://tenant/ns/<local name>/<hash start>-<hash end>-<segment id>``, ``%04x-%04x-%d``, stored as
``tenant/ns/segment/<encoded local name>/<descriptor>``) are told apart from a five-part v1 managed-ledger
name by the third part, as ``fromPersistenceNamingEncoding`` does (docs/design.md, "Hostile input is
bounded" and "Scalable topics' segments (Pulsar 5.0)").
"""

from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass
from urllib.parse import quote, quote_plus, unquote_plus

_PARTITION = re.compile(r"^(?P<base>.+)-partition-(?P<index>\d+)$")
# Pulsar's own rule for tenant and namespace names (NamedEntity): no slashes, no control characters.
# Java's \w is ASCII-only, hence re.ASCII.
_ENTITY = re.compile(r"^[-=:.\w]+$", re.ASCII)
_JAVA_INT_MAX = 2**31 - 1
# The longest name a topic can have, as the bytes of its managed-ledger znode path. Pulsar itself sets no
# length limit: its TopicName and NamedEntity check structure and characters only (the maintainers say so in
# apache/pulsar#12023). What bounds a name is the metadata store: a topic owns ledgers only through the
# znode /managed-ledgers/<tenant>/<ns>/persistent/<URL-encoded local name>, and ZooKeeper refuses any
# request larger than jute.maxbuffer, which Pulsar's launch script (bin/pulsar) sets to 10 MiB for the
# broker and for a ZooKeeper it starts. A longer path cannot be created, so such a topic owns no ledger.
# (The binary protocol's frame, nettyMaxFrameSizeBytes = 5 MiB + 10 KiB by default, is tighter but is a
# broker setting of its own; the admin API addresses only names whose URL fits the broker's
# httpMaxRequestHeaderSize, 8 KiB by default: a longer, valid name ends in the DLQ as transient.)
MAX_MANAGED_LEDGER_PATH_BYTES = 10 * 1024 * 1024
_ML_ROOT = "/managed-ledgers/"
SEGMENT_DOMAIN = "segment"
# SegmentTopicName.formatDescriptor: a hash range within [0x0000, 0xFFFF] (start <= end) and a segment id, a
# Java long written as Long.toString does (no sign, no leading zero).
_SEGMENT_DESCRIPTOR = re.compile(r"(?P<start>[0-9a-f]{4})-(?P<end>[0-9a-f]{4})-(?P<id>0|[1-9][0-9]{0,18})")
_JAVA_LONG_MAX = 2**63 - 1


def _partition_match(local_name: str) -> re.Match[str] | None:
    """Pulsar's ``TopicName.getPartitionIndex``: the suffix must be a Java int written without leading
    zeros (``x-partition-01`` is a plain topic, not partition 1)."""
    m = _PARTITION.match(local_name)
    if m is None:
        return None
    idx = m.group("index")
    if len(idx) > len(str(_JAVA_INT_MAX)) or len(idx) != len(str(int(idx))) or int(idx) > _JAVA_INT_MAX:
        return None
    return m


class InvalidTopicName(ValueError):
    pass


def _check_segment_descriptor(descriptor: str, value: str) -> None:
    m = _SEGMENT_DESCRIPTOR.fullmatch(descriptor)
    if m is None or int(m.group("start"), 16) > int(m.group("end"), 16) or int(m.group("id")) > _JAVA_LONG_MAX:
        raise InvalidTopicName(f"not a segment descriptor <%04x start>-<%04x end>-<id>: {descriptor!r} in {value!r}")


@dataclass(frozen=True, slots=True)
class TopicName:
    domain: str
    tenant: str
    namespace: str
    local_name: str
    # A version-1 name's cluster (``persistent://tenant/cluster/ns/name``); None for every v2 name.
    cluster: str | None = None
    # A segment's descriptor (``0000-7fff-0``); local_name is then its scalable topic's local name.
    segment: str | None = None

    @classmethod
    def parse(cls, value: str) -> TopicName:
        if not isinstance(value, str) or not value:
            raise InvalidTopicName("empty topic name")
        return _parse_cached(value)

    @classmethod
    def _parse(cls, value: str) -> TopicName:
        if not value:
            raise InvalidTopicName("empty topic name")
        if "://" in value:
            domain, _, rest = value.partition("://")
        else:
            # PIP-186 writes names without the domain (tenant/ns/topic): they are persistent.
            domain, rest = "persistent", value
        cluster: str | None = None
        descriptor: str | None = None
        if domain == SEGMENT_DOMAIN:
            # The local name may hold '/': the descriptor is what follows the last one.
            head, _, descriptor = rest.rpartition("/")
            parts = head.split("/", 2)
            if len(parts) != 3:
                raise InvalidTopicName(f"expected segment://tenant/namespace/topic/<descriptor>: {value!r}")
            _check_segment_descriptor(descriptor, value)
            tenant, namespace, local = parts
            pieces = [tenant, namespace, *local.split("/")]
            entities = [tenant, namespace]
        elif domain == "persistent":
            parts = rest.split("/")
            if len(parts) not in (3, 4):
                raise InvalidTopicName(f"expected persistent://tenant/namespace/topic: {value!r}")
            if len(parts) == 4:
                tenant, cluster, namespace, local = parts
            else:
                tenant, namespace, local = parts
            pieces = parts
            entities = parts[:-1]
        else:
            raise InvalidTopicName(f"only persistent topics and scalable topics' segments own ledgers: {value!r}")
        for seg in pieces:
            if not seg or seg in (".", ".."):
                raise InvalidTopicName(f"empty or relative segment in {value!r}")
            if any(ord(c) < 0x20 for c in seg):
                raise InvalidTopicName(f"control character in {value!r}")
        for seg in entities:
            if not _ENTITY.match(seg):
                raise InvalidTopicName(f"invalid tenant, cluster or namespace {seg!r} in {value!r}")
        topic = cls(domain, tenant, namespace, local, cluster, descriptor)
        path_bytes = len(_ML_ROOT) + len(topic.managed_ledger_name)  # ASCII: URL-encoded
        if path_bytes > MAX_MANAGED_LEDGER_PATH_BYTES:
            raise InvalidTopicName(
                f"topic name too long: its managed-ledger path would be {path_bytes} bytes, over the "
                f"{MAX_MANAGED_LEDGER_PATH_BYTES} Pulsar's metadata store (ZooKeeper's jute.maxbuffer) holds: "
                f"{value[:200]!r}..."
            )
        return topic

    def __str__(self) -> str:
        tail = f"/{self.segment}" if self.segment is not None else ""
        return f"{self.domain}://{self.namespace_name}/{self.local_name}{tail}"

    @property
    def is_segment(self) -> bool:
        return self.segment is not None

    @property
    def namespace_name(self) -> str:
        """``tenant/ns``, or ``tenant/cluster/ns`` for a version-1 name."""
        if self.cluster is not None:
            return f"{self.tenant}/{self.cluster}/{self.namespace}"
        return f"{self.tenant}/{self.namespace}"

    @property
    def managed_ledger_name(self) -> str:
        """The name BookKeeper metadata and ZooKeeper paths use: ``tenant/ns/persistent/<encoded topic>``
        (``tenant/cluster/ns/...`` for a version-1 name; Pulsar's ``getPersistenceNamingEncoding``: the local
        name through Java's URLEncoder); a segment's is ``tenant/ns/segment/<encoded topic>/<descriptor>``."""
        name = f"{self.namespace_name}/{self.domain}/{java_url_encode(self.local_name)}"
        return name if self.segment is None else f"{name}/{self.segment}"

    @property
    def partition_index(self) -> int | None:
        """None for a segment too: a segment is one hash range of its scalable topic, never a partition."""
        m = None if self.segment is not None else _partition_match(self.local_name)
        return int(m.group("index")) if m else None

    @property
    def partitioned_base(self) -> TopicName:
        m = None if self.segment is not None else _partition_match(self.local_name)
        return dataclasses.replace(self, local_name=m.group("base")) if m else self

    @property
    def schema_name(self) -> str:
        """The schema registry's id (Pulsar's ``getSchemaName``): ``tenant/ns/<encoded base topic>``, the
        value BookKeeper schema ledgers carry as ``pulsar/schemaId``. A version-1 name's cluster is not in it
        (``getNamespacePortion``)."""
        base = self.partitioned_base
        return f"{base.tenant}/{base.namespace}/{java_url_encode(base.local_name)}"

    @classmethod
    def from_schema_name(cls, schema_id: str) -> TopicName:
        """The base topic a schema id (``tenant/ns/<encoded topic>``, see :attr:`schema_name`) names."""
        parts = schema_id.split("/")
        if len(parts) != 3:
            raise InvalidTopicName(f"not a schema id: {schema_id!r}")
        tenant, namespace, local = parts
        return cls.parse(f"persistent://{tenant}/{namespace}/{unquote_plus(local)}")

    def partition(self, index: int) -> TopicName:
        return dataclasses.replace(self, local_name=f"{self.local_name}-partition-{index}")

    @property
    def rest_path(self) -> str:
        """``persistent/tenant/ns/topic`` (``persistent/tenant/cluster/ns/topic`` for a version-1 name) with
        every segment URL-encoded, for admin and lookup URLs. A scalable topic's segment has none: Pulsar 5.0's
        admin API serves no per-segment topic resource."""
        if self.segment is not None:
            raise InvalidTopicName(f"a scalable topic's segment has no admin REST path: {self}")
        segs = (self.domain, *self.namespace_name.split("/"), self.local_name)
        return "/".join(quote(s, safe="") for s in segs)

    @property
    def admin_path(self) -> str:
        """The topic's path under ``/admin/``: the v2 API's ``v2/persistent/...``, or the v1 API's
        ``persistent/tenant/cluster/ns/topic`` for a version-1 name (the v2 API has no cluster segment)."""
        return self.rest_path if self.cluster is not None else f"v2/{self.rest_path}"

    @property
    def lookup_path(self) -> str:
        """The topic's lookup path: ``/lookup/v2/topic/...``, or the v1 form ``/lookup/v2/destination/...``."""
        return f"/lookup/v2/{'destination' if self.cluster is not None else 'topic'}/{self.rest_path}"

    @classmethod
    def from_managed_ledger_name(cls, name: str) -> TopicName:
        """The topic a managed-ledger name names: ``tenant/ns/persistent/<encoded>``, a version-1
        ``tenant/cluster/ns/persistent/<encoded>``, or a segment's ``tenant/ns/segment/<encoded>/<descriptor>``
        (five parts too: the third tells them apart, as in Pulsar's ``fromPersistenceNamingEncoding``)."""
        parts = name.split("/")
        if len(parts) == 5 and parts[2] == SEGMENT_DOMAIN:
            tenant, namespace, _, local, descriptor = parts
            _check_segment_descriptor(descriptor, name)
            return cls.parse(f"{SEGMENT_DOMAIN}://{tenant}/{namespace}/{unquote_plus(local)}/{descriptor}")
        if len(parts) not in (4, 5):
            raise InvalidTopicName(f"not a managed-ledger name: {name!r}")
        *namespace_parts, domain, local = parts
        if domain == SEGMENT_DOMAIN:
            raise InvalidTopicName(f"a segment's managed-ledger name without its descriptor: {name!r}")
        return cls.parse(f"{domain}://{'/'.join(namespace_parts)}/{unquote_plus(local)}")


# Every message names its topic, and a backlog names few topics many times: parsing (and Java's URL
# encoding) once per name instead of once per message is a measurable part of the hot path.
_parse_cached = functools.lru_cache(maxsize=16_384)(TopicName._parse)


@functools.lru_cache(maxsize=16_384)
def java_url_encode(s: str) -> str:
    """``java.net.URLEncoder.encode(s, UTF_8)``: like quote_plus, but ``*`` stays and ``~`` is escaped."""
    return quote_plus(s, safe="*").replace("~", "%7E")
