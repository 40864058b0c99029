package org.ledgerdeletion.broker;

import java.util.ArrayList;
import java.util.List;
import java.util.SortedMap;
import java.util.TreeMap;
import java.util.TreeSet;
import org.apache.pulsar.common.util.Codec;

/**
 * Which ledgers and offloaded copies a metadata write drops: pure functions of the metadata before and after,
 * the one place the extension decides what to queue.
 */
public final class LedgerDrops {

    private LedgerDrops() {
    }

    /**
     * What writing {@code after} over {@code before} drops.
     * <ul>
     *   <li>a ledger no longer listed: its BookKeeper copy (unless already marked deleted after offload) and its
     *       offloaded copy, if it had one;</li>
     *   <li>a ledger still listed whose BookKeeper copy becomes {@code bookkeeperDeleted} (offloaded, lag passed):
     *       its BookKeeper copy;</li>
     *   <li>a ledger still listed whose offload uuid changes (a failed attempt replaced): the old copy.</li>
     * </ul>
     */
    static List<PendingDeletion> droppedBy(String topic, LedgerList before, LedgerList after) {
        List<PendingDeletion> out = new ArrayList<>();
        for (LedgerList.Ledger old : before.ledgers().values()) {
            out.addAll(dropped(topic, old, after.ledgers().get(old.id())));
        }
        return out;
    }

    /** What replacing {@code old} with {@code now} (null: no longer listed) drops. */
    private static List<PendingDeletion> dropped(String topic, LedgerList.Ledger old, LedgerList.Ledger now) {
        List<PendingDeletion> out = new ArrayList<>(2);
        if (!old.bookkeeperDeleted() && (now == null || now.bookkeeperDeleted())) {
            out.add(PendingDeletion.ledger(topic, old.id()));
        }
        if (old.offload() != null && (now == null || !old.offload().sameAttempt(now.offload()))) {
            out.add(PendingDeletion.offloaded(topic, old.id(), old.offload()));
        }
        return out;
    }

    /** Whether writing {@code after} over {@code before} adds a ledger (a rollover, a topic's first ledger). */
    static boolean addsLedger(LedgerList before, LedgerList after) {
        return !before.ledgers().keySet().containsAll(after.ledgers().keySet());
    }

    /**
     * The bytes of {@code after}, except that every ledger with data it would drop (or whose copy it would
     * release) stays as {@code before} lists it: what a write that must go ahead (a rollover) writes when the drops
     * could not be queued. Nothing with data is forgotten. An empty ledger it drops is let go: Pulsar deletes the
     * empty ledgers it drops itself once the write lands (a topic's load, a rollover of an empty ledger), whatever
     * the list says, so listing it again would name a ledger BookKeeper no longer has.
     */
    static byte[] keepListed(LedgerList before, LedgerList after) {
        SortedMap<Long, LedgerList.Ledger> merged = new TreeMap<>(after.ledgers());
        for (LedgerList.Ledger old : before.ledgers().values()) {
            boolean lettingGo = old.empty() && !merged.containsKey(old.id());
            if (!lettingGo && !dropped("", old, merged.get(old.id())).isEmpty()) {
                merged.put(old.id(), old);
            }
        }
        return after.withLedgers(merged);
    }

    /** Everything a topic's metadata lists, queued when that metadata is removed (topic deletion). */
    static List<PendingDeletion> droppedWithTopic(String topic, LedgerList before) {
        List<PendingDeletion> out = new ArrayList<>();
        for (LedgerList.Ledger l : before.ledgers().values()) {
            out.addAll(dropped(topic, l, null));
        }
        return out;
    }

    /**
     * What writing a cursor's info ({@code after}; {@link CursorLedgers#NONE} when the cursor is removed) over
     * {@code before} drops: its old ledger when it switches (or goes), and every bucket snapshot ledger no longer
     * named by a bucket property. {@code cursor} is the cursor's znode name; a bucket ledger's message carries the
     * subscription name decoded, as Pulsar writes it in that ledger's own metadata.
     */
    static List<PendingDeletion> droppedByCursorWrite(String topic, String cursor, CursorLedgers before,
                                                      CursorLedgers after) {
        List<PendingDeletion> out = new ArrayList<>();
        if (before.cursorLedger() >= 0 && before.cursorLedger() != after.cursorLedger()) {
            out.add(PendingDeletion.cursorLedger(topic, cursor, before.cursorLedger()));
        }
        for (long id : new TreeSet<>(before.buckets())) {
            if (!after.buckets().contains(id)) {
                out.add(PendingDeletion.bucketLedger(topic, Codec.decode(cursor), id));
            }
        }
        return out;
    }
}
