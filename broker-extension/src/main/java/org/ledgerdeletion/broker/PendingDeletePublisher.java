package org.ledgerdeletion.broker;

import java.net.InetAddress;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Function;
import org.apache.pulsar.PulsarVersion;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Publishes pending deletions to the queue topic and says when they are durable (the send is acknowledged: the
 * broker persisted the message). Never blocks a caller's thread: the metadata write waits on the returned future,
 * and the blocking set-up runs on this class's own thread.
 *
 * <p>The queue topic lives on the same brokers, so at start-up (broker not serving yet), while a queue partition
 * moves, or while the queue is down, sends fail: each is retried with back-off until {@code maxWaitMs}, counted
 * and logged; past it the future fails. Once a mark has given up, the queue is taken as down: further marks fail
 * at once, except one probe every {@link #PROBE_INTERVAL_NANOS}, until a send succeeds. After {@link #close()}
 * every pending and new mark fails at once.
 */
final class PendingDeletePublisher implements Marker, AutoCloseable {
    private static final Logger log = LoggerFactory.getLogger(PendingDeletePublisher.class);
    // A queue outage must not hold every topic's metadata mutex (rollovers wait on it, and producers on
    // rollovers) for the whole wait limit: one probe per interval waits and retries, the rest fail at once.
    static final long PROBE_INTERVAL_NANOS = TimeUnit.SECONDS.toNanos(5);
    private static final long MAX_BACKOFF_MS = 5000;

    private final ExtensionConfig config;
    private final ScheduledExecutorService scheduler;
    private final QueueSender sender;
    private final Optional<MarkSigner> signer;
    private final Map<String, String> payloadProperties;
    private final Set<CompletableFuture<Void>> pending = ConcurrentHashMap.newKeySet();
    private final AtomicLong failuresLogged = new AtomicLong();
    private final AtomicLong warmUpFailures = new AtomicLong();
    private final AtomicLong lastProbeNanos = new AtomicLong(System.nanoTime());
    private volatile boolean healthy = true;
    private volatile boolean closing;

    /** The publisher of a broker: its sender publishes through the broker's own listener. */
    static PendingDeletePublisher forBroker(ExtensionConfig config, Optional<MarkSigner> signer) {
        return new PendingDeletePublisher(config, signer, scheduler -> new PulsarQueueSender(config, scheduler));
    }

    /** {@code senderFactory} gets this publisher's thread, on which the sender may block (topic set-up). */
    PendingDeletePublisher(ExtensionConfig config, Optional<MarkSigner> signer,
                           Function<ScheduledExecutorService, QueueSender> senderFactory) {
        this.config = config;
        this.signer = signer;
        this.scheduler = Executors.newSingleThreadScheduledExecutor(r -> {
            Thread t = new Thread(r, "ledger-deletion-publisher");
            t.setDaemon(true);
            return t;
        });
        this.sender = senderFactory.apply(scheduler);
        String host;
        try {
            host = InetAddress.getLocalHost().getHostName();
        } catch (Exception e) {
            host = "unknown";
        }
        // Informational, inside the payload: who queued it, and on which Pulsar (the worker counts decoded
        // deletions by it, so a rolling upgrade shows both lines' brokers being read). What the worker trusts is
        // the signature.
        this.payloadProperties = Map.of("source", "broker-extension", "broker", host,
                "pulsar_version", pulsarVersion());
    }

    /** The running broker's Pulsar version, as Pulsar reports its own; "unknown" when it cannot say. */
    static String pulsarVersion() {
        try {
            String version = PulsarVersion.getVersion();
            return version == null || version.isBlank() ? "unknown" : version;
        } catch (RuntimeException | LinkageError e) {
            // Informational only: never a reason for the broker's managed-ledger storage not to start.
            return "unknown";
        }
    }

    ExtensionConfig config() {
        return config;
    }

    /** Make the queue topic and the producer ready in the background, so the first deletion finds them. */
    void start() {
        scheduler.execute(this::warmUp);
    }

    private void warmUp() {
        if (closing) {
            return;
        }
        sender.ready().whenComplete((p, e) -> {
            if (e == null) {
                log.info("[ledger-deletion] queue {} ready (send delay {} ms, wait limit {} ms, signed: {})",
                        config.pendingTopic(), config.sendDelayMs(), config.maxWaitMs(), signer.isPresent());
            } else if (!closing) {
                if (warmUpFailures.getAndIncrement() % 12 == 0) {
                    log.warn("[ledger-deletion] queue {} not ready yet (retrying every 5 s): {}",
                            config.pendingTopic(), e.toString());
                }
                try {
                    scheduler.schedule(this::warmUp, 5, TimeUnit.SECONDS);
                } catch (RuntimeException closed) {
                    // Closed meanwhile.
                }
            }
        });
    }

    @Override
    public CompletableFuture<Void> mark(List<PendingDeletion> items) {
        try {
            return publish(items);
        } catch (Throwable e) {
            // A defect or a race with close(): the mark fails, it never leaves its metadata write waiting.
            return CompletableFuture.failedFuture(e);
        }
    }

    private CompletableFuture<Void> publish(List<PendingDeletion> items) {
        if (items.isEmpty()) {
            return CompletableFuture.completedFuture(null);
        }
        if (!healthy && !closing) {
            long now = System.nanoTime();
            long last = lastProbeNanos.get();
            if (now - last < PROBE_INTERVAL_NANOS || !lastProbeNanos.compareAndSet(last, now)) {
                Metrics.FAST_FAILS.inc();
                return CompletableFuture.failedFuture(new IllegalStateException(
                        "queue unavailable (a mark gave up; next probe within 5 s): failing fast"));
            }
            log.info("[ledger-deletion] probing the queue with {} pending deletions", items.size());
        }
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(config.maxWaitMs());
        CompletableFuture<?>[] all = new CompletableFuture<?>[items.size()];
        for (int i = 0; i < all.length; i++) {
            all[i] = sendWithRetry(items.get(i), deadline);
        }
        // The retries end at the deadline and each send at its timeout; this bound holds even if a send's
        // future never completes.
        return CompletableFuture.allOf(all)
                .orTimeout(config.maxWaitMs() + config.sendTimeoutMs() + 1000, TimeUnit.MILLISECONDS);
    }

    private CompletableFuture<Void> sendWithRetry(PendingDeletion item, long deadline) {
        CompletableFuture<Void> result = new CompletableFuture<>();
        pending.add(result);
        result.whenComplete((v, e) -> pending.remove(result));
        if (closing) {
            result.completeExceptionally(new IllegalStateException("the broker's managed-ledger storage is closed"));
            return result;
        }
        byte[] payload = PendingDeleteCodec.encode(item, payloadProperties);
        Map<String, String> properties = signer.map(s -> Map.of(MarkSigner.PROPERTY, s.sign(payload)))
                .orElse(Map.of());
        attempt(item, payload, properties, deadline, 1, result);
        return result;
    }

    private void attempt(PendingDeletion item, byte[] payload, Map<String, String> properties, long deadline, int n,
                         CompletableFuture<Void> result) {
        if (result.isDone()) {
            return;
        }
        if (closing) {
            result.completeExceptionally(new IllegalStateException("the broker's managed-ledger storage is closed"));
            return;
        }
        CompletableFuture<?> sent;
        try {
            sent = sender.send(payload, properties);
        } catch (Throwable e) {
            sent = CompletableFuture.failedFuture(e);
        }
        sent.whenComplete((id, e) -> {
            try {
                sent(item, payload, properties, deadline, n, result, id, e);
            } catch (Throwable defect) {
                result.completeExceptionally(defect);
            }
        });
    }

    private void sent(PendingDeletion item, byte[] payload, Map<String, String> properties, long deadline, int n,
                      CompletableFuture<Void> result, Object id, Throwable e) {
        if (e == null) {
            if (!healthy) {
                healthy = true;
                log.info("[ledger-deletion] queue {} available again", config.pendingTopic());
            }
            Metrics.MARKED.labels(item.ledgerType().name()).inc();
            log.info("[ledger-deletion] pending deletion durable: {} as {}", item, id);
            result.complete(null);
            return;
        }
        Metrics.SEND_FAILURES.inc();
        if (closing || System.nanoTime() > deadline) {
            log.warn("[ledger-deletion] giving up on pending deletion {} after {} attempts: {}", item, n, e.toString());
            if (!closing && healthy) {
                healthy = false;
                lastProbeNanos.set(System.nanoTime());
                log.warn("[ledger-deletion] queue {} unavailable: marks fail at once until a probe succeeds",
                        config.pendingTopic());
            }
            result.completeExceptionally(e);
            return;
        }
        long backoffMs = Math.min(MAX_BACKOFF_MS, 200L * (1L << Math.min(n - 1, 5)));
        if (n == 1 || failuresLogged.incrementAndGet() % 20 == 0) {
            log.warn("[ledger-deletion] pending deletion {} not sent (attempt {}), metadata write waits, retrying in"
                    + " {} ms: {}", item, n, backoffMs, e.toString());
        }
        scheduler.schedule(() -> attempt(item, payload, properties, deadline, n + 1, result), backoffMs,
                TimeUnit.MILLISECONDS);
    }

    /** Fails every pending and future mark, and stops the sender. */
    @Override
    public void close() {
        closing = true;
        for (CompletableFuture<Void> f : pending) {
            f.completeExceptionally(new IllegalStateException("the broker's managed-ledger storage is closed"));
        }
        scheduler.shutdownNow();
        sender.close();
    }
}
