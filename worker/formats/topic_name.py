"""Topic names: parsed and validated before they reach a URL, a log line or a comparison.

A message is untrusted input. Its topic name decides which broker we ask and which BookKeeper metadata
we compare against, so it is parsed strictly (``persistent://tenant/ns/name``, no ``..``, no empty
segment) and every REST path segment is URL-encoded.

Version-1 names, ``persistent://tenant/cluster/ns/name`` (a namespace of the pre-2.0 form, still served by
Pulsar 4.0: the broker's own health-check namespace ``pulsar/<cluster>/<broker>`` is one), are supported
as Pulsar handles them: the namespace is ``tenant/cluster/ns``, the managed ledger
``tenant/cluster/ns/persistent/<encoded name>``, the admin API the v1 one (``/admin/persistent/...``,
``/lookup/v2/destination/...``), and the schema id drops the cluster (``TopicName.getSchemaName``).
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


@dataclass(frozen=True, slots=True)
class TopicName:
    domain: str
    tenant: str
    namespace: str
    local_name: str
    # A version-1 name's cluster (``persistent://tenant/cluster/ns/name``); None for every v2 name.
    cluster: str | None = None

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
        if domain != "persistent":
            raise InvalidTopicName(f"only persistent topics own ledgers: {value!r}")
        parts = rest.split("/")
        if len(parts) not in (3, 4):
            raise InvalidTopicName(f"expected persistent://tenant/namespace/topic: {value!r}")
        cluster: str | None = None
        if len(parts) == 4:
            tenant, cluster, namespace, local = parts
        else:
            tenant, namespace, local = parts
        for seg in parts:
            if not seg or seg in (".", ".."):
                raise InvalidTopicName(f"empty or relative segment in {value!r}")
            if any(ord(c) < 0x20 for c in seg):
                raise InvalidTopicName(f"control character in {value!r}")
        for seg in parts[:-1]:
            if not _ENTITY.match(seg):
                raise InvalidTopicName(f"invalid tenant, cluster or namespace {seg!r} in {value!r}")
        topic = cls(domain, tenant, namespace, local, cluster)
        path_bytes = len(_ML_ROOT) + len(topic.managed_ledger_name)  # ASCII: URL-encoded
        if path_bytes > MAX_MANAGED_LEDGER_PATH_BYTES:
            raise InvalidTopicName(
                f"topic name too long: its managed-ledger path would be {path_bytes} bytes, over the "
                f"{MAX_MANAGED_LEDGER_PATH_BYTES} Pulsar's metadata store (ZooKeeper's jute.maxbuffer) holds: "
                f"{value[:200]!r}..."
            )
        return topic

    def __str__(self) -> str:
        return f"{self.domain}://{self.namespace_name}/{self.local_name}"

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
        name through Java's URLEncoder)."""
        return f"{self.namespace_name}/{self.domain}/{java_url_encode(self.local_name)}"

    @property
    def partition_index(self) -> int | None:
        m = _partition_match(self.local_name)
        return int(m.group("index")) if m else None

    @property
    def partitioned_base(self) -> TopicName:
        m = _partition_match(self.local_name)
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
        every segment URL-encoded, for admin and lookup URLs."""
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
        parts = name.split("/")
        if len(parts) not in (4, 5):
            raise InvalidTopicName(f"not a managed-ledger name: {name!r}")
        *namespace, domain, local = parts
        return cls.parse(f"{domain}://{'/'.join(namespace)}/{unquote_plus(local)}")


# Every message names its topic, and a backlog names few topics many times: parsing (and Java's URL
# encoding) once per name instead of once per message is a measurable part of the hot path.
_parse_cached = functools.lru_cache(maxsize=16_384)(TopicName._parse)


@functools.lru_cache(maxsize=16_384)
def java_url_encode(s: str) -> str:
    """``java.net.URLEncoder.encode(s, UTF_8)``: like quote_plus, but ``*`` stays and ``~`` is escaped."""
    return quote_plus(s, safe="*").replace("~", "%7E")
