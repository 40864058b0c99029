package org.ledgerdeletion.broker;

import java.util.Map;
import java.util.Objects;

/**
 * One PendingDeleteLedgerInfo message (worker/message.py's schema): a ledger, or an offloaded copy of one,
 * that a metadata write is about to drop.
 *
 * @param topicName full topic name (a partition's own name for a partition)
 * @param component MANAGED_LEDGER, MANAGED_CURSOR or DELAYED_INDEX_BUCKET (the schema's LedgerComponent symbols)
 * @param cursorName the cursor owning a MANAGED_CURSOR ledger (its znode name) or a DELAYED_INDEX_BUCKET ledger
 *                   (the subscription name, as the bucket ledger's own metadata records it), else null
 * @param ledgerType LEDGER (the BookKeeper copy) or OFFLOAD_LEDGER (the tiered-storage copy)
 * @param offload the offload attempt (uuid, driver) of an OFFLOAD_LEDGER, else null
 */
public record PendingDeletion(String topicName, String component, String cursorName, String ledgerType,
                              long ledgerId, Offload offload) {

    public static final String MANAGED_LEDGER = "MANAGED_LEDGER";
    public static final String MANAGED_CURSOR = "MANAGED_CURSOR";
    public static final String DELAYED_INDEX_BUCKET = "DELAYED_INDEX_BUCKET";
    public static final String LEDGER = "LEDGER";
    public static final String OFFLOAD_LEDGER = "OFFLOAD_LEDGER";

    /** The offload context the worker verifies an offloaded copy by. */
    public record Offload(long uidMsb, long uidLsb, String driverName, Map<String, String> driverMetadata) {
        public Offload {
            Objects.requireNonNull(driverName);
            driverMetadata = Map.copyOf(driverMetadata);
        }
    }

    public PendingDeletion {
        Objects.requireNonNull(topicName);
        Objects.requireNonNull(component);
        Objects.requireNonNull(ledgerType);
        if ((MANAGED_CURSOR.equals(component) || DELAYED_INDEX_BUCKET.equals(component))
                && (cursorName == null || cursorName.isEmpty())) {
            throw new IllegalArgumentException(component + " needs a cursor name");
        }
        if (OFFLOAD_LEDGER.equals(ledgerType) && offload == null) {
            throw new IllegalArgumentException("OFFLOAD_LEDGER needs its offload context");
        }
    }

    public static PendingDeletion ledger(String topic, long ledgerId) {
        return new PendingDeletion(topic, MANAGED_LEDGER, null, LEDGER, ledgerId, null);
    }

    public static PendingDeletion offloaded(String topic, long ledgerId, Offload offload) {
        return new PendingDeletion(topic, MANAGED_LEDGER, null, OFFLOAD_LEDGER, ledgerId, offload);
    }

    public static PendingDeletion cursorLedger(String topic, String cursor, long ledgerId) {
        return new PendingDeletion(topic, MANAGED_CURSOR, cursor, LEDGER, ledgerId, null);
    }

    /** A delayed-delivery bucket snapshot ledger ({@code BookkeeperBucketSnapshotStorage}) of a subscription. */
    public static PendingDeletion bucketLedger(String topic, String subscription, long ledgerId) {
        return new PendingDeletion(topic, DELAYED_INDEX_BUCKET, subscription, LEDGER, ledgerId, null);
    }

    @Override
    public String toString() {
        return (DELAYED_INDEX_BUCKET.equals(component) ? "bucket " : "") + ledgerType + ":" + ledgerId + " of " + topicName
                + (cursorName == null ? "" : " cursor " + cursorName)
                + (offload == null ? "" : " uuid " + new java.util.UUID(offload.uidMsb, offload.uidLsb));
    }
}
