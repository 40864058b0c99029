package org.ledgerdeletion.broker;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Properties;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;

/** A schema's deletion queues its locator's ledgers first, and goes ahead whatever the queue answers. */
class SchemaLedgersTest {
    private final FakeMarker marker = new FakeMarker();
    private final SchemaLedgers schemas = new SchemaLedgers(marker,
            ExtensionConfig.of(new Properties(), "pulsar://x:1", "http://x:2", null, null));
    private final AtomicInteger deletions = new AtomicInteger();

    private CompletableFuture<String> deletion() {
        deletions.incrementAndGet();
        return CompletableFuture.completedFuture("deleted");
    }

    private static CompletableFuture<List<Long>> ledgers(Long... ids) {
        return CompletableFuture.completedFuture(List.of(ids));
    }

    @Test
    void theLocatorsLedgersAreQueuedBeforeTheDeletion() throws Exception {
        CompletableFuture<Void> durable = new CompletableFuture<>();
        marker.answer = d -> durable;
        var f = schemas.delete("public/default/t", ledgers(5L, 9L, 9L), this::deletion);
        assertEquals(List.of(PendingDeletion.schemaLedger("persistent://public/default/t", "public/default/t", 5),
                PendingDeletion.schemaLedger("persistent://public/default/t", "public/default/t", 9)),
                marker.marked());
        Thread.sleep(50);
        assertEquals(0, deletions.get(), "the deletion waits for the marks");
        durable.complete(null);
        assertEquals("deleted", f.get(5, TimeUnit.SECONDS));
    }

    @Test
    void theMessageNamesTheTopicAsPulsarDoesNotItsEncodedSchemaId() throws Exception {
        // getSchemaName() encodes the local name (URLEncoder): the topic keeps it as it is.
        schemas.delete("public/default/a%3Ab", ledgers(5L), this::deletion).get(5, TimeUnit.SECONDS);
        schemas.delete("public/default/k%3Dv+w", ledgers(6L), this::deletion).get(5, TimeUnit.SECONDS);
        schemas.delete("public/default/%C3%A9t%C3%A9", ledgers(7L), this::deletion).get(5, TimeUnit.SECONDS);
        assertEquals(List.of(
                PendingDeletion.schemaLedger("persistent://public/default/a:b", "public/default/a%3Ab", 5),
                PendingDeletion.schemaLedger("persistent://public/default/k=v w", "public/default/k%3Dv+w", 6),
                PendingDeletion.schemaLedger("persistent://public/default/\u00e9t\u00e9",
                        "public/default/%C3%A9t%C3%A9", 7)), marker.marked());
    }

    @Test
    void aDeletionWhoseMarksFailGoesAheadCounted() throws Exception {
        marker.failing();
        double unmarked = Metrics.UNMARKED.labels("LEDGER").get();
        assertEquals("deleted", schemas.delete("public/default/t", ledgers(5L), this::deletion)
                .get(5, TimeUnit.SECONDS));
        assertEquals(unmarked + 1, Metrics.UNMARKED.labels("LEDGER").get());
    }

    @Test
    void nothingIsQueuedForTheQueuesNamespaceNoLedgersOrAnUnreadableLocator() throws Exception {
        schemas.delete("pulsar/system/__ledger_deletion", ledgers(5L), this::deletion).get(5, TimeUnit.SECONDS);
        schemas.delete("public/default/t", ledgers(), this::deletion).get(5, TimeUnit.SECONDS);
        schemas.delete("public/default/t", CompletableFuture.failedFuture(new IllegalStateException("store down")),
                this::deletion).get(5, TimeUnit.SECONDS);
        schemas.delete("pulsar/standalone/ns/t", ledgers(5L), this::deletion).get(5, TimeUnit.SECONDS);
        assertEquals(List.of(), marker.marked());
        assertEquals(4, deletions.get());
    }

    @Test
    void aDeletionThatThrowsFailsItsFuture() {
        var f = schemas.delete("public/default/t", ledgers(), () -> {
            throw new IllegalStateException("closed");
        });
        assertTrue(f.isCompletedExceptionally());
    }
}
