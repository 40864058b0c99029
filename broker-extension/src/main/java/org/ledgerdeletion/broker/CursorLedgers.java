package org.ledgerdeletion.broker;

import java.util.Set;
import java.util.TreeSet;

/**
 * The ledgers a cursor's stored {@code ManagedCursorInfo} names: its own ledger (-1: none) and its
 * delayed-delivery buckets' snapshot ledgers. Read from the info's serialized bytes: ManagedCursorInfo
 * {cursorsLedgerId = 1, cursorProperties = 8}, StringProperty {name = 1, value = 2}.
 */
record CursorLedgers(long cursorLedger, Set<Long> buckets) {
    static final CursorLedgers NONE = new CursorLedgers(-1, Set.of());

    /**
     * The cursor property prefix of a delayed-delivery bucket (Pulsar's
     * {@code BucketDelayedDeliveryTracker.DELAYED_BUCKET_KEY_PREFIX}): key {@code <prefix>_<start>_<end>}, value the
     * id of the bucket's snapshot ledger ({@code Bucket.putBucketKeyId}).
     */
    static final String DELAYED_BUCKET_KEY_PREFIX = "#pulsar.internal.delayed.bucket";

    CursorLedgers {
        buckets = Set.copyOf(buckets);
    }

    static CursorLedgers parse(byte[] managedCursorInfo) {
        long cursorLedger = -1;
        Set<Long> buckets = new TreeSet<>();
        ProtoWire.Reader r = new ProtoWire.Reader(managedCursorInfo);
        while (r.next()) {
            switch (r.field()) {
                case 1 -> cursorLedger = r.int64();
                case 8 -> {
                    var property = r.stringPair();
                    if (property.getKey().startsWith(DELAYED_BUCKET_KEY_PREFIX)) {
                        try {
                            buckets.add(Long.parseLong(property.getValue()));
                        } catch (NumberFormatException e) {
                            // Not a ledger id: Pulsar never reads it as one either (it fails that bucket).
                        }
                    }
                }
                default -> r.skip();
            }
        }
        return new CursorLedgers(cursorLedger, buckets);
    }
}
