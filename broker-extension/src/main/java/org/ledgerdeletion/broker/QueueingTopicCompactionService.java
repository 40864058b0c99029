package org.ledgerdeletion.broker;

import java.io.IOException;
import java.util.OptionalLong;
import java.util.concurrent.CompletableFuture;
import java.util.function.Supplier;
import org.apache.bookkeeper.client.BookKeeper;
import org.apache.pulsar.compaction.CompactedTopicContext;
import org.apache.pulsar.compaction.Compactor;
import org.apache.pulsar.compaction.PulsarTopicCompactionService;

/**
 * Pulsar's own topic compaction service, except that {@link #compact()} queues the topic's current compacted
 * ledger first ({@link CompactedLedgers}). A subclass, not a wrapper: the broker checks for
 * {@code PulsarTopicCompactionService} to give the {@code __compaction} subscription its compacted-topic handling
 * and to read compacted entries. Only {@code compact()} is overridden, whose signature every line shares (the
 * others changed between Pulsar 4.0 and 5.0 and are inherited from the running line).
 */
final class QueueingTopicCompactionService extends PulsarTopicCompactionService {
    private final String topic;
    private final CompactedLedgers compactedLedgers;
    private final CompactedLedgerIndex index;
    private final Supplier<OptionalLong> loaded = this::loadedCompactedLedger;

    QueueingTopicCompactionService(String topic, BookKeeper bookKeeper, Supplier<Compactor> compactor,
                                   CompactedLedgers compactedLedgers, CompactedLedgerIndex index) {
        super(topic, bookKeeper, compactor);
        this.topic = topic;
        this.compactedLedgers = compactedLedgers;
        this.index = index;
        index.register(topic, loaded);
    }

    @Override
    public CompletableFuture<Void> compact() {
        return compactedLedgers.compact(topic, currentCompactedLedger(), super::compact);
    }

    @Override
    public void close() throws IOException {
        index.unregister(topic, loaded);
        super.close();
    }

    /** The compacted ledger loaded now, if it is known without waiting (for the removal of the topic's cursor). */
    private OptionalLong loadedCompactedLedger() {
        CompletableFuture<OptionalLong> f = currentCompactedLedger();
        return f.isDone() && !f.isCompletedExceptionally() ? f.join() : OptionalLong.empty();
    }

    /** The compacted ledger the topic has loaded: what a committed compaction replaces and Pulsar then deletes. */
    private CompletableFuture<OptionalLong> currentCompactedLedger() {
        CompletableFuture<CompactedTopicContext> context = getCompactedTopic().getCompactedTopicContextFuture();
        if (context == null) {
            return CompletableFuture.completedFuture(OptionalLong.empty());
        }
        return context.thenApply(c -> c == null || c.getLedger() == null ? OptionalLong.empty()
                : OptionalLong.of(c.getLedger().getId()));
    }
}
