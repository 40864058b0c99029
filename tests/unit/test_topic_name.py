"""Topic-name parsing and encodings: the names reach URLs, ZooKeeper paths and identity comparisons."""

from __future__ import annotations

from urllib.parse import unquote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from worker.formats.topic_name import MAX_MANAGED_LEDGER_PATH_BYTES, InvalidTopicName, TopicName, java_url_encode

# ---- strategies ---------------------------------------------------------------------------------------

_ENTITY_ALPHABET = st.sampled_from("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=:.")
entity = st.text(_ENTITY_ALPHABET, min_size=1, max_size=12).filter(lambda s: s not in (".", ".."))
# Any printable text without a slash: Unicode, spaces, '+', '%', '~', '*' all included.
local_name = st.text(
    st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="/"), min_size=1, max_size=30
).filter(lambda s: s not in (".", ".."))
topic_names = st.builds(lambda t, n, ln: TopicName("persistent", t, n, ln), entity, entity, local_name)


def reference_java_url_encode(s: str) -> str:
    """java.net.URLEncoder.encode(s, UTF_8), written from its javadoc: a-z A-Z 0-9 . - * _ stay,
    space becomes '+', every other character becomes %XY of its UTF-8 bytes (upper-case hex)."""
    out = []
    for ch in s:
        if ch.isascii() and (ch.isalnum() or ch in ".-*_"):
            out.append(ch)
        elif ch == " ":
            out.append("+")
        else:
            out.extend(f"%{b:02X}" for b in ch.encode("utf-8"))
    return "".join(out)


# ---- parsing --------------------------------------------------------------------------------------------


def test_parse_full_name() -> None:
    t = TopicName.parse("persistent://my-tenant/my-ns/my-topic")
    assert (t.domain, t.tenant, t.namespace, t.local_name) == ("persistent", "my-tenant", "my-ns", "my-topic")
    assert str(t) == "persistent://my-tenant/my-ns/my-topic"
    assert t.namespace_name == "my-tenant/my-ns"


def test_a_version_1_name_keeps_its_cluster_where_pulsar_does() -> None:
    t = TopicName.parse("persistent://pulsar/standalone/127.0.0.1:8080/healthcheck")
    assert (t.tenant, t.cluster, t.namespace, t.local_name) == ("pulsar", "standalone", "127.0.0.1:8080", "healthcheck")
    assert str(t) == "persistent://pulsar/standalone/127.0.0.1:8080/healthcheck"
    assert t.namespace_name == "pulsar/standalone/127.0.0.1:8080"
    # What the broker wrote on the health check's ledgers (pulsar/managed-ledger), and its schema id.
    assert t.managed_ledger_name == "pulsar/standalone/127.0.0.1:8080/persistent/healthcheck"
    assert t.schema_name == "pulsar/127.0.0.1:8080/healthcheck"
    assert TopicName.from_managed_ledger_name(t.managed_ledger_name) == t
    # The v1 admin API and lookup, each segment encoded.
    assert t.admin_path == "persistent/pulsar/standalone/127.0.0.1%3A8080/healthcheck"
    assert t.lookup_path == "/lookup/v2/destination/persistent/pulsar/standalone/127.0.0.1%3A8080/healthcheck"
    p = t.partition(2)
    assert str(p) == "persistent://pulsar/standalone/127.0.0.1:8080/healthcheck-partition-2"
    assert p.partitioned_base == t and p.cluster == "standalone"
    v2 = TopicName.parse("persistent://a/ns/x")
    assert (
        v2.cluster is None
        and v2.admin_path == "v2/persistent/a/ns/x"
        and v2.lookup_path == "/lookup/v2/topic/persistent/a/ns/x"
    )


def test_parse_without_domain_is_persistent() -> None:
    # PIP-186 writes tenant/ns/topic.
    assert TopicName.parse("a/b/c") == TopicName.parse("persistent://a/b/c")


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "non-persistent://a/b/c",
        "http://a/b/c",
        "persistent://a/b",
        "persistent://a/b/c/d/e",  # a slash in a v1 name's local name
        "persistent://a/b c/n/t",  # a v1 cluster outside the NamedEntity rule
        "persistent://a/b/../t",
        "persistent://a/b/",
        "persistent://a//c",
        "persistent:///b/c",
        "persistent://../b/c",
        "persistent://a/../c",
        "persistent://a/b/..",
        "persistent://./b/c",
        "persistent://a/./c",
        "persistent://a/b/.",
        "../../c",
        "persistent://a/b/c\n",
        "persistent://a/b/c\x00",
        "persistent://a\tx/b/c",
        "persistent://a b/ns/c",  # tenant outside Pulsar's NamedEntity rule
        "persistent://a/n%2Fs/c",
        "persistent://a/b/c://x",
    ],
)
def test_parse_rejects(bad: str) -> None:
    with pytest.raises(InvalidTopicName):
        TopicName.parse(bad)


@pytest.mark.parametrize("bad", [None, 42, b"persistent://a/b/c"])
def test_parse_rejects_non_strings(bad: object) -> None:
    with pytest.raises(InvalidTopicName):
        TopicName.parse(bad)  # type: ignore[arg-type]


def test_invalid_topic_name_is_a_value_error() -> None:
    assert issubclass(InvalidTopicName, ValueError)


def test_local_name_may_hold_dots_and_odd_characters() -> None:
    # Only the exact segments "." and ".." are relative; "..x" or "a..b" are names.
    for local in ("..x", "a..b", "...", "my topic", "a+b%20c~*"):
        assert TopicName.parse(f"persistent://t/ns/{local}").local_name == local


def test_tenant_must_match_pulsar_named_entity_ascii_rule() -> None:
    # Pulsar's NamedEntity pattern is Java's ^[-=:.\w]*$, and Java's \w is ASCII only.
    assert TopicName.parse("persistent://te-n_a=n:t.1/ns/x").tenant == "te-n_a=n:t.1"
    with pytest.raises(InvalidTopicName):
        TopicName.parse("persistent://ténant/ns/x")


@given(topic_names)
def test_str_parse_round_trip(t: TopicName) -> None:
    assert TopicName.parse(str(t)) == t


# ---- partitions -------------------------------------------------------------------------------------------


def test_partition_index_and_base() -> None:
    t = TopicName.parse("persistent://t/ns/orders-partition-7")
    assert t.partition_index == 7
    assert t.partitioned_base == TopicName.parse("persistent://t/ns/orders")
    assert t.partitioned_base.partition(7) == t


def test_not_partitioned() -> None:
    t = TopicName.parse("persistent://t/ns/orders")
    assert t.partition_index is None
    assert t.partitioned_base is t or t.partitioned_base == t


@pytest.mark.parametrize(
    ("local", "index", "base"),
    [
        ("a-partition-1-partition-2", 2, "a-partition-1"),  # the last suffix counts, like Java's lastIndexOf
        ("a-partition-0", 0, "a"),
        ("-partition-3", None, "-partition-3"),  # no base name
        ("a-partition-", None, "a-partition-"),
        ("a-partition-x", None, "a-partition-x"),
        ("a-partition--1", None, "a-partition--1"),
        ("a-partition-01", None, "a-partition-01"),  # Java: leading zero means not a partition
        ("a-partition-99999999999", None, "a-partition-99999999999"),  # overflows Java's int
        ("a-partition-2147483647", 2147483647, "a"),
        ("a-partition-2147483648", None, "a-partition-2147483648"),
        ("a-partition-" + "9" * 5000, None, "a-partition-" + "9" * 5000),  # beyond int()'s digit limit
    ],
)
def test_partition_parsing_follows_java(local: str, index: int | None, base: str) -> None:
    t = TopicName.parse(f"persistent://t/ns/{local}")
    assert t.partition_index == index
    assert t.partitioned_base.local_name == base


@given(topic_names, st.integers(min_value=0, max_value=10_000))
def test_partition_round_trip(t: TopicName, i: int) -> None:
    p = t.partition(i)
    assert p.partition_index == i
    assert p.partitioned_base == t
    assert TopicName.parse(str(p)) == p


# ---- managed-ledger name (Java URLEncoder) -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("local", "encoded"),
    [
        ("my-topic", "my-topic"),
        ("my topic", "my+topic"),
        ("a+b", "a%2Bb"),
        ("a*b", "a*b"),
        ("a~b", "a%7Eb"),
        ("a%b", "a%25b"),
        ("a:b", "a%3Ab"),
        ("a=b&c", "a%3Db%26c"),
        ("ü", "%C3%BC"),
        ("日本", "%E6%97%A5%E6%9C%AC"),
        ("a_b.c", "a_b.c"),
    ],
)
def test_java_url_encode_examples(local: str, encoded: str) -> None:
    assert java_url_encode(local) == encoded


@given(st.text(st.characters(blacklist_categories=("Cs",))))
def test_java_url_encode_matches_reference(s: str) -> None:
    assert java_url_encode(s) == reference_java_url_encode(s)


def test_managed_ledger_name() -> None:
    t = TopicName.parse("persistent://public/default/my topic+1-partition-0")
    assert t.managed_ledger_name == "public/default/persistent/my+topic%2B1-partition-0"


@given(topic_names)
def test_managed_ledger_name_round_trip(t: TopicName) -> None:
    ml = t.managed_ledger_name
    assert ml.count("/") == 3  # the encoded local name never adds a segment
    assert TopicName.from_managed_ledger_name(ml) == t


@pytest.mark.parametrize(
    "bad",
    ["public/default/my-topic", "a/b/persistent/c/d", "a/b/non-persistent/c", "a/b/persistent/..", "a//persistent/c"],
)
def test_from_managed_ledger_name_rejects(bad: str) -> None:
    with pytest.raises(InvalidTopicName):
        TopicName.from_managed_ledger_name(bad)


def test_from_managed_ledger_name_decodes_an_encoded_slash_into_an_invalid_name() -> None:
    # %2F decodes to '/', which would add a segment: the result must not parse as a topic.
    with pytest.raises(InvalidTopicName):
        TopicName.from_managed_ledger_name("a/b/persistent/x%2F..%2Fy")


# ---- schema name --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("topic", "schema"),
    [
        ("persistent://t/ns/orders", "t/ns/orders"),
        ("persistent://t/ns/orders-partition-3", "t/ns/orders"),
        ("persistent://t/ns/my topic", "t/ns/my+topic"),  # Pulsar's getSchemaName encodes the local name
        ("persistent://t/ns/a~b-partition-0", "t/ns/a%7Eb"),
    ],
)
def test_schema_name_follows_pulsar(topic: str, schema: str) -> None:
    assert TopicName.parse(topic).schema_name == schema


@given(topic_names)
def test_schema_name_round_trip(t: TopicName) -> None:
    sid = t.schema_name
    assert sid.count("/") == 2
    assert TopicName.from_schema_name(sid) == t.partitioned_base


@pytest.mark.parametrize("bad", ["t/ns", "t/ns/a/b", "t/ns/x%2F..%2Fy", "t//x"])
def test_from_schema_name_rejects(bad: str) -> None:
    with pytest.raises(InvalidTopicName):
        TopicName.from_schema_name(bad)


# ---- REST path ------------------------------------------------------------------------------------------------


def test_rest_path_plain() -> None:
    assert TopicName.parse("persistent://t/ns/x").rest_path == "persistent/t/ns/x"


@pytest.mark.parametrize(
    ("local", "segment"),
    [
        ("my topic", "my%20topic"),
        ("a?b#c", "a%3Fb%23c"),
        ("a%2F..", "a%252F.."),
        ("..x", "..x"),
        ("ü", "%C3%BC"),
    ],
)
def test_rest_path_encodes_every_segment(local: str, segment: str) -> None:
    assert TopicName.parse(f"persistent://t/ns/{local}").rest_path == f"persistent/t/ns/{segment}"


@given(topic_names)
def test_rest_path_has_four_segments_that_decode_back(t: TopicName) -> None:
    segs = t.rest_path.split("/")
    assert len(segs) == 4
    for s in segs:
        assert s not in ("", ".", "..")
        assert not set(s) & set("?#/ ")
    assert [unquote(s) for s in segs] == [t.domain, t.tenant, t.namespace, t.local_name]


# ---- longer than Pulsar's metadata store can hold ------------------------------------------------------


def _local_for_path_bytes(n: int, tenant: str = "t", ns: str = "ns") -> str:
    """An ASCII local name whose managed-ledger znode path is exactly ``n`` bytes long."""
    return "a" * (n - len(f"/managed-ledgers/{tenant}/{ns}/persistent/"))


def test_a_name_the_metadata_store_cannot_hold_is_invalid() -> None:
    # Defect: any length was accepted. Pulsar itself sets no limit, but a topic owns ledgers only through its
    # managed-ledger znode, and ZooKeeper refuses a request over jute.maxbuffer (10 MiB as Pulsar runs it).
    local = _local_for_path_bytes(MAX_MANAGED_LEDGER_PATH_BYTES + 1)
    with pytest.raises(InvalidTopicName, match="metadata store"):
        TopicName.parse(f"persistent://t/ns/{local}")
    ok = TopicName.parse(f"persistent://t/ns/{_local_for_path_bytes(MAX_MANAGED_LEDGER_PATH_BYTES)}")
    assert len(f"/managed-ledgers/{ok.managed_ledger_name}".encode()) == MAX_MANAGED_LEDGER_PATH_BYTES


def test_the_limit_counts_the_encoded_name() -> None:
    # URL-encoding makes a 3-byte character 9 bytes ("%E2%82%AC"): the znode path is what must fit.
    local = "\u20ac" * (MAX_MANAGED_LEDGER_PATH_BYTES // 9 + 1)
    assert len(local.encode()) < MAX_MANAGED_LEDGER_PATH_BYTES
    with pytest.raises(InvalidTopicName, match="metadata store"):
        TopicName.parse(f"persistent://t/ns/{local}")


def test_long_names_pulsar_does_accept_stay_valid() -> None:
    # Verified on the local stack (Pulsar 4.0.8): a producer created a topic with a 3,000,000-character name.
    TopicName.parse(f"persistent://t/ns/{'a' * 3_000_000}")


# ---- scalable-topic segments (PIP-460, Pulsar 5.0) ------------------------------------------------------
# A segment of the scalable topic topic://t/ns/x is segment://t/ns/x/<hash start>-<hash end>-<segment id>,
# its managed ledger t/ns/segment/<encoded x>/<descriptor>: five parts, like a v1 name
# (tenant/cluster/ns/domain/topic), which Pulsar 5.0's TopicName.fromPersistenceNamingEncoding tells apart by
# the third part. As written by a 5.0.0-M1 broker on the local stack (ledger 342's pulsar/managed-ledger).
SEGMENT_ML = "public/default/segment/sc-try1/8000-ffff-1"


def test_a_segment_managed_ledger_names_its_segment() -> None:
    t = TopicName.from_managed_ledger_name(SEGMENT_ML)
    assert str(t) == "segment://public/default/sc-try1/8000-ffff-1"
    assert (t.domain, t.tenant, t.namespace, t.local_name, t.segment) == (
        "segment",
        "public",
        "default",
        "sc-try1",
        "8000-ffff-1",
    )
    assert t.managed_ledger_name == SEGMENT_ML
    assert TopicName.parse(str(t)) == t


def test_a_segment_is_never_another_topic() -> None:
    # Neither the scalable topic's nor a persistent topic of the same name, nor a v1 reading of its five parts
    # (tenant public, cluster default, namespace segment, domain sc-try1).
    t = TopicName.from_managed_ledger_name(SEGMENT_ML)
    for other in ("persistent://public/default/sc-try1", "persistent://public/segment/8000-ffff-1"):
        assert t != TopicName.parse(other)
        assert t.managed_ledger_name != TopicName.parse(other).managed_ledger_name
    other_segment = TopicName.from_managed_ledger_name("public/default/segment/sc-try1/0000-7fff-0")
    assert t != other_segment and t.managed_ledger_name != other_segment.managed_ledger_name


def test_a_segment_parent_may_hold_a_slash() -> None:
    # Scalable local names may contain '/' (TopicName splits topic:// and segment:// names in three);
    # the managed-ledger name encodes it, so the name keeps five parts.
    t = TopicName.parse("segment://t/ns/a/b/0000-ffff-0")
    assert (t.local_name, t.segment) == ("a/b", "0000-ffff-0")
    assert t.managed_ledger_name == "t/ns/segment/a%2Fb/0000-ffff-0"
    assert TopicName.from_managed_ledger_name(t.managed_ledger_name) == t


@pytest.mark.parametrize(
    "bad",
    [
        "topic://t/ns/x",  # the scalable topic itself: its data lives in its segments
        "segment://t/ns/x",  # no descriptor
        "segment://t/ns/0000-ffff-0",  # no parent
        "segment://t/ns//0000-ffff-0",
        "segment://t/ns/../0000-ffff-0",
        "segment://t/ns/x/0000-FFFF-0",  # Pulsar writes %04x: lower case
        "segment://t/ns/x/000-ffff-0",
        "segment://t/ns/x/0000-10000-0",
        "segment://t/ns/x/8000-7fff-0",  # end before start
        "segment://t/ns/x/0000-ffff-01",
        "segment://t/ns/x/0000-ffff--1",
        "segment://t/ns/x/0000-ffff",
        "segment://t/ns/x/0000-ffff-0\n",
    ],
)
def test_segment_names_are_parsed_strictly(bad: str) -> None:
    with pytest.raises(InvalidTopicName):
        TopicName.parse(bad)


@pytest.mark.parametrize(
    "bad",
    [
        "t/ns/segment/x/0000-FFFF-0",
        "t/ns/segment/x/y",
        "t/ns/segment/x/0000-ffff-0/z",
        "t/ns/segment//0000-ffff-0",
    ],
)
def test_from_managed_ledger_name_refuses_five_parts_that_are_no_segment(bad: str) -> None:
    with pytest.raises(InvalidTopicName):
        TopicName.from_managed_ledger_name(bad)


def test_five_parts_whose_third_is_no_segment_are_a_version_1_name() -> None:
    t = TopicName.from_managed_ledger_name("t/cluster/ns/persistent/x")
    assert (t.cluster, t.segment, str(t)) == ("cluster", None, "persistent://t/cluster/ns/x")


def test_a_segment_has_no_partitions_and_no_admin_path() -> None:
    # 5.0.0-M1's admin API has no per-segment topic resource (/admin/v2/persistent refuses the name with 412):
    # a segment's live state comes from its managed ledger, never from a URL built for a persistent topic.
    t = TopicName.parse("segment://t/ns/x-partition-1/0000-ffff-3")
    assert t.partition_index is None and t.partitioned_base == t
    with pytest.raises(InvalidTopicName, match="segment"):
        _ = t.rest_path


_DESCRIPTOR = st.builds(
    lambda a, b, i: f"{min(a, b):04x}-{max(a, b):04x}-{i}",
    st.integers(0, 0xFFFF),
    st.integers(0, 0xFFFF),
    st.integers(0, 2**63 - 1),
)


@given(entity, entity, st.lists(local_name, min_size=1, max_size=3), _DESCRIPTOR)
def test_segment_managed_ledger_name_round_trip(tenant: str, ns: str, parent: list[str], desc: str) -> None:
    t = TopicName.parse(f"segment://{tenant}/{ns}/{'/'.join(parent)}/{desc}")
    assert t.managed_ledger_name.count("/") == 4
    assert TopicName.from_managed_ledger_name(t.managed_ledger_name) == t
    assert TopicName.parse(str(t)) == t
