package org.ledgerdeletion.broker;

import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.function.Supplier;
import org.apache.pulsar.common.util.Codec;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A schema's deletion, mark before update: the ledgers its locator ({@code /schemas/<schema id>}) lists are made
 * durable on the queue before Pulsar's {@code BookkeeperSchemaStorage} deletes them and then the locator.
 *
 * <p>Pulsar deletes each ledger first and the locator last, and a ledger delete that fails is only logged: the
 * locator goes anyway and that ledger is left behind, named by nothing. Queued first, the worker deletes it (and
 * finds the others gone). If the marks cannot be made durable in time the deletion goes ahead as on a stock broker,
 * what it drops unmarked (logged, counted in {@code ledger_deletion_broker_unmarked_total}): a schema is deleted with
 * its topic and by an administrator, and failing it would make both answer errors for as long as the queue is down.
 */
public final class SchemaLedgers {
    private static final Logger log = LoggerFactory.getLogger(SchemaLedgers.class);

    private final Marker marker;
    private final ExtensionConfig config;

    SchemaLedgers(Marker marker, ExtensionConfig config) {
        this.marker = marker;
        this.config = config;
    }

    /**
     * Runs {@code deletion} of schema {@code schemaId} ({@code tenant/ns/topic}) once the ledgers its locator lists
     * ({@code ledgers}) are queued, or their marks have failed. Completes as the deletion does.
     */
    public <T> CompletableFuture<T> delete(String schemaId, CompletableFuture<List<Long>> ledgers,
                                           Supplier<CompletableFuture<T>> deletion) {
        if (schemaId == null) {
            return run(deletion);
        }
        String topic = topicOf(schemaId);
        if (config.excludedTopic(topic)) {
            return run(deletion);
        }
        CompletableFuture<Void> marked = ledgers.handle((ids, readError) -> {
            if (readError != null) {
                log.warn("[ledger-deletion] schema {}: its locator could not be read ({}); deleted unmarked, scan finds"
                        + " what it drops", schemaId, readError.toString());
                return CompletableFuture.<Void>completedFuture(null);
            }
            if (ids == null || ids.isEmpty()) {
                return CompletableFuture.<Void>completedFuture(null);
            }
            List<PendingDeletion> drops = ids.stream().distinct()
                    .map(id -> PendingDeletion.schemaLedger(topic, schemaId, id)).toList();
            Metrics.WRITES_HELD.inc();
            log.info("[ledger-deletion] schema {} deleted with {} ledgers: marking first {}", schemaId, drops.size(),
                    drops);
            return mark(drops).handle((v, e) -> {
                if (e != null) {
                    drops.forEach(d -> Metrics.UNMARKED.labels(d.ledgerType().name()).inc());
                    log.warn("[ledger-deletion] schema {} deleted without its pending deletions ({}): left to scan:"
                            + " {}", schemaId, e.toString(), drops);
                }
                return (Void) null;
            });
        }).thenCompose(f -> f);
        return marked.thenCompose(v -> run(deletion));
    }

    /**
     * The topic a schema id names, as Pulsar names it: the id ({@code TopicName.getSchemaName()}:
     * {@code tenant/ns/<local name>}) carries the local name URL-encoded ({@code a%3Ab} for {@code a:b}), which
     * the topic's own name does not. The worker checks the message's topic against the ledger's schema id.
     */
    static String topicOf(String schemaId) {
        int slash = schemaId.lastIndexOf('/');
        return "persistent://" + schemaId.substring(0, slash + 1) + Codec.decode(schemaId.substring(slash + 1));
    }

    private CompletableFuture<Void> mark(List<PendingDeletion> drops) {
        try {
            CompletableFuture<Void> f = marker.mark(drops);
            return f != null ? f : CompletableFuture.failedFuture(new IllegalStateException("no mark future"));
        } catch (Throwable e) {
            return CompletableFuture.failedFuture(e);
        }
    }

    private static <T> CompletableFuture<T> run(Supplier<CompletableFuture<T>> deletion) {
        try {
            return deletion.get();
        } catch (Throwable e) {
            return CompletableFuture.failedFuture(e);
        }
    }
}
