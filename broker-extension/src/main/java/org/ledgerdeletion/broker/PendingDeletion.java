package org.ledgerdeletion.broker;

import java.util.Map;
import java.util.Objects;
import java.util.UUID;

/**
 * One PendingDeleteLedgerInfo message (the worker's {@code worker/formats/message.py} schema): a ledger, or an
 * offloaded copy of one, that a metadata write is about to drop.
 *
 * @param topicName full topic name (a partition's own name for a partition)
 * @param component what owns the ledger
 * @param cursorName the cursor owning a MANAGED_CURSOR ledger (its znode name) or a DELAYED_INDEX_BUCKET ledger
 *                   (the subscription name, as the bucket ledger's own metadata records it), else null
 * @param ledgerType which copy
 * @param offload the offload attempt (uuid, driver) of an OFFLOAD_LEDGER, else null
 */
public record PendingDeletion(String topicName, LedgerComponent component, String cursorName, LedgerType ledgerType,
                              long ledgerId, Offload offload) {

    /** The offload context the worker verifies an offloaded copy by. */
    public record Offload(long uidMsb, long uidLsb, String driverName, Map<String, String> driverMetadata) {
        public Offload {
            Objects.requireNonNull(driverName);
            driverMetadata = Map.copyOf(driverMetadata);
        }

        boolean sameAttempt(Offload other) {
            return other != null && other.uidMsb == uidMsb && other.uidLsb == uidLsb;
        }
    }

    public PendingDeletion {
        Objects.requireNonNull(topicName);
        Objects.requireNonNull(component);
        Objects.requireNonNull(ledgerType);
        if (component.namesCursor() && (cursorName == null || cursorName.isEmpty())) {
            throw new IllegalArgumentException(component + " needs a cursor name");
        }
        if (ledgerType == LedgerType.OFFLOAD_LEDGER && offload == null) {
            throw new IllegalArgumentException("OFFLOAD_LEDGER needs its offload context");
        }
    }

    public static PendingDeletion ledger(String topic, long ledgerId) {
        return new PendingDeletion(topic, LedgerComponent.MANAGED_LEDGER, null, LedgerType.LEDGER, ledgerId, null);
    }

    public static PendingDeletion offloaded(String topic, long ledgerId, Offload offload) {
        return new PendingDeletion(topic, LedgerComponent.MANAGED_LEDGER, null, LedgerType.OFFLOAD_LEDGER, ledgerId,
                offload);
    }

    public static PendingDeletion cursorLedger(String topic, String cursor, long ledgerId) {
        return new PendingDeletion(topic, LedgerComponent.MANAGED_CURSOR, cursor, LedgerType.LEDGER, ledgerId, null);
    }

    /** A delayed-delivery bucket snapshot ledger ({@code BookkeeperBucketSnapshotStorage}) of a subscription. */
    public static PendingDeletion bucketLedger(String topic, String subscription, long ledgerId) {
        return new PendingDeletion(topic, LedgerComponent.DELAYED_INDEX_BUCKET, subscription, LedgerType.LEDGER,
                ledgerId, null);
    }

    @Override
    public String toString() {
        return (component == LedgerComponent.DELAYED_INDEX_BUCKET ? "bucket " : "") + ledgerType + ":" + ledgerId
                + " of " + topicName + (cursorName == null ? "" : " cursor " + cursorName)
                + (offload == null ? "" : " uuid " + new UUID(offload.uidMsb, offload.uidLsb));
    }
}
