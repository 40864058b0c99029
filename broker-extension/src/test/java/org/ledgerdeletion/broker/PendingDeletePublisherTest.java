package org.ledgerdeletion.broker;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.io.DecoderFactory;
import org.apache.avro.util.Utf8;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/** {@link PendingDeletePublisher} in the JVM with a fake sender: retries, deadlines, closing, signatures. */
class PendingDeletePublisherTest {
    private static final PendingDeletion ITEM = PendingDeletion.ledger("persistent://public/default/t", 42);

    /** Records what it sends; fails the first {@code failures} sends; {@code never}: leaves them pending. */
    static final class FakeSender implements QueueSender {
        final List<byte[]> payloads = new CopyOnWriteArrayList<>();
        final List<Map<String, String>> properties = new CopyOnWriteArrayList<>();
        final AtomicInteger attempts = new AtomicInteger();
        volatile int failures;
        volatile boolean never;
        volatile boolean throwing;
        volatile boolean closed;

        @Override
        public CompletableFuture<?> ready() {
            return CompletableFuture.completedFuture(null);
        }

        @Override
        public CompletableFuture<?> send(byte[] payload, Map<String, String> props) {
            attempts.incrementAndGet();
            if (throwing) {
                throw new IllegalStateException("the producer's own bug");
            }
            if (never) {
                return new CompletableFuture<>();
            }
            if (failures > 0) {
                failures--;
                return CompletableFuture.failedFuture(new IOException("broker unavailable"));
            }
            payloads.add(payload);
            properties.add(props);
            return CompletableFuture.completedFuture("1:2:3");
        }

        @Override
        public void close() {
            closed = true;
        }
    }

    private final FakeSender sender = new FakeSender();
    private PendingDeletePublisher publisher;

    private PendingDeletePublisher publisher(double maxWaitSeconds, Optional<MarkSigner> signer) {
        Properties p = new Properties();
        p.setProperty("ledgerDeletionMaxWaitSeconds", String.valueOf(maxWaitSeconds));
        p.setProperty("ledgerDeletionSendTimeoutSeconds", "0.2");
        ExtensionConfig config = ExtensionConfig.of(p, "pulsar://x:1", "http://x:2", null, null);
        publisher = new PendingDeletePublisher(config, signer, scheduler -> sender);
        return publisher;
    }

    @AfterEach
    void close() {
        if (publisher != null) {
            publisher.close();
        }
    }

    private static boolean durable(CompletableFuture<Void> f) throws Exception {
        try {
            f.get(10, TimeUnit.SECONDS);
            return true;
        } catch (ExecutionException e) {
            return false;
        }
    }

    @Test
    void everyMessageIsSignedOverItsPayloadAsSent() throws Exception {
        MarkSigner signer = new MarkSigner("test-key".getBytes(StandardCharsets.UTF_8));
        assertTrue(durable(publisher(5, Optional.of(signer)).mark(List.of(ITEM, PendingDeletion.ledger("t", 43)))));
        assertEquals(2, sender.payloads.size());
        for (int i = 0; i < 2; i++) {
            byte[] payload = sender.payloads.get(i);
            assertEquals(Map.of(MarkSigner.PROPERTY, signer.sign(payload)), sender.properties.get(i));
            assertTrue(sender.properties.get(i).get(MarkSigner.PROPERTY).matches("hmac-sha256:[0-9a-f]{64}"));
        }
        // The payload is the worker's record, with the informational source inside it, and the Pulsar version of
        // the broker that wrote it: the classes on this run's classpath (surefire's pulsar.version: 4.0.8, or
        // 4.2.4 and 5.0.0-M1 with the profiles).
        GenericRecord r = new GenericDatumReader<GenericRecord>(PendingDeleteCodec.SCHEMA)
                .read(null, DecoderFactory.get().binaryDecoder(sender.payloads.get(0), null));
        assertEquals(42L, r.get("ledgerId"));
        Map<?, ?> payloadProperties = (Map<?, ?>) r.get("properties");
        assertEquals("broker-extension", payloadProperties.get(new Utf8("source")).toString());
        String pulsarVersion = System.getProperty("pulsar.version");
        assertNotNull(pulsarVersion, "surefire sets pulsar.version");
        assertEquals(pulsarVersion, PendingDeletePublisher.pulsarVersion());
        assertEquals(pulsarVersion, payloadProperties.get(new Utf8("pulsar_version")).toString());
    }

    @Test
    void withoutAKeyNothingIsSigned() throws Exception {
        assertTrue(durable(publisher(5, Optional.empty()).mark(List.of(ITEM))));
        assertEquals(Map.of(), sender.properties.get(0));
    }

    @Test
    void failedSendsAreRetriedUntilDurable() throws Exception {
        sender.failures = 2;
        assertTrue(durable(publisher(10, Optional.empty()).mark(List.of(ITEM))));
        assertEquals(3, sender.attempts.get());
    }

    @Test
    void aMarkGivesUpAtItsDeadlineThenFailsFastUntilAProbe() throws Exception {
        sender.failures = Integer.MAX_VALUE;
        PendingDeletePublisher p = publisher(0.5, Optional.empty());
        long t0 = System.nanoTime();
        assertFalse(durable(p.mark(List.of(ITEM))));
        assertTrue(System.nanoTime() - t0 >= TimeUnit.MILLISECONDS.toNanos(500));
        int attempts = sender.attempts.get();
        double fastFails = Metrics.FAST_FAILS.get();
        assertFalse(durable(p.mark(List.of(ITEM))));
        assertEquals(attempts, sender.attempts.get(), "failed fast: no send tried");
        assertEquals(fastFails + 1, Metrics.FAST_FAILS.get());
    }

    @Test
    void aSendThatNeverEndsStillEndsTheMark() throws Exception {
        sender.never = true;
        assertFalse(durable(publisher(0.3, Optional.empty()).mark(List.of(ITEM))));
    }

    @Test
    void aSenderThatThrowsFailsTheMarkAtItsDeadline() throws Exception {
        sender.throwing = true;
        assertFalse(durable(publisher(0.3, Optional.empty()).mark(List.of(ITEM))));
    }

    @Test
    void closingFailsPendingAndLaterMarksAtOnce() throws Exception {
        sender.failures = Integer.MAX_VALUE;
        PendingDeletePublisher p = publisher(60, Optional.empty());
        CompletableFuture<Void> pending = p.mark(List.of(ITEM));
        p.close();
        assertThrows(ExecutionException.class, () -> pending.get(1, TimeUnit.SECONDS));
        CompletableFuture<Void> later = p.mark(List.of(ITEM));
        assertThrows(ExecutionException.class, () -> later.get(1, TimeUnit.SECONDS));
        assertTrue(sender.closed);
    }

    @Test
    void nothingToMarkIsDurableAtOnce() throws Exception {
        assertTrue(durable(publisher(5, Optional.empty()).mark(List.of())));
        assertEquals(0, sender.attempts.get());
    }
}
