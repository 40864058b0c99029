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
 * @param schemaId the schema id ({@code tenant/ns/topic}) owning a SCHEMA_STORAGE ledger, else null
 * @param ledgerType which copy
 * @param offload the offload attempt (uuid, driver) of an OFFLOAD_LEDGER, else null
 */
public record PendingDeletion(String topicName, LedgerComponent component, String cursorName, String schemaId,
                              LedgerType ledgerType, long ledgerId, Offload offload) {

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
        if (component == LedgerComponent.SCHEMA_STORAGE && (schemaId == null || schemaId.isEmpty())) {
            throw new IllegalArgumentException("SCHEMA_STORAGE needs a schema id");
        }
        if (ledgerType == LedgerType.OFFLOAD_LEDGER && offload == null) {
            throw new IllegalArgumentException("OFFLOAD_LEDGER needs its offload context");
        }
    }

    public static PendingDeletion ledger(String topic, long ledgerId) {
        return new PendingDeletion(topic, LedgerComponent.MANAGED_LEDGER, null, null, LedgerType.LEDGER, ledgerId,
                null);
    }

    public static PendingDeletion offloaded(String topic, long ledgerId, Offload offload) {
        return new PendingDeletion(topic, LedgerComponent.MANAGED_LEDGER, null, null, LedgerType.OFFLOAD_LEDGER,
                ledgerId, offload);
    }

    public static PendingDeletion cursorLedger(String topic, String cursor, long ledgerId) {
        return new PendingDeletion(topic, LedgerComponent.MANAGED_CURSOR, cursor, null, LedgerType.LEDGER, ledgerId,
                null);
    }

    /** A delayed-delivery bucket snapshot ledger ({@code BookkeeperBucketSnapshotStorage}) of a subscription. */
    public static PendingDeletion bucketLedger(String topic, String subscription, long ledgerId) {
        return new PendingDeletion(topic, LedgerComponent.DELAYED_INDEX_BUCKET, subscription, null,
                LedgerType.LEDGER, ledgerId, null);
    }

    /** A topic's compacted ledger ({@code Compactor}'s output, named by its {@code __compaction} cursor). */
    public static PendingDeletion compactedLedger(String topic, long ledgerId) {
        return new PendingDeletion(topic, LedgerComponent.COMPACTED_LEDGER, null, null, LedgerType.LEDGER, ledgerId,
                null);
    }

    /** A ledger of the schema registry ({@code BookkeeperSchemaStorage}) holding a version of {@code schemaId}. */
    public static PendingDeletion schemaLedger(String topic, String schemaId, long ledgerId) {
        return new PendingDeletion(topic, LedgerComponent.SCHEMA_STORAGE, null, schemaId, LedgerType.LEDGER, ledgerId,
                null);
    }

    @Override
    public String toString() {
        String kind = switch (component) {
            case DELAYED_INDEX_BUCKET -> "bucket ";
            case COMPACTED_LEDGER -> "compacted ";
            case SCHEMA_STORAGE -> "schema ";
            default -> "";
        };
        return kind + ledgerType + ":" + ledgerId
                + " of " + topicName + (cursorName == null ? "" : " cursor " + cursorName)
                + (schemaId == null ? "" : " schema " + schemaId)
                + (offload == null ? "" : " uuid " + new UUID(offload.uidMsb, offload.uidLsb));
    }
}
