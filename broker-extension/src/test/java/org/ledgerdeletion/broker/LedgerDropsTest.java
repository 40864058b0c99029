package org.ledgerdeletion.broker;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Properties;
import org.apache.bookkeeper.mledger.proto.MLDataFormats.KeyValue;
import org.apache.bookkeeper.mledger.proto.MLDataFormats.ManagedCursorInfo;
import org.apache.bookkeeper.mledger.proto.MLDataFormats.ManagedLedgerInfo;
import org.apache.bookkeeper.mledger.proto.MLDataFormats.ManagedLedgerInfo.LedgerInfo;
import org.apache.bookkeeper.mledger.proto.MLDataFormats.OffloadContext;
import org.apache.bookkeeper.mledger.proto.MLDataFormats.OffloadDriverMetadata;
import org.apache.bookkeeper.mledger.proto.MLDataFormats.StringProperty;
import org.junit.jupiter.api.Test;

class LedgerDropsTest {
    private static final String TOPIC = "persistent://public/default/t-partition-0";

    private static LedgerInfo plain(long id) {
        return LedgerInfo.newBuilder().setLedgerId(id).setEntries(5).build();
    }

    private static LedgerInfo offloaded(long id, long msb, long lsb, boolean bkDeleted) {
        OffloadContext oc = OffloadContext.newBuilder().setUidMsb(msb).setUidLsb(lsb).setComplete(true)
                .setBookkeeperDeleted(bkDeleted)
                .setDriverMetadata(OffloadDriverMetadata.newBuilder().setName("aws-s3")
                        .addProperties(KeyValue.newBuilder().setKey("bucket").setValue("b").build()).build())
                .build();
        return LedgerInfo.newBuilder().setLedgerId(id).setOffloadContext(oc).build();
    }

    private static ManagedLedgerInfo list(LedgerInfo... ledgers) {
        return ManagedLedgerInfo.newBuilder().addAllLedgerInfo(List.of(ledgers)).build();
    }

    @Test
    void topicNameFromManagedLedgerName() {
        assertEquals(TOPIC, LedgerDrops.topicName("public/default/persistent/t-partition-0"));
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
        assertEquals(2, drops.size());
        assertEquals(PendingDeletion.LEDGER, drops.get(0).ledgerType());
        assertEquals(PendingDeletion.OFFLOAD_LEDGER, drops.get(1).ledgerType());
        assertEquals("aws-s3", drops.get(1).offload().driverName());
        assertEquals("b", drops.get(1).offload().driverMetadata().get("bucket"));
        var gone = LedgerDrops.droppedBy(TOPIC, list(offloaded(7, 1, 2, true)), list());
        assertEquals(List.of(PendingDeletion.OFFLOAD_LEDGER), gone.stream().map(PendingDeletion::ledgerType).toList());
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

    @Test
    void cursorLedgers() {
        assertEquals(List.of(PendingDeletion.cursorLedger(TOPIC, "sub", 5)),
                LedgerDrops.droppedCursorLedger(TOPIC, "sub", 5, 9));
        assertEquals(List.of(PendingDeletion.cursorLedger(TOPIC, "sub", 5)),
                LedgerDrops.droppedCursorLedger(TOPIC, "sub", 5, -1));
        assertTrue(LedgerDrops.droppedCursorLedger(TOPIC, "sub", 5, 5).isEmpty());
        assertTrue(LedgerDrops.droppedCursorLedger(TOPIC, "sub", -1, 9).isEmpty());
    }

    private static ManagedCursorInfo cursorInfo(long cursorLedger, String... properties) {
        ManagedCursorInfo.Builder b = ManagedCursorInfo.newBuilder().setCursorsLedgerId(cursorLedger);
        for (int i = 0; i < properties.length; i += 2) {
            b.addCursorProperties(StringProperty.newBuilder().setName(properties[i]).setValue(properties[i + 1]));
        }
        return b.build();
    }

    private static final String B1 = "#pulsar.internal.delayed.bucket_10_14";
    private static final String B2 = "#pulsar.internal.delayed.bucket_15_19";

    @Test
    void bucketLedgersAreTheDelayedBucketPropertiesValues() {
        var state = LedgerDrops.CursorLedgers.of(cursorInfo(7, B1, "31", B2, "32", "user", "33",
                "#pulsar.internal.delayed.bucket_x", "not-a-ledger-id"));
        assertEquals(7, state.cursorLedger());
        assertEquals(java.util.Set.of(31L, 32L), state.buckets());
    }

    @Test
    void aCursorWriteDropsItsOldLedgerAndEveryBucketPropertyItRemoves() {
        var before = LedgerDrops.CursorLedgers.of(cursorInfo(7, B1, "31", B2, "32"));
        // The bucket of B1 was deleted: Pulsar removes its property; the cursor ledger stays.
        var after = LedgerDrops.CursorLedgers.of(cursorInfo(7, B2, "32"));
        assertEquals(List.of(PendingDeletion.bucketLedger(TOPIC, "my sub", 31)),
                LedgerDrops.droppedByCursorWrite(TOPIC, "my%20sub", before, after));
        // A new bucket, a mark-delete persisted: nothing dropped.
        var more = LedgerDrops.CursorLedgers.of(cursorInfo(7, B1, "31", B2, "32", "#pulsar.internal.delayed.bucket_20_24",
                "40"));
        assertTrue(LedgerDrops.droppedByCursorWrite(TOPIC, "s", before, more).isEmpty());
        // The same key with another ledger (a snapshot written again): the old ledger is dropped.
        var rewritten = LedgerDrops.CursorLedgers.of(cursorInfo(7, B1, "41", B2, "32"));
        assertEquals(List.of(31L), LedgerDrops.droppedByCursorWrite(TOPIC, "s", before, rewritten).stream()
                .map(PendingDeletion::ledgerId).toList());
        // A cursor ledger switch together with a bucket removal: both.
        var both = LedgerDrops.droppedByCursorWrite(TOPIC, "s", before, LedgerDrops.CursorLedgers.of(cursorInfo(8)));
        assertEquals(List.of(PendingDeletion.cursorLedger(TOPIC, "s", 7), PendingDeletion.bucketLedger(TOPIC, "s", 31),
                PendingDeletion.bucketLedger(TOPIC, "s", 32)), both);
        // A removed cursor drops everything it still names.
        assertEquals(3, LedgerDrops.droppedByCursorWrite(TOPIC, "s", before, LedgerDrops.CursorLedgers.NONE).size());
        assertTrue(LedgerDrops.droppedByCursorWrite(TOPIC, "s", LedgerDrops.CursorLedgers.NONE, before).isEmpty());
    }

    @Test
    void bucketMessagesCarryTheDecodedCursorName() {
        var d = PendingDeletion.bucketLedger(TOPIC, "my sub", 31);
        assertEquals(PendingDeletion.DELAYED_INDEX_BUCKET, d.component());
        assertEquals(PendingDeletion.LEDGER, d.ledgerType());
        assertEquals("my sub", d.cursorName());
    }

    @Test
    void wholeTopic() {
        var drops = LedgerDrops.droppedWithTopic(TOPIC, list(plain(1), offloaded(2, 1, 2, true)));
        assertEquals(2, drops.size());
    }

    @Test
    void aRolloverThatCannotQueueItsDropsKeepsThemListed() {
        var before = list(plain(1), plain(2), offloaded(3, 1, 2, false), plain(4));
        // The broker's memory lost 1 and 2 (a failed trim) and flipped 3's BookKeeper copy; 5 is new.
        var after = list(offloaded(3, 1, 2, true), plain(4), plain(5));
        assertTrue(LedgerDrops.addsLedger(before, after));
        assertTrue(!LedgerDrops.addsLedger(before, list(plain(4))));
        var kept = LedgerDrops.keepListed(before, after);
        assertEquals(List.of(1L, 2L, 3L, 4L, 5L),
                kept.getLedgerInfoList().stream().map(LedgerInfo::getLedgerId).toList());
        assertTrue(!kept.getLedgerInfo(2).getOffloadContext().getBookkeeperDeleted());
        assertTrue(LedgerDrops.droppedBy(TOPIC, before, kept).isEmpty());
    }

    @Test
    void queueNamespaceIsExcluded() {
        var cfg = ExtensionConfig.of(new Properties(), "pulsar://x:1", "http://x:2", null, null);
        assertTrue(cfg.excluded("persistent://pulsar/system/__ledger_deletion-partition-0"));
        assertTrue(cfg.excluded("persistent://pulsar/system/__change_events"));
        assertTrue(!cfg.excluded(TOPIC));
        assertTrue(cfg.excluded("persistent://pulsar/standalone/127.0.0.1:8080/healthcheck"));
        assertTrue(!cfg.excluded("persistent://pulsar/127.0.0.1:8080/healthcheck"));
    }
}
