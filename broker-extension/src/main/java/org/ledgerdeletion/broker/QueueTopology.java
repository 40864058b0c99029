package org.ledgerdeletion.broker;

import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.admin.PulsarAdmin;
import org.apache.pulsar.client.admin.PulsarAdminException;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.PulsarClientException;
import org.apache.pulsar.common.naming.TopicName;
import org.apache.pulsar.common.protocol.schema.PostSchemaPayload;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The pending topic in place before the first message: its namespace, the partitioned topic, the worker's Avro
 * schema (the worker's text, so the same schema version) and the worker's subscription (without one, retention
 * could drop messages no one read). Blocking admin calls: run on the publisher's own thread. Idempotent, and
 * concurrent brokers' (or the worker's) 409s are fine.
 */
final class QueueTopology implements AutoCloseable {
    private static final Logger log = LoggerFactory.getLogger(QueueTopology.class);

    private final ExtensionConfig config;
    private PulsarAdmin admin;
    private volatile boolean done;

    QueueTopology(ExtensionConfig config) {
        this.config = config;
    }

    synchronized void ensure() {
        if (done) {
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
            TopicName name = TopicName.get(topic);
            String ns = name.getNamespace();
            if (!admin.namespaces().getNamespaces(name.getTenant()).contains(ns)) {
                ignoreConflict(() -> admin.namespaces().createNamespace(ns));
            }
            if (partitions(topic) == 0) {
                ignoreConflict(() -> admin.topics().createPartitionedTopic(topic, config.partitions()));
            }
            admin.schemas().createSchema(topic, new PostSchemaPayload("AVRO", PendingDeleteCodec.SCHEMA_JSON,
                    Map.of()));
            if (!admin.topics().getSubscriptions(topic).contains(config.subscription())) {
                ignoreConflict(() -> admin.topics().createSubscription(topic, config.subscription(),
                        MessageId.earliest));
            }
            done = true;
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

    @Override
    public synchronized void close() {
        if (admin != null) {
            admin.close();
            admin = null;
        }
    }
}
