package org.ledgerdeletion.broker;

import java.net.InetAddress;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.pulsar.client.admin.PulsarAdmin;
import org.apache.pulsar.client.admin.PulsarAdminException;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.PulsarClientException;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.common.naming.TopicName;
import org.apache.pulsar.common.protocol.schema.PostSchemaPayload;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Publishes pending deletions to the queue topic and says when they are durable (the send is
 * acknowledged: the broker persisted the message). Never blocks a caller's thread: the metadata write
 * waits on the returned future, and the blocking admin calls run on this class's own thread.
 *
 * <p>The queue topic lives on the same brokers, so at start-up (broker not serving yet), while a queue
 * partition moves, or while the queue is down, sends fail: each is retried with back-off until
 * {@code maxWaitMs}, counted and logged; past it the future fails and so does the metadata write (its
 * ledgers stay listed, nothing is forgotten; the broker trims again later). At shutdown pending and new
 * marks fail at once, so closing topics never waits for a queue that is going away.
 */
public final class PendingDeletePublisher implements AutoCloseable {
    private static final Logger log = LoggerFactory.getLogger(PendingDeletePublisher.class);

    private final ExtensionConfig config;
    private final ScheduledExecutorService scheduler;
    private final Set<CompletableFuture<Void>> pending = ConcurrentHashMap.newKeySet();
    private final Map<String, String> properties;
    private final AtomicLong failuresLogged = new AtomicLong();
    private final AtomicLong warmUpFailures = new AtomicLong();
    // Healthy until a mark gives up; then marks fail at once (their writes fail, ledgers stay listed) except
    // one probe every PROBE_INTERVAL that waits and retries as usual: a queue outage must not hold every
    // topic's metadata mutex (rollovers wait on it, and producers on rollovers) for the whole wait limit.
    private static final long PROBE_INTERVAL_NANOS = TimeUnit.SECONDS.toNanos(5);
    private volatile boolean healthy = true;
    private final AtomicLong lastProbeNanos = new AtomicLong(System.nanoTime());
    private volatile boolean closing;
    private volatile boolean topologyDone;
    private CompletableFuture<Producer<byte[]>> producer;
    private PulsarClient client;
    private PulsarAdmin admin;

    public PendingDeletePublisher(ExtensionConfig config) {
        this.config = config;
        this.scheduler = Executors.newSingleThreadScheduledExecutor(r -> {
            Thread t = new Thread(r, "ledger-deletion-publisher");
            t.setDaemon(true);
            return t;
        });
        String host;
        try {
            host = InetAddress.getLocalHost().getHostName();
        } catch (Exception e) {
            host = "unknown";
        }
        this.properties = Map.of("source", "broker-extension", "broker", host);
    }

    public ExtensionConfig config() {
        return config;
    }

    /** Make the queue topic and the producer ready in the background, so the first deletion finds them. */
    public void start() {
        scheduler.execute(this::warmUp);
    }

    private void warmUp() {
        if (closing) {
            return;
        }
        producer().whenComplete((p, e) -> {
            if (e == null) {
                log.info("[ledger-deletion] queue {} ready (send delay {} ms, wait limit {} ms)",
                        config.pendingTopic(), config.sendDelayMs(), config.maxWaitMs());
            } else if (!closing) {
                if (warmUpFailures.getAndIncrement() % 12 == 0) {
                    log.warn("[ledger-deletion] queue {} not ready yet (retrying every 5 s): {}",
                            config.pendingTopic(), e.toString());
                }
                scheduler.schedule(this::warmUp, 5, TimeUnit.SECONDS);
            }
        });
    }

    /** Completes once every one of {@code items} is durable on the queue; fails if one could not be made so. */
    public CompletableFuture<Void> publish(List<PendingDeletion> items) {
        if (items.isEmpty()) {
            return CompletableFuture.completedFuture(null);
        }
        if (!healthy) {
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
        return CompletableFuture.allOf(all);
    }

    private CompletableFuture<Void> sendWithRetry(PendingDeletion item, long deadline) {
        CompletableFuture<Void> result = new CompletableFuture<>();
        pending.add(result);
        result.whenComplete((v, e) -> pending.remove(result));
        if (closing) {
            result.completeExceptionally(new IllegalStateException("broker shutting down"));
            return result;
        }
        attempt(item, PendingDeleteCodec.encode(item, properties), deadline, 1, result);
        return result;
    }

    private void attempt(PendingDeletion item, byte[] payload, long deadline, int n, CompletableFuture<Void> result) {
        if (result.isDone()) {
            return;
        }
        if (closing) {
            result.completeExceptionally(new IllegalStateException("broker shutting down"));
            return;
        }
        producer().thenCompose(p -> {
            var m = p.newMessage().value(payload);
            if (config.sendDelayMs() > 0) {
                m = m.deliverAfter(config.sendDelayMs(), TimeUnit.MILLISECONDS);
            }
            return m.sendAsync();
        }).whenComplete((MessageId id, Throwable e) -> {
            if (e == null) {
                if (!healthy) {
                    healthy = true;
                    log.info("[ledger-deletion] queue {} available again", config.pendingTopic());
                }
                Metrics.MARKED.labels(item.ledgerType()).inc();
                log.info("[ledger-deletion] pending deletion durable: {} as {}", item, id);
                result.complete(null);
                return;
            }
            Metrics.SEND_FAILURES.inc();
            resetProducerIfBroken();
            if (closing || System.nanoTime() > deadline) {
                log.warn("[ledger-deletion] giving up on pending deletion {} after {} attempts: {}", item, n,
                        e.toString());
                if (!closing && healthy) {
                    healthy = false;
                    lastProbeNanos.set(System.nanoTime());
                    log.warn("[ledger-deletion] queue {} unavailable: metadata writes that drop ledgers fail at"
                            + " once (ledgers stay listed) until a probe succeeds", config.pendingTopic());
                }
                result.completeExceptionally(e);
                return;
            }
            long backoffMs = Math.min(5000L, 200L * (1L << Math.min(n - 1, 5)));
            if (n == 1 || failuresLogged.incrementAndGet() % 20 == 0) {
                log.warn("[ledger-deletion] pending deletion {} not sent (attempt {}), metadata write waits,"
                        + " retrying in {} ms: {}", item, n, backoffMs, e.toString());
            }
            try {
                scheduler.schedule(() -> attempt(item, payload, deadline, n + 1, result), backoffMs,
                        TimeUnit.MILLISECONDS);
            } catch (Exception rejected) {
                result.completeExceptionally(e);
            }
        });
    }

    private synchronized void resetProducerIfBroken() {
        if (producer != null && producer.isCompletedExceptionally()) {
            producer = null;
        }
    }

    private synchronized CompletableFuture<Producer<byte[]>> producer() {
        if (producer == null || producer.isCompletedExceptionally()) {
            producer = CompletableFuture.supplyAsync(() -> {
                ensureTopology();
                return clientOrCreate();
            }, scheduler).thenCompose(c -> c.newProducer(Schema.AUTO_PRODUCE_BYTES())
                    .topic(config.pendingTopic())
                    // One message per ledger: a batch would fail several ledgers together, and the delivery
                    // delay is per message.
                    .enableBatching(false)
                    .blockIfQueueFull(false)
                    .sendTimeout((int) config.sendTimeoutMs(), TimeUnit.MILLISECONDS)
                    .createAsync());
        }
        return producer;
    }

    private synchronized PulsarClient clientOrCreate() {
        if (client == null) {
            try {
                var b = PulsarClient.builder()
                        .serviceUrl(config.serviceUrl())
                        .operationTimeout((int) config.sendTimeoutMs(), TimeUnit.MILLISECONDS);
                if (!config.authPlugin().isEmpty()) {
                    b = b.authentication(config.authPlugin(), config.authParams());
                }
                client = b.build();
            } catch (Exception e) {
                throw new IllegalStateException("cannot create the Pulsar client: " + e, e);
            }
        }
        return client;
    }

    /**
     * The pending topic (partitioned), its Avro schema (the worker's text, so the same version) and the
     * worker's subscription (without one, retention could drop messages) before the first message. Runs
     * on this class's thread (blocking admin calls); idempotent, and concurrent brokers' 409s are fine.
     */
    private void ensureTopology() {
        if (topologyDone) {
            return;
        }
        try {
            if (admin == null) {
                var b = PulsarAdmin.builder().serviceHttpUrl(config.webServiceUrl())
                        .connectionTimeout(5, TimeUnit.SECONDS).readTimeout(30, TimeUnit.SECONDS);
                if (!config.authPlugin().isEmpty()) {
                    b = b.authentication(config.authPlugin(), config.authParams());
                }
                admin = b.build();
            }
            String topic = config.pendingTopic();
            String ns = TopicName.get(topic).getNamespace();
            if (!admin.namespaces().getNamespaces(TopicName.get(topic).getTenant()).contains(ns)) {
                ignoreConflict(() -> admin.namespaces().createNamespace(ns));
            }
            if (partitions(topic) == 0) {
                ignoreConflict(() -> admin.topics().createPartitionedTopic(topic, config.partitions()));
            }
            PostSchemaPayload schema = new PostSchemaPayload("AVRO", PendingDeleteCodec.SCHEMA_JSON, Map.of());
            admin.schemas().createSchema(topic, schema);
            if (!admin.topics().getSubscriptions(topic).contains(config.subscription())) {
                ignoreConflict(() -> admin.topics().createSubscription(topic, config.subscription(),
                        MessageId.earliest));
            }
            topologyDone = true;
            log.info("[ledger-deletion] topology in place: {} with subscription {}", topic, config.subscription());
        } catch (PulsarAdminException | PulsarClientException | RuntimeException e) {
            throw new IllegalStateException("queue topology not in place: " + e, e);
        }
    }

    private int partitions(String topic) throws PulsarAdminException {
        try {
            return admin.topics().getPartitionedTopicMetadata(topic).partitions;
        } catch (PulsarAdminException.NotFoundException e) {
            return 0;  // 4.0 answers 404 for a topic that does not exist yet
        }
    }

    private interface AdminCall {
        void run() throws PulsarAdminException;
    }

    private static void ignoreConflict(AdminCall call) throws PulsarAdminException {
        try {
            call.run();
        } catch (PulsarAdminException.ConflictException e) {
            // Another broker (or the worker) made it meanwhile.
        }
    }

    /** Stop retrying and fail every pending and future mark: the broker is shutting down. */
    public void beginClose() {
        if (closing) {
            return;
        }
        closing = true;
        for (CompletableFuture<Void> f : pending) {
            f.completeExceptionally(new IllegalStateException("broker shutting down"));
        }
    }

    @Override
    public void close() {
        beginClose();
        scheduler.shutdownNow();
        synchronized (this) {
            if (client != null) {
                client.closeAsync();
            }
            if (admin != null) {
                admin.close();
            }
        }
    }
}
