package org.ledgerdeletion.broker;

import java.util.Map;
import java.util.OptionalLong;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.Supplier;

/**
 * The compacted ledger each loaded topic has now, as its compaction service knows it: what the removal of the
 * topic's {@code __compaction} cursor drops (Pulsar deletes that ledger right after removing the cursor, when the
 * subscription is deleted or the topic is). The compaction services register while their topic is loaded; the
 * metadata store's seam asks before it removes a {@code __compaction} cursor. Shared by one broker's storage and its
 * compaction service factory.
 */
final class CompactedLedgerIndex {
    /** Pulsar's {@code Compactor.COMPACTION_SUBSCRIPTION}: the cursor that names a topic's compacted ledger. */
    static final String COMPACTION_CURSOR = "__compaction";

    private final Map<String, Supplier<OptionalLong>> topics = new ConcurrentHashMap<>();

    void register(String topic, Supplier<OptionalLong> current) {
        topics.put(topic, current);
    }

    void unregister(String topic, Supplier<OptionalLong> current) {
        topics.remove(topic, current);
    }

    /** The compacted ledger {@code topic} has loaded, if its compaction service knows one now. */
    OptionalLong current(String topic) {
        Supplier<OptionalLong> s = topics.get(topic);
        if (s == null) {
            return OptionalLong.empty();
        }
        try {
            return s.get();
        } catch (RuntimeException e) {
            return OptionalLong.empty();
        }
    }
}
