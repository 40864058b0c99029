package org.ledgerdeletion.broker;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import org.apache.pulsar.broker.PulsarService;
import org.apache.pulsar.compaction.PulsarCompactionServiceFactory;
import org.apache.pulsar.compaction.TopicCompactionService;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Pulsar's compaction service factory (PIP-278's {@code compactionServiceFactoryClassName}), whose topic compaction
 * services queue a topic's compacted ledger before a compaction replaces it. Named in broker.conf:
 * {@code compactionServiceFactoryClassName=org.ledgerdeletion.broker.LedgerDeletionCompactionServiceFactory}, beside
 * {@code managedLedgerStorageClassName=org.ledgerdeletion.broker.LedgerDeletionStorage}, whose queue (and, in defer
 * mode, registry) it uses. Without that storage, or for the queue's own namespace and version-1 topic names, it is
 * Pulsar's own factory unchanged.
 */
public class LedgerDeletionCompactionServiceFactory extends PulsarCompactionServiceFactory {
    private static final Logger log = LoggerFactory.getLogger(LedgerDeletionCompactionServiceFactory.class);

    private volatile ExtensionConfig config;
    private volatile CompactedLedgers compactedLedgers;
    private volatile CompactedLedgerIndex index;

    @Override
    public CompletableFuture<Void> initialize(PulsarService pulsarService) {
        return super.initialize(pulsarService).thenRun(() -> {
            if (pulsarService.getManagedLedgerStorage() instanceof LedgerDeletionStorage storage
                    && storage.publisher().isPresent()) {
                PendingDeletePublisher publisher = storage.publisher().get();
                config = publisher.config();
                compactedLedgers = new CompactedLedgers(publisher, storage.deferred().orElse(null));
                index = storage.compactedLedgerIndex();
                log.info("[ledger-deletion] compacted ledgers queued before a compaction replaces them{}",
                        storage.deferred().isPresent() ? " (defer mode: the worker deletes them)" : "");
            } else {
                log.warn("[ledger-deletion] {} without {} (ledgerDeletionEnabled=true) as the managed-ledger storage:"
                        + " compacted ledgers are not queued", getClass().getName(),
                        LedgerDeletionStorage.class.getName());
            }
        });
    }

    @Override
    public CompletableFuture<TopicCompactionService> newTopicCompactionService(String topic) {
        CompactedLedgers queue = compactedLedgers;
        if (queue == null || topic == null || config.excludedTopic(topic)) {
            return super.newTopicCompactionService(topic);
        }
        return CompletableFuture.completedFuture(new QueueingTopicCompactionService(topic,
                getPulsarService().getBookKeeperClient(), () -> {
                    try {
                        return getCompactor();
                    } catch (Throwable e) {
                        throw new CompletionException(e);
                    }
                }, queue, index));
    }
}
