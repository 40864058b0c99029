package org.ledgerdeletion.broker;

import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Executor;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.Schema;

/**
 * The pending topic's producer, through the broker's own listener: {@code AUTO_PRODUCE_BYTES} against the schema
 * the worker registers, batching off (one message per ledger: a batch would fail several ledgers together, and
 * the delivery delay is per message), {@code deliverAfter} = the send delay. A producer that failed is made
 * again on the next send, after the topology is in place.
 */
final class PulsarQueueSender implements QueueSender {
    private final ExtensionConfig config;
    private final QueueTopology topology;
    private final Executor blocking;
    private CompletableFuture<Producer<byte[]>> producer;
    private PulsarClient client;

    /** {@code blocking} runs the topology's admin calls and the client's creation. */
    PulsarQueueSender(ExtensionConfig config, Executor blocking) {
        this.config = config;
        this.topology = new QueueTopology(config);
        this.blocking = blocking;
    }

    @Override
    public CompletableFuture<?> ready() {
        return producer();
    }

    @Override
    public CompletableFuture<?> send(byte[] payload, Map<String, String> properties) {
        return producer().thenCompose(p -> {
            var m = p.newMessage().value(payload).properties(properties);
            if (config.sendDelayMs() > 0) {
                m = m.deliverAfter(config.sendDelayMs(), TimeUnit.MILLISECONDS);
            }
            return m.sendAsync();
        }).whenComplete((id, e) -> {
            if (e != null) {
                forgetBrokenProducer();
            }
        });
    }

    private synchronized void forgetBrokenProducer() {
        if (producer != null && producer.isCompletedExceptionally()) {
            producer = null;
        }
    }

    private synchronized CompletableFuture<Producer<byte[]>> producer() {
        if (producer == null || producer.isCompletedExceptionally()) {
            producer = CompletableFuture.supplyAsync(() -> {
                topology.ensure();
                return client();
            }, blocking).thenCompose(c -> c.newProducer(Schema.AUTO_PRODUCE_BYTES())
                    .topic(config.pendingTopic())
                    .enableBatching(false)
                    .blockIfQueueFull(false)
                    .sendTimeout((int) config.sendTimeoutMs(), TimeUnit.MILLISECONDS)
                    .createAsync());
        }
        return producer;
    }

    private synchronized PulsarClient client() {
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

    @Override
    public synchronized void close() {
        if (client != null) {
            client.closeAsync();
        }
        topology.close();
    }
}
