package org.ledgerdeletion.broker;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.ledgerdeletion.broker.Metadata.list;
import static org.ledgerdeletion.broker.Metadata.offloaded;
import static org.ledgerdeletion.broker.Metadata.plain;

import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.junit.jupiter.api.Test;

class LedgerDropsTest {
    private static final String TOPIC = "persistent://public/default/t-partition-0";

    @Test
    void readsTheLedgerListAndItsOffloadContexts() {
        LedgerList l = list(plain(1), offloaded(7, -1, 2, true));
        assertEquals(List.of(1L, 7L), List.copyOf(l.ledgers().keySet()));
        assertNull(l.ledgers().get(1L).offload());
        LedgerList.Ledger seven = l.ledgers().get(7L);
        assertTrue(seven.bookkeeperDeleted());
        assertEquals(new PendingDeletion.Offload(-1, 2, "aws-s3", Map.of("bucket", "b")), seven.offload());
    }

    @Test
    void anOffloadWithoutBothUuidHalvesIsNoOffloadedCopy() {
        ProtoWire.Writer half = new ProtoWire.Writer().int64(1, 9).message(5, new ProtoWire.Writer().int64(1, 4));
        assertNull(list(half).ledgers().get(9L).offload());
    }

    @Test
    void malformedMetadataIsAnErrorNotAGuess() {
        assertThrows(IllegalArgumentException.class, () -> LedgerList.parse(new byte[] {0x0a, 0x05, 0x08}));
        assertThrows(IllegalArgumentException.class, () -> LedgerList.parse(new byte[] {0x0a, 0x00}));
        assertThrows(IllegalArgumentException.class, () -> CursorLedgers.parse(new byte[] {0x08}));
    }

    @Test
    void trimmedLedgersAreDropped() {
        var drops = LedgerDrops.droppedBy(TOPIC, list(plain(1), plain(2), plain(3)), list(plain(3)));
        assertEquals(List.of(PendingDeletion.ledger(TOPIC, 1), PendingDeletion.ledger(TOPIC, 2)), drops);
    }

    @Test
    void rolloverAddingALedgerDropsNothing() {
        assertTrue(LedgerDrops.droppedBy(TOPIC, list(plain(1)), list(plain(1), plain(2))).isEmpty());
    }

    @Test
    void droppedOffloadedLedgerQueuesBothCopiesUnlessBookKeeperCopyIsGone() {
        var drops = LedgerDrops.droppedBy(TOPIC, list(offloaded(7, 1, 2, false), plain(8)), list(plain(8)));
        assertEquals(List.of(LedgerType.LEDGER, LedgerType.OFFLOAD_LEDGER),
                drops.stream().map(PendingDeletion::ledgerType).toList());
        assertEquals("aws-s3", drops.get(1).offload().driverName());
        assertEquals("b", drops.get(1).offload().driverMetadata().get("bucket"));
        var gone = LedgerDrops.droppedBy(TOPIC, list(offloaded(7, 1, 2, true)), list());
        assertEquals(List.of(LedgerType.OFFLOAD_LEDGER), gone.stream().map(PendingDeletion::ledgerType).toList());
    }

    @Test
    void bookKeeperCopyReleasedAfterOffload() {
        var drops = LedgerDrops.droppedBy(TOPIC, list(offloaded(7, 1, 2, false)), list(offloaded(7, 1, 2, true)));
        assertEquals(List.of(PendingDeletion.ledger(TOPIC, 7)), drops);
    }

    @Test
    void replacedOffloadAttemptDropsTheOldCopy() {
        var drops = LedgerDrops.droppedBy(TOPIC, list(offloaded(7, 1, 2, false)), list(offloaded(7, 3, 4, false)));
        assertEquals(1, drops.size());
        assertEquals(1, drops.get(0).offload().uidMsb());
    }

    private static CursorLedgers cursor(long ledger, String... properties) {
        Map<String, String> p = new LinkedHashMap<>();
        for (int i = 0; i < properties.length; i += 2) {
            p.put(properties[i], properties[i + 1]);
        }
        return CursorLedgers.parse(Metadata.cursor(ledger, p));
    }

    private static final String B1 = "#pulsar.internal.delayed.bucket_10_14";
    private static final String B2 = "#pulsar.internal.delayed.bucket_15_19";

    @Test
    void cursorLedgers() {
        assertEquals(List.of(PendingDeletion.cursorLedger(TOPIC, "sub", 5)),
                LedgerDrops.droppedByCursorWrite(TOPIC, "sub", cursor(5), cursor(9)));
        assertEquals(List.of(PendingDeletion.cursorLedger(TOPIC, "sub", 5)),
                LedgerDrops.droppedByCursorWrite(TOPIC, "sub", cursor(5), cursor(-1)));
        assertTrue(LedgerDrops.droppedByCursorWrite(TOPIC, "sub", cursor(5), cursor(5)).isEmpty());
        assertTrue(LedgerDrops.droppedByCursorWrite(TOPIC, "sub", cursor(-1), cursor(9)).isEmpty());
    }

    @Test
    void bucketLedgersAreTheDelayedBucketPropertiesValues() {
        var state = cursor(7, B1, "31", B2, "32", "user", "33", "#pulsar.internal.delayed.bucket_x", "not-a-ledger-id");
        assertEquals(7, state.cursorLedger());
        assertEquals(Set.of(31L, 32L), state.buckets());
    }

    @Test
    void aCursorWriteDropsItsOldLedgerAndEveryBucketPropertyItRemoves() {
        var before = cursor(7, B1, "31", B2, "32");
        // The bucket of B1 was deleted: Pulsar removes its property; the cursor ledger stays.
        assertEquals(List.of(PendingDeletion.bucketLedger(TOPIC, "my sub", 31)),
                LedgerDrops.droppedByCursorWrite(TOPIC, "my%20sub", before, cursor(7, B2, "32")));
        // A new bucket, a mark-delete persisted: nothing dropped.
        var more = cursor(7, B1, "31", B2, "32", "#pulsar.internal.delayed.bucket_20_24", "40");
        assertTrue(LedgerDrops.droppedByCursorWrite(TOPIC, "s", before, more).isEmpty());
        // The same key with another ledger (a snapshot written again): the old ledger is dropped.
        assertEquals(List.of(31L), LedgerDrops.droppedByCursorWrite(TOPIC, "s", before, cursor(7, B1, "41", B2, "32"))
                .stream().map(PendingDeletion::ledgerId).toList());
        // A cursor ledger switch together with a bucket removal: both.
        assertEquals(List.of(PendingDeletion.cursorLedger(TOPIC, "s", 7), PendingDeletion.bucketLedger(TOPIC, "s", 31),
                PendingDeletion.bucketLedger(TOPIC, "s", 32)),
                LedgerDrops.droppedByCursorWrite(TOPIC, "s", before, cursor(8)));
        // A removed cursor drops everything it still names.
        assertEquals(3, LedgerDrops.droppedByCursorWrite(TOPIC, "s", before, CursorLedgers.NONE).size());
        assertTrue(LedgerDrops.droppedByCursorWrite(TOPIC, "s", CursorLedgers.NONE, before).isEmpty());
    }

    @Test
    void bucketMessagesCarryTheDecodedCursorName() {
        var d = PendingDeletion.bucketLedger(TOPIC, "my sub", 31);
        assertEquals(LedgerComponent.DELAYED_INDEX_BUCKET, d.component());
        assertEquals(LedgerType.LEDGER, d.ledgerType());
        assertEquals("my sub", d.cursorName());
    }

    @Test
    void wholeTopic() {
        assertEquals(2, LedgerDrops.droppedWithTopic(TOPIC, list(plain(1), offloaded(2, 1, 2, true))).size());
    }

    @Test
    void aRolloverThatCannotQueueItsDropsKeepsThemListed() {
        var before = list(plain(1), plain(2), offloaded(3, 1, 2, false), plain(4));
        // The broker's memory lost 1 and 2 (a failed trim) and flipped 3's BookKeeper copy; 5 is new.
        var after = list(offloaded(3, 1, 2, true), plain(4), plain(5));
        assertTrue(LedgerDrops.addsLedger(before, after));
        assertFalse(LedgerDrops.addsLedger(before, list(plain(4))));
        var kept = LedgerList.parse(LedgerDrops.keepListed(before, after));
        assertEquals(List.of(1L, 2L, 3L, 4L, 5L), List.copyOf(kept.ledgers().keySet()));
        assertFalse(kept.ledgers().get(3L).bookkeeperDeleted());
        assertTrue(LedgerDrops.droppedBy(TOPIC, before, kept).isEmpty());
        // Every ledger written back byte for byte as the list had it, and the info's other fields kept.
        assertArrayEquals(before.ledgers().get(1L).field(), kept.ledgers().get(1L).field());
        assertArrayEquals(after.ledgers().get(5L).field(), kept.ledgers().get(5L).field());
        assertArrayEquals(Metadata.ledgerList(plain(1), plain(2), offloaded(3, 1, 2, false), plain(4), plain(5)),
                kept.bytes());
    }

    @Test
    void aRolloverThatCannotQueueItsDropsLetsEmptyLedgersGo() {
        // A topic's load: the last owner's ledger 3, listed open, recovered empty, and ledger 4, closed empty, are
        // dropped by the write that adds 5 (Pulsar deletes them itself once it lands); 1 was lost from memory only.
        var open = new ProtoWire.Writer().int64(1, 3);
        var emptyClosed = new ProtoWire.Writer().int64(1, 4).int64(2, 0).int64(3, 0);
        var before = list(plain(1), plain(2), open, emptyClosed);
        var after = list(plain(2), plain(5));
        assertEquals(-1, before.ledgers().get(3L).entries());
        assertTrue(before.ledgers().get(3L).empty() && before.ledgers().get(4L).empty());
        assertFalse(before.ledgers().get(1L).empty());
        var kept = LedgerList.parse(LedgerDrops.keepListed(before, after));
        assertEquals(List.of(1L, 2L, 5L), List.copyOf(kept.ledgers().keySet()));
        assertEquals(List.of(PendingDeletion.ledger(TOPIC, 3), PendingDeletion.ledger(TOPIC, 4)),
                LedgerDrops.droppedBy(TOPIC, before, kept));
        // An empty ledger with an offloaded copy is not let go: its copy is data.
        var emptyOffloaded = list(new ProtoWire.Writer().int64(1, 6).int64(2, 0)
                .message(5, new ProtoWire.Writer().int64(1, 1).int64(2, 2)));
        assertFalse(emptyOffloaded.ledgers().get(6L).empty());
    }
}
