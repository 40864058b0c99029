"""The scanner's rules without I/O: owner mapping, the schema locator, and every verdict.

The scanner's collaborators (bookie client, snapshot cache, metadata-store view) are replaced by small
scripted fakes with the same surface (tests/unit/fakes.py); the real ones are exercised by
tests/integration/test_scanner.py.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from tests.unit.fakes import BUCKET_CM, BUCKET_KEY, NOW_S, YOUNG, FakeBookie, FakeSnapshots, FakeStore, live, md, scan
from worker.commands.scan import ORPHAN_COLUMNS, orphan_rows
from worker.commands.terminal import human_age, parse_duration, render_table
from worker.core.ledger_owner import Owner, Unmapped
from worker.core.ledger_owner import owner_of as owner_of_custom
from worker.formats.ledger_metadata import LedgerMetadata
from worker.formats.managed_ledger_metadata import parse_schema_locator as schema_locator_ledgers
from worker.formats.message import LedgerComponent, LedgerType
from worker.formats.protobuf_wire import MetadataFormatError, encode_varint
from worker.formats.topic_name import TopicName
from worker.operations.scanner import Decision, Scanner, Verdict

ML = {"application": "pulsar", "component": "managed-ledger"}


def owner_of(m: LedgerMetadata) -> Owner | None:
    return owner_of_custom(m.custom_metadata)


def ml(topic: str, **extra: str) -> dict[str, str]:
    return {**ML, "pulsar/managed-ledger": TopicName.parse(topic).managed_ledger_name, **extra}


# ---- owner mapping --------------------------------------------------------------------------------------


def test_owner_of_each_component() -> None:
    t = "persistent://ten/ns/topic-partition-3"
    assert owner_of(md(1, ml(t))) == Owner(LedgerComponent.MANAGED_LEDGER, TopicName.parse(t))
    assert owner_of(md(2, ml(t, **{"pulsar/cursor": "sub"}))) == Owner(
        LedgerComponent.MANAGED_CURSOR, TopicName.parse(t), cursor="sub"
    )
    schema = {"application": "pulsar", "component": "schema", "pulsar/schemaId": "ten/ns/topic"}
    assert owner_of(md(3, schema)) == Owner(
        LedgerComponent.SCHEMA_STORAGE, TopicName.parse("persistent://ten/ns/topic"), schema_id="ten/ns/topic"
    )
    compacted = {"application": "pulsar", "component": "compacted-ledger", "pulsar/compactedTopic": t}
    assert owner_of(md(4, compacted)) == Owner(LedgerComponent.COMPACTED_LEDGER, TopicName.parse(t))


@pytest.mark.parametrize("custom", [{}, {"application": "other"}, {"component": "managed-ledger"}])
def test_not_a_pulsar_ledger(custom: dict[str, str]) -> None:
    assert owner_of(md(1, custom)) is None


@pytest.mark.parametrize(
    ("custom", "why"),
    [
        ({"application": "pulsar"}, "unknown component"),
        ({"application": "pulsar", "component": "bookie-thing"}, "unknown component"),
        (ML, "without pulsar/managed-ledger"),
        # Not the encoding Pulsar writes (java.net.URLEncoder: upper-case escapes, "+" for a space).
        ({**ML, "pulsar/managed-ledger": "t/ns/persistent/a%3ab"}, "not the managed-ledger name Pulsar writes"),
        ({**ML, "pulsar/managed-ledger": "t/ns/persistent/a%20b"}, "not the managed-ledger name Pulsar writes"),
        ({**ML, "pulsar/managed-ledger": "t/ns/persistent/x", "pulsar/cursor": ""}, "empty pulsar/cursor"),
        ({**ML, "pulsar/managed-ledger": "t/../persistent/x"}, "unparseable"),
        ({"application": "pulsar", "component": "schema"}, "without pulsar/schemaId"),
        ({"application": "pulsar", "component": "schema", "pulsar/schemaId": "t/ns/x-partition-1"}, "partition"),
        ({"application": "pulsar", "component": "compacted-ledger"}, "without pulsar/compactedTopic"),
        ({"application": "pulsar", "component": "compacted-ledger", "pulsar/compactedTopic": "bad"}, "unparseable"),
    ],
)
def test_unmappable_pulsar_ledgers_are_never_candidates(custom: dict[str, str], why: str) -> None:
    with pytest.raises(Unmapped, match=why):
        owner_of(md(1, custom))


def test_a_version_1_topics_ledger_is_a_candidate_of_its_v1_topic() -> None:
    v1 = "persistent://pulsar/standalone/127.0.0.1:8080/healthcheck"
    custom = {**ML, "pulsar/managed-ledger": "pulsar/standalone/127.0.0.1:8080/persistent/healthcheck"}
    assert owner_of(md(1, custom)) == Owner(LedgerComponent.MANAGED_LEDGER, TopicName.parse(v1))


# ---- the schema registry's locator ----------------------------------------------------------------------


def _len(field: int, payload: bytes) -> bytes:
    return encode_varint(field << 3 | 2) + encode_varint(len(payload)) + payload


def _index_entry(version: int, ledger: int, entry: int) -> bytes:
    position = encode_varint(1 << 3) + encode_varint(ledger) + encode_varint(2 << 3) + encode_varint(entry)
    return encode_varint(1 << 3) + encode_varint(version) + _len(2, position) + _len(3, b"h" * 32)


def test_schema_locator_as_read_from_the_stack() -> None:
    # /schemas/pulsar/127.0.0.1:8080/healthcheck on the local stack: info and index both at ledger 1.
    real = (
        b"\n*\x08\x00\x12\x04\x08\x01\x10\x00\x1a \xe3\xb0\xc4B\x98\xfc\x1c\x14\x9a\xfb\xf4\xc8\x99o\xb9$'\xaeA"
        b"\xe4d\x9b\x93L\xa4\x95\x99\x1bxR\xb8U\x12*\x08\x00\x12\x04\x08\x01\x10\x00\x1a \xe3\xb0\xc4B\x98\xfc"
        b"\x1c\x14\x9a\xfb\xf4\xc8\x99o\xb9$'\xaeA\xe4d\x9b\x93L\xa4\x95\x99\x1bxR\xb8U"
    )
    assert schema_locator_ledgers(real) == frozenset({1})


def test_schema_locator_collects_info_and_every_index_entry() -> None:
    data = _len(1, _index_entry(2, 300, 0)) + _len(2, _index_entry(0, 100, 0)) + _len(2, _index_entry(1, 2**40, 3))
    assert schema_locator_ledgers(data) == frozenset({300, 100, 2**40})
    assert schema_locator_ledgers(b"") == frozenset()


@pytest.mark.parametrize("garbage", [b"\x0a\x05\x08", b"\x0b", b"\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"])
def test_schema_locator_garbage_raises(garbage: bytes) -> None:
    with pytest.raises(MetadataFormatError):
        schema_locator_ledgers(garbage)


# ---- small helpers ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"), [("10m", 600), ("90s", 90), ("90", 90), ("1.5h", 5400), ("2d", 172800), ("250ms", 0.25)]
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "ten minutes", "-5s", "5w", "1h30m"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


def test_human_age_and_table() -> None:
    assert [human_age(x) for x in (None, 5, 600, 7300, 200000)] == ["?", "5s", "10m", "2h", "2d"]
    d = Decision(7, Verdict.ORPHAN, "topic gone", "MANAGED_CURSOR", "persistent://a/b/c", "s", None, 61.0, 9)
    lines = render_table(ORPHAN_COLUMNS, orphan_rows([d])).splitlines()
    assert lines[0].split() == ["LEDGER", "TOPIC", "COMPONENT", "AGE", "SIZE", "WHY", "ORPHAN"]
    assert lines[1].split() == ["7", "a/b/c", "MANAGED_CURSOR", "(s)", "61s", "9", "B", "topic", "gone"]


def test_decision_to_info() -> None:
    d = Decision(7, Verdict.ORPHAN, "x", "SCHEMA_STORAGE", "persistent://a/b/c", None, "a/b/c", 1.0, 1)
    info = d.to_info({"source": "scanner"})
    assert (info.ledger_component, info.ledger_type, info.ledger_id, info.schema_id) == (
        LedgerComponent.SCHEMA_STORAGE,
        LedgerType.LEDGER,
        7,
        "a/b/c",
    )
    with pytest.raises(ValueError, match="not an orphan"):
        Decision(8, Verdict.IN_USE, "x", "MANAGED_LEDGER", "persistent://a/b/c").to_info()


# ---- the scan, with scripted collaborators ---------------------------------------------------------------


A = "persistent://t/ns/a"
B = "persistent://t/ns/b"


async def test_verdicts_for_managed_ledger_and_cursor_ledgers() -> None:
    ledgers = [
        md(1, ml(A)),  # referenced
        md(2, ml(A)),  # dropped from A's list
        md(3, ml(A, **{"pulsar/cursor": "s"})),  # A's cursor ledger
        md(4, ml(A, **{"pulsar/cursor": "old"})),  # a cursor ledger nobody points at
        md(5, ml(A), ctime=YOUNG),  # too young to judge
        md(6, ml(A), ctime=None),  # no creation time
        md(7, {"application": "other"}),
        md(8, ml(B)),  # B is gone and so is its znode
    ]
    got, snaps, report = await scan(ledgers, {A: live(A, {1}, {"s": 3})})
    assert {k: d.verdict for k, d in got.items()} == {
        1: Verdict.IN_USE,
        2: Verdict.ORPHAN,
        3: Verdict.IN_USE,
        4: Verdict.ORPHAN,
        5: Verdict.TOO_YOUNG,
        6: Verdict.SKIPPED,
        7: Verdict.NOT_PULSAR,
        8: Verdict.ORPHAN,
    }
    assert got[4].why == "not the ledger of cursor 'old'" and got[8].why == "topic gone"
    assert sorted(snaps.calls) == [(A, True), (B, True)]  # once per topic, always fresh
    assert [d.ledger_id for d in report.orphans] == [2, 4, 8]


async def test_a_gone_topic_is_believed_only_when_the_metadata_store_agrees() -> None:
    ledgers = [md(1, ml(A))]
    got, _, _ = await scan(ledgers, {}, FakeStore(managed_ledgers={TopicName.parse(A).managed_ledger_name}))
    assert got[1].verdict is Verdict.SKIPPED and "managed ledger still exists in the metadata store" in got[1].why
    scanner = Scanner(
        FakeBookie(ledgers),  # type: ignore[arg-type]
        FakeSnapshots({}, None),  # type: ignore[arg-type]
        None,
        min_age_s=0,
        clock=lambda: NOW_S,
    )
    [d] = (await scanner.scan()).decisions
    assert d.verdict is Verdict.SKIPPED and "no metadata store" in d.why


async def test_live_state_errors_skip_the_whole_topic() -> None:
    got, _, report = await scan([md(1, ml(A)), md(2, ml(A))], {A: TimeoutError("owner did not answer")})
    assert {d.verdict for d in got.values()} == {Verdict.SKIPPED}
    assert "live state unavailable: TimeoutError" in got[1].why
    assert report.orphans == []


def schema(lid: int, sid: str, **kw: Any) -> LedgerMetadata:
    return md(lid, {"application": "pulsar", "component": "schema", "pulsar/schemaId": sid}, **kw)


async def test_schema_ledgers_consult_the_registry() -> None:
    ledgers = [
        schema(1, "t/ns/a"),  # in A's schema ledgers
        schema(2, "t/ns/a"),  # not in A's list, not in the registry
        schema(3, "t/ns/hc"),  # topic gone but the registry still points at it (the health-check case)
        schema(4, "t/ns/hc"),  # topic gone, registry entry does not point at it
        schema(5, "t/ns/nope"),  # topic gone, no registry entry
    ]
    store = FakeStore(schemas={"t/ns/a": frozenset({1}), "t/ns/hc": frozenset({3})})
    got, _, _ = await scan(ledgers, {A: live(A, {10}, schema={1})}, store)
    assert {k: d.verdict for k, d in got.items()} == {
        1: Verdict.IN_USE,
        2: Verdict.ORPHAN,
        3: Verdict.IN_USE,
        4: Verdict.ORPHAN,
        5: Verdict.ORPHAN,
    }
    assert got[3].why == "referenced by the schema registry"
    assert got[5].why == "schemaId topic gone, no schema registry entry"


async def test_compacted_ledgers() -> None:
    compacted = {"application": "pulsar", "component": "compacted-ledger", "pulsar/compactedTopic": A}
    ledgers = [md(1, compacted), md(2, compacted), md(3, compacted, state="OPEN")]
    got, _, _ = await scan(ledgers, {A: live(A, {10}, compacted=1)})
    assert got[1].verdict is Verdict.IN_USE
    assert got[2].verdict is Verdict.ORPHAN
    # Possibly a compaction still writing: never an orphan while the topic lives.
    assert got[3].verdict is Verdict.SKIPPED and "open compacted ledger of a live topic" in got[3].why


async def test_open_data_and_cursor_ledgers_nothing_names_are_orphans_of_their_kind() -> None:
    # Issue 30: every open ledger of a live topic was skipped "compaction may be in progress", forever. An
    # open data or cursor ledger that neither the owner nor the stored record names, older than the minimum
    # age, is what a crashed writer left: the worker recovers and deletes it, so it is reported.
    ledgers = [
        md(1, ml(A, **{"pulsar/cursor": "sub"}), state="OPEN"),  # nothing names it
        md(2, ml(A), state="OPEN"),  # nothing names it
        md(3, ml(A, **{"pulsar/cursor": "sub"}), state="OPEN"),  # the live cursor's current ledger
        md(4, ml(A), state="OPEN"),  # the topic's record lists it (its owner's memory does not, yet)
        md(5, ml(A, **{"pulsar/cursor": "sub"}), state="IN_RECOVERY"),  # a recovery that did not finish
    ]
    store = FakeStore(recorded={4})
    got, _, report = await scan(ledgers, {A: live(A, {10}, cursors={"sub": 3})}, store)
    assert {k: d.verdict for k, d in got.items()} == {
        1: Verdict.ORPHAN,
        2: Verdict.ORPHAN,
        3: Verdict.IN_USE,
        4: Verdict.SKIPPED,
        5: Verdict.ORPHAN,
    }
    assert got[1].why.startswith("open cursor ledger nothing names (state OPEN)")
    assert got[2].why.startswith("open data ledger nothing names (state OPEN)")
    assert got[4].why == "ledger_open: open data ledger its topic's stored record names"
    assert (str(TopicName.parse(A)), 1, "sub") in store.record_reads
    assert [d.to_info().ledger_component.value for d in report.orphans] == [
        "MANAGED_CURSOR",
        "MANAGED_LEDGER",
        "MANAGED_CURSOR",
    ]


async def test_an_open_ledger_is_skipped_without_the_stored_record() -> None:
    # No metadata store: nothing proves the topic's record does not name it.
    scanner = Scanner(
        FakeBookie([md(1, ml(A), state="OPEN")]),  # type: ignore[arg-type]
        FakeSnapshots({A: live(A, {10})}, None),  # type: ignore[arg-type]
        None,
        min_age_s=600,
        clock=lambda: NOW_S,
    )
    [d] = (await scanner.scan()).decisions
    assert d.verdict is Verdict.SKIPPED and d.why == "no metadata store to read its topic's stored record"


async def test_namespace_filter_and_vanished_ledgers() -> None:
    other = "persistent://t/other/x"
    ledgers = [md(1, ml(A)), md(2, ml(other)), md(3, {"application": "x"})]
    got, snaps, report = await scan(ledgers, {}, namespaces=["t/ns"], vanished=(4,))
    assert set(got) == {1}
    assert report.listed == 4 and report.filtered == 2
    assert snaps.calls == [(A, True)]
    assert report.to_dict()["counts"]["orphan"] == 1


async def test_progress_and_decision_callbacks() -> None:
    seen: list[tuple[str, int, int]] = []
    decided: list[int] = []
    ledgers = [md(i, ml(A)) for i in range(1, 6)]
    await scan(
        ledgers,
        {A: live(A, {1})},
        progress=lambda p, d, t: seen.append((p, d, t)),
        on_decision=lambda d: decided.append(d.ledger_id),
        concurrency=2,
    )
    assert ("metadata", 5, 5) in seen and ("ledgers", 5, 5) in seen
    assert sorted(decided) == [1, 2, 3, 4, 5]


async def test_a_schema_ledger_without_the_registry_to_ask_is_skipped() -> None:
    # The registry's locator is the one proof (worker.core.schema_in_use): the worker asks it, so the
    # scanner never calls a schema ledger an orphan without it, even for a live topic.
    scanner = Scanner(
        FakeBookie([schema(1, "t/ns/a"), schema(2, "t/ns/a")]),  # type: ignore[arg-type]
        FakeSnapshots({A: live(A, {10}, schema={1})}, None),  # type: ignore[arg-type]
        None,
        min_age_s=0,
        clock=lambda: NOW_S,
    )
    got = {d.ledger_id: d for d in (await scanner.scan()).decisions}
    assert got[1].verdict is Verdict.IN_USE
    assert got[2].verdict is Verdict.SKIPPED and "no metadata store to read the schema registry" in got[2].why


async def test_a_ledger_created_after_now_is_too_young_even_without_a_minimum_age() -> None:
    # The worker's age rule (worker.core.ledger_age): the scanner used to clamp the age to 0 and queue it.
    got, _, _ = await scan([md(1, ml(A), ctime=int(NOW_S * 1000) + 5000)], {A: live(A, set())}, min_age_s=0)
    assert got[1].verdict is Verdict.TOO_YOUNG and got[1].age_s == 0.0


def test_a_decision_renders_every_field() -> None:
    from dataclasses import asdict, fields

    d = Decision(7, Verdict.ORPHAN, "why", "MANAGED_LEDGER", "persistent://t/ns/x", None, None, 12.5, 100, "CLOSED")
    assert set(d.to_dict()) == {f.name for f in fields(Decision)}
    assert d.to_dict() == {**asdict(d), "verdict": "orphan"}


# ---- delayed-delivery bucket ledgers: judged by the worker's rule (and through the scanner, the nightly audit) -----


class BucketStore(FakeStore):
    def __init__(self, cursors: dict[tuple[str, str], dict[str, str]], managed_ledgers: set[str]) -> None:
        super().__init__(managed_ledgers)
        self.cursors = cursors

    async def cursor_properties(self, topic: TopicName, cursor: str) -> dict[str, str] | None:
        return self.cursors.get((str(topic), cursor))


def bucket_md(lid: int, topic: str, subscription: str, **kw: Any) -> LedgerMetadata:
    cm = {**BUCKET_CM, "pulsar/delayedIndexTopic": topic, "pulsar/delayedIndexCursor": subscription}
    return md(lid, cm, **kw)


async def test_the_scanner_judges_bucket_ledgers_by_the_workers_rule() -> None:
    a, gone = "persistent://t/ns/a", "persistent://t/ns/gone"
    ledgers = [
        bucket_md(1, a, "my sub"),  # named by its cursor
        bucket_md(2, a, "my sub"),  # not named, but its subscription is live: may be held in memory only
        bucket_md(3, a, "old"),  # its subscription is gone: a leaked bucket
        bucket_md(4, gone, "s"),  # its topic is gone
        bucket_md(5, a, "old", state="OPEN"),  # being written (a snapshot in progress)
    ]
    snap = dataclasses.replace(live(a), cursor_names=frozenset({"my+sub"}))
    store = BucketStore({(a, "my+sub"): {BUCKET_KEY: "1"}}, {TopicName.parse(a).managed_ledger_name})
    got, _, report = await scan(ledgers, {a: snap}, store)
    assert {k: d.verdict for k, d in got.items()} == {
        1: Verdict.IN_USE,
        2: Verdict.SKIPPED,
        3: Verdict.ORPHAN,
        4: Verdict.ORPHAN,
        5: Verdict.SKIPPED,
    }
    assert got[3].why == "not named by cursor 'old', which its topic no longer has"
    assert got[4].why == "topic gone"
    # Queued as the worker verifies it: the subscription as the ledger's metadata records it.
    info3 = got[3].to_info()
    assert (info3.ledger_component, info3.cursor_name) == (LedgerComponent.DELAYED_INDEX_BUCKET, "old")
    assert [d.ledger_id for d in report.orphans] == [3, 4]


async def test_without_a_metadata_store_a_bucket_of_a_live_topic_is_skipped() -> None:
    a = "persistent://t/ns/a"
    scanner = Scanner(
        FakeBookie([bucket_md(3, a, "old")]),
        FakeSnapshots({a: live(a)}, None),  # type: ignore[arg-type]
        None,
        min_age_s=0,
        clock=lambda: NOW_S,
    )
    got = {d.ledger_id: d for d in (await scanner.scan()).decisions}
    assert got[3].verdict is Verdict.SKIPPED and "no metadata store" in got[3].why


async def test_the_scanner_reads_only_what_the_rules_ask_for() -> None:
    # The worker's gatherer reads a fact when a rule asks for it: not the registry for a schema ledger its live
    # topic lists, nor anything for a ledger the live state decides; and every read comes after the live state.
    class Counting(FakeStore):
        def __init__(self) -> None:
            super().__init__(schemas={"t/ns/a": frozenset()})
            self.schema_reads: list[str] = []

        async def schema_ledgers(self, schema_id: str) -> frozenset[int] | None:
            self.schema_reads.append(schema_id)
            return await super().schema_ledgers(schema_id)

    store = Counting()
    ledgers = [schema(1, "t/ns/a"), schema(2, "t/ns/a"), md(3, ml(A)), md(4, ml(A)), md(5, ml(A), ctime=YOUNG)]
    got, snaps, _ = await scan(ledgers, {A: live(A, {3}, schema={1})}, store)
    assert {k: d.verdict for k, d in got.items()} == {
        1: Verdict.IN_USE,
        2: Verdict.ORPHAN,
        3: Verdict.IN_USE,
        4: Verdict.ORPHAN,
        5: Verdict.TOO_YOUNG,
    }
    assert store.schema_reads == ["t/ns/a"]  # ledger 2's only
    assert store.record_reads == []  # no open ledger
    assert snaps.calls == [(A, True)]
