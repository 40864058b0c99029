package org.ledgerdeletion.broker;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import org.apache.bookkeeper.mledger.proto.MLDataFormats.KeyValue;
import org.apache.bookkeeper.mledger.proto.MLDataFormats.ManagedCursorInfo;
import org.apache.bookkeeper.mledger.proto.MLDataFormats.ManagedLedgerInfo;
import org.apache.bookkeeper.mledger.proto.MLDataFormats.ManagedLedgerInfo.LedgerInfo;
import org.apache.bookkeeper.mledger.proto.MLDataFormats.OffloadContext;
import org.apache.bookkeeper.mledger.proto.MLDataFormats.StringProperty;
import org.apache.pulsar.common.naming.TopicName;
import org.apache.pulsar.common.util.Codec;

/**
 * Which ledgers and offloaded copies a metadata write drops: pure functions of the metadata before and
 * after, the one place the extension decides what to queue.
 */
public final class LedgerDrops {

    private LedgerDrops() {
    }

    /** persistent://tenant/ns/topic[-partition-N] from a managed ledger's name (tenant/ns/persistent/topic). */
    public static String topicName(String managedLedgerName) {
        return TopicName.fromPersistenceNamingEncoding(managedLedgerName);
    }

    /**
     * What writing {@code after} over {@code before} drops.
     * <ul>
     *   <li>a ledger no longer listed: its BookKeeper copy (unless already marked deleted after offload) and
     *       its offloaded copy, if it had one;</li>
     *   <li>a ledger still listed whose BookKeeper copy becomes {@code bookkeeperDeleted} (offloaded, lag
     *       passed): its BookKeeper copy;</li>
     *   <li>a ledger still listed whose offload uuid changes (a failed attempt replaced): the old copy.</li>
     * </ul>
     */
    public static List<PendingDeletion> droppedBy(String topic, ManagedLedgerInfo before, ManagedLedgerInfo after) {
        Map<Long, LedgerInfo> now = new HashMap<>();
        for (LedgerInfo li : after.getLedgerInfoList()) {
            now.put(li.getLedgerId(), li);
        }
        List<PendingDeletion> out = new ArrayList<>();
        for (LedgerInfo old : before.getLedgerInfoList()) {
            LedgerInfo kept = now.get(old.getLedgerId());
            OffloadContext oc = old.getOffloadContext();
            if (kept == null) {
                out.addAll(droppedWhole(topic, old));
                continue;
            }
            OffloadContext nc = kept.getOffloadContext();
            if (!oc.getBookkeeperDeleted() && nc.getBookkeeperDeleted()) {
                out.add(PendingDeletion.ledger(topic, old.getLedgerId()));
            }
            if (hasUuid(oc) && (!hasUuid(nc) || nc.getUidMsb() != oc.getUidMsb() || nc.getUidLsb() != oc.getUidLsb())) {
                out.add(PendingDeletion.offloaded(topic, old.getLedgerId(), offload(oc)));
            }
        }
        return out;
    }

    /** Whether writing {@code after} over {@code before} adds a ledger (a rollover, a topic's first ledger). */
    public static boolean addsLedger(ManagedLedgerInfo before, ManagedLedgerInfo after) {
        java.util.Set<Long> old = new java.util.HashSet<>();
        for (LedgerInfo li : before.getLedgerInfoList()) {
            old.add(li.getLedgerId());
        }
        for (LedgerInfo li : after.getLedgerInfoList()) {
            if (!old.contains(li.getLedgerId())) {
                return true;
            }
        }
        return false;
    }

    /**
     * {@code after}, except that every ledger it would drop (or whose copy it would release) stays as
     * {@code before} lists it: what a write that must go ahead (a rollover) writes when the drops could not
     * be queued. Nothing is forgotten, and the write drops nothing.
     */
    public static ManagedLedgerInfo keepListed(ManagedLedgerInfo before, ManagedLedgerInfo after) {
        java.util.TreeMap<Long, LedgerInfo> merged = new java.util.TreeMap<>();
        for (LedgerInfo li : after.getLedgerInfoList()) {
            merged.put(li.getLedgerId(), li);
        }
        for (LedgerInfo old : before.getLedgerInfoList()) {
            LedgerInfo now = merged.get(old.getLedgerId());
            boolean drops = now == null || !droppedBy("persistent://x/y/z", list(old), list(now)).isEmpty();
            if (drops) {
                merged.put(old.getLedgerId(), old);
            }
        }
        return after.toBuilder().clearLedgerInfo().addAllLedgerInfo(merged.values()).build();
    }

    private static ManagedLedgerInfo list(LedgerInfo li) {
        return ManagedLedgerInfo.newBuilder().addLedgerInfo(li).build();
    }

    /** Everything a topic's metadata lists, queued when that metadata is removed (topic deletion). */
    public static List<PendingDeletion> droppedWithTopic(String topic, ManagedLedgerInfo before) {
        List<PendingDeletion> out = new ArrayList<>();
        for (LedgerInfo li : before.getLedgerInfoList()) {
            out.addAll(droppedWhole(topic, li));
        }
        return out;
    }

    /**
     * The cursor property prefix of a delayed-delivery bucket (Pulsar's
     * {@code BucketDelayedDeliveryTracker.DELAYED_BUCKET_KEY_PREFIX}): key {@code <prefix>_<start>_<end>}, value
     * the id of the bucket's snapshot ledger ({@code Bucket.putBucketKeyId}).
     */
    public static final String DELAYED_BUCKET_KEY_PREFIX = "#pulsar.internal.delayed.bucket";

    /** The ledgers a cursor's stored info names: its own ledger (-1: none) and its buckets' snapshot ledgers. */
    public record CursorLedgers(long cursorLedger, Set<Long> buckets) {
        public static final CursorLedgers NONE = new CursorLedgers(-1, Set.of());

        public CursorLedgers {
            buckets = Set.copyOf(buckets);
        }

        public static CursorLedgers of(ManagedCursorInfo info) {
            Set<Long> buckets = new TreeSet<>();
            for (StringProperty p : info.getCursorPropertiesList()) {
                if (p.getName().startsWith(DELAYED_BUCKET_KEY_PREFIX)) {
                    try {
                        buckets.add(Long.parseLong(p.getValue()));
                    } catch (NumberFormatException e) {
                        // Not a ledger id: Pulsar never reads it as one either (it fails that bucket).
                    }
                }
            }
            return new CursorLedgers(info.getCursorsLedgerId(), buckets);
        }
    }

    /**
     * What writing a cursor's info ({@code after}; {@link CursorLedgers#NONE} when the cursor is removed) over
     * {@code before} drops: its old ledger when it switches (or goes), and every bucket snapshot ledger no
     * longer named by a bucket property. {@code cursor} is the cursor's znode name; a bucket ledger's message
     * carries the subscription name decoded, as Pulsar writes it in that ledger's own metadata.
     */
    public static List<PendingDeletion> droppedByCursorWrite(String topic, String cursor, CursorLedgers before,
                                                             CursorLedgers after) {
        List<PendingDeletion> out = new ArrayList<>(droppedCursorLedger(topic, cursor, before.cursorLedger(),
                after.cursorLedger()));
        for (long id : new TreeSet<>(before.buckets())) {
            if (!after.buckets().contains(id)) {
                out.add(PendingDeletion.bucketLedger(topic, Codec.decode(cursor), id));
            }
        }
        return out;
    }

    /** A cursor's ledger replaced ({@code after} another id or -1) or its cursor removed ({@code after} -1). */
    public static List<PendingDeletion> droppedCursorLedger(String topic, String cursor, long before, long after) {
        if (before < 0 || before == after) {
            return List.of();
        }
        return List.of(PendingDeletion.cursorLedger(topic, cursor, before));
    }

    private static List<PendingDeletion> droppedWhole(String topic, LedgerInfo li) {
        List<PendingDeletion> out = new ArrayList<>(2);
        OffloadContext oc = li.getOffloadContext();
        if (!oc.getBookkeeperDeleted()) {
            out.add(PendingDeletion.ledger(topic, li.getLedgerId()));
        }
        if (hasUuid(oc)) {
            out.add(PendingDeletion.offloaded(topic, li.getLedgerId(), offload(oc)));
        }
        return out;
    }

    private static boolean hasUuid(OffloadContext oc) {
        return oc.hasUidMsb() && oc.hasUidLsb();
    }

    static PendingDeletion.Offload offload(OffloadContext oc) {
        Map<String, String> meta = new LinkedHashMap<>();
        String driver = "";
        if (oc.hasDriverMetadata()) {
            driver = oc.getDriverMetadata().getName();
            for (KeyValue kv : oc.getDriverMetadata().getPropertiesList()) {
                meta.put(kv.getKey(), kv.getValue());
            }
        }
        return new PendingDeletion.Offload(oc.getUidMsb(), oc.getUidLsb(), driver, meta);
    }
}
